/* SPDX-License-Identifier: MIT */
/*
 * size_bench - the thesis' allocation size benchmark (§4.1), rewritten.
 *
 * Per iteration: `count` blocks of size round(scale * Beta(alpha, beta)) are allocated
 * (and every cache line of each written), then all freed in allocation order. The sizes
 * are drawn before timing starts; each phase is timed as a whole (the thesis timed every
 * call with clock_gettime, which costs more than the call itself).
 *
 * Options: --alpha 2 --beta 20 --scale 800 --count 1000000 --iterations 5 --seed 1
 * Output (key=value): alloc_s, free_s, time_s (sums over iterations), ns_per_pair, ...
 */
#include "common.h"

int main(int argc, char **argv)
{
    double alpha = bench_opt_double(argc, argv, "alpha", 2);
    double beta = bench_opt_double(argc, argv, "beta", 20);
    double scale = bench_opt_double(argc, argv, "scale", 800);
    long count = bench_opt_long(argc, argv, "count", 1000000);
    long iterations = bench_opt_long(argc, argv, "iterations", 5);
    uint64_t seed = (uint64_t)bench_opt_long(argc, argv, "seed", 1);

    printf("benchmark=size\nalpha=%g\nbeta=%g\nscale=%g\ncount=%ld\niterations=%ld\nseed=%llu\n",
           alpha, beta, scale, count, iterations, (unsigned long long)seed);
    bench_print_allocator();

    bench_rng rng;
    bench_rng_seed(&rng, seed);
    uint32_t *sizes = bench_xmalloc((size_t)count * sizeof *sizes);
    void **ptrs = bench_xmalloc((size_t)count * sizeof *ptrs);
    double total_bytes = 0;
    for (long i = 0; i < count; i++) {
        sizes[i] = (uint32_t)lround(scale * bench_beta(&rng, alpha, beta));
        total_bytes += sizes[i];
    }
    printf("mean_size=%.1f\n", total_bytes / (double)count);

    double alloc_s = 0, free_s = 0, best = 1e30;
    for (long it = 0; it < iterations; it++) {
        uint64_t t0 = bench_now_ns();
        for (long i = 0; i < count; i++) {
            void *p = malloc(sizes[i]);
            if (!p && sizes[i]) {
                fprintf(stderr, "malloc(%u) failed\n", sizes[i]);
                return 1;
            }
            bench_touch(p, sizes[i], (unsigned char)i);
            ptrs[i] = p;
        }
        uint64_t t1 = bench_now_ns();
        for (long i = 0; i < count; i++)
            free(ptrs[i]);
        uint64_t t2 = bench_now_ns();
        alloc_s += (double)(t1 - t0) * 1e-9;
        free_s += (double)(t2 - t1) * 1e-9;
        if ((double)(t2 - t0) * 1e-9 < best)
            best = (double)(t2 - t0) * 1e-9;
    }
    printf("alloc_s=%.6f\nfree_s=%.6f\ntime_s=%.6f\nbest_iteration_s=%.6f\n", alloc_s, free_s,
           alloc_s + free_s, best);
    printf("ns_per_pair=%.2f\n", (alloc_s + free_s) * 1e9 / ((double)count * (double)iterations));
    printf("maxrss_kb=%ld\n", bench_maxrss_kb());
    free(ptrs);
    free(sizes);
    return 0;
}
