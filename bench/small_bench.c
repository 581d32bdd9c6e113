/* SPDX-License-Identifier: MIT */
/*
 * small_bench - the 100/600-allocation test of the minimalist slab allocator's README,
 * with batches of 25 and 1600 added (issue 12: batches of 25 to 1600 blocks, smaller and
 * bigger than a magazine): `num` blocks of one size are allocated (each memset to 0xCC),
 * then all freed. The whole loop is timed, repeated `reps` times; the median (and
 * minimum) are reported in ns. Then the same with calloc, batches of 100, no memset
 * (calloc_n100_s<size>_ns): a small block that a program asks cleared.
 *
 * Options: --reps 2000 --seed 1 (unused: the test is deterministic)
 * Output: n<num>_s<size>_ns=<median ns for the whole loop>, n<num>_s<size>_min_ns=...,
 *         calloc_n100_s<size>_ns=...
 */
#include "common.h"

static void *volatile keep;

static double run_once(void **addr, int num, size_t size, int cleared)
{
    uint64_t t0 = bench_now_ns();
    for (int i = 0; i < num; i++) {
        addr[i] = cleared ? calloc(1, size) : malloc(size);
        if (!addr[i]) {
            fprintf(stderr, "malloc failed\n");
            exit(1);
        }
        if (!cleared)
            memset(addr[i], 0xCC, size);
    }
    keep = addr[num - 1];
    for (int i = 0; i < num; i++)
        free(addr[i]);
    return (double)(bench_now_ns() - t0);
}

int main(int argc, char **argv)
{
    long reps = bench_opt_long(argc, argv, "reps", 2000);
    static const int nums[] = {25, 100, 600, 1600};
    static const size_t sizes[] = {0x10, 0x40, 0x70, 0x90};
    printf("benchmark=small\nreps=%ld\n", reps);
    bench_print_allocator();
    double *t = bench_xmalloc((size_t)reps * sizeof *t);
    void *addr[1600];
    for (size_t n = 0; n < sizeof nums / sizeof nums[0]; n++) {
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            /* The first run (cold: may map memory) is reported apart. */
            double cold = run_once(addr, nums[n], sizes[s], 0);
            for (long r = 0; r < reps; r++)
                t[r] = run_once(addr, nums[n], sizes[s], 0);
            double med = bench_median(t, (size_t)reps);
            printf("n%d_s%zu_ns=%.0f\nn%d_s%zu_min_ns=%.0f\nn%d_s%zu_cold_ns=%.0f\n", nums[n],
                   sizes[s], med, nums[n], sizes[s], t[0], nums[n], sizes[s], cold);
        }
    }
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        run_once(addr, 100, sizes[s], 1);
        for (long r = 0; r < reps; r++)
            t[r] = run_once(addr, 100, sizes[s], 1);
        printf("calloc_n100_s%zu_ns=%.0f\n", sizes[s], bench_median(t, (size_t)reps));
    }
    free(t);
    return 0;
}
