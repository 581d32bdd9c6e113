/* SPDX-License-Identifier: MIT */
/*
 * reclaim.h - the reclaim layer (rank 15, reclaim.c; docs/design.md §1): giving memory
 * back: the purge pass, reaping one cache or all.
 */
#ifndef USLAB_RECLAIM_H
#define USLAB_RECLAIM_H

#include "descriptor.h"

#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

/* One purger pass over every cache: reap unused depot magazines, purge idle empty slabs.
 * Returns whether anything remains to be given back later. */
int usi_reclaim_pass(uint64_t now_ms, uint64_t idle_ms, unsigned how);
/* The objects cached in the calling thread's magazines of c (every thread's: every_thread,
 * uslab_cache_destroy, which also waits for flushes in flight) and in its depot back to
 * their slabs, destructed; again while the destructors freed objects of c into them. */
void usi_reclaim_return(struct uslab_cache *c, int every_thread);
/* uslab_cache_reap: usi_reclaim_return of this thread's magazines, then every empty slab to
 * the system; returns the bytes released. */
size_t usi_reclaim_cache(struct uslab_cache *c);
/* uslab_reap: usi_reclaim_cache of every cache. */
size_t usi_reclaim_all(void);
/* malloc_trim (preload library): usi_reclaim_cache of the malloc classes only (no user
 * cache's destructor or reclaim callback runs); returns the bytes released. */
size_t usi_reclaim_classes(void);

#pragma GCC visibility pop

#endif
