/* SPDX-License-Identifier: MIT */
/*
 * test_guards.c - uslab's metadata is out of reach of a linear overflow (docs/security.md,
 * design §3, §4): slab headers and bitmaps are not in the spans, the slabs of the internal
 * caches (cache descriptors, magazines, thread caches) have a guard page at each end (guard
 * markers where the kernel has them, else PROT_NONE), and a thread cache mapped on its own
 * has a PROT_NONE page on each side. A write into such a guard page faults.
 */
#define _GNU_SOURCE
#include "base.h"
#include "check.h"
#include "debug.h"
#include "depot.h"
#include "descriptor.h"
#include "os.h"
#include "pages.h"
#include "registry.h"
#include "slab.h"
#include "tcache.h"
#include "testutil.h"
#include "uslab.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* The permissions of the mapping that holds addr ("rw-p", "---p"), from /proc/self/maps. */
static void perms_of(const void *addr, char out[5])
{
    FILE *f = fopen("/proc/self/maps", "r");
    CHECK(f, "open /proc/self/maps");
    strcpy(out, "none");
    char line[512];
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char p[5];
        if (sscanf(line, "%lx-%lx %4s", &lo, &hi, p) == 3 && (uintptr_t)addr >= lo &&
            (uintptr_t)addr < hi) {
            memcpy(out, p, 5);
            break;
        }
    }
    fclose(f);
}

static int is_rw(const void *addr)
{
    char p[5];
    perms_of(addr, p);
    return strncmp(p, "rw", 2) == 0;
}

/* The span that holds p (a live object of some cache), with its cache. */
static char *span_of(const void *p, struct uslab_cache **cache)
{
    uintptr_t e = usi_pagemap_lookup(p);
    CHECK(e != 0, "%p is in a live slab", p);
    *cache = usi_caches[e & USI_ID_MASK];
    return (char *)(e & ~USI_ID_MASK);
}

static void check_internal_span(const void *obj, const char *what)
{
    struct uslab_cache *c;
    char *span = span_of(obj, &c);
    CHECK(c && (c->flags & USI_CACHE_INTERNAL), "%s: in an internal cache", what);
    CHECK(c->first_offset == USI_PAGE_SIZE, "%s: objects start after the guard page", what);
    char *last = span + c->slab_size - USI_PAGE_SIZE;
    struct usi_slab *s = usi_slab_of_entry(usi_pagemap_lookup(obj));
    CHECK(s->guard_how == USI_GUARD_MARKERS || s->guard_how == USI_GUARD_PROT, "%s: guarded", what);
    /* Markers leave the mapping whole ("rw-p"); PROT_NONE splits it ("---p"). */
    char p[5], q[5];
    perms_of(span, p);
    perms_of(last, q);
    const char *want = s->guard_how == USI_GUARD_PROT ? "---p" : "rw-p";
    CHECK(strcmp(p, want) == 0 && strcmp(q, want) == 0,
          "%s (%s): guard pages at %p (%s) and %p (%s), made %s", what, c->name, (void *)span, p,
          (void *)last, q, s->guard_how == USI_GUARD_PROT ? "PROT_NONE" : "by markers");
    CHECK(is_rw((const char *)obj), "%s: the object itself is read/write", what);
    CHECK((const char *)obj >= span + USI_PAGE_SIZE && (const char *)obj + c->stride <= last,
          "%s: between the guards", what);
    CHECK(write_faults(span + USI_PAGE_SIZE - 1) && write_faults(last) && write_faults(span) &&
              write_faults(last + USI_PAGE_SIZE - 1),
          "%s: writes into the guard pages fault", what);
}

int main(void)
{
    /* A user cache: its descriptor is an object of the descriptor cache. */
    uslab_cache_t *c = uslab_cache_create("guards", 100, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(c, "create");
    check_internal_span(c, "cache descriptor");

    /* Objects through magazines: the thread's pair holds a magazine, an internal object. */
    void *objs[200];
    for (int i = 0; i < 200; i++)
        CHECK((objs[i] = uslab_cache_alloc(c)) != NULL, "alloc");
    for (int i = 0; i < 200; i++)
        uslab_cache_free(c, objs[i]);
    struct usi_tcache *tc = usi_tls;
    CHECK(c->id < tc->npairs, "the thread has a pair for the cache");
    struct usi_magpair *mp = &tc->pairs[c->id];
    struct usi_mag *m = usi_pair_loaded(mp);
    CHECK(m != &usi_mag_empty, "a loaded magazine");
    check_internal_span(m, "magazine");

    /* The thread cache: an object of an internal cache (tcache.c's pool), in a span with
     * a guard page at each end, like the magazines. */
    CHECK(tc->map_bytes > 0, "a thread cache of its own, not the sentinel");
    check_internal_span(tc, "thread cache");

    /* A user slab holds only objects: its first object is at the span (no colour for the
     * first slab) and the header is elsewhere, in the side array. */
    struct uslab_cache *owner;
    char *span = span_of(objs[0], &owner);
    CHECK(owner == c, "the object's slab is the cache's");
    struct usi_slab *s = usi_slab_of_entry(usi_pagemap_lookup(objs[0]));
    CHECK((char *)s < span || (char *)s >= span + c->slab_size, "the header is not in the span");
    CHECK(s->objs >= span && s->objs < span + c->slab_size, "objects are");
    for (int i = 0; i < 200; i++)
        CHECK((objs[i] = uslab_cache_alloc(c)) != NULL, "alloc");
    for (int i = 0; i < 200; i++)
        uslab_cache_free(c, objs[i]);
    uslab_cache_destroy(c);
    TEST_DONE();
}
