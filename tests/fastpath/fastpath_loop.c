/* SPDX-License-Identifier: MIT */
/*
 * fastpath_loop.c - the program whose instructions test_fastpath_budget.sh counts: after a
 * warm-up, `n` small malloc+free pairs (each block's malloc_usable_size asked between),
 * then `n` uslab_cache_alloc+free pairs. Linked against libuslab (for the cache API) and
 * run under LD_PRELOAD of libuslab-preload so that malloc/free are uslab's. The volatile sink keeps
 * the compiler from dropping the calls. With a third argument `selfref`, each malloc block is freed
 * holding its own address in its first two words, as an empty list head at the start of a struct
 * does (INIT_LIST_HEAD after list_del_init): free must take its fast path for it too. With
 * `locked`, the process first locks its memory (mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT)),
 * as daemons and real-time programs do: free's fast path must run there too (until session 55 every
 * free took the slow path under MCL_FUTURE: 183 instructions a pair, not 54). Exits 3 when
 * the kernel refuses the lock. With `cxx`, the pairs are C++'s operator new (`_Znwm`) and sized
 * delete (`_ZdlPvm`), found with dlsym: a C++ program allocates every node and string that way.
 * With `aligned`, each round is a posix_memalign of 64-byte alignment and an aligned_alloc of
 * 32, each freed.
 */
#include "uslab.h"

#include <dlfcn.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static void *volatile sink;

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000;
    size_t size = argc > 2 ? (size_t)atol(argv[2]) : 32;
    int selfref = argc > 3 && strcmp(argv[3], "selfref") == 0;
    void *(*op_new)(size_t) = NULL;
    void (*op_delete)(void *, size_t) = NULL;
    if (argc > 3 && strcmp(argv[3], "cxx") == 0) {
        *(void **)&op_new = dlsym(RTLD_DEFAULT, "_Znwm");
        *(void **)&op_delete = dlsym(RTLD_DEFAULT, "_ZdlPvm");
        if (!op_new || !op_delete) {
            fprintf(stderr, "fastpath_loop: no operator new or delete\n");
            return 4;
        }
    }
    if (argc > 3 && strcmp(argv[3], "locked") == 0 &&
        mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT) != 0) {
        perror("fastpath_loop: mlockall");
        return 3;
    }
    uslab_cache_t *c = uslab_cache_create("fastpath", 48, 0, NULL, NULL, NULL, NULL, 0);
    if (!c)
        return 1;
    for (int i = 0; i < 1000; i++) { /* warm up: thread cache and magazines exist */
        sink = malloc(size);
        free(sink);
        sink = uslab_cache_alloc(c);
        uslab_cache_free(c, sink);
    }
    for (long i = 0; op_new && i < n; i++) {
        sink = op_new(size);
        op_delete(sink, size);
    }
    int aligned = argc > 3 && strcmp(argv[3], "aligned") == 0;
    for (long i = 0; aligned && i < n; i++) {
        void *p = NULL;
        if (posix_memalign(&p, 64, size) != 0)
            return 2;
        sink = p;
        free(p);
        sink = aligned_alloc(32, size);
        free(sink);
    }
    for (long i = 0; !op_new && !aligned && i < n; i++) {
        void **p = malloc(size);
        if (selfref)
            p[0] = p[1] = p;
        sink = p;
        if (malloc_usable_size(p) < size) /* what redis asks of every block it frees */
            return 2;
        free(p);
    }
    for (long i = 0; i < n; i++) {
        sink = uslab_cache_alloc(c);
        uslab_cache_free(c, sink);
    }
    uslab_cache_destroy(c);
    printf("ok\n");
    return 0;
}
