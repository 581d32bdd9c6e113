/* SPDX-License-Identifier: MIT */
/*
 * base.h - what every layer of uslab uses (rank 0, below the os layer; docs/design.md §1):
 * branch hints and attributes, a 64-bit mix, and the compile-time geometry of pages,
 * units, ids and magazines. No declaration of any function of a .c file.
 *
 * Each layer has its header beside its .c file (os.h, report.h, ... tcache.h), holding
 * its declarations and its inline functions; the rank table of docs/design.md §1 lists
 * them. A .c file includes the headers it uses and a header only headers of its own or a
 * lower rank, so the include graph is the layer order; tools/check_layers.py checks it
 * (make layers), with the calls between the object files.
 *
 * Everything declared in these headers is internal to the library: each wraps its
 * declarations in visibility push(hidden), so the compiler addresses globals directly
 * (rip-relative), not through the GOT.
 *
 * Naming: public symbols are uslab_*, cross-file internal symbols usi_<module>_<verb>,
 * file-local helpers are static.
 */
#ifndef USLAB_BASE_H
#define USLAB_BASE_H

#include <stddef.h>
#include <stdint.h>

/* ThreadSanitizer builds: the asm orderings and uslab's own lock (usi_mutex) are invisible to
 * it; they take atomics and a pthread mutex instead. */
#if defined(__SANITIZE_THREAD__)
#define USI_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define USI_TSAN 1
#endif
#endif
#ifndef USI_TSAN
#define USI_TSAN 0
#endif
#if USI_TSAN
#include <pthread.h>
#endif

#pragma GCC visibility push(hidden)

#define USI_LIKELY(x)   __builtin_expect(!!(x), 1)
#define USI_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define USI_NOINLINE    __attribute__((noinline))
#define USI_COLD        __attribute__((cold, noinline))
#define USI_NORETURN    __attribute__((noreturn))

/* Large zeroed arrays a process seldom touches (the cache-id table, the huge-page chunks, the
 * report buffers): in x86-64's large-data section, which the linker places after every other
 * zeroed variable, so that the small ones a process's start touches share a few pages (a
 * start's page faults 94-96 -> 89-91: docs/benchmarks.md, "A process's start: its mappings placed,
 * not cut"). gcc only: clang 14 would store the section's zeros in the file. */
#if defined(__x86_64__) && !defined(__clang__)
#define USI_COLD_ZEROED __attribute__((section(".lbss.usi")))
#else
#define USI_COLD_ZEROED
#endif

/* splitmix64's finaliser (Steele, Lea & Flood 2014): a bijective mix of 64 bits, for keys
 * derived from AT_RANDOM (os layer) and keyed hashes (objects.c). */
static inline uint64_t usi_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ------------------------------------------------------------------------------------ */
/* Compile-time geometry (docs/design.md §2)                                              */
/* ------------------------------------------------------------------------------------ */

/* A cache line: what two threads' stores must not share (design §3, "Fillers"). */
#define USI_CACHE_LINE 64

/* The page map has one entry per unit of 64 KiB: the smallest slab. Slabs are 64 KiB << k
 * bytes (k < USI_SPAN_ORDERS) and aligned to their own size, so a slab covers whole units. */
#define USI_UNIT_SHIFT  16
#define USI_UNIT_SIZE   ((size_t)1 << USI_UNIT_SHIFT)
#define USI_SPAN_ORDERS 8 /* 64 KiB .. 8 MiB */
#define USI_PAGE_SIZE   4096u

/* A page-map entry is (slab address | cache id); 0 means "no live slab here". */
#define USI_ID_BITS 16
#define USI_ID_MASK ((uintptr_t)0xffff)
#define USI_MAX_IDS 65536 /* id 0 is never used, so a non-zero entry always has an id */
/* Ids 1..USI_RESERVED_IDS belong to the malloc front end's size classes; other caches get
 * ids above. Every thread cache, the static sentinel included, has pairs for all of them,
 * so a unit tag (a pair offset, §8) never indexes past a thread cache. */
#define USI_RESERVED_IDS 96

/* Largest object a user cache may hold; its slab holds at least one object. */
#define USI_CACHE_MAX_OBJECT ((size_t)1 << 20)

/* malloc sizes up to this are looked up in one table (docs/design.md §8). */
#define USI_SMALL_MAX 1024

/* Magazines hold at most this many object pointers (docs/design.md §4): 32 KiB of
 * objects, 256 of 128 bytes or less. */
#define USI_MAG_MAX 256
/* Magazines are objects of four internal caches, of up to USI_MAG_START_MAX, 16, 64 and
 * USI_MAG_MAX slots (depot.c, design §4). */
#define USI_MAG_TINY  16
#define USI_MAG_SMALL 64
/* A thread's first magazine of a cache holds at most this many bytes of objects (and 1 to
 * USI_MAG_START_MAX objects); each magazine it makes or trades for after that may hold
 * twice as many as the last, up to the cache's capacity (slow start, design §4). Past the
 * bound on thread caches (design §5) its magazines stay at that start capacity. */
#define USI_MAG_START_BYTES 256
#define USI_MAG_START_MAX   4
/* A depot's stacks of magazines, a lane each: a thread gives to and takes from its own lane
 * first, so that the blocks it freed come back to it, not to another core (design §4). */
#define USI_DEPOT_LANES 4

/* Every uslab lock (design §6; taken with os.h's usi_lock). A futex word: 0 free, 1 held,
 * 2 held and maybe waited for (Drepper, "Futexes Are Tricky", 2011, its mutex 2). All zero
 * (USI_MUTEX_INIT, fresh memory) is free. Under ThreadSanitizer a pthread mutex. */
#if USI_TSAN
typedef pthread_mutex_t usi_mutex;
#define USI_MUTEX_INIT PTHREAD_MUTEX_INITIALIZER
#else
typedef struct {
    int word;
} usi_mutex;
#define USI_MUTEX_INIT                                                                             \
    {                                                                                              \
        0                                                                                          \
    }
#endif

#pragma GCC visibility pop

#endif
