/* SPDX-License-Identifier: MIT */
/*
 * mt_bench - multi-threaded workloads in the style of well-known allocator benchmarks,
 * written here from their descriptions. --test selects one:
 *   larson    server simulation: each thread replaces random blocks of a set of `slots`
 *             blocks (sizes uniform in [min, max]); after each epoch the sets rotate
 *             between threads, so every block is freed by another thread than its owner.
 *   xmalloc   producer/consumer: producers malloc batches of blocks and hand them over a
 *             queue; consumers free them (every free is remote).
 *   scratch   allocator-induced false sharing: the main thread allocates one small block
 *             per thread (adjacent, likely in one cache line); each thread frees it, then
 *             repeatedly mallocs a small block, writes it `inner` times, frees it.
 *   churn     thread churn: `generations` of `threads` short-lived threads, each doing a
 *             few hundred malloc/free and freeing blocks the previous generation left.
 *   bulk      the shape of sh8bench: per round, the main thread mallocs `count` blocks of
 *             `size` bytes, then `threads` workers free them (each a share), so every
 *             block is freed remotely and in bulk, far more than a magazine or a depot holds.
 *   lifo      the shape of sh6bench, run with more threads than cores: each thread, per
 *             round, mallocs `count` blocks of growing sizes (min to max, cycling), frees
 *             the later half last-allocated first (LIFO) and the earlier half in
 *             allocation order (FIFO); the threads' rounds interleave on shared cores.
 *   live      many threads alive at once (issue 38: 3,000 of them): each mallocs `blocks`
 *             blocks of 16 to 1024 bytes and writes them, frees every other one, waits
 *             until every thread has, frees the rest and exits. Peak RSS is what each
 *             live thread costs; joined_mib, the resident size once all are joined, is
 *             what the allocator keeps of them.
 *   large     the shape of mstress and malloc-large: each thread keeps `slots` blocks of
 *             `min` to `max` bytes (above uslab's slab range: the system allocator's
 *             blocks) and replaces a random one per step, writing one byte per page of
 *             the new block, so what the allocator gives back to the kernel and takes
 *             again shows as page faults.
 *   glibcthread  glibc's bench-malloc-thread, as mimalloc-bench's glibc-thread runs it: each
 *             thread frees a slot of its 1,024 and mallocs into it a block of 4 to 32,768
 *             bytes (density 1/n^2, mean about 36), writing every byte; `iterations` each.
 *   mleak     mimalloc-bench's mleak: `rounds` of `threads` (10) threads started and joined;
 *             each callocs one 128-byte object and swaps it into a random one of 1,000
 *             shared slots, freeing what was there (left by an exited thread). joined_mib
 *             and growth_mib: the resident size once every round is joined.
 * Output: time_s (the timed part), mops_per_s where meaningful.
 *
 * Options: --test larson --threads 2 --seed 1, and per test:
 *   larson: --slots 1000 --epochs 100 --ops 10000 --min 16 --max 512
 *   xmalloc: --blocks 2000000 --min 8 --max 256
 *   scratch: --iterations 20000 --inner 200 --objsize 8
 *   churn: --generations 2000 --ops 500
 *   bulk: --count 1000000 --size 8 --rounds 10
 *   lifo: --count 2000 --rounds 1500 --min 1 --max 1000
 *   large: --slots 20 --steps 20000 --min 40000 --max 2000000
 *   live: --blocks 64 (--threads 3000)
 *   glibcthread: --iterations 10000000 --min 4 --max 32768
 *   mleak: --rounds 500 --slots 100*threads --words 16 (--threads 10)
 */
#include "common.h"

#include <pthread.h>

static long nthreads;
static uint64_t seed;
static pthread_barrier_t barrier;

/* ---- larson ------------------------------------------------------------------------- */

static long l_slots, l_epochs, l_ops, l_min, l_max;
static void ***l_sets;

static size_t draw_size(bench_rng *r, long lo, long hi)
{
    return (size_t)lo + (size_t)bench_below(r, (uint64_t)(hi - lo + 1));
}

static void *larson_thread(void *arg)
{
    long id = (long)(intptr_t)arg;
    bench_rng r;
    bench_rng_seed(&r, seed * 1000 + (uint64_t)id);
    for (long e = 0; e < l_epochs; e++) {
        void **set = l_sets[(id + e) % nthreads];
        for (long k = 0; k < l_ops; k++) {
            size_t j = (size_t)bench_below(&r, (uint64_t)l_slots);
            free(set[j]);
            size_t n = draw_size(&r, l_min, l_max);
            set[j] = malloc(n);
            bench_touch(set[j], n, (unsigned char)k);
        }
        pthread_barrier_wait(&barrier);
    }
    return NULL;
}

static double run_larson(int argc, char **argv)
{
    l_slots = bench_opt_long(argc, argv, "slots", 1000);
    l_epochs = bench_opt_long(argc, argv, "epochs", 100);
    l_ops = bench_opt_long(argc, argv, "ops", 10000);
    l_min = bench_opt_long(argc, argv, "min", 16);
    l_max = bench_opt_long(argc, argv, "max", 512);
    printf("slots=%ld\nepochs=%ld\nops=%ld\nmin=%ld\nmax=%ld\n", l_slots, l_epochs, l_ops, l_min,
           l_max);
    bench_rng r;
    bench_rng_seed(&r, seed);
    l_sets = bench_xmalloc((size_t)nthreads * sizeof *l_sets);
    for (long t = 0; t < nthreads; t++) {
        l_sets[t] = bench_xmalloc((size_t)l_slots * sizeof(void *));
        for (long j = 0; j < l_slots; j++)
            l_sets[t][j] = malloc(draw_size(&r, l_min, l_max));
    }
    pthread_t *tid = bench_xmalloc((size_t)nthreads * sizeof *tid);
    uint64_t t0 = bench_now_ns();
    for (long t = 0; t < nthreads; t++)
        pthread_create(&tid[t], NULL, larson_thread, (void *)(intptr_t)t);
    for (long t = 0; t < nthreads; t++)
        pthread_join(tid[t], NULL);
    double s = (double)(bench_now_ns() - t0) * 1e-9;
    for (long t = 0; t < nthreads; t++) {
        for (long j = 0; j < l_slots; j++)
            free(l_sets[t][j]);
        free(l_sets[t]);
    }
    free(l_sets);
    free(tid);
    printf("mops_per_s=%.3f\n", (double)(nthreads * l_epochs * l_ops) / s * 1e-6);
    return s;
}

/* ---- xmalloc -------------------------------------------------------------------------- */

#define X_BATCH 64
#define X_QUEUE 256

static long x_blocks, x_min, x_max, x_producers, x_consumers;
static void **x_queue[X_QUEUE];
static size_t x_head, x_tail;
static long x_done_producers;
static pthread_mutex_t x_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t x_nonempty = PTHREAD_COND_INITIALIZER, x_nonfull = PTHREAD_COND_INITIALIZER;

static void *x_producer(void *arg)
{
    long id = (long)(intptr_t)arg;
    bench_rng r;
    bench_rng_seed(&r, seed * 1000 + (uint64_t)id);
    long batches = x_blocks / X_BATCH / x_producers;
    for (long b = 0; b < batches; b++) {
        void **batch = malloc(X_BATCH * sizeof(void *));
        for (int i = 0; i < X_BATCH; i++) {
            size_t n = draw_size(&r, x_min, x_max);
            batch[i] = malloc(n);
            bench_touch(batch[i], n, (unsigned char)i);
        }
        pthread_mutex_lock(&x_lock);
        while (x_tail - x_head == X_QUEUE)
            pthread_cond_wait(&x_nonfull, &x_lock);
        x_queue[x_tail++ % X_QUEUE] = batch;
        pthread_cond_signal(&x_nonempty);
        pthread_mutex_unlock(&x_lock);
    }
    pthread_mutex_lock(&x_lock);
    x_done_producers++;
    pthread_cond_broadcast(&x_nonempty);
    pthread_mutex_unlock(&x_lock);
    return NULL;
}

static void *x_consumer(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&x_lock);
        while (x_tail == x_head && x_done_producers < x_producers)
            pthread_cond_wait(&x_nonempty, &x_lock);
        if (x_tail == x_head) {
            pthread_mutex_unlock(&x_lock);
            return NULL;
        }
        void **batch = x_queue[x_head++ % X_QUEUE];
        pthread_cond_signal(&x_nonfull);
        pthread_mutex_unlock(&x_lock);
        for (int i = 0; i < X_BATCH; i++)
            free(batch[i]);
        free(batch);
    }
}

static double run_xmalloc(int argc, char **argv)
{
    x_blocks = bench_opt_long(argc, argv, "blocks", 2000000);
    x_min = bench_opt_long(argc, argv, "min", 8);
    x_max = bench_opt_long(argc, argv, "max", 256);
    x_producers = nthreads / 2 > 0 ? nthreads / 2 : 1;
    x_consumers = nthreads - x_producers > 0 ? nthreads - x_producers : 1;
    printf("blocks=%ld\nmin=%ld\nmax=%ld\nproducers=%ld\nconsumers=%ld\n", x_blocks, x_min, x_max,
           x_producers, x_consumers);
    long n = x_producers + x_consumers;
    pthread_t *tid = bench_xmalloc((size_t)n * sizeof *tid);
    uint64_t t0 = bench_now_ns();
    for (long t = 0; t < x_producers; t++)
        pthread_create(&tid[t], NULL, x_producer, (void *)(intptr_t)t);
    for (long t = 0; t < x_consumers; t++)
        pthread_create(&tid[x_producers + t], NULL, x_consumer, NULL);
    for (long t = 0; t < n; t++)
        pthread_join(tid[t], NULL);
    double s = (double)(bench_now_ns() - t0) * 1e-9;
    free(tid);
    printf("mops_per_s=%.3f\n", (double)x_blocks / s * 1e-6);
    return s;
}

/* ---- cache-scratch ---------------------------------------------------------------------- */

static long s_iterations, s_inner, s_objsize;
static char **s_initial;

static void *scratch_thread(void *arg)
{
    long id = (long)(intptr_t)arg;
    free(s_initial[id]);
    pthread_barrier_wait(&barrier);
    for (long i = 0; i < s_iterations; i++) {
        volatile char *p = malloc((size_t)s_objsize);
        for (long k = 0; k < s_inner; k++)
            for (long b = 0; b < s_objsize; b++)
                p[b] = (char)(p[b] + 1);
        free((void *)p);
    }
    return NULL;
}

static double run_scratch(int argc, char **argv)
{
    s_iterations = bench_opt_long(argc, argv, "iterations", 20000);
    s_inner = bench_opt_long(argc, argv, "inner", 200);
    s_objsize = bench_opt_long(argc, argv, "objsize", 8);
    printf("iterations=%ld\ninner=%ld\nobjsize=%ld\n", s_iterations, s_inner, s_objsize);
    s_initial = bench_xmalloc((size_t)nthreads * sizeof *s_initial);
    for (long t = 0; t < nthreads; t++)
        s_initial[t] = malloc((size_t)s_objsize);
    long shared_lines = 0;
    for (long t = 1; t < nthreads; t++)
        shared_lines += ((uintptr_t)s_initial[t] / BENCH_CACHE_LINE) ==
                        ((uintptr_t)s_initial[t - 1] / BENCH_CACHE_LINE);
    printf("initial_blocks_sharing_a_line=%ld\n", shared_lines);
    pthread_t *tid = bench_xmalloc((size_t)nthreads * sizeof *tid);
    uint64_t t0 = bench_now_ns();
    for (long t = 0; t < nthreads; t++)
        pthread_create(&tid[t], NULL, scratch_thread, (void *)(intptr_t)t);
    for (long t = 0; t < nthreads; t++)
        pthread_join(tid[t], NULL);
    double s = (double)(bench_now_ns() - t0) * 1e-9;
    free(tid);
    free(s_initial);
    return s;
}

/* ---- many live threads --------------------------------------------------------------- */

static long v_blocks;
static pthread_barrier_t v_all;

static void *live_thread(void *arg)
{
    bench_rng r;
    bench_rng_seed(&r, seed * 104729 + (uint64_t)(intptr_t)arg);
    void *b[256];
    long n = v_blocks < 256 ? v_blocks : 256;
    for (long k = 0; k < n; k++) {
        size_t size = draw_size(&r, 16, 1024);
        b[k] = malloc(size);
        bench_touch(b[k], size, (unsigned char)k);
    }
    for (long k = 0; k < n; k += 2)
        free(b[k]);
    pthread_barrier_wait(&v_all);
    for (long k = 1; k < n; k += 2)
        free(b[k]);
    return NULL;
}

static double run_live(int argc, char **argv)
{
    v_blocks = bench_opt_long(argc, argv, "blocks", 64);
    printf("blocks=%ld\n", v_blocks);
    pthread_t *tid = bench_xmalloc((size_t)nthreads * sizeof *tid);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 << 10); /* 3,000 default stacks: 24 GiB of address space */
    pthread_barrier_init(&v_all, NULL, (unsigned)nthreads);
    uint64_t t0 = bench_now_ns();
    for (long t = 0; t < nthreads; t++)
        if (pthread_create(&tid[t], &attr, live_thread, (void *)(intptr_t)t) != 0) {
            fprintf(stderr, "pthread_create %ld failed\n", t);
            exit(1);
        }
    for (long t = 0; t < nthreads; t++)
        pthread_join(tid[t], NULL);
    double s = (double)(bench_now_ns() - t0) * 1e-9;
    pthread_barrier_destroy(&v_all);
    pthread_attr_destroy(&attr);
    free(tid);
    printf("joined_mib=%.1f\n", (double)bench_rss_kb() / 1024);
    return s;
}

/* ---- thread churn ---------------------------------------------------------------------- */

static long c_generations, c_ops;
static void **c_handoff; /* blocks left by the previous generation, one slot per thread */

static void *churn_thread(void *arg)
{
    long id = (long)(intptr_t)arg;
    bench_rng r;
    bench_rng_seed(&r, seed * 7919 + (uint64_t)id);
    free(c_handoff[id]); /* allocated by a thread that has exited */
    void *live[32] = {0};
    for (long k = 0; k < c_ops; k++) {
        size_t j = (size_t)bench_below(&r, 32);
        free(live[j]);
        size_t n = draw_size(&r, 16, 1024);
        live[j] = malloc(n);
        bench_touch(live[j], n, (unsigned char)k);
    }
    for (int j = 1; j < 32; j++)
        free(live[j]);
    c_handoff[id] = live[0];
    return NULL;
}

static double run_churn(int argc, char **argv)
{
    c_generations = bench_opt_long(argc, argv, "generations", 2000);
    c_ops = bench_opt_long(argc, argv, "ops", 500);
    printf("generations=%ld\nops=%ld\n", c_generations, c_ops);
    c_handoff = calloc((size_t)nthreads, sizeof *c_handoff);
    pthread_t *tid = bench_xmalloc((size_t)nthreads * sizeof *tid);
    uint64_t t0 = bench_now_ns();
    for (long g = 0; g < c_generations; g++) {
        for (long t = 0; t < nthreads; t++)
            pthread_create(&tid[t], NULL, churn_thread, (void *)(intptr_t)t);
        for (long t = 0; t < nthreads; t++)
            pthread_join(tid[t], NULL);
        /* rotate the hand-off so blocks cross threads */
        void *first = c_handoff[0];
        for (long t = 0; t + 1 < nthreads; t++)
            c_handoff[t] = c_handoff[t + 1];
        c_handoff[nthreads - 1] = first;
    }
    double s = (double)(bench_now_ns() - t0) * 1e-9;
    for (long t = 0; t < nthreads; t++)
        free(c_handoff[t]);
    free(c_handoff);
    free(tid);
    printf("threads_per_s=%.0f\n", (double)(c_generations * nthreads) / s);
    return s;
}

/* ---- bulk remote frees (sh8bench's shape) -------------------------------------------- */

static long b_count, b_size, b_rounds;
static void **b_blocks;
static pthread_barrier_t b_barrier; /* the main thread and the workers */

static void *bulk_worker(void *arg)
{
    long id = (long)(intptr_t)arg;
    long from = b_count * id / nthreads, to = b_count * (id + 1) / nthreads;
    for (long r = 0; r < b_rounds; r++) {
        pthread_barrier_wait(&b_barrier); /* the blocks are there */
        for (long i = from; i < to; i++)
            free(b_blocks[i]);
        pthread_barrier_wait(&b_barrier); /* all freed */
    }
    return NULL;
}

static double run_bulk(int argc, char **argv)
{
    b_count = bench_opt_long(argc, argv, "count", 1000000);
    b_size = bench_opt_long(argc, argv, "size", 8);
    b_rounds = bench_opt_long(argc, argv, "rounds", 10);
    printf("count=%ld\nsize=%ld\nrounds=%ld\n", b_count, b_size, b_rounds);
    b_blocks = bench_xmalloc((size_t)b_count * sizeof *b_blocks);
    pthread_barrier_init(&b_barrier, NULL, (unsigned)nthreads + 1);
    pthread_t *tid = bench_xmalloc((size_t)nthreads * sizeof *tid);
    for (long t = 0; t < nthreads; t++)
        pthread_create(&tid[t], NULL, bulk_worker, (void *)(intptr_t)t);
    uint64_t t0 = bench_now_ns(), in_alloc = 0;
    for (long r = 0; r < b_rounds; r++) {
        uint64_t a0 = bench_now_ns();
        for (long i = 0; i < b_count; i++) {
            b_blocks[i] = malloc((size_t)b_size);
            bench_touch(b_blocks[i], (size_t)b_size, (unsigned char)i);
        }
        in_alloc += bench_now_ns() - a0;
        pthread_barrier_wait(&b_barrier);
        pthread_barrier_wait(&b_barrier);
    }
    double s = (double)(bench_now_ns() - t0) * 1e-9;
    /* the two phases apart: the main thread's mallocs, the workers' frees (and barriers) */
    printf("alloc_s=%.6f\nfree_s=%.6f\n", (double)in_alloc * 1e-9, s - (double)in_alloc * 1e-9);
    for (long t = 0; t < nthreads; t++)
        pthread_join(tid[t], NULL);
    pthread_barrier_destroy(&b_barrier);
    free(tid);
    free(b_blocks);
    printf("mops_per_s=%.3f\n", (double)(b_count * b_rounds) / s * 1e-6);
    return s;
}

/* ---- LIFO and FIFO frees on oversubscribed cores (sh6bench's shape) ------------------ */

static long f_count, f_rounds, f_min, f_max;

static void *lifo_worker(void *arg)
{
    long id = (long)(intptr_t)arg;
    void **b = bench_xmalloc((size_t)f_count * sizeof *b);
    long span = f_max - f_min + 1;
    pthread_barrier_wait(&barrier);
    for (long r = 0; r < f_rounds; r++) {
        for (long i = 0; i < f_count; i++) {
            size_t n = (size_t)(f_min + (i + r + id) % span);
            unsigned char *p = malloc(n);
            if (!p) {
                fprintf(stderr, "malloc(%zu) failed\n", n);
                exit(1);
            }
            p[0] = (unsigned char)i;
            p[n - 1] = (unsigned char)r;
            b[i] = p;
        }
        for (long i = f_count - 1; i >= f_count / 2; i--) /* the later half: LIFO */
            free(b[i]);
        for (long i = 0; i < f_count / 2; i++) /* the earlier half: FIFO */
            free(b[i]);
    }
    free(b);
    return NULL;
}

static double run_lifo(int argc, char **argv)
{
    f_count = bench_opt_long(argc, argv, "count", 2000);
    f_rounds = bench_opt_long(argc, argv, "rounds", 1500);
    f_min = bench_opt_long(argc, argv, "min", 1);
    f_max = bench_opt_long(argc, argv, "max", 1000);
    if (f_count < 2)
        f_count = 2;
    if (f_min < 1)
        f_min = 1;
    if (f_max < f_min)
        f_max = f_min;
    printf("count=%ld\nrounds=%ld\nmin=%ld\nmax=%ld\n", f_count, f_rounds, f_min, f_max);
    pthread_t *tid = bench_xmalloc((size_t)nthreads * sizeof *tid);
    for (long t = 1; t < nthreads; t++)
        pthread_create(&tid[t], NULL, lifo_worker, (void *)(intptr_t)t);
    uint64_t t0 = bench_now_ns();
    lifo_worker((void *)(intptr_t)0);
    for (long t = 1; t < nthreads; t++)
        pthread_join(tid[t], NULL);
    double s = (double)(bench_now_ns() - t0) * 1e-9;
    free(tid);
    printf("mops_per_s=%.3f\n", (double)(f_count * f_rounds * nthreads) / s * 1e-6);
    return s;
}

/* ---- large blocks (mstress's and malloc-large's shape) -------------------------------- */

static long g_slots, g_steps, g_min, g_max;

static void *large_worker(void *arg)
{
    long id = (long)(intptr_t)arg;
    bench_rng r;
    bench_rng_seed(&r, seed * 7919 + (uint64_t)id);
    void **slot = bench_xmalloc((size_t)g_slots * sizeof *slot);
    memset(slot, 0, (size_t)g_slots * sizeof *slot);
    long page = 4096;
    pthread_barrier_wait(&barrier);
    for (long i = 0; i < g_steps; i++) {
        long k = (long)bench_below(&r, (uint64_t)g_slots);
        size_t n = (size_t)g_min + (size_t)bench_below(&r, (uint64_t)(g_max - g_min + 1));
        free(slot[k]);
        unsigned char *p = malloc(n);
        if (!p) {
            fprintf(stderr, "malloc(%zu) failed\n", n);
            exit(1);
        }
        for (size_t o = 0; o < n; o += (size_t)page)
            p[o] = (unsigned char)i;
        p[n - 1] = (unsigned char)i;
        slot[k] = p;
    }
    for (long k = 0; k < g_slots; k++)
        free(slot[k]);
    free(slot);
    return NULL;
}

static double run_large(int argc, char **argv)
{
    g_slots = bench_opt_long(argc, argv, "slots", 20);
    g_steps = bench_opt_long(argc, argv, "steps", 20000);
    g_min = bench_opt_long(argc, argv, "min", 40000);
    g_max = bench_opt_long(argc, argv, "max", 2000000);
    if (g_max < g_min)
        g_max = g_min;
    printf("slots=%ld\nsteps=%ld\nmin=%ld\nmax=%ld\n", g_slots, g_steps, g_min, g_max);
    pthread_t *tid = bench_xmalloc((size_t)nthreads * sizeof *tid);
    for (long t = 1; t < nthreads; t++)
        pthread_create(&tid[t], NULL, large_worker, (void *)(intptr_t)t);
    uint64_t t0 = bench_now_ns();
    large_worker((void *)(intptr_t)0);
    for (long t = 1; t < nthreads; t++)
        pthread_join(tid[t], NULL);
    double s = (double)(bench_now_ns() - t0) * 1e-9;
    free(tid);
    printf("mops_per_s=%.3f\n", (double)(g_steps * nthreads) / s * 1e-6);
    return s;
}

/* ---- glibc's bench-malloc-thread (mimalloc-bench's glibc-thread) ----------------------- */

/* What mimalloc-bench runs (bench/glibc-bench/bench-malloc-thread.c, `glibc-thread <procs>`
 * in bench.sh): each thread owns 1,024 slots and, until a 2-second alarm, frees the slot
 * the next offset names, mallocs the next size into it and writes every byte of the new
 * block; bench.sh scores 10^9 / (iterations of all threads) as a time. Sizes are 4 to
 * 32,768 bytes with density proportional to 1/n^2 (mean about 36 bytes, about one in 260
 * above 1 KiB), from a table of 8,000; offsets from a table of 4,096; both tables are shared
 * and every thread walks them from the start. Here the count is fixed (`iterations` per
 * thread) and the time measured; it includes each thread's freeing its 1,024 blocks at the
 * end, which the original never does. */

#define GT_SLOTS   1024
#define GT_SIZES   8000
#define GT_OFFSETS 4096

static long gt_iterations, gt_min, gt_max;
static unsigned *gt_size, *gt_offset;

/* mimalloc-bench builds the original at -O3 (a Release build), where the byte loop below
 * becomes vector stores; clang vectorizes it at our -O2 too, gcc 12 only with the cost model
 * -O3 uses. */
#if defined(__GNUC__) && !defined(__clang__)
#define GT_VECTORIZE __attribute__((optimize("vect-cost-model=dynamic")))
#else
#define GT_VECTORIZE
#endif

GT_VECTORIZE static void *glibcthread_worker(void *arg)
{
    (void)arg;
    void **slot = calloc(GT_SLOTS, sizeof *slot);
    if (!slot) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    unsigned si = 0, oi = 0;
    pthread_barrier_wait(&barrier);
    for (long i = 0; i < gt_iterations; i++) {
        si = si + 1 < GT_SIZES ? si + 1 : 0;
        oi = oi + 1 < GT_OFFSETS ? oi + 1 : 0;
        unsigned k = gt_offset[oi];
        size_t n = gt_size[si];
        free(slot[k]);
        unsigned char *p = malloc(n);
        if (!p) {
            fprintf(stderr, "malloc(%zu) failed\n", n);
            exit(1);
        }
        for (size_t b = 0; b < n; b++) /* every byte, as the original does */
            p[b] = (unsigned char)b;
        slot[k] = p;
    }
    for (int k = 0; k < GT_SLOTS; k++)
        free(slot[k]);
    free(slot);
    return NULL;
}

static double run_glibcthread(int argc, char **argv)
{
    gt_iterations = bench_opt_long(argc, argv, "iterations", 10000000);
    gt_min = bench_opt_long(argc, argv, "min", 4);
    gt_max = bench_opt_long(argc, argv, "max", 32768);
    if (gt_min < 1)
        gt_min = 1;
    if (gt_max < gt_min)
        gt_max = gt_min;
    printf("iterations=%ld\nmin=%ld\nmax=%ld\n", gt_iterations, gt_min, gt_max);
    /* inverse transform of the density c/n^2 on [min, max]: 1/n is uniform between 1/max
     * and 1/min */
    bench_rng r;
    bench_rng_seed(&r, seed);
    gt_size = bench_xmalloc(GT_SIZES * sizeof *gt_size);
    gt_offset = bench_xmalloc(GT_OFFSETS * sizeof *gt_offset);
    double lo = 1.0 / (double)gt_max, hi = 1.0 / (double)gt_min;
    double mean = 0;
    for (int i = 0; i < GT_SIZES; i++) {
        unsigned n = (unsigned)(1.0 / (hi - bench_uniform(&r) * (hi - lo)));
        gt_size[i] = n > (unsigned)gt_max ? (unsigned)gt_max : n;
        mean += gt_size[i];
    }
    for (int i = 0; i < GT_OFFSETS; i++)
        gt_offset[i] = (unsigned)bench_below(&r, GT_SLOTS);
    printf("mean_size=%.1f\n", mean / GT_SIZES);
    /* every worker a thread of its own, the main thread waiting, as in the original (under
     * glibc, no worker on the main arena) */
    pthread_t *tid = bench_xmalloc((size_t)nthreads * sizeof *tid);
    uint64_t t0 = bench_now_ns();
    for (long t = 0; t < nthreads; t++)
        pthread_create(&tid[t], NULL, glibcthread_worker, (void *)(intptr_t)t);
    for (long t = 0; t < nthreads; t++)
        pthread_join(tid[t], NULL);
    double s = (double)(bench_now_ns() - t0) * 1e-9;
    free(tid);
    free(gt_size);
    free(gt_offset);
    printf("mops_per_s=%.3f\n", (double)(gt_iterations * nthreads) / s * 1e-6);
    return s;
}

/* ---- threads that leave one long-lived block each (mimalloc-bench's mleak) ------------- */

/* What mimalloc-bench runs (bench/mleak/mleak.c): rounds of 10 threads, started and joined
 * together; each thread callocs one object of 16 pointers (128 bytes), swaps it atomically
 * into one of 10 * 100 = 1,000 shared slots chosen at random and frees what it took out: an
 * object some earlier, exited thread left, or nothing. bench.sh runs `mleak 5` (500 rounds,
 * the "mleak10" row) and `mleak 50` (5,000 rounds, "mleak100") and records the time and the
 * peak RSS. The live data never exceeds 1,000 objects; an allocator that keeps what each
 * exited thread held (a heap, a partly used page or span) grows with the rounds instead. */

static long k_rounds, k_slots, k_words;
static void **k_slot;

static void *mleak_thread(void *arg)
{
    bench_rng r;
    bench_rng_seed(&r, seed * 2654435761u + (uint64_t)(intptr_t)arg);
    void *p = calloc((size_t)k_words, sizeof(void *));
    if (!p) {
        fprintf(stderr, "calloc failed\n");
        exit(1);
    }
    size_t i = (size_t)bench_below(&r, (uint64_t)k_slots);
    free(__atomic_exchange_n(&k_slot[i], p, __ATOMIC_ACQ_REL));
    return NULL;
}

static double run_mleak(int argc, char **argv)
{
    k_rounds = bench_opt_long(argc, argv, "rounds", 500);
    k_slots = bench_opt_long(argc, argv, "slots", 100 * nthreads);
    k_words = bench_opt_long(argc, argv, "words", 16);
    if (k_slots < 1)
        k_slots = 1;
    if (k_words < 1)
        k_words = 1;
    printf("rounds=%ld\nslots=%ld\nwords=%ld\n", k_rounds, k_slots, k_words);
    k_slot = calloc((size_t)k_slots, sizeof *k_slot);
    pthread_t *tid = bench_xmalloc((size_t)nthreads * sizeof *tid);
    long start_kb = bench_rss_kb();
    uint64_t t0 = bench_now_ns();
    for (long g = 0; g < k_rounds; g++) {
        for (long t = 0; t < nthreads; t++)
            if (pthread_create(&tid[t], NULL, mleak_thread, (void *)(intptr_t)(g * nthreads + t))) {
                fprintf(stderr, "pthread_create failed\n");
                exit(1);
            }
        for (long t = 0; t < nthreads; t++)
            pthread_join(tid[t], NULL);
    }
    double s = (double)(bench_now_ns() - t0) * 1e-9;
    /* resident size with every thread gone and at most `slots` objects live: what the
     * allocator kept of the exited threads (growth from the start of the rounds) */
    long end_kb = bench_rss_kb();
    long live = 0;
    for (long i = 0; i < k_slots; i++) {
        live += k_slot[i] != NULL;
        free(k_slot[i]);
    }
    free(k_slot);
    free(tid);
    printf("live_objects=%ld\njoined_mib=%.1f\ngrowth_mib=%.1f\nthreads_per_s=%.0f\n", live,
           (double)end_kb / 1024, (double)(end_kb - start_kb) / 1024,
           (double)(k_rounds * nthreads) / s);
    return s;
}

int main(int argc, char **argv)
{
    const char *test = bench_opt_str(argc, argv, "test", "larson");
    nthreads = bench_opt_long(argc, argv, "threads", 2);
    seed = (uint64_t)bench_opt_long(argc, argv, "seed", 1);
    if (nthreads < 1)
        nthreads = 1;
    printf("benchmark=mt\ntest=%s\nthreads=%ld\nseed=%llu\n", test, nthreads,
           (unsigned long long)seed);
    bench_print_allocator();
    pthread_barrier_init(&barrier, NULL, (unsigned)nthreads);
    double s;
    if (strcmp(test, "larson") == 0)
        s = run_larson(argc, argv);
    else if (strcmp(test, "xmalloc") == 0)
        s = run_xmalloc(argc, argv);
    else if (strcmp(test, "scratch") == 0)
        s = run_scratch(argc, argv);
    else if (strcmp(test, "churn") == 0)
        s = run_churn(argc, argv);
    else if (strcmp(test, "bulk") == 0)
        s = run_bulk(argc, argv);
    else if (strcmp(test, "large") == 0)
        s = run_large(argc, argv);
    else if (strcmp(test, "lifo") == 0)
        s = run_lifo(argc, argv);
    else if (strcmp(test, "live") == 0)
        s = run_live(argc, argv);
    else if (strcmp(test, "glibcthread") == 0)
        s = run_glibcthread(argc, argv);
    else if (strcmp(test, "mleak") == 0)
        s = run_mleak(argc, argv);
    else {
        fprintf(stderr,
                "unknown --test %s (larson, xmalloc, scratch, churn, bulk, large, lifo, live, "
                "glibcthread, mleak)\n",
                test);
        return 2;
    }
    pthread_barrier_destroy(&barrier);
    printf("time_s=%.6f\nmaxrss_kb=%ld\n", s, bench_maxrss_kb());
    return 0;
}
