/* SPDX-License-Identifier: MIT */
/*
 * test_class_nodesc.c - a malloc class whose descriptor cannot be had (design §7): a
 * class's descriptor is an object of the descriptor cache, taken at the class's first
 * allocation. When that cache can get no slab (here: every mmap and mprotect fails, through
 * the test build's fault switch, before any descriptor exists, and every span already
 * committed is taken), the malloc is glibc's,
 * errno untouched, and the class is not published half set up; once memory is back, the
 * class's next malloc sets it up as usual.
 */
#include "check.h"
#include "faults.h"
#include "init.h"
#include "pages.h"
#include "sizeclass.h"
#include "uslab.h"

#include <errno.h>
#include <string.h>

#define SIZE 3000

int main(void)
{
    CHECK(usi_ensure_init() == 0, "init");
    unsigned id = usi_sizeclass_of_large(SIZE);
    for (unsigned i = 1; i <= usi_nclasses; i++)
        CHECK(!usi_class_caches[i], "class %u was set up before its first allocation", i);

    CHECK(uslab_faults_set("1,1,mp") == 0, "faults");
    while (usi_pages_alloc_span(0, 0)) /* the range's first part is committed (design §2) */
        ;
    errno = 777;
    void *p = uslab_malloc(SIZE);
    CHECK(p != NULL, "malloc returned NULL: the system allocator should have served");
    CHECK(errno == 777, "errno %d: the failed set-up changed it", errno);
    CHECK(uslab_faults_injected("mp") > 0, "no mmap or mprotect failed: the test tested nothing");
    CHECK(usi_pagemap_lookup(p) == 0, "block %p is a slab block with no descriptor", p);
    CHECK(!usi_class_caches[id], "the class was published without a descriptor");
    memset(p, 0x5a, SIZE);
    CHECK(uslab_malloc_usable_size(p) >= SIZE, "usable size");
    uslab_free(p);

    CHECK(uslab_faults_set(NULL) == 0, "faults off");
    void *q = uslab_malloc(SIZE);
    CHECK(q && usi_pagemap_lookup(q) != 0, "block %p: the class was not set up after", q);
    CHECK(usi_class_caches[id] != NULL && usi_class_caches[id]->size == usi_class_size[id],
          "the class's descriptor");
    CHECK(usi_pagemap_lookup(usi_class_caches[id]) != 0,
          "the descriptor is not an object of the descriptor cache");
    uslab_free(q);
    printf("ok\n");
    return 0;
}
