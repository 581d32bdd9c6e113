/* SPDX-License-Identifier: MIT */
/*
 * tcache.h - the thread-cache layer (rank 14, tcache.c; docs/design.md §1): a thread's pair
 * of magazines per cache (design §4, §5), and the fast paths usi_tcache_alloc and
 * usi_tcache_free, inline here, whose slow paths are tcache.c's.
 */
#ifndef USLAB_TCACHE_H
#define USLAB_TCACHE_H

#include "base.h"
#include "depot.h"
#include "descriptor.h"
#include "objects.h"
#include "settings.h"

#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

/*
 * A thread's pair of magazines for one cache (Bonwick & Adams §3.2). The loaded magazine is
 * cached as three pointers into its objs[] array, so the fast paths need one load and one
 * compare: objs[0 .. top) hold objects, base = objs, limit = objs + capacity. The loaded
 * magazine's `rounds` field is stale while it is loaded; pair_unload writes it back.
 * A pair with no magazine points at usi_mag_empty (base == top == limit): both fast paths
 * miss on it. A blank pair (all zero, prev == NULL: never used by its thread) misses the
 * same way; its thread's slow path points it at usi_mag_empty first. Invariant: top - base <= limit
 * - base = capacity of the loaded magazine; only the owning thread changes a pair, except under the
 * thread cache's lock (below).
 */
struct usi_magpair {
    void **top;
    void **base;
    void **limit;
    struct usi_mag *prev;
    /* The cache's `lattice` (malloc classes: free()'s start-of-object check, §8), copied
     * when the thread first uses the pair; 0 elsewhere, and in blank pairs: free() then
     * takes the slow path. One cache line per pair. */
    uint64_t lattice;
    uint64_t lattice_bound; /* the same value: two fields, so that free() reads each once
                               as a memory operand (no register load: one instruction less) */
    /* Slow start (design §4): the capacity of the magazines the pair uses now, 0 before
     * its first. Only the owner's slow paths use it. */
    uint32_t mag_level;
    /* 1 when the pair's last slow path was a free, 0 after an allocation's (design §4,
     * "A freeing pair"). Only the owner's slow paths use it. */
    uint16_t freeing;
    /* Slow start: the objects the pair's last fill from the slabs took, 0 before its
     * first (design §4). Only the owner's slow paths use it. */
    uint16_t fill_level;
    /* usi_free_secret where `lattice` is set, else 0: free()'s key, read
     * from this line, which the fast path loads anyway (no line more than before). */
    uint64_t free_secret;
} __attribute__((aligned(64)));
_Static_assert(sizeof(struct usi_magpair) == 64, "a pair is one cache line");

static inline struct usi_mag *usi_pair_loaded(const struct usi_magpair *mp)
{
    return (struct usi_mag *)(void *)((char *)mp->base - offsetof(struct usi_mag, objs));
}

/* Words of usi_tcache.pair_pages: a bit for every page of the largest thread cache. */
#define USI_TCACHE_PAGE_WORDS ((USI_MAX_IDS * 64 / USI_PAGE_SIZE + 8 + 63) / 64)

/*
 * A thread's cache: pairs[id] belongs to the cache with that id. Pair 0 never holds a
 * magazine: a cache whose pair_offset is 0 (no magazines) and a free whose unit tag is 0
 * both fall to the slow path. The owning thread reads and writes its pairs without a lock
 * (the fast path). `lock` is taken by the owner when it changes its layout (grows) or
 * moves magazines out of a pair, and by other threads that must reach into it (cache
 * destroy, fork): those only touch pairs of a cache that the owner, by contract, is not
 * using. Invariant: npairs > USI_RESERVED_IDS, pairs_bytes = npairs * sizeof(pair),
 * opened_end <= npairs, and every pair from opened_end on is blank.
 */
struct usi_tcache {
    usi_mutex lock;
    struct usi_tcache *reg_next, *reg_prev; /* registry, under the tcache registry lock */
    size_t map_bytes;                       /* 0 for the static sentinel */
    size_t pairs_bytes;                     /* npairs * sizeof(struct usi_magpair) */
    uint32_t npairs;
    /* One past the highest id of a pair opened on this cache (pair_pages' companion, kept
     * and cleared with it): its flushes look no further, so a thread that used a few small
     * classes looks at a few pairs at its exit, not at every pair of a page. */
    uint32_t opened_end;
    /* id of the pair a lockless (nested, signal handler) exchange of its owner is changing,
     * 0: none; a fork child leaves that pair alone (§7) */
    uint32_t exchanging;
    /* Odd while the owner changes a pair's magazines (base, limit, prev, a magazine's
     * rounds), even otherwise: a sequence count that lets another thread's free() read this
     * thread's pairs without a lock (usi_tcache_block_is_free, design §8). Its fast paths
     * move only `top`, and do not touch it. */
    uint32_t exchange_seq;
    /* A bit per page of this mapping (from its start) holding a pair the owner opened: set
     * by the owner's slow path (relaxed), read by statistics, which read other threads'
     * pairs only on those pages and so never make the others resident (blank pairs). */
    uint64_t pair_pages[USI_TCACHE_PAGE_WORDS];
    struct usi_limbo limbo[USI_LIMBO_SLOTS]; /* the owner's objects in passage (objects.c) */
    struct usi_mag_stash mag_stash; /* the owner's start magazines (depot.h), for its exchanges */
    struct usi_magpair pairs[];
};
_Static_assert((USI_RESERVED_IDS + 1) * sizeof(struct usi_magpair) <= UINT16_MAX,
               "unit tags and usi_tcache_size_offsets[] hold pair offsets in 16 bits");

/* The calling thread's cache; a static sentinel whose pairs are all blank (both fast paths
 * miss on them) until the thread's first slow path. Every fast path therefore needs no
 * NULL check. */
extern __thread struct usi_tcache *usi_tls __attribute__((tls_model("initial-exec")));

/* size -> offset of the malloc class's pair from pairs[0], for sizes up to USI_SMALL_MAX,
 * indexed by the size itself (no rounding instruction); every offset is below the
 * sentinel's pairs_bytes, whose pairs are all empty. One table for every thread: a copy in
 * each thread cache saved malloc one instruction (the table's address) but cost each
 * thread 2 KiB and, with its pairs, a second resident page (3,000 live threads: 12 MB,
 * issue 38). */
extern uint16_t usi_tcache_size_offsets[USI_SMALL_MAX + 1];
/* The same for sizes above USI_SMALL_MAX, indexed by (size + 127) >> 7 (the 128-byte steps
 * of usi_sizeclass_of_large); 0 (pair 0) above the largest class, where glibc serves. So
 * malloc's fast path covers every class: a block of 1-256 KiB took the slow path's
 * set-up and table call, a quarter of `lifetime` d=2000's mallocs. */
extern uint16_t usi_tcache_large_offsets[USI_CLASSES_MAX_SIZE / 128 + 1];
/* Creates the thread-exit key and the two tables above from the size classes. */
void usi_tcache_init(void);
/* Gives a registered cache its pair (pair_offset) if it has magazines. */
void usi_tcache_init_cache(struct uslab_cache *c);
/* The slow paths of the fast paths below. They run callbacks (constructor, destructor,
 * reclaim) only as their last step, once the pair is consistent. */
void *usi_tcache_alloc_slow(struct uslab_cache *c);
/* calloc's: as usi_tcache_alloc_slow, and *zero says whether the object came from a fill of
 * this call and was never written (usi_objects_fill's `zero`): a malloc class's block that then
 * reads as zero. A block of more than a page comes from the slabs each time the magazine is
 * empty, one a fill. */
void *usi_tcache_alloc_zeroed_slow(struct uslab_cache *c, int *zero);
void usi_tcache_free_slow(struct uslab_cache *c, void *p);
/* Takes up to n objects from the calling thread's magazines of c (bulk allocation);
 * returns how many. */
size_t usi_tcache_take_cached(struct uslab_cache *c, size_t n, void **objs);
/* Moves the calling thread's magazines of c to the depot. */
void usi_tcache_flush_own(struct uslab_cache *c);
/* Gives the calling thread's stash of start magazines back (a reap). */
void usi_tcache_flush_stash(void);
/* Moves every thread's magazines of c to c's depot (cache destroy). */
void usi_tcache_flush_all(struct uslab_cache *c);
/* free()'s exact double-free check, after the key matched (design §8): whether p, a
 * block of c, is already free: in the calling thread's magazines of c, in another
 * thread's (read without their locks), in c's depot or back in its slab (e: p's page-map
 * entry). Takes the cache lock. */
int usi_tcache_block_is_free(struct uslab_cache *c, uintptr_t e, const void *p);
/* Objects cached in every thread's magazines for cache c (racy, for statistics). */
size_t usi_tcache_cached_objects(const struct uslab_cache *c);
/* The same for a report that must never wait (statistics at exit, design §10): the lock of
 * the list of thread caches is tried for up to ms milliseconds (usi_trylock_for). 0 with
 * the count in *n, or -1: the lock was busy, nothing counted. */
int usi_tcache_try_cached_objects(const struct uslab_cache *c, unsigned ms, size_t *n);
/* Bytes that magazines held by threads may cache (capacity * stride, summed over every
 * magazine in any thread's pair), kept under usi_options.tcache_max: a hard bound whatever
 * the number of threads. Updated on slow paths only. */
extern size_t usi_tcache_bytes;
/* The head of the list of thread caches, for the tool that reads it from outside (live.h's
 * map). */
struct usi_tcache *const *usi_tcache_registry_address(void);
/* The calling thread gets a thread cache if it has none: a thread that only works with
 * large blocks, whose exit must be seen (usi_purge_thread_exit). */
void usi_tcache_join(void);
void usi_tcache_prefork(void);
void usi_tcache_postfork(int child);
/* In the child after fork, once every lock is usable: the magazines of threads that did
 * not survive go back to their depots. */
void usi_tcache_adopt_orphans(void);

static inline void *usi_pair_pop(struct usi_magpair *mp)
{
    void **t = mp->top;
    if (USI_UNLIKELY(t == mp->base))
        return NULL;
    mp->top = --t;
#ifdef USLAB_VALGRIND
    void *p = *t;
    *t = NULL; /* no stale pointer for memcheck's leak scan */
    return p;
#else
    return *t;
#endif
}

static inline int usi_pair_push(struct usi_magpair *mp, void *p)
{
    void **t = mp->top;
    if (USI_UNLIKELY(t == mp->limit))
        return 0;
    *t = p;
    mp->top = t + 1;
    return 1;
}

static inline struct usi_magpair *usi_tcache_pair(struct usi_tcache *tc, uintptr_t offset)
{
    return (struct usi_magpair *)(void *)((char *)tc->pairs + offset);
}

static inline void *usi_tcache_alloc(struct uslab_cache *c)
{
    struct usi_tcache *tc = usi_tls;
    if (USI_LIKELY(c->pair_offset < tc->pairs_bytes)) {
        void *p = usi_pair_pop(usi_tcache_pair(tc, c->pair_offset));
        if (USI_LIKELY(p != NULL))
            return p;
    }
    return usi_tcache_alloc_slow(c);
}

static inline void usi_tcache_free(struct uslab_cache *c, void *p)
{
    struct usi_tcache *tc = usi_tls;
    if (USI_LIKELY(c->pair_offset < tc->pairs_bytes) &&
        USI_LIKELY(usi_pair_push(usi_tcache_pair(tc, c->pair_offset), p)))
        return;
    usi_tcache_free_slow(c, p);
}

#pragma GCC visibility pop

#endif
