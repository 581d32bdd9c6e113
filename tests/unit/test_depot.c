/* SPDX-License-Identifier: MIT */
/*
 * test_depot.c - a cache's magazines have its one capacity, whatever the traffic, and the
 * working-set reap gives back what the depot did not use (Bonwick & Adams §3.6).
 * Magazines no longer grow under contention (Bonwick & Adams §3.7): measured on 2 cores,
 * bigger magazines made contended alloc and free 3-4x slower, and it was opt-in only
 * (session 26). Deterministic: one thread.
 */
#include "base.h"
#include "check.h"
#include "depot.h"
#include "descriptor.h"
#include "uslab.h"

int main(void)
{
    /* 256-byte objects: magazines of 32 KiB, 128 of them; 256 for a pair that alternates. */
    struct uslab_cache *cache =
        (struct uslab_cache *)uslab_cache_create("depot-test", 256, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(cache != NULL, "create");
    CHECK(cache->mag_steady == 128 && cache->mag_capacity == 256 &&
              cache->mag_max_bytes == 256 * 256,
          "256-byte objects: steady %u, capacity %u, %zu bytes", cache->mag_steady,
          cache->mag_capacity, cache->mag_max_bytes);
    for (int i = 0; i < 100; i++) {
        struct usi_mag *m = usi_mag_new_cap(cache, cache->mag_steady);
        CHECK(m != NULL && m->capacity == 128, "magazine %d", i);
        usi_depot_put(cache, m);
    }
    CHECK(cache->depot_nempty == 100, "the depot keeps what it is given: %zu", cache->depot_nempty);

    /* Working set: the depot's empty magazines were not used since the last reap: two reaps
     * (one to open an interval, one to close it) free them all. */
    usi_depot_reap_unused(cache, 0);
    usi_depot_reap_unused(cache, 0);
    CHECK(cache->depot_nempty == 0 && cache->depot_nfull == 0, "depot reaped: %zu empty, %zu full",
          cache->depot_nempty, cache->depot_nfull);
    uslab_cache_destroy((uslab_cache_t *)cache);
    TEST_DONE();
}
