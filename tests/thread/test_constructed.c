/* SPDX-License-Identifier: MIT */
/*
 * test_constructed.c - the object cache's promise at any working-set size (docs/design.md
 * §4, Bonwick & Adams §3.6): objects freed to a cache with a constructor stay constructed
 * while the program keeps using them, however many there are. Constructor calls are
 * counted, never timed. Modes (argv[1]):
 *
 *  single N SIZE  one thread: N objects of SIZE bytes allocated, then all freed, 50 times;
 *  threads        two threads, each cycling its own 100,000 objects of 64 bytes in one cache;
 *  prodcons       a producer allocates batches of 50,000 objects of 64 bytes and hands each
 *                 batch to a consumer thread, which frees it (a flow through the depot);
 *  shrink HOW     100,000 objects of 64 bytes cycled, then the working set shrinks to
 *                 1,000: the depot's idle magazines go back through the destructor within
 *                 a few purge intervals, on the purger thread (HOW `thread`: run with
 *                 USLAB_PURGER=thread) or, in a process without one (`inline`:
 *                 USLAB_PURGER=inline), in the cache's own allocation slow path;
 *  inflight       a thread's reap flushes its 100 objects and its destructor stops at the
 *                 first: meanwhile another thread's statistics count them as the cache's
 *                 (cached), not the program's (active), and its own reap returns without
 *                 waiting for that flush (constructed_shrink_thread met a purger pass so).
 *
 * Each object carries the constructor's mark, checked at every allocation (the state the
 * constructor made, left by the previous user) and by the destructor. Passes: fewer than 1%
 * extra constructor calls per round beyond the objects the working set needs. The modes but
 * `shrink` run with a purge delay of 10 minutes (tests/thread/CMakeLists.txt): no reap is
 * due while they run, however slow the machine, so what they check is the depot's own
 * rule (it keeps every magazine); the reap's rules are unit_depot_flow's and `shrink`'s. Before the
 * depot followed the working set (a fixed 1 MiB), 100,000 x 64 B took 83% extra per round,
 * 20,000 x 512 B 89%.
 */
#include "mt_common.h"

#include <semaphore.h>
#include <time.h>

#define ROUNDS     MT_SCALED(50)
#define MARK       0x5eed0b1ec7ull
#define BATCH      50000
#define PC_BATCHES 40

struct obj {
    uint64_t mark;   /* MARK while constructed */
    uint64_t serial; /* the constructor call that made it */
    uint64_t use;    /* written by each user, left as found */
};

static uslab_cache_t *cache;
static uint64_t ctors, dtors, bad;
static int hold;                /* inflight: the next destructor call waits for `release` */
static sem_t held, release_sem; /* posted by that call / by the main thread */

static int ctor(void *p, void *arg)
{
    (void)arg;
    struct obj *o = p;
    o->mark = MARK;
    o->serial = __atomic_add_fetch(&ctors, 1, __ATOMIC_RELAXED);
    o->use = 0;
    return 0;
}

static void dtor(void *p, void *arg)
{
    (void)arg;
    struct obj *o = p;
    if (o->mark != MARK || o->use != 0)
        __atomic_add_fetch(&bad, 1, __ATOMIC_RELAXED);
    o->mark = 0;
    if (__atomic_exchange_n(&hold, 0, __ATOMIC_ACQ_REL)) {
        sem_post(&held);
        while (sem_wait(&release_sem) != 0)
            ;
    }
    __atomic_add_fetch(&dtors, 1, __ATOMIC_RELAXED);
}

static struct obj *take(void)
{
    struct obj *o = uslab_cache_alloc(cache);
    CHECK(o != NULL, "uslab_cache_alloc");
    CHECK(o->mark == MARK && o->use == 0, "an object handed out not in its constructed state");
    o->use = 1; /* in use; put back as the constructor left it before the free */
    return o;
}

static void give(struct obj *o)
{
    o->use = 0;
    uslab_cache_free(cache, o);
}

/* One thread's rounds over n objects. */
struct cycle {
    size_t n;
    struct obj **v;
};

static void *cycle_main(void *arg)
{
    struct cycle *c = arg;
    for (int r = 0; r < ROUNDS; r++) {
        for (size_t i = 0; i < c->n; i++)
            c->v[i] = take();
        for (size_t i = 0; i < c->n; i++)
            give(c->v[i]);
    }
    return NULL;
}

static void check_extra(const char *what, uint64_t needed, uint64_t allocations)
{
    uint64_t made = __atomic_load_n(&ctors, __ATOMIC_RELAXED);
    uint64_t extra = made > needed ? made - needed : 0;
    double pct = 100.0 * (double)extra / (double)allocations;
    printf("%s: %llu allocations, %llu constructor calls, %llu needed: %.3f%% extra\n", what,
           (unsigned long long)allocations, (unsigned long long)made, (unsigned long long)needed,
           pct);
    CHECK(__atomic_load_n(&bad, __ATOMIC_RELAXED) == 0, "%llu objects destructed out of state",
          (unsigned long long)__atomic_load_n(&bad, __ATOMIC_RELAXED));
    CHECK(pct < 1.0, "%s: %.2f%% extra constructor calls (%llu for %llu allocations)", what, pct,
          (unsigned long long)extra, (unsigned long long)allocations);
}

static void run_single(size_t n, size_t size)
{
    cache = uslab_cache_create("constructed", size, 0, ctor, dtor, NULL, NULL, 0);
    CHECK(cache != NULL, "create");
    struct cycle c = {n, calloc(n, sizeof(struct obj *))};
    CHECK(c.v != NULL, "calloc");
    cycle_main(&c);
    char what[64];
    snprintf(what, sizeof what, "single %zu x %zu B", n, size);
    check_extra(what, n, (uint64_t)n * ROUNDS);
    free(c.v);
}

static void run_threads(void)
{
    enum { N = 100000 };
    cache = uslab_cache_create("constructed", 64, 0, ctor, dtor, NULL, NULL, 0);
    CHECK(cache != NULL, "create");
    struct cycle c[2];
    pthread_t t[2];
    for (int i = 0; i < 2; i++) {
        c[i].n = N;
        c[i].v = calloc(N, sizeof(struct obj *));
        CHECK(c[i].v != NULL, "calloc");
        CHECK(pthread_create(&t[i], NULL, cycle_main, &c[i]) == 0, "pthread_create");
    }
    for (int i = 0; i < 2; i++) {
        CHECK(pthread_join(t[i], NULL) == 0, "pthread_join");
        free(c[i].v);
    }
    check_extra("threads 2 x 100000 x 64 B", 2 * N, 2ull * N * ROUNDS);
}

/* prodcons: a queue of at most two batches between the threads. */
static struct obj **queue[2];
static int queued, produced_all;
static pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qcond = PTHREAD_COND_INITIALIZER;

static void *consumer_main(void *arg)
{
    for (;;) {
        pthread_mutex_lock(&qlock);
        while (queued == 0 && !produced_all)
            pthread_cond_wait(&qcond, &qlock);
        if (queued == 0) {
            pthread_mutex_unlock(&qlock);
            return arg;
        }
        struct obj **b = queue[0];
        queue[0] = queue[1];
        queued--;
        pthread_cond_broadcast(&qcond);
        pthread_mutex_unlock(&qlock);
        for (size_t i = 0; i < BATCH; i++)
            give(b[i]);
        free(b);
    }
}

static void run_prodcons(void)
{
    cache = uslab_cache_create("constructed", 64, 0, ctor, dtor, NULL, NULL, 0);
    CHECK(cache != NULL, "create");
    pthread_t t;
    CHECK(pthread_create(&t, NULL, consumer_main, NULL) == 0, "pthread_create");
    for (int k = 0; k < PC_BATCHES; k++) {
        struct obj **b = malloc(BATCH * sizeof *b);
        CHECK(b != NULL, "malloc");
        for (size_t i = 0; i < BATCH; i++)
            b[i] = take();
        pthread_mutex_lock(&qlock);
        while (queued == 2)
            pthread_cond_wait(&qcond, &qlock);
        queue[queued++] = b;
        pthread_cond_broadcast(&qcond);
        pthread_mutex_unlock(&qlock);
    }
    pthread_mutex_lock(&qlock);
    produced_all = 1;
    pthread_cond_broadcast(&qcond);
    pthread_mutex_unlock(&qlock);
    CHECK(pthread_join(t, NULL) == 0, "pthread_join");
    /* At most four batches exist at once: two queued, one being freed, one being made. */
    check_extra("prodcons 40 batches of 50000 x 64 B", 4 * BATCH, (uint64_t)PC_BATCHES * BATCH);
}

static void run_shrink(const char *how)
{
    enum { N = 100000, KEEP = 1000 };
    cache = uslab_cache_create("constructed", 64, 0, ctor, dtor, NULL, NULL, 0);
    CHECK(cache != NULL, "create");
    struct cycle c = {N, calloc(N, sizeof(struct obj *))};
    CHECK(c.v != NULL, "calloc");
    /* The working set in use (the reaps that the 100 ms delay makes during it are not
     * checked here: the other modes run with no reap due, so that a slow machine cannot
     * fail them). */
    cycle_main(&c);
    /* From now on the program uses 1,000 of them. What it stopped using goes back within a
     * few purge intervals (USLAB_PURGE_DELAY=100: a pass every 50 ms); 10 s is the bound
     * of a loaded machine, not a measurement. The thread cache keeps its two magazines. */
    int inline_pass = strcmp(how, "inline") == 0;
    uint64_t want = N - KEEP - 2 * 256;
    for (int waited = 0; waited < 10000 && __atomic_load_n(&dtors, __ATOMIC_RELAXED) < want;
         waited += 10) {
        for (size_t i = 0; i < KEEP; i++)
            c.v[i] = take();
        for (size_t i = 0; i < KEEP; i++)
            give(c.v[i]);
        if (inline_pass) {
            /* Slow paths of this cache, where a single-threaded process's passes run: more
             * than two magazines' worth taken from the depot and given back. */
            for (size_t i = 0; i < 600; i++)
                c.v[i] = take();
            for (size_t i = 0; i < 600; i++)
                give(c.v[i]);
        }
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    uint64_t d = __atomic_load_n(&dtors, __ATOMIC_RELAXED);
    printf("shrink (%s): %llu of %d objects destructed after the working set fell to %d\n", how,
           (unsigned long long)d, N, KEEP);
    CHECK(d >= want, "%s: only %llu of %d objects given back after the working set shrank", how,
          (unsigned long long)d, N);
    free(c.v);
}

enum { INFLIGHT = 100 };

static void *inflight_thread(void *arg)
{
    (void)arg;
    struct obj *v[INFLIGHT];
    for (size_t i = 0; i < INFLIGHT; i++)
        v[i] = take();
    for (size_t i = 0; i < INFLIGHT; i++)
        give(v[i]);
    __atomic_store_n(&hold, 1, __ATOMIC_RELEASE);
    uslab_cache_reap(cache); /* its first destructor call waits for the main thread */
    return NULL;
}

static void run_inflight(void)
{
    cache = uslab_cache_create("constructed", 64, 0, ctor, dtor, NULL, NULL, 0);
    CHECK(cache != NULL, "create");
    CHECK(sem_init(&held, 0, 0) == 0 && sem_init(&release_sem, 0, 0) == 0, "sem_init");
    pthread_t t;
    CHECK(pthread_create(&t, NULL, inflight_thread, NULL) == 0, "pthread_create");
    while (sem_wait(&held) != 0)
        ;
    struct uslab_cache_stats st;
    for (int reaped = 0; reaped < 2; reaped++) {
        if (reaped)
            uslab_cache_reap(cache); /* returns: it does not wait for the other's flush */
        uslab_cache_stats(cache, &st);
        CHECK(st.active_objects == 0 && st.cached_objects == INFLIGHT,
              "%s, during another thread's flush of %d: %zu active, %zu cached",
              reaped ? "after a reap" : "before a reap", INFLIGHT, st.active_objects,
              st.cached_objects);
    }
    sem_post(&release_sem);
    CHECK(pthread_join(t, NULL) == 0, "pthread_join");
    printf("inflight: %zu objects in another thread's flush counted as cached\n", (size_t)INFLIGHT);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "single";
    if (strcmp(mode, "single") == 0)
        run_single(argc > 2 ? (size_t)atol(argv[2]) : 100000,
                   argc > 3 ? (size_t)atol(argv[3]) : 64);
    else if (strcmp(mode, "threads") == 0)
        run_threads();
    else if (strcmp(mode, "prodcons") == 0)
        run_prodcons();
    else if (strcmp(mode, "shrink") == 0)
        run_shrink(argc > 2 ? argv[2] : "thread");
    else if (strcmp(mode, "inflight") == 0)
        run_inflight();
    else
        CHECK(0, "unknown mode %s", mode);
    /* Everything cached goes on a reap, through the destructor; what a purger pass
     * (`shrink thread`) is flushing at that instant is the cache's until its destructors
     * return, then back in the slabs too (10 s: the bound of a loaded machine). */
    uslab_cache_reap(cache);
    struct uslab_cache_stats st;
    uslab_cache_stats(cache, &st);
    CHECK(st.active_objects == 0, "after the reap: %zu active", st.active_objects);
    for (int waited = 0; st.cached_objects != 0 && waited < 10000; waited += 10) {
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
        uslab_cache_reap(cache);
        uslab_cache_stats(cache, &st);
    }
    CHECK(st.active_objects == 0 && st.cached_objects == 0,
          "after the reap: %zu active, %zu cached", st.active_objects, st.cached_objects);
    CHECK(__atomic_load_n(&ctors, __ATOMIC_RELAXED) == __atomic_load_n(&dtors, __ATOMIC_RELAXED),
          "%llu constructed, %llu destructed",
          (unsigned long long)__atomic_load_n(&ctors, __ATOMIC_RELAXED),
          (unsigned long long)__atomic_load_n(&dtors, __ATOMIC_RELAXED));
    uslab_cache_destroy(cache);
    TEST_DONE();
}
