/* SPDX-License-Identifier: MIT */
/*
 * objects.h - the objects layer (rank 12, objects.c; docs/design.md §1): objects between
 * the slabs and the magazines: locking, the reclaim retry, constructors and destructors
 * (Bonwick 1994 §3).
 */
#ifndef USLAB_OBJECTS_H
#define USLAB_OBJECTS_H

#include "base.h"
#include "descriptor.h"
#include "uslab.h"

#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

/* The key of the callbacks' check (docs/security.md); init.c sets it once, first. */
void usi_objects_set_key(uint64_t key);
/* Sets up the slab side of a cache descriptor (name, sizes, debug layout, callbacks, slab
 * geometry, lock); no id and no magazines yet. */
void usi_objects_init_cache(struct uslab_cache *c, const char *name, size_t size, size_t align,
                            uslab_ctor_fn ctor, uslab_dtor_fn dtor, uslab_reclaim_fn reclaim,
                            void *arg, unsigned flags);
/* One object from the slab layer, constructed; NULL + errno on failure. May run the
 * reclaim callback and the constructor: call it with no lock held and nothing half done. */
void *usi_objects_alloc(struct uslab_cache *c);
/* Calls c's reclaim callback (non-NULL; checked like every callback); no lock held. */
void usi_objects_call_reclaim(struct uslab_cache *c);
/* Under pressure, from a pass that may not run user code (inline): asks for c's reclaim
 * callback on its next allocation slow path (usi_objects_reclaim_wanted). */
void usi_objects_reclaim_later(struct uslab_cache *c);
void usi_objects_reclaim_now(struct uslab_cache *c);
/* Called by the allocation slow path, its pair whole and no lock held (where the reclaim
 * callback may run anyway, design §5): runs it once if a pass asked for it. One load. */
static inline void usi_objects_reclaim_wanted(struct uslab_cache *c)
{
    if (USI_UNLIKELY(__atomic_load_n(&c->reclaim_wanted, __ATOMIC_RELAXED)))
        usi_objects_reclaim_now(c);
}
/* n objects, constructed; all or nothing; returns n or 0 (errno set). `how`: 0 or any of
 * USI_FILL_RECLAIM (the reclaim callback may run when slabs run out) and USI_FILL_THREAD (the
 * objects fill the calling thread's magazine: usi_slab_take's filler). Runs the constructor
 * (if any). `zero` (calloc's fill of a malloc class; else NULL): set to objs[n - 1] where no
 * one ever wrote it (usi_fresh_pages.zero), else to NULL. */
#define USI_FILL_RECLAIM 1
#define USI_FILL_THREAD  2
size_t usi_objects_fill(struct uslab_cache *c, size_t n, void **objs, int how, void **zero);
/* uslab_cache_alloc_bulk's rest: objs[held .. n) filled as by usi_objects_fill (reclaim
 * allowed), the caller's objs[0 .. held) (from its magazines) recorded with them as in
 * passage meanwhile (design §7). Returns n or 0 (errno set; objs[0 .. held) are still the
 * caller's). */
size_t usi_objects_fill_bulk(struct uslab_cache *c, size_t held, size_t n, void **objs);
/* How many malloc slow paths skip a starved cache (see uslab_cache.starved). */
#define USI_STARVED_SKIP 64
/* Whether c's slabs could not grow lately; counts the skip down (a racy hint). */
static inline int usi_objects_starved(struct uslab_cache *c)
{
    uint32_t s = __atomic_load_n(&c->starved, __ATOMIC_RELAXED);
    if (USI_LIKELY(s == 0))
        return 0;
    __atomic_store_n(&c->starved, s - 1, __ATOMIC_RELAXED);
    return 1;
}
/* Destructs n objects and returns them to their slabs. Runs the destructor (if any).
 * Returns the number of runs they formed (usi_slab_put). */
size_t usi_objects_unfill(struct uslab_cache *c, size_t n, void *const *objs);
/* usi_objects_unfill, counting in *destructed the objects whose destructor returned, then
 * locked(c, arg) under the same hold of the cache lock that puts them back (the depot's
 * in-flight list). */
size_t usi_objects_unfill_then(struct uslab_cache *c, size_t n, void *const *objs,
                               uint32_t *destructed, void (*locked)(struct uslab_cache *, void *),
                               void *arg);
/* Whether this thread is inside a constructor, destructor or reclaim callback of c (at a
 * nesting depth of at most 8). */
int usi_objects_in_callback_of(const struct uslab_cache *c);
/* usi_slab_debug_check_live under the cache lock, with the caller's stack captured for the
 * report: for realloc and malloc_usable_size of a block of a debug class (§9). */
int usi_objects_debug_check_live(struct uslab_cache *c, const void *p, const char *fn);
/* Objects back to their slabs with no destructor: a fork child's share of the magazines
 * that other threads of its parent were flushing (their destructors ran there, or not). */
void usi_objects_put_back(struct uslab_cache *c, size_t n, void *const *objs);

/*
 * A thread's objects in passage (design §7, "Objects in passage at a fork"): objects taken
 * from their slabs and not yet handed out while the constructor (or the reclaim callback)
 * runs, or handed back and not yet in their slabs while the destructor runs. Outside both
 * slab and user, a fork child would count them as live for good (no thread of the child
 * holds them): the child puts them back raw. A thread has USI_LIMBO_SLOTS records: a
 * callback may allocate or free objects of other caches (or a signal handler may), which
 * takes the next free one; passages deeper than that keep none. Invariants: cache != NULL
 * iff the record is in use; the objects, all outside their slabs, are `one` where n == 1
 * (the caller's array may be on its stack), else objs[0 .. n). Written by its owner
 * only; set in the same hold of cache->lock as the take, cleared in the same hold as the put, so a
 * fork (which holds every cache lock) sees either both or neither.
 */
struct usi_limbo {
    struct uslab_cache *cache;
    void *const *objs;
    size_t n;
    void *one;
};
#define USI_LIMBO_SLOTS 4
/* Where the calling thread records its passages: USI_LIMBO_SLOTS records in its thread
 * cache (tcache.c sets it when the thread gets one, moves it when that grows), NULL when
 * it has none. */
void usi_objects_set_limbo(struct usi_limbo *slots);
/* In a fork child: puts an orphaned thread's objects in passage back in their slabs. */
void usi_objects_limbo_return(struct usi_limbo *slots);

#pragma GCC visibility pop

#endif
