/* SPDX-License-Identifier: MIT */
/*
 * hardening_cache.c - an attack on a cache descriptor (issue 11, hardening): a write that
 * replaces the constructor pointer of a cache (an overflow, a write after free, a stray
 * store) must not make uslab call the attacker's function. argv[1] names the case;
 * death_driver checks the abort and message. Linked with libuslab; includes src/descriptor.h
 * only to find the descriptor's ctor field, as an attacker who knows the layout would.
 */
#include "descriptor.h"
#include "uslab.h"

#include <stdio.h>
#include <string.h>

static int ctor_calls;

static int ctor(void *obj, void *arg)
{
    (void)arg;
    memset(obj, 0, 64);
    ctor_calls++;
    return 0;
}

/* The attacker's function, with the constructor's type. */
static int evil(void *obj, void *arg)
{
    (void)obj;
    (void)arg;
    fprintf(stderr, "hardening_cache: evil constructor ran\n");
    return 0;
}
static uslab_ctor_fn volatile evil_ptr = evil;

/* Through a volatile function pointer: the compiler cannot see (or drop) the store. */
static void overwrite_ctor_impl(struct uslab_cache *c, uslab_ctor_fn f)
{
    c->ctor = f;
}
static void (*volatile overwrite_ctor)(struct uslab_cache *, uslab_ctor_fn) = overwrite_ctor_impl;

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: hardening_cache CASE\n");
        return 2;
    }
    if (strcmp(argv[1], "callback_overwrite") != 0) {
        fprintf(stderr, "hardening_cache: unknown case %s\n", argv[1]);
        return 2;
    }
    /* No magazines: every allocation reaches the slab layer and constructs. */
    uslab_cache_t *c =
        uslab_cache_create("hardening", 64, 0, ctor, NULL, NULL, NULL, USLAB_CACHE_NOMAGAZINE);
    if (!c) {
        fprintf(stderr, "hardening_cache: no cache\n");
        return 2;
    }
    void *o = uslab_cache_alloc(c);
    if (!o || ctor_calls != 1) {
        fprintf(stderr, "hardening_cache: the constructor did not run\n");
        return 2;
    }
    uslab_cache_free(c, o);

    overwrite_ctor(c, evil_ptr);
    void *volatile p = uslab_cache_alloc(c);
    fprintf(stderr, "hardening_cache: overwritten constructor pointer not caught (%p)\n", p);
    return 0;
}
