/* SPDX-License-Identifier: MIT */
/*
 * test_stress_cache.c - millions of random object-cache operations (alloc, free, bulk
 * alloc, bulk free, reap, destroy and re-create) over 16 caches of different sizes,
 * alignments and flags, some with constructors, checked against a shadow model:
 *  - every live object holds a pattern derived from its id, verified before it is freed;
 *  - all live pointers are distinct and aligned;
 *  - a constructor cache's object is handed out in its constructed state (the constructor's
 *    pattern, which the test restores before each free), and the destructor sees the same;
 *  - constructor and destructor calls balance when a cache is destroyed.
 * Usage: test_stress_cache [OPS [SEED]]   (default 10,000,000 operations, seed 1)
 */
#include "check.h"
#include "testutil.h"
#include "uslab.h"

#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#define NCACHES   16
#define BULK_MAX  64
#define CTOR_SEED 0x5eedc057ull

static const struct spec {
    size_t size, align;
    unsigned flags;
    int ctor;
} specs[NCACHES] = {
    {1, 0, 0, 0},
    {8, 8, 0, 1},
    {16, 0, USLAB_CACHE_NOMAGAZINE, 0},
    {24, 8, 0, 0},
    {32, 32, 0, 1},
    {48, 16, USLAB_CACHE_NOCOLOUR, 0},
    {64, 64, 0, 0},
    {100, 0, USLAB_CACHE_NOMAGAZINE, 1},
    {128, 128, 0, 0},
    {200, 8, 0, 1},
    {256, 256, USLAB_CACHE_NOCOLOUR, 0},
    {500, 0, 0, 0},
    {1000, 1024, 0, 1},
    {2048, 2048, USLAB_CACHE_NOMAGAZINE, 0},
    {4000, 4096, 0, 0},
    {7000, 64, 0, 1},
};

struct rec {
    void *p;
    uint64_t id;
};

static struct cstate {
    uslab_cache_t *c;
    size_t size, align, cap;
    struct rec *live;
    size_t nlive;
    long ctor, dtor, bad_dtor; /* atomic: a destructor may run on the purger thread */
    uint64_t allocs;
} cs[NCACHES];

static struct ptrset live_set;
static uint64_t next_id = 1;

static uint64_t ctor_id(const void *obj)
{
    return (uintptr_t)obj ^ CTOR_SEED;
}

static int stress_ctor(void *obj, void *arg)
{
    struct cstate *s = arg;
    pattern_fill(obj, s->size, ctor_id(obj));
    __atomic_fetch_add(&s->ctor, 1, __ATOMIC_RELAXED);
    return 0;
}

static void stress_dtor(void *obj, void *arg)
{
    struct cstate *s = arg;
    if (pattern_check(obj, s->size, ctor_id(obj)) != (size_t)-1)
        __atomic_fetch_add(&s->bad_dtor, 1, __ATOMIC_RELAXED);
    memset(obj, 0xdd, s->size < 16 ? s->size : 16);
    __atomic_fetch_add(&s->dtor, 1, __ATOMIC_RELAXED);
}

static void create(int k)
{
    const struct spec *sp = &specs[k];
    struct cstate *s = &cs[k];
    s->size = sp->size;
    s->align = sp->align ? sp->align : (sp->size >= 16 ? 16 : 8);
    if (s->align < 8)
        s->align = 8;
    s->c = uslab_cache_create("stress", sp->size, sp->align, sp->ctor ? stress_ctor : NULL,
                              sp->ctor ? stress_dtor : NULL, NULL, s, sp->flags);
    CHECK(s->c, "create cache %d", k);
    s->ctor = s->dtor = s->bad_dtor = 0;
}

/* A new object of cache k has arrived: check and record it. */
static void took(int k, void *p)
{
    struct cstate *s = &cs[k];
    CHECK(p, "allocation from cache %d (size %zu) failed", k, s->size);
    CHECK((uintptr_t)p % s->align == 0, "cache %d: %p not aligned to %zu", k, p, s->align);
    CHECK(ptrset_insert(&live_set, p), "cache %d: %p is already live", k, p);
    if (specs[k].ctor) {
        size_t bad = pattern_check(p, s->size, ctor_id(p));
        CHECK(bad == (size_t)-1, "cache %d: object %p not in constructed state (byte %zu)", k, p,
              bad);
    }
    uint64_t id = next_id++;
    pattern_fill(p, s->size, id);
    s->live[s->nlive].p = p;
    s->live[s->nlive].id = id;
    s->nlive++;
    s->allocs++;
}

/* Removes live object i of cache k from the model after checking it; returns it ready to be
 * freed (in constructed state for a constructor cache). */
static void *release(int k, size_t i)
{
    struct cstate *s = &cs[k];
    struct rec r = s->live[i];
    s->live[i] = s->live[--s->nlive];
    size_t bad = pattern_check(r.p, s->size, r.id);
    CHECK(bad == (size_t)-1, "cache %d: object %p (id %" PRIu64 ") corrupted at byte %zu", k, r.p,
          r.id, bad);
    CHECK(ptrset_remove(&live_set, r.p), "cache %d: %p not in the live set", k, r.p);
    if (specs[k].ctor)
        pattern_fill(r.p, s->size, ctor_id(r.p));
    return r.p;
}

static void free_all_and_destroy(int k)
{
    struct cstate *s = &cs[k];
    while (s->nlive)
        uslab_cache_free(s->c, release(k, s->nlive - 1));
    uslab_cache_destroy(s->c);
    /* destroy has waited for destructors running elsewhere */
    long ctor = __atomic_load_n(&s->ctor, __ATOMIC_RELAXED);
    long dtor = __atomic_load_n(&s->dtor, __ATOMIC_RELAXED);
    long bad = __atomic_load_n(&s->bad_dtor, __ATOMIC_RELAXED);
    CHECK(ctor == dtor, "cache %d destroyed: ctor %ld != dtor %ld", k, ctor, dtor);
    CHECK(bad == 0, "cache %d: destructor saw %ld objects not in constructed state", k, bad);
}

int main(int argc, char **argv)
{
    uint64_t ops = argc > 1 ? strtoull(argv[1], NULL, 0) : 10000000;
    uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 0) : 1;
    struct rng r = {seed};
    size_t total_cap = 0;
    for (int k = 0; k < NCACHES; k++) {
        size_t cap = ((size_t)12 << 20) / specs[k].size;
        cs[k].cap = cap > 8192 ? 8192 : cap < 256 ? 256 : cap;
        cs[k].live = malloc(cs[k].cap * sizeof(struct rec));
        CHECK(cs[k].live, "malloc");
        total_cap += cs[k].cap;
        create(k);
    }
    ptrset_init(&live_set, total_cap);
    uint64_t counts[8] = {0};
    void *buf[BULK_MAX];
    /* The fill level of each cache drifts between phases of growth and shrinkage. */
    int grow[NCACHES];
    for (int k = 0; k < NCACHES; k++)
        grow[k] = 1;
    for (uint64_t op = 0; op < ops; op++) {
        int k = (int)rng_below(&r, NCACHES);
        struct cstate *s = &cs[k];
        if (s->nlive >= s->cap)
            grow[k] = 0;
        else if (s->nlive == 0)
            grow[k] = 1;
        else if (rng_below(&r, 4096) == 0)
            grow[k] = !grow[k];
        unsigned x = (unsigned)rng_below(&r, 1000);
        int want_alloc = grow[k] ? x < 600 : x < 400;
        if (x >= 980) { /* bulk operations */
            size_t n = 1 + rng_below(&r, BULK_MAX);
            if (want_alloc || x < 990) {
                if (s->nlive + n > s->cap)
                    continue;
                CHECK(uslab_cache_alloc_bulk(s->c, n, buf) == n, "bulk alloc of %zu", n);
                for (size_t i = 0; i < n; i++)
                    took(k, buf[i]);
                counts[2]++;
            } else {
                if (n > s->nlive)
                    n = s->nlive;
                for (size_t i = 0; i < n; i++)
                    buf[i] = release(k, rng_below(&r, s->nlive));
                uslab_cache_free_bulk(s->c, n, buf);
                counts[3]++;
            }
        } else if (x == 977) {
            if (rng_below(&r, 64) == 0) {
                uslab_reap();
                counts[5]++;
            } else {
                uslab_cache_reap(s->c);
                counts[4]++;
            }
        } else if (x == 976 && rng_below(&r, 256) == 0) {
            free_all_and_destroy(k);
            create(k);
            counts[6]++;
        } else if (want_alloc) {
            if (s->nlive >= s->cap)
                continue;
            took(k, uslab_cache_alloc(s->c));
            counts[0]++;
        } else if (s->nlive) {
            uslab_cache_free(s->c, release(k, rng_below(&r, s->nlive)));
            counts[1]++;
        }
    }
    size_t live = 0;
    for (int k = 0; k < NCACHES; k++)
        live += cs[k].nlive;
    printf("%" PRIu64 " ops: %" PRIu64 " allocs, %" PRIu64 " frees, %" PRIu64
           " bulk allocs, %" PRIu64 " bulk frees, %" PRIu64 " cache reaps, %" PRIu64
           " global reaps, %" PRIu64 " re-creations; %zu live at the end\n",
           ops, counts[0], counts[1], counts[2], counts[3], counts[4], counts[5], counts[6], live);
    CHECK(live_set.count == live, "live set %zu, model %zu", live_set.count, live);
    for (int k = 0; k < NCACHES; k++) {
        free_all_and_destroy(k);
        free(cs[k].live);
    }
    CHECK(live_set.count == 0, "live set empty");
    ptrset_free(&live_set);
    TEST_DONE();
}
