/* SPDX-License-Identifier: MIT */
/*
 * invariant_cases.c - the checked invariants of docs/design.md §6 and §3 fire: a callback
 * reached with a uslab lock held trips the lock-depth assertion, and USLAB_DEBUG=F finds a
 * corrupted slab header. argv[1] names the case; death_driver checks the abort and message.
 * Linked with the static library: the cases reach into internal state on purpose.
 */
#include "check.h"
#include "descriptor.h"
#include "os.h"
#include "pages.h"
#include "slab.h"
#include "uslab.h"

#include <string.h>

static int ctor_calls;

static int ctor(void *obj, void *arg)
{
    (void)arg;
    memset(obj, 0, 64);
    ctor_calls++;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: invariant_cases CASE\n");
        return 2;
    }
    const char *k = argv[1];
    uslab_cache_t *c = uslab_cache_create("invariant", 64, 0, ctor, NULL, NULL, NULL, 0);
    CHECK(c != NULL, "create");
    if (strcmp(k, "ok") == 0) {
        void *p = uslab_cache_alloc(c);
        CHECK(p && ctor_calls == 1, "constructed once");
        uslab_cache_free(c, p);
        uslab_cache_destroy(c);
        return 0;
    }
    if (strcmp(k, "lock_held_at_callback") == 0) {
        /* A callback reached while this thread holds a uslab lock: the assertion at the
         * constructor's call site must stop it. */
        uslab_cache_t *other = uslab_cache_create("other", 32, 0, NULL, NULL, NULL, NULL, 0);
        usi_lock(&other->lock);
        void *p = uslab_cache_alloc(c);
        fprintf(stderr, "invariant_cases: constructor ran under a lock (%p)\n", p);
        return 1;
    }
    if (strcmp(k, "slab_corrupt") == 0) {
        /* USLAB_DEBUG=F: flip the bitmap bit of an object that was never handed out; the
         * next operation on that slab must report it. */
        void *p = uslab_cache_alloc(c);
        uintptr_t e = usi_pagemap_lookup(p);
        struct usi_slab *s = usi_slab_of_entry(e);
        CHECK(s && c->nobjs > 2, "slab of the object");
        s->alloc_map[0] ^= (uint64_t)1 << (c->nobjs - 1 < 63 ? c->nobjs - 1 : 63);
        uslab_cache_free(c, p);
        fprintf(stderr, "invariant_cases: corrupted slab went unnoticed\n");
        return 1;
    }
    fprintf(stderr, "invariant_cases: unknown case %s\n", k);
    return 2;
}
