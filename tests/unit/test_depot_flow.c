/* SPDX-License-Identifier: MIT */
/*
 * test_depot_flow.c - the depot follows the working set (design §4, Bonwick & Adams §3.6):
 * it keeps every magazine given to it, however many; a periodic reap takes out only the
 * magazines that stayed in it through a whole interval, and a surplus pass's reap does the
 * same on its own watermark, leaving the periodic interval alone. Deterministic: the
 * threads take turns (create, join) on the depot's own interface, and the reaps are called
 * directly.
 *
 * A free's exchange (usi_depot_get_empty) of a cache without constructor and destructor
 * keeps USI_DEPOT_KEEP_FULL full magazines, more up to USI_DEPOT_KEEP_BYTES of objects where
 * a magazine's objects lie together, none where they lie scattered: the objects of any
 * further one go past the depot to their slabs, counted (depot_passed) until the cache next
 * fills from its slabs (usi_depot_demand). One with a constructor keeps every magazine,
 * constructed. And what a program tears down it builds again in address order: of 100,000
 * objects (beyond the bytes kept) or 30,000 (1.4 MiB, within them) freed in a scattered
 * order, more than a quarter come back beside the one before (none did when the depot kept
 * them all: the order of the frees; design §4 "Depot").
 */
#include "check.h"
#include "depot.h"
#include "descriptor.h"
#include "full_magazine.h"
#include "objects.h"
#include "os.h"
#include "uslab.h"

#include <pthread.h>

static struct uslab_cache *cache;

/* A full magazine whose objects lie a 64 KiB unit apart: the pool's objects j, j + u,
 * j + 2u... (u objects to a unit), the pool filled in address order. */
static struct usi_mag *scattered_magazine(void **pool, size_t per_unit, size_t j)
{
    struct usi_mag *m = usi_mag_new_cap(cache, cache->mag_capacity);
    CHECK(m != NULL, "magazine");
    for (uint32_t i = 0; i < m->capacity; i++)
        m->objs[i] = pool[j + i * per_unit];
    m->rounds = m->capacity;
    return m;
}

static size_t nfull(void)
{
    usi_lock(&cache->lock);
    size_t n = cache->depot_nfull;
    usi_unlock(&cache->lock);
    return n;
}

static size_t inuse(void)
{
    usi_lock(&cache->lock);
    size_t n = cache->slab_inuse;
    usi_unlock(&cache->lock);
    return n;
}

/* Another thread takes k full magazines and gives them back: a flow through the depot. */
static size_t take_k;
static void *cycle(void *arg)
{
    struct usi_mag *m[64];
    for (size_t i = 0; i < take_k; i++)
        CHECK((m[i] = usi_depot_get_full(cache, NULL)) != NULL, "a full magazine %zu", i);
    for (size_t i = 0; i < take_k; i++)
        usi_depot_put(cache, m[i]);
    return arg;
}

static void cycle_in_thread(size_t k)
{
    pthread_t t;
    take_k = k;
    CHECK(pthread_create(&t, NULL, cycle, NULL) == 0, "pthread_create");
    CHECK(pthread_join(t, NULL) == 0, "pthread_join");
}

static int ctor_calls;
static int ctor(void *obj, void *arg)
{
    (void)obj, (void)arg;
    ctor_calls++;
    return 0;
}

/* Full magazines given to the depot by a free's exchange: past USI_DEPOT_KEEP_FULL and
 * USI_DEPOT_KEEP_BYTES they go to the slabs for a cache without callbacks, and stay for one
 * with a constructor; past USI_DEPOT_KEEP_FULL alone where their objects lie scattered. */
static void bound(void)
{
    enum { N = 80 };
    for (int kind = 0; kind < 3; kind++) { /* together, scattered, with a constructor */
        int with_ctor = kind == 2, scattered = kind == 1;
        /* 4 KiB objects: magazines of 8, so that the bytes kept are 64 magazines */
        cache = uslab_cache_create("depot-bound", 4096, 0, with_ctor ? ctor : NULL, NULL, NULL,
                                   NULL, 0);
        CHECK(cache != NULL, "create");
        size_t per = cache->mag_capacity, per_unit = USI_UNIT_SIZE / cache->stride + 1;
        /* scattered: magazine i takes the objects j, j + u... of group i / u (u = per_unit) */
        size_t groups = (N + per_unit - 1) / per_unit, pooled = groups * per * per_unit;
        static void *pool[N * 8 * 17];
        static char used[N * 8 * 17];
        CHECK(per == 8 && per_unit <= 17, "geometry: %zu a magazine, %zu a unit", per, per_unit);
        if (scattered)
            CHECK(usi_objects_fill(cache, pooled, pool, 0, NULL) == pooled, "the pool");
        for (int i = 0; i < N; i++) {
            size_t j = (size_t)i / per_unit * per * per_unit + (size_t)i % per_unit;
            for (size_t k = 0; scattered && k < per; k++)
                used[j + k * per_unit] = 1;
            struct usi_mag *full =
                scattered ? scattered_magazine(pool, per_unit, j) : full_magazine_of(cache);
            struct usi_mag *m = usi_depot_get_empty(cache, full, cache->mag_capacity);
            CHECK(m != NULL && m->rounds == 0, "an empty magazine back");
            size_t held = (size_t)i * cache->mag_capacity * cache->stride; /* in the depot */
            int kept =
                with_ctor || i < USI_DEPOT_KEEP_FULL || (!scattered && held < USI_DEPOT_KEEP_BYTES);
            CHECK((m == full) == !kept, "%s magazine %d: want it %s",
                  scattered ? "a scattered" : "a", i, kept ? "kept" : "passed");
            usi_mag_delete(m);
        }
        for (size_t i = 0; scattered && i < pooled; i++) /* the pool's rest goes back */
            if (!used[i])
                usi_objects_unfill(cache, 1, &pool[i]);
        size_t keep = with_ctor   ? N
                      : scattered ? USI_DEPOT_KEEP_FULL
                                  : USI_DEPOT_KEEP_BYTES / (per * cache->stride);
        CHECK(with_ctor || (keep >= USI_DEPOT_KEEP_FULL && keep < N),
              "the bound within the test: %zu", keep);
        CHECK(nfull() == keep && inuse() == keep * per, "%s: %zu magazines kept, %zu objects out",
              with_ctor   ? "constructor"
              : scattered ? "scattered"
                          : "no callbacks",
              nfull(), inuse());
        uint64_t passed = __atomic_load_n(&cache->depot_passed, __ATOMIC_RELAXED);
        CHECK(passed == (with_ctor ? 0 : (N - keep) * per * (cache->stride + sizeof(void *))),
              "%llu bytes counted as passed", (unsigned long long)passed);
        usi_depot_demand(cache); /* an allocation that fills from the slabs ends the count */
        CHECK(cache->depot_passed == 0, "passed bytes after a fill: %llu",
              (unsigned long long)cache->depot_passed);
        uslab_cache_destroy(cache);
    }
}

/* Torn down in a scattered order, built again: most neighbours in the new order are
 * neighbours in memory. Through the thread's magazines, as a program's frees go. */
static void rebuilt_in_order(long objects)
{
    enum { OBJECTS = 100000 }; /* 4.7 MiB: within the headroom, beyond the bound */
    static void *objs[OBJECTS];
    CHECK(objects <= OBJECTS, "%ld objects", objects);
    cache = uslab_cache_create("depot-rebuilt", 48, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(cache != NULL, "create");
    for (int round = 0; round < 2; round++) {
        size_t adjacent = 0;
        for (long i = 0; i < objects; i++) {
            CHECK((objs[i] = uslab_cache_alloc(cache)) != NULL, "alloc %ld", i);
            if (i) {
                intptr_t d = (char *)objs[i] - (char *)objs[i - 1];
                adjacent += d == (intptr_t)cache->stride || d == -(intptr_t)cache->stride;
            }
        }
        printf("%ld objects, round %d: %zu allocations next to the one before\n", objects, round,
               adjacent);
        CHECK(adjacent > (size_t)objects / 4,
              "round %d: only %zu of %ld allocations beside the last", round, adjacent, objects);
        for (long i = 0; i < objects; i++) /* 7919: prime to 100,000 and 30,000 */
            uslab_cache_free(cache, objs[(i * 7919) % objects]);
    }
    uslab_cache_destroy(cache);
}

/* 8 KiB objects, magazines of 4, allocated and freed through the thread's magazines as
 * malloc's are: a fill hands out one object more than a magazine holds, so every other
 * magazine runs across one slab's end into the next. Such a run lies together as much as
 * one within a slab: were it passed to the slabs while its neighbour magazines stay, every
 * slab would keep half its objects in the depot and none could empty (before: 63 of 65
 * slabs partly used, in the depot's 2 MiB; redis's lists, `large nodes`). */
static void runs_kept_whole(void)
{
    enum { OBJECTS = 768 }; /* 6 MiB: beyond the bytes kept */
    static void *objs[OBJECTS];
    cache = uslab_cache_create("depot-runs", 8192, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(cache != NULL, "create");
    /* Twice: the first round's frees may find idle memory past the headroom (the passed
     * objects and the slabs they empty) and shed the depot. */
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < OBJECTS; i++)
            CHECK((objs[i] = uslab_cache_alloc(cache)) != NULL, "alloc %d", i);
        for (int i = OBJECTS - 1; i >= 0; i--)
            uslab_cache_free(cache, objs[i]);
    }
    CHECK(cache->mag_capacity == 4 && cache->nobjs == 8, "geometry: %u a magazine, %u a slab",
          cache->mag_capacity, cache->nobjs);
    usi_lock(&cache->lock);
    size_t partial = cache->lists[USI_SLAB_PARTIAL].count, kept = cache->depot_rounds;
    usi_unlock(&cache->lock);
    printf("%d objects freed: %zu in the depot, %zu slabs partly used\n", OBJECTS, kept, partial);
    CHECK(kept * cache->stride >= USI_DEPOT_KEEP_BYTES / 2, "the depot kept %zu objects", kept);
    /* the depot's and the thread's (at most two magazines) at each end of a run */
    CHECK(partial <= 4, "%zu slabs partly used", partial);
    uslab_cache_destroy(cache);
}

int main(void)
{
    enum { N = 256, K = 16 };
    cache = uslab_cache_create("depot-flow", 64, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(cache != NULL, "create");
    CHECK(cache->mag_capacity == 256, "capacity %u", cache->mag_capacity);
    size_t per = cache->mag_capacity;

    /* N magazines of 256 objects of 64 bytes: 4 MiB of objects, four times what a depot
     * kept before it followed the working set. All kept, none flushed. */
    for (int i = 0; i < N; i++)
        usi_depot_put(cache, full_magazine_of(cache));
    CHECK(nfull() == N && inuse() == N * per, "kept %zu of %d magazines, %zu objects out", nfull(),
          N, inuse());

    /* A fresh cache's watermarks are 0: the first reap of each kind opens its interval. */
    CHECK(usi_depot_reap_unused(cache, 0) == 0 && nfull() == N, "first periodic reap: %zu left",
          nfull());
    CHECK(usi_depot_reap_unused(cache, 1) == 0 && nfull() == N, "first surplus reap: %zu left",
          nfull());

    /* K of them are used during the interval: N - K were not needed and go, K stay. */
    cycle_in_thread(K);
    CHECK(nfull() == N, "all back after the cycle: %zu", nfull());
    size_t reaped = usi_depot_reap_unused(cache, 1);
    CHECK(reaped == N - K && nfull() == K, "surplus reap: %zu reaped, %zu left", reaped, nfull());
    CHECK(inuse() == K * per, "the reaped objects are back in their slabs: %zu out", inuse());

    /* The periodic watermark saw the same use and the surplus reap's removal: the K left
     * are used again before its reap, so none go. */
    cycle_in_thread(K);
    reaped = usi_depot_reap_unused(cache, 0);
    CHECK(reaped == 0 && nfull() == K, "periodic reap of a used depot: %zu reaped, %zu left",
          reaped, nfull());

    /* An interval with no use: everything goes, on either watermark. */
    reaped = usi_depot_reap_unused(cache, 0);
    CHECK(reaped == K && nfull() == 0 && inuse() == 0, "idle interval: %zu reaped, %zu left",
          reaped, nfull());
    uslab_cache_destroy(cache);

    bound();
    rebuilt_in_order(100000);
    rebuilt_in_order(30000);
    runs_kept_whole();
    TEST_DONE();
}
