/* SPDX-License-Identifier: MIT */
/*
 * test_threads_cache.c - several threads allocate and free at random from shared caches,
 * verifying every object's contents, and hand objects to each other through a locked
 * queue, so many objects are freed by a thread that did not allocate them. A sharded set of
 * live pointers checks that no object is handed out twice. Constructor and destructor
 * calls balance at the end.
 * Usage: test_threads_cache [OPS_PER_THREAD [THREADS [SEED]]]  (default 500000, 6, 1)
 */
#include "check.h"
#include "testutil.h"
#include "uslab.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#define NCACHES   5
#define MAXLIVE   2048 /* per thread and cache */
#define QCAP      4096
#define NSHARDS   64
#define CTOR_SEED 0xc7057eedull

static const struct spec {
    size_t size, align;
    unsigned flags;
    int ctor;
} specs[NCACHES] = {
    {32, 0, 0, 1},      {200, 8, 0, 0}, {1000, 0, USLAB_CACHE_NOMAGAZINE, 1},
    {4096, 4096, 0, 0}, {24, 8, 0, 0},
};

static uslab_cache_t *caches[NCACHES];
static long ctor_calls[NCACHES], dtor_calls[NCACHES], bad_dtor;

static uint64_t ctor_id(const void *obj)
{
    return (uintptr_t)obj ^ CTOR_SEED;
}

static int mt_ctor(void *obj, void *arg)
{
    size_t k = (size_t)(uintptr_t)arg;
    pattern_fill(obj, specs[k].size, ctor_id(obj));
    __atomic_fetch_add(&ctor_calls[k], 1, __ATOMIC_RELAXED);
    return 0;
}

static void mt_dtor(void *obj, void *arg)
{
    size_t k = (size_t)(uintptr_t)arg;
    if (pattern_check(obj, specs[k].size, ctor_id(obj)) != (size_t)-1)
        __atomic_fetch_add(&bad_dtor, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&dtor_calls[k], 1, __ATOMIC_RELAXED);
}

/* ---- sharded live set ---------------------------------------------------------------- */

static struct shard {
    pthread_mutex_t lock;
    struct ptrset set;
} shards[NSHARDS];

static struct shard *shard_of(const void *p)
{
    return &shards[(splitmix64((uintptr_t)p) >> 20) % NSHARDS];
}

static int live_insert(const void *p)
{
    struct shard *s = shard_of(p);
    pthread_mutex_lock(&s->lock);
    int ok = ptrset_insert(&s->set, p);
    pthread_mutex_unlock(&s->lock);
    return ok;
}

static int live_remove(const void *p)
{
    struct shard *s = shard_of(p);
    pthread_mutex_lock(&s->lock);
    int ok = ptrset_remove(&s->set, p);
    pthread_mutex_unlock(&s->lock);
    return ok;
}

/* ---- objects and the hand-off queue -------------------------------------------------- */

struct rec {
    void *p;
    uint64_t id;
    int k;
    int owner; /* thread that allocated it */
};

static struct {
    pthread_mutex_t lock;
    struct rec q[QCAP];
    size_t head, n;
    uint64_t handed, taken;
} queue = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int queue_push(const struct rec *r)
{
    pthread_mutex_lock(&queue.lock);
    int ok = queue.n < QCAP;
    if (ok) {
        queue.q[(queue.head + queue.n) % QCAP] = *r;
        queue.n++;
        queue.handed++;
    }
    pthread_mutex_unlock(&queue.lock);
    return ok;
}

static int queue_pop(struct rec *r)
{
    pthread_mutex_lock(&queue.lock);
    int ok = queue.n > 0;
    if (ok) {
        *r = queue.q[queue.head];
        queue.head = (queue.head + 1) % QCAP;
        queue.n--;
        queue.taken++;
    }
    pthread_mutex_unlock(&queue.lock);
    return ok;
}

static void check_obj(const struct rec *r)
{
    size_t bad = pattern_check(r->p, specs[r->k].size, r->id);
    CHECK(bad == (size_t)-1,
          "cache %d: object %p (id %" PRIx64 ", from thread %d) corrupted at %zu", r->k, r->p,
          r->id, r->owner, bad);
}

/* Checks r, drops it from the live set and frees it to its cache. */
static void retire(const struct rec *r)
{
    check_obj(r);
    CHECK(live_remove(r->p), "%p not live", r->p);
    if (specs[r->k].ctor)
        pattern_fill(r->p, specs[r->k].size, ctor_id(r->p));
    uslab_cache_free(caches[r->k], r->p);
}

static uint64_t ops_per_thread = 500000;

struct thread {
    pthread_t t;
    int tid;
    uint64_t seed;
    struct rec live[NCACHES][MAXLIVE];
    size_t nlive[NCACHES];
    uint64_t next_id, foreign_frees;
};

static void adopt(struct thread *t, void *p, int k)
{
    CHECK(p, "allocation from cache %d failed", k);
    size_t align = specs[k].align ? specs[k].align : (specs[k].size >= 16 ? 16 : 8);
    CHECK((uintptr_t)p % align == 0, "alignment");
    CHECK(live_insert(p), "thread %d: %p from cache %d handed out while live", t->tid, p, k);
    if (specs[k].ctor)
        CHECK(pattern_check(p, specs[k].size, ctor_id(p)) == (size_t)-1,
              "object of cache %d not in constructed state", k);
    struct rec *r = &t->live[k][t->nlive[k]++];
    r->p = p;
    r->k = k;
    r->owner = t->tid;
    r->id = ((uint64_t)t->tid << 48) | t->next_id++;
    pattern_fill(p, specs[k].size, r->id);
}

static void *worker(void *arg)
{
    struct thread *t = arg;
    struct rng r = {t->seed};
    void *buf[32];
    for (uint64_t op = 0; op < ops_per_thread; op++) {
        int k = (int)rng_below(&r, NCACHES);
        unsigned x = (unsigned)rng_below(&r, 1000);
        size_t *n = &t->nlive[k];
        if (x < 450) {
            if (*n < MAXLIVE)
                adopt(t, uslab_cache_alloc(caches[k]), k);
        } else if (x < 850) {
            if (*n) {
                size_t i = rng_below(&r, *n);
                struct rec rc = t->live[k][i];
                t->live[k][i] = t->live[k][--*n];
                if (rc.owner != t->tid)
                    t->foreign_frees++;
                retire(&rc);
            }
        } else if (x < 920) { /* hand an object to another thread */
            if (*n) {
                size_t i = rng_below(&r, *n);
                check_obj(&t->live[k][i]);
                if (queue_push(&t->live[k][i]))
                    t->live[k][i] = t->live[k][--*n];
            }
        } else if (x < 990) { /* take one handed over */
            struct rec rc;
            if (queue_pop(&rc)) {
                check_obj(&rc);
                if (t->nlive[rc.k] < MAXLIVE)
                    t->live[rc.k][t->nlive[rc.k]++] = rc;
                else {
                    t->foreign_frees += rc.owner != t->tid;
                    retire(&rc);
                }
            }
        } else if (x < 995) { /* bulk */
            size_t m = 1 + rng_below(&r, 32);
            if (*n + m <= MAXLIVE) {
                CHECK(uslab_cache_alloc_bulk(caches[k], m, buf) == m, "bulk");
                for (size_t i = 0; i < m; i++)
                    adopt(t, buf[i], k);
            }
        } else if (x < 999) {
            size_t m = *n < 32 ? *n : 32;
            for (size_t i = 0; i < m; i++) {
                struct rec rc = t->live[k][--*n];
                check_obj(&rc);
                CHECK(live_remove(rc.p), "not live");
                if (specs[k].ctor)
                    pattern_fill(rc.p, specs[k].size, ctor_id(rc.p));
                t->foreign_frees += rc.owner != t->tid;
                buf[i] = rc.p;
            }
            uslab_cache_free_bulk(caches[k], m, buf);
        } else if (rng_below(&r, 16) == 0) {
            uslab_cache_reap(caches[k]);
        }
    }
    for (int k = 0; k < NCACHES; k++)
        while (t->nlive[k]) {
            struct rec rc = t->live[k][--t->nlive[k]];
            t->foreign_frees += rc.owner != t->tid;
            retire(&rc);
        }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        ops_per_thread = strtoull(argv[1], NULL, 0);
    int nthreads = argc > 2 ? atoi(argv[2]) : 6;
    uint64_t seed = argc > 3 ? strtoull(argv[3], NULL, 0) : 1;
    CHECK(nthreads >= 1 && nthreads <= 64, "threads");
    for (int k = 0; k < NCACHES; k++) {
        caches[k] = uslab_cache_create(
            "mt", specs[k].size, specs[k].align, specs[k].ctor ? mt_ctor : NULL,
            specs[k].ctor ? mt_dtor : NULL, NULL, (void *)(uintptr_t)k, specs[k].flags);
        CHECK(caches[k], "create");
    }
    for (int i = 0; i < NSHARDS; i++) {
        pthread_mutex_init(&shards[i].lock, NULL);
        ptrset_init(&shards[i].set,
                    (size_t)(nthreads + 1) * NCACHES * MAXLIVE / NSHARDS * 2 + 4096);
    }
    struct thread *th = calloc((size_t)nthreads, sizeof *th);
    CHECK(th, "calloc");
    for (int i = 0; i < nthreads; i++) {
        th[i].tid = i + 1;
        th[i].seed = seed * 1000003 + (uint64_t)i;
        CHECK(pthread_create(&th[i].t, NULL, worker, &th[i]) == 0, "pthread_create");
    }
    uint64_t foreign = 0;
    for (int i = 0; i < nthreads; i++) {
        pthread_join(th[i].t, NULL);
        foreign += th[i].foreign_frees;
    }
    /* Objects still in the queue: freed by the main thread, which allocated none of them. */
    struct rec rc;
    uint64_t drained = 0;
    while (queue_pop(&rc)) {
        retire(&rc);
        drained++;
    }
    printf("%d threads x %" PRIu64 " ops: %" PRIu64 " objects handed over, %" PRIu64
           " freed by a thread that did not allocate them, %" PRIu64 " drained by main\n",
           nthreads, ops_per_thread, queue.handed, foreign + drained, drained);
    CHECK(nthreads == 1 || queue.handed > 0, "objects were handed between threads");
    for (int i = 0; i < NSHARDS; i++)
        CHECK(shards[i].set.count == 0, "objects still live");
    for (int k = 0; k < NCACHES; k++) {
        uslab_cache_destroy(caches[k]); /* aborts if any object is unaccounted for */
        CHECK(ctor_calls[k] == dtor_calls[k], "cache %d: ctor %ld dtor %ld", k, ctor_calls[k],
              dtor_calls[k]);
    }
    CHECK(bad_dtor == 0, "destructor saw %ld objects not in constructed state", bad_dtor);
    for (int i = 0; i < NSHARDS; i++)
        ptrset_free(&shards[i].set);
    free(th);
    TEST_DONE();
}
