/* SPDX-License-Identifier: MIT */
/*
 * walk_loop.c - the program whose uslab_reap calls test_walk_budget.sh counts. It creates
 * `made` caches and destroys all but the last, so that one has a high id and the ids below
 * it are free, then checks that a reap reaches it (its slabs go back), then reaps `n`
 * times. A walk over all caches (the reap, every purger pass, every fork of a threaded
 * process) must cost what the ids in use cost, not the whole id table (design §5).
 */
#include "uslab.h"

#include <stdio.h>
#include <stdlib.h>

static void *objs[1000];

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 10;
    long made = argc > 2 ? atol(argv[2]) : 2000;
    uslab_cache_t **caches = calloc((size_t)made, sizeof *caches);
    if (!caches)
        return 1;
    for (long i = 0; i < made; i++) {
        char name[32];
        snprintf(name, sizeof name, "walk-%ld", i);
        if (!(caches[i] = uslab_cache_create(name, 64, 0, NULL, NULL, NULL, NULL, 0))) {
            fprintf(stderr, "FAIL: cache %ld not made\n", i);
            return 1;
        }
    }
    for (long i = 0; i < made - 1; i++)
        uslab_cache_destroy(caches[i]);
    uslab_cache_t *top = caches[made - 1];
    for (int i = 0; i < 1000; i++)
        if (!(objs[i] = uslab_cache_alloc(top))) {
            fprintf(stderr, "FAIL: no object\n");
            return 1;
        }
    for (int i = 0; i < 1000; i++)
        uslab_cache_free(top, objs[i]);
    struct uslab_cache_stats st;
    uslab_cache_stats(top, &st);
    if (st.slabs == 0) {
        fprintf(stderr, "FAIL: the last cache holds no slab before the reap\n");
        return 1;
    }
    uslab_reap();
    uslab_cache_stats(top, &st);
    if (st.slabs != 0 || st.cached_objects != 0) {
        fprintf(stderr, "FAIL: the reap did not reach the last cache (%zu slabs, %zu cached)\n",
                st.slabs, st.cached_objects);
        return 1;
    }
    for (long i = 0; i < n; i++)
        uslab_reap();
    uslab_cache_destroy(top);
    free(caches);
    printf("ok\n");
    return 0;
}
