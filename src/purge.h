/* SPDX-License-Identifier: MIT */
/*
 * purge.h - the purger layer (rank 11, purge.c and pressure.c; docs/design.md §1): the
 * passes that give idle memory back, run on slow paths, at thread exits or on the purger
 * thread (design §3, §4), and the kernel's memory-pressure signals.
 */
#ifndef USLAB_PURGE_H
#define USLAB_PURGE_H

#include "base.h"
#include "os.h"

#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

/* How a pass runs (bits): */
#define USI_PASS_USER                                                                              \
    1u /* it may run user code: destructors, reclaim callbacks (purger                             \
        * thread); not inline, on a slow path of a thread that may hold                            \
        * its own locks */
#define USI_PASS_URGENT                                                                            \
    2u /* memory pressure: give back everything that is not in a                                   \
        * thread's own magazines, at once */
#define USI_PASS_SURPLUS                                                                           \
    4u /* new slabs while others are kept (usi_purge_surplus): the depots'                         \
        * magazines and every empty slab beyond the reserves, idle or not */
#define USI_PASS_STARVED                                                                           \
    8u /* a cache's slabs could not grow (usi_purge_starved): every empty                          \
        * slab, and the depots of caches without a destructor, at once */
#define USI_PASS_SHED                                                                              \
    32u /* the depots of caches without callbacks go back to their slabs                           \
         * (a thread's exit leaves one thread, usi_purge_thread_exit) */
#define USI_PASS_REAP                                                                              \
    16u /* half the idle time has passed since the last reap: the depots'                          \
         * working-set reap (design §4) runs */
#define USI_PASS_EXIT                                                                              \
    64u /* a thread's exit: empty slabs go back, idle or not, until                                \
         * usi_slab_surplus_bytes is within USI_SLAB_HEADROOM; what stays waits                    \
         * for the delay */
/* The pass the purger runs each tick at now_ms: gives back what has been idle for idle_ms
 * (times each cache's purge multiplier); returns whether anything remains to be given back
 * later. Set once at
 * initialisation (init.c sets reclaim.c's usi_reclaim_pass). */
void usi_purge_set_pass(int (*pass)(uint64_t now_ms, uint64_t idle_ms, unsigned how));
/* Called without locks when a cache has empty slabs beyond its reserve: starts the purger
 * thread (once, where USLAB_PURGER allows it) or wakes it, or else schedules an inline
 * pass. Cheap when the thread is already awake. */
void usi_purge_kick(void);
/* New slabs are being made while other caches keep more than USI_SLAB_SURPLUS_MAX of empty
 * slabs: the next pass, due at once (the caller's slow path runs it inline), releases every
 * empty slab beyond the reserves, however recently emptied (design §3, "Across classes"). */
void usi_purge_surplus(void);
/* A cache's slabs could not grow (the reservation is full, or the kernel refused): runs a
 * pass at once, on this thread, that gives back every empty slab of every cache and the
 * depots' objects of caches without a destructor (no user code runs), so that the caller
 * can try again (design §3, "When the slabs cannot grow"). Nothing, and 0, when there is
 * nothing of the kind (usi_slab_surplus_bytes is 0), when another pass is running (maybe
 * this thread's own, whose destructor allocates), when this thread holds a uslab lock
 * (a signal handler), on a signal stack, or under strict seccomp mode; else 1. No lock
 * held by the caller. */
int usi_purge_starved(void);
/* A thread's exit, its magazines flushed (tcache.c; no lock held): if
 * usi_slab_surplus_bytes is beyond USI_SLAB_HEADROOM, empty slabs beyond the reserves go
 * back until it is within (USI_PASS_EXIT), and when `last` (at most one thread with a
 * cache is left) the depots of caches without callbacks first; glibc's free memory if it freed
 * large blocks; else a pass that is due runs (design §3). */
void usi_purge_thread_exit(int last);
/* A cache with a reclaim callback was registered: under USLAB_RETURN=pressure|both, kicks
 * the purger, which from then on runs passes (and reads the pressure) every tick while such
 * a cache exists, pending or not (design §3). Nothing under `delay`. */
void usi_purge_watch(void);
void usi_purge_postfork_child(void);
/* The calling thread enters (+1) or leaves (-1) a section where its kicks never start the
 * purger thread (design §3): a magazine exchange (tcache.c: pthread_create's own mallocs
 * would nest into it). Inline: two calls an exchange. */
extern __thread int usi_purge_tls_no_start __attribute__((tls_model("initial-exec")));
static inline void usi_purge_no_start(int delta)
{
    usi_purge_tls_no_start += delta;
}
/* Large blocks (design §8): init.c says whether glibc may be tuned to keep their memory
 * (usi_sys_may_tune_for_large). From then on uslab keeps glibc's dynamic mmap threshold
 * itself, raised at a large malloc up to twice it, or any once tuned
 * (usi_purge_large_allocated), as glibc raises it at the free of an mmapped chunk
 * (usi_purge_large_freeing); the 6th large block held at once or the 64th large free tunes
 * glibc (a higher trim threshold; malloc.c reports each free of a block of glibc's with
 * usi_purge_large_freed), and from then on each such free moves a count that the passes
 * watch, and a pass trims glibc once they have seen it still for the purge delay.
 * usi_purge_large_user_tunes: the program is about to set a threshold of glibc's with mallopt
 * (override.c); uslab tunes nothing from then on, and a tuning in flight ends first, so that the
 * program's call wins. */
void usi_purge_track_large(int may_tune);
/* Before glibc frees block p: glibc's dynamic mmap threshold, which uslab's first mallopt
 * turns off in glibc, kept by uslab instead (purge.c). */
void usi_purge_large_freeing(const void *p);
void usi_purge_large_freed(void);
/* A large block of glibc's resized by glibc's realloc (moved, or shrunk in place): once
 * glibc is tuned, the idle trim is due as after a free, for the old block or its tail
 * (session 17's memory-return audit: 200 builders grown to 1 MB and shrunk to 100 bytes
 * kept 316 MB, glibc 35). Before tuning it counts for nothing. */
void usi_purge_large_resized(void);
/* A large malloc of `size` bytes (malloc.c), before glibc's: counts towards the tuning,
 * raises the mmap threshold above it (untuned: where it is at most twice it), and makes the
 * thread's arena sentinel once glibc is tuned or trimmed (purge.c); returns 1 when it made
 * one: malloc.c then gives the thread a thread cache (usi_tcache_join), whose exit gives
 * back what the thread freed (usi_purge_thread_exit). */
int usi_purge_large_allocated(size_t size);
void usi_purge_large_user_tunes(void);
/* glibc's free memory back (malloc_trim(pad)), its threads' arenas included where uslab
 * tuned glibc (the arenas' sentinels, purge.c); glibc's malloc_trim result. No lock held. */
int usi_purge_trim_glibc(size_t pad);
/* When an inline pass is due (monotonic ms), 0 when none is. */
extern uint64_t usi_purge_due_ms;
void usi_purge_poll_due(void);
/* Called by slow paths and thread exits with no uslab lock held: runs the inline pass once
 * it is due. One load when nothing is scheduled. Not in a signal handler that interrupted
 * its thread while it held a uslab lock: the work waits for a later slow path. */
static inline void usi_purge_poll(void)
{
    if (USI_UNLIKELY(usi_lock_depth != 0))
        return;
    if (USI_UNLIKELY(__atomic_load_n(&usi_purge_due_ms, __ATOMIC_RELAXED) != 0))
        usi_purge_poll_due();
}

/* pressure.c (rank 11, with the purger): 1 if the kernel reported memory pressure since
 * the previous call (PSI stall time, cgroup events, memory.high nearly reached; design
 * §3), else 0. The first call chooses the source. Called by passes only, without locks. */
int usi_pressure_now(void);
/* The source usi_pressure_now reads, chosen now if not yet: 1 a cgroup v2 directory, 2 a
 * PSI file (*path its name, if path), -1 none (*path NULL). */
int usi_pressure_source(const char **path);
/* Tests only, while no pass reads pressure (USLAB_RETURN=delay): forgets the source and its
 * readings; the next choice looks for /proc/self/cgroup, /proc/self/mountinfo, the cgroup
 * directories it names (or /sys/fs/cgroup/...) and /proc/pressure/memory under root (NULL
 * or "": under "/"). */
void usi_pressure_reset(const char *root);

#pragma GCC visibility pop

#endif
