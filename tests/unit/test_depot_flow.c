/* SPDX-License-Identifier: MIT */
/*
 * test_depot_flow.c - the depot's limit follows the flow (design §4, issue 12): it starts
 * at USLAB_DEPOT_BYTES of objects (256 KiB here: 16 magazines of 256 objects of 64 bytes),
 * a full magazine beyond it is handed back to be flushed while no other thread has found
 * the depot without a full one; once another has (a miss), the limit doubles each time it
 * would overflow, up to 64 times the first; each reap pass without a miss halves it again.
 * A thread's own misses do not count: it frees what it allocated itself. Deterministic:
 * the threads take turns (create, join) on the depot's own interface.
 */
#include "check.h"
#include "internal.h"

#include <pthread.h>

static struct uslab_cache *cache;

/* A full magazine of real objects (they go back to the slabs when flushed). */
static struct usi_mag *full_magazine(void)
{
    struct usi_mag *m = usi_mag_new(cache);
    CHECK(m != NULL, "magazine");
    m->rounds = (uint32_t)usi_objects_fill(cache, m->capacity, m->objs, 0);
    CHECK(m->rounds == m->capacity, "fill");
    return m;
}

/* Gives a full magazine; returns 1 if the depot kept it, 0 if it was handed back. */
static int give(void)
{
    struct usi_mag *over;
    usi_depot_put(cache, full_magazine(), &over);
    if (!over)
        return 1;
    usi_depot_dispose(cache, over);
    return 0;
}

static size_t limit(void)
{
    usi_lock(&cache->lock);
    size_t n = cache->depot_max_full;
    usi_unlock(&cache->lock);
    return n;
}

/* Takes every full magazine back out (flushing it), then asks once more: a miss. */
static void drain_and_miss_here(void)
{
    struct usi_mag *m;
    while ((m = usi_depot_get_full(cache, NULL)) != NULL) {
        usi_objects_unfill(cache, m->rounds, m->objs);
        m->rounds = 0;
        usi_mag_delete(m);
    }
}

static void *consumer(void *arg)
{
    drain_and_miss_here();
    return arg;
}

/* The same, by another thread: a consumer. */
static void drain_and_miss(void)
{
    pthread_t t;
    CHECK(pthread_create(&t, NULL, consumer, NULL) == 0, "pthread_create");
    CHECK(pthread_join(t, NULL) == 0, "pthread_join");
}

int main(void)
{
    cache = uslab_cache_create("depot-flow", 64, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(cache != NULL, "create");
    CHECK(cache->mag_capacity == 256, "capacity %u", cache->mag_capacity);
    size_t base = cache->depot_base_full, cap = cache->depot_cap_full;
    CHECK(base == 16 && cap == 64 * base, "base %zu, cap %zu (USLAB_DEPOT_BYTES=256K)", base, cap);

    /* No miss yet: the depot keeps its first limit and hands back the rest. */
    size_t kept = 0;
    for (size_t i = 0; i < base + 8; i++)
        kept += (size_t)give();
    CHECK(kept == base && limit() == base, "kept %zu of %zu, limit %zu", kept, base + 8, limit());

    /* The same thread's own misses: no flow. */
    drain_and_miss_here();
    kept = 0;
    for (size_t i = 0; i < base + 8; i++)
        kept += (size_t)give();
    CHECK(kept == base && limit() == base, "own misses: kept %zu, limit %zu", kept, limit());
    drain_and_miss_here();

    /* A consumer emptied it and came back for more: a flow. The limit doubles as often as
     * the depot would overflow, up to the cap, and no further. */
    drain_and_miss();
    kept = 0;
    for (size_t i = 0; i < cap + 8; i++)
        kept += (size_t)give();
    CHECK(kept == cap && limit() == cap, "with a miss: kept %zu, limit %zu, cap %zu", kept, limit(),
          cap);

    /* Reap passes without misses halve the limit back to the first one; the first pass
     * sees the whole depot unused since the last one and reaps it all. */
    usi_depot_reap_unused(cache); /* opens the interval */
    for (size_t want = cap / 2; want >= base; want /= 2) {
        usi_depot_reap_unused(cache);
        CHECK(limit() == want, "after a pass without a miss: limit %zu, expected %zu", limit(),
              want);
        if (want == base)
            break;
    }
    usi_depot_reap_unused(cache);
    CHECK(limit() == base, "never below the first limit: %zu", limit());
    CHECK(cache->depot_nfull == 0, "%zu full magazines left after the reaps", cache->depot_nfull);

    /* A miss between passes keeps the limit where it is. */
    drain_and_miss();
    for (size_t i = 0; i < 2 * base; i++)
        give();
    CHECK(limit() == 2 * base, "grown once: %zu", limit());
    drain_and_miss();
    usi_depot_reap_unused(cache);
    CHECK(limit() == 2 * base, "a pass after a miss halved the limit: %zu", limit());
    drain_and_miss();
    uslab_cache_destroy(cache);
    TEST_DONE();
}
