/* SPDX-License-Identifier: MIT */
/*
 * test_pages.c - the pages layer and the page map: lookups say "not ours" for every pointer
 * uslab did not hand out and (slab | id) for every object; spans are aligned to their size,
 * read as zero, are distinct, and are reused after being freed.
 */
#include "base.h"
#include "check.h"
#include "descriptor.h"
#include "init.h"
#include "os.h"
#include "pages.h"
#include "sizeclass.h"
#include "slab.h"
#include "tcache.h"
#include "testutil.h"
#include "uslab.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static int global_var;

static void test_foreign_pointers(void)
{
    int stack_var = 0;
    void *heap = malloc(64);
    CHECK(heap, "malloc");
    CHECK(usi_pagemap_lookup(&stack_var) == 0, "stack pointer %p is not ours", (void *)&stack_var);
    CHECK(usi_pagemap_lookup(heap) == 0, "glibc heap pointer is not ours");
    CHECK(usi_pagemap_lookup(&global_var) == 0, "global pointer is not ours");
    CHECK(usi_pagemap_lookup(NULL) == 0, "NULL is not ours");
    CHECK(usi_pagemap_lookup((void *)(uintptr_t)-1) == 0, "~0 is not ours");
    CHECK(usi_pagemap_lookup((void *)(usi_pagemap.base - 1)) == 0, "base - 1 is not ours");
    uintptr_t end = usi_pagemap.base + usi_pagemap.nunits * USI_UNIT_SIZE;
    CHECK(usi_pagemap_lookup((void *)end) == 0, "end of range is not ours");
    CHECK(usi_pagemap_lookup((void *)(end + 12345)) == 0, "past the range is not ours");
    CHECK(usi_pagemap_lookup((void *)(uintptr_t)test_foreign_pointers) == 0, "code is not ours");
    /* Inside the reserved range, but in no live slab: the end of the range has not been
     * used yet. */
    CHECK(usi_pagemap_lookup((void *)(end - 8)) == 0, "unused reserved memory is not ours");
    /* The unit tags say "no malloc class" for all of them, garbage included. */
    const void *foreign[] = {&stack_var,
                             heap,
                             &global_var,
                             NULL,
                             (void *)(uintptr_t)-1,
                             (void *)(usi_pagemap.base - 1),
                             (void *)end,
                             (void *)(end - 8),
                             (void *)(uintptr_t)0x123456789abcdefull};
    for (size_t i = 0; i < sizeof foreign / sizeof foreign[0]; i++)
        CHECK(usi_unit_tag(foreign[i]) == 0, "unit tag of foreign pointer %zu", i);
    free(heap);
}

static void test_object_lookup(void)
{
    struct rng r = {42};
    static const size_t sizes[] = {8, 24, 64, 100, 256, 1000, 4096, 5000, 70000, 300000};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        uslab_cache_t *c = uslab_cache_create("pages-test", sizes[k], 0, NULL, NULL, NULL, NULL, 0);
        CHECK(c, "create size %zu", sizes[k]);
        enum { N = 300 };
        void *objs[N];
        for (int i = 0; i < N; i++) {
            objs[i] = uslab_cache_alloc(c);
            CHECK(objs[i], "alloc");
            pattern_fill(objs[i], sizes[k], (uint64_t)i);
            uintptr_t e = usi_pagemap_lookup(objs[i]);
            CHECK((e & USI_ID_MASK) == c->id, "id of object: %lu, cache id %lu",
                  (unsigned long)(e & USI_ID_MASK), (unsigned long)c->id);
            struct usi_slab *s = usi_slab_of_entry(e);
            CHECK(s->span == (char *)(e & ~USI_ID_MASK), "header names its span");
            CHECK((uintptr_t)s->span % c->slab_size == 0, "slab aligned to its size");
            CHECK((uintptr_t)objs[i] >= (uintptr_t)s->objs &&
                      (uintptr_t)objs[i] + c->size <= (uintptr_t)s->span + c->slab_size,
                  "object inside its slab");
            CHECK(s->cache == c, "slab header names the cache");
            CHECK(usi_unit_tag(objs[i]) == 0, "a user cache's object has no unit tag");
            /* Every byte of the object maps to the same entry. */
            uint64_t off = rng_below(&r, sizes[k]);
            CHECK(usi_pagemap_lookup((char *)objs[i] + off) == e, "interior byte lookup");
            CHECK(usi_pagemap_lookup((char *)objs[i] + sizes[k] - 1) == e, "last byte lookup");
        }
        for (int i = 0; i < N; i++)
            CHECK(pattern_check(objs[i], sizes[k], (uint64_t)i) == (size_t)-1, "contents");
        for (int i = 0; i < N; i++)
            uslab_cache_free(c, objs[i]);
        uslab_cache_reap(c);
        /* After a reap every slab is gone: the objects' addresses are no longer ours. */
        for (int i = 0; i < N; i++)
            CHECK(usi_pagemap_lookup(objs[i]) == 0, "released slab still mapped (size %zu)",
                  sizes[k]);
        uslab_cache_destroy(c);
    }
}

static void test_spans(void)
{
    enum { PER_ORDER = 6 };
    void *spans[USI_SPAN_ORDERS][PER_ORDER];
    for (unsigned order = 0; order < USI_SPAN_ORDERS; order++) {
        size_t bytes = USI_UNIT_SIZE << order;
        for (int i = 0; i < PER_ORDER; i++) {
            char *s = usi_pages_alloc_span(order, 0);
            CHECK(s, "span of order %u", order);
            spans[order][i] = s;
            CHECK((uintptr_t)s % bytes == 0, "span %p of order %u aligned to its size", (void *)s,
                  order);
            CHECK((uintptr_t)s >= usi_pagemap.base &&
                      (uintptr_t)s + bytes <= usi_pagemap.base + usi_pagemap.nunits * USI_UNIT_SIZE,
                  "span inside the reservation");
            /* Reads as zero, is writable, and is not owned until set_owner. */
            for (size_t off = 0; off < bytes; off += USI_PAGE_SIZE)
                CHECK(s[off] == 0 && s[off + USI_PAGE_SIZE - 1] == 0, "fresh span reads zero");
            memset(s, 0xa5, 256);
            s[bytes - 1] = 0x5a;
            CHECK(usi_pagemap_lookup(s) == 0, "unowned span");
        }
    }
    /* No two spans overlap. */
    for (unsigned o1 = 0; o1 < USI_SPAN_ORDERS; o1++)
        for (int i = 0; i < PER_ORDER; i++) {
            uintptr_t a = (uintptr_t)spans[o1][i], ae = a + (USI_UNIT_SIZE << o1);
            for (unsigned o2 = 0; o2 < USI_SPAN_ORDERS; o2++)
                for (int j = 0; j < PER_ORDER; j++) {
                    if (o1 == o2 && i == j)
                        continue;
                    uintptr_t b = (uintptr_t)spans[o2][j], be = b + (USI_UNIT_SIZE << o2);
                    CHECK(ae <= b || be <= a, "spans overlap");
                }
        }
    /* Owner entries cover exactly the span's units. */
    for (unsigned order = 0; order < USI_SPAN_ORDERS; order++) {
        char *s = spans[order][0];
        size_t bytes = USI_UNIT_SIZE << order;
        uintptr_t entry = (uintptr_t)s | 0x7777;
        uint16_t tag = (uint16_t)(3 * sizeof(struct usi_magpair));
        usi_pages_set_owner(s, order, entry, tag);
        for (size_t off = 0; off < bytes; off += USI_UNIT_SIZE)
            CHECK(usi_unit_tag(s + off) == tag, "unit tag inside the span");
        CHECK(usi_unit_tag(s + bytes) != tag || usi_pagemap_lookup(s + bytes) != 0,
              "unit tag after the span");
        for (size_t off = 0; off < bytes; off += USI_UNIT_SIZE / 2)
            CHECK(usi_pagemap_lookup(s + off) == entry, "owner entry inside the span");
        CHECK(usi_pagemap_lookup(s + bytes - 1) == entry, "last byte");
        CHECK(usi_pagemap_lookup(s + bytes) != entry, "first byte after the span");
        CHECK(usi_pagemap_lookup(s - 1) != entry, "last byte before the span");
        usi_pages_set_owner(s, order, 0, 0);
        CHECK(usi_pagemap_lookup(s) == 0 && usi_pagemap_lookup(s + bytes - 1) == 0, "cleared");
        CHECK(usi_unit_tag(s) == 0 && usi_unit_tag(s + bytes - 1) == 0, "tag cleared");
    }
    /* Freed spans are reused, and they read as zero again (purged). */
    for (unsigned order = 0; order < USI_SPAN_ORDERS; order++) {
        char *s = spans[order][PER_ORDER - 1];
        size_t bytes = USI_UNIT_SIZE << order;
        usi_pages_free_span(s, order, 0, 0);
        char *again = usi_pages_alloc_span(order, 0);
        CHECK(again == s, "freed span of order %u is reused (%p, got %p)", order, (void *)s,
              (void *)again);
        CHECK(again[0] == 0 && again[255] == 0 && again[bytes - 1] == 0, "reused span reads zero");
    }
    /* A big free span is split to serve smaller orders when nothing else is free: drain the
     * order-0 free list first (bounded), then check every new order-0 span is aligned and
     * distinct. */
    for (unsigned order = 0; order < USI_SPAN_ORDERS; order++)
        for (int i = 0; i < PER_ORDER; i++)
            usi_pages_free_span(spans[order][i], order, 0, 0);
    struct ptrset seen;
    ptrset_init(&seen, 4096);
    for (int i = 0; i < 1024; i++) {
        char *s = usi_pages_alloc_span(0, 0);
        CHECK(s && (uintptr_t)s % USI_UNIT_SIZE == 0, "order-0 span");
        CHECK(ptrset_insert(&seen, s), "order-0 span handed out twice");
        CHECK(s[0] == 0 && s[USI_UNIT_SIZE - 1] == 0, "span reads zero");
        s[0] = 1;
        s[USI_UNIT_SIZE - 1] = 1;
    }
    ptrset_free(&seen);
}

/* The reservation grows in place, doubling, as spans are taken past its end. */
static void test_growth(void)
{
    enum { N = 40 };
    unsigned order = USI_SPAN_ORDERS - 1;
    size_t bytes = USI_UNIT_SIZE << order;
    char *s[N];
    size_t before = usi_pages_reserved_bytes();
    for (int i = 0; i < N; i++) {
        s[i] = usi_pages_alloc_span(order, 0);
        CHECK(s[i] != NULL, "span %d of 8 MiB (reserved %zu MiB)", i,
              usi_pages_reserved_bytes() >> 20);
        CHECK(usi_pages_in_range(s[i]) && usi_pages_in_range(s[i] + bytes - 1),
              "span inside what is reserved");
        s[i][0] = 1; /* committed */
        s[i][bytes - 1] = 1;
        /* ... with its slab headers' and bitmaps' side arrays (they grow with the range) */
        char *meta = usi_pages_meta((uintptr_t)s[i]);
        uint64_t *bits = usi_pages_bits((uintptr_t)s[i]);
        meta[0] = 1;
        meta[((size_t)1 << order) * USI_SLAB_META_BYTES - 1] = 1;
        bits[0] = 1;
        bits[((size_t)1 << order) * USI_SLAB_BITS_BYTES / 8 - 1] = 1;
    }
    size_t after = usi_pages_reserved_bytes();
    printf("reservation grew from %zu to %zu MiB\n", before >> 20, after >> 20);
    CHECK(after >= before + (size_t)N * bytes / 2 && after > before, "the reservation grew");
    for (int i = 0; i < N; i++)
        usi_pages_free_span(s[i], order, 0, 0);
}

/* Another mapping right after the reservation's end (another allocator's, as snmalloc's
 * 256 GiB map landed there): the range goes on past it, and nothing of it is ours. */
static void test_grow_past_mapping(void)
{
    size_t len = (size_t)24 << 20;
    char *end = (char *)(usi_pagemap.base + usi_pagemap.nunits * USI_UNIT_SIZE);
    char *other = mmap(end, len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    CHECK(other == end, "a mapping at the reservation's end %p: %p (%s)", (void *)end,
          (void *)other, other == MAP_FAILED ? strerror(errno) : "elsewhere");
    memset(other, 0x5a, len);
    size_t before = usi_pages_reserved_bytes();
    /* 48 MiB of 64 KiB objects: the reservation must grow past the mapping. */
    uslab_cache_t *c = uslab_cache_create("past-mapping", 60000, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(c, "create");
    enum { N = 800 };
    static void *objs[N];
    for (int i = 0; i < N; i++) {
        objs[i] = uslab_cache_alloc(c);
        CHECK(objs[i], "object %d of 60000 bytes (reserved %zu MiB): %s", i,
              usi_pages_reserved_bytes() >> 20, strerror(errno));
        CHECK((char *)objs[i] + 60000 <= other || (char *)objs[i] >= other + len,
              "object %d at %p inside the other mapping", i, objs[i]);
        CHECK(usi_pages_in_range(objs[i]), "object %d in the range", i);
        pattern_fill(objs[i], 60000, (uint64_t)i);
    }
    CHECK((char *)objs[N - 1] >= other + len, "the range went on past the mapping");
    for (size_t off = 0; off < len; off += USI_UNIT_SIZE) {
        CHECK(usi_pagemap_lookup(other + off) == 0, "the other mapping is not ours");
        CHECK(!usi_pages_in_range(other + off), "the other mapping is not in the range");
        CHECK(other[off] == 0x5a && other[off + USI_UNIT_SIZE - 1] == 0x5a,
              "the other mapping untouched");
    }
    printf("reservation grew from %zu to %zu MiB past a mapping of %zu MiB\n", before >> 20,
           usi_pages_reserved_bytes() >> 20, len >> 20);
    for (int i = 0; i < N; i++) {
        CHECK(pattern_check(objs[i], 60000, (uint64_t)i) == (size_t)-1, "contents %d", i);
        uslab_cache_free(c, objs[i]);
    }
    uslab_cache_destroy(c);
    /* Fresh spans from the rest before the mapping read as zero (they went on the free
     * lists when the range moved on). */
    for (int i = 0; i < 64; i++) {
        char *sp = usi_pages_alloc_span(0, 0);
        CHECK(sp && (sp + USI_UNIT_SIZE <= other || sp >= other + len), "span %d", i);
        for (size_t k = 0; k < USI_UNIT_SIZE; k += 4096)
            CHECK(sp[k] == 0, "span %d reads as zero", i);
        usi_pages_free_span(sp, 0, 0, 0);
    }
    munmap(other, len);
}

/* The os layer's test for a process that has ended (the profile's owner, malloc.c): gone
 * once it is a zombie, before its parent reaps it (a daemon's parent, whose counts the
 * daemon then writes; tool_profile_exit failed under load before session 24). */
static void test_process_gone(void)
{
    CHECK(!usi_os_process_gone(getpid()) && !usi_os_process_gone(getppid()), "alive: gone");
    pid_t child = fork();
    CHECK(child >= 0, "fork");
    if (child == 0)
        _exit(0);
    siginfo_t info;
    CHECK(waitid(P_PID, (id_t)child, &info, WEXITED | WNOWAIT) == 0, "waitid");
    CHECK(usi_os_process_gone(child), "a zombie is not gone");
    CHECK(waitpid(child, NULL, 0) == child, "waitpid");
    CHECK(usi_os_process_gone(child), "a reaped process is not gone");
}

int main(void)
{
    void *p = uslab_malloc(1); /* initialises uslab */
    CHECK(p, "first malloc");
    CHECK(usi_initialized && usi_pagemap.nunits > 0, "initialised");
    CHECK(usi_pagemap.base % (USI_UNIT_SIZE << (USI_SPAN_ORDERS - 1)) == 0, "base aligned");
    CHECK(usi_pagemap_lookup(p) != 0, "malloc block is ours");
    unsigned id = (unsigned)(usi_pagemap_lookup(p) & USI_ID_MASK);
    CHECK(id >= 1 && id <= usi_nclasses, "malloc block in a class cache");
    /* Mapped lazily (design §2): only the first 2 MiB reserved at first. */
    CHECK(usi_pages_reserved_bytes() == (size_t)2 << 20, "first piece: %zu",
          usi_pages_reserved_bytes());
    CHECK(usi_unit_tag(p) == (unsigned)(id * sizeof(struct usi_magpair)),
          "unit tag of a malloc block: %u", usi_unit_tag(p));
    /* Outside the range, any pointer reads tag 0: below, just past the reservation, and
     * garbage. */
    CHECK(usi_unit_tag((void *)(usi_pagemap.base - 1)) == 0, "tag below the range");
    CHECK(usi_unit_tag((void *)(usi_pagemap.base + (usi_pagemap.nunits << USI_UNIT_SHIFT))) == 0,
          "tag past the reservation");
    CHECK(usi_unit_tag(NULL) == 0 && usi_unit_tag((void *)~(uintptr_t)0) == 0 &&
              usi_unit_tag((void *)((uintptr_t)1 << 62)) == 0,
          "tag of garbage");
    uslab_free(p);
    test_grow_past_mapping(); /* first: the bump pointer is near the end */
    test_foreign_pointers();
    test_object_lookup();
    test_spans();
    test_growth();
    test_process_gone();
    TEST_DONE();
}
