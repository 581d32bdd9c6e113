/* SPDX-License-Identifier: MIT */
/*
 * descriptor.h - the cache descriptor, struct uslab_cache, and the slab header, struct
 * usi_slab (rank 0; docs/design.md §1): data shared by the layers from the size classes
 * up, below all of them so that each may read it. Each field of the cache descriptor names
 * the layer that owns it. The slab header is the slab layer's (slab.h), here because the
 * debug layer (rank 8) reads slabs in its reports and leak scan. The other layers'
 * structures are in their own headers (struct usi_mag in depot.h, struct usi_magpair in
 * tcache.h, ...).
 */
#ifndef USLAB_DESCRIPTOR_H
#define USLAB_DESCRIPTOR_H

#include "base.h"
#include "uslab.h"

#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

/* The slab layer's lists of a cache's slabs, held by the descriptor. */
enum usi_slab_list { USI_SLAB_PARTIAL, USI_SLAB_FULL, USI_SLAB_EMPTY, USI_SLAB_NLISTS };

struct usi_slab;
struct usi_mag;

struct usi_slab_list_head {
    struct usi_slab *first;
    size_t count;
};

/*
 * An object cache. Fields above `lock` are constant after creation and read without a
 * lock (mag_capacity: see there). Fields below are protected by `lock`, under which only
 * the pages lock may be taken (docs/design.md §6).
 */
struct uslab_cache {
    char name[32];
    uintptr_t id;          /* index in usi_caches; low bits of page-map entries */
    uintptr_t pair_offset; /* id * sizeof(struct usi_magpair), or 0: no pair (tcache.c) */
    unsigned flags;
    uint16_t unit_tag;     /* tag of its slabs' units (pages.c): 0, or a malloc class's */
    size_t size;           /* what the user asked for */
    size_t align;          /* power of two, <= page size */
    size_t stride;         /* object size in the slab: size rounded up to align, >= 16 */
    uint64_t stride_recip; /* ceil(2^32 / stride): object index by multiplication (slab.c) */
    /* USI_CACHE_LATTICE caches (the malloc classes): ceil(2^64 / stride), the constant of
     * free()'s start-of-object check (design §8, docs/security.md); 0 for other caches. */
    uint64_t lattice;
    uslab_ctor_fn ctor;
    uslab_dtor_fn dtor;
    uslab_reclaim_fn reclaim;
    void *arg;
    uint64_t callbacks_check; /* keyed hash of ctor, dtor, reclaim, arg (objects.c) */
    /* slab geometry (usi_slab_geometry) */
    size_t slab_size;
    unsigned slab_order;
    /* The most objects a slab holds (its bitmap's bits); each slab's own count is its
     * nobjs: the same, but for a lattice cache's, as many as fit at its phase (slab.c). */
    uint32_t nobjs;
    uint32_t first_offset; /* where objects start in the span: 0, or a guard page (internal) */
    uint32_t colour_max;   /* largest colour offset */
    uint32_t colour_step;
    unsigned debug;       /* USI_DEBUG_* letters enabled for this cache (debug.c) */
    uint32_t obj_offset;  /* user pointer = slot + obj_offset (a left red zone); 0 without */
    uint32_t tail_offset; /* debug caches: their per-object record at slot + tail_offset */
    /* Debug caches: a ring of freed objects kept out of their slabs for a while (slab.c,
     * design §9), so that a write after free is still poison when P checks it; under `lock`.
     * A quarantined object keeps its bitmap bit and its slab's inuse, not slab_inuse. */
    void **quarantine;
    uint32_t quarantine_cap, quarantine_head, quarantine_count;
    size_t mag_max_bytes; /* mag_capacity * stride */
    size_t empty_reserve; /* empty slabs kept unpurged */
    /* slab.c: the next cache of this one's span group, a ring (usi_slab_share_spans); NULL
     * for a cache in none. */
    struct uslab_cache *span_next;

    /* Capacity of the cache's full-size magazines, set once with the cache (depot.c); 0
     * means no magazines. A pair's magazines grow past mag_steady (at most mag_capacity)
     * only while its slow paths alternate between allocation and free (tcache.c). */
    uint32_t mag_capacity, mag_steady;
    uint32_t pins;    /* registry iterators working on the cache (registry lock) */
    uint32_t closing; /* being destroyed: walks that run callbacks skip it (registry
                       * lock; set once, by usi_registry_close), and the thread
                       * caches' slow paths keep none of its objects (atomic) */
    /* objects.c: set when the slabs could not grow (no span: the reservation is full, or
     * the kernel refused), cleared when an object goes back to a slab. While set, malloc
     * sends up to this many slow paths straight to the system allocator before it tries
     * the slabs again (design §8). A hint: relaxed loads and stores, no lock. */
    uint32_t starved;
    /* The malloc classes: 1 (a release store) once usi_class_setup has set the descriptor
     * up, at the class's first allocation; every other field is zero before (design §7). */
    uint32_t class_ready;
    /* objects.c: an inline pass saw memory pressure but runs no user code; the reclaim
     * callback runs on the cache's next allocation slow path instead (design §3). Set by a
     * pass, taken by that slow path; relaxed, no lock. */
    uint32_t reclaim_wanted;
    /* depot.c: an inline pass found magazines to reap in a cache with a destructor but runs
     * no user code; the cache's next allocation slow path reaps them (design §4). Relaxed. */
    uint32_t reap_wanted;

    usi_mutex lock;
    uint32_t colour_next;
    struct usi_slab_list_head lists[USI_SLAB_NLISTS];
    /* depot.c: the full and the empty magazines, a stack a lane; a thread gives to and takes
     * from its own lane first (design §4, "Depot"). */
    struct usi_mag *depot_full[USI_DEPOT_LANES], *depot_empty[USI_DEPOT_LANES];
    size_t depot_nfull, depot_nempty; /* depot_nfull: stored atomically (read unlocked) */
    /* The working set (Bonwick & Adams §3.6): the lowest counts since the last periodic
     * reap, and the lowest full count since the last surplus pass's reap. */
    size_t depot_min_full, depot_min_empty, depot_min_surplus;
    int depot_kicked;      /* a pass was asked for since the depot last had no full magazine */
    size_t depot_flushing; /* magazines taken out to flush, not yet back */
    /* Those of them whose objects are not back in their slabs yet (under `lock`, linked by
     * flight_next): a fork child puts their objects back (usi_depot_postfork_child). */
    struct usi_mag *in_flight;
    size_t slab_inuse; /* objects outside slabs: live + cached in magazines */
    int purge_pending; /* empty slabs beyond the reserve await the purger */
    size_t depot_rounds;
    size_t depot_surplus;    /* bytes of depot_rounds as counted in usi_slab_surplus_bytes
                              * (depot.c) */
    int depot_shedding;      /* full magazines go back to the slabs (depot.c; relaxed atomic) */
    uint64_t depot_demanded; /* shedding episodes when it last stopped (depot.c; atomic) */
    uint64_t depot_shed_ms;  /* when it last started shedding (depot.c; atomic) */
    /* bytes of the objects sent past the depot to the slabs since the cache last filled
     * from them or began to shed (depot.c; atomic) */
    uint64_t depot_passed;
    uint64_t slabs_created, slabs_released;
    uint64_t slab_objects; /* objects its slabs hold room for: the sum of their nobjs */
    /* Cumulative counts for statistics (design §10), kept on slow paths only: objects taken
     * from and returned to the slabs (so slab_inuse = slab_takes - slab_puts), and objects in
     * full magazines given to the depot and handed out by it. Their growth between two
     * readings is the churn `uslab top` shows. */
    uint64_t slab_takes, slab_puts, depot_in, depot_out;
    /* Bytes of the pages of live slabs that objects have been in: per slab, the pages from
     * its first object's to its highest object handed out so far (below `bump`); the rest of
     * a slab was never touched. An estimate of resident memory (design §10). */
    size_t touched_bytes;
    /* Purge hysteresis (design §3): empty slabs go once idle for the delay times purge_mult
     * (1 to USI_PURGE_MULT_MAX). A slab created within two such delays of the cache's last
     * purge (purged_ms) means the purge was faulted back: the multiplier goes to its most
     * (usi_slab_keep_memory); a purge with no such refault since the previous one halves
     * it. */
    uint64_t purged_ms;
    uint32_t purge_mult;
    int refaulted;
};

/*
 * A slab: a span of nobjs objects of cache->stride bytes, from span + first_offset + colour
 * on; its header (this record) and its bitmap are in the pages layer's side arrays, never
 * in the span (docs/security.md). Objects are numbered from the span's end down: index 0
 * is the highest (usi_slab_object), so a new slab's first objects share its last page with
 * the free marks of the lattice's tail (§3), and a slab with one object in use has one
 * resident page, not two. Invariants (all under cache->lock; usi_slab_check tests them,
 * USI_ASSERT samples them):
 *  - nobjs <= cache->nobjs: all that fit after the slab's colour (for a lattice cache, its
 *    phase: 1 to 4% more objects in the classes of 1 to 32 KiB than the worst phase fits);
 *  - inuse = number of objects outside the slab (in magazines or with the user);
 *  - objects with index >= bump have never been handed out (their pages may be untouched);
 *  - bit i of alloc_map is set iff object i is outside the slab (exact double-free check),
 *    so the bitmap's population count is inuse; bits past nobjs are clear. The bitmap is
 *    the free list too: no object in the slab holds anything of this layer's, so a write
 *    after free cannot steer it (docs/security.md §3);
 *  - every bitmap word below scan is full: taking starts at word scan;
 *  - list says which of the cache's lists holds the slab: EMPTY iff inuse == 0,
 *    FULL iff inuse == nobjs, PARTIAL otherwise. A slab moves only when that changes.
 *    USI_SLAB_NLISTS: detached, on its way back to the pages layer.
 *  - USI_CACHE_LATTICE caches: the low 32 bits of every object's address are a multiple
 *    of stride (colour is that phase), which free() checks without a lookup (§8).
 */
struct usi_slab {
    struct uslab_cache *cache;
    struct usi_slab *next, *prev;
    char *objs;          /* lowest object (index nobjs - 1): span + first_offset + colour */
    char *span;          /* the span (64 KiB << cache->slab_order, aligned to its size) */
    uint64_t *alloc_map; /* the span's bitmap in the side array */
    uint32_t nobjs;      /* objects it holds: cache->nobjs, or for a lattice cache as many as
                          * fit after its phase (colour), one fewer at some phases */
    uint32_t inuse;
    uint32_t bump;
    uint32_t colour;
    uint32_t scan; /* bitmap word the next take looks at first */
    uint8_t list;
    uint8_t guard_how;       /* how its guard pages were made (usi_pages_guard), if it has any */
    uint16_t filler;         /* the filler number of the thread whose magazine fills last
                              * took from it (usi_slab_take), 0: none; 0 while it is full or
                              * empty */
    uint64_t empty_since_ms; /* when inuse last became 0 (usi_os_now_ms) */
    uintptr_t written_low;   /* the span's pages from here up may be resident or written
                              * already (a span adopted from a sibling class: what it and the
                              * owners before it wrote); below, only this slab's objects past
                              * bump were never written. A take's fresh pages (slab.h) end
                              * here; the span's end otherwise */
};

/* Object idx of s (its slot: the user's pointer is obj_offset further). */
static inline char *usi_slab_object(const struct uslab_cache *c, const struct usi_slab *s,
                                    uint32_t idx)
{
    return s->objs + (size_t)(s->nobjs - 1 - idx) * c->stride;
}

#pragma GCC visibility pop

#endif
