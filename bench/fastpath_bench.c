/* SPDX-License-Identifier: MIT */
/*
 * fastpath_bench - the fast-path table of the Linux slab allocators talk, for malloc:
 * ns (and rdtsc ticks, where the CPU has them) per operation for
 *   alloc          `batch` mallocs in a row (then freed, untimed in this column)
 *   free           the `batch` frees in a row that follow
 *   pair           malloc immediately followed by free, `batch` times
 *   conc_alloc     alloc, on `threads` threads at once (barrier before each round)
 *   conc_free      free, on `threads` threads at once
 *   remote_free    thread A mallocs `batch` blocks, thread B frees them all (B timed)
 *   remote_alloc   A's mallocs in that ping-pong (refilling after remote frees)
 * Each figure is the median over `rounds` rounds. Ticks are rdtsc counts (the TSC runs
 * at a fixed rate, which is not necessarily the core clock).
 *
 * Options: --size 64 --batch 10000 --rounds 100 --threads 2
 */
#include "common.h"

#include <pthread.h>

static long size, batch, rounds, nthreads;
static pthread_barrier_t barrier;

struct times {
    double *alloc_ns, *free_ns, *alloc_tk, *free_tk;
};

static struct times times_new(void)
{
    struct times t;
    t.alloc_ns = bench_xmalloc((size_t)rounds * sizeof(double));
    t.free_ns = bench_xmalloc((size_t)rounds * sizeof(double));
    t.alloc_tk = bench_xmalloc((size_t)rounds * sizeof(double));
    t.free_tk = bench_xmalloc((size_t)rounds * sizeof(double));
    return t;
}

static void times_free(struct times *t)
{
    free(t->alloc_ns);
    free(t->free_ns);
    free(t->alloc_tk);
    free(t->free_tk);
}

/* One alloc-all/free-all round; the barrier (if any) lines threads up before each phase. */
static void alloc_free_rounds(struct times *t, int sync)
{
    void **p = bench_xmalloc((size_t)batch * sizeof *p);
    for (long r = 0; r < rounds; r++) {
        if (sync)
            pthread_barrier_wait(&barrier);
        uint64_t n0 = bench_now_ns(), k0 = bench_ticks();
        for (long i = 0; i < batch; i++)
            p[i] = malloc((size_t)size);
        uint64_t n1 = bench_now_ns(), k1 = bench_ticks();
        bench_escape(p);
        if (sync)
            pthread_barrier_wait(&barrier);
        uint64_t n2 = bench_now_ns(), k2 = bench_ticks();
        for (long i = 0; i < batch; i++)
            free(p[i]);
        uint64_t n3 = bench_now_ns(), k3 = bench_ticks();
        t->alloc_ns[r] = (double)(n1 - n0) / (double)batch;
        t->alloc_tk[r] = (double)(k1 - k0) / (double)batch;
        t->free_ns[r] = (double)(n3 - n2) / (double)batch;
        t->free_tk[r] = (double)(k3 - k2) / (double)batch;
    }
    free(p);
}

static void *conc_thread(void *arg)
{
    alloc_free_rounds(arg, 1);
    return NULL;
}

/* Remote free ping-pong. */
static void **shared;
static struct times remote;

static void *remote_freer(void *arg)
{
    (void)arg;
    for (long r = 0; r < rounds; r++) {
        pthread_barrier_wait(&barrier); /* A has allocated */
        uint64_t n0 = bench_now_ns(), k0 = bench_ticks();
        for (long i = 0; i < batch; i++)
            free(shared[i]);
        uint64_t n1 = bench_now_ns(), k1 = bench_ticks();
        remote.free_ns[r] = (double)(n1 - n0) / (double)batch;
        remote.free_tk[r] = (double)(k1 - k0) / (double)batch;
        pthread_barrier_wait(&barrier); /* B has freed */
    }
    return NULL;
}

static void report(const char *name, double *ns, double *tk)
{
    printf("%s_ns=%.2f\n", name, bench_median(ns, (size_t)rounds));
    if (BENCH_HAVE_RDTSC)
        printf("%s_ticks=%.1f\n", name, bench_median(tk, (size_t)rounds));
}

int main(int argc, char **argv)
{
    size = bench_opt_long(argc, argv, "size", 64);
    batch = bench_opt_long(argc, argv, "batch", 10000);
    rounds = bench_opt_long(argc, argv, "rounds", 100);
    nthreads = bench_opt_long(argc, argv, "threads", 2);
    if (nthreads < 1)
        nthreads = 1;
    printf("benchmark=fastpath\nsize=%ld\nbatch=%ld\nrounds=%ld\nthreads=%ld\nrdtsc=%d\n", size,
           batch, rounds, nthreads, BENCH_HAVE_RDTSC);
    bench_print_allocator();

    /* Single thread: alloc, free. */
    struct times st = times_new();
    alloc_free_rounds(&st, 0);
    report("alloc", st.alloc_ns, st.alloc_tk);
    report("free", st.free_ns, st.free_tk);

    /* Pair. */
    for (long r = 0; r < rounds; r++) {
        uint64_t n0 = bench_now_ns(), k0 = bench_ticks();
        for (long i = 0; i < batch; i++) {
            void *p = malloc((size_t)size);
            bench_escape(p);
            free(p);
        }
        uint64_t n1 = bench_now_ns(), k1 = bench_ticks();
        st.alloc_ns[r] = (double)(n1 - n0) / (double)batch;
        st.alloc_tk[r] = (double)(k1 - k0) / (double)batch;
    }
    report("pair", st.alloc_ns, st.alloc_tk);
    times_free(&st);

    /* Concurrent alloc and free. */
    pthread_barrier_init(&barrier, NULL, (unsigned)nthreads);
    pthread_t *tid = bench_xmalloc((size_t)nthreads * sizeof *tid);
    struct times *ct = bench_xmalloc((size_t)nthreads * sizeof *ct);
    for (long i = 0; i < nthreads; i++) {
        ct[i] = times_new();
        pthread_create(&tid[i], NULL, conc_thread, &ct[i]);
    }
    for (long i = 0; i < nthreads; i++)
        pthread_join(tid[i], NULL);
    pthread_barrier_destroy(&barrier);
    /* Median over all threads' rounds. */
    {
        size_t n = (size_t)(nthreads * rounds);
        double *a = bench_xmalloc(n * sizeof *a), *f = bench_xmalloc(n * sizeof *f);
        double *ak = bench_xmalloc(n * sizeof *a), *fk = bench_xmalloc(n * sizeof *f);
        for (long i = 0; i < nthreads; i++) {
            memcpy(a + i * rounds, ct[i].alloc_ns, (size_t)rounds * sizeof *a);
            memcpy(f + i * rounds, ct[i].free_ns, (size_t)rounds * sizeof *a);
            memcpy(ak + i * rounds, ct[i].alloc_tk, (size_t)rounds * sizeof *a);
            memcpy(fk + i * rounds, ct[i].free_tk, (size_t)rounds * sizeof *a);
            times_free(&ct[i]);
        }
        long saved = rounds;
        rounds = (long)n;
        report("conc_alloc", a, ak);
        report("conc_free", f, fk);
        rounds = saved;
        free(a);
        free(f);
        free(ak);
        free(fk);
    }
    free(ct);
    free(tid);

    /* Remote free: this thread allocates, another frees. */
    remote = times_new();
    shared = bench_xmalloc((size_t)batch * sizeof *shared);
    pthread_barrier_init(&barrier, NULL, 2);
    pthread_t freer;
    pthread_create(&freer, NULL, remote_freer, NULL);
    for (long r = 0; r < rounds; r++) {
        uint64_t n0 = bench_now_ns(), k0 = bench_ticks();
        for (long i = 0; i < batch; i++)
            shared[i] = malloc((size_t)size);
        uint64_t n1 = bench_now_ns(), k1 = bench_ticks();
        remote.alloc_ns[r] = (double)(n1 - n0) / (double)batch;
        remote.alloc_tk[r] = (double)(k1 - k0) / (double)batch;
        pthread_barrier_wait(&barrier);
        pthread_barrier_wait(&barrier);
    }
    pthread_join(freer, NULL);
    pthread_barrier_destroy(&barrier);
    report("remote_alloc", remote.alloc_ns, remote.alloc_tk);
    report("remote_free", remote.free_ns, remote.free_tk);
    times_free(&remote);
    free(shared);
    printf("maxrss_kb=%ld\n", bench_maxrss_kb());
    return 0;
}
