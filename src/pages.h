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
 * Written under the pages lock when a slab is created or released, read without a lock
 * (relaxed atomics): a pointer is ours iff it falls in the range and its entry is
 * non-zero. No value is ever read from the pages themselves.
 *
 * The unit tags: one uint16_t per 64 KiB unit of the whole 47-bit user address space (4 GiB
 * of address space, mapped read-only except over the reservation, so it costs no commit
 * charge and no memory where never written). The owner of a span chooses its tag (the
 * slab layer writes the cache's unit_tag; the malloc front end gives its classes their
 * pair offset, §8); 0 everywhere else. The index is masked with usi_unit_tag_mask (0 until
 * the table exists: then it reads a one-entry table), so any pointer, even a garbage one,
 * reads a valid tag without a range check.
 */
struct usi_pagemap {
    uintptr_t base; /* start of the reserved range, 8 MiB aligned */
    size_t nunits;  /* units reserved so far; 0 before initialisation */
    uintptr_t *map; /* nunits entries: (slab | cache id) or 0 */
    uint32_t *link; /* nunits entries: free-span list links (unit index + 1, 0 = end) */
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
 */
#define USI_SLAB_META_BYTES 128
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
extern const uint16_t *usi_unit_tags; /* 2^(47-16) entries; see above */
extern uintptr_t usi_unit_tag_mask;

static inline unsigned usi_unit_tag(const void *p)
{
    /* Both words change once, when the table is mapped (usi_pages_try_tags): the table
     * pointer first, then the mask. The mask is loaded first and the pointer after it: on
     * x86-64 an empty asm that takes the masked index as input orders the two loads at no
     * cost (loads are not reordered with loads); elsewhere an acquire load does. A reader
     * that sees the old mask (0) reads entry 0 of either table: 0. */
    uintptr_t idx = ((uintptr_t)p >> USI_UNIT_SHIFT) & usi_unit_tag_mask;
    const uint16_t *tags;
#if defined(__x86_64__) && !USI_TSAN
    __asm__("mov %1, %0" : "=r"(tags) : "m"(usi_unit_tags), "r"(idx));
#else
    idx = ((uintptr_t)p >> USI_UNIT_SHIFT) & __atomic_load_n(&usi_unit_tag_mask, __ATOMIC_ACQUIRE);
    tags = __atomic_load_n(&usi_unit_tags, __ATOMIC_RELAXED);
#endif
    return tags[idx];
}

/* Reserves the range within the address-space budget (RLIMIT_AS / 4); 0, or -1 when
 * there is no room for a useful reservation (slabs are then disabled). */
int usi_pages_init(void);
/* Whether the unit-tag table exists. Until it does, every free takes the slow path. */
int usi_pages_have_tags(void);
/* Maps the unit-tag table if RLIMIT_AS leaves room for it and the process does not lock
 * its future mappings (design §2); cold. */
void usi_pages_try_tags(void);
/* Before mlockall(flags): with MCL_CURRENT, in a process that never had a second thread,
 * unmaps the tag table (4 GiB that the kernel would count and make present); free then
 * takes the page-map path, as before the table existed (design §2). */
void usi_pages_before_mlockall(int flags);
/* The process's RLIMIT_AS is now `limit` bytes (SIZE_MAX: none), set by the program
 * (override.c's setrlimit and prlimit): the budget follows it, and where the tag table no
 * longer fits it (room for it twice in a quarter of the limit, as when it is mapped) and
 * no other thread can be reading it (`alone`: the caller's word, by the purger's rule), the
 * table is unmapped (design §2). */
void usi_pages_address_limit_changed(size_t limit, int alone);
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
