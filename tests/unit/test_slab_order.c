/* SPDX-License-Identifier: MIT */
/*
 * test_slab_order.c - the order in which fresh slabs hand out their objects (docs/design.md
 * §3): each of its objects exactly once, in address order (object 0 first, the highest in
 * the span), the slab checks holding throughout, for a user cache of 16 to 4096 bytes and
 * for a malloc class, whose fresh blocks come out as neighbours.
 */
#include "check.h"
#include "descriptor.h"
#include "os.h"
#include "pages.h"
#include "slab.h"
#include "uslab.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SLABS 200

static uint32_t index_of(struct uslab_cache *c, void *p)
{
    const void *block;
    uint32_t idx = usi_slab_index_of(c, usi_pagemap_lookup(p), p, &block);
    CHECK(idx != UINT32_MAX, "%p is an object of %s", p, c->name);
    return idx;
}

static struct usi_slab *slab_of(void *p)
{
    return usi_slab_of_entry(usi_pagemap_lookup(p));
}

/* Takes SLABS fresh slabs' worth of objects from c (caller holds no lock) and checks their
 * order; returns them to the slabs. */
static void check_order(struct uslab_cache *c)
{
    uint32_t n = c->nobjs;
    size_t total = (size_t)n * SLABS;
    void **objs = malloc(total * sizeof *objs);
    uint32_t *seen = calloc(n, sizeof *seen);
    CHECK(objs && seen, "test memory");

    usi_lock(&c->lock);
    CHECK(c->lists[USI_SLAB_PARTIAL].count == 0 && c->lists[USI_SLAB_EMPTY].count == 0,
          "%s starts with no partial or empty slab", c->name);
    CHECK(usi_slab_take(c, total, objs, NULL, 0) == total, "take %zu objects of %s", total,
          c->name);
    size_t ascending_slabs = 0;
    for (size_t k = 0; k < SLABS; k++) {
        void **slab_objs = objs + k * n;
        struct usi_slab *s = slab_of(slab_objs[0]);
        CHECK(usi_slab_check(c, s) == NULL, "slab %zu of %s sound when full", k, c->name);
        memset(seen, 0, n * sizeof *seen);
        int ascending = 1;
        for (uint32_t j = 0; j < n; j++) {
            CHECK(slab_of(slab_objs[j]) == s, "a fresh slab's objects come together");
            uint32_t idx = index_of(c, slab_objs[j]);
            CHECK(seen[idx]++ == 0, "index %u handed out twice in slab %zu", idx, k);
            if (j > 0 && idx != index_of(c, slab_objs[j - 1]) + 1)
                ascending = 0;
        }
        ascending_slabs += ascending && index_of(c, slab_objs[0]) == 0;
    }
    CHECK(ascending_slabs == SLABS, "%s: %zu of %d slabs in address order", c->name,
          ascending_slabs, SLABS);

    /* Back in a scrambled order, half first: the free lists stay sound. */
    struct usi_slab *release = NULL;
    for (size_t i = 0; i < total; i += 2)
        usi_slab_put(c, 1, &objs[i], &release);
    for (size_t k = 0; k < SLABS; k++)
        CHECK(usi_slab_check(c, slab_of(objs[k * n + 1])) == NULL, "slab %zu half free", k);
    for (size_t i = 1; i < total; i += 2)
        usi_slab_put(c, 1, &objs[i], &release);
    release = NULL;
    usi_slab_detach_empty(c, 0, &release);
    usi_unlock(&c->lock);
    usi_slab_release(c, release);
    free(seen);
    free(objs);
}

/* The malloc path end to end: fresh blocks of a class are neighbours of the block before
 * them (magazines hand them out in reverse, so address order means neighbours), and the
 * blocks are sound (written and read back). */
static void check_malloc(void)
{
    enum { N = 4000 };
    static char *blocks[N];
    size_t neighbours = 0, stride = 0;
    for (size_t i = 0; i < N; i++) {
        blocks[i] = uslab_malloc(200);
        CHECK(blocks[i] != NULL, "malloc");
        stride = uslab_malloc_usable_size(blocks[i]);
        memset(blocks[i], (int)(i & 0xff), 200);
        if (i > 0 && (size_t)labs(blocks[i] - blocks[i - 1]) == stride)
            neighbours++;
    }
    for (size_t i = 0; i < N; i++) {
        for (size_t b = 0; b < 200; b++)
            CHECK((unsigned char)blocks[i][b] == (i & 0xff), "block %zu byte %zu", i, b);
        uslab_free(blocks[i]);
    }
    CHECK(neighbours > N * 9 / 10, "only %zu of %d fresh blocks next to the one before", neighbours,
          N);
}

int main(void)
{
    uslab_free(uslab_malloc(1)); /* initialise */
    static const size_t sizes[] = {16, 64, 200, 4096};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        struct uslab_cache *c = uslab_cache_create("order", sizes[i], 0, NULL, NULL, NULL, NULL,
                                                   USLAB_CACHE_NOMAGAZINE);
        CHECK(c != NULL, "create");
        check_order(c);
        uslab_cache_destroy(c);
    }
    check_malloc();
    TEST_DONE();
}
