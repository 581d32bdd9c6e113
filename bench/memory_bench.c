/* SPDX-License-Identifier: MIT */
/*
 * memory_bench - the memory table of userland-slab's README: `count` objects of `size`
 * bytes allocated with malloc and kept live; reports the growth of the resident set.
 *
 * The pointer array is mmap'ed and touched before the baseline is taken, so only the
 * allocator's memory (objects, headers, metadata, slack) is counted.
 *
 * Options: --size 8 --count 1000000
 * Output: rss_increase_kb, bytes_per_object, overhead_pct, maxrss_kb
 */
#include "common.h"

#include <sys/mman.h>

int main(int argc, char **argv)
{
    long size = bench_opt_long(argc, argv, "size", 8);
    long count = bench_opt_long(argc, argv, "count", 1000000);
    printf("benchmark=memory\nsize=%ld\ncount=%ld\n", size, count);
    bench_print_allocator();

    size_t bytes = (size_t)count * sizeof(void *);
    void **ptrs = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ptrs == MAP_FAILED) {
        perror("mmap");
        return 2;
    }
    memset(ptrs, 0, bytes);
    /* Let the allocator initialise itself before the baseline. */
    free(malloc((size_t)size));
    long before = bench_rss_kb();
    for (long i = 0; i < count; i++) {
        ptrs[i] = malloc((size_t)size);
        if (!ptrs[i]) {
            fprintf(stderr, "malloc failed\n");
            return 1;
        }
        memset(ptrs[i], 0xa5, (size_t)size);
    }
    long after = bench_rss_kb();
    double per = (double)(after - before) * 1024.0 / (double)count;
    printf("rss_before_kb=%ld\nrss_after_kb=%ld\nrss_increase_kb=%ld\n", before, after,
           after - before);
    printf("rss_increase_mib=%.2f\nbytes_per_object=%.2f\noverhead_pct=%.1f\n",
           (double)(after - before) / 1024.0, per, 100.0 * (per - (double)size) / (double)size);
    for (long i = 0; i < count; i++)
        free(ptrs[i]);
    printf("rss_after_free_kb=%ld\nmaxrss_kb=%ld\n", bench_rss_kb(), bench_maxrss_kb());
    munmap(ptrs, bytes);
    return 0;
}
