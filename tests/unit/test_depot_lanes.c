/* SPDX-License-Identifier: MIT */
/*
 * test_depot_lanes.c - a depot's lanes (design §4, "Depot"): a thread takes back the full and
 * the empty magazines it gave to the depot before any another thread gave after it, and
 * another thread's when it has none left; every lane's magazines count, are found by free's
 * double-free lookup, and go back to the slabs in a drain. Deterministic: the other thread
 * runs between a create and a join.
 */
#include "check.h"
#include "depot.h"
#include "descriptor.h"
#include "full_magazine.h"
#include "objects.h"
#include "os.h"
#include "pages.h"
#include "uslab.h"

#include <pthread.h>

static struct uslab_cache *cache;

/* The other thread's magazines: two full ones and an empty one, given after main's. */
static struct usi_mag *other_full[2], *other_empty;

static void *other(void *arg)
{
    for (int i = 0; i < 2; i++)
        usi_depot_put(cache, other_full[i] = full_magazine_of(cache));
    usi_depot_put(cache, other_empty = usi_mag_new_cap(cache, cache->mag_capacity));
    return arg;
}

static size_t count(size_t *field)
{
    usi_lock(&cache->lock);
    size_t n = *field;
    usi_unlock(&cache->lock);
    return n;
}

int main(void)
{
    cache = uslab_cache_create("depot-lanes", 64, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(cache != NULL, "create");
    struct usi_mag *own_full[2], *own_empty;
    for (int i = 0; i < 2; i++)
        usi_depot_put(cache, own_full[i] = full_magazine_of(cache));
    usi_depot_put(cache, own_empty = usi_mag_new_cap(cache, cache->mag_capacity));
    pthread_t t;
    CHECK(pthread_create(&t, NULL, other, NULL) == 0 && pthread_join(t, NULL) == 0, "thread");
    CHECK(count(&cache->depot_nfull) == 4 && count(&cache->depot_nempty) == 2,
          "the depot counts every lane: %zu full, %zu empty", count(&cache->depot_nfull),
          count(&cache->depot_nempty));

    /* Free's double-free lookup finds a block in the other thread's lane too. */
    void *p = other_full[1]->objs[3];
    CHECK(usi_depot_block_is_free(cache, usi_pagemap_lookup(p), p), "a block in another lane");

    /* Main's own first, the last given first, though the other thread gave after it. */
    struct usi_mag *m = usi_depot_get_full(cache, NULL);
    CHECK(m == own_full[1], "own full magazine: %p, not %p", (void *)m, (void *)own_full[1]);
    struct usi_mag *m2 = usi_depot_get_full(cache, NULL);
    CHECK(m2 == own_full[0], "own full magazine: %p, not %p", (void *)m2, (void *)own_full[0]);
    /* None of main's left: the other thread's. */
    struct usi_mag *m3 = usi_depot_get_full(cache, NULL);
    CHECK(m3 == other_full[1], "the other lane's: %p, not %p", (void *)m3, (void *)other_full[1]);
    struct usi_mag *e = usi_depot_get_empty(cache, NULL, cache->mag_capacity);
    CHECK(e == own_empty, "own empty magazine: %p, not %p", (void *)e, (void *)own_empty);
    struct usi_mag *e2 = usi_depot_get_empty(cache, NULL, cache->mag_capacity);
    CHECK(e2 == other_empty, "the other lane's empty: %p", (void *)e2);

    /* Back, and a drain takes every lane's to the slabs. */
    usi_depot_put(cache, m);
    usi_depot_put(cache, m2);
    usi_depot_put(cache, m3);
    usi_depot_put(cache, e);
    usi_depot_put(cache, e2);
    usi_depot_drain(cache, 1);
    CHECK(count(&cache->depot_nfull) == 0 && count(&cache->depot_nempty) == 0 &&
              count(&cache->slab_inuse) == 0,
          "drained: %zu full, %zu empty, %zu objects out", count(&cache->depot_nfull),
          count(&cache->depot_nempty), count(&cache->slab_inuse));
    uslab_cache_destroy((uslab_cache_t *)cache);
    TEST_DONE();
}
