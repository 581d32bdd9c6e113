/* SPDX-License-Identifier: MIT */
/*
 * slab.c - the slab layer (docs/design.md §3): slabs of one object size, colouring, exact
 * free-object tracking and the partial/full/empty lists of a cache.
 *
 * A slab is a span from the pages layer holding only objects: its header (struct usi_slab)
 * and its bitmap of allocated objects are in the pages layer's side arrays, out of reach of
 * an overflow (docs/security.md). The bitmap is also the free list: a slab hands out its
 * lowest-numbered free objects first (a word of the bitmap at a time; object 0 is the
 * highest in the span, usi_slab_object), so the pages of a fresh slab are touched only as
 * objects are used, from the page the lattice's tail marks are on down. Nothing of this layer
 * is in an object, so a write after free cannot steer it; only a malloc class's put and handout
 * write the words of malloc's handout checks (the free mark, the key: design §3). Slabs of uslab's
 * internal caches (descriptors, magazines) keep a guard page at each end. This layer runs only when
 * a magazine is filled or emptied.
 */
#include "slab.h"
#include "base.h"
#include "debug.h"
#include "descriptor.h"
#include "options.h"
#include "os.h"
#include "pages.h"
#include "registry.h"
#include "report.h"
#include "settings.h"

#include <stdio.h>
#include <string.h>

uintptr_t usi_free_secret;
uint64_t usi_slab_surplus_bytes;
int usi_slab_purger_pid;
uint64_t usi_slab_passed_bytes;
int usi_slab_surplus_seen;
/* Bytes of slabs made so far, and their count when a surplus pass was last asked for. */
static uint64_t slabs_made_bytes, surplus_mark;

/* Bytes of guard page at each end of a span of c: internal caches only. */
static size_t guard_bytes(const struct uslab_cache *c)
{
    return (c->flags & USI_CACHE_INTERNAL) ? USI_PAGE_SIZE : 0;
}

static size_t gcd(size_t a, size_t b)
{
    while (b) {
        size_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Objects of c that fit in a slab of slab_size bytes whose first object is `phase` bytes
 * in. */
static uint32_t slab_fit_at(const struct uslab_cache *c, size_t slab_size, size_t phase)
{
    size_t usable = slab_size - 2 * guard_bytes(c);
    size_t n = usable > phase ? (usable - phase) / c->stride : 0;
    size_t bits = (size_t)USI_SLAB_BITS_BYTES * 8 * (slab_size >> USI_UNIT_SHIFT);
    return (uint32_t)(n < bits ? n : bits);
}

/* Objects of c that fit in a slab of slab_size bytes, whatever its colour. A lattice
 * cache's objects start at the first address whose low 32 bits are a multiple of stride:
 * a span aligned to slab_size (a divisor of 2^32) starts at a phase that is a multiple of
 * gcd(stride, slab_size), at worst stride - gcd bytes in. */
static uint32_t slab_fit(const struct uslab_cache *c, size_t slab_size)
{
    return slab_fit_at(c, slab_size,
                       (c->flags & USI_CACHE_LATTICE) ? c->stride - gcd(c->stride, slab_size) : 0);
}

/* Objects of a slab of c whose colour is `colour`: a lattice cache's colour is its phase,
 * and it holds what fits after it; another's colour_max leaves room for c->nobjs. */
static uint32_t slab_objects_at(const struct uslab_cache *c, uint32_t colour)
{
    return (c->flags & USI_CACHE_LATTICE) ? slab_fit_at(c, c->slab_size, colour) : c->nobjs;
}

void usi_slab_geometry(struct uslab_cache *c)
{
    /* The smallest slab that holds at least 8 objects and wastes at most 1/8 of itself;
     * failing that, the one that wastes the least. */
    unsigned best = USI_SPAN_ORDERS - 1;
    double best_waste = 2.0;
    for (unsigned order = 0; order < USI_SPAN_ORDERS; order++) {
        size_t slab = USI_UNIT_SIZE << order;
        uint32_t n = slab_fit(c, slab);
        if (n == 0)
            continue;
        double waste = (double)(slab - (size_t)n * c->stride) / (double)slab;
        if (n >= (usi_cache_medium(c) ? 1 : 8) && waste <= 0.125) {
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
    /* The most a slab holds: a lattice cache's at phase 0 (slab_create counts each one's). */
    c->nobjs = slab_fit_at(c, c->slab_size, 0);
    c->first_offset = (uint32_t)guard_bytes(c);
    size_t left = c->slab_size - 2 * guard_bytes(c) - (size_t)c->nobjs * c->stride;
    c->colour_step = (uint32_t)(c->align > 64 ? c->align : 64);
    /* A lattice cache's colour is its phase, set by the span's address. */
    c->colour_max = (c->flags & USI_CACHE_LATTICE) ? 0 : (uint32_t)(left - left % c->colour_step);
    c->colour_next = 0;
    c->lattice = (c->flags & USI_CACHE_LATTICE) && !c->debug ? UINT64_MAX / c->stride + 1 : 0;
}

/* ---- lists: a slab moves only when its state (empty, partial, full) changes ---------- */

/* Empty slabs beyond the reserves of the caches of each span group (slab_adopt): a class
 * that needs a slab walks its group only when this is not 0. Invariant: spare_in_group[k] is
 * the number of empty slabs beyond their cache's reserve over the group of slab order k. */
static uint64_t spare_in_group[USI_SPAN_ORDERS];

/* Empty slabs beyond a cache's reserve are counted for every cache together
 * (usi_slab_surplus_bytes, design §3 "Across classes"), and for its span group. */
static void surplus_add(const struct uslab_cache *c, const struct usi_slab_list_head *h,
                        int64_t sign)
{
    if (h == &c->lists[USI_SLAB_EMPTY] && h->count > c->empty_reserve) {
        __atomic_add_fetch(&usi_slab_surplus_bytes, (uint64_t)sign * c->slab_size,
                           __ATOMIC_RELAXED);
        if (__atomic_load_n(&c->span_next, __ATOMIC_RELAXED)) /* a join writes it (below) */
            __atomic_add_fetch(&spare_in_group[c->slab_order], (uint64_t)sign, __ATOMIC_RELAXED);
    }
}

static void list_remove(struct uslab_cache *c, struct usi_slab *s)
{
    struct usi_slab_list_head *h = &c->lists[s->list];
    surplus_add(c, h, -1);
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
    if (which != USI_SLAB_PARTIAL)
        s->filler = 0; /* a full or empty slab is no filler's */
    s->prev = NULL;
    s->next = h->first;
    if (h->first)
        h->first->prev = s;
    h->first = s;
    h->count++;
    surplus_add(c, h, 1);
}

static void list_move(struct uslab_cache *c, struct usi_slab *s, unsigned which)
{
    if (s->list == which)
        return;
    list_remove(c, s);
    list_push(c, s, which);
}

static unsigned state_of(const struct usi_slab *s)
{
    if (s->inuse == 0)
        return USI_SLAB_EMPTY;
    return s->inuse == s->nobjs ? USI_SLAB_FULL : USI_SLAB_PARTIAL;
}

/* ---- slabs ----------------------------------------------------------------------------- */

/* ---- the bitmap: bit i set iff object i is outside the slab --------------------------- */

static uint32_t bitmap_words(const struct uslab_cache *c)
{
    return (c->nobjs + 63) / 64;
}

/* The bits of word w that stand for objects (all of them but in the last word). */
static uint64_t word_valid(const struct usi_slab *s, uint32_t w)
{
    uint32_t in_word = s->nobjs > w * 64 ? s->nobjs - w * 64 : 0;
    return in_word >= 64 ? UINT64_MAX : ((uint64_t)1 << in_word) - 1;
}

/* The bits set in x (a population count without the libgcc call that __builtin_popcountll
 * makes on baseline x86-64). */
static inline uint32_t bit_count(uint64_t x)
{
    x -= (x >> 1) & 0x5555555555555555ull;
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
    return (uint32_t)((x * 0x0101010101010101ull) >> 56);
}

/* The free objects of word w of s, as bits. */
static uint64_t word_free(const struct usi_slab *s, uint32_t w)
{
    return ~s->alloc_map[w] & word_valid(s, w);
}

/* The end of the page that holds the end of object 0 of s (the highest): of the object, or of
 * a debug cache's slot (its redzone and record). A medium block's slot is the power of two
 * at or above its size, and the pages past the block are never its. */
static uintptr_t objects_top(const struct uslab_cache *c, const struct usi_slab *s)
{
    uintptr_t end =
        (uintptr_t)usi_slab_object(c, s, 0) + (c->debug ? c->stride : c->obj_offset + c->size);
    return (end + USI_PAGE_SIZE - 1) & ~(uintptr_t)(USI_PAGE_SIZE - 1);
}

/* Bytes of the pages of s that objects below bump occupy: from the page of object bump - 1
 * (the lowest of them) to top, s's objects_top (0 when none was handed out). */
static size_t touched_below(const struct uslab_cache *c, const struct usi_slab *s, uintptr_t top,
                            uint32_t bump)
{
    if (bump == 0)
        return 0;
    uintptr_t first = (uintptr_t)usi_slab_object(c, s, bump - 1);
    return (size_t)(top - (first & ~(uintptr_t)(USI_PAGE_SIZE - 1)));
}

static size_t touched_bytes(const struct uslab_cache *c, const struct usi_slab *s, uint32_t bump)
{
    return touched_below(c, s, objects_top(c, s), bump);
}

/* Counts a slab that leaves the cache's lists for good (released to the pages layer). */
static void slab_detached(struct uslab_cache *c, const struct usi_slab *s)
{
    c->slabs_released++;
    c->slab_objects -= s->nobjs;
    c->touched_bytes -= touched_bytes(c, s, s->bump);
}

/*
 * Span groups (design §3): the malloc classes whose slabs have spans of one size. Each class
 * kept its own empty slabs: the medium classes of one doubling (48 and 64 KiB, one 64 KiB
 * span a block) as many again as one class of 64 KiB had kept (with 4 classes a doubling,
 * the `large prodcons` row held 37 MB at its peak, against 15 with 1), and a program that
 * freed blocks of some small classes and then allocated others made new slabs while the
 * freed ones waited for the purge delay (redis under load: 40.0 MB peak, 34.0 since). A
 * class that needs a slab takes a sibling's empty one beyond that sibling's reserve first:
 * its span stays resident and changes owner. Object caches join too (a program that frees its
 * malloc blocks and then fills a cache of its own: `objcache conn 10 MiB`). A group is a ring
 * linked by span_next (a cache in none has NULL there). Invariant: the rings change, and are
 * walked, only under groups_lock; a walk only tries it (slab_adopt holds a cache lock), so a
 * cache can leave (its destruction) while no walk can reach it.
 */
static struct uslab_cache *span_groups[USI_SPAN_ORDERS]; /* a member of each ring */
static usi_mutex groups_lock = USI_MUTEX_INIT;

void usi_slab_share_spans(struct uslab_cache *c)
{
    USI_ASSERT(!c->debug && guard_bytes(c) == 0 && !c->span_next &&
               c->lists[USI_SLAB_EMPTY].count == 0); /* spare_in_group counts from here */
    usi_lock(&groups_lock);
    struct uslab_cache *member = span_groups[c->slab_order];
    if (!member) {
        __atomic_store_n(&c->span_next, c, __ATOMIC_RELAXED);
        span_groups[c->slab_order] = c;
    } else {
        __atomic_store_n(&c->span_next, member->span_next, __ATOMIC_RELAXED);
        __atomic_store_n(&member->span_next, c, __ATOMIC_RELAXED);
    }
    usi_unlock(&groups_lock);
}

void usi_slab_leave_spans(struct uslab_cache *c)
{
    if (!__atomic_load_n(&c->span_next, __ATOMIC_RELAXED)) /* a sibling's leave writes it */
        return;
    USI_ASSERT(c->lists[USI_SLAB_EMPTY].count == 0); /* nothing of c in spare_in_group */
    usi_lock(&groups_lock);
    struct uslab_cache *prev = c;
    while (prev->span_next != c)
        prev = prev->span_next;
    __atomic_store_n(&prev->span_next, c->span_next, __ATOMIC_RELAXED); /* surplus_add reads it */
    if (span_groups[c->slab_order] == c)
        span_groups[c->slab_order] = prev == c ? NULL : prev;
    __atomic_store_n(&c->span_next, NULL, __ATOMIC_RELAXED);
    usi_unlock(&groups_lock);
}

void usi_slab_prefork(void)
{
    usi_lock(&groups_lock);
}

void usi_slab_postfork(int child)
{
    if (child)
        usi_mutex_init(&groups_lock);
    else
        usi_unlock(&groups_lock);
}

/* An empty slab beyond its reserve that another cache of c's span group gave up, unlinked
 * from it, or NULL. c->lock is held; the other cache's lock is only tried (two classes
 * adopting from each other at once would otherwise each wait for the other). The group is
 * walked only where it has such a slab (spare_in_group): a class making a slab, with the
 * group's dozens of small classes, would otherwise try every one of their locks. */
static struct usi_slab *slab_adopt(struct uslab_cache *c)
{
    if (!__atomic_load_n(&c->span_next, __ATOMIC_RELAXED) ||
        __atomic_load_n(&spare_in_group[c->slab_order], __ATOMIC_RELAXED) == 0 ||
        usi_trylock(&groups_lock) != 0)
        return NULL;
    struct usi_slab *s = NULL;
    for (struct uslab_cache *o = c->span_next; o != c && !s; o = o->span_next) {
        if (usi_trylock(&o->lock) != 0)
            continue;
        if (o->lists[USI_SLAB_EMPTY].count > o->empty_reserve) {
            s = o->lists[USI_SLAB_EMPTY].first;
            list_remove(o, s);
            slab_detached(o, s);
        }
        usi_unlock(&o->lock);
    }
    usi_unlock(&groups_lock);
    return s;
}

/* A new span for a slab of c, its guard pages set (internal caches: how, in *guard_how),
 * or NULL. */
static char *new_span(struct uslab_cache *c, int *guard_how)
{
    /* New memory while other caches keep much memory empty: once another
     * USI_SLAB_SURPLUS_MAX of slabs has been made since the last time, the objects layer asks
     * for a pass that gives back what was empty already then (design §3, "Across
     * classes"). A program that empties and refills the same classes makes few new slabs,
     * and keeps its memory for the purge delay as before. */
    uint64_t made = __atomic_add_fetch(&slabs_made_bytes, c->slab_size, __ATOMIC_RELAXED);
    if (USI_UNLIKELY(__atomic_load_n(&usi_slab_surplus_bytes, __ATOMIC_RELAXED) >
                     USI_SLAB_SURPLUS_MAX)) {
        uint64_t mark = __atomic_load_n(&surplus_mark, __ATOMIC_RELAXED);
        if (made - mark >= USI_SLAB_SURPLUS_MAX &&
            __atomic_compare_exchange_n(&surplus_mark, &mark, made, 0, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
            __atomic_store_n(&usi_slab_surplus_seen, 1, __ATOMIC_RELAXED);
    }
    size_t guard = guard_bytes(c);
    /* dense: handed out from one end (a medium block is written in part; guard pages
     * would split a chunk's mapping) */
    char *span = usi_pages_alloc_span(c->slab_order, !usi_cache_medium(c) && !guard);
    if (!span)
        return NULL;
    if (guard && usi_pages_guard(span, c->slab_size, guard, guard_how) != 0) {
        usi_pages_free_span(span, c->slab_order, guard, *guard_how);
        return NULL;
    }
    /* reads as zero, even where objects of another cache were freed */
    USI_VG_DEFINED(span + guard, c->slab_size - 2 * guard);
    return span;
}

static struct usi_slab *slab_create(struct uslab_cache *c)
{
    struct usi_slab *adopted = slab_adopt(c);
    int guard_how = 0;
    char *span = adopted ? adopted->span : new_span(c, &guard_how);
    if (!span)
        return NULL;
    uintptr_t written_low = (uintptr_t)span + c->slab_size;
    if (adopted) {
        /* The lowest page its owners wrote: those before the last (its written_low), and the
         * last, its objects below bump, or at least its top one's page, above which its
         * creation wrote the lattice's free mark. */
        uint32_t lowest = adopted->bump ? adopted->bump - 1 : 0;
        uintptr_t low = (uintptr_t)usi_slab_object(adopted->cache, adopted, lowest) &
                        ~(uintptr_t)(USI_PAGE_SIZE - 1);
        written_low = low < adopted->written_low ? low : adopted->written_low;
    }
    if (adopted) /* no guard pages in a group; its old blocks' bytes count as defined */
        USI_VG_DEFINED(span, c->slab_size);
    struct usi_slab *s = usi_pages_meta((uintptr_t)span);
    memset(s, 0, sizeof *s);
    s->alloc_map = usi_pages_bits((uintptr_t)span);
    memset(s->alloc_map, 0, 8 * (size_t)bitmap_words(c));
    s->cache = c;
    s->span = span;
    s->guard_how = (uint8_t)guard_how;
    s->written_low = written_low;
    if (c->flags & USI_CACHE_LATTICE) {
        uint32_t low = (uint32_t)(uintptr_t)span; /* the phase of the lattice in this span */
        s->colour = (uint32_t)((c->stride - low % c->stride) % c->stride);
    } else {
        s->colour = c->colour_next;
        c->colour_next =
            c->colour_next + c->colour_step > c->colour_max ? 0 : c->colour_next + c->colour_step;
    }
    s->objs = span + c->first_offset + s->colour;
    s->nobjs = slab_objects_at(c, s->colour);
    c->slab_objects += s->nobjs;
    if (c->lattice) {
        /* The point of the lattice past the last object (a part of an object before the span's
         * end), if it has 16 bytes there, passes free()'s one-multiply check; its free mark
         * makes malloc's pop take the exact check, which refuses it (design §8). */
        char *q = s->objs + (size_t)s->nobjs * c->stride;
        if (q + 16 <= span + c->slab_size)
            ((uintptr_t *)(void *)q)[0] = USI_SLAB_FREE_MARK;
    }
    c->touched_bytes += touched_bytes(c, s, s->bump);
    usi_pages_set_owner(span, c->slab_order, (uintptr_t)span | c->id, c->unit_tag);
    list_push(c, s, USI_SLAB_EMPTY);
    c->slabs_created++;
    if (c->purged_ms && !adopted) { /* soon after a purge: it was faulted back (design §3) */
        uint64_t window = 2 * (uint64_t)usi_options.purge_delay_ms *
                          __atomic_load_n(&c->purge_mult, __ATOMIC_RELAXED); /* see reclaim.c */
        if (usi_os_now_ms() < c->purged_ms + window) {
            c->refaulted = 1; /* a pattern that repeats: keep its memory at once */
            usi_slab_keep_memory(c);
        }
        c->purged_ms = 0; /* one purge, one refault at most */
    }
    return s;
}

void usi_slab_keep_memory(struct uslab_cache *c)
{
    __atomic_store_n(&c->purge_mult, USI_PURGE_MULT_MAX, __ATOMIC_RELAXED);
}

/* Index of p in s, or UINT32_MAX when p is not the start of one of its objects. The
 * division is a multiplication by stride_recip = ceil(2^32 / stride): for an offset
 * q * stride inside a slab (below 2^23) the product is q * 2^32 plus less than 2^32, so the
 * high half is exactly q; any other offset fails the check that follows. */
static uint32_t slab_index(const struct uslab_cache *c, const struct usi_slab *s, const void *p)
{
    uintptr_t off = (uintptr_t)p - (uintptr_t)s->objs;
    if (off >= (uintptr_t)s->nobjs * c->stride)
        return UINT32_MAX;
    uint32_t pos = (uint32_t)((off * c->stride_recip) >> 32); /* from the lowest object */
    return (uintptr_t)pos * c->stride == off ? s->nobjs - 1 - pos : UINT32_MAX;
}

const char *usi_slab_check(const struct uslab_cache *c, const struct usi_slab *s)
{
    if (s->cache != c)
        return "slab header names another cache";
    if (s->nobjs != slab_objects_at(c, s->colour))
        return "object count is not what fits after the slab's colour";
    if (s->bump > s->nobjs || s->inuse > s->bump)
        return "counts out of range (inuse > bump or bump > objects)";
    if (s->list != state_of(s))
        return "on the wrong list for its number of objects in use";
    if (s->filler && s->list != USI_SLAB_PARTIAL)
        return "a filler on a full or empty slab";
    uint32_t words = bitmap_words(c);
    if (s->scan > words)
        return "bitmap scan position out of range";
    size_t bits = 0;
    for (uint32_t w = 0; w < words; w++) {
        uint64_t map = s->alloc_map[w];
        if (map & ~word_valid(s, w))
            return "allocation bitmap marks objects past the slab's last one";
        if (w < s->scan && map != word_valid(s, w))
            return "a free object below the bitmap scan position";
        bits += (size_t)__builtin_popcountll(map);
    }
    if (bits != s->inuse)
        return "allocation bitmap does not match the objects in use";
    for (uint32_t i = s->bump; i < s->nobjs; i++)
        if (s->alloc_map[i >> 6] & ((uint64_t)1 << (i & 63)))
            return "an object above bump (never handed out) is marked allocated";
    return NULL;
}

/* USLAB_DEBUG=F: every slab an operation touched is checked whole. */
static USI_COLD void check_or_report(struct uslab_cache *c, struct usi_slab *s)
{
    const char *bad = usi_slab_check(c, s);
    if (bad) {
        char what[160];
        snprintf(what, sizeof what, "Slab %p corrupted: %s", (void *)s->span, bad);
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
            snprintf(what, sizeof what, "Object %p belongs to cache %s%s", p,
                     owner ? owner->name : "(destroyed)",
                     owner && strcmp(owner->name, c->name) == 0 ? " (another of that name)" : "");
        usi_debug_bug(c->name, what);
    }
    if (entry == 0)
        usi_report_fatal("free of invalid pointer %p to cache %s: not allocated by uslab", p,
                         c->name);
    if (owner && strcmp(owner->name, c->name) == 0) /* a plugin loaded twice, say */
        usi_report_fatal("free of %p to cache %s (handle %p), but it belongs to another cache "
                         "of that name (handle %p)",
                         p, c->name, (void *)c, (void *)owner);
    usi_report_fatal("free of %p to cache %s, but it belongs to cache %s", p, c->name,
                     owner ? owner->name : "(destroyed)");
}

/* A block of a lattice cache put back without the key that every block in a magazine
 * holds (malloc.c): a copy of a block freed twice whose other copy was handed out. */
static USI_COLD USI_NORETURN void put_keyless(const struct uslab_cache *c, const void *p)
{
    if (usi_debug_enabled) {
        char what[200];
        snprintf(what, sizeof what,
                 "Double free or write after free: the %s block at %p lost its free key", c->name,
                 p);
        usi_debug_bug(c->name, what);
    }
    usi_report_fatal("double free or write after free: the %s block at %p lost its free key "
                     "(found as it went back to its slab). USLAB_DEBUG=FU,%s shows where it was "
                     "allocated and freed",
                     c->name, p, c->name);
}

static inline void handout_one(void *obj, uintptr_t key)
{
    uintptr_t *w = obj;
    USI_VG_UNDEFINED(w, 2 * sizeof *w); /* memcheck: a block put back is no-access */
    w[0] = 0;
    w[1] = key;
}

/* What a take writes into each object of a lattice cache, for malloc's pop (design §3): no
 * free mark, the key. Four objects a turn of the loop: 6 -> 4 instructions an object, and 2
 * more a call (a thread's first fills are of one object each: test thread_budget). */
void usi_slab_handout(size_t n, void *const *objs)
{
    uintptr_t key = usi_free_secret;
    void *const *q = objs, *const *end = objs + n;
    for (; end - q >= 4; q += 4) {
        handout_one(q[0], key);
        handout_one(q[1], key);
        handout_one(q[2], key);
        handout_one(q[3], key);
    }
    for (; q != end; q++)
        handout_one(*q, key);
}

/* Notes the pages of s from touched_below at bump `was` to `now` (top: its objects_top) in
 * *fresh (see slab.h). */
static void note_fresh(const struct uslab_cache *c, struct usi_slab *s, uintptr_t top, size_t was,
                       size_t now, struct usi_fresh_pages *fresh)
{
    if (!fresh || c->stride > USI_PAGE_SIZE ||
        !(c->lattice || c->ctor || (c->flags & USI_CACHE_INTERNAL)) || fresh->n == USI_FRESH_MAX)
        return;
    uintptr_t page = USI_PAGE_SIZE - 1;
    uintptr_t start = top - now, end = top - was < s->written_low ? top - was : s->written_low;
    /* A class past its first slab grows: a take that reached fewer fresh pages than the
     * call's minimum makes the minimum present, the pages its next takes reach (downwards),
     * which would fault one at a time (perl: 4,360 traps -> 1,947; design §3). */
    if (start < end && end - start < USI_FRESH_MIN && c->slabs_created > 1 && !c->debug) {
        uintptr_t low = (uintptr_t)s->objs & ~page;
        start = end - low > USI_FRESH_MIN ? end - USI_FRESH_MIN : low;
        s->written_low = start; /* present from here up, or faulting as before */
    }
    if (end < start + USI_FRESH_MIN)
        return;
    fresh->start[fresh->n] = start;
    fresh->len[fresh->n++] = end - start;
}

void usi_slab_populate(const struct usi_fresh_pages *fresh)
{
    USI_ASSERT(fresh->n <= USI_FRESH_MAX);
    /* 0 (no number yet) and 1 to USI_POPULATE_THREADS; USI_FILLER_NONE is above. */
    if (usi_slab_tls_filler > USI_POPULATE_THREADS)
        return;
    for (unsigned i = 0; i < fresh->n; i++) {
        USI_ASSERT(fresh->len[i] >= USI_FRESH_MIN && (fresh->start[i] & (USI_PAGE_SIZE - 1)) == 0);
        usi_os_populate((void *)fresh->start[i], fresh->len[i]);
    }
}

/*
 * Filler numbers (design §3, "Fillers"): a thread takes the lowest free one at its first
 * fill and gives it back at its exit, so the next thread to take it fills the partial slabs
 * the last holder left with its number on them (`mt churn`, threads of 500 operations:
 * 1.65x the peak RSS while each thread's number was new). Bit f - 1 of filler_used is set
 * while a thread holds number f. A thread that finds all USI_FILLERS taken fills as none.
 */
#define USI_FILLERS 4096
_Static_assert(USI_FILLERS < USI_FILLER_NONE, "filler numbers fit the slab's 16 bits");
static uint64_t filler_used[USI_FILLERS / 64];
__thread uint16_t usi_slab_tls_filler __attribute__((tls_model("initial-exec")));

unsigned usi_slab_filler_claim(void)
{
    unsigned f = 0;
    for (unsigned w = 0; w < USI_FILLERS / 64 && f == 0; w++) {
        uint64_t used = __atomic_load_n(&filler_used[w], __ATOMIC_RELAXED);
        while (~used != 0 && f == 0) {
            uint64_t bit = ~used & (used + 1); /* the lowest clear bit */
            if (__atomic_compare_exchange_n(&filler_used[w], &used, used | bit, 0, __ATOMIC_RELAXED,
                                            __ATOMIC_RELAXED))
                f = w * 64 + (unsigned)__builtin_ctzll(bit) + 1;
        }
    }
    usi_slab_tls_filler = (uint16_t)(f ? f : USI_FILLER_NONE);
    return f;
}

void usi_slab_filler_end(void)
{
    unsigned f = usi_slab_tls_filler;
    usi_slab_tls_filler = USI_FILLER_NONE;
    if (f != 0 && f != USI_FILLER_NONE)
        __atomic_and_fetch(&filler_used[(f - 1) / 64], ~((uint64_t)1 << ((f - 1) % 64)),
                           __ATOMIC_RELAXED);
}

void usi_slab_postfork_child(void)
{
    unsigned f = usi_slab_tls_filler; /* the one thread of the child */
    memset(filler_used, 0, sizeof filler_used);
    if (f != 0 && f != USI_FILLER_NONE)
        filler_used[(f - 1) / 64] = (uint64_t)1 << ((f - 1) % 64);
}

/* Partial slabs a filler's take looks at for one no other filler fills. */
#define FILLER_SCAN 4

/* The slab a take goes to: the first partial one, else the first empty one, else a new one.
 * A filler's take (usi_slab_take) passes over the partial slabs another filler fills, among
 * the first FILLER_SCAN; where they are all there is, it goes on to an empty or new slab, so
 * that two threads filling a class at once fill a slab each (design §3, "Fillers"). */
static struct usi_slab *take_slab(struct uslab_cache *c, unsigned filler)
{
    struct usi_slab *first = c->lists[USI_SLAB_PARTIAL].first, *s = first;
    if (filler && s) {
        struct usi_slab *p = s;
        for (unsigned i = 0; p && i < FILLER_SCAN; i++, p = p->next)
            if (p->filler == 0 || p->filler == filler)
                return p;
        if (p)
            return s; /* more such slabs than it looks at: shared, as without fillers */
        s = NULL;
    }
    if (!s)
        s = c->lists[USI_SLAB_EMPTY].first;
    if (!s)
        s = slab_create(c);
    return s ? s : first; /* no slab of its own to be had: shared, not refused */
}

size_t usi_slab_take(struct uslab_cache *c, size_t n, void **objs, struct usi_fresh_pages *fresh,
                     unsigned filler)
{
    size_t got = 0;
    while (got < n) {
        struct usi_slab *s = take_slab(c, filler);
        if (!s)
            break;
        uint32_t bump_before = s->bump;
        size_t got_before = got;
        /* The lowest-numbered free objects first, a bitmap word at a time: no object is read
         * (but by USLAB_DEBUG's checks), and the word, the count and bump are written once per
         * word, not per object. */
        while (got < n && s->inuse < s->nobjs) {
            uint32_t w = s->scan;
            uint64_t free_bits = word_free(s, w);
            if (!free_bits) { /* a stale scan: word w was full already */
                s->scan = w + 1;
                continue;
            }
            char *first = usi_slab_object(c, s, w * 64) + c->obj_offset; /* going down */
            size_t stride = c->stride, room = n - got, take;
            uint32_t low = (uint32_t)__builtin_ctzll(free_bits);
            uint64_t left = free_bits, above = free_bits >> low;
            if ((above & (above + 1)) == 0) {
                /* One run of free objects (a fresh slab's, a word freed whole): a stride
                 * apart, no bit scan (13 -> 5 instructions an object, lua), and counted
                 * without a population count. */
                size_t k = 64 - (size_t)__builtin_clzll(above);
                take = k < room ? k : room;
                char *p = first - (size_t)low * stride;
                for (size_t end = got + take; got < end; got++, p -= stride)
                    objs[got] = p;
                left = take == 64 ? 0 : free_bits & ~((((uint64_t)1 << take) - 1) << low);
            } else {
                size_t k = bit_count(free_bits);
                take = k < room ? k : room;
                for (size_t end = got + take; got < end; got++) { /* one bound: tight */
                    char *p = first - (size_t)(uint32_t)__builtin_ctzll(left) * stride;
                    objs[got] = p;
                    left &= left - 1;
                }
            }
            uint64_t taken = free_bits & ~left;
            s->alloc_map[w] |= taken;
            s->inuse += (uint32_t)take;
            if (USI_UNLIKELY(c->debug)) /* each object checked (USLAB_DEBUG, design §9) */
                for (size_t i = got - take; i < got; i++)
                    usi_debug_on_alloc(c, s, (char *)objs[i] - c->obj_offset);
            uint32_t next = w * 64 + 64 - (uint32_t)__builtin_clzll(taken); /* one past */
            if (next > s->bump)
                s->bump = next; /* taken in ascending order: the highest so far */
            if (!left)
                s->scan = w + 1; /* word w is full now */
        }
        if (fresh && fresh->zero && got > got_before) {
            /* objs[got - 1] is the highest number taken here, so the lowest address: never
             * handed out if at or below object bump_before's */
            uintptr_t last = (uintptr_t)objs[got - 1] - c->obj_offset;
            fresh->zero = bump_before < s->nobjs &&
                                  last <= (uintptr_t)usi_slab_object(c, s, bump_before) &&
                                  last + c->stride <= s->written_low && !c->debug
                              ? objs[got - 1]
                              : NULL;
        }
        if (s->bump != bump_before) {
            uintptr_t top = objects_top(c, s);
            size_t was = touched_below(c, s, top, bump_before);
            size_t now = touched_below(c, s, top, s->bump);
            c->touched_bytes += now - was;
            note_fresh(c, s, top, was, now, fresh);
        }
        if (filler)
            s->filler = (uint16_t)filler; /* list_push clears it on a full slab */
        list_move(c, s, state_of(s));
        if (USI_UNLIKELY(c->debug & USI_DEBUG_F))
            check_or_report(c, s);
    }
    c->slab_inuse += got;
    c->slab_takes += got;
    return got;
}

int usi_slab_purger_runs(void)
{
    int pid = __atomic_load_n(&usi_slab_purger_pid, __ATOMIC_RELAXED);
    return pid != 0 && pid == usi_os_getpid();
}

/* Settles s after a run of puts into it: its list, and what an empty slab does next. */
static void put_settle(struct uslab_cache *c, struct usi_slab *s, struct usi_slab **release)
{
    if (s->list == USI_SLAB_NLISTS)
        return; /* released by this batch already (a double free was reported on it) */
    list_move(c, s, state_of(s));
    if (s->inuse != 0)
        return;
    /* Beyond the reserve, an empty slab is purged once it has been idle for the purge delay
     * (by a pass); at once when the delay is 0 or the idle memory is beyond the headroom
     * and no purger thread runs. */
    s->empty_since_ms = usi_os_now_ms();
    if (c->lists[USI_SLAB_EMPTY].count > c->empty_reserve) {
        if (usi_options.purge_delay_ms == 0 ||
            (usi_slab_over_headroom(c) && !usi_slab_purger_runs())) {
            list_remove(c, s);
            s->next = *release;
            *release = s;
            s->list = USI_SLAB_NLISTS; /* released: not to be reused for the next one */
            slab_detached(c, s);
            if (!c->purged_ms) /* a slab made soon after this is a refault (slab_create) */
                c->purged_ms = s->empty_since_ms ? s->empty_since_ms : 1;
        } else {
            c->purge_pending = 1;
        }
    }
}

/* The slab of c that object p of a put belongs to; a pointer into no slab of c is fatal. */
static inline struct usi_slab *put_slab_of(const struct uslab_cache *c, uintptr_t p)
{
    uintptr_t e = usi_pagemap_lookup((void *)p);
    if (USI_UNLIKELY((e & USI_ID_MASK) != c->id)) /* 0 too: no cache has id 0 (base.h) */
        usi_slab_bad_pointer(c, (void *)p, e);
    return usi_slab_of_entry(e);
}

int usi_slab_debug_check_live(struct uslab_cache *c, const void *p, const char *fn)
{
    struct usi_slab *s = put_slab_of(c, (uintptr_t)p);
    uint32_t idx = slab_index(c, s, (const char *)p - c->obj_offset);
    char what[160]; /* the call named, as the reports without debugging do */
    if (idx == UINT32_MAX || idx >= s->nobjs) {
        snprintf(what, sizeof what, "Invalid pointer: %s(%p): not the start of an object", fn, p);
        usi_debug_report(c, s, p, what);
        return 1;
    }
    if (!(s->alloc_map[idx >> 6] & ((uint64_t)1 << (idx & 63))) ||
        usi_debug_is_free(c, (const char *)p - c->obj_offset)) { /* or quarantined */
        snprintf(what, sizeof what, "Object already free: %s(%p)", fn, p);
        usi_debug_report(c, s, p, what);
        return 1;
    }
    return 0;
}

/* ---- the quarantine of debug caches (design §9) -------------------------------------- */

/* Objects of at most this many bytes together, and at most this many, per debug cache. */
#define QUARANTINE_BYTES ((size_t)1 << 20)
#define QUARANTINE_MAX   256u

/* A quarantined object back to its slab: what put_debug does for a free otherwise. */
static void quarantine_release(struct uslab_cache *c, void *p, struct usi_slab **release)
{
    struct usi_slab *s = put_slab_of(c, (uintptr_t)p);
    uint32_t idx = slab_index(c, s, (const char *)p - c->obj_offset);
    usi_debug_on_release(c, s, (char *)p - c->obj_offset); /* written while quarantined? */
    s->alloc_map[idx >> 6] &= ~((uint64_t)1 << (idx & 63));
    if (idx >> 6 < s->scan)
        s->scan = idx >> 6;
    s->inuse--;
    put_settle(c, s, release);
}

/* Keeps freed object p out of its slab, releasing the oldest one where the ring is full;
 * 0 when there is no ring (no memory for it: the object goes back at once). */
static int quarantine_put(struct uslab_cache *c, void *p, struct usi_slab **release)
{
    /* Only what P or Z checks later gains from it; and no mapping under strict seccomp. */
    if (!(c->debug & (USI_DEBUG_P | USI_DEBUG_Z)) || usi_os_quiet())
        return 0;
    if (!c->quarantine && c->quarantine_cap == 0) {
        size_t cap = QUARANTINE_BYTES / c->stride;
        cap = cap < 1 ? 1 : cap > QUARANTINE_MAX ? QUARANTINE_MAX : cap;
        c->quarantine = usi_os_map(cap * sizeof(void *));
        c->quarantine_cap = c->quarantine ? (uint32_t)cap : UINT32_MAX; /* MAX: none */
    }
    if (!c->quarantine)
        return 0;
    if (c->quarantine_count == c->quarantine_cap) {
        void *oldest = c->quarantine[c->quarantine_head];
        c->quarantine[c->quarantine_head] = p;
        c->quarantine_head = (c->quarantine_head + 1) % c->quarantine_cap;
        quarantine_release(c, oldest, release);
    } else {
        c->quarantine[(c->quarantine_head + c->quarantine_count) % c->quarantine_cap] = p;
        c->quarantine_count++;
    }
    return 1;
}

void usi_slab_quarantine_drain(struct uslab_cache *c, struct usi_slab **release)
{
    while (c->quarantine_count) {
        void *p = c->quarantine[c->quarantine_head];
        c->quarantine_head = (c->quarantine_head + 1) % c->quarantine_cap;
        c->quarantine_count--;
        quarantine_release(c, p, release);
    }
}

/* usi_slab_put for a debug cache: each object is checked and reported (and then skipped)
 * rather than fatal, and the debug layer sees it; a batch is one object (no magazines). */
static USI_COLD void put_debug(struct uslab_cache *c, size_t n, void *const *objs,
                               struct usi_slab **release)
{
    struct usi_slab *s = NULL;
    const size_t stride = c->stride;
    const uint64_t recip = c->stride_recip;
    uint64_t objs_bytes = 0;
    uintptr_t first = 0, end = 0; /* s's lowest object (as handed out) and its span's end */
    uint64_t *map = NULL;
    size_t skipped = 0; /* reported and left alone (debug caches only) */
    for (size_t i = 0; i < n; i++) {
        uintptr_t p = (uintptr_t)objs[i];
        if (p - first >= end - first) { /* not in s (first <= p < end): also when s is NULL */
            if (s)
                put_settle(c, s, release);
            s = put_slab_of(c, p);
            first = (uintptr_t)s->objs + c->obj_offset;
            end = (uintptr_t)s->span + c->slab_size;
            objs_bytes = (uint64_t)s->nobjs * stride;
            map = s->alloc_map;
        }
        /* slab_index, with the geometry in registers */
        uint64_t off = p - first;
        uint32_t pos = (uint32_t)((off * recip) >> 32), idx = s->nobjs - 1 - pos;
        if (off >= objs_bytes || (uint64_t)pos * stride != off) {
            usi_debug_report(c, s, (void *)p, "Invalid pointer: not the start of an object");
            skipped++;
            continue;
        }
        uint64_t bit = (uint64_t)1 << (idx & 63);
        if (!(map[idx >> 6] & bit) || usi_debug_is_free(c, (char *)p - c->obj_offset)) {
            usi_debug_report(c, s, (void *)p, "Object already free"); /* or quarantined */
            skipped++;
            continue;
        }
        usi_debug_on_free(c, s, (char *)p - c->obj_offset);
        if (quarantine_put(c, (void *)p, release))
            continue; /* its bit and its slab's inuse stay until it leaves the ring */
        map[idx >> 6] &= ~bit;
        if (idx >> 6 < s->scan)
            s->scan = idx >> 6;
        s->inuse--;
    }
    if (s)
        put_settle(c, s, release);
    c->slab_inuse -= n - skipped;
    c->slab_puts += n - skipped;
    /* No magazines: a batch is one object, so this is its slab. */
    if ((c->debug & USI_DEBUG_F) && s && s->list != USI_SLAB_NLISTS)
        check_or_report(c, s);
}

static USI_COLD USI_NORETURN void put_invalid(const struct uslab_cache *c, const struct usi_slab *s,
                                              uintptr_t p)
{
    usi_report_fatal("free of invalid pointer %p in cache %s: not the start of an object "
                     "(slab %p, objects every %zu bytes)",
                     (void *)p, c->name, (void *)s->span, c->stride);
}

static USI_COLD USI_NORETURN void put_twice(const struct uslab_cache *c, const struct usi_slab *s,
                                            uintptr_t p)
{
    usi_report_fatal("double free of %p in cache %s (object %u of slab %p is already free). "
                     "USLAB_DEBUG=FU,%s shows where it was allocated and freed",
                     (void *)p, c->name, slab_index(c, s, (const void *)p), (void *)s->span,
                     c->name);
}

/* What a put does with each object of a lattice cache, for malloc's pop (design §3): checks
 * the key that every block in a magazine holds, writes the free mark. */
static inline void put_words(const struct uslab_cache *c, uintptr_t p, uintptr_t key)
{
    uintptr_t *w = (uintptr_t *)p;
    USI_VG_DEFINED(w, 2 * sizeof *w); /* memcheck: a free block is no-access */
    if (USI_UNLIKELY(w[1] != key))
        put_keyless(c, w);
    w[0] = USI_SLAB_FREE_MARK;
}

/* Clears bits lo to hi (object numbers, lo <= hi) of map, a word at a time; each must be
 * set (allocated). Returns UINT32_MAX, or the first of them that was clear (a double free:
 * map is then unchanged from that word on). */
static inline uint32_t clear_bits(uint64_t *map, uint32_t lo, uint32_t hi)
{
    uint32_t w = lo >> 6, w_hi = hi >> 6;
    uint64_t m = UINT64_MAX << (lo & 63);
    for (;; w++, m = UINT64_MAX) {
        if (w == w_hi)
            m &= UINT64_MAX >> (63 - (hi & 63));
        if (USI_UNLIKELY((map[w] & m) != m))
            return w * 64 + (uint32_t)__builtin_ctzll(m & ~map[w]);
        map[w] ^= m;
        if (w == w_hi)
            return UINT32_MAX;
    }
}

/* usi_slab_put of a cache that is not a debug one, with its objects' words (put_words, a
 * lattice cache's: `key` is usi_free_secret) or none; inlined twice, as take_objects, so that
 * `words` is a constant in each (the key is not: 2 instructions an object in a streak). */
static inline __attribute__((always_inline)) size_t put_objects(struct uslab_cache *c, size_t n,
                                                                void *const *objs,
                                                                struct usi_slab **release,
                                                                int words, uintptr_t key)
{
    /* The objects go back a run at a time: a run is the objects that follow one another in
     * objs within one slab (neighbours often share one), and within a run a streak at a
     * time: objects a stride apart, going down or up (blocks freed in the order they were
     * handed out, or in its reverse: lua's 99%, perl's 92%, python's 74%). A streak's first
     * object is checked with a division; the others, a stride from a checked one, are
     * object starts too, and their bits are cleared a word at a time. Only a run's first
     * object looks its slab up; where its objects lie is in locals (the bitmap stores could
     * alias it for the compiler), and a streak reads the count beside the `inuse` it writes.
     * A slab is settled after a streak only when it empties or was full. A bad pointer or
     * a double free (also twice in one batch: its bit is clear by then) is fatal.
     * Instructions an object, taken and put back once (slab_budget): in the order handed
     * out 47.6 -> 17.3 (16.9 since), scattered 98.2 -> 93.2 (96.3 since a slab has its own
     * count), 85.4 since the loop keeps fewer locals (a scattered object is a run: its
     * lookup and geometry are most of its cost). A malloc class's put (with words) in
     * `memory 16 B`: 13.6 -> 11.5 an object since `words` is a constant (session 80), which
     * cost this copy (no words) a register move an object: scattered 86.4. */
    const size_t stride = c->stride;
    const uint64_t recip = c->stride_recip;
    USI_ASSERT(c->obj_offset == 0); /* a left red zone is a debug cache's (debug.c) */
    struct usi_slab *s = NULL;
    uintptr_t first = 0;     /* s's lowest object */
    uint64_t objs_bytes = 0; /* s's objects' bytes: 0 before the first, which looks s up */
    size_t runs = 0;
    for (void *const *q = objs, *const *q_end = objs + n; q != q_end;) {
        uintptr_t p = (uintptr_t)*q;
        if (words)
            put_words(c, p, key);
        uint64_t off = p - first;
        if (off >= objs_bytes) { /* a run's first object: its slab */
            s = put_slab_of(c, p);
            first = (uintptr_t)s->objs;
            objs_bytes = (uint64_t)s->nobjs * stride;
            off = p - first;
            if (USI_UNLIKELY(off >= objs_bytes)) /* in s's span, past its objects */
                put_invalid(c, s, p);
            runs++;
        }
        /* slab_index, with the geometry in registers (off < objs_bytes) */
        uint32_t pos = (uint32_t)((off * recip) >> 32), lo = pos, hi = pos, k = 1;
        if (USI_UNLIKELY((uint64_t)pos * stride != off))
            put_invalid(c, s, p);
        const uint32_t last = s->nobjs - 1;
        void *const *e = q + 1;
        uint64_t step = e != q_end ? (uintptr_t)*e - p : 0; /* to the next object */
        if (step == -(uint64_t)stride && pos > 0) {
            size_t most = (size_t)(q_end - e);                 /* objects left after this one */
            void *const *stop = e + (most < pos ? most : pos); /* none below the lowest */
            for (uintptr_t a = p - stride; e != stop && (uintptr_t)*e == a; a -= stride) {
                if (words)
                    put_words(c, a, key);
                e++;
            }
            k = (uint32_t)(e - q);
            lo = pos - (k - 1);
        } else if (step == stride && pos < last) {
            size_t most = (size_t)(q_end - e);
            void *const *stop = e + (most < last - pos ? most : last - pos);
            for (uintptr_t a = p + stride; e != stop && (uintptr_t)*e == a; a += stride) {
                if (words)
                    put_words(c, a, key);
                e++;
            }
            k = (uint32_t)(e - q);
            hi = pos + (k - 1);
        }
        /* positions lo..hi from the lowest object are numbers last - hi .. last - lo */
        uint32_t idx = last - hi;
        uint64_t *const map = s->alloc_map;
        if (lo == hi) { /* a set bit (allocated) is cleared; a clear one is a double free */
            uint64_t word = map[idx >> 6];
            if (USI_UNLIKELY(!((word >> (idx & 63)) & 1)))
                put_twice(c, s, p);
            map[idx >> 6] = word ^ ((uint64_t)1 << (idx & 63));
        } else {
            uint32_t twice = clear_bits(map, idx, last - lo);
            if (USI_UNLIKELY(twice != UINT32_MAX))
                put_twice(c, s, (uintptr_t)usi_slab_object(c, s, twice));
        }
        if (idx >> 6 < s->scan)
            s->scan = idx >> 6;
        s->inuse -= k;
        q = e;
        /* A put leaves no slab full: one still partial and on that list stays as it is
         * (scattered frees make a streak an object: perl's teardown, 200,000 of them). */
        if (s->inuse == 0 || s->list != USI_SLAB_PARTIAL)
            put_settle(c, s, release);
    }
    c->slab_inuse -= n;
    c->slab_puts += n;
    return runs;
}

size_t usi_slab_put(struct uslab_cache *c, size_t n, void *const *objs, struct usi_slab **release)
{
    if (USI_UNLIKELY(c->debug)) {
        put_debug(c, n, objs, release);
        return n; /* one object at a time */
    }
    /* a lattice cache's objects all start in its spans (malloc.c): their words (put_words) */
    return c->lattice ? put_objects(c, n, objs, release, 1, usi_free_secret)
                      : put_objects(c, n, objs, release, 0, 0);
}

size_t usi_slab_detach_empty(struct uslab_cache *c, size_t keep, struct usi_slab **release)
{
    size_t moved = 0;
    while (c->lists[USI_SLAB_EMPTY].count > keep) {
        struct usi_slab *s = c->lists[USI_SLAB_EMPTY].first;
        list_remove(c, s);
        s->next = *release;
        *release = s;
        slab_detached(c, s);
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
                slab_detached(c, s);
            } else {
                left++;
            }
        }
        s = next;
    }
    return left;
}

size_t usi_slab_release(struct uslab_cache *c, struct usi_slab *list)
{
    size_t bytes = 0, guard = guard_bytes(c);
    while (list) {
        struct usi_slab *next = list->next;
        char *span = list->span;
        usi_pages_set_owner(span, c->slab_order, 0, 0);
        usi_pages_free_span(span, c->slab_order, guard, list->guard_how);
        bytes += c->slab_size;
        list = next;
    }
    return bytes;
}

uint32_t usi_slab_index_of(const struct uslab_cache *c, uintptr_t e, const void *p,
                           const void **block)
{
    const struct usi_slab *s = usi_slab_of_entry(e);
    const char *slot = (const char *)p - c->obj_offset;
    uintptr_t off = (uintptr_t)slot - (uintptr_t)s->objs;
    *block = off < (uintptr_t)s->nobjs * c->stride
                 ? s->objs + (off / c->stride) * c->stride + c->obj_offset
                 : NULL;
    return slab_index(c, s, slot);
}

int usi_slab_holds(const struct uslab_cache *c, uintptr_t e, const void *p)
{
    const struct usi_slab *s = usi_slab_of_entry(e);
    if (s->cache != c || s->list == USI_SLAB_NLISTS)
        return 0;
    uint32_t idx = slab_index(c, s, (const char *)p - c->obj_offset);
    return idx != UINT32_MAX && idx < s->bump &&
           !(s->alloc_map[idx >> 6] & ((uint64_t)1 << (idx & 63)));
}
