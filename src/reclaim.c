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
#include "reclaim.h"
#include "debug.h"
#include "depot.h"
#include "descriptor.h"
#include "objects.h"
#include "os.h"
#include "pages.h"
#include "purge.h"
#include "registry.h"
#include "sizeclass.h"
#include "slab.h"
#include "tcache.h"

/* Unlinks the empty slabs of c (all of them, or those beyond the reserve idle for idle_ms
 * times the cache's purge multiplier at now_ms) under its lock, then gives them back;
 * returns the bytes released. */
static size_t release_empty(struct uslab_cache *c, int all, uint64_t now_ms, uint64_t idle_ms,
                            unsigned how, int *more)
{
    struct usi_slab *release = NULL;
    usi_lock(&c->lock);
    if (all) {
        usi_slab_quarantine_drain(c, &release); /* a debug cache's freed objects too */
        usi_slab_detach_empty(c, 0, &release);
        c->purge_pending = 0;
    } else if (c->purge_pending) {
        /* A surplus pass's idle time is the time since the previous one: no multiplier. */
        /* purge_mult is read atomically: usi_slab_keep_memory writes it without the lock */
        uint32_t mult = __atomic_load_n(&c->purge_mult, __ATOMIC_RELAXED);
        uint64_t idle = how & USI_PASS_SURPLUS ? idle_ms : idle_ms * mult;
        if (how & USI_PASS_EXIT) {
            /* Down to the headroom, whatever the multiplier: the rest stays pending. A
             * program that starts its threads again (rptest) faults back less. */
            uint64_t over = __atomic_load_n(&usi_slab_surplus_bytes, __ATOMIC_RELAXED);
            size_t n = 0, count = c->lists[USI_SLAB_EMPTY].count;
            if (over > USI_SLAB_HEADROOM)
                n = (size_t)((over - USI_SLAB_HEADROOM + c->slab_size - 1) / c->slab_size);
            usi_slab_detach_empty(c, count > c->empty_reserve + n ? count - n : c->empty_reserve,
                                  &release);
        } else {
            if (idle == 0) /* every one, also those a drain of this pass emptied after now_ms */
                usi_slab_detach_empty(c, c->empty_reserve, &release);
            c->purge_pending =
                idle && usi_slab_detach_idle(c, c->empty_reserve,
                                             now_ms >= idle ? now_ms - idle : 0, &release) != 0;
        }
        if (release) {
            /* Hysteresis: no refault since the last purge, the multiplier halves. */
            if (!c->refaulted && mult > 1)
                __atomic_store_n(&c->purge_mult, mult / 2, __ATOMIC_RELAXED);
            c->refaulted = 0;
            c->purged_ms = now_ms ? now_ms : 1;
        }
    }
    if (more && (c->purge_pending || c->depot_nfull || c->depot_nempty))
        *more = 1;
    usi_unlock(&c->lock);
    return release ? usi_slab_release(c, release) : 0;
}

struct pass {
    uint64_t now_ms, idle_ms;
    unsigned how; /* USI_PASS_*: without USER, skip what would run a destructor or callback */
    int more;
};

static void pass_one(struct uslab_cache *c, void *arg)
{
    struct pass *p = arg;
    if ((p->how & USI_PASS_EXIT) && usi_slab_idle_bytes() <= USI_SLAB_HEADROOM)
        return; /* a thread's exit: within the headroom, the rest waits for the delay */
    int user = (p->how & USI_PASS_USER) || !c->dtor;
    if (p->how & USI_PASS_STARVED) {
        /* Another cache's slabs could not grow: the spans of this one's empty slabs (the
         * reserve too) go back to the pages layer, where that cache takes them; the depot's
         * objects first where no destructor runs for them. No user code: the starved
         * thread may hold its own locks. */
        if (__atomic_load_n(&c->mag_capacity, __ATOMIC_RELAXED) && !c->dtor)
            usi_depot_drain(c, 0);
        release_empty(c, 1, 0, 0, 0, NULL);
        return;
    }
    if (p->how & USI_PASS_URGENT) {
        /* Pressure: the depot's magazines, the cache's own reclaim callback, every empty
         * slab (the reserve too). Threads' own magazines stay theirs. An inline pass runs
         * no user code: the callback runs on the cache's next allocation slow path. */
        if (__atomic_load_n(&c->mag_capacity, __ATOMIC_RELAXED) && user)
            usi_depot_drain(c, 0);
        if (c->reclaim && (p->how & USI_PASS_USER))
            usi_objects_call_reclaim(c);
        else if (c->reclaim)
            usi_objects_reclaim_later(c);
        release_empty(c, 1, 0, 0, 0, NULL);
        return;
    }
    if ((p->how & USI_PASS_SHED) && !c->ctor && !c->dtor &&
        __atomic_load_n(&c->mag_capacity, __ATOMIC_RELAXED))
        usi_depot_drain(c, 0); /* no constructed state: shed, whatever the multiplier */
    if (!__atomic_load_n(&c->mag_capacity, __ATOMIC_RELAXED) ||
        !(p->how & (USI_PASS_SURPLUS | USI_PASS_REAP))) {
        /* no depot, or no reap due */
    } else if (user) {
        /* New slabs elsewhere (a surplus pass): what stayed in the depot since the previous
         * surplus pass goes first; else what stayed since the previous periodic reap. */
        usi_depot_reap_unused(c, (p->how & USI_PASS_SURPLUS) != 0);
    } else {
        usi_depot_reap_later(c); /* its destructor runs on its own next slow path */
    }
    /* What the depot still holds goes at a later reap: a pass must come, or memory that
     * idle threads freed stays (medium blocks, a span each: 60 MB kept for good). */
    usi_lock(&c->lock);
    if (c->depot_nfull)
        p->more = 1;
    usi_unlock(&c->lock);
    release_empty(c, 0, p->now_ms, p->idle_ms, p->how, &p->more);
}

int usi_reclaim_pass(uint64_t now_ms, uint64_t idle_ms, unsigned how)
{
    struct pass p = {now_ms, idle_ms, how, 0};
    usi_registry_for_each(pass_one, &p);
    return p.more;
}

/* Most rounds of usi_reclaim_return: each must have given objects back to the slabs (a
 * destructor that frees one of its own cache makes one more round; one whose frees never
 * end would loop for ever). */
#define RETURN_ROUNDS 64

void usi_reclaim_return(struct uslab_cache *c, int every_thread)
{
    /* Without magazines there is nothing cached; destroy still drains (and waits for
     * flushes in flight), as before rounds. */
    if (!every_thread && !__atomic_load_n(&c->mag_capacity, __ATOMIC_RELAXED))
        return;
    /* The destructors that the drain runs may free objects of c itself (uslab.h allows it):
     * into this thread's pair, after it was flushed, so they are flushed in another round,
     * as long as rounds give objects back (the session 13 audit: a node whose destructor
     * freed its spare node made destroy report one live object, and reap keep it). */
    size_t before = SIZE_MAX;
    for (int round = 0; round < RETURN_ROUNDS; round++) {
        if (every_thread)
            usi_tcache_flush_all(c);
        else
            usi_tcache_flush_own(c);
        usi_depot_drain(c, every_thread);
        usi_lock(&c->lock);
        size_t now = c->slab_inuse;
        usi_unlock(&c->lock);
        if (now == 0 || now >= before)
            break;
        before = now;
    }
}

/* Empty slabs of the internal caches (magazines, thread-cache records), all of them: a
 * reap that flushed a depot freed its magazines there, 8 bytes per object it cached. */
static void release_internal(struct uslab_cache *c, void *arg)
{
    if (c->flags & USI_CACHE_INTERNAL)
        *(size_t *)arg += release_empty(c, 1, 0, 0, 0, NULL);
}

/* What every explicit reap gives back besides its caches' slabs: the internal caches' empty
 * slabs, and the free units of chunks in use (their huge pages held them, design §2). */
static size_t release_magazines(void)
{
    size_t bytes = 0;
    usi_tcache_flush_stash();
    usi_registry_for_each(release_internal, &bytes);
    usi_pages_trim();
    return bytes;
}

static size_t reclaim_one_cache(struct uslab_cache *c)
{
    usi_reclaim_return(c, 0);
    return release_empty(c, 1, 0, 0, 0, NULL);
}

size_t usi_reclaim_cache(struct uslab_cache *c)
{
    size_t bytes = reclaim_one_cache(c);
    release_magazines(); /* the cache's own bytes are what uslab_cache_reap reports */
    return bytes;
}

static void reclaim_one(struct uslab_cache *c, void *arg)
{
    *(size_t *)arg += reclaim_one_cache(c);
}

size_t usi_reclaim_all(void)
{
    size_t bytes = 0;
    usi_registry_for_each(reclaim_one, &bytes);
    return bytes + release_magazines();
}

static void reclaim_class(struct uslab_cache *c, void *arg)
{
    if (c->id >= 1 && c->id <= USI_NCLASSES) /* a malloc class: no callback to run */
        *(size_t *)arg += reclaim_one_cache(c);
}

size_t usi_reclaim_classes(void)
{
    size_t bytes = 0;
    usi_registry_for_each(reclaim_class, &bytes);
    return bytes + release_magazines();
}
