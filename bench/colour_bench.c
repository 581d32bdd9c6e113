/* SPDX-License-Identifier: MIT */
/*
 * colour_bench - where slab colouring should matter (Bonwick 1994 §4.1; issue 13): an
 * object cache whose slabs are all full, and a loop that touches the objects with the same
 * index in every slab together, as a program does that walks parallel arrays of records
 * (object i of every slab, then i + 1, ...). Slabs are aligned to 64 KiB, so without
 * colouring those objects share their low 16 address bits and fall into the same sets of
 * every cache level indexed by them; with colouring, successive slabs start their objects
 * 64 bytes further on.
 *
 * Output: ns_per_touch (median over rounds), and the slabs' colours seen.
 * Options: --size 1000 --slabs 64 --rounds 100 --nocolour 0|1 --words 1 (words written per
 * object touch, from its start)
 */
#include "common.h"

#include <uslab.h>

int main(int argc, char **argv)
{
    long size = bench_opt_long(argc, argv, "size", 1000);
    long slabs = bench_opt_long(argc, argv, "slabs", 64);
    long rounds = bench_opt_long(argc, argv, "rounds", 100);
    long nocolour = bench_opt_long(argc, argv, "nocolour", 0);
    long words = bench_opt_long(argc, argv, "words", 1);
    if (size < 8 || slabs < 1 || rounds < 1 || words < 1 || words * 8 > size)
        return 2;
    printf("benchmark=colour\nsize=%ld\nslabs=%ld\nrounds=%ld\nnocolour=%ld\nwords=%ld\n", size,
           slabs, rounds, nocolour, words);
    uslab_cache_t *c =
        uslab_cache_create("colour", (size_t)size, 0, NULL, NULL, NULL, NULL,
                           USLAB_CACHE_NOMAGAZINE | (nocolour ? USLAB_CACHE_NOCOLOUR : 0));
    if (!c) {
        perror("uslab_cache_create");
        return 1;
    }
    /* Fill whole slabs: objects come from one slab until it is full, in address order, so
     * object i of slab s is the s-th run of `per` allocations. */
    long per = 0;
    uintptr_t first = 0;
    void **objs = bench_xmalloc((size_t)(slabs * 65536 / size + 1) * sizeof *objs);
    long n = 0;
    for (;;) {
        void *p = uslab_cache_alloc(c);
        if (!p)
            return 1;
        if (n == 0)
            first = (uintptr_t)p & ~(uintptr_t)0xffff;
        else if (!per && ((uintptr_t)p & ~(uintptr_t)0xffff) != first)
            per = n; /* the first object of the second slab */
        objs[n++] = p;
        if (per && n == per * slabs)
            break;
        if (!per && n > 65536)
            return 1;
    }
    long colours = 0;
    for (long s = 1; s < slabs; s++)
        colours += ((uintptr_t)objs[s * per] & 0xffff) != ((uintptr_t)objs[0] & 0xffff);
    printf("objects_per_slab=%ld\nslabs_off_the_first_colour=%ld\n", per, colours);
    double *ns = bench_xmalloc((size_t)rounds * sizeof *ns);
    for (long r = 0; r < rounds; r++) {
        uint64_t t0 = bench_now_ns();
        for (long i = 0; i < per; i++)
            for (long s = 0; s < slabs; s++) {
                volatile uint64_t *w = objs[s * per + i];
                for (long k = 0; k < words; k++)
                    w[k] = w[k] + 1;
            }
        ns[r] = (double)(bench_now_ns() - t0) / (double)(per * slabs);
    }
    printf("ns_per_touch=%.3f\n", bench_median(ns, (size_t)rounds));
    for (long i = 0; i < n; i++)
        uslab_cache_free(c, objs[i]);
    uslab_cache_destroy(c);
    free(objs);
    free(ns);
    bench_print_allocator();
    printf("maxrss_kb=%ld\n", bench_maxrss_kb());
    return 0;
}
