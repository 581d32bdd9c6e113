/* SPDX-License-Identifier: MIT */
/*
 * test_exhausted.c - the slab range runs out (USLAB_RESERVE=64M, set by the ctest):
 * malloc falls back to the system allocator without touching errno, a class whose slabs
 * could not grow is marked starved so the next fallbacks take no lock (docs/design.md §8),
 * and once blocks go back to the slabs (uslab_reap) the class is used again. A filler
 * (design §3) that can get no slab of its own shares another filler's: free objects are never
 * refused.
 */
#include "check.h"
#include "descriptor.h"
#include "init.h"
#include "os.h"
#include "pages.h"
#include "sizeclass.h"
#include "slab.h"
#include "uslab.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define SIZE 1000
#define N    120000 /* 120 MB: more than the 64 MiB range holds */

static void *blocks[N];

int main(void)
{
    CHECK(usi_ensure_init() == 0, "init");
    /* The range is 64 MiB, reserved as it is used (design §2). */
    CHECK(usi_pages_reserved_bytes() <= (size_t)64 << 20, "reservation %zu, want <= 64 MiB",
          usi_pages_reserved_bytes());
    unsigned id = usi_class_small[(SIZE + 7) >> 3];
    struct uslab_cache *c = usi_class_cache(id); /* set up now, before the range is full */
    CHECK(c != NULL, "class %u set up", id);
    size_t in_slabs = 0, outside = 0, starved_seen = 0;
    for (int i = 0; i < N; i++) {
        errno = 777;
        blocks[i] = uslab_malloc(SIZE);
        CHECK(blocks[i] != NULL, "malloc %d", i);
        CHECK(errno == 777, "malloc %d succeeded but set errno to %d", i, errno);
        memset(blocks[i], (int)(i & 0xff), SIZE);
        if (usi_pagemap_lookup(blocks[i]))
            in_slabs++;
        else
            outside++;
        starved_seen += __atomic_load_n(&c->starved, __ATOMIC_RELAXED) != 0;
    }
    CHECK(usi_pages_reserved_bytes() == (size_t)64 << 20, "reservation %zu after, want 64 MiB",
          usi_pages_reserved_bytes());
    printf("%zu blocks in slabs, %zu from the system allocator\n", in_slabs, outside);
    CHECK(in_slabs > 40000 && outside > 20000, "both kinds of blocks");
    CHECK(starved_seen > 0, "the class was marked starved");
    /* Two blocks of one slab back in it, the slab another filler's (1) and the only partial
     * one: filler 2 can make no slab, and shares it. */
    usi_lock(&c->lock);
    int i0 = -1, i1 = -1;
    for (int i = 0; i < N && i1 < 0; i++) {
        if (!usi_pagemap_lookup(blocks[i]))
            continue;
        if (i0 < 0)
            i0 = i;
        else if (usi_slab_of_entry(usi_pagemap_lookup(blocks[i])) ==
                 usi_slab_of_entry(usi_pagemap_lookup(blocks[i0])))
            i1 = i;
    }
    CHECK(i1 >= 0, "two blocks of one slab");
    struct usi_slab *s = usi_slab_of_entry(usi_pagemap_lookup(blocks[i0]));
    void *back[2] = {blocks[i0], blocks[i1]}, *again[2];
    for (int k = 0; k < 2; k++)
        ((uintptr_t *)back[k])[1] = usi_free_secret; /* as free leaves it */
    struct usi_slab *release = NULL;
    usi_slab_put(c, 2, back, &release);
    CHECK(c->lists[USI_SLAB_PARTIAL].first == s && c->lists[USI_SLAB_PARTIAL].count == 1 &&
              c->lists[USI_SLAB_EMPTY].count == 0,
          "one partial slab, no empty one");
    s->filler = 1;
    size_t got = usi_slab_take(c, 2, again, NULL, 2);
    usi_unlock(&c->lock);
    CHECK(got == 2, "filler 2 took %zu of the 2 free objects", got);
    memset(again[0], (int)(i0 & 0xff), SIZE); /* what the blocks held, for the checks below */
    memset(again[1], (int)(i1 & 0xff), SIZE);
    blocks[i0] = again[0];
    blocks[i1] = again[1];
    for (int i = 0; i < N; i++) {
        unsigned char *b = blocks[i];
        CHECK(b[0] == (unsigned char)(i & 0xff) && b[SIZE - 1] == (unsigned char)(i & 0xff),
              "block %d intact", i);
        uslab_free(blocks[i]);
    }
    uslab_reap();
    CHECK(__atomic_load_n(&c->starved, __ATOMIC_RELAXED) == 0,
          "starved cleared once objects went back to the slabs");
    void *p = uslab_malloc(SIZE);
    CHECK(p && usi_pagemap_lookup(p), "slabs serve the class again");
    uslab_free(p);
    TEST_DONE();
}
