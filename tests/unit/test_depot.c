/* SPDX-License-Identifier: MIT */
/*
 * test_depot.c - magazines grow under depot contention (Bonwick & Adams §3.7), and the
 * working-set reap gives back what the depot did not use. Deterministic: the test itself
 * holds the cache lock, waits until a worker thread's depot exchange has seen it taken
 * (the contention counter moved), then lets it through.
 */
#include "base.h"
#include "check.h"
#include "depot.h"
#include "descriptor.h"
#include "uslab.h"

#include <pthread.h>
#include <sched.h>

static struct uslab_cache *cache;
static volatile int go, done;
static volatile unsigned long finished; /* exchanges the worker completed */

/* Each call trades one magazine with the depot: one acquisition of the depot's lock. */
static void *worker(void *arg)
{
    (void)arg;
    while (!done) {
        while (!go && !done)
            sched_yield();
        if (done)
            break;
        go = 0;
        struct usi_mag *m = usi_mag_new(cache);
        CHECK(m != NULL, "magazine");
        usi_depot_put(cache, m);
        __atomic_fetch_add(&finished, 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

static uint32_t capacity(void)
{
    return __atomic_load_n(&cache->mag_capacity, __ATOMIC_RELAXED);
}

int main(void)
{
    /* 256-byte objects: magazines of 32 KiB (128 of them) at first, up to USI_MAG_MAX. */
    cache = uslab_cache_create("depot-test", 256, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(cache != NULL, "create");
    uint32_t first = capacity();
    CHECK(first == 128 && cache->mag_max == USI_MAG_MAX, "256-byte objects: capacity %u, max %u",
          first, cache->mag_max);

    /* Uncontended exchanges never grow the magazines. */
    for (int i = 0; i < 3 * USI_DEPOT_CONTENTION; i++)
        usi_depot_put(cache, usi_mag_new(cache));
    CHECK(capacity() == first, "grew without contention");

    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    /* Each round: hold the lock, let the worker start one exchange, give it time to find
     * the lock taken, release, wait for the exchange to finish. A round where the worker
     * was too slow to see the lock held simply does not count as contention. */
    int rounds = 0;
    while (capacity() == first && rounds < 100000) {
        unsigned long f = __atomic_load_n(&finished, __ATOMIC_ACQUIRE);
        pthread_mutex_lock(&cache->lock);
        go = 1;
        while (go)
            sched_yield();
        for (int spin = 0; spin < 200; spin++)
            sched_yield();
        pthread_mutex_unlock(&cache->lock);
        while (__atomic_load_n(&finished, __ATOMIC_ACQUIRE) == f)
            sched_yield();
        rounds++;
    }
    printf("capacity doubled after %d held-lock rounds (threshold %d waits)\n", rounds,
           USI_DEPOT_CONTENTION);
    done = 1;
    pthread_join(t, NULL);
    CHECK(capacity() == 2 * first && rounds >= USI_DEPOT_CONTENTION,
          "after %d rounds the capacity is %u (was %u)", rounds, capacity(), first);
    struct usi_mag *m = usi_mag_new(cache);
    CHECK(m->capacity == 2 * first, "new magazines have the new capacity");
    usi_depot_put(cache, m);

    /* Working set: the depot's empty magazines were not used since the last reap: two reaps
     * (one to open an interval, one to close it) free them all. */
    usi_depot_reap_unused(cache, 0);
    usi_depot_reap_unused(cache, 0);
    CHECK(cache->depot_nempty == 0 && cache->depot_nfull == 0, "depot reaped: %zu empty, %zu full",
          cache->depot_nempty, cache->depot_nfull);
    uslab_cache_destroy(cache);
    TEST_DONE();
}
