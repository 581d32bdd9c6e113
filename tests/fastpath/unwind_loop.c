/* SPDX-License-Identifier: MIT */
/*
 * unwind_loop.c - the program whose stack captures test_unwind_budget.sh counts. Run with
 * USLAB_DEBUG=U,unwind-budget: its one cache is tracked (a stack at each allocation and free).
 * From a call chain 12 deep it allocates and frees n objects, each capture 16 of the program's
 * frames (the tracks' depth) after uslab's own, after one round that fills the unwinder's memo.
 */
#include "uslab.h"

#include <stdio.h>
#include <stdlib.h>

static uslab_cache_t *cache;

static __attribute__((noinline)) int chain(int depth, long n)
{
    if (depth > 0) {
        int r = chain(depth - 1, n);
        __asm__ volatile("" : "+r"(r)); /* no tail call */
        return r;
    }
    for (long i = 0; i < n; i++) {
        void *p = uslab_cache_alloc(cache);
        if (!p)
            return 1;
        uslab_cache_free(cache, p);
    }
    return 0;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 10;
    cache = uslab_cache_create("unwind-budget", 64, 0, NULL, NULL, NULL, NULL, 0);
    if (!cache || chain(12, 1) || chain(12, n)) {
        fprintf(stderr, "FAIL: no cache or no object\n");
        return 1;
    }
    uslab_cache_destroy(cache);
    printf("ok\n");
    return 0;
}
