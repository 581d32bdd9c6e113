/* SPDX-License-Identifier: MIT */
/*
 * debug.h - the debug layer (rank 8, debug.c; docs/design.md §1): USLAB_DEBUG checks,
 * reports, the leak report, and the Valgrind client requests (design §9).
 */
#ifndef USLAB_DEBUG_H
#define USLAB_DEBUG_H

#include "base.h"
#include "descriptor.h"
#include "settings.h"

#include <stddef.h>

#pragma GCC visibility push(hidden)

/* The letters' bits USI_DEBUG_F, _Z, _P, _U, _T come from the letter table (settings.h).
 * Beside them, in a cache's `debug`: U asked by USLAB_DEBUG also records free stacks
 * (USI_DEBUG_FREED); U alone is USLAB_LEAKS's, whose report shows allocation stacks only, so
 * a free there unwinds nothing (a malloc/free pair under USLAB_LEAKS=1: 3,930 -> 2,636
 * instructions; docs/benchmarks.md, session 86). */
#define USI_DEBUG_FREED    0x100u
#define USI_CACHE_INTERNAL 0x8000u /* flag of uslab's own caches: never debugged */
/* Flag of the malloc classes: running out of slab memory leaves errno alone (malloc falls
 * back to the system allocator, and a successful malloc must not change errno). */
#define USI_CACHE_KEEP_ERRNO 0x4000u
/* Flag of the malloc classes: objects on the stride lattice, free()'s checks (§8). */
#define USI_CACHE_LATTICE 0x2000u

/* A malloc class of medium blocks (design §3, §8): one block a slab, aligned to its size;
 * small magazines (depot.c); no empty slab in reserve. */
static inline int usi_cache_medium(const struct uslab_cache *c)
{
    return (c->flags & USI_CACHE_LATTICE) && c->size > USI_MEDIUM;
}

/* Reads USLAB_DEBUG, USLAB_DEBUG_CONTINUE, USLAB_LEAKS (at initialisation). */
void usi_debug_read_options(void);
/* The debug letters for a cache of this name (0: none). */
unsigned usi_debug_flags_for(const char *name, unsigned cache_flags);
/* Lays out a debug cache's slot: red zones, link, state and tracking after the object;
 * sets obj_offset, tail_offset and stride. */
void usi_debug_layout(struct uslab_cache *c);
/* Around uslab's own use of the program's allocator on this thread (the purger thread's
 * creation): +1 before, -1 after; such blocks are left out of the leak report. */
void usi_debug_own_allocations(int delta);
/* Records the caller's stack for the hooks below; called before the cache lock is taken. */
void usi_debug_capture(void);
/* The same before objects of c go back to their slabs, where c records free stacks or a
 * check of c may report; else (USLAB_LEAKS's U alone) none, and a report there unwinds at
 * once. */
void usi_debug_capture_put(const struct uslab_cache *c);
/* Slab-layer hooks for debug caches, under cache->lock. */
void usi_debug_on_alloc(struct uslab_cache *c, struct usi_slab *s, char *slot);
void usi_debug_on_free(struct uslab_cache *c, struct usi_slab *s, char *slot);
/* Whether the debug cache's object in `slot` was freed (its state word says so): a
 * quarantined object keeps its bitmap bit (slab.c). */
int usi_debug_is_free(const struct uslab_cache *c, const char *slot);
/* A quarantined object leaves the quarantine for its slab: its red zones and poison are
 * checked (under cache->lock). */
void usi_debug_on_release(struct uslab_cache *c, struct usi_slab *s, char *slot);
/* A malloc block of a debug class was handed out for `size` bytes (the caller owns it, no
 * lock): under Z the rest of its class, [size, c->size), becomes red zone, checked on free,
 * and usi_debug_usable_size says `size`. Also after a realloc kept the block in place. */
void usi_debug_asked(struct uslab_cache *c, void *obj, size_t size);
size_t usi_debug_usable_size(const struct uslab_cache *c, const void *obj);
/* Prints a report in the kernel's form ("BUG <cache>: <what>", object dump, tracks, slab)
 * and aborts unless USLAB_DEBUG_CONTINUE=1. */
void usi_debug_report(struct uslab_cache *c, struct usi_slab *s, const void *obj, const char *what);
/* A cache destroyed with live objects (no lock held): under U, up to 8 of them with their
 * allocation stacks; else a line that says which setting lists them. */
void usi_debug_report_live(struct uslab_cache *c);
extern int usi_debug_enabled; /* some cache may have debugging */
/* An invalid pointer, reported in BUG form when debugging is on: always aborts. */
USI_NORETURN void usi_debug_bug(const char *cache, const char *what);
/* Blocks of the system allocator, tracked while debugging (usi_debug_enabled): recorded
 * with the caller's stack (no uslab lock held); looked up by free, realloc and
 * malloc_usable_size: 1 and *size for a live block (marked freed if `release`), -1 and
 * *size for a freed one, 0 for an address never recorded, 2 (unchecked) when called from a
 * signal handler that interrupted this thread's own use of the table (it must not wait for
 * itself), or for an unknown address once a block went untracked (no memory for the table).
 * Leak reports list live ones. */
void usi_debug_large_alloc(const void *p, size_t size);
int usi_debug_large_release(const void *p, int release, size_t *size);
/* The live recorded block of the system allocator that holds p (for a report: a scan), or
 * NULL; *size its size. */
const void *usi_debug_large_containing(const void *p, size_t *size);
/* The tracking table's lock across fork (taken first, design §6). */
void usi_debug_prefork(void);
void usi_debug_postfork(int child);

/* Valgrind client requests (USLAB_VALGRIND builds only; docs/design.md §9): an object is
 * marked allocated when it leaves uslab (HANDOUT) and freed when it comes back (TAKEBACK),
 * so memcheck reports uses after free, double frees and leaks of uslab's objects; internal
 * accesses to a freed object (free-list link, constructor, destructor, debug checks) are
 * bracketed by the other three. Without USLAB_VALGRIND they compile to nothing. */
#ifdef USLAB_VALGRIND
#include <valgrind/memcheck.h>
#define USI_VG_HANDOUT(c, p)   VALGRIND_MALLOCLIKE_BLOCK((p), (c)->size, 0, (c)->ctor != NULL)
#define USI_VG_TAKEBACK(p)     VALGRIND_FREELIKE_BLOCK((p), 0)
#define USI_VG_UNDEFINED(p, n) VALGRIND_MAKE_MEM_UNDEFINED((p), (n))
#define USI_VG_DEFINED(p, n)   VALGRIND_MAKE_MEM_DEFINED((p), (n))
#define USI_VG_NOACCESS(p, n)  VALGRIND_MAKE_MEM_NOACCESS((p), (n))
#else
#define USI_VG_HANDOUT(c, p)   ((void)0)
#define USI_VG_TAKEBACK(p)     ((void)0)
#define USI_VG_UNDEFINED(p, n) ((void)0)
#define USI_VG_DEFINED(p, n)   ((void)0)
#define USI_VG_NOACCESS(p, n)  ((void)0)
#endif

#pragma GCC visibility pop

#endif
