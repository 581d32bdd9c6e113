/* SPDX-License-Identifier: MIT */
/*
 * reclaim.c - giving memory back (docs/design.md §3, §4): the purger's pass over every
 * cache, uslab_cache_reap and uslab_reap.
 *
 * A pass reaps each depot's unused magazines (Bonwick & Adams §3.6) and purges the empty
 * slabs that stayed idle for USLAB_PURGE_DELAY. Walks go through the registry, which pins
 * each cache and holds no lock while we work on it: destructors run here (magazines
 * flushed back to slabs) with no uslab lock held.
 */
#include "internal.h"

/* Unlinks the empty slabs of c (all of them, or the idle ones beyond the reserve) under
 * its lock, then gives them back; returns the bytes released. */
static size_t release_empty(struct uslab_cache *c, int all, uint64_t before_ms, int *more)
{
    struct usi_slab *release = NULL;
    usi_lock(&c->lock);
    if (all) {
        usi_slab_detach_empty(c, 0, &release);
        c->purge_pending = 0;
    } else if (c->purge_pending) {
        c->purge_pending = usi_slab_detach_idle(c, c->empty_reserve, before_ms, &release) != 0;
    }
    if (more && (c->purge_pending || c->depot_nfull || c->depot_nempty))
        *more = 1;
    usi_unlock(&c->lock);
    return release ? usi_slab_release(c, release) : 0;
}

struct pass {
    uint64_t before_ms;
    int may_call_user; /* 0: skip the depots of caches with a destructor (inline pass) */
    int more;
};

static void pass_one(struct uslab_cache *c, void *arg)
{
    struct pass *p = arg;
    if (__atomic_load_n(&c->mag_capacity, __ATOMIC_RELAXED) && (p->may_call_user || !c->dtor))
        usi_depot_reap_unused(c);
    release_empty(c, 0, p->before_ms, &p->more);
}

int usi_reclaim_pass(uint64_t now_ms, int may_call_user)
{
    struct pass p = {now_ms >= usi_options.purge_delay_ms ? now_ms - usi_options.purge_delay_ms : 0,
                     may_call_user, 0};
    usi_registry_for_each(pass_one, &p);
    return p.more;
}

size_t usi_reclaim_cache(struct uslab_cache *c)
{
    if (__atomic_load_n(&c->mag_capacity, __ATOMIC_RELAXED)) {
        usi_tcache_flush_own(c);
        usi_depot_drain(c, 0);
    }
    return release_empty(c, 1, 0, NULL);
}

static void reclaim_one(struct uslab_cache *c, void *arg)
{
    *(size_t *)arg += usi_reclaim_cache(c);
}

size_t usi_reclaim_all(void)
{
    size_t bytes = 0;
    usi_registry_for_each(reclaim_one, &bytes);
    return bytes;
}
