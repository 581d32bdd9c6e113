/* SPDX-License-Identifier: MIT */
/*
 * test_slab.c - slab geometry for many sizes and alignments, colouring, and the slab
 * layer's lists and free-object tracking (usi_slab_take / usi_slab_put), and the span
 * groups of the medium malloc classes.
 */
#include "base.h"
#include "check.h"
#include "debug.h"
#include "descriptor.h"
#include "init.h"
#include "os.h"
#include "pages.h"
#include "sizeclass.h"
#include "slab.h"
#include "testutil.h"
#include "uslab.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void check_geometry(const struct uslab_cache *c, size_t size, size_t align)
{
    size_t want_align = align ? align : (size >= 16 ? 16 : 8);
    if (want_align < 8)
        want_align = 8;
    CHECK(c->align == want_align, "align %zu for size %zu align %zu", c->align, size, align);
    size_t want_stride = (size + c->align - 1) & ~(c->align - 1);
    if (want_stride < USI_MIN_STRIDE)
        want_stride = USI_MIN_STRIDE;
    CHECK(c->stride == want_stride, "stride %zu for size %zu align %zu", c->stride, size, align);
    CHECK(c->slab_size == (USI_UNIT_SIZE << c->slab_order), "slab size");
    CHECK(c->slab_order < USI_SPAN_ORDERS, "slab order");
    CHECK(c->nobjs > 0, "size %zu align %zu: no objects", size, align);
    /* The header and bitmap are in side arrays (design §3): objects start at the span. */
    CHECK(c->first_offset == 0, "objects of a user cache start at %u", c->first_offset);
    size_t used = c->first_offset + (size_t)c->nobjs * c->stride;
    CHECK(used + c->colour_max <= c->slab_size,
          "size %zu: objects (%zu bytes) + colour %u exceed slab %zu", size, used, c->colour_max,
          c->slab_size);
    /* Every object that fits is used, up to the bitmap's bit per 16 bytes. */
    size_t fit = c->slab_size / c->stride;
    size_t bits = (size_t)USI_SLAB_BITS_BYTES * 8 * (c->slab_size >> USI_UNIT_SHIFT);
    CHECK(c->nobjs == (fit < bits ? fit : bits), "size %zu: %u objects, %zu fit", size, c->nobjs,
          fit);
    CHECK(c->colour_max % c->align == 0 && c->colour_step % c->align == 0, "colour alignment");
    double waste = (double)(c->slab_size - used) / (double)c->slab_size;
    if (c->nobjs >= 8 && size <= 65536)
        CHECK(waste <= 0.125, "size %zu align %zu: waste %.3f in a %zu slab", size, size, waste,
              c->slab_size);
    CHECK(waste < 0.5, "size %zu align %zu: waste %.3f", size, align, waste);
}

static void test_geometry(void)
{
    static const size_t aligns[] = {0, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
    struct rng r = {7};
    for (size_t a = 0; a < sizeof aligns / sizeof aligns[0]; a++) {
        for (int k = 0; k < 120; k++) {
            size_t size;
            if (k < 40)
                size = (size_t)k + 1;
            else if (k < 60)
                size = (size_t)1 << (k - 40); /* 1 .. 512K */
            else if (k < 100)
                size = 1 + rng_below(&r, 70000);
            else
                size = 1 + rng_below(&r, USI_CACHE_MAX_OBJECT);
            uslab_cache_t *c =
                uslab_cache_create("geometry", size, aligns[a], NULL, NULL, NULL, NULL, 0);
            CHECK(c, "create size %zu align %zu", size, aligns[a]);
            check_geometry(c, size, aligns[a]);
            /* A few objects: aligned, inside a slab, writable. */
            void *o[3];
            for (int i = 0; i < 3; i++) {
                o[i] = uslab_cache_alloc(c);
                CHECK(o[i] && (uintptr_t)o[i] % c->align == 0, "object alignment");
                pattern_fill(o[i], size, (uint64_t)i);
            }
            for (int i = 0; i < 3; i++) {
                CHECK(pattern_check(o[i], size, (uint64_t)i) == (size_t)-1, "contents");
                uslab_cache_free(c, o[i]);
            }
            uslab_cache_destroy(c);
        }
    }
    /* The largest object fits. */
    uslab_cache_t *c =
        uslab_cache_create("max", USI_CACHE_MAX_OBJECT, 4096, NULL, NULL, NULL, NULL, 0);
    CHECK(c, "max size");
    check_geometry(c, USI_CACHE_MAX_OBJECT, 4096);
    uslab_cache_destroy(c);
}

/* Successive slabs of a cache with slack start their objects at different offsets. */
static void test_colouring(unsigned flags)
{
    /* 200-byte objects in a 64K slab leave slack (136 bytes with align 8: three colours). */
    static const struct {
        size_t size, align;
    } cases[] = {{200, 8}, {200, 64}, {100, 0}, {3000, 0}, {1000, 512}, {24, 8}, {5000, 4096}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        uslab_cache_t *c = uslab_cache_create("colour", cases[k].size, cases[k].align, NULL, NULL,
                                              NULL, NULL, USLAB_CACHE_NOMAGAZINE | flags);
        CHECK(c, "create");
        size_t ncolours = c->colour_max / c->colour_step + 1;
        size_t nslabs = ncolours < 8 ? ncolours + 1 : 9;
        size_t n = nslabs * c->nobjs;
        void **objs = malloc(n * sizeof *objs);
        CHECK(objs, "malloc");
        uintptr_t offsets[16];
        size_t noff = 0;
        uintptr_t last_slab = 0;
        for (size_t i = 0; i < n; i++) {
            objs[i] = uslab_cache_alloc(c);
            CHECK(objs[i], "alloc");
            CHECK((uintptr_t)objs[i] % c->align == 0, "alignment");
            memset(objs[i], (int)(i & 0xff), cases[k].size);
            uintptr_t slab = usi_pagemap_lookup(objs[i]) & ~USI_ID_MASK;
            if (slab != last_slab) {
                struct usi_slab *s = usi_slab_of_entry(usi_pagemap_lookup(objs[i]));
                CHECK(noff < 16, "too many slabs");
                offsets[noff++] = (uintptr_t)s->objs - slab;
                last_slab = slab;
            }
            CHECK((uintptr_t)objs[i] - slab < c->slab_size, "object inside slab");
        }
        CHECK(noff == nslabs, "size %zu: %zu slabs, expected %zu", cases[k].size, noff, nslabs);
        for (size_t i = 0; i < noff; i++) {
            CHECK(offsets[i] % c->align == 0, "offset %lu not aligned", (unsigned long)offsets[i]);
            CHECK(offsets[i] >= c->first_offset && offsets[i] <= c->first_offset + c->colour_max,
                  "colour in range");
        }
        if (flags & USLAB_CACHE_NOCOLOUR) {
            for (size_t i = 1; i < noff; i++)
                CHECK(offsets[i] == offsets[0], "NOCOLOUR: all slabs at one offset");
        } else if (c->colour_max > 0) {
            /* The first min(ncolours, nslabs) slabs all start at different offsets. */
            size_t distinct = ncolours < noff ? ncolours : noff;
            for (size_t i = 0; i < distinct; i++)
                for (size_t j = i + 1; j < distinct; j++)
                    CHECK(offsets[i] != offsets[j], "size %zu: slabs %zu and %zu share colour %lu",
                          cases[k].size, i, j, (unsigned long)offsets[i]);
        }
        for (size_t i = 0; i < n; i++) {
            const unsigned char *p = objs[i];
            CHECK(p[0] == (i & 0xff) && p[cases[k].size - 1] == (i & 0xff), "contents");
            uslab_cache_free(c, objs[i]);
        }
        free(objs);
        uslab_cache_destroy(c);
    }
    /* Colouring must have effect for the common case of a cache with slack. */
    uslab_cache_t *c = uslab_cache_create("slack", 200, 8, NULL, NULL, NULL, NULL, 0);
    CHECK(c && c->colour_max > 0, "a 200-byte cache has colours (max %u)", c ? c->colour_max : 0);
    uslab_cache_destroy(c);
}

/* The slab layer itself: lists move with state, the reserve of empty slabs is kept. */
/* Every slab of c passes usi_slab_check (caller holds the lock). */
static void check_all_slabs(struct uslab_cache *c, const char *when)
{
    uint64_t room = 0;
    for (unsigned l = 0; l < USI_SLAB_NLISTS; l++)
        for (struct usi_slab *s = c->lists[l].first; s; s = s->next) {
            const char *bad = usi_slab_check(c, s);
            CHECK(bad == NULL, "%s: slab %p: %s", when, (void *)s, bad);
            room += s->nobjs;
        }
    CHECK(room == c->slab_objects, "%s: the slabs hold %llu objects, counted %llu", when,
          (unsigned long long)room, (unsigned long long)c->slab_objects);
}

/* usi_slab_check catches each kind of corruption of a slab header, and passes once it is
 * undone. */
static void test_slab_check(void)
{
    struct uslab_cache *c =
        uslab_cache_create("check", 48, 0, NULL, NULL, NULL, NULL, USLAB_CACHE_NOMAGAZINE);
    void *objs[6];
    usi_lock(&c->lock);
    CHECK(usi_slab_take(c, 6, objs, NULL, 0) == 6, "take 6");
    struct usi_slab *release = NULL;
    usi_slab_put(c, 2, objs + 4, &release); /* two on the free list */
    struct usi_slab *s = usi_slab_of_entry(usi_pagemap_lookup(objs[0]));
    CHECK(usi_slab_check(c, s) == NULL, "a sound slab passes");
    s->inuse++;
    CHECK(usi_slab_check(c, s) != NULL, "inuse off by one");
    s->inuse--;
    s->alloc_map[0] ^= 1u << 5; /* object 5 is free: mark it allocated */
    const char *bad = usi_slab_check(c, s);
    CHECK(bad && strstr(bad, "bitmap"), "bitmap: %s", bad ? bad : "(passed)");
    s->alloc_map[0] ^= 1u << 5;
    s->list = USI_SLAB_FULL;
    bad = usi_slab_check(c, s);
    CHECK(bad && strstr(bad, "wrong list"), "list: %s", bad ? bad : "(passed)");
    s->list = USI_SLAB_PARTIAL;
    /* objects 4 and 5 are free in word 0: a scan position past it hides them */
    s->scan = 1;
    bad = usi_slab_check(c, s);
    CHECK(bad && strstr(bad, "scan"), "scan: %s", bad ? bad : "(passed)");
    s->scan = 0;
    /* a bit past the last object (48-byte objects: fewer than 64 * words of them?) */
    uint32_t words = (c->nobjs + 63) / 64;
    if (c->nobjs % 64) {
        s->alloc_map[words - 1] ^= (uint64_t)1 << 63;
        bad = usi_slab_check(c, s);
        CHECK(bad && strstr(bad, "past the slab"), "past the end: %s", bad ? bad : "(passed)");
        s->alloc_map[words - 1] ^= (uint64_t)1 << 63;
    }
    /* an object never handed out marked allocated */
    uint32_t never = s->bump; /* six taken: bump is 6 */
    CHECK(never == 6, "bump %u after taking 6", never);
    s->alloc_map[0] ^= (uint64_t)1 << never;
    s->inuse++;
    bad = usi_slab_check(c, s);
    CHECK(bad && strstr(bad, "above bump"), "above bump: %s", bad ? bad : "(passed)");
    s->inuse--;
    s->alloc_map[0] ^= (uint64_t)1 << never;
    CHECK(usi_slab_check(c, s) == NULL, "sound again");
    usi_slab_put(c, 4, objs, &release);
    check_all_slabs(c, "all back");
    usi_unlock(&c->lock);
    uslab_cache_destroy(c);
}

/* The medium classes of a doubling take each other's empty slabs (design §3, "Span
 * groups"); a class of another doubling, or a cache in no group, does not. */
static struct uslab_cache *medium_class(size_t size)
{
    unsigned id = usi_sizeclass_of_large(size);
    CHECK(id && usi_class_size[id] == size, "a class of %zu bytes", size);
    struct uslab_cache *c = usi_class_cache(id);
    CHECK(c && usi_cache_medium(c) && c->span_next, "class %zu is medium, in a group", size);
    return c;
}

static void *take_one(struct uslab_cache *c)
{
    void *p = NULL;
    usi_lock(&c->lock);
    CHECK(usi_slab_take(c, 1, &p, NULL, 0) == 1, "take from %s", c->name);
    usi_unlock(&c->lock);
    return p;
}

/* Back into its slab, as a free's block goes: a malloc class's with the free key in its
 * second word (a block without it is refused: docs/security.md §2.2). */
static void put_one(struct uslab_cache *c, void *p)
{
    struct usi_slab *release = NULL;
    if (c->lattice)
        ((uintptr_t *)p)[1] = usi_free_secret;
    usi_lock(&c->lock);
    usi_slab_put(c, 1, &p, &release);
    usi_unlock(&c->lock);
    usi_slab_release(c, release);
}

#define GROUP_BUILT 0x6275696c74ull
static int group_ctor(void *obj, void *arg)
{
    *(uint64_t *)obj = GROUP_BUILT;
    ++*(int *)arg;
    return 0;
}

static void test_span_group(void)
{
    uslab_free(uslab_malloc(1)); /* initialises uslab; first, below the headroom (it keeps
                                    the empty slab) */
    struct uslab_cache *c48 = medium_class(49152), *c64 = medium_class(65536);
    struct uslab_cache *c96 = medium_class(98304);
    CHECK(c48->slab_order == c64->slab_order && c96->slab_order == c48->slab_order + 1,
          "48 and 64 KiB share a span size, 96 KiB has the next");
    void *p = take_one(c48);
    put_one(c48, p);
    CHECK(c48->lists[USI_SLAB_EMPTY].count == 1, "the 48 KiB class keeps its empty slab");
    uint64_t made = c64->slabs_created, gone = c48->slabs_released;
    void *far = take_one(c96);
    CHECK(c48->lists[USI_SLAB_EMPTY].count == 1, "another doubling's class maps its own span");
    void *q = take_one(c64);
    CHECK(q == p, "the 64 KiB class took the 48 KiB one's span (%p, not %p)", q, p);
    CHECK(c48->lists[USI_SLAB_EMPTY].count == 0 && c48->slabs_released == gone + 1,
          "the 48 KiB class gave its empty slab up");
    CHECK(c64->slabs_created == made + 1, "the 64 KiB class counts it as made");
    CHECK((usi_pagemap_lookup(q) & USI_ID_MASK) == c64->id, "the span's owner is the new class");
    CHECK(usi_unit_tag(q) == c64->unit_tag, "and free's unit tag names its pair");
    usi_lock(&c64->lock);
    check_all_slabs(c64, "adopted");
    usi_unlock(&c64->lock);
    /* Written through, it is a whole block of its new class. */
    memset(q, 0xa5, 65536);
    put_one(c64, q);
    put_one(c96, far);
    /* An object cache with spans of that size joins the group: it takes the 64 KiB class's
     * empty slab (a medium class keeps none in reserve) and constructs its objects there; the
     * class takes back an empty slab the cache keeps beyond its reserve; destroyed, the cache
     * leaves the group. */
    int built = 0;
    struct uslab_cache *u = uslab_cache_create("group-user", 4096, 0, group_ctor, NULL, NULL,
                                               &built, USLAB_CACHE_NOMAGAZINE);
    CHECK(u && u->span_next && u->slab_order == c64->slab_order,
          "a user cache with 64 KiB spans is in their span group");
    CHECK(c64->lists[USI_SLAB_EMPTY].count == 1, "the 64 KiB class keeps its empty slab");
    char *span64 = c64->lists[USI_SLAB_EMPTY].first->span;
    uint64_t u_made = u->slabs_created;
    void *objs[64];
    size_t n = 0;
    objs[n++] = uslab_cache_alloc(u);
    CHECK(objs[0] && usi_slab_of_entry(usi_pagemap_lookup(objs[0]))->span == span64 &&
              c64->lists[USI_SLAB_EMPTY].count == 0 && u->slabs_created == u_made + 1,
          "the user cache took the 64 KiB class's empty slab");
    CHECK((usi_pagemap_lookup(objs[0]) & USI_ID_MASK) == u->id, "the span's owner is the cache");
    CHECK(built == 1 && *(uint64_t *)objs[0] == GROUP_BUILT, "its object is constructed there");
    while (u->slabs_created < u_made + 2) {
        CHECK(n < 64, "two slabs of 4 KiB objects hold fewer than 64");
        objs[n] = uslab_cache_alloc(u);
        CHECK(objs[n] && *(uint64_t *)objs[n] == GROUP_BUILT, "object %zu constructed", n);
        n++;
    }
    for (size_t i = 0; i < n; i++)
        uslab_cache_free(u, objs[i]);
    CHECK(u->lists[USI_SLAB_EMPTY].count == 2 && u->empty_reserve == 1,
          "the cache keeps two empty slabs, one its reserve");
    char *spare = u->lists[USI_SLAB_EMPTY].first->span;
    q = take_one(c64);
    CHECK(usi_slab_of_entry(usi_pagemap_lookup(q))->span == spare &&
              u->lists[USI_SLAB_EMPTY].count == 1,
          "the 64 KiB class took the cache's spare slab, not its reserve");
    put_one(c64, q);
    usi_lock(&c64->lock);
    check_all_slabs(c64, "adopted from a user cache");
    usi_unlock(&c64->lock);
    uslab_cache_destroy(u);
    for (struct uslab_cache *o = c64->span_next; o != c64; o = o->span_next)
        CHECK(o != u, "a destroyed cache left its span group");
    q = take_one(c64);
    CHECK(q != NULL, "the class takes a slab after the cache left");
    put_one(c64, q);
}

/* The small classes of one span size are a group too: a class that needs a slab takes an
 * empty one that another keeps beyond its reserve (USLAB_EMPTY_SLABS), never the reserve. */
static void test_span_group_small(void)
{
    struct uslab_cache *a = usi_class_cache(usi_class_small[(96 + 7) >> 3]);
    struct uslab_cache *b = usi_class_cache(usi_class_small[(160 + 7) >> 3]);
    CHECK(a && b && a->span_next && b->span_next && a->slab_order == b->slab_order,
          "the 96- and 160-byte classes share a span size and a group");
    /* Two slabs of a, all their objects out, then back: two empty slabs, one beyond its
     * reserve (within the headroom and the purge delay, so none goes back yet). A slab of a
     * malloc class holds what fits after its phase: a->nobjs or one fewer. */
    size_t n = 0, cap = 2 * (size_t)a->nobjs;
    void **objs = malloc(cap * sizeof *objs);
    CHECK(objs != NULL, "an array");
    size_t full = a->lists[USI_SLAB_FULL].count;
    while (a->lists[USI_SLAB_FULL].count < full + 2) {
        CHECK(n < cap, "two slabs of the 96-byte class hold %zu objects at most", cap);
        objs[n++] = take_one(a);
    }
    for (size_t i = 0; i < n; i++)
        put_one(a, objs[i]);
    CHECK(a->lists[USI_SLAB_EMPTY].count == 2 && a->empty_reserve == 1,
          "the 96-byte class keeps two empty slabs, one its reserve (%zu, %zu)",
          a->lists[USI_SLAB_EMPTY].count, a->empty_reserve);
    char *spare = a->lists[USI_SLAB_EMPTY].first->span;
    char *reserve = a->lists[USI_SLAB_EMPTY].first->next->span;
    uint64_t made = b->slabs_created, gone = a->slabs_released;
    /* b takes until it makes a slab (its slabs full): the last block is in that slab */
    size_t got = 0;
    while (b->slabs_created == made)
        objs[got++ % n] = take_one(b);
    CHECK(b->slabs_created == made + 1, "the 160-byte class made a slab");
    char *taken = usi_slab_of_entry(usi_pagemap_lookup(objs[(got - 1) % n]))->span;
    CHECK(taken == spare, "it took the 96-byte class's spare span (%p, not %p)", (void *)taken,
          (void *)spare);
    CHECK(a->lists[USI_SLAB_EMPTY].count == 1 && a->lists[USI_SLAB_EMPTY].first->span == reserve &&
              a->slabs_released == gone + 1,
          "the 96-byte class kept its reserve and gave up the other");
    CHECK((usi_pagemap_lookup(taken) & USI_ID_MASK) == b->id, "the span's owner is the new class");
    CHECK(usi_unit_tag(objs[(got - 1) % n]) == b->unit_tag, "and free's unit tag names its pair");
    usi_lock(&b->lock);
    check_all_slabs(b, "adopted small");
    usi_unlock(&b->lock);
    /* Its reserve is not taken: b's next slab is a new span. The adopted one's pages, which
     * the 96-byte class wrote, are no fresh pages to b's takes (design §3, "Fresh pages"). */
    struct usi_slab *bs = usi_slab_of_entry(usi_pagemap_lookup(taken));
    CHECK(bs->written_low == (uintptr_t)taken, "a wholly written span adopted: %#lx, not %p",
          (unsigned long)bs->written_low, (void *)taken);
    uint32_t rest = bs->nobjs - bs->inuse;
    void **more = malloc(rest * sizeof *more);
    CHECK(more != NULL, "an array");
    struct usi_fresh_pages fresh = {.n = 0};
    usi_lock(&b->lock);
    CHECK(usi_slab_take(b, rest, more, &fresh, 0) == rest, "the adopted slab's other objects");
    usi_unlock(&b->lock);
    CHECK(fresh.n == 0, "no fresh pages in a span its earlier owner wrote (%u ranges)", fresh.n);
    free(more); /* the blocks stay out, as b's others */
    CHECK(b->slabs_created == made + 1, "the adopted slab is full");
    void *next = take_one(b);
    CHECK(b->slabs_created == made + 2 &&
              usi_slab_of_entry(usi_pagemap_lookup(next))->span != reserve &&
              a->lists[USI_SLAB_EMPTY].count == 1,
          "a reserve stays with its class");
    put_one(b, next);
    free(objs); /* b's blocks stay out: a unit test's process ends here */
}

/* usi_slab_take of one object with the zero question asked (calloc's fill, design §8): an
 * object reported never written must read as zero. Returns the object; *said: reported. */
static void *take_asking(struct uslab_cache *c, int *said)
{
    void *p = NULL;
    struct usi_fresh_pages fresh = {.n = 0, .zero = USI_FRESH_ASK};
    usi_lock(&c->lock);
    CHECK(usi_slab_take(c, 1, &p, &fresh, 0) == 1, "take from %s", c->name);
    usi_unlock(&c->lock);
    *said = fresh.zero == p;
    CHECK(fresh.zero == p || fresh.zero == NULL, "a zero report names the last object");
    for (size_t k = 0; *said && k < c->size; k++)
        CHECK(((unsigned char *)p)[k] == 0, "%s: object %p reported never written, byte %zu is %#x",
              c->name, p, k, ((unsigned char *)p)[k]);
    return p;
}

/* A span passed on twice in a group: a class writes all of it, a second adopts it and writes
 * one object at its top, a third adopts it from the second. What the first wrote is still
 * there, so the third's written_low is the span's start, and no object of it is reported
 * never written (calloc would hand it out uncleared); fresh objects of a new span are. */
static void test_zero_report(void)
{
    struct uslab_cache *a = usi_class_cache(usi_class_small[(80 + 7) >> 3]);
    struct uslab_cache *b = usi_class_cache(usi_class_small[(128 + 7) >> 3]);
    struct uslab_cache *c = usi_class_cache(usi_class_small[(192 + 7) >> 3]);
    CHECK(a && b && c && a->slab_order == b->slab_order && b->slab_order == c->slab_order &&
              a->span_next && b->span_next && c->span_next,
          "the 80-, 128- and 192-byte classes share a span size and a group");
    size_t cap = 4 * (size_t)a->nobjs, n = 0;
    void **objs = malloc(cap * sizeof *objs);
    CHECK(objs != NULL, "an array");
    int said;
    /* b: a slab of its own made, for an older empty slab of b's later */
    uint64_t made = b->slabs_created;
    while (b->slabs_created == made) {
        CHECK(n < cap, "the 128-byte class makes a slab");
        objs[n++] = take_asking(b, &said);
    }
    size_t nb = n;
    /* a: two slabs taken whole and written, then back: the newest empty one is spare */
    size_t full = a->lists[USI_SLAB_FULL].count;
    while (a->lists[USI_SLAB_FULL].count < full + 2) {
        CHECK(n < cap, "two slabs of the 80-byte class");
        objs[n] = take_one(a);
        memset(objs[n++], 0xa5, a->size);
    }
    for (size_t i = nb; i < n; i++)
        put_one(a, objs[i]);
    char *span = a->lists[USI_SLAB_EMPTY].first->span;
    /* b: fills its slab, then adopts that span: one object of b's at its top */
    n = nb;
    made = b->slabs_created;
    while (b->slabs_created == made) {
        CHECK(n < cap, "the 128-byte class makes another slab");
        objs[n++] = take_asking(b, &said);
    }
    CHECK(usi_slab_of_entry(usi_pagemap_lookup(objs[n - 1]))->span == span,
          "the 128-byte class adopted the 80-byte class's span");
    CHECK(!said, "an object of a span another class wrote is not reported never written");
    /* back, the adopted span's one object last: its slab is b's newest empty one, beyond the
     * reserve */
    for (size_t i = 0; i < n; i++)
        put_one(b, objs[i]);
    CHECK(b->lists[USI_SLAB_EMPTY].first->span == span &&
              b->lists[USI_SLAB_EMPTY].count > b->empty_reserve,
          "the adopted span is b's newest empty slab, beyond its reserve");
    /* c: adopts it from b */
    made = c->slabs_created;
    size_t m = 0;
    while (c->slabs_created == made) {
        CHECK(m < cap, "the 192-byte class makes a slab");
        objs[m++] = take_asking(c, &said);
    }
    struct usi_slab *cs = usi_slab_of_entry(usi_pagemap_lookup(objs[m - 1]));
    CHECK(cs->span == span, "the 192-byte class adopted the same span from the 128-byte class");
    CHECK(cs->written_low == (uintptr_t)span, "its written_low is the span's start, not %#lx",
          (unsigned long)(cs->written_low - (uintptr_t)span));
    while (cs->inuse < cs->nobjs) {
        CHECK(m < cap, "the rest of the adopted slab");
        objs[m++] = take_asking(c, &said);
        CHECK(!said, "object %p of the twice adopted span reported never written", objs[m - 1]);
    }
    /* A new span's objects are reported, and read as zero. */
    int reported = 0;
    for (size_t i = 0; i < 4 && m < cap; i++) {
        objs[m++] = take_asking(c, &said);
        reported += said;
    }
    CHECK(reported > 0, "no object of a new span reported never written");
    for (size_t i = 0; i < m; i++)
        put_one(c, objs[i]);
    /* A churn of four classes of the group, every object written once out: spans pass from
     * class to class, and every report of a never-written object is checked. */
    struct uslab_cache *cs4[4] = {a, b, c, usi_class_cache(usi_class_small[(48 + 7) >> 3])};
    static struct {
        void *p;
        struct uslab_cache *c;
    } pool[8192];
    uint64_t x = 1;
    size_t reports = 0;
    for (int op = 0; op < 400000; op++) {
        /* epochs of 25,000: two classes at a time, growing in one, shrinking in the next */
        int epoch = op / 25000, grow = epoch % 2 == 0;
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        size_t i = (size_t)(x >> 33) % 8192;
        int take = (x >> 12) % 10 < (grow ? 7u : 3u);
        if (pool[i].p && !take) {
            put_one(pool[i].c, pool[i].p);
            pool[i].p = NULL;
        } else if (!pool[i].p && take) {
            struct uslab_cache *k = cs4[(epoch / 2 + ((x >> 20) & 1)) & 3];
            pool[i].p = take_asking(k, &said);
            pool[i].c = k;
            reports += (size_t)said;
            memset(pool[i].p, 0x5a, k->size);
        }
    }
    for (size_t i = 0; i < 8192; i++)
        if (pool[i].p)
            put_one(pool[i].c, pool[i].p);
    CHECK(reports > 0, "the churn's new spans were reported");
    free(objs);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static void test_lists(void)
{
    uslab_cache_t *c =
        uslab_cache_create("lists", 512, 0, NULL, NULL, NULL, NULL, USLAB_CACHE_NOMAGAZINE);
    CHECK(c, "create");
    size_t per = c->nobjs;
    size_t n = 3 * per + per / 2;
    void **objs = malloc(n * sizeof *objs);
    CHECK(objs, "malloc");
    usi_lock(&c->lock);
    CHECK(usi_slab_take(c, n, objs, NULL, 0) == n, "take");
    CHECK(c->lists[USI_SLAB_FULL].count == 3, "3 full slabs, got %zu",
          c->lists[USI_SLAB_FULL].count);
    CHECK(c->lists[USI_SLAB_PARTIAL].count == 1, "1 partial slab");
    CHECK(c->lists[USI_SLAB_EMPTY].count == 0, "no empty slab");
    CHECK(c->slab_inuse == n, "slab_inuse");
    usi_unlock(&c->lock);
    struct ptrset set;
    ptrset_init(&set, n);
    for (size_t i = 0; i < n; i++) {
        CHECK(ptrset_insert(&set, objs[i]), "object %zu handed out twice", i);
        CHECK((uintptr_t)objs[i] % c->align == 0, "alignment");
        pattern_fill(objs[i], 512, i);
    }
    ptrset_free(&set);
    usi_lock(&c->lock);
    check_all_slabs(c, "all taken");
    usi_unlock(&c->lock);
    for (size_t i = 0; i < n; i++)
        CHECK(pattern_check(objs[i], 512, i) == (size_t)-1, "contents of %zu", i);
    /* Give back one object of the first full slab: it becomes partial. */
    struct usi_slab *release = NULL;
    usi_lock(&c->lock);
    usi_slab_put(c, 1, objs, &release);
    CHECK(c->lists[USI_SLAB_FULL].count == 2 && c->lists[USI_SLAB_PARTIAL].count == 2,
          "full -> partial");
    CHECK(release == NULL, "nothing released");
    /* Take it again: the lowest free object comes first. */
    void *again;
    CHECK(usi_slab_take(c, 1, &again, NULL, 0) == 1, "take one");
    CHECK(again == objs[0], "the freed object %p comes back first, got %p", objs[0], again);
    objs[0] = again;
    /* Give everything back. With a purge delay, empty slabs stay (stamped) until they have
     * been idle long enough; the newest `empty_reserve` of them stay for good. The stamps are
     * checked against readings of the clock around the frees, never against a constant: the
     * monotonic clock may be near 0 (a machine booted a moment ago, a time namespace). The
     * only arithmetic is t0 - 1, so t0 must not be 0: wait out the clock's first millisecond. */
    uint64_t t0;
    while ((t0 = usi_os_now_ms()) == 0)
        sleep_ms(1);
    usi_slab_put(c, n, objs, &release);
    uint64_t t1 = usi_os_now_ms();
    const char *below = getenv("TEST_CLOCK_BELOW_MS"); /* set under a faked clock near 0 */
    if (below)
        CHECK(t0 < strtoull(below, NULL, 10), "clock at %llu ms, not below %s: not faked",
              (unsigned long long)t0, below);
    CHECK(c->slab_inuse == 0, "slab_inuse 0");
    CHECK(c->lists[USI_SLAB_FULL].count == 0 && c->lists[USI_SLAB_PARTIAL].count == 0,
          "no full or partial slabs");
    CHECK(release == NULL && c->lists[USI_SLAB_EMPTY].count == 4 && c->purge_pending,
          "delayed purge: 4 empty slabs kept, purge pending");
    for (struct usi_slab *s = c->lists[USI_SLAB_EMPTY].first; s; s = s->next)
        CHECK(s->empty_since_ms >= t0 && s->empty_since_ms <= t1,
              "empty slab stamped %llu ms, outside the frees' [%llu, %llu]",
              (unsigned long long)s->empty_since_ms, (unsigned long long)t0,
              (unsigned long long)t1);
    CHECK(usi_slab_detach_idle(c, c->empty_reserve, t0 - 1, &release) == 4 - c->empty_reserve &&
              release == NULL,
          "slabs emptied after the instant given are not idle yet");
    CHECK(usi_slab_detach_idle(c, c->empty_reserve, t1, &release) == 0 && release != NULL,
          "idle slabs beyond the reserve are detached");
    CHECK(c->lists[USI_SLAB_EMPTY].count == c->empty_reserve, "empty reserve %zu, kept %zu",
          c->empty_reserve, c->lists[USI_SLAB_EMPTY].count);
    check_all_slabs(c, "after the purge");
    usi_unlock(&c->lock);
    size_t released = 0;
    for (struct usi_slab *s = release; s; s = s->next)
        released++;
    CHECK(released + c->empty_reserve == 4, "released %zu slabs", released);
    CHECK(usi_slab_release(c, release) == released * c->slab_size, "bytes");
    for (size_t i = 0; i < n; i++) {
        uintptr_t e = usi_pagemap_lookup(objs[i]);
        CHECK(e == 0 || (e & USI_ID_MASK) == c->id, "released slabs are unmapped");
    }
    CHECK(uslab_cache_reap(c) == c->empty_reserve * c->slab_size, "reap releases the reserve");
    for (size_t i = 0; i < n; i++)
        CHECK(usi_pagemap_lookup(objs[i]) == 0, "no slab left");
    free(objs);
    uslab_cache_destroy(c);
}

/* usi_slab_take hands out the lowest-numbered free objects in ascending order, a word of
 * the bitmap at a time: one run of free bits (a fresh slab's, a run freed whole) without a
 * bit scan, scattered ones with it. Taken in uneven chunks, from a fresh slab and after
 * puts of a whole word, a run inside a word, the slab's partial last word and scattered
 * objects, each object is the one expected. */
static void test_take_order(void)
{
    struct uslab_cache *c =
        uslab_cache_create("take", 48, 0, NULL, NULL, NULL, NULL, USLAB_CACHE_NOMAGAZINE);
    CHECK(c, "create");
    uint32_t n = c->nobjs;
    CHECK(n > 320 && n % 64 != 0, "a slab of 48-byte objects: %u, the last word partial", n);
    void **objs = malloc(n * sizeof *objs);
    uint32_t *want = malloc(n * sizeof *want);
    CHECK(objs && want, "malloc");
    static const uint32_t chunks[] = {1, 3, 60, 64, 7, 200, 64, 1, 63};
    usi_lock(&c->lock);
    struct usi_slab *s = NULL;
    for (uint32_t round = 0; round < 2; round++) {
        uint32_t count = 0;
        if (round == 0) {
            for (uint32_t i = 0; i < n; i++)
                want[count++] = i;
        } else {
            /* A whole word, a run inside one, runs across a word's end, scattered objects,
             * the partial last word. The put's streaks (slab.c) go down and up in address:
             * the whole word and the run from 250 are put in reverse. */
            uint32_t last_word = (n - 1) / 64 * 64;
            for (uint32_t i = 64; i < 128; i++)
                want[count++] = i;
            for (uint32_t i = 200; i < 211; i++)
                want[count++] = i;
            for (uint32_t i = 250; i < 262; i++)
                want[count++] = i;
            want[count++] = 300;
            want[count++] = 302;
            want[count++] = 305;
            for (uint32_t i = 310; i < 330; i++)
                want[count++] = i;
            for (uint32_t i = last_word; i < n; i++)
                want[count++] = i;
            for (uint32_t i = 0; i < count; i++) {
                uint32_t k = i < 64 ? 63 - i : want[i] >= 250 && want[i] < 262 ? 75 + 86 - i : i;
                objs[i] = usi_slab_object(c, s, want[k]) + c->obj_offset;
            }
            struct usi_slab *release = NULL;
            usi_slab_put(c, count, objs, &release);
            CHECK(release == NULL, "a partial slab is not released");
        }
        uint32_t got = 0;
        for (unsigned k = 0; got < count; k = (k + 1) % (sizeof chunks / sizeof chunks[0])) {
            uint32_t ask = chunks[k] < count - got ? chunks[k] : count - got;
            CHECK(usi_slab_take(c, ask, objs + got, NULL, 0) == ask, "take %u", ask);
            got += ask;
            check_all_slabs(c, "after a take");
        }
        if (!s)
            s = usi_slab_of_entry(usi_pagemap_lookup(objs[0]));
        for (uint32_t i = 0; i < count; i++)
            CHECK(objs[i] == usi_slab_object(c, s, want[i]) + c->obj_offset,
                  "round %u: object %u is number %u", round, i, want[i]);
        CHECK(s->inuse == n && s->list == USI_SLAB_FULL, "round %u: the slab is full", round);
    }
    struct usi_slab *release = NULL;
    for (uint32_t i = 0; i < n; i++)
        objs[i] = usi_slab_object(c, s, i) + c->obj_offset;
    usi_slab_put(c, n, objs, &release);
    check_all_slabs(c, "all back");
    usi_unlock(&c->lock);
    free(objs);
    free(want);
    uslab_cache_destroy(c);
}

/* The malloc classes' lattice (design §8): every block's address has low 32 bits that are
 * a multiple of its class's stride, and free()'s one-multiply test of that is exact. Each
 * slab holds every object that fits after its phase: one fewer than the class's most at
 * some phases, never at the worst phase's count for all of them (the 4480-byte class
 * would fit 13 objects a slab, where two thirds of the phases leave room for 14). */
static void test_lattice(void)
{
    void *warm = uslab_malloc(1); /* initialises the classes */
    uslab_free(warm);
    struct rng r = {11};
    size_t fewer = 0, most = 0; /* blocks in slabs of fewer objects than the most, and of it */
    for (unsigned id = 1; id <= usi_nclasses; id++) {
        struct uslab_cache *c = usi_class_cache(id);
        uint64_t m = c->lattice;
        CHECK(c->flags & USI_CACHE_LATTICE, "%s is a lattice cache", c->name);
        CHECK(m == UINT64_MAX / c->stride + 1, "%s: lattice constant", c->name);
        /* Exact on every offset a slab can have (below 2^23), and on random 32-bit values,
         * the multiples next to 2^32 included. */
        for (uint64_t n = 0; n < ((uint64_t)1 << 23); n += 1 + (n & 7))
            CHECK((n * m < m) == (n % c->stride == 0), "%s: n=%llu", c->name,
                  (unsigned long long)n);
        for (int k = 0; k < 20000; k++) {
            uint64_t n = rng_next(&r) & 0xffffffffu;
            uint64_t q = (0xffffffffu / c->stride - (uint64_t)k) * c->stride;
            CHECK((n * m < m) == (n % c->stride == 0), "%s: n=%llu", c->name,
                  (unsigned long long)n);
            CHECK(q * m < m && (q + 8) * m >= m, "%s: multiple %llu", c->name,
                  (unsigned long long)q);
        }
        /* Blocks of three slabs' worth. */
        size_t n = 3 * (size_t)c->nobjs + 1;
        void **blocks = malloc(n * sizeof *blocks);
        CHECK(blocks, "malloc");
        for (size_t i = 0; i < n; i++) {
            blocks[i] = uslab_malloc(c->size);
            CHECK(blocks[i], "malloc %zu", c->size);
            uintptr_t e = usi_pagemap_lookup(blocks[i]);
            CHECK((e & USI_ID_MASK) == id, "%s: block %p of class %lu", c->name, blocks[i],
                  (unsigned long)(e & USI_ID_MASK));
            CHECK((uint32_t)(uintptr_t)blocks[i] % c->stride == 0, "%s: block %p off the lattice",
                  c->name, blocks[i]);
            struct usi_slab *s = usi_slab_of_entry(e);
            CHECK((char *)blocks[i] + c->stride <= s->span + c->slab_size,
                  "%s: block %p ends past its slab", c->name, blocks[i]);
            size_t after = (size_t)(s->span + c->slab_size - s->objs);
            CHECK(s->nobjs <= c->nobjs && s->nobjs * c->stride <= after &&
                      (s->nobjs == c->nobjs || (s->nobjs + 1) * c->stride > after),
                  "%s: slab %p holds %u objects, %zu bytes after its phase", c->name,
                  (void *)s->span, s->nobjs, after);
            fewer += s->nobjs < c->nobjs;
            most += s->nobjs == c->nobjs;
        }
        usi_lock(&c->lock);
        check_all_slabs(c, c->name);
        usi_unlock(&c->lock);
        for (size_t i = 0; i < n; i++)
            uslab_free(blocks[i]);
        free(blocks);
    }
    /* Blocks of the classes whose phase varies (4480 bytes in 64 KiB slabs: 35 phases)
     * land in slabs of both counts: a slab's count follows its own phase. */
    CHECK(fewer > 0 && most > 0, "slabs of the most objects %zu, of fewer %zu", most, fewer);
}

/* Fillers (design §3): two threads that fill a class often fill a slab each, so that no cache
 * line holds objects of both; a take for no filler goes to the first partial slab; a full or
 * empty slab is no filler's. Without fillers the second take continued the first's slab and
 * its first object shared the first's last line (`mt glibcthread`). */
static void test_fillers(void)
{
    uslab_cache_t *c =
        uslab_cache_create("fillers", 16, 0, NULL, NULL, NULL, NULL, USLAB_CACHE_NOMAGAZINE);
    CHECK(c, "create");
    enum { N = 6 }; /* 96 bytes: the second take starts inside the first's last line */
    void *a[N], *b[N], *x[2];
    usi_lock(&c->lock);
    CHECK(usi_slab_take(c, N, a, NULL, 1) == N, "filler 1's take");
    struct usi_slab *sa = usi_slab_of_entry(usi_pagemap_lookup(a[0]));
    CHECK(sa->filler == 1, "the slab is filler 1's (%u)", sa->filler);
    CHECK(usi_slab_take(c, N, b, NULL, 2) == N, "filler 2's take");
    struct usi_slab *sb = usi_slab_of_entry(usi_pagemap_lookup(b[0]));
    CHECK(sb != sa && sb->filler == 2, "filler 2 fills a slab of its own");
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
            CHECK((uintptr_t)a[i] / 64 != (uintptr_t)b[j] / 64,
                  "a line holds both fillers' objects");
    CHECK(usi_slab_take(c, N, a, NULL, 1) == N && usi_slab_of_entry(usi_pagemap_lookup(a[0])) == sa,
          "filler 1 goes on with its own slab, past filler 2's at the list's head");
    CHECK(usi_slab_take(c, 2, x, NULL, 0) == 2, "a take for no filler");
    CHECK(usi_slab_of_entry(usi_pagemap_lookup(x[0])) == c->lists[USI_SLAB_PARTIAL].first,
          "it goes to the first partial slab");
    CHECK(usi_slab_check(c, sa) == NULL && usi_slab_check(c, sb) == NULL, "sound slabs");
    /* Filled up, filler 2's slab is full and no filler's; emptied, it stays no filler's. */
    size_t rest = sb->nobjs - sb->inuse;
    void **more = malloc(rest * sizeof *more);
    CHECK(more, "malloc");
    size_t got = 0;
    while (got < rest && sb->inuse < sb->nobjs)
        got += usi_slab_take(c, 1, more + got, NULL, 2);
    CHECK(sb->list == USI_SLAB_FULL && sb->filler == 0, "a full slab is no filler's (%u)",
          sb->filler);
    sb->filler = 2;
    CHECK(usi_slab_check(c, sb) != NULL, "usi_slab_check refuses a filler on a full slab");
    sb->filler = 0;
    struct usi_slab *release = NULL;
    usi_slab_put(c, got, more, &release);
    usi_slab_put(c, N, b, &release);
    usi_slab_put(c, 2, x, &release); /* maybe from filler 2's slab too */
    CHECK(sb->list == USI_SLAB_EMPTY && sb->filler == 0,
          "an emptied slab is no filler's (%u on list %u)", sb->filler, sb->list);
    usi_unlock(&c->lock);
    if (release)
        usi_slab_release(c, release);
    free(more);
}

/* The statistics' resident estimate (touched_bytes, design §10) of a medium block: the pages
 * of the block, not of its span (a 40 KB block in the 48 KiB class, whose span is 64 KiB,
 * counted 64 KiB). */
static void test_touched_medium(void)
{
    void *first = uslab_malloc(40000); /* sets the class up */
    CHECK(first, "malloc");
    struct uslab_cache *c = usi_class_caches[usi_sizeclass_of_large(40000)];
    CHECK(c && c->size == 48 << 10 && c->stride == 64 << 10, "the 48 KiB class, a 64 KiB span");
    size_t before = c->touched_bytes;
    void *p = uslab_malloc(40000); /* a slab of its own */
    CHECK(p, "malloc");
    size_t touched = c->touched_bytes - before;
    CHECK(touched == (size_t)48 << 10, "a 40 KB block counts %zu bytes, not its class's 48 KiB",
          touched);
    uslab_free(p);
    uslab_free(first);
    printf("a medium block counts its class's pages: %zu bytes\n", touched);
}

int main(void)
{
    test_touched_medium();
    test_span_group();
    test_span_group_small();
    test_zero_report();
    test_geometry();
    test_colouring(0);
    test_colouring(USLAB_CACHE_NOCOLOUR);
    test_lists();
    test_slab_check();
    test_take_order();
    test_lattice();
    test_fillers();
    TEST_DONE();
}
