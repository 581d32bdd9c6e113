/* SPDX-License-Identifier: MIT */
/*
 * uslab.h - the public interface of uslab, a user-space slab allocator.
 *
 * Two faces:
 *  1. Object caches (Bonwick, "The Slab Allocator", USENIX 1994): a cache hands out
 *     objects of one size and keeps them *constructed* between uses.
 *  2. The malloc family (uslab_malloc, ...), built on one object cache per size class.
 *     libuslab-preload.so exports the same functions under the standard names (malloc,
 *     free, ..., and C++ operator new/delete) for LD_PRELOAD or linking.
 *
 * Every function is thread-safe unless its documentation says otherwise.
 *
 * THE CONSTRUCTED-STATE CONTRACT
 *
 * An object of a cache is in one of three places: in its slab (raw memory, unconstructed),
 * cached by uslab (constructed, in a per-thread or shared magazine), or with you
 * (constructed, allocated).
 *  - The constructor runs when an object leaves its slab to serve an allocation. It does
 *    not run again while the object stays cached: uslab_cache_alloc may hand you an object
 *    that a previous user freed, in the state that user left it. Free objects in the state
 *    the constructor made them (e.g. a mutex unlocked, a list empty).
 *  - The destructor runs when a cached object goes back to its slab: when the cache is
 *    reaped (uslab_cache_reap, uslab_reap) or destroyed, or when cached objects went unused
 *    for a whole purge interval (the working set shrank: then possibly on uslab's
 *    background purger thread, or in the cache's next uslab_cache_alloc). A cache keeps
 *    every object freed to it while the program keeps using that many. It never runs on
 *    an object you hold.
 *  - A constructor returning non-zero fails the allocation that needed the object:
 *    uslab_cache_alloc returns NULL with errno as the constructor left it (ENOMEM if it
 *    left errno at 0), and the object goes back to its slab without its destructor.
 *  - The reclaim callback runs when the cache needs a new slab and cannot get one, after
 *    uslab gave back the empty slabs of every other cache: free objects you can spare (to
 *    any cache) and uslab, having given back the slabs that left empty, tries once more. An
 *    allocation that fails inside a reclaim callback calls no reclaim callback again. Under
 *    USLAB_RETURN=pressure or both it also runs when the kernel reports memory pressure:
 *    on uslab's purger thread, or, in a process without it, in the cache's next
 *    uslab_cache_alloc that misses the thread's magazines.
 *  - Constructors, destructors and reclaim callbacks run without uslab locks held; they
 *    may allocate and free (also from their own cache, for the constructor via other
 *    objects), but must not create or destroy caches: destroying their own cache is
 *    reported, and aborts.
 */
#ifndef USLAB_H
#define USLAB_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define USLAB_API __attribute__((visibility("default")))
#else
#define USLAB_API
#endif

#define USLAB_VERSION_MAJOR 0
#define USLAB_VERSION_MINOR 1

/* ---- object caches ---------------------------------------------------------------- */

typedef struct uslab_cache uslab_cache_t;

/** Constructor: make `obj` ready for use. Return 0, or non-zero to fail the allocation. */
typedef int (*uslab_ctor_fn)(void *obj, void *arg);
/** Destructor: undo the constructor before the memory goes back to its slab. */
typedef void (*uslab_dtor_fn)(void *obj, void *arg);
/** Reclaim callback: the cache cannot grow, or the system is short of memory; give back
 * what you can. */
typedef void (*uslab_reclaim_fn)(void *arg);

/* Flags for uslab_cache_create. */
#define USLAB_CACHE_NOMAGAZINE                                                                     \
    0x1u                          /* no per-thread caching: every alloc constructs and every       \
                                   * free destructs (as libumem's UMC_NOMAGAZINE) */
#define USLAB_CACHE_NOCOLOUR 0x2u /* every slab starts its objects at the same offset */

/**
 * uslab_cache_create - create a cache of objects of one size.
 * @name:    shown in reports and statistics; copied (at most 31 bytes kept). May be NULL.
 * @size:    object size in bytes, 1 .. 1 MiB.
 * @align:   object alignment: 0 (16 for sizes >= 16, else 8) or a power of two up to 4096.
 *           Every object returned is aligned to it.
 * @ctor, @dtor, @reclaim: optional (NULL); see the constructed-state contract above.
 * @arg:     passed to ctor, dtor and reclaim.
 * @flags:   0 or USLAB_CACHE_* flags.
 *
 * Returns the cache, or NULL with errno EINVAL (bad size, alignment or flags) or ENOMEM.
 * Objects are laid out in slabs with no per-object header; successive slabs start their
 * objects at different offsets (colouring) when the slab has room to spare.
 */
USLAB_API uslab_cache_t *uslab_cache_create(const char *name, size_t size, size_t align,
                                            uslab_ctor_fn ctor, uslab_dtor_fn dtor,
                                            uslab_reclaim_fn reclaim, void *arg, unsigned flags);

/**
 * uslab_cache_alloc - a constructed object of @cache, or NULL with errno set (ENOMEM, or
 * what a failing constructor set). The common case takes no lock: it pops an object from
 * the calling thread's magazine.
 */
USLAB_API void *uslab_cache_alloc(uslab_cache_t *cache);

/**
 * uslab_cache_free - give @obj back to @cache, in its constructed state. NULL is ignored.
 * @obj must come from uslab_cache_alloc/uslab_cache_alloc_bulk of the same cache and not
 * be freed twice. Freeing to the wrong cache, or a pointer outside every slab of uslab,
 * prints a message on stderr and aborts at once. A double free, or a pointer into the
 * middle of one of the cache's objects, is reported (and aborts) when the object returns
 * to its slab (a magazine flush, reap, destroy); until then the cache may hand it out
 * again. USLAB_DEBUG=F (or any letter) on the cache catches both at the bad call. Any
 * thread may free an object allocated by any other thread.
 */
USLAB_API void uslab_cache_free(uslab_cache_t *cache, void *obj);

/**
 * uslab_cache_alloc_bulk - allocate @n objects into @objs, all or nothing.
 * Returns @n, or 0 with errno set and nothing allocated (objects taken before the failure
 * are given back; EINVAL for a NULL @objs with @n > 0).
 */
USLAB_API size_t uslab_cache_alloc_bulk(uslab_cache_t *cache, size_t n, void **objs);

/** uslab_cache_free_bulk - uslab_cache_free of each of @objs[0 .. @n). A NULL @objs with
 * @n > 0 is reported and aborts. */
USLAB_API void uslab_cache_free_bulk(uslab_cache_t *cache, size_t n, void **objs);

/**
 * uslab_cache_reap - give back what @cache holds but does not need: the calling thread's
 * and the shared magazines are destructed into their slabs, and every empty slab is
 * returned to the operating system. Other threads' own magazines are left alone (they
 * return to the cache when those threads exit), and so are objects another thread (a
 * purger pass) is destructing at that moment: uslab_cache_stats counts them as cached
 * until its destructor calls return. Returns the bytes of slabs given back.
 * The process's live statistics page (`uslab stats PID`, `uslab top PID`), where it has
 * one, is brought up to date at once (see USLAB_LIVE).
 */
USLAB_API size_t uslab_cache_reap(uslab_cache_t *cache);

/**
 * uslab_cache_destroy - destroy @cache: every cached object is destructed and all memory
 * returned. Every object must have been freed first; destroying a cache with live objects
 * prints a message and aborts (with USLAB_DEBUG=U on the cache, after listing up to 8 of
 * them with their allocation stacks). No thread may use the cache during or after the call.
 * NULL is ignored.
 *
 * Handles: every uslab_cache_* call but uslab_cache_alloc and uslab_cache_free reports a
 * handle that is not a live cache (NULL, destroyed already, or not from
 * uslab_cache_create) and aborts. Those two do not check what is not a cache at all (NULL
 * crashes there, and so may any other pointer); they report a destroyed handle. A
 * destroyed handle is known as such until 64 more caches have been destroyed or
 * uslab_reap runs; after that a new cache may have its memory, and the old handle names
 * it.
 */
USLAB_API void uslab_cache_destroy(uslab_cache_t *cache);

/**
 * uslab_profile_write - under USLAB_PROFILE (`uslab profile`), write the request sizes
 * counted so far to the profile file now; the preload library does it at exit. `uslab
 * profile` preloads a small library (libuslab-profile.so) that calls it before _exit, exec,
 * daemon and a seccomp filter; a program that leaves without running destructors may call
 * it itself. Nothing without USLAB_PROFILE, or outside the preload library.
 */
USLAB_API void uslab_profile_write(void);

/** uslab_reap - uslab_cache_reap of every cache, malloc's size classes included. Returns
 * the bytes given back; the live statistics page is brought up to date at once. Runs
 * destructors while holding the cache list lock: it must not be called from a constructor
 * or destructor. */
USLAB_API size_t uslab_reap(void);

/** The name given at creation, and the object size asked for. */
USLAB_API const char *uslab_cache_name(const uslab_cache_t *cache);
USLAB_API size_t uslab_cache_object_size(const uslab_cache_t *cache);

/* ---- statistics ----------------------------------------------------------------------- */

/** A snapshot of one cache. Objects in magazines are counted as cached, not active. */
struct uslab_cache_stats {
    const char *name;
    size_t object_size; /* as created */
    size_t slab_size;   /* bytes per slab */
    size_t objects_per_slab;
    size_t slabs; /* slabs the cache holds (partial + full + empty) */
    size_t partial_slabs;
    size_t empty_slabs;    /* kept for reuse or awaiting the purge delay */
    size_t active_objects; /* allocated and not freed */
    size_t cached_objects; /* free, constructed, in thread or depot magazines */
    size_t total_objects;  /* slabs * objects_per_slab: the room in its slabs */
};

/** uslab_cache_stats - fill @out for @cache. Returns 0 (-1 and EINVAL for a NULL @out).
 * Thread-safe; other threads'
 * magazines are read without stopping them, so the split between active and cached is a
 * snapshot. */
USLAB_API int uslab_cache_stats(const uslab_cache_t *cache, struct uslab_cache_stats *out);

#define USLAB_STATS_TABLE 0 /* slabinfo-style text table */
#define USLAB_STATS_JSON  1

/**
 * uslab_stats_print - print every cache in use (malloc classes as "malloc-<size>") to @out.
 * TABLE columns, as Linux's slabinfo: Name, Objects (active), Objsize, Space (bytes of
 * slabs), Resident (an estimate: the pages of its slabs that objects have been in),
 * Slabs/Part/Cpu (slabs, partial slabs, objects cached in thread magazines), O/S
 * (objects per slab), %Fr (free share of the slabs' objects), %Ef (active bytes over slab
 * bytes), Flg (USLAB_DEBUG letters). JSON has the same and more fields (also the
 * cumulative slab_takes, slab_puts, depot_in and depot_out). Control characters of a
 * cache's name print as '?' in the table (escaped in JSON). Returns 0, or -1 (errno EINVAL
 * for a NULL @out or another @format, ENOMEM without memory for the snapshots).
 * USLAB_STATS=1 (table) or USLAB_STATS=json prints this on stderr at exit; `uslab stats
 * PID` prints the same for a running process.
 */
USLAB_API int uslab_stats_print(FILE *out, int format);

/* ---- the malloc family -------------------------------------------------------------- */
/*
 * Same contracts as the C and POSIX functions of the same name without the prefix, with
 * glibc's choices where those leave room: malloc(0) returns a unique pointer; realloc(p, 0)
 * frees p and returns NULL; errno is ENOMEM on every allocation failure. Sizes up to
 * 32 KiB come from slabs, sizes up to the largest class (USLAB_MAX_SLAB_SIZE, default 256
 * KiB) each from a span of its own; an aligned block takes the power-of-two class of at
 * least its size and alignment (a medium one above a page), where there is one. Larger
 * sizes and alignments, and a block that uslab_realloc grows past 8 KiB, come from
 * glibc's allocator. Every block of 16 bytes or more is 16-byte aligned. uslab_free and
 * uslab_realloc accept blocks from either source, and report (then abort) on a pointer
 * that belongs to neither or to an object cache.
 */
USLAB_API void *uslab_malloc(size_t size);
USLAB_API void uslab_free(void *ptr);
USLAB_API void *uslab_calloc(size_t n, size_t size);   /* overflow: NULL, ENOMEM */
USLAB_API void *uslab_realloc(void *ptr, size_t size); /* keeps the block in place
                                                        * while its class fits */
USLAB_API void *uslab_reallocarray(void *ptr, size_t n, size_t size);
USLAB_API void *uslab_aligned_alloc(size_t align, size_t size); /* as memalign (glibc 2.36) */
USLAB_API int
uslab_posix_memalign(void **out, size_t align,
                     size_t size);                         /* EINVAL unless
                                                            * align is a power of two multiple of sizeof(void *) */
USLAB_API void *uslab_memalign(size_t align, size_t size); /* align rounded up to pow2 */
USLAB_API void *uslab_valloc(size_t size);                 /* page aligned */
USLAB_API void *uslab_pvalloc(size_t size);                /* page aligned, size rounded
                                                            * up to pages */
USLAB_API size_t uslab_malloc_usable_size(void *ptr);      /* exact, 0 for NULL */

/*
 * ENVIRONMENT: USLAB_* variables, read once at the first allocation; docs/reference.md §1
 * lists every one with its default and range (`uslab settings` prints the same table).
 */

#ifdef __cplusplus
}
#endif

#endif
