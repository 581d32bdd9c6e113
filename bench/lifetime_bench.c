/* SPDX-License-Identifier: MIT */
/*
 * lifetime_bench - the thesis' allocation lifetime benchmark (§4.1), rewritten.
 *
 * An array of operations is built first: `count` mallocs, and for each the free of that
 * block placed `distance` (+ a uniform deviation of 0..`deviation`) operations after it.
 * Sizes are round(scale * Beta(alpha, beta)), 8000 * Beta(2, 20) by default (mean ~727
 * bytes), and used as drawn (the original asked for 10 bytes whatever it drew); every
 * block is written and every block is freed (the original leaked 23% of them). The
 * operation array is then replayed `iterations` times and the replay timed as a whole.
 *
 * Options: --distance 200 --deviation 40 --count 1000000 --alpha 2 --beta 20 --scale 8000
 *          --iterations 3 --seed 1
 */
#include "common.h"

/* An operation: bit 31 set = free of block (op & 0x7fffffff), else malloc of that block. */
#define OP_FREE 0x80000000u

struct pending {
    uint64_t due;
    uint32_t id;
};

/* Binary min-heap on due time (ties by id, to stay deterministic). */
static int before(const struct pending *a, const struct pending *b)
{
    return a->due < b->due || (a->due == b->due && a->id < b->id);
}

static void heap_push(struct pending *h, size_t *n, struct pending x)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!before(&x, &h[parent]))
            break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = x;
}

static struct pending heap_pop(struct pending *h, size_t *n)
{
    struct pending top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && before(&h[c + 1], &h[c]))
            c++;
        if (!before(&h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n)
        h[i] = last;
    return top;
}

int main(int argc, char **argv)
{
    long distance = bench_opt_long(argc, argv, "distance", 200);
    long deviation = bench_opt_long(argc, argv, "deviation", 40);
    long count = bench_opt_long(argc, argv, "count", 1000000);
    double alpha = bench_opt_double(argc, argv, "alpha", 2);
    double beta = bench_opt_double(argc, argv, "beta", 20);
    double scale = bench_opt_double(argc, argv, "scale", 8000);
    long iterations = bench_opt_long(argc, argv, "iterations", 3);
    uint64_t seed = (uint64_t)bench_opt_long(argc, argv, "seed", 1);

    printf("benchmark=lifetime\ndistance=%ld\ndeviation=%ld\ncount=%ld\nalpha=%g\nbeta=%g\n"
           "scale=%g\niterations=%ld\nseed=%llu\n",
           distance, deviation, count, alpha, beta, scale, iterations, (unsigned long long)seed);
    bench_print_allocator();

    bench_rng rng;
    bench_rng_seed(&rng, seed);
    size_t nops = 2 * (size_t)count;
    uint32_t *ops = bench_xmalloc(nops * sizeof *ops);
    uint32_t *sizes = bench_xmalloc((size_t)count * sizeof *sizes);
    void **ptrs = bench_xmalloc((size_t)count * sizeof *ptrs);
    struct pending *heap = bench_xmalloc((size_t)count * sizeof *heap);
    size_t nheap = 0, k = 0;
    uint32_t next = 0;
    double bytes = 0;
    for (uint64_t t = 0; k < nops; t++) {
        if (nheap && (heap[0].due <= t || next == (uint32_t)count)) {
            ops[k++] = heap_pop(heap, &nheap).id | OP_FREE;
        } else {
            uint32_t id = next++;
            sizes[id] = (uint32_t)lround(scale * bench_beta(&rng, alpha, beta));
            bytes += sizes[id];
            uint64_t dev = deviation > 0 ? bench_below(&rng, (uint64_t)deviation + 1) : 0;
            heap_push(heap, &nheap, (struct pending){t + (uint64_t)distance + dev, id});
            ops[k++] = id;
        }
    }
    free(heap);
    printf("mean_size=%.1f\n", bytes / (double)count);

    double total = 0, best = 1e30;
    for (long it = 0; it < iterations; it++) {
        uint64_t t0 = bench_now_ns();
        for (size_t i = 0; i < nops; i++) {
            uint32_t op = ops[i];
            if (op & OP_FREE) {
                free(ptrs[op & ~OP_FREE]);
            } else {
                void *p = malloc(sizes[op]);
                if (!p && sizes[op]) {
                    fprintf(stderr, "malloc(%u) failed\n", sizes[op]);
                    return 1;
                }
                bench_touch(p, sizes[op], (unsigned char)op);
                ptrs[op] = p;
            }
        }
        double s = (double)(bench_now_ns() - t0) * 1e-9;
        total += s;
        if (s < best)
            best = s;
    }
    printf("time_s=%.6f\nbest_iteration_s=%.6f\nns_per_op=%.2f\nmaxrss_kb=%ld\n", total, best,
           total * 1e9 / ((double)nops * (double)iterations), bench_maxrss_kb());
    free(ptrs);
    free(sizes);
    free(ops);
    return 0;
}
