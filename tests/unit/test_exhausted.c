/* SPDX-License-Identifier: MIT */
/*
 * test_exhausted.c - the slab range runs out (USLAB_RESERVE=64M, set by the ctest):
 * malloc falls back to the system allocator without touching errno, a class whose slabs
 * could not grow is marked starved so the next fallbacks take no lock (docs/design.md §8),
 * and once blocks go back to the slabs (uslab_reap) the class is used again.
 */
#include "check.h"
#include "descriptor.h"
#include "init.h"
#include "pages.h"
#include "sizeclass.h"
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
