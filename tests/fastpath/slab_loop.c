/* SPDX-License-Identifier: MIT */
/*
 * slab_loop.c - the program whose slab-layer instructions test_slab_budget.sh counts:
 * `rounds` rounds of allocating 20,000 objects of a 48-byte cache, freeing them in an
 * order, and reaping the cache, so that every object leaves its slab (usi_slab_take) and
 * goes back to it (usi_slab_put) once a round. Orders: `fifo`, as they were handed out (a
 * program's teardown of what it built, a collector's sweep); `scattered`, a fixed
 * permutation (a hash table's teardown). Prints "ok" once every object was checked.
 */
#include "uslab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OBJECTS 20000

static void *objs[OBJECTS];

int main(int argc, char **argv)
{
    long rounds = argc > 1 ? atol(argv[1]) : 2;
    int scattered = argc > 2 && strcmp(argv[2], "scattered") == 0;
    uslab_cache_t *c = uslab_cache_create("slab-loop", 48, 0, NULL, NULL, NULL, NULL, 0);
    if (!c)
        return 1;
    for (long r = 0; r < rounds; r++) {
        for (long i = 0; i < OBJECTS; i++) {
            if (!(objs[i] = uslab_cache_alloc(c))) {
                fprintf(stderr, "FAIL: no object\n");
                return 1;
            }
            memset(objs[i], (int)(i & 0xff), 48);
        }
        for (long i = 0; i < OBJECTS; i++) {
            long k = scattered ? (i * 7919) % OBJECTS : i; /* 7919 is prime to 20,000 */
            const unsigned char *p = objs[k];
            if (p[0] != (unsigned char)(k & 0xff) || p[47] != (unsigned char)(k & 0xff)) {
                fprintf(stderr, "FAIL: object %ld overwritten\n", k);
                return 1;
            }
            uslab_cache_free(c, objs[k]);
        }
        uslab_cache_reap(c);
    }
    uslab_cache_destroy(c);
    puts("ok");
    return 0;
}
