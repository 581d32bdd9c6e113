/* SPDX-License-Identifier: MIT */
/*
 * pages.c - the pages layer (docs/design.md §2): one reserved address range, carved into
 * spans of 64 KiB << order bytes aligned to their size, and the page map that tells, for
 * any pointer, the slab that owns it in O(1), or that uslab did not hand it out.
 *
 * Spans come from per-order free lists, then from a bump pointer over the reservation,
 * then by splitting a larger free span. Alignment gaps left by the bump pointer are put on
 * the smaller orders' free lists, so no address space is lost. Free-list links live in a
 * side array (usi_pagemap.link), never in the purged span, so a free span stays unbacked.
 * A freed span always reads as zero when reused, even where the kernel refuses to purge it
 * (span_discard).
 */
#include "internal.h"

#include <errno.h>
#include <string.h>

#define CHUNK ((size_t)4 << 20) /* commit granularity (mprotect calls) */
#define NTAGS ((size_t)1 << (USI_ADDRESS_BITS - USI_UNIT_SHIFT))

/* Until the tag table exists, the mask is 0 and every lookup reads this one tag: 0. */
static const uint16_t zero_tags[1];

struct usi_pagemap usi_pagemap;
const uint16_t *usi_unit_tags = zero_tags;
uintptr_t usi_unit_tag_mask;
static uint16_t *unit_tags; /* writable view of usi_unit_tags */

/* Everything below is protected by pages.lock; it is the innermost lock (design §6). */
static struct {
    pthread_mutex_t lock;
    uintptr_t bump;      /* next never-used address */
    uintptr_t committed; /* [base, committed) is read/write */
    uintptr_t end;
    uint32_t free_head[USI_SPAN_ORDERS]; /* unit index + 1 of the first free span; 0: none */
    /* Free spans that could not be purged and were zeroed by hand (span_discard): they read
     * as zero but hold memory, so they are reused first and purged again once a purge works. */
    uint32_t resident_head[USI_SPAN_ORDERS];
    size_t nresident; /* spans on the resident lists */
    size_t reserved;
    size_t abandoned; /* bytes of spans that could not be made zero again (free_span) */
} pages = {.lock = PTHREAD_MUTEX_INITIALIZER};

static inline size_t span_bytes(unsigned order)
{
    return USI_UNIT_SIZE << order;
}

static inline uint32_t unit_of(uintptr_t addr)
{
    return (uint32_t)((addr - usi_pagemap.base) >> USI_UNIT_SHIFT);
}

int usi_pages_init(void)
{
    size_t size = usi_options.reserve_bytes;
    void *base = usi_os_reserve(&size, span_bytes(USI_SPAN_ORDERS - 1));
    if (!base)
        return -1;
    size_t nunits = size >> USI_UNIT_SHIFT;
    uintptr_t *map = usi_os_map(nunits * sizeof(uintptr_t));
    uint32_t *link = usi_os_map(nunits * sizeof(uint32_t));
    uint16_t *tags = usi_os_map_zero_ro(NTAGS * sizeof(uint16_t));
    /* Only the tags over the reservation are ever written: make that window writable. */
    uintptr_t first = ((uintptr_t)base >> USI_UNIT_SHIFT) * sizeof(uint16_t);
    uintptr_t last = (((uintptr_t)base + size) >> USI_UNIT_SHIFT) * sizeof(uint16_t);
    first &= ~(uintptr_t)(USI_PAGE_SIZE - 1);
    last = (last + USI_PAGE_SIZE - 1) & ~(uintptr_t)(USI_PAGE_SIZE - 1);
    if (!map || !link || !tags || (uintptr_t)base + size > ((uintptr_t)1 << USI_ADDRESS_BITS) ||
        usi_os_commit((char *)tags + first, last - first) != 0) {
        usi_os_unmap(map, nunits * sizeof(uintptr_t));
        usi_os_unmap(link, nunits * sizeof(uint32_t));
        usi_os_unmap(tags, NTAGS * sizeof(uint16_t));
        usi_os_unmap(base, size);
        errno = ENOMEM;
        return -1;
    }
    unit_tags = tags;
    __atomic_store_n(&usi_unit_tags, tags, __ATOMIC_RELEASE);
    __atomic_store_n(&usi_unit_tag_mask, NTAGS - 1, __ATOMIC_RELEASE); /* after the table */
    pages.bump = pages.committed = (uintptr_t)base;
    pages.end = (uintptr_t)base + size;
    pages.reserved = size;
    usi_pagemap.base = (uintptr_t)base;
    usi_pagemap.map = map;
    usi_pagemap.link = link;
    /* Published last: lookups see nunits == 0 (nothing is ours) until the map exists. */
    __atomic_store_n(&usi_pagemap.nunits, nunits, __ATOMIC_RELEASE);
    return 0;
}

size_t usi_pages_reserved_bytes(void)
{
    return pages.reserved;
}

/* Push and pop on one of the two sets of free lists (free_head or resident_head). */
static void span_push(uint32_t *heads, uintptr_t addr, unsigned order)
{
    uint32_t u = unit_of(addr);
    usi_pagemap.link[u] = heads[order];
    heads[order] = u + 1;
    if (heads == pages.resident_head) /* read without the lock by usi_pages_free_span */
        __atomic_fetch_add(&pages.nresident, 1, __ATOMIC_RELAXED);
}

static uintptr_t span_pop(uint32_t *heads, unsigned order)
{
    uint32_t head = heads[order];
    if (!head)
        return 0;
    heads[order] = usi_pagemap.link[head - 1];
    if (heads == pages.resident_head)
        __atomic_fetch_sub(&pages.nresident, 1, __ATOMIC_RELAXED);
    return usi_pagemap.base + ((uintptr_t)(head - 1) << USI_UNIT_SHIFT);
}

static void free_push(uintptr_t addr, unsigned order)
{
    span_push(pages.free_head, addr, order);
}

static uintptr_t free_pop(unsigned order)
{
    return span_pop(pages.free_head, order);
}

/* Takes a span from the bump pointer; gaps below the aligned start go to the free lists. */
static uintptr_t bump_take(unsigned order)
{
    size_t size = span_bytes(order);
    uintptr_t start = (pages.bump + size - 1) & ~(uintptr_t)(size - 1);
    if (start + size > pages.end || start + size < start)
        return 0;
    if (start + size > pages.committed) {
        uintptr_t want = (start + size + CHUNK - 1) & ~(uintptr_t)(CHUNK - 1);
        if (want > pages.end)
            want = pages.end;
        if (usi_os_commit((void *)pages.committed, want - pages.committed) != 0)
            return 0;
        pages.committed = want;
    }
    while (pages.bump < start) { /* every gap piece is aligned to its own size */
        unsigned o = 0;
        while (o + 1 < order && (pages.bump & (span_bytes(o + 1) - 1)) == 0 &&
               pages.bump + span_bytes(o + 1) <= start)
            o++;
        free_push(pages.bump, o);
        pages.bump += span_bytes(o);
    }
    pages.bump = start + size;
    return start;
}

void *usi_pages_alloc_span(unsigned order)
{
    usi_lock(&pages.lock);
    uintptr_t s = span_pop(pages.resident_head, order); /* backed already: first */
    if (!s)
        s = free_pop(order);
    if (!s)
        s = bump_take(order);
    for (unsigned o = order + 1; !s && o < USI_SPAN_ORDERS; o++) {
        uint32_t *heads = pages.free_head;
        uintptr_t big = span_pop(heads, o);
        if (!big)
            big = span_pop(heads = pages.resident_head, o);
        if (!big)
            continue;
        /* Split: keep the lowest piece, give the upper halves back to the same lists. */
        for (unsigned k = o; k > order; k--)
            span_push(heads, big + span_bytes(k - 1), k - 1);
        s = big;
    }
    usi_unlock(&pages.lock);
    if (!s)
        errno = ENOMEM;
    return (void *)s;
}

enum { PURGED, REPLACED, ZEROED, ABANDONED };

/*
 * Makes a freed span read as zero, giving its memory back where the kernel lets us
 * (design §2). The slab layer trusts that: a reused span's header and bitmap must be zero.
 * MADV_DONTNEED fails on locked pages (mlock, mlockall): then a fresh mapping goes over the
 * span. If that fails too, the span holds its old contents, or nothing where the kernel
 * unmapped it before failing: a mapped span is zeroed by hand (and stays resident), a hole
 * is filled with zero pages unless something else took it. ABANDONED: none of that worked.
 */
static int span_discard(void *span, size_t size)
{
    if (usi_os_purge(span, size) == 0)
        return PURGED;
    if (usi_os_replace(span, size) == 0)
        return REPLACED;
    if (usi_os_is_mapped(span, size)) {
        USI_VG_UNDEFINED(span, size);
        memset(span, 0, size);
        return ZEROED;
    }
    return usi_os_map_at(span, size) == 0 ? REPLACED : ABANDONED;
}

/* After a purge that worked: one span zeroed by hand earlier gets its purge now. Only
 * MADV_DONTNEED: a failed replacement could leave a hole in a span on a free list. */
static void purge_one_resident(void)
{
    uintptr_t s = 0;
    unsigned o;
    usi_lock(&pages.lock);
    for (o = 0; o < USI_SPAN_ORDERS; o++)
        if ((s = span_pop(pages.resident_head, o)) != 0)
            break;
    usi_unlock(&pages.lock);
    if (!s)
        return;
    int purged = usi_os_purge((void *)s, span_bytes(o)) == 0;
    usi_lock(&pages.lock);
    span_push(purged ? pages.free_head : pages.resident_head, s, o);
    usi_unlock(&pages.lock);
}

void usi_pages_free_span(void *span, unsigned order)
{
    /* Outside the lock: madvise can be slow, the fallbacks more so. */
    int how = span_discard(span, span_bytes(order));
    if (how == ABANDONED) {
        /* Neither zero nor surely ours: never reused; only its address space is lost. */
        usi_lock(&pages.lock);
        int first = pages.abandoned == 0;
        pages.abandoned += span_bytes(order);
        usi_unlock(&pages.lock);
        if (first)
            usi_report_warn("span %p (%zu KiB) could not be purged, replaced or zeroed; its "
                            "address space is abandoned",
                            span, span_bytes(order) >> 10);
        return;
    }
    usi_lock(&pages.lock);
    span_push(how == ZEROED ? pages.resident_head : pages.free_head, (uintptr_t)span, order);
    usi_unlock(&pages.lock);
    if (how == PURGED && __atomic_load_n(&pages.nresident, __ATOMIC_RELAXED))
        purge_one_resident();
}

size_t usi_pages_abandoned_bytes(void)
{
    usi_lock(&pages.lock);
    size_t n = pages.abandoned;
    usi_unlock(&pages.lock);
    return n;
}

void usi_pages_set_owner(void *span, unsigned order, uintptr_t entry, uint16_t unit_tag)
{
    uint32_t u = unit_of((uintptr_t)span);
    uintptr_t t = (uintptr_t)span >> USI_UNIT_SHIFT;
    for (size_t i = 0; i < ((size_t)1 << order); i++) {
        __atomic_store_n(&usi_pagemap.map[u + i], entry, __ATOMIC_RELEASE);
        __atomic_store_n(&unit_tags[t + i], unit_tag, __ATOMIC_RELEASE);
    }
}

void usi_pages_prefork(void)
{
    usi_lock(&pages.lock);
}

void usi_pages_postfork(int child)
{
    if (child)
        pthread_mutex_init(&pages.lock, NULL);
    else
        usi_unlock(&pages.lock);
}
