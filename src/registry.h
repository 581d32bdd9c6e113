/* SPDX-License-Identifier: MIT */
/*
 * registry.h - the registry layer (rank 6, registry.c; docs/design.md §1): the cache table
 * (id -> cache), pinned walks over it, the cache locks at fork.
 */
#ifndef USLAB_REGISTRY_H
#define USLAB_REGISTRY_H

#include "base.h"
#include "descriptor.h"

#pragma GCC visibility push(hidden)

/* The table; read without the lock only by paths that hold a pin or a page-map entry of
 * the cache (a live slab keeps its cache registered). */
extern struct uslab_cache *usi_caches[USI_MAX_IDS];
/* Gives c the lowest free id in [lo, hi] and publishes it; -1 (ENOMEM) if none is free. */
int usi_registry_add(struct uslab_cache *c, unsigned lo, unsigned hi);
/* Marks c as being destroyed, so that no walk that runs callbacks (a purger pass,
 * uslab_reap) pins it from now on, then waits for those that do: destroy then flushes
 * every thread's magazines with no such walk freeing into its own meanwhile. */
void usi_registry_close(struct uslab_cache *c);
/* Unpublishes c, then waits until no iterator holds a pin on it. The caller then owns c. */
void usi_registry_remove(struct uslab_cache *c);
/* Whether c is the cache its id names (a relaxed read): not once it was destroyed, its
 * descriptor kept back for a while (cache.c) so that a late call on it is caught. */
static inline int usi_registry_names(const struct uslab_cache *c)
{
    return c->id < USI_MAX_IDS && __atomic_load_n(&usi_caches[c->id], __ATOMIC_RELAXED) == c;
}
/* Calls fn for every registered cache, in id order, with NO lock held during the call: the
 * cache is pinned (usi_registry_remove waits for it), so fn may run callbacks, take
 * application locks and call any uslab function but destroying that very cache. */
void usi_registry_for_each(void (*fn)(struct uslab_cache *c, void *arg), void *arg);
/* The same walk for fn that runs no callback and takes only cache locks and the thread
 * caches' registry lock: it may be made holding a lock outside the registry's order (the
 * fork child's handler, design §6). */
void usi_registry_read_each(void (*fn)(struct uslab_cache *c, void *arg), void *arg);
/* A walk that never waits, for the reports at exit (the leak report, USLAB_STATS), which
 * may run in a signal handler that interrupted this thread holding any uslab lock (an exit
 * from the handler): the registry lock is tried (usi_trylock_for) and, if taken, held
 * across the whole walk instead of a pin per cache, so there is no unpin that could find
 * the lock busy. fn runs under the registry lock: no callback; the thread caches' lock and
 * the cache locks only tried. 0, or -1 (the lock was busy, nothing walked). */
int usi_registry_try_each(void (*fn)(struct uslab_cache *c, void *arg), void *arg, unsigned ms);
/* How many registered caches have a reclaim callback (a relaxed read, no lock): while any
 * does, the purger watches memory pressure under USLAB_RETURN=pressure|both (design §3). */
unsigned usi_registry_reclaimers(void);
/* The registry lock then every cache lock in id order (fork), and back. */
void usi_registry_prefork(void);
void usi_registry_prefork_caches(void);
void usi_registry_postfork(int child);

#pragma GCC visibility pop

#endif
