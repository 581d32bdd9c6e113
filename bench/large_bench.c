/* SPDX-License-Identifier: MIT */
/*
 * large_bench.c - blocks above the slab classes, which uslab hands to the system allocator
 * (docs/design.md §8). The promise: never slower than glibc's own malloc, on any size or
 * pattern, with no more peak memory. Tests (--test):
 *
 *   buffers   mimalloc-bench's malloc-large shape: up to 20 live buffers of 5-25 MiB, each
 *             replaced at random and written in full (a byte per page);
 *   churn     one buffer of 4-24 MiB at a time, malloc'd, written page by page, freed;
 *   mixed     20 live blocks of 40 KiB-6 MiB (log-uniform), replaced at random, written
 *             page by page;
 *   realloc   a buffer grown by realloc to 1.5x its size from 4 KiB up to 64 MiB, only its
 *             two ends written (a string builder, a vector), then freed; repeated;
 *   prodcons  a producer thread mallocs blocks of 64 KiB-1 MiB, writes them, and hands
 *             them over a queue of 4 to a consumer thread that frees them (so at most
 *             about 6 blocks are live, whatever the two threads' relative speed);
 *   calloc    100 live calloc(256 KiB) blocks, each read at one byte a page (calloc's
 *             memory need not be touched), replaced in turn;
 *   medium    200 live blocks of 32-256 KiB (log-uniform), replaced at random, their first
 *             and last bytes written: the allocator's own cost for the sizes glibc serves
 *             by mmap, and peers from their pages;
 *   pow2      every power of two from 16 B to 16 MiB and that size + 1, malloc'd, ends
 *             written, freed (allocators that round up to a power of two pay twice);
 *   align     posix_memalign of 64 KiB to 2 MiB alignments (1 KiB to 3 MiB blocks), ends
 *             written, 8 live, replaced in turn (huge-page buffers, DMA rings);
 *   regrow    a buffer grown by realloc to 1.5x from 16 B to 64 KiB with a small malloc
 *             between steps (which takes the space after it), then freed; repeated;
 *   nodes     redis's lists (quicklist): 1,536 nodes of up to 8 KiB, each grown by realloc
 *             104 bytes at a time, all freed, then as many bytes of 104-byte blocks
 *             allocated, written and freed; repeated. Its peak RSS shows whether the nodes'
 *             memory serves the small blocks after them.
 *
 * "Page by page" and "a byte per page" are bench_write_pages (common.h): the block's ends and
 * the middle of each page in between, wherever the allocator put the block.
 *
 * Prints key=value lines: the wall time (ms) and the allocator's name; the runner adds peak
 * RSS.
 */
#include "common.h"

#include <pthread.h>

static long steps;
static uint64_t seed;

static void *must(void *p, size_t n)
{
    if (!p) {
        fprintf(stderr, "allocation of %zu bytes failed\n", n);
        exit(1);
    }
    return p;
}

static size_t uniform(bench_rng *r, size_t lo, size_t hi)
{
    return lo + (size_t)bench_below(r, (uint64_t)(hi - lo + 1));
}

/* Log-uniform in [lo, hi]: as many small blocks as large ones per doubling. */
static size_t log_uniform(bench_rng *r, size_t lo, size_t hi)
{
    double x = log((double)lo) + bench_uniform(r) * (log((double)hi) - log((double)lo));
    return (size_t)exp(x);
}

static void run_slots(long slots, int log_sizes, size_t lo, size_t hi, int ends)
{
    bench_rng r;
    bench_rng_seed(&r, seed);
    unsigned char **slot = calloc((size_t)slots, sizeof *slot);
    for (long i = 0; i < steps; i++) {
        long k = (long)bench_below(&r, (uint64_t)slots);
        size_t n = log_sizes ? log_uniform(&r, lo, hi) : uniform(&r, lo, hi);
        free(slot[k]);
        slot[k] = must(malloc(n), n);
        if (ends)
            slot[k][0] = slot[k][n - 1] = (unsigned char)i;
        else
            bench_write_pages(slot[k], n, (unsigned char)i);
    }
    for (long k = 0; k < slots; k++)
        free(slot[k]);
    free(slot);
}

static void run_churn(void)
{
    bench_rng r;
    bench_rng_seed(&r, seed);
    for (long i = 0; i < steps; i++) {
        size_t n = uniform(&r, (size_t)4 << 20, (size_t)24 << 20);
        unsigned char *p = must(malloc(n), n);
        bench_write_pages(p, n, (unsigned char)i);
        free(p);
    }
}

static void run_realloc(void)
{
    for (long i = 0; i < steps; i++) {
        size_t n = 4096;
        unsigned char *p = must(malloc(n), n);
        p[0] = p[n - 1] = 1;
        while (n < ((size_t)64 << 20)) {
            n = n + n / 2;
            p = must(realloc(p, n), n);
            if (p[0] != 1) {
                fprintf(stderr, "realloc lost the buffer's contents\n");
                exit(1);
            }
            p[n - 1] = 1;
        }
        free(p);
    }
}

/* prodcons: a ring of QUEUE blocks between the two threads. */
#define QUEUE 4
static unsigned char *ring[QUEUE];
static long head, tail;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;

static void *consumer(void *arg)
{
    for (long i = 0; i < steps; i++) {
        pthread_mutex_lock(&lock);
        while (tail == head)
            pthread_cond_wait(&cond, &lock);
        unsigned char *p = ring[tail % QUEUE];
        tail++;
        pthread_cond_broadcast(&cond);
        pthread_mutex_unlock(&lock);
        free(p);
    }
    return arg;
}

static void run_prodcons(void)
{
    bench_rng r;
    bench_rng_seed(&r, seed);
    pthread_t t;
    pthread_create(&t, NULL, consumer, NULL);
    for (long i = 0; i < steps; i++) {
        size_t n = uniform(&r, (size_t)64 << 10, (size_t)1 << 20);
        unsigned char *p = must(malloc(n), n);
        bench_write_pages(p, n, (unsigned char)i);
        pthread_mutex_lock(&lock);
        while (head - tail == QUEUE)
            pthread_cond_wait(&cond, &lock);
        ring[head % QUEUE] = p;
        head++;
        pthread_cond_broadcast(&cond);
        pthread_mutex_unlock(&lock);
    }
    pthread_join(t, NULL);
}

static void run_calloc(void)
{
    enum { LIVE = 100, SIZE = 256 << 10 };
    unsigned char *slot[LIVE] = {0};
    unsigned sum = 0;
    for (long i = 0; i < steps; i++) {
        long k = i % LIVE;
        free(slot[k]);
        slot[k] = must(calloc(1, SIZE), SIZE);
        sum += bench_read_pages(slot[k], SIZE);
    }
    if (sum) {
        fprintf(stderr, "calloc's memory was not zero\n");
        exit(1);
    }
    for (long k = 0; k < LIVE; k++)
        free(slot[k]);
}

static void run_pow2(void)
{
    for (long i = 0; i < steps; i++)
        for (size_t n = 16; n <= ((size_t)16 << 20); n *= 2)
            for (size_t m = n; m <= n + 1; m++) {
                unsigned char *p = must(malloc(m), m);
                p[0] = p[m - 1] = (unsigned char)i;
                free(p);
            }
}

static void run_align(void)
{
    enum { LIVE = 8 };
    bench_rng r;
    bench_rng_seed(&r, seed);
    unsigned char *slot[LIVE] = {0};
    for (long i = 0; i < steps; i++) {
        long k = i % LIVE;
        free(slot[k]);
        size_t align = (size_t)64 << 10 << bench_below(&r, 6); /* 64 KiB .. 2 MiB */
        size_t n = log_uniform(&r, 1024, (size_t)3 << 20);
        void *p = NULL;
        if (posix_memalign(&p, align, n) != 0 || ((uintptr_t)p & (align - 1))) {
            fprintf(stderr, "posix_memalign(%zu, %zu) failed\n", align, n);
            exit(1);
        }
        slot[k] = p;
        slot[k][0] = slot[k][n - 1] = 1;
    }
    for (long k = 0; k < LIVE; k++)
        free(slot[k]);
}

static void run_regrow(void)
{
    enum { SMALL = 64 };
    void *small[SMALL];
    for (long i = 0; i < steps; i++) {
        size_t n = 16;
        int k = 0;
        unsigned char *p = must(malloc(n), n);
        p[0] = 7;
        while (n < ((size_t)64 << 10)) {
            n = n + n / 2;
            p = must(realloc(p, n), n);
            if (p[0] != 7) {
                fprintf(stderr, "realloc lost the buffer's contents\n");
                exit(1);
            }
            p[n - 1] = 1;
            small[k++] = must(malloc(24), 24);
        }
        while (k > 0)
            free(small[--k]);
        free(p);
    }
}

static void run_nodes(void)
{
    enum { NODES = 1536, ITEM = 104, NODE_MAX = 8192, ITEMS = NODES * (NODE_MAX / ITEM) };
    static unsigned char *node[NODES];
    static void *item[ITEMS];
    for (long i = 0; i < steps; i++) {
        for (int k = 0; k < NODES; k++) {
            size_t n = 0;
            unsigned char *p = NULL;
            while (n + ITEM <= NODE_MAX) {
                p = must(realloc(p, n + ITEM), n + ITEM);
                memset(p + n, (int)(k & 0xff), ITEM);
                n += ITEM;
            }
            if (p[0] != (k & 0xff) || p[n - 1] != (k & 0xff)) {
                fprintf(stderr, "realloc lost a node's contents\n");
                exit(1);
            }
            node[k] = p;
        }
        for (int k = NODES - 1; k >= 0; k--)
            free(node[k]);
        for (int k = 0; k < ITEMS; k++) {
            item[k] = must(malloc(ITEM), ITEM);
            memset(item[k], k & 0xff, ITEM);
        }
        for (int k = 0; k < ITEMS; k++)
            free(item[k]);
    }
}

int main(int argc, char **argv)
{
    const char *test = bench_opt_str(argc, argv, "test", "buffers");
    seed = (uint64_t)bench_opt_long(argc, argv, "seed", 1);
    long dflt = strcmp(test, "buffers") == 0    ? 2000
                : strcmp(test, "churn") == 0    ? 1000
                : strcmp(test, "mixed") == 0    ? 20000
                : strcmp(test, "realloc") == 0  ? 100
                : strcmp(test, "prodcons") == 0 ? 20000
                : strcmp(test, "medium") == 0   ? 1000000
                : strcmp(test, "pow2") == 0     ? 300
                : strcmp(test, "align") == 0    ? 20000
                : strcmp(test, "regrow") == 0   ? 50000
                : strcmp(test, "nodes") == 0    ? 10
                                                : 20000;
    steps = bench_opt_long(argc, argv, "steps", dflt);
    printf("benchmark=large\ntest=%s\nsteps=%ld\n", test, steps);
    bench_print_allocator();
    uint64_t t0 = bench_now_ns();
    if (strcmp(test, "buffers") == 0)
        run_slots(20, 0, (size_t)5 << 20, (size_t)25 << 20, 0);
    else if (strcmp(test, "churn") == 0)
        run_churn();
    else if (strcmp(test, "mixed") == 0)
        run_slots(20, 1, (size_t)40 << 10, (size_t)6 << 20, 0);
    else if (strcmp(test, "realloc") == 0)
        run_realloc();
    else if (strcmp(test, "prodcons") == 0)
        run_prodcons();
    else if (strcmp(test, "calloc") == 0)
        run_calloc();
    else if (strcmp(test, "medium") == 0)
        run_slots(200, 1, (size_t)32 << 10, (size_t)256 << 10, 1);
    else if (strcmp(test, "pow2") == 0)
        run_pow2();
    else if (strcmp(test, "align") == 0)
        run_align();
    else if (strcmp(test, "regrow") == 0)
        run_regrow();
    else if (strcmp(test, "nodes") == 0)
        run_nodes();
    else {
        fprintf(stderr, "unknown test %s\n", test);
        return 2;
    }
    printf("ms=%.3f\n", (double)(bench_now_ns() - t0) * 1e-6);
    return 0;
}
