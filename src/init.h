/* SPDX-License-Identifier: MIT */
/*
 * init.h - the init layer (rank 17, init.c; docs/design.md §1): one-time initialisation,
 * setting up cache descriptors, fork handlers.
 */
#ifndef USLAB_INIT_H
#define USLAB_INIT_H

#include "base.h"
#include "descriptor.h"
#include "sizeclass.h"
#include "uslab.h"

#include <stddef.h>

#pragma GCC visibility push(hidden)

extern int usi_initialized; /* 0: not yet, 1: ready, -1: slabs disabled (init.c) */
/* Initialises everything on first use; returns 0, or -1 when slabs are disabled (no room
 * for the reservation), leaving errno as it was: callers that fail set it. */
int usi_init_slow(void);
static inline int usi_ensure_init(void)
{
    if (USI_LIKELY(__atomic_load_n(&usi_initialized, __ATOMIC_ACQUIRE) > 0))
        return 0;
    return usi_init_slow();
}
/* Sets up and registers a cache descriptor: slab side, magazines, an id in [lo, hi], its
 * pair. Returns 0, or -1 with errno. */
int usi_init_cache(struct uslab_cache *c, const char *name, size_t size, size_t align,
                   uslab_ctor_fn ctor, uslab_dtor_fn dtor, uslab_reclaim_fn reclaim, void *arg,
                   unsigned flags, unsigned lo, unsigned hi);
/* The internal cache every descriptor but its own comes from: user caches' and the malloc
 * classes'. */
extern struct uslab_cache usi_descriptor_cache;
/* Sets up malloc class `id` (1..usi_nclasses) at its first allocation (design §7): 0 when
 * it is ready, -1 when it cannot be now (a signal handler interrupted its own thread's
 * set-up of a class, or no descriptor could be had: the caller falls back to the system
 * allocator). */
int usi_class_setup(unsigned id);
/* The descriptor of malloc class `id`, set up if it was not yet; NULL as above. */
static inline struct uslab_cache *usi_class_cache(unsigned id)
{
    struct uslab_cache *c = __atomic_load_n(&usi_class_caches[id], __ATOMIC_ACQUIRE);
    if (USI_LIKELY(c != NULL))
        return c;
    return usi_class_setup(id) == 0 ? usi_class_caches[id] : NULL;
}

#pragma GCC visibility pop

#endif
