/* SPDX-License-Identifier: MIT */
/*
 * pages.h - the pages layer (rank 9, pages.c; docs/design.md §1): the reserved range,
 * spans, the page map and the other side arrays, the unit tags (design §2).
 */
#ifndef USLAB_PAGES_H
#define USLAB_PAGES_H

#include "base.h"

#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

/*
 * The page map: one word per 64 KiB unit of the reserved range [base, base + nunits*64K);
 * nunits grows with the reservation (design §2).
 * Written by the slab layer when it creates or releases a slab (the span is its alone
 * then), read without a lock (relaxed atomics): a pointer is ours iff it falls in the range and its
 * entry is non-zero. No value is ever read from the pages themselves.
 *
 * The unit tags: one uint16_t per unit of the range, read like the page map (usi_unit_tag).
 * The owner of a span chooses its tag (the slab layer writes the cache's unit_tag; the
 * malloc front end gives its classes their pair offset, §8); 0 everywhere else, and for
 * any pointer outside the range.
 */
struct usi_pagemap {
    uintptr_t base; /* start of the reserved range, 8 MiB aligned */
    size_t nunits;  /* units reserved so far; 0 before initialisation */
    uintptr_t *map; /* nunits entries: (slab | cache id) or 0 */
    uint16_t *tags; /* nunits entries: unit tags (above) */
    char *meta;     /* nunits records of USI_SLAB_META_BYTES: slab headers (slab.c) */
    uint64_t *bits; /* nunits * USI_SLAB_BITS_BYTES: slab allocation bitmaps (slab.c) */
};
extern struct usi_pagemap usi_pagemap;

/*
 * Slab metadata lives out of the spans (design §3, docs/security.md), so no linear overflow
 * of a user block reaches it: per 64 KiB unit, a header record and a bitmap of one bit per
 * 16 bytes. A slab of 2^k units uses the record of its first unit and the bitmaps of all
 * its units, which are contiguous. Both arrays are reserved PROT_NONE as far as the range
 * is and made read/write together with the spans they describe (the bump pointer's commit),
 * so they cost memory only where slabs are and are never touched by mlockall elsewhere.
 * From USI_SPAN_LINK_AT a record is the pages layer's: a free span's list link (pages.c).
 */
#define USI_SLAB_META_BYTES 128
#define USI_SPAN_LINK_AT    120 /* a record's offset of the pages layer's span link */
#define USI_SLAB_BITS_BYTES 512 /* 4096 objects of 16 bytes per unit */
#define USI_MIN_STRIDE      16  /* the smallest object slot of any cache */
_Static_assert(USI_SLAB_BITS_BYTES * 8 * USI_MIN_STRIDE == USI_UNIT_SIZE,
               "a unit's bitmap has a bit for every slot of the smallest stride");

/* The header record of the slab (or free span) at span, and its bitmap. */
static inline void *usi_pages_meta(uintptr_t span)
{
    return usi_pagemap.meta + ((span - usi_pagemap.base) >> USI_UNIT_SHIFT) * USI_SLAB_META_BYTES;
}
static inline uint64_t *usi_pages_bits(uintptr_t span)
{
    return usi_pagemap.bits +
           ((span - usi_pagemap.base) >> USI_UNIT_SHIFT) * (USI_SLAB_BITS_BYTES / 8);
}

#define USI_ADDRESS_BITS 47

/* The unit tag of p's unit; 0 outside the range (free's fast path, §8). nunits only grows,
 * after the arrays cover the new units (release): on x86-64 a plain load orders as well as
 * a relaxed one, and the compiler can fold it into the compare (one instruction less). */
static inline unsigned usi_unit_tag(const void *p)
{
    uintptr_t idx = ((uintptr_t)p - usi_pagemap.base) >> USI_UNIT_SHIFT;
#if defined(__x86_64__) && !USI_TSAN
    size_t nunits = usi_pagemap.nunits;
#else
    size_t nunits = __atomic_load_n(&usi_pagemap.nunits, __ATOMIC_ACQUIRE);
#endif
    if (USI_UNLIKELY(idx >= nunits))
        return 0;
    return usi_pagemap.tags[idx];
}

/* Reserves the range within the address-space budget (RLIMIT_AS / 4); 0, or -1 when
 * there is no room for a useful reservation (slabs are then disabled). */
int usi_pages_init(void);
/* A span of 64 KiB << order bytes, aligned to its size, read/write, reading as zero (fresh,
 * purged, or zeroed by hand where the purge failed: design §2). `dense`: its user writes it
 * from one end on, so it may lie in a chunk of huge pages. NULL (ENOMEM) when the
 * reservation is exhausted or the kernel refuses to commit more of it. */
void *usi_pages_alloc_span(unsigned order, int dense);
/* Purges the span and makes it available again, reading as zero; its page-map entries
 * must be clear. A span that can be neither purged, replaced nor zeroed is abandoned.
 * guard: bytes of guard page (usi_pages_guard, which returned `guard_how`) at each end, made
 * read/write again first, or 0. */
void usi_pages_free_span(void *span, unsigned order, size_t guard, int guard_how);
/* Every chunk in use with free units gives them back (an explicit reap: design §2). */
void usi_pages_trim(void);
/* Bytes of spans abandoned so far (design §2). */
size_t usi_pages_abandoned_bytes(void);
/* The first and last `guard` bytes of a span of `size` bytes of an internal cache (design
 * §3) made guard pages, both the same way, in *how: guard markers (USI_GUARD_MARKERS, os.h)
 * where the kernel takes them, else PROT_NONE (USI_GUARD_PROT). 0, or -1 (some may be
 * made). Either way usi_pages_free_span(span, order, guard, *how) takes them off. */
int usi_pages_guard(void *span, size_t size, size_t guard, int *how);
/* Sets the page-map entries and unit tags of every unit of the span. */
void usi_pages_set_owner(void *span, unsigned order, uintptr_t entry, uint16_t unit_tag);
void usi_pages_prefork(void);
void usi_pages_postfork(int child);
size_t usi_pages_reserved_bytes(void);
/* Whether p lies in uslab's reserved range, in a slab or not (a skip is not: design §2). */
int usi_pages_in_range(const void *p);
/* Where that count is, for the tool that reads it from outside (live.h's map). */
const size_t *usi_pages_reserved_address(void);

/* The page-map entry for p: (slab | id), or 0 for any pointer uslab did not hand out. */
static inline uintptr_t usi_pagemap_lookup(const void *p)
{
    uintptr_t idx = ((uintptr_t)p - usi_pagemap.base) >> USI_UNIT_SHIFT;
    if (USI_UNLIKELY(idx >= __atomic_load_n(&usi_pagemap.nunits, __ATOMIC_RELAXED)))
        return 0;
    return __atomic_load_n(&usi_pagemap.map[idx], __ATOMIC_RELAXED);
}

#pragma GCC visibility pop

#endif
