/* SPDX-License-Identifier: MIT */
/*
 * test_depot.c - a cache's magazines have its one capacity, whatever the traffic, and the
 * working-set reap gives back what the depot did not use (Bonwick & Adams §3.6).
 * Magazines no longer grow under contention (Bonwick & Adams §3.7): measured on 2 cores,
 * bigger magazines made contended alloc and free 3-4x slower, and it was opt-in only
 * (session 26). While the cache sheds (beyond the headroom, design §4), an empty magazine
 * put to the depot is freed instead, without the depot's lock (3,000 exiting threads each
 * put 2 a class, issue 38). Deterministic: one thread.
 */
#include "base.h"
#include "check.h"
#include "depot.h"
#include "descriptor.h"
#include "os.h"
#include "registry.h"
#include "uslab.h"

#include <string.h>

/* Objects of the internal cache `name` outside its slabs. */
static size_t in_use(const char *name)
{
    for (size_t id = 0; id < USI_MAX_IDS; id++) {
        struct uslab_cache *c = usi_caches[id];
        if (c && strcmp(c->name, name) == 0) {
            usi_lock(&c->lock);
            size_t n = c->slab_inuse;
            usi_unlock(&c->lock);
            return n;
        }
    }
    CHECK(0, "no cache named %s", name);
    return 0;
}

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

    /* Shedding: the empty magazines go back to their own cache, not to the depot. */
    size_t before = in_use("uslab-magazine-256");
    __atomic_store_n(&cache->depot_shedding, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < 10; i++)
        usi_depot_put(cache, usi_mag_new_cap(cache, cache->mag_steady));
    CHECK(cache->depot_nempty == 0, "a shedding depot kept %zu empty magazines",
          cache->depot_nempty);
    CHECK(in_use("uslab-magazine-256") == before, "magazines not freed: %zu in use, %zu before",
          in_use("uslab-magazine-256"), before);
    __atomic_store_n(&cache->depot_shedding, 0, __ATOMIC_RELAXED);
    uslab_cache_destroy((uslab_cache_t *)cache);
    TEST_DONE();
}
