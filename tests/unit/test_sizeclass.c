/* SPDX-License-Identifier: MIT */
/*
 * test_sizeclass.c - the malloc size classes: every size maps to the smallest class that
 * holds it, waste is at most 1/8 from 128 bytes to 32 KiB and 1/2 above, a medium block has
 * a span of its own (the power of two at or above it), classes of 16 bytes or more are
 * 16-byte aligned, and power-of-two classes serve aligned requests (medium ones any
 * alignment up to their size).
 */
#include "base.h"
#include "check.h"
#include "descriptor.h"
#include "init.h"
#include "options.h"
#include "pages.h"
#include "settings.h"
#include "sizeclass.h"
#include "testutil.h"
#include "uslab.h"

#include <stdint.h>

static unsigned class_of(size_t size)
{
    return size <= USI_SMALL_MAX ? usi_class_small[(size + 7) >> 3] : usi_sizeclass_of_large(size);
}

int main(void)
{
    void *first = uslab_malloc(1); /* initialises uslab */
    CHECK(first, "first malloc");
    uslab_free(first);
    size_t max = usi_options.max_slab_size;
    CHECK(usi_nclasses > 9 && usi_nclasses <= USI_NCLASSES, "%u classes", usi_nclasses);
    CHECK(usi_class_size[usi_nclasses] == max, "largest class %zu is the max slab size %zu",
          usi_class_size[usi_nclasses], max);
    for (unsigned id = 1; id <= usi_nclasses; id++) {
        size_t s = usi_class_size[id];
        const struct uslab_cache *c = usi_class_cache(id);
        CHECK(c->id == id, "class %u has cache id %lu", id, (unsigned long)c->id);
        CHECK(c->size == s, "class %u size %zu, cache size %zu", id, s, c->size);
        CHECK(id == 1 || s > usi_class_size[id - 1], "classes increase");
        if (s >= 16) {
            CHECK(s % 16 == 0, "class %zu is a multiple of 16", s);
            CHECK(c->align >= 16, "class %zu aligned to %zu", s, c->align);
        }
        if (s > USI_MEDIUM) {
            size_t span = 2 * USI_MEDIUM;
            while (span < s)
                span *= 2;
            CHECK(c->align == span && c->stride == span, "medium class %zu align %zu stride %zu", s,
                  c->align, c->stride);
            CHECK(c->nobjs == 1 && c->slab_size == span, "medium class %zu: %u in a slab of %zu", s,
                  (unsigned)c->nobjs, c->slab_size);
            /* Magazines of 512 KiB of blocks: 10 of 48 KiB, 1 of 512 KiB, none of 768 KiB;
             * four times that for a pair that alternates. */
            CHECK(c->mag_steady == ((size_t)512 << 10) / s, "medium class %zu: magazines of %u", s,
                  c->mag_steady);
            CHECK(c->mag_capacity == 4 * c->mag_steady, "medium class %zu: alternating pairs' %u",
                  s, c->mag_capacity);
            continue;
        }
        if ((s & (s - 1)) == 0)
            CHECK(c->align == (s < USI_PAGE_SIZE ? s : USI_PAGE_SIZE), "pow2 class %zu align %zu",
                  s, c->align);
        CHECK(c->stride == s, "class %zu has no padding (stride %zu)", s, c->stride);
    }
    for (size_t size = 0; size <= max; size++) {
        unsigned id = class_of(size);
        CHECK(id >= 1 && id <= usi_nclasses, "size %zu: class id %u", size, id);
        size_t cs = usi_class_size[id];
        CHECK(cs >= size, "size %zu in class %zu", size, cs);
        CHECK(id == 1 || usi_class_size[id - 1] < size, "size %zu: class %zu is not the smallest",
              size, cs);
        if (size > 128 && size <= USI_MEDIUM)
            CHECK((cs - size) * 8 <= size, "size %zu wastes %zu in class %zu", size, cs - size, cs);
        else if (size > USI_MEDIUM)
            CHECK((cs - size) * 2 <= size, "medium size %zu wastes %zu in class %zu", size,
                  cs - size, cs);
    }
    /* Aligned classes. */
    for (size_t align = 8; align <= max; align *= 2)
        for (size_t size = 1; size <= max; size = size * 3 / 2 + 1) {
            unsigned id = usi_sizeclass_aligned(size, align);
            size_t need = size > align ? size : align;
            if (id == 0) {
                CHECK(need > max / 2 || (align > USI_PAGE_SIZE && max <= USI_MEDIUM),
                      "size %zu align %zu: no class", size, align);
                continue;
            }
            const struct uslab_cache *c = usi_class_cache(id);
            CHECK(c->size >= size && c->align >= align && c->stride % align == 0,
                  "size %zu align %zu: class %zu align %zu", size, align, c->size, c->align);
        }
    /* Real blocks: 16-byte aligned from 16 bytes, usable size is the class size. */
    struct rng r = {3};
    for (int i = 0; i < 20000; i++) {
        size_t size = rng_below(&r, max + 1);
        void *p = uslab_malloc(size);
        CHECK(p, "malloc %zu", size);
        if (size >= 16)
            CHECK((uintptr_t)p % 16 == 0, "malloc(%zu) = %p not 16-byte aligned", size, p);
        else
            CHECK((uintptr_t)p % 8 == 0, "malloc(%zu) = %p not 8-byte aligned", size, p);
        uintptr_t e = usi_pagemap_lookup(p);
        CHECK((e & USI_ID_MASK) == class_of(size), "malloc(%zu) from class %u, expected %u", size,
              (unsigned)(e & USI_ID_MASK), class_of(size));
        CHECK(uslab_malloc_usable_size(p) == usi_class_size[class_of(size)], "usable size");
        pattern_fill(p, size, (uint64_t)i);
        CHECK(pattern_check(p, size, (uint64_t)i) == (size_t)-1, "contents");
        uslab_free(p);
    }
    TEST_DONE();
}
