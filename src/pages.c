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
 */
#include "internal.h"

#include <errno.h>

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
    size_t reserved;
} pages = {.lock = PTHREAD_MUTEX_INITIALIZER};

static inline size_t span_bytes(unsigned order)
{
    return USI_UNIT_SIZE << order;
}

static inline uint32_t unit_of(uintptr_t addr)
{
    return (uint32_t)((addr - usi_pagemap.base) >> USI_UNIT_SHIFT);
}

/*
 * The address-space budget (design §2): under RLIMIT_AS, uslab's own mappings (the
 * reservation, its side arrays and the tag table) take at most a quarter of the limit, so
 * the system allocator keeps three quarters for large blocks. The tag table (4 GiB) is
 * kept only when it is at most half of that budget; without it every free takes the slow
 * path's page-map lookup (correct, a few instructions more). Below the smallest useful
 * reservation uslab steps aside: the caller disables slabs.
 */
#define BUDGET_SHARE  4                                      /* of RLIMIT_AS */
#define MIN_RESERVE   ((size_t)64 << 20)                     /* eight spans of the largest order */
#define SIDE_PER_UNIT (sizeof(uintptr_t) + sizeof(uint32_t)) /* map + link entries */

int usi_pages_init(void)
{
    size_t align = span_bytes(USI_SPAN_ORDERS - 1);
    size_t size = usi_options.reserve_bytes;
    size_t limit = usi_os_address_limit();
    int with_tags = 1;
    if (limit != SIZE_MAX) {
        size_t budget = limit / BUDGET_SHARE;
        size_t tag_bytes = NTAGS * sizeof(uint16_t);
        with_tags = budget >= 2 * tag_bytes;
        if (with_tags)
            budget -= tag_bytes;
        /* The reservation is mapped with `align` bytes of slack, then trimmed. */
        budget = budget > align ? budget - align : 0;
        size_t fit = budget / (USI_UNIT_SIZE + SIDE_PER_UNIT) * USI_UNIT_SIZE;
        if (size > fit)
            size = fit;
    }
    if (size < MIN_RESERVE) {
        errno = ENOMEM;
        return -1;
    }
    void *base = usi_os_reserve(&size, align, MIN_RESERVE);
    if (!base)
        return -1;
    size_t nunits = size >> USI_UNIT_SHIFT;
    uintptr_t *map = usi_os_map(nunits * sizeof(uintptr_t));
    uint32_t *link = usi_os_map(nunits * sizeof(uint32_t));
    uint16_t *tags = with_tags ? usi_os_map_zero_ro(NTAGS * sizeof(uint16_t)) : NULL;
    int ok = map && link && (uintptr_t)base + size <= ((uintptr_t)1 << USI_ADDRESS_BITS);
    if (ok && tags) {
        /* Only the tags over the reservation are ever written: make that window writable. */
        uintptr_t first = ((uintptr_t)base >> USI_UNIT_SHIFT) * sizeof(uint16_t);
        uintptr_t last = (((uintptr_t)base + size) >> USI_UNIT_SHIFT) * sizeof(uint16_t);
        first &= ~(uintptr_t)(USI_PAGE_SIZE - 1);
        last = (last + USI_PAGE_SIZE - 1) & ~(uintptr_t)(USI_PAGE_SIZE - 1);
        if (usi_os_commit((char *)tags + first, last - first) != 0) {
            usi_os_unmap(tags, NTAGS * sizeof(uint16_t));
            tags = NULL; /* work without: frees take the page-map lookup */
        }
    }
    if (!ok) {
        usi_os_unmap(map, nunits * sizeof(uintptr_t));
        usi_os_unmap(link, nunits * sizeof(uint32_t));
        usi_os_unmap(tags, NTAGS * sizeof(uint16_t));
        usi_os_unmap(base, size);
        errno = ENOMEM;
        return -1;
    }
    if (tags) {
        unit_tags = tags;
        __atomic_store_n(&usi_unit_tags, tags, __ATOMIC_RELEASE);
        __atomic_store_n(&usi_unit_tag_mask, NTAGS - 1, __ATOMIC_RELEASE); /* after the table */
    }
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

int usi_pages_have_tags(void)
{
    return unit_tags != NULL;
}

size_t usi_pages_reserved_bytes(void)
{
    return pages.reserved;
}

static void free_push(uintptr_t addr, unsigned order)
{
    uint32_t u = unit_of(addr);
    usi_pagemap.link[u] = pages.free_head[order];
    pages.free_head[order] = u + 1;
}

static uintptr_t free_pop(unsigned order)
{
    uint32_t head = pages.free_head[order];
    if (!head)
        return 0;
    pages.free_head[order] = usi_pagemap.link[head - 1];
    return usi_pagemap.base + ((uintptr_t)(head - 1) << USI_UNIT_SHIFT);
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
    uintptr_t s = free_pop(order);
    if (!s)
        s = bump_take(order);
    for (unsigned o = order + 1; !s && o < USI_SPAN_ORDERS; o++) {
        uintptr_t big = free_pop(o);
        if (!big)
            continue;
        /* Split: keep the lowest piece, give the upper halves back to the free lists. */
        for (unsigned k = o; k > order; k--)
            free_push(big + span_bytes(k - 1), k - 1);
        s = big;
    }
    usi_unlock(&pages.lock);
    return (void *)s; /* NULL: the caller says why (errno untouched here) */
}

void usi_pages_free_span(void *span, unsigned order)
{
    usi_os_purge(span, span_bytes(order)); /* outside the lock: madvise can be slow */
    usi_lock(&pages.lock);
    free_push((uintptr_t)span, order);
    usi_unlock(&pages.lock);
}

void usi_pages_set_owner(void *span, unsigned order, uintptr_t entry, uint16_t unit_tag)
{
    uint32_t u = unit_of((uintptr_t)span);
    uintptr_t t = (uintptr_t)span >> USI_UNIT_SHIFT;
    for (size_t i = 0; i < ((size_t)1 << order); i++) {
        __atomic_store_n(&usi_pagemap.map[u + i], entry, __ATOMIC_RELEASE);
        if (unit_tags)
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
