/* SPDX-License-Identifier: MIT */
/*
 * depot.c - magazines and the per-cache depot (docs/design.md §4), after Bonwick & Adams,
 * "Magazines and Vmem" (USENIX 2001) §3.
 *
 * A magazine is an array of pointers to constructed objects. The depot of a cache keeps a
 * stack of full magazines and a stack of empty ones under cache->lock; threads trade whole
 * magazines with it, so the lock is taken once per magazine of objects, not per object.
 * The depot keeps at most depot_max_full full magazines: beyond that a magazine is
 * flushed, its objects destructed and returned to their slabs, which lets empty slabs be
 * purged. Destructors always run without cache->lock held.
 */
#include "internal.h"

#include <string.h>

struct usi_mag usi_mag_empty; /* rounds = capacity = 0: every fast path misses on it */

/* Magazines themselves are objects of two internal caches without magazines: up to 64
 * slots (every cache starts there), and up to USI_MAG_MAX (grown magazines). */
static struct uslab_cache mag_small, mag_large;

void usi_depot_init(void);
void usi_depot_init(void)
{
    usi_cache_init(&mag_small, "uslab-magazine",
                   sizeof(struct usi_mag) + USI_MAG_SMALL * sizeof(void *), 64, NULL, NULL, NULL,
                   NULL, USLAB_CACHE_NOMAGAZINE | USI_CACHE_INTERNAL);
    usi_cache_init(&mag_large, "uslab-magazine-large",
                   sizeof(struct usi_mag) + USI_MAG_MAX * sizeof(void *), 64, NULL, NULL, NULL,
                   NULL, USLAB_CACHE_NOMAGAZINE | USI_CACHE_INTERNAL);
}

struct usi_mag *usi_mag_new(struct uslab_cache *c)
{
    uint32_t cap = __atomic_load_n(&c->mag_capacity, __ATOMIC_RELAXED);
    struct usi_mag *m = usi_cache_alloc_from_slab(cap <= USI_MAG_SMALL ? &mag_small : &mag_large);
    if (!m)
        return NULL;
    m->next = NULL;
    m->rounds = 0;
    m->capacity = cap;
    return m;
}

void usi_mag_delete(struct usi_mag *m)
{
    if (m && m != &usi_mag_empty)
        usi_cache_unfill(m->capacity <= USI_MAG_SMALL ? &mag_small : &mag_large, 1,
                         (void *const *)&m);
}

void usi_depot_flush_mag(struct uslab_cache *c, struct usi_mag *m)
{
    if (m->rounds)
        usi_cache_unfill(c, m->rounds, m->objs);
#ifdef USLAB_VALGRIND
    memset(m->objs, 0, m->rounds * sizeof(void *)); /* no stale pointers for the leak scan */
#endif
    m->rounds = 0;
}

/* Pushes m (cache->lock held); returns a full magazine to flush if the depot is over its
 * limit, else NULL. */
void usi_depot_set_limit(struct uslab_cache *c)
{
    size_t per_mag = (size_t)c->mag_capacity * c->stride;
    c->depot_max_full = 2;
    if (per_mag && usi_options.depot_bytes / per_mag > c->depot_max_full)
        c->depot_max_full = usi_options.depot_bytes / per_mag;
}

/* Takes the depot's lock, counting the times it had to wait: past USI_DEPOT_CONTENTION the
 * cache's new magazines double in size (Bonwick & Adams §3.7), so threads come back to the
 * depot half as often. Magazines already made keep their size. Only with
 * USLAB_MAGAZINE_GROWTH=1 (mag_max is the start capacity otherwise): measured on 2 cores,
 * bigger magazines made contended alloc/free 3-4x slower (docs/design.md §4). */
static void depot_lock(struct uslab_cache *c)
{
    if (pthread_mutex_trylock(&c->lock) == 0)
        return;
    pthread_mutex_lock(&c->lock);
    if (++c->depot_contended >= USI_DEPOT_CONTENTION && c->mag_capacity < c->mag_max) {
        uint32_t cap = c->mag_capacity * 2 < c->mag_max ? c->mag_capacity * 2 : c->mag_max;
        __atomic_store_n(&c->mag_capacity, cap, __ATOMIC_RELAXED);
        usi_depot_set_limit(c);
        c->depot_contended = 0;
    }
}

static struct usi_mag *depot_push_locked(struct uslab_cache *c, struct usi_mag *m)
{
    if (m->rounds == 0) {
        m->next = c->depot_empty;
        c->depot_empty = m;
        c->depot_nempty++;
        return NULL;
    }
    m->next = c->depot_full;
    c->depot_full = m;
    c->depot_nfull++;
    c->depot_rounds += m->rounds;
    if (c->depot_nfull <= c->depot_max_full)
        return NULL;
    struct usi_mag *over = c->depot_full;
    c->depot_full = over->next;
    c->depot_nfull--;
    c->depot_rounds -= over->rounds;
    return over;
}

struct usi_mag *usi_depot_get_full(struct uslab_cache *c, struct usi_mag *give_empty)
{
    depot_lock(c);
    struct usi_mag *m = c->depot_full;
    if (m) {
        c->depot_full = m->next;
        c->depot_nfull--;
        c->depot_rounds -= m->rounds;
        if (c->depot_nfull < c->depot_min_full)
            c->depot_min_full = c->depot_nfull;
        if (give_empty && give_empty != &usi_mag_empty)
            depot_push_locked(c, give_empty);
    }
    pthread_mutex_unlock(&c->lock);
    return m;
}

struct usi_mag *usi_depot_get_empty(struct uslab_cache *c, struct usi_mag *give_full)
{
    depot_lock(c);
    struct usi_mag *over = NULL;
    if (give_full && give_full != &usi_mag_empty)
        over = depot_push_locked(c, give_full);
    struct usi_mag *m = c->depot_empty;
    if (m) {
        c->depot_empty = m->next;
        c->depot_nempty--;
        if (c->depot_nempty < c->depot_min_empty)
            c->depot_min_empty = c->depot_nempty;
    }
    pthread_mutex_unlock(&c->lock);
    if (over) {
        usi_depot_flush_mag(c, over);
        if (!m)
            return over;
        usi_depot_put(c, over);
    }
    return m ? m : usi_mag_new(c);
}

void usi_depot_put(struct uslab_cache *c, struct usi_mag *m)
{
    if (!m || m == &usi_mag_empty)
        return;
    depot_lock(c);
    struct usi_mag *over = depot_push_locked(c, m);
    pthread_mutex_unlock(&c->lock);
    if (over) {
        usi_depot_flush_mag(c, over);
        usi_depot_put(c, over);
    }
}

/* Flushes (destructs into slabs) and frees two lists of magazines taken off the depot;
 * called without the lock. */
static void free_mag_lists(struct uslab_cache *c, struct usi_mag *full, struct usi_mag *empty)
{
    while (full) {
        struct usi_mag *next = full->next;
        usi_depot_flush_mag(c, full);
        usi_mag_delete(full);
        full = next;
    }
    while (empty) {
        struct usi_mag *next = empty->next;
        usi_mag_delete(empty);
        empty = next;
    }
}

void usi_depot_drain(struct uslab_cache *c)
{
    pthread_mutex_lock(&c->lock);
    struct usi_mag *full = c->depot_full, *empty = c->depot_empty;
    c->depot_full = c->depot_empty = NULL;
    c->depot_nfull = c->depot_nempty = 0;
    c->depot_min_full = c->depot_min_empty = 0;
    c->depot_rounds = 0;
    pthread_mutex_unlock(&c->lock);
    free_mag_lists(c, full, empty);
}

size_t usi_depot_reap_unused(struct uslab_cache *c)
{
    struct usi_mag *full = NULL, *empty = NULL;
    size_t n = 0;
    pthread_mutex_lock(&c->lock);
    /* depot_min_* magazines sat in the depot through the whole interval: not needed. */
    for (size_t i = 0; i < c->depot_min_full && c->depot_full; i++, n++) {
        struct usi_mag *m = c->depot_full;
        c->depot_full = m->next;
        c->depot_nfull--;
        c->depot_rounds -= m->rounds;
        m->next = full;
        full = m;
    }
    for (size_t i = 0; i < c->depot_min_empty && c->depot_empty; i++, n++) {
        struct usi_mag *m = c->depot_empty;
        c->depot_empty = m->next;
        c->depot_nempty--;
        m->next = empty;
        empty = m;
    }
    c->depot_min_full = c->depot_nfull;
    c->depot_min_empty = c->depot_nempty;
    pthread_mutex_unlock(&c->lock);
    free_mag_lists(c, full, empty);
    return n;
}
