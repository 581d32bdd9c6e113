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
 *   rptest    rpmalloc's benchmark, as mimalloc-bench's rptestN runs it: per loop each
 *             thread frees and refills part of its 1,000 slots (8 to 16,000 bytes, linear
 *             drop-off; calloc, or memalign + memset), frees the batches other threads sent
 *             it and, every 2nd loop, sends a batch of new blocks to the next thread.
 *             sample_live_mib, sample_rss_mib, overhead_pct: rptest's memory sample.
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
 *   rptest: --loops 500 --slots 1000 --ops 100 --min 8 --max 16000 --cross 2 --rounds 2
 */
#include "common.h"

#include <malloc.h> /* memalign, as rptest calls it */
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
        bench_write_pages(p, n, (unsigned char)i);
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

/* ---- rpmalloc's benchmark (mimalloc-bench's rptestN) ----------------------------------- */

/* What mimalloc-bench runs (bench/rptest/rptest.c, from mjansson/rpmalloc-benchmark, as
 * `rptest <procs> 0 1 2 500 1000 100 8 16000` in bench.sh): random sizes 8 to 16,000 bytes
 * with a linear drop-off, a cross-thread batch every 2nd loop, 500 loops per pass, 1,000
 * slots per thread, an operation count of 100. Each thread does two passes; the program
 * starts its threads twice. A loop of a pass:
 *  - frees 0.8 * ops * p% slots (p drawn from 30..99, a table of 257 shared percentages
 *    indexed by pass + loop), walking the slots with a step of the second prime >= 7 that
 *    does not divide the slot count (11 for 1,000); empty slots are skipped;
 *  - frees every block other threads handed it since its last loop (then the batch's
 *    pointer array and header);
 *  - mallocs ops * q% blocks (q from 30..99, a table of 311), each into the slot a step
 *    of the first such prime (7) reaches, freeing the occupant first; the sizes follow a
 *    table of 2,000, a thread starting each pass at ((thread + 1) * (pass + 1) * 37) mod
 *    2,000;
 *  - every 2nd loop, mallocs as many blocks again into a batch and pushes it on the next
 *    thread's list (round robin, never itself).
 * A block below 4 KiB comes, in turn, from calloc, memalign(8) or memalign(16) followed by
 * a memset of the whole block; larger ones from calloc. Each is written again: its size in
 * the first 4 bytes, a byte in each further page, the last byte; a free reads the size
 * back first. The linear drop-off makes a size min + (max - min) * u3 * |1 - u1 - u2|
 * (mean min + (max - min) / 6, about 2.7 KiB here). At the end of a pass the threads meet,
 * the process's RSS and the bytes live in the slots are sampled, then each thread frees its
 * slots. rptest reports memory operations per thread-second of the loops; here time_s is
 * the wall time of the whole run and mops_per_s counts every malloc, calloc, memalign and
 * free. rptest stops sending batches once a thread has finished its loops; here the threads
 * meet before draining instead, so every batch is sent and freed. */

#define RP_SIZES      2000
#define RP_FREE_PCTS  257
#define RP_ALLOC_PCTS 311

typedef struct rp_batch {
    struct rp_batch *next;
    size_t count;
    void **blocks;
} rp_batch;

typedef struct {
    _Alignas(BENCH_CACHE_LINE) rp_batch *inbox; /* pushed by others, taken whole */
    uint64_t ops;
    uint64_t sent_bytes, received_bytes;
    uint64_t live_bytes; /* asked for, in the thread's own slots */
} rp_thread;

static long r_loops, r_slots, r_ops, r_min, r_max, r_cross, r_rounds;
static size_t r_size[RP_SIZES], r_free_count[RP_FREE_PCTS], r_alloc_count[RP_ALLOC_PCTS];
static size_t r_alloc_step, r_free_step;
static rp_thread *r_thread;
static long r_sample_rss_kb;
static uint64_t r_sample_live;

/* The smallest prime >= from that does not divide n. */
static size_t rp_coprime(size_t from, size_t n)
{
    for (size_t p = from;; p++) {
        int prime = p > 1;
        for (size_t d = 2; d * d <= p && prime; d++)
            prime = p % d != 0;
        if (prime && n % p != 0)
            return p;
    }
}

static unsigned char *rp_alloc(size_t n, unsigned turn)
{
    static const size_t align[3] = {0, 8, 16};
    size_t a = n < 4096 ? align[turn % 3] : 0;
    unsigned char *p;
    if (a) {
        p = memalign(a, n);
        if (p)
            memset(p, 0xCD, n);
    } else {
        p = calloc(1, n);
    }
    if (!p) {
        fprintf(stderr, "allocation of %zu bytes failed\n", n);
        exit(1);
    }
    int32_t n32 = (int32_t)n;
    memcpy(p, &n32, sizeof n32);
    for (size_t page = 1; page < (n - 1) / 4096; page++)
        p[page * 4096] = 1;
    p[n - 1] = 1;
    return p;
}

static size_t rp_size_of(const void *p)
{
    int32_t n32;
    memcpy(&n32, p, sizeof n32);
    return (size_t)n32;
}

static void rp_drain(rp_thread *me)
{
    rp_batch *b = __atomic_exchange_n(&me->inbox, NULL, __ATOMIC_ACQUIRE);
    while (b) {
        for (size_t i = 0; i < b->count; i++) {
            me->received_bytes += rp_size_of(b->blocks[i]);
            free(b->blocks[i]);
        }
        rp_batch *next = b->next;
        me->ops += b->count + 2;
        free(b->blocks);
        free(b);
        b = next;
    }
}

static void rp_push(rp_thread *to, rp_batch *b)
{
    rp_batch *head = __atomic_load_n(&to->inbox, __ATOMIC_RELAXED);
    do
        b->next = head;
    while (
        !__atomic_compare_exchange_n(&to->inbox, &head, b, 1, __ATOMIC_RELEASE, __ATOMIC_RELAXED));
}

static void *rptest_worker(void *arg)
{
    long id = (long)(intptr_t)arg;
    rp_thread *me = &r_thread[id];
    void **slot = calloc((size_t)r_slots, sizeof *slot);
    if (!slot) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    me->ops++;
    size_t alloc_at = 0, free_at = 0, to = (size_t)id;
    unsigned turn = 0;
    pthread_barrier_wait(&barrier);
    for (long pass = 0; pass < 2; pass++) {
        size_t si = (size_t)((id + 1) * (pass + 1) * 37) % RP_SIZES;
        for (long loop = 0; loop < r_loops; loop++) {
            size_t nfree = r_free_count[(size_t)(pass + loop) % RP_FREE_PCTS];
            size_t nalloc = r_alloc_count[(size_t)(pass + loop) % RP_ALLOC_PCTS];
            for (size_t k = 0; k < nfree; k++) {
                if (slot[free_at]) {
                    me->live_bytes -= rp_size_of(slot[free_at]);
                    free(slot[free_at]);
                    slot[free_at] = NULL;
                    me->ops++;
                }
                free_at = (free_at + r_free_step) % (size_t)r_slots;
            }
            rp_drain(me);
            for (size_t k = 0; k < nalloc; k++) {
                if (slot[alloc_at]) {
                    me->live_bytes -= rp_size_of(slot[alloc_at]);
                    free(slot[alloc_at]);
                    me->ops++;
                }
                size_t n = r_size[si];
                si = (si + 1) % RP_SIZES;
                slot[alloc_at] = rp_alloc(n, turn++);
                me->live_bytes += n;
                me->ops++;
                alloc_at = (alloc_at + r_alloc_step) % (size_t)r_slots;
            }
            if (r_cross && nthreads > 1 && loop % r_cross == 0) {
                rp_batch *b = malloc(sizeof *b);
                void **blocks = malloc(nalloc * sizeof *blocks);
                if (!b || !blocks) {
                    fprintf(stderr, "out of memory\n");
                    exit(1);
                }
                b->count = nalloc;
                b->blocks = blocks;
                for (size_t k = 0; k < nalloc; k++) {
                    size_t n = r_size[si];
                    si = (si + 1) % RP_SIZES;
                    blocks[k] = rp_alloc(n, turn++);
                    me->sent_bytes += n;
                }
                me->ops += nalloc + 2;
                to = (to + 1) % (size_t)nthreads;
                if (to == (size_t)id)
                    to = (to + 1) % (size_t)nthreads;
                rp_push(&r_thread[to], b);
            }
        }
        pthread_barrier_wait(&barrier); /* nothing more is sent */
        rp_drain(me);
        pthread_barrier_wait(&barrier);
        if (id == 0) { /* the sample: every batch freed, every slot still held */
            long rss = bench_rss_kb();
            uint64_t live = 0;
            for (long t = 0; t < nthreads; t++)
                live += r_thread[t].live_bytes;
            if (rss > r_sample_rss_kb) {
                r_sample_rss_kb = rss;
                r_sample_live = live;
            }
        }
        pthread_barrier_wait(&barrier);
        for (long k = 0; k < r_slots; k++)
            if (slot[k]) {
                me->live_bytes -= rp_size_of(slot[k]);
                free(slot[k]);
                slot[k] = NULL;
                me->ops++;
            }
    }
    free(slot);
    me->ops++;
    return NULL;
}

static double run_rptest(int argc, char **argv)
{
    r_loops = bench_opt_long(argc, argv, "loops", 500);
    r_slots = bench_opt_long(argc, argv, "slots", 1000);
    r_ops = bench_opt_long(argc, argv, "ops", 100);
    r_min = bench_opt_long(argc, argv, "min", 8);
    r_max = bench_opt_long(argc, argv, "max", 16000);
    r_cross = bench_opt_long(argc, argv, "cross", 2);
    r_rounds = bench_opt_long(argc, argv, "rounds", 2);
    if (r_slots < 1)
        r_slots = 1;
    if (r_min < (long)sizeof(int32_t))
        r_min = (long)sizeof(int32_t);
    if (r_max < r_min)
        r_max = r_min;
    if (r_cross < 0)
        r_cross = 0;
    printf("loops=%ld\nslots=%ld\nops=%ld\nmin=%ld\nmax=%ld\ncross=%ld\nrounds=%ld\n", r_loops,
           r_slots, r_ops, r_min, r_max, r_cross, r_rounds);
    bench_rng r;
    bench_rng_seed(&r, seed);
    double range = (double)(r_max - r_min), mean = 0;
    for (int i = 0; i < RP_SIZES; i++) { /* linear drop-off: |1 - u1 - u2| has density 2(1-x) */
        double u1 = bench_uniform(&r), u2 = bench_uniform(&r), u3 = bench_uniform(&r);
        r_size[i] = (size_t)r_min + (size_t)(range * u3 * fabs(1.0 - u1 - u2));
        mean += (double)r_size[i];
    }
    for (int i = 0; i < RP_FREE_PCTS; i++)
        r_free_count[i] = (size_t)(0.8 * (double)r_ops * (double)(30 + bench_below(&r, 70)) / 100);
    for (int i = 0; i < RP_ALLOC_PCTS; i++)
        r_alloc_count[i] = (size_t)((double)r_ops * (double)(30 + bench_below(&r, 70)) / 100);
    r_alloc_step = rp_coprime(7, (size_t)r_slots);
    r_free_step = rp_coprime(r_alloc_step + 1, (size_t)r_slots);
    printf("mean_size=%.1f\nalloc_step=%zu\nfree_step=%zu\n", mean / RP_SIZES, r_alloc_step,
           r_free_step);
    r_thread = aligned_alloc(BENCH_CACHE_LINE, (size_t)nthreads * sizeof *r_thread);
    if (!r_thread) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    memset(r_thread, 0, (size_t)nthreads * sizeof *r_thread);
    pthread_t *tid = bench_xmalloc((size_t)nthreads * sizeof *tid);
    uint64_t t0 = bench_now_ns();
    for (long round = 0; round < r_rounds; round++) { /* new threads each round */
        for (long t = 0; t < nthreads; t++)
            pthread_create(&tid[t], NULL, rptest_worker, (void *)(intptr_t)t);
        for (long t = 0; t < nthreads; t++)
            pthread_join(tid[t], NULL);
    }
    double s = (double)(bench_now_ns() - t0) * 1e-9;
    uint64_t ops = 0, sent = 0, received = 0;
    for (long t = 0; t < nthreads; t++) {
        ops += r_thread[t].ops;
        sent += r_thread[t].sent_bytes;
        received += r_thread[t].received_bytes;
    }
    if (sent != received) {
        fprintf(stderr, "rptest: %llu bytes sent across threads, %llu received\n",
                (unsigned long long)sent, (unsigned long long)received);
        exit(1);
    }
    free(tid);
    free(r_thread);
    /* rptest's memory figures: the sample with the largest RSS, and its overhead over the
     * bytes live in the slots */
    printf("sample_live_mib=%.1f\nsample_rss_mib=%.1f\noverhead_pct=%.0f\n",
           (double)r_sample_live / 1048576, (double)r_sample_rss_kb / 1024,
           100.0 * ((double)r_sample_rss_kb * 1024 - (double)r_sample_live) /
               (double)(r_sample_live ? r_sample_live : 1));
    printf("mops_per_s=%.3f\n", (double)ops / s * 1e-6);
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
    else if (strcmp(test, "rptest") == 0)
        s = run_rptest(argc, argv);
    else {
        fprintf(stderr,
                "unknown --test %s (larson, xmalloc, scratch, churn, bulk, large, lifo, live, "
                "glibcthread, mleak, rptest)\n",
                test);
        return 2;
    }
    pthread_barrier_destroy(&barrier);
    printf("time_s=%.6f\nmaxrss_kb=%ld\n", s, bench_maxrss_kb());
    return 0;
}
