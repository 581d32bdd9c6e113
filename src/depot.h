/* SPDX-License-Identifier: MIT */
/*
 * depot.h - the depot layer (rank 13, depot.c; docs/design.md §1): magazines and the
 * per-cache depot of full and empty magazines (design §4).
 */
#ifndef USLAB_DEPOT_H
#define USLAB_DEPOT_H

#include "descriptor.h"

#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

/* A magazine: a stack of constructed objects; objs[0 .. rounds) are valid. */
struct usi_mag {
    struct usi_mag *next;        /* depot stack link */
    struct usi_mag *flight_next; /* the cache's in_flight list, while it is on it */
    uint32_t destructed;         /* in flight: objs[0 .. destructed) went through the destructor */
    uint32_t rounds;
    uint32_t capacity; /* 0 only for usi_mag_empty, the shared sentinel */
    uint32_t flusher;  /* in flight: the listing thread's number (depot.c), which a fork
                        * child's own thread keeps flushing itself */
    void *objs[];      /* capacity slots: magazines of up to 64 and of up to USI_MAG_MAX */
};
extern struct usi_mag usi_mag_empty;

void usi_depot_init(void); /* the internal caches magazines are made of */
/* Sets up the magazine side of a cache descriptor: capacity and growth limit. */
void usi_depot_init_cache(struct uslab_cache *c);
/*
 * A thread's stash of start magazines (objects of the USI_MAG_START_MAX-slot internal
 * cache, which every class's first magazine of every thread comes from): taken from that
 * cache USI_MAG_STASH at a time and given back as many at a time, so that a thread's first
 * slow paths take its lock once in USI_MAG_STASH, not at each of them (3,000 live threads
 * with 32 classes each: the most contended lock of `mt live`, issue 38). It lives in the
 * thread cache (tcache.h), which names it to this layer for its exchanges and its exit's
 * flush only (usi_mag_stash_use). Invariant: n <= USI_MAG_STASH; mags[0 .. n) are start magazines
 * no pair holds; `busy` while its thread changes it (a signal handler's exchange nested in that
 * change goes to the internal cache).
 */
#define USI_MAG_STASH 8
struct usi_mag_stash {
    uint32_t n;
    uint32_t busy;
    struct usi_mag *mags[USI_MAG_STASH];
};
/* The stash of the calling thread's magazine calls from here on; NULL: none. Inline: two
 * calls an exchange. */
extern __thread struct usi_mag_stash *usi_mag_tls_stash __attribute__((tls_model("initial-exec")));
static inline void usi_mag_stash_use(struct usi_mag_stash *s)
{
    usi_mag_tls_stash = s;
}
/* Gives s's magazines back to their internal cache (its thread's exit; a fork child's
 * orphaned thread cache, unless busy). */
void usi_mag_stash_drain(struct usi_mag_stash *s);
/* An empty magazine of cap slots (1 <= cap <= USI_MAG_MAX) for c, or NULL. */
struct usi_mag *usi_mag_new_cap(struct uslab_cache *c, uint32_t cap);
void usi_mag_delete(struct usi_mag *m);
/* An empty magazine of cap slots in place of m (empty, or NULL: none), which the caller
 * gives up: m itself where its object has room for cap slots (one internal cache holds
 * both: no lock, no new object), else a new one and m is freed. m where there is no
 * memory for a new one; NULL where m was NULL too. errno is kept. */
struct usi_mag *usi_mag_refit(struct uslab_cache *c, struct usi_mag *m, uint32_t cap);
/*
 * Depot exchanges, under cache->lock taken inside. None of them runs a callback. The depot
 * of a cache with a constructor or destructor keeps every magazine given to it (the
 * working-set reap bounds it). One of a cache without callbacks keeps, from free's
 * exchanges (get_empty), USI_DEPOT_KEEP_FULL full magazines, more up to
 * USI_DEPOT_KEEP_BYTES of objects where a magazine's objects lie together (a thread's swing:
 * `fastpath`, `small` n1600), none more where they lie scattered, and none beyond the
 * headroom: a full one given beyond is shed, its objects back to their slabs (design §4,
 * "Depot", "Shedding"); a put (a thread's exit, a flush) is kept.
 */
#define USI_DEPOT_KEEP_FULL  4
#define USI_DEPOT_KEEP_BYTES ((size_t)2 << 20)
struct usi_mag *usi_depot_take_full(struct uslab_cache *c, struct usi_mag *give_empty);
/* An empty depot costs no lock and no call (a thread's first slow paths in each class, a
 * thread that only allocates): a magazine given meanwhile is found at the next slow path.
 * 3,000 live threads: 4% of their instructions, and the class lock they contend for. */
static inline struct usi_mag *usi_depot_get_full(struct uslab_cache *c, struct usi_mag *give_empty)
{
    if (!__atomic_load_n(&c->depot_nfull, __ATOMIC_RELAXED))
        return NULL;
    return usi_depot_take_full(c, give_empty);
}
/* get_empty: one of the depot's empty magazines if it has at least cap slots (a smaller
 * one is replaced by a new one of cap slots if one can be made), else a new one of cap
 * slots; NULL if the depot has none and none can be made. */
struct usi_mag *usi_depot_get_empty(struct uslab_cache *c, struct usi_mag *give_full, uint32_t cap);
/* put: to the depot; shed first (below) if usi_depot_sheds, and then, empty, freed instead
 * while the cache sheds. */
void usi_depot_put(struct uslab_cache *c, struct usi_mag *m);
/* Whether a full magazine of c is shed rather than kept (design §4, "Shedding"): c has no
 * constructor and no destructor and sheds already, or the idle memory is beyond its
 * headroom (usi_slab_over_headroom), when it starts to and its depot is drained. No lock
 * held. usi_depot_demand: an allocation slow path of c found no full magazine: it stops,
 * and the objects c sent past its depot no longer count as idle (depot_passed). */
int usi_depot_sheds(struct uslab_cache *c);
void usi_depot_demand_slow(struct uslab_cache *c);
static inline void usi_depot_demand(struct uslab_cache *c)
{
    if (__atomic_load_n(&c->depot_passed, __ATOMIC_RELAXED) ||
        __atomic_load_n(&c->depot_shedding, __ATOMIC_RELAXED))
        usi_depot_demand_slow(c); /* else nothing to end: no call */
}
/* Puts m's objects back into their slabs; m stays the caller's, empty. Only for a cache
 * without a destructor, by a thread that holds its thread cache's lock (an exchange, a
 * flush). No uslab lock of c held. Returns how many runs the objects formed (usi_slab_put):
 * how scattered they were. */
size_t usi_depot_shed(struct uslab_cache *c, struct usi_mag *m);
/* A full magazine its thread could trade for no empty one: counted as being flushed
 * (depot_flushing) and chained onto *over, for usi_depot_dispose, which returns its
 * objects to their slabs and keeps it in the depot, empty. */
void usi_depot_flush_later(struct uslab_cache *c, struct usi_mag *m, struct usi_mag **over);
/* Whether p, a block of c (page-map entry e), is in a full magazine of the depot or back
 * in its slab: part of free()'s double-free check. Takes the cache lock. */
int usi_depot_block_is_free(struct uslab_cache *c, uintptr_t e, const void *p);
/* Destructs a flush_later magazine's objects into their slabs (runs destructors: no lock
 * held) and keeps the empty magazine. Follows m->next: disposes a whole list. */
void usi_depot_dispose(struct uslab_cache *c, struct usi_mag *m);
/* Empties the depot: full magazines flushed to slabs, empty ones freed (runs destructors).
 * With wait_for_flushes, then waits until no flush of this cache's magazines is in flight
 * anywhere (cache destroy: their objects are not live, they are on their way back). */
void usi_depot_drain(struct uslab_cache *c, int wait_for_flushes);
/* Fork child: the objects of the magazines other threads were flushing at the fork go back
 * to their slabs without their destructors (those threads are not in the child), and the
 * magazines to the depot, empty. */
void usi_depot_postfork_child(struct uslab_cache *c);
/* Working-set reaping (Bonwick & Adams §3.6): the magazines the depot did not need since
 * the last call of the same kind (its minimum counts) are flushed and freed (runs
 * destructors). `surplus`: the surplus pass's reap, of full magazines only, on its own
 * watermark. Returns magazines reaped. */
size_t usi_depot_reap_unused(struct uslab_cache *c, int surplus);
/* An inline pass (no user code) over a cache with a destructor: its reap is left to the
 * cache's next allocation slow path, which calls usi_depot_reap_wanted (no lock held). */
void usi_depot_reap_later(struct uslab_cache *c);
void usi_depot_reap_wanted(struct uslab_cache *c);

#pragma GCC visibility pop

#endif
