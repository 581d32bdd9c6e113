/* SPDX-License-Identifier: MIT */
/*
 * test_slow_start.c - a thread's magazines start small and double (design §4, issue 12).
 * The first magazine a thread makes or trades for in a cache holds at most
 * USI_MAG_START_BYTES of objects; each slow path after that doubles the capacity of the
 * magazines it makes or trades for, up to the cache's, and takes half again as many objects
 * from the slabs as the one before it (issue 38). Checked on both sides: a thread that
 * only allocates (its slab fills) and a thread that only frees (its empty magazines). Then 64
 * threads that each allocate one object and hold it: before slow start each took a full magazine
 * (128 objects of 256 bytes, half a slab) from the slabs, 32 slabs for 64 objects; now 1 each
 * (USI_MAG_START_BYTES 256 since issue 38; 4 before), one slab. Deterministic: one thread at a
 * time, except the 64, which only allocate. The thread that only frees keeps no full
 * magazine (design §4, "A freeing pair").
 */
#include "base.h"
#include "check.h"
#include "depot.h"
#include "descriptor.h"
#include "tcache.h"
#include "uslab.h"

#include <pthread.h>
#include <string.h>

#define OBJ    256
#define MANY   64
#define LEVELS 8 /* 1, 2, 4, ... 128 */

static uslab_cache_t *cache;
static struct uslab_cache *ci;

/* The capacity of the calling thread's loaded magazine of the cache. */
static uint32_t loaded_capacity(void)
{
    struct usi_magpair *mp = usi_tcache_pair(usi_tls, ci->pair_offset);
    return usi_pair_loaded(mp)->capacity;
}

static void *objs[4096];
static size_t nobjs;

/* The loaded magazine at each capacity alloc_side saw. */
static struct usi_mag *seen_mag[LEVELS];

/* The objects each slow path of alloc_side took from the slabs, in order. */
#define FILLS 14
static uint32_t fills[FILLS];
static int nfills;

/* Allocates until the thread's magazine capacity has changed `steps` times; returns the
 * capacities seen, in order. Records the fills (a thread that only allocates never swaps:
 * its loaded magazine's objects drop by one per call but where a slow path filled it). */
static void alloc_side(uint32_t *seen, int steps)
{
    uint32_t last = 0;
    struct usi_magpair *mp = usi_tcache_pair(usi_tls, ci->pair_offset);
    for (int k = 0; k < steps || nfills < FILLS;) {
        CHECK(nobjs < sizeof objs / sizeof *objs, "too many objects");
        size_t before = usi_tls->pairs_bytes > ci->pair_offset ? (size_t)(mp->top - mp->base) : 0;
        objs[nobjs++] = uslab_cache_alloc(cache);
        CHECK(objs[nobjs - 1] != NULL, "alloc");
        mp = usi_tcache_pair(usi_tls, ci->pair_offset);
        size_t after = (size_t)(mp->top - mp->base);
        if (after + 1 != before && nfills < FILLS)
            fills[nfills++] = (uint32_t)after + 1;
        uint32_t cap = loaded_capacity();
        if (cap != last && k < steps) {
            seen_mag[k] = usi_pair_loaded(mp);
            seen[k++] = last = cap;
        }
    }
}

/* What the freeing thread's pair held at its end: objects, and whether a full magazine. */
static size_t freeing_held;
static int freeing_full;

static void *free_side(void *arg)
{
    uint32_t *seen = arg;
    uint32_t last = 0;
    int k = 0;
    for (size_t i = 0; i < nobjs; i++) {
        uslab_cache_free(cache, objs[i]);
        uint32_t cap = loaded_capacity();
        if (cap != last && k < LEVELS)
            seen[k++] = last = cap;
    }
    struct usi_magpair *mp = usi_tcache_pair(usi_tls, ci->pair_offset);
    freeing_held = (size_t)(mp->top - mp->base) + mp->prev->rounds;
    freeing_full = mp->prev->rounds != 0 && mp->prev->rounds == mp->prev->capacity;
    return NULL;
}

static pthread_barrier_t held;

static void *hold_one(void *arg)
{
    (void)arg;
    void *p = uslab_cache_alloc(cache);
    CHECK(p != NULL, "alloc");
    memset(p, 1, OBJ);
    pthread_barrier_wait(&held); /* all hold one */
    pthread_barrier_wait(&held); /* the main thread counted */
    uslab_cache_free(cache, p);
    return NULL;
}

/* A thread whose few blocks go to and fro: once the pair's level has grown past them, its
 * magazines stay put (no trade, no swap). Before the bigger magazines were filled only up to
 * what the smaller one held, the blocks taken from the smaller one overflowed the bigger
 * one when they came back, and the pair swapped its two magazines twice a round for good
 * (lifetime d=20 ran 10% slower). */
static void to_and_fro(void)
{
    uslab_cache_t *tf = uslab_cache_create("to-and-fro", OBJ, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(tf != NULL, "create");
    struct uslab_cache *ti = (struct uslab_cache *)tf;
    void *b[20];
    void **base = NULL;
    struct usi_mag *prev = NULL;
    int changed = 0;
    for (int round = 0; round < 1000; round++) {
        struct usi_magpair *mp = usi_tcache_pair(usi_tls, ti->pair_offset);
        for (int half = 0; half < 2; half++) { /* snapshots after the allocs and the frees */
            for (int i = 0; i < 20; i++) {
                if (half == 0)
                    CHECK((b[i] = uslab_cache_alloc(tf)) != NULL, "alloc");
                else
                    uslab_cache_free(tf, b[i]);
            }
            if (round >= 10 && (mp->base != base || mp->prev != prev))
                changed++;
            base = mp->base;
            prev = mp->prev;
        }
    }
    printf("20 blocks to and fro: the magazines changed %d times in 990 rounds\n", changed);
    CHECK(changed == 0, "the pair traded or swapped magazines %d times", changed);
    uslab_cache_destroy(tf);
}

int main(void)
{
    cache = uslab_cache_create("slow-start", OBJ, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(cache != NULL, "create");
    ci = (struct uslab_cache *)cache;
    uint32_t most = ci->mag_steady; /* a pair that does not alternate stays there */
    uint32_t first = USI_MAG_START_BYTES / OBJ;
    CHECK(most == 128 && first == 1, "256-byte objects: capacity %u, first %u", most, first);

    /* Allocating: 1, 2, 4, ... 128, then 128 for good. */
    uint32_t seen[LEVELS];
    alloc_side(seen, LEVELS);
    for (int k = 0; k < LEVELS; k++)
        CHECK(seen[k] == first << k, "alloc side: magazine %d holds %u, not %u", k, seen[k],
              first << k);
    /* Levels 1, 2 and 4 are one magazine, grown in place (usi_mag_refit): its object, of
     * the internal cache of up to USI_MAG_START_MAX slots, has room for all three. Before,
     * each level freed the last magazine and made a new one, two locks of the magazine
     * cache a slow path (3,000 live threads: a third of their malloc instructions). The
     * level of 8 needs a bigger object. */
    CHECK(USI_MAG_START_MAX == 4, "the start magazines hold %d", USI_MAG_START_MAX);
    CHECK(seen_mag[1] == seen_mag[0] && seen_mag[2] == seen_mag[0],
          "levels 1, 2, 4: magazines %p, %p, %p, not one grown in place", (void *)seen_mag[0],
          (void *)seen_mag[1], (void *)seen_mag[2]);
    CHECK(seen_mag[3] != seen_mag[2], "level 8 in the start magazine of 4 slots");
    /* The fills: the first magazine's one object, then half again the last fill each time
     * (at least one more), within the room the bigger magazine leaves for what the thread
     * took from the smaller ones, then up to the capacity. When they doubled with the level
     * (1, 1, 2, 4, ... 64, 128), a thread that asked for 65 objects held 63 more. */
    static const uint32_t want[FILLS] = {1, 1, 2, 3, 4, 6, 9, 13, 19, 28, 42, 63, 94, 128};
    for (int k = 0; k < FILLS; k++)
        CHECK(fills[k] == want[k], "alloc side: fill %d took %u objects, not %u", k, fills[k],
              want[k]);
    size_t before = nobjs;
    while (nobjs < before + 3 * most)
        objs[nobjs++] = uslab_cache_alloc(cache);
    CHECK(loaded_capacity() == most, "stays at the capacity: %u", loaded_capacity());

    /* Freeing, in a thread that allocated nothing: its empties grow the same way (its very
     * first free goes back to the slab, design §4). */
    uint32_t fseen[LEVELS] = {0};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, free_side, fseen) == 0, "thread");
    pthread_join(t, NULL);
    for (int k = 0; k < LEVELS; k++)
        CHECK(fseen[k] == first << k, "free side: magazine %d holds %u, not %u", k, fseen[k],
              first << k);
    /* A thread that only frees keeps no full magazine (design §4, "A freeing pair"): its
     * filled ones went to the depot. Before, it kept one full of 128 and a second filling. */
    printf("the freeing thread's pair held %zu objects at its end; the depot %zu full "
           "magazines\n",
           freeing_held, (size_t)ci->depot_nfull);
    CHECK(!freeing_full && freeing_held < most, "the freeing thread kept %zu objects%s",
          freeing_held, freeing_full ? ", a full magazine" : "");
    CHECK(ci->depot_nfull >= 3, "the depot got %zu full magazines", (size_t)ci->depot_nfull);
    nobjs = 0;
    uslab_cache_reap(cache);

    /* Many threads, one object each: a few objects each from the slabs, not half a slab. */
    struct uslab_cache_stats st;
    uslab_cache_stats(cache, &st);
    size_t slabs0 = st.slabs;
    pthread_barrier_init(&held, NULL, MANY + 1);
    pthread_t tid[MANY];
    for (int i = 0; i < MANY; i++)
        CHECK(pthread_create(&tid[i], NULL, hold_one, NULL) == 0, "thread %d", i);
    pthread_barrier_wait(&held);
    uslab_cache_stats(cache, &st);
    printf("%d threads holding one %d-byte object each: %zu slabs (%zu before), %zu objects "
           "cached\n",
           MANY, OBJ, st.slabs, slabs0, st.cached_objects);
    /* 64 threads x 1 object = 64 objects, each thread's first magazine one object: none
     * cached beside them. They come from at most 5 slabs: the first 4 threads that fill at
     * once fill a slab each, the rest share the first (design §3, "Fillers"), and possibly
     * the slab the main thread left partial. */
    CHECK(st.active_objects == MANY && st.cached_objects <= 2, "%zu objects active, %zu cached",
          st.active_objects, st.cached_objects);
    CHECK(st.slabs <= slabs0 + 6, "%zu slabs for %d threads (was %zu)", st.slabs, MANY, slabs0);
    pthread_barrier_wait(&held);
    for (int i = 0; i < MANY; i++)
        pthread_join(tid[i], NULL);
    uslab_cache_destroy(cache);
    to_and_fro();
    printf("ok\n");
    return 0;
}
