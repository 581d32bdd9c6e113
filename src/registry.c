/* SPDX-License-Identifier: MIT */
/*
 * registry.c - the cache table (docs/design.md §5, §6): cache id -> descriptor, for the
 * page map's ids, the thread caches' pairs and every walk over all caches.
 *
 * Walks never hold the registry lock while they work on a cache: they pin it (a count
 * under the lock), drop the lock, work, and unpin. usi_registry_remove unpublishes a cache
 * and waits for its pins to go, so a walk may run destructors, take application locks and
 * call any uslab function (but destroy the cache it is on) without deadlocking with a
 * thread that holds the application lock and calls into uslab. The one exception is the
 * walk of the reports at exit, the leak report and USLAB_STATS (usi_registry_try_each),
 * which runs no callback and must never wait: it holds the lock it managed to take through
 * the walk and pins nothing.
 *
 * Invariants (under registry_lock): usi_caches[id] is NULL or a descriptor whose id is id;
 * every published id is below registry_top, which never decreases; a descriptor's pins
 * counts the walks between pin and unpin; reclaimers counts the
 * published caches that have a reclaim callback.
 */
#include "registry.h"
#include "base.h"
#include "descriptor.h"
#include "os.h"
#include "report.h"

#include <errno.h>

struct uslab_cache *usi_caches[USI_MAX_IDS] USI_COLD_ZEROED;

/* Taken before any other uslab lock (design §6), never held across a callback. */
static usi_mutex registry_lock = USI_MUTEX_INIT;
/* Written under registry_lock, read without it (relaxed) by the purger (design §3). */
static unsigned reclaimers;
/* One above the highest id ever published (ids are given lowest first, so a program's
 * caches sit low): the walks stop there instead of reading the 512 KiB table, which
 * cost every purger pass and every fork 65,535 loads and the whole of a 512 KiB L2.
 * Written under registry_lock (release), read by walks without it (acquire). */
static unsigned registry_top = 1;

unsigned usi_registry_reclaimers(void)
{
    return __atomic_load_n(&reclaimers, __ATOMIC_RELAXED);
}

int usi_registry_add(struct uslab_cache *c, unsigned lo, unsigned hi)
{
    USI_ASSERT(lo >= 1 && hi < USI_MAX_IDS && lo <= hi);
    usi_lock(&registry_lock);
    unsigned id = lo;
    while (id <= hi && usi_caches[id])
        id++;
    if (id > hi) {
        usi_unlock(&registry_lock);
        errno = ENOMEM;
        return -1;
    }
    c->id = id;
    c->pins = 0;
    __atomic_store_n(&usi_caches[id], c, __ATOMIC_RELEASE);
    if (id >= registry_top)
        __atomic_store_n(&registry_top, id + 1, __ATOMIC_RELEASE);
    USI_ASSERT(registry_top <= USI_MAX_IDS);
    if (c->reclaim)
        __atomic_store_n(&reclaimers, reclaimers + 1, __ATOMIC_RELAXED);
    usi_unlock(&registry_lock);
    return 0;
}

/* Waits until no walk holds a pin on c, under the registry lock, which it drops while it
 * sleeps a millisecond at a time (a walk's pin lasts a pass over one cache; the sleep is no
 * cancellation point). */
static void wait_unpinned(struct uslab_cache *c)
{
    while (c->pins) {
        usi_unlock(&registry_lock);
        usi_os_sleep_ms(1);
        usi_lock(&registry_lock);
    }
}

void usi_registry_remove(struct uslab_cache *c)
{
    usi_lock(&registry_lock);
    USI_ASSERT(usi_caches[c->id] == c);
    __atomic_store_n(&usi_caches[c->id], NULL, __ATOMIC_RELEASE);
    if (c->reclaim)
        __atomic_store_n(&reclaimers, reclaimers - 1, __ATOMIC_RELAXED);
    wait_unpinned(c);
    usi_unlock(&registry_lock);
}

/* The cache with this id, pinned; NULL if none, or if `open` and it is closing (a walk
 * that runs callbacks leaves a cache being destroyed alone). */
static struct uslab_cache *pin(unsigned id, int open)
{
    if (id == 0 || id >= USI_MAX_IDS)
        return NULL;
    usi_lock(&registry_lock);
    struct uslab_cache *c = usi_caches[id];
    if (c && open && __atomic_load_n(&c->closing, __ATOMIC_RELAXED))
        c = NULL;
    if (c)
        c->pins++;
    usi_unlock(&registry_lock);
    return c;
}

void usi_registry_close(struct uslab_cache *c)
{
    usi_lock(&registry_lock);
    __atomic_store_n(&c->closing, 1, __ATOMIC_RELAXED); /* also read by slow paths */
    wait_unpinned(c);
    usi_unlock(&registry_lock);
}

static void unpin(struct uslab_cache *c)
{
    usi_lock(&registry_lock);
    /* A count from before a fork was reset in the child (usi_registry_postfork). */
    if (c->pins)
        c->pins--;
    usi_unlock(&registry_lock);
}

/* The walk; `callbacks`: fn may run user callbacks, so no uslab lock may be held. */
static void for_each(void (*fn)(struct uslab_cache *c, void *arg), void *arg, int callbacks)
{
    /* A cache published after this load is not walked, as one published after the walk
     * passed its id would not be. */
    unsigned top = __atomic_load_n(&registry_top, __ATOMIC_ACQUIRE);
    for (unsigned id = 1; id < top; id++) {
        if (!__atomic_load_n(&usi_caches[id], __ATOMIC_RELAXED))
            continue; /* most of the table is empty: skip it without the lock */
        struct uslab_cache *c = pin(id, callbacks);
        if (!c)
            continue;
        if (callbacks)
            USI_ASSERT_NO_LOCK();
        fn(c, arg);
        unpin(c);
    }
}

void usi_registry_for_each(void (*fn)(struct uslab_cache *c, void *arg), void *arg)
{
    for_each(fn, arg, 1);
}

void usi_registry_read_each(void (*fn)(struct uslab_cache *c, void *arg), void *arg)
{
    for_each(fn, arg, 0);
}

int usi_registry_try_each(void (*fn)(struct uslab_cache *c, void *arg), void *arg, unsigned ms)
{
    if (usi_trylock_for(&registry_lock, ms) != 0)
        return -1;
    /* No pins: while the lock is held no cache is added or removed (usi_registry_remove
     * unpublishes under it), and nothing here needs it released. */
    for (unsigned id = 1; id < registry_top; id++)
        if (usi_caches[id])
            fn(usi_caches[id], arg);
    usi_unlock(&registry_lock);
    return 0;
}

/* ---- fork: the registry lock first, every cache lock in id order after the thread caches */

void usi_registry_prefork(void)
{
    usi_lock(&registry_lock);
}

void usi_registry_prefork_caches(void)
{
    for (unsigned id = 1; id < registry_top; id++)
        if (usi_caches[id])
            usi_lock(&usi_caches[id]->lock);
}

void usi_registry_postfork(int child)
{
    for (unsigned id = 1; id < registry_top; id++) {
        struct uslab_cache *c = usi_caches[id];
        if (!c)
            continue;
        if (child) {
            usi_mutex_init(&c->lock);
            /* The walks and flushes of other threads did not survive the fork. */
            c->pins = 0;
            c->depot_flushing = 0;
        } else {
            usi_unlock(&c->lock);
        }
    }
    if (child)
        usi_mutex_init(&registry_lock);
    else
        usi_unlock(&registry_lock);
}
