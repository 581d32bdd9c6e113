/* SPDX-License-Identifier: MIT */
/*
 * slab.h - the slab layer (rank 10, slab.c; docs/design.md §1): slabs of one object size,
 * their layout, their objects in the slab's bitmap, the partial/full/empty lists (design §3).
 */
#ifndef USLAB_SLAB_H
#define USLAB_SLAB_H

#include "base.h"
#include "descriptor.h"
#include "pages.h"

#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

/* The slab header, struct usi_slab, with its invariants, is in descriptor.h: the debug layer
 * reads it too. Its record in the pages layer's side array holds it: */
_Static_assert(sizeof(struct usi_slab) <= USI_SPAN_LINK_AT,
               "a slab header fits its record, below the span link");

/* The slab of a non-zero page-map entry: usi_pages_meta of its span, whose offset from
 * the unit-aligned base is whole units, so the id below a unit drops out of the shift. */
_Static_assert(USI_ID_MASK < USI_UNIT_SIZE, "a page-map entry's id is below its span's unit");
static inline struct usi_slab *usi_slab_of_entry(uintptr_t entry)
{
    return (struct usi_slab *)usi_pages_meta(entry);
}

/* free()'s double-free key (design §8, docs/security.md §2.2), set once by init.c before
 * the first slab exists, never 0: a malloc block in a magazine holds it in its second
 * word (free stores it; usi_slab_handout writes it into each object of a lattice cache
 * taken from its slabs), and malloc's pop clears it. Random, so that no data a program writes into
 * a block it holds looks like it but by chance; the same for every block, as glibc's tcache_key. */
extern uintptr_t usi_free_secret;
/* The free mark of a lattice cache (malloc classes): usi_slab_put writes it into the first
 * word of each object it takes back, and slab creation into each point of the lattice past
 * the slab's last object; usi_slab_handout clears it. malloc's pop refuses a block that
 * carries it: a block freed again after it went back to its slab. Invariant: an object of
 * a lattice cache that was handed out and is back in its slab holds it, until purged. A
 * sign-extended 32-bit immediate, so that the pop compares it without a load. */
#define USI_SLAB_FREE_MARK ((uintptr_t)-0x61c88647) /* 0xffffffff9e3779b9 */
/* Bytes of the empty slabs beyond their caches' reserves and of the objects in depots,
 * summed over every cache (relaxed atomic; the slab and depot layers
 * keep it under each cache's lock). A slab created while
 * it exceeds USI_SLAB_SURPLUS_MAX sets usi_slab_surplus_seen, which the objects layer
 * turns into a pass that releases them at once (design §3, "Across classes"). */
extern uint64_t usi_slab_surplus_bytes;
extern int usi_slab_surplus_seen;
#define USI_SLAB_SURPLUS_MAX ((uint64_t)16 << 20)
/* The headroom (design §3, "The headroom"): idle memory up to this much waits for a pass;
 * beyond it, an empty slab goes back in the put that emptied it, and a full magazine of a
 * cache without callbacks goes back to its slabs instead of the depot (depot.c). Not for a
 * cache whose purges were faulted back (purge_mult > 1): it keeps its memory for the
 * multiplied delay. */
#define USI_SLAB_HEADROOM ((uint64_t)8 << 20)
/* The process whose purger thread runs, 0 while none does (set by purge.c when it starts;
 * relaxed atomic). The thread gives empty slabs back after the
 * delay whether the program makes another call or not, so while it runs a slab emptied
 * beyond the headroom waits for the delay too, instead of going back in its put (design
 * §3, "The headroom"): a burst freed and allocated again within the delay faults nothing
 * back. Shedding stays: it keeps the depots and the threads' pairs from holding every slab
 * partly used. The process id rules out a child, which has no thread until its own
 * starts (and sets it): a fork child, or one made without the fork handlers (vfork, clone). */
extern int usi_slab_purger_pid;
int usi_slab_purger_runs(void);
/* Bytes of the objects that full magazines sent past their depots back to their slabs
 * since their caches last filled from them or drained (depot.c; design §4, "Depot"), and
 * idle memory as a shedding episode and a thread's exit see it: those objects, as they
 * counted in the depots, and usi_slab_surplus_bytes. */
extern uint64_t usi_slab_passed_bytes;
static inline uint64_t usi_slab_idle_bytes(void)
{
    return __atomic_load_n(&usi_slab_surplus_bytes, __ATOMIC_RELAXED) +
           __atomic_load_n(&usi_slab_passed_bytes, __ATOMIC_RELAXED);
}

/* usi_slab_surplus_bytes is beyond the headroom, and c's purges were not faulted back. */
static inline int usi_slab_over_headroom(const struct uslab_cache *c)
{
    return __atomic_load_n(&c->purge_mult, __ATOMIC_RELAXED) == 1 &&
           __atomic_load_n(&usi_slab_surplus_bytes, __ATOMIC_RELAXED) > USI_SLAB_HEADROOM;
}

/* The cap of a cache's purge multiplier, purge_mult (design §3, issue 12). */
#define USI_PURGE_MULT_MAX 16
/* The pattern of c cycles (it allocates again what it just gave back): its purge
 * multiplier goes to its cap, as after a refault (design §3). No lock needed. */
void usi_slab_keep_memory(struct uslab_cache *c);
/* Joins c to the span group of its slab size: caches of one group take each other's empty
 * slabs before they map a new span (design §3, "Span groups"). For every malloc class, at
 * its set-up, and every object cache without debugging, at its creation; c has no guard
 * pages and no empty slab. */
void usi_slab_share_spans(struct uslab_cache *c);
/* c leaves its span group, if in one: its destruction, with c->lock held and no empty slab
 * left. Waits for a walk of the group under way. */
void usi_slab_leave_spans(struct uslab_cache *c);
/* The fork handlers: the span groups' lock, taken after every cache lock (design §6). */
void usi_slab_prefork(void);
void usi_slab_postfork(int child);
/* Slab geometry of a cache, fixed at creation. */
void usi_slab_geometry(struct uslab_cache *c);
/*
 * The pages a take reached first in their slab (below its old bump and its written_low:
 * unwritten since the span was made or purged), where the taker writes every page it takes objects
 * on (a malloc class's handout, a constructor, uslab's own caches) and objects are a page or
 * smaller: the taker makes them present in one call a range once the lock is dropped
 * (usi_slab_populate), not a fault a page under its writes (design §3, "Fresh pages"). Invariant: n
 * <= USI_FRESH_MAX; range i is [start[i], start[i] + len[i]), page-aligned, in one slab, at least
 * USI_FRESH_MIN bytes. In a class past its first slab a range of fewer pages grows to USI_FRESH_MIN
 * downwards, the pages the next takes reach. A take that reaches fresh pages in more slabs leaves
 * the rest to fault, and so does a range of fewer pages elsewhere: the call holds the process's
 * mmap lock, which a fault does not (per-VMA locks), and 3,000 threads mapping their stacks waited
 * for it (`mt live` 0.23 -> 0.30 s).
 */
#define USI_FRESH_MAX 2
#define USI_FRESH_MIN ((uintptr_t)4 * USI_PAGE_SIZE)
struct usi_fresh_pages {
    uintptr_t start[USI_FRESH_MAX];
    size_t len[USI_FRESH_MAX];
    unsigned n;
    /* Asked for with USI_FRESH_ASK (NULL: not asked): the take's last object where none of
     * its bytes was ever written (numbered at or past its slab's bump before the take, below
     * the span's written_low, no debugging), else NULL: after a lattice cache's handout and
     * malloc's pop it reads as zero, and calloc need not clear it (design §8, "calloc"). */
    void *zero;
};
#define USI_FRESH_ASK ((void *)1)
/* Takes up to n raw (unconstructed) objects from the cache's slabs, growing if needed.
 * Returns how many it took; fewer than n only when no span could be had. Adds the pages it
 * reached first to *fresh (initialised by the caller, n = 0; NULL: not noted). `filler`: 0,
 * or the caller's usi_slab_filler() where the take fills its thread's magazine: such a take
 * skips the partial slabs another thread fills (design §3, "Fillers"). Caller holds
 * cache->lock. */
size_t usi_slab_take(struct uslab_cache *c, size_t n, void **objs, struct usi_fresh_pages *fresh,
                     unsigned filler);
/* The calling thread's filler number for usi_slab_take, taken at its first call and held
 * until usi_slab_filler_end: no two live threads hold the same one. 0 where all are taken
 * (a take for no filler). usi_slab_tls_filler: 0 before the first call, USI_FILLER_NONE
 * where the thread holds none. */
#define USI_FILLER_NONE 0xffffu
extern __thread uint16_t usi_slab_tls_filler __attribute__((tls_model("initial-exec")));
unsigned usi_slab_filler_claim(void);
static inline unsigned usi_slab_filler(void)
{
    unsigned f = usi_slab_tls_filler;
    if (USI_UNLIKELY(f == 0))
        return usi_slab_filler_claim();
    return f == USI_FILLER_NONE ? 0 : f;
}
/* The calling thread's exit: its filler number is free for the next thread (and it takes
 * none again). */
void usi_slab_filler_end(void);
/* A fork child: only the calling thread's filler number is held. */
void usi_slab_postfork_child(void);
/* Makes fresh's ranges present (usi_os_populate), on a thread whose filler number is at most
 * USI_POPULATE_THREADS or not taken yet; a thread past them leaves its fresh pages to fault. The
 * call holds the process's mmap lock: where more threads live at once than cores, a holder
 * preempted with it keeps the threads that map or unmap (their stacks, at creation and exit)
 * waiting (`mt live`, 3,000 threads: 0.84x the time without the calls of threads past the 8th;
 * design §3, "Fresh pages"). No lock held. */
#define USI_POPULATE_THREADS 8u
void usi_slab_populate(const struct usi_fresh_pages *fresh);
/* What a take of a lattice cache's objects writes into each (malloc's pop checks them:
 * no free mark, the key), once the taker owns them: after the cache lock is dropped, so
 * that a fresh slab's first touches fault outside it (3,000 live threads: 12% of `mt
 * live`'s time was such faults, under the lock every thread of the class waits for). */
void usi_slab_handout(size_t n, void *const *objs);
/* Returns raw objects to their slabs; checks each is a valid, allocated object of c and
 * reports misuse. Empty slabs beyond the reserve are unlinked onto *release, to be handed
 * to usi_slab_release after the lock is dropped. Returns the number of runs: objects that
 * follow one another in objs within one slab are a run (how scattered they were). Caller
 * holds cache->lock. */
size_t usi_slab_put(struct uslab_cache *c, size_t n, void *const *objs, struct usi_slab **release);
/* Unlinks every empty slab (keep = how many to keep) onto *release. Caller holds lock. */
size_t usi_slab_detach_empty(struct uslab_cache *c, size_t keep, struct usi_slab **release);
/* Unlinks empty slabs idle since before `before_ms`, keeping the `keep` most recent empty
 * slabs, onto *release; returns how many empty slabs remain beyond `keep`. Caller holds
 * the lock. */
size_t usi_slab_detach_idle(struct uslab_cache *c, size_t keep, uint64_t before_ms,
                            struct usi_slab **release);
/* Returns detached slabs of c to the pages layer; returns the bytes released. No lock
 * needed. */
size_t usi_slab_release(struct uslab_cache *c, struct usi_slab *list);
/* For free() of p, whose page-map entry e names a slab of c: the index of the object p
 * starts, or UINT32_MAX (an interior or stray pointer); *block is set to the start of the
 * object p falls in, or NULL. No lock: it reads constants of a live slab. */
uint32_t usi_slab_index_of(const struct uslab_cache *c, uintptr_t e, const void *p,
                           const void **block);
/* Whether object p of c (page-map entry e) is back in its slab (free). Caller holds the
 * cache lock. */
int usi_slab_holds(const struct uslab_cache *c, uintptr_t e, const void *p);
/* For realloc and malloc_usable_size of p in a debug cache c (no magazines: the slab's
 * map is exact): 0 when p is a live object; else reports it (usi_debug_report, which
 * returns only under USLAB_DEBUG_CONTINUE) and returns 1. Caller holds the cache lock. */
int usi_slab_debug_check_live(struct uslab_cache *c, const void *p, const char *fn);
/* Debug caches: every quarantined object back to its slab (under c->lock; emptied slabs as
 * usi_slab_put leaves them, `release` for those to release). */
void usi_slab_quarantine_drain(struct uslab_cache *c, struct usi_slab **release);
/* Checks every invariant of slab s of c (descriptor.h); returns NULL, or what is broken. Caller
 * holds cache->lock. O(objects). Used by tests and by USLAB_DEBUG=F. */
const char *usi_slab_check(const struct uslab_cache *c, const struct usi_slab *s);
/* A free of p to cache c that the page map refuses (entry = its page-map entry): reports
 * "not allocated by uslab" or "belongs to cache X" and aborts. */
USI_COLD USI_NORETURN void usi_slab_bad_pointer(const struct uslab_cache *c, const void *p,
                                                uintptr_t entry);

#pragma GCC visibility pop

#endif
