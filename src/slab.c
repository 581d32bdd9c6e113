/* SPDX-License-Identifier: MIT */
/*
 * slab.c - the slab layer (docs/design.md §3): slabs of one object size, colouring, exact
 * free-object tracking and the partial/full/empty lists of a cache.
 *
 * A slab is a span from the pages layer. Its header (struct usi_slab and a bitmap of
 * allocated objects) sits at the start, then a colour offset, then the objects. There is
 * no per-object header. Objects are handed out from the slab's free list first, then by a
 * bump index over never-used objects, so pages of a fresh slab are touched only as objects
 * are used. Spans always read as zero when they arrive (fresh, purged, or zeroed by the
 * pages layer where a purge fails), so the header needs no clearing. This layer runs only
 * when a magazine is filled or emptied.
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

static inline size_t round_up(size_t x, size_t a)
{
    return (x + a - 1) & ~(a - 1);
}

/* Objects that fit in a slab of slab_size bytes, and the offset of the first one. */
static uint32_t slab_fit(size_t slab_size, size_t stride, size_t align, uint32_t *first)
{
    size_t n = (slab_size - sizeof(struct usi_slab)) / stride;
    for (;;) {
        size_t off = round_up(sizeof(struct usi_slab) + 8 * ((n + 63) / 64), align);
        size_t fit = off < slab_size ? (slab_size - off) / stride : 0;
        if (fit >= n) {
            *first = (uint32_t)off;
            return (uint32_t)n;
        }
        n = fit;
    }
}

void usi_slab_geometry(struct uslab_cache *c)
{
    /* The smallest slab that holds at least 8 objects and wastes at most 1/8 of itself;
     * failing that, the one that wastes the least. */
    unsigned best = USI_SPAN_ORDERS - 1;
    double best_waste = 2.0;
    for (unsigned order = 0; order < USI_SPAN_ORDERS; order++) {
        size_t slab = USI_UNIT_SIZE << order;
        uint32_t first;
        uint32_t n = slab_fit(slab, c->stride, c->align, &first);
        if (n == 0)
            continue;
        double waste = (double)(slab - first - (size_t)n * c->stride) / (double)slab;
        if (n >= 8 && waste <= 0.125) {
            best = order;
            break;
        }
        if (waste < best_waste) {
            best_waste = waste;
            best = order;
        }
    }
    c->slab_order = best;
    c->slab_size = USI_UNIT_SIZE << best;
    c->nobjs = slab_fit(c->slab_size, c->stride, c->align, &c->first_offset);
    size_t left = c->slab_size - c->first_offset - (size_t)c->nobjs * c->stride;
    c->colour_step = (uint32_t)(c->align > 64 ? c->align : 64);
    c->colour_max = (uint32_t)(left - left % c->colour_step);
    c->colour_next = 0;
}

/* ---- lists: a slab moves only when its state (empty, partial, full) changes ---------- */

static void list_remove(struct uslab_cache *c, struct usi_slab *s)
{
    struct usi_slab_list_head *h = &c->lists[s->list];
    if (s->prev)
        s->prev->next = s->next;
    else
        h->first = s->next;
    if (s->next)
        s->next->prev = s->prev;
    h->count--;
}

static void list_push(struct uslab_cache *c, struct usi_slab *s, unsigned which)
{
    struct usi_slab_list_head *h = &c->lists[which];
    s->list = (uint8_t)which;
    s->prev = NULL;
    s->next = h->first;
    if (h->first)
        h->first->prev = s;
    h->first = s;
    h->count++;
}

static void list_move(struct uslab_cache *c, struct usi_slab *s, unsigned which)
{
    if (s->list == which)
        return;
    list_remove(c, s);
    list_push(c, s, which);
}

static unsigned state_of(const struct uslab_cache *c, const struct usi_slab *s)
{
    if (s->inuse == 0)
        return USI_SLAB_EMPTY;
    return s->inuse == c->nobjs ? USI_SLAB_FULL : USI_SLAB_PARTIAL;
}

/* ---- slabs ----------------------------------------------------------------------------- */

static struct usi_slab *slab_create(struct uslab_cache *c)
{
    struct usi_slab *s = usi_pages_alloc_span(c->slab_order);
    if (!s)
        return NULL;
    USI_VG_DEFINED(
        s, c->slab_size); /* reads as zero, even where objects of another cache were freed */
    /* The span reads as zero: freelist, inuse, bump and the bitmap start cleared. */
    s->cache = c;
    s->colour = c->colour_next;
    c->colour_next =
        c->colour_next + c->colour_step > c->colour_max ? 0 : c->colour_next + c->colour_step;
    s->objs = (char *)s + c->first_offset + s->colour;
    usi_pages_set_owner(s, c->slab_order, (uintptr_t)s | c->id, c->unit_tag);
    list_push(c, s, USI_SLAB_EMPTY);
    c->slabs_created++;
    return s;
}

/* Index of p in s, or UINT32_MAX when p is not the start of one of its objects. The
 * division is a multiplication by stride_recip = ceil(2^32 / stride): for an offset
 * q * stride inside a slab (below 2^23) the product is q * 2^32 plus less than 2^32, so the
 * high half is exactly q; any other offset fails the check that follows. */
static uint32_t slab_index(const struct uslab_cache *c, const struct usi_slab *s, const void *p)
{
    uintptr_t off = (uintptr_t)p - (uintptr_t)s->objs;
    if (off >= (uintptr_t)c->nobjs * c->stride)
        return UINT32_MAX;
    uint32_t idx = (uint32_t)((off * c->stride_recip) >> 32);
    return (uintptr_t)idx * c->stride == off ? idx : UINT32_MAX;
}

const char *usi_slab_check(const struct uslab_cache *c, const struct usi_slab *s)
{
    if (s->cache != c)
        return "slab header names another cache";
    if (s->bump > c->nobjs || s->inuse > s->bump)
        return "counts out of range (inuse > bump or bump > objects)";
    if (s->list != state_of(c, s))
        return "on the wrong list for its number of objects in use";
    size_t bits = 0;
    for (uint32_t w = 0; w < (c->nobjs + 63) / 64; w++)
        bits += (size_t)__builtin_popcountll(s->alloc_map[w]);
    if (bits != s->inuse)
        return "allocation bitmap does not match the objects in use";
    size_t free_listed = 0;
    for (const char *slot = s->freelist; slot; free_listed++) {
        uint32_t idx = slab_index(c, s, slot);
        if (idx == UINT32_MAX || idx >= s->bump || free_listed >= s->bump)
            return "free list leaves the slab's used objects";
        if (s->alloc_map[idx >> 6] & ((uint64_t)1 << (idx & 63)))
            return "free list holds an allocated object";
        USI_VG_DEFINED(slot + c->link_offset, sizeof(void *));
        slot = *(char *const *)(slot + c->link_offset);
    }
    if (free_listed != s->bump - s->inuse)
        return "free list length does not match the free objects below bump";
    return NULL;
}

/* USLAB_DEBUG=F: every slab an operation touched is checked whole. */
static USI_COLD void check_or_report(struct uslab_cache *c, struct usi_slab *s)
{
    const char *bad = usi_slab_check(c, s);
    if (bad) {
        char what[160];
        snprintf(what, sizeof what, "Slab %p corrupted: %s", (void *)s, bad);
        usi_debug_report(c, s, s->objs, what);
    }
}

void usi_slab_bad_pointer(const struct uslab_cache *c, const void *p, uintptr_t entry)
{
    struct uslab_cache *owner = entry ? usi_caches[entry & USI_ID_MASK] : NULL;
    if (usi_debug_enabled) {
        char what[160];
        if (entry == 0)
            snprintf(what, sizeof what, "Invalid pointer %p: not allocated by uslab", p);
        else
            snprintf(what, sizeof what, "Object %p belongs to cache %s", p,
                     owner ? owner->name : "(destroyed)");
        usi_debug_bug(c->name, what);
    }
    if (entry == 0)
        usi_report_fatal("free of invalid pointer %p to cache %s: not allocated by uslab", p,
                         c->name);
    usi_report_fatal("free of %p to cache %s, but it belongs to cache %s", p, c->name,
                     owner ? owner->name : "(destroyed)");
}

size_t usi_slab_take(struct uslab_cache *c, size_t n, void **objs)
{
    size_t got = 0;
    while (got < n) {
        struct usi_slab *s = c->lists[USI_SLAB_PARTIAL].first;
        if (!s)
            s = c->lists[USI_SLAB_EMPTY].first;
        if (!s)
            s = slab_create(c);
        if (!s)
            break;
        while (got < n && s->inuse < c->nobjs) {
            char *slot;
            uint32_t idx;
            if (s->freelist) {
                slot = s->freelist;
                USI_VG_DEFINED(slot + c->link_offset, sizeof(void *));
                s->freelist = *(void **)(slot + c->link_offset);
                USI_VG_UNDEFINED(slot + c->link_offset, sizeof(void *));
                idx = slab_index(c, s, slot);
            } else {
                idx = s->bump++;
                slot = s->objs + (size_t)idx * c->stride;
            }
            s->alloc_map[idx >> 6] |= (uint64_t)1 << (idx & 63);
            s->inuse++;
            if (USI_UNLIKELY(c->debug))
                usi_debug_on_alloc(c, s, slot);
            objs[got++] = slot + c->obj_offset;
        }
        list_move(c, s, state_of(c, s));
        if (USI_UNLIKELY(c->debug & USI_DEBUG_F))
            check_or_report(c, s);
    }
    c->slab_inuse += got;
    return got;
}

void usi_slab_put(struct uslab_cache *c, size_t n, void *const *objs, struct usi_slab **release)
{
    struct usi_slab *s = NULL; /* the slab of the previous object: neighbours often share one */
    for (size_t i = 0; i < n; i++) {
        void *p = objs[i];
        if (!s || (uintptr_t)p - (uintptr_t)s >= c->slab_size || s->list == USI_SLAB_NLISTS) {
            uintptr_t e = usi_pagemap_lookup(p);
            if (USI_UNLIKELY(e == 0 || (e & USI_ID_MASK) != c->id))
                usi_slab_bad_pointer(c, p, e);
            s = (struct usi_slab *)(e & ~USI_ID_MASK);
        }
        char *slot = (char *)p - c->obj_offset;
        uint32_t idx = slab_index(c, s, slot);
        if (USI_UNLIKELY(idx == UINT32_MAX)) {
            if (c->debug) {
                usi_debug_report(c, s, p, "Invalid pointer: not the start of an object");
                continue;
            }
            usi_report_fatal("free of invalid pointer %p in cache %s: not the start of an object "
                             "(slab %p, object size %zu)",
                             p, c->name, (void *)s, c->stride);
        }
        uint64_t bit = (uint64_t)1 << (idx & 63);
        if (USI_UNLIKELY(!(s->alloc_map[idx >> 6] & bit))) {
            if (c->debug) {
                usi_debug_report(c, s, p, "Object already free");
                continue;
            }
            usi_report_fatal("double free of %p in cache %s (object %u of slab %p is already free)",
                             p, c->name, idx, (void *)s);
        }
        if (USI_UNLIKELY(c->debug))
            usi_debug_on_free(c, s, slot);
        s->alloc_map[idx >> 6] &= ~bit;
        USI_VG_UNDEFINED(slot + c->link_offset, sizeof(void *));
        *(void **)(slot + c->link_offset) = s->freelist;
        USI_VG_NOACCESS(slot + c->link_offset, sizeof(void *));
        s->freelist = slot;
        s->inuse--;
        c->slab_inuse--;
        list_move(c, s, state_of(c, s));
        if (s->inuse == 0) {
            /* Beyond the reserve, an empty slab is purged once it has been idle for the purge
             * delay (by the purger), or at once when the delay is 0. */
            s->empty_since_ms = usi_os_now_ms();
            if (c->lists[USI_SLAB_EMPTY].count > c->empty_reserve) {
                if (usi_options.purge_delay_ms == 0) {
                    list_remove(c, s);
                    s->next = *release;
                    *release = s;
                    s->list = USI_SLAB_NLISTS; /* released: not to be reused for the next one */
                    c->slabs_released++;
                } else {
                    c->purge_pending = 1;
                }
            }
        }
    }
    /* Debug caches have no magazines: a batch is one object, so this is its slab. */
    if (USI_UNLIKELY(c->debug & USI_DEBUG_F) && s && s->list != USI_SLAB_NLISTS)
        check_or_report(c, s);
}

size_t usi_slab_detach_empty(struct uslab_cache *c, size_t keep, struct usi_slab **release)
{
    size_t moved = 0;
    while (c->lists[USI_SLAB_EMPTY].count > keep) {
        struct usi_slab *s = c->lists[USI_SLAB_EMPTY].first;
        list_remove(c, s);
        s->next = *release;
        *release = s;
        c->slabs_released++;
        moved++;
    }
    return moved;
}

size_t usi_slab_detach_idle(struct uslab_cache *c, size_t keep, uint64_t before_ms,
                            struct usi_slab **release)
{
    /* The list is newest first: the first `keep` stay, older idle ones go. */
    size_t seen = 0, left = 0;
    struct usi_slab *s = c->lists[USI_SLAB_EMPTY].first;
    while (s) {
        struct usi_slab *next = s->next;
        if (++seen > keep) {
            if (s->empty_since_ms <= before_ms) {
                list_remove(c, s);
                s->next = *release;
                *release = s;
                c->slabs_released++;
            } else {
                left++;
            }
        }
        s = next;
    }
    return left;
}

size_t usi_slab_release(struct usi_slab *list, size_t slab_size)
{
    unsigned order = 0;
    while ((USI_UNIT_SIZE << order) < slab_size)
        order++;
    size_t bytes = 0;
    while (list) {
        struct usi_slab *next = list->next; /* read before the span is purged */
        usi_pages_set_owner(list, order, 0, 0);
        usi_pages_free_span(list, order);
        bytes += slab_size;
        list = next;
    }
    return bytes;
}
