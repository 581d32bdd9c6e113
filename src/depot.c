/* SPDX-License-Identifier: MIT */
/*
 * depot.c - magazines and the per-cache depot (docs/design.md §4), after Bonwick & Adams,
 * "Magazines and Vmem" (USENIX 2001) §3.
 *
 * A magazine is an array of pointers to constructed objects. The depot of a cache keeps a
 * stack of full magazines and a stack of empty ones under cache->lock; threads trade whole
 * magazines with it, so the lock is taken once per magazine of objects, not per object.
 * The depot keeps every magazine given to it: what it holds is bounded by the working set,
 * not by a byte count. A periodic pass (reclaim.c) takes out the magazines that stayed in
 * the depot through a whole interval (Bonwick & Adams §3.6: depot_min_full and
 * depot_min_empty, the lowest counts seen since the last reap) and flushes them into their
 * slabs; no exchange on a program's free path ever destructs an object. No depot exchange
 * runs a callback. Beyond the headroom, a cache without callbacks sheds: its full
 * magazines go back to the slabs instead (usi_depot_sheds, design §4).
 *
 * Invariants (under cache->lock): depot_nfull/depot_nempty count the stacks of every lane;
 * depot_rounds is the sum of the full magazines' rounds; depot_min_full <= depot_nfull,
 * depot_min_empty <= depot_nempty and depot_min_surplus <= depot_nfull after every
 * exchange; depot_flushing counts magazines taken out to be flushed whose objects are not
 * back in their slabs yet (destroy waits for it to reach 0).
 */
#include "depot.h"
#include "base.h"
#include "debug.h"
#include "descriptor.h"
#include "objects.h"
#include "options.h"
#include "os.h"
#include "purge.h"
#include "registry.h"
#include "report.h"
#include "slab.h"
#include "uslab.h"

#include <errno.h>
#include <string.h>

struct usi_mag usi_mag_empty; /* rounds = capacity = 0: every fast path misses on it */

/* Magazines themselves are objects of internal caches without magazines, one per size:
 * up to USI_MAG_START_MAX slots (a thread's first ones, slow start), 16, 64 and
 * USI_MAG_MAX. None has
 * a callback, so making or freeing a magazine is safe in any state. A thread that uses a
 * class a little holds a magazine of 64 bytes for it, not 160 (3,000 live threads: 27 such
 * magazines each, issue 38). */
static const uint32_t mag_slots[] = {USI_MAG_START_MAX, USI_MAG_TINY, USI_MAG_SMALL, USI_MAG_MAX};
static const char *const mag_names[] = {"uslab-magazine-4", "uslab-magazine-16",
                                        "uslab-magazine-64", "uslab-magazine-256"};
#define MAG_CACHES (sizeof mag_slots / sizeof mag_slots[0])
static struct uslab_cache mag_caches[MAG_CACHES];

/* The internal cache a magazine of cap slots is an object of. */
static struct uslab_cache *mag_cache(uint32_t cap)
{
    unsigned i = 0;
    while (cap > mag_slots[i])
        i++;
    return &mag_caches[i];
}

void usi_depot_init(void)
{
    _Static_assert(sizeof mag_names / sizeof mag_names[0] == MAG_CACHES, "a name a size");
    for (unsigned i = 0; i < MAG_CACHES; i++) {
        usi_objects_init_cache(&mag_caches[i], mag_names[i],
                               sizeof(struct usi_mag) + mag_slots[i] * sizeof(void *), 64, NULL,
                               NULL, NULL, NULL, USLAB_CACHE_NOMAGAZINE | USI_CACHE_INTERNAL);
        if (usi_registry_add(&mag_caches[i], USI_RESERVED_IDS + 1, USI_MAX_IDS - 1) != 0)
            usi_report_fatal("no cache id for the magazine caches");
    }
}

/* Objects per magazine: 32 KiB of objects, at most USI_MAG_MAX (256) and at least 4 of
 * them: 256 up to 128-byte objects, 64 at 512 bytes, 4 from 8 KiB on (docs/design.md §4).
 * Medium malloc blocks: 512 KiB of them, 10 of 48 KiB down to 2 of 256 KiB (1 of 384 and
 * 512 KiB where USLAB_MAX_SLAB_SIZE makes those classes), none above (design §8). One block a
 * magazine up to 256 KiB spent 60% of the `medium` bench row in depot exchanges (1.5x its time);
 * 512 KiB, 20% of it. */
#define MEDIUM_MAG_BYTES ((size_t)512 << 10)
static uint32_t magazine_capacity(size_t stride)
{
    size_t cap = ((size_t)32 << 10) / stride;
    if (cap > USI_MAG_MAX)
        cap = USI_MAG_MAX;
    return (uint32_t)(cap < 4 ? 4 : cap);
}

/* The capacity a pair whose slow paths alternate between allocation and free grows its
 * magazines to (tcache.c's pair_grow): MAG_GROWTH times the steady one, for medium blocks
 * and for objects up to USI_SMALL_MAX bytes (at most USI_MAG_MAX of those). A thread that
 * cycles 128 blocks of the 576-byte class (`mt lifo`, sh6bench's shape) overflowed its two
 * magazines of 56 every round, and with 4 threads traded them through the depot: 1.4x
 * mimalloc's time; 0.84x with growth. Growth for the classes of 1 to 16 KiB as well raised
 * `rptest`'s resident sample by 40% for no time. */
#define MAG_GROWTH 4
static uint32_t grown_capacity(const struct uslab_cache *c)
{
    uint32_t grown = c->mag_steady * MAG_GROWTH;
    if (usi_cache_medium(c))
        return grown;
    if (c->stride > USI_SMALL_MAX)
        return c->mag_steady;
    USI_ASSERT(c->mag_steady <= USI_MAG_MAX);
    return grown < USI_MAG_MAX ? grown : USI_MAG_MAX;
}

void usi_depot_init_cache(struct uslab_cache *c)
{
    /* Debug caches bypass magazines so that every operation is checked (libumem, SLUB). */
    c->mag_steady = (c->flags & USLAB_CACHE_NOMAGAZINE) || c->debug ? 0
                    : usi_cache_medium(c) ? (uint32_t)(MEDIUM_MAG_BYTES / c->size)
                                          : magazine_capacity(c->stride);
    c->mag_capacity = grown_capacity(c);
    c->mag_max_bytes = (size_t)c->mag_capacity * c->stride;
}

__thread struct usi_mag_stash *usi_mag_tls_stash __attribute__((tls_model("initial-exec")));

/* s (the calling thread's), marked busy, where it is not busy already (a signal handler
 * nested in its change); else NULL. */
static struct usi_mag_stash *stash_enter(struct usi_mag_stash *s)
{
    if (!s || s->busy)
        return NULL;
    s->busy = 1;
    __atomic_signal_fence(__ATOMIC_SEQ_CST); /* busy before changed: a handler nests */
    return s;
}

static void stash_leave(struct usi_mag_stash *s)
{
    USI_ASSERT(s->n <= USI_MAG_STASH);
    __atomic_signal_fence(__ATOMIC_SEQ_CST); /* changed before not busy */
    s->busy = 0;
}

void usi_mag_stash_drain(struct usi_mag_stash *s)
{
    if (s->n == 0 || !stash_enter(s))
        return;
    usi_objects_unfill(&mag_caches[0], s->n, (void *const *)s->mags);
    s->n = 0;
    stash_leave(s);
}

/* A start magazine's object: from the stash, which takes USI_MAG_STASH when empty. */
static struct usi_mag *mag_alloc(uint32_t cap)
{
    struct uslab_cache *mc = mag_cache(cap);
    struct usi_mag_stash *s = mc == &mag_caches[0] ? stash_enter(usi_mag_tls_stash) : NULL;
    if (!s)
        return usi_objects_alloc(mc);
    if (s->n == 0)
        s->n = (uint32_t)usi_objects_fill(mc, USI_MAG_STASH, (void **)s->mags, 0, NULL);
    struct usi_mag *m = s->n ? s->mags[--s->n] : NULL;
    stash_leave(s);
    return m ? m : usi_objects_alloc(mc); /* sets errno */
}

/* Frees a magazine's object; a start magazine's goes to the stash, which gives back all it
 * holds first when full. */
static void mag_free(struct usi_mag *m)
{
    struct uslab_cache *mc = mag_cache(m->capacity);
    struct usi_mag_stash *s = mc == &mag_caches[0] ? stash_enter(usi_mag_tls_stash) : NULL;
    if (!s) {
        usi_objects_unfill(mc, 1, (void *const *)&m);
        return;
    }
    if (s->n == USI_MAG_STASH) {
        usi_objects_unfill(mc, s->n, (void *const *)s->mags);
        s->n = 0;
    }
    s->mags[s->n++] = m;
    stash_leave(s);
}

struct usi_mag *usi_mag_new_cap(struct uslab_cache *c, uint32_t cap)
{
    (void)c;
    struct usi_mag *m = mag_alloc(cap);
    if (!m)
        return NULL;
    m->next = NULL;
    m->rounds = 0;
    m->capacity = cap;
    return m;
}

struct usi_mag *usi_mag_refit(struct uslab_cache *c, struct usi_mag *m, uint32_t cap)
{
    USI_ASSERT(!m || (m != &usi_mag_empty && m->rounds == 0));
    if (m && mag_cache(m->capacity) == mag_cache(cap)) {
        m->capacity = cap;
        return m;
    }
    int saved = errno;
    struct usi_mag *fresh = usi_mag_new_cap(c, cap);
    errno = saved;
    if (!fresh)
        return m;
    usi_mag_delete(m);
    return fresh;
}

void usi_mag_delete(struct usi_mag *m)
{
    if (m && m != &usi_mag_empty)
        mag_free(m);
}

/* This thread's number for the in-flight lists and the depot's lanes (1, 2, ...; given at
 * its first flush or depot exchange): a fork child's thread has its parent thread's, and so
 * tells its own flushes apart. */
static uint32_t flight_next_thread;
static __thread uint32_t tls_flight_thread __attribute__((tls_model("initial-exec")));

static uint32_t flight_thread(void)
{
    uint32_t t = tls_flight_thread;
    if (USI_UNLIKELY(t == 0)) {
        do
            t = __atomic_add_fetch(&flight_next_thread, 1, __ATOMIC_RELAXED);
        while (t == 0);
        tls_flight_thread = t;
    }
    return t;
}

/*
 * Magazines in flight: one taken out to be flushed (counted in depot_flushing) is on the
 * cache's in_flight list from then (under the lock) until its objects are back in their
 * slabs, when it leaves the list under the same hold of the lock that puts them back. A
 * fork meets each such magazine either listed with all its objects out, or off the list
 * with all of them in: the child puts the listed ones' objects back (their flushing
 * thread is not there; before session 13 they stayed out for good, and the child's
 * uslab_cache_destroy took them for live objects and aborted: the audit's fork_flush).
 * Invariant: a listed magazine's rounds objects are all outside their slabs.
 */
static void in_flight_add(struct uslab_cache *c, struct usi_mag *m)
{
    m->destructed = 0;
    m->flusher = flight_thread();
    m->flight_next = c->in_flight;
    c->in_flight = m;
}

/* A chain of magazines (linked by next) to be flushed in its order: listed in that order
 * at the head, so that each one's removal finds it first (a drain of thousands of
 * magazines would otherwise scan the list for each). */
static void in_flight_add_chain(struct uslab_cache *c, struct usi_mag *chain)
{
    if (!chain)
        return;
    struct usi_mag *m = chain;
    uint32_t self = flight_thread();
    for (;; m = m->next) {
        m->destructed = 0;
        m->flusher = self;
        if (!m->next)
            break;
        m->flight_next = m->next;
    }
    m->flight_next = c->in_flight;
    c->in_flight = chain;
}

/* m's objects are back (under the same hold of the lock that put them back): it leaves the
 * list and the count of flushes. */
static void in_flight_remove(struct uslab_cache *c, void *m)
{
    if (c->depot_flushing) /* 0 in a fork child that came between the take and here */
        c->depot_flushing--;
    for (struct usi_mag **pp = &c->in_flight; *pp; pp = &(*pp)->flight_next)
        if (*pp == m) {
            *pp = (*pp)->flight_next;
            return;
        }
    USI_ASSERT(!"a magazine in flight is on its cache's list");
}

/* Destructs a magazine's objects into their slabs; no lock held. */
static void flush_objects(struct uslab_cache *c, struct usi_mag *m)
{
    if (m->rounds) {
        usi_objects_unfill_then(c, m->rounds, m->objs, &m->destructed, in_flight_remove, m);
    } else {
        usi_lock(&c->lock);
        in_flight_remove(c, m);
        usi_unlock(&c->lock);
    }
#ifdef USLAB_VALGRIND
    memset(m->objs, 0, m->rounds * sizeof(void *)); /* no stale pointers for the leak scan */
#endif
    m->rounds = 0;
}

/* The depot's objects count with the empty slabs towards usi_slab_surplus_bytes: a new
 * slab made while they exceed USI_SLAB_SURPLUS_MAX asks for a surplus pass, which reaps the
 * magazines that stayed here since the previous one (design §3, "Across classes"). Under
 * cache->lock, after each change of depot_rounds. */
static void depot_recount(struct uslab_cache *c)
{
    size_t bytes = c->depot_rounds * (c->stride + sizeof(void *)); /* objects and slots */
    if (bytes != c->depot_surplus) {
        __atomic_add_fetch(&usi_slab_surplus_bytes, (uint64_t)(bytes - c->depot_surplus),
                           __ATOMIC_RELAXED);
        c->depot_surplus = bytes;
    }
}

/*
 * Lanes (design §4, "Depot"): a depot holds its full and its empty magazines in a stack a
 * lane, and a thread gives to its own lane (its flight number's) and takes from it first,
 * then from the next ones. Two threads that each freed more than their magazines hold took
 * each other's full magazines back half the time, and with them blocks (and slot arrays)
 * last written on the other core: `fastpath` conc_free 7.7-9.1 ns against 1.9-2.9 with both
 * threads on one core. Invariant: depot_nfull and depot_nempty count the lanes' stacks.
 */
static unsigned depot_lane(void)
{
    return flight_thread() % USI_DEPOT_LANES;
}

/* The top magazine of the first lane of `lanes` that has one, from `lane` on, unlinked, or
 * NULL (cache->lock held). */
static struct usi_mag *lanes_pop(struct usi_mag **lanes, unsigned lane)
{
    for (unsigned i = 0; i < USI_DEPOT_LANES; i++) {
        struct usi_mag **top = &lanes[(lane + i) % USI_DEPOT_LANES];
        struct usi_mag *m = *top;
        if (m) {
            *top = m->next;
            return m;
        }
    }
    return NULL;
}

/* Adds d to depot_nfull (cache->lock held), which get_full reads without the lock. */
static void nfull_add(struct uslab_cache *c, long d)
{
    __atomic_store_n(&c->depot_nfull, c->depot_nfull + (size_t)d, __ATOMIC_RELAXED);
}

/* Every magazine of `lanes`, one chain (linked by next), the lanes left empty (cache->lock
 * held). */
static struct usi_mag *lanes_take_all(struct usi_mag **lanes)
{
    struct usi_mag *chain = NULL, **tail = &chain;
    for (unsigned i = 0; i < USI_DEPOT_LANES; i++) {
        *tail = lanes[i];
        lanes[i] = NULL;
        while (*tail)
            tail = &(*tail)->next;
    }
    return chain;
}

/* Pushes m (cache->lock held) onto the calling thread's lane. The depot keeps it, whatever
 * it holds already: the working-set reap (usi_depot_reap_unused) decides what goes back to
 * the slabs. Returns 1 when the caller must ask for a pass once it drops the lock (the
 * depot's first full magazine since a pass found it without one: nothing else would ask
 * for the reap). */
static int depot_push_locked(struct uslab_cache *c, struct usi_mag *m)
{
    unsigned lane = depot_lane();
    if (m->rounds == 0) {
        m->next = c->depot_empty[lane];
        c->depot_empty[lane] = m;
        c->depot_nempty++;
        return 0;
    }
    m->next = c->depot_full[lane];
    c->depot_full[lane] = m;
    nfull_add(c, 1);
    c->depot_rounds += m->rounds;
    c->depot_in += m->rounds;
    depot_recount(c);
    if (c->depot_kicked)
        return 0;
    c->depot_kicked = 1;
    return 1;
}

/* Drops the lock, then asks for a pass if the push asked for one. */
static void unlock_and_kick(struct uslab_cache *c, int kick)
{
    usi_unlock(&c->lock);
    if (kick)
        usi_purge_kick();
}

struct usi_mag *usi_depot_take_full(struct uslab_cache *c, struct usi_mag *give_empty)
{
    usi_lock(&c->lock);
    struct usi_mag *m = lanes_pop(c->depot_full, depot_lane());
    if (m) {
        nfull_add(c, -1);
        c->depot_rounds -= m->rounds;
        c->depot_out += m->rounds;
        depot_recount(c);
        if (c->depot_nfull < c->depot_min_full)
            c->depot_min_full = c->depot_nfull;
        if (c->depot_nfull < c->depot_min_surplus)
            c->depot_min_surplus = c->depot_nfull;
        if (give_empty && give_empty != &usi_mag_empty) {
            USI_ASSERT(give_empty->rounds == 0);
            depot_push_locked(c, give_empty);
        }
    }
    usi_unlock(&c->lock);
    return m;
}

/* Whether m's objects lie scattered: of 16 objects spread over it (all, below 17), more
 * than a quarter, and more than one, in another 64 KiB unit than the object after them. A
 * run may cross one unit's end: a pair's fills start small, so they need not start at a
 * slab's first object, and with 8 KiB objects every other magazine of 4 held the end of one
 * slab and the start of the next; passed to the slabs while its neighbours stayed, it left
 * every slab half in the depot (test `unit_depot_flow`, `runs_kept_whole`). Freed in
 * random order they lie a unit an object (`cxx umap` torn down after its random
 * replacements); freed in the order they were handed out, or its reverse, a unit holds a
 * run of them (`fastpath`'s 10,000 in a row). A sample: a loop over 256 objects cost
 * `fastpath` 13% of its frees. */
static int mag_scattered(const struct usi_mag *m)
{
    if (m->rounds < 2)
        return 0;
    uint32_t n = m->rounds - 1, step = n > 16 ? n / 16 : 1, tried = 0, changes = 0;
    for (uint32_t i = 0; i < n; i += step, tried++)
        changes += ((uintptr_t)m->objs[i] ^ (uintptr_t)m->objs[i + 1]) >> USI_UNIT_SHIFT != 0;
    return changes > 1 && changes * 4 > tried;
}

/* Whether a full magazine given to the depot now goes past it to the slabs (cache->lock
 * held): a cache without constructor and destructor keeps USI_DEPOT_KEEP_FULL full ones,
 * and more, up to USI_DEPOT_KEEP_BYTES of objects, where their objects lie together;
 * scattered ones (mag_scattered, looked at only then) go to the slabs, whose fills hand
 * them out in address order (design §4, "Depot"). */
static int past_depot_locked(const struct uslab_cache *c, const struct usi_mag *m)
{
    return m && m != &usi_mag_empty && m->rounds && !c->ctor && !c->dtor &&
           c->depot_nfull >= USI_DEPOT_KEEP_FULL &&
           (c->depot_rounds * c->stride >= USI_DEPOT_KEEP_BYTES || mag_scattered(m));
}

/* Sends m's objects past the depot to their slabs. Until the cache next fills from its
 * slabs or sheds (depot_passed_end) they count as idle memory towards a shedding episode
 * (usi_depot_sheds), as they did in the depot: a structure torn down makes the threads'
 * magazines shrink beyond the headroom, whose objects would keep its slabs from emptying
 * (design §4, "Shedding"). Not in usi_slab_surplus_bytes, which counts the slabs they
 * empty. */
static void depot_pass(struct uslab_cache *c, struct usi_mag *m)
{
    uint64_t bytes = (uint64_t)m->rounds * (c->stride + sizeof(void *));
    __atomic_add_fetch(&c->depot_passed, bytes, __ATOMIC_RELAXED);
    __atomic_add_fetch(&usi_slab_passed_bytes, bytes, __ATOMIC_RELAXED);
    usi_depot_shed(c, m);
}

static void depot_passed_end(struct uslab_cache *c)
{
    if (__atomic_load_n(&c->depot_passed, __ATOMIC_RELAXED))
        __atomic_sub_fetch(&usi_slab_passed_bytes,
                           __atomic_exchange_n(&c->depot_passed, 0, __ATOMIC_RELAXED),
                           __ATOMIC_RELAXED);
}

/* Shedding (design §4): a cache whose objects carry no state (no constructor, no
 * destructor: every malloc class) frees more than it allocates while the idle memory
 * (usi_slab_idle_bytes) is beyond the headroom. Its depot's objects go back to their slabs
 * now, and so does every full magazine given to it from then on, until an allocation slow
 * path finds the depot empty (usi_depot_demand): the depot holds nothing that would keep a slab
 * from emptying, and the slabs emptied beyond the headroom go back to the kernel in the same frees.
 * Every such cache joins in at its next free slow path once any of them saw the idle memory beyond
 * the headroom (an episode: shed_episodes moved since the cache's last demand), so that the
 * threads' pairs are small in every class when the frees stop: one class's shedding brings the idle
 * memory back under the headroom, and pairs of 256 blocks that no later slow path shrank kept a
 * slab each from emptying. A cache with a constructor keeps its objects constructed (issue 36). */
static uint64_t shed_episodes;

int usi_depot_sheds(struct uslab_cache *c)
{
    if (c->ctor || c->dtor || __atomic_load_n(&c->purge_mult, __ATOMIC_RELAXED) > 1)
        return 0; /* a cache whose purges were faulted back keeps its memory (design §3) */
    if (__atomic_load_n(&c->depot_shedding, __ATOMIC_RELAXED))
        return 1;
    if (usi_slab_over_headroom(c) || usi_slab_idle_bytes() > USI_SLAB_HEADROOM)
        __atomic_add_fetch(&shed_episodes, 1, __ATOMIC_RELAXED);
    else if (__atomic_load_n(&shed_episodes, __ATOMIC_RELAXED) ==
             __atomic_load_n(&c->depot_demanded, __ATOMIC_RELAXED))
        return 0;
    __atomic_store_n(&c->depot_shed_ms, usi_os_now_ms(), __ATOMIC_RELAXED);
    __atomic_store_n(&c->depot_shedding, 1, __ATOMIC_RELAXED);
    usi_depot_drain(c, 0);
    return 1;
}

void usi_depot_demand_slow(struct uslab_cache *c)
{
    depot_passed_end(c);
    if (!__atomic_load_n(&c->depot_shedding, __ATOMIC_RELAXED))
        return;
    __atomic_store_n(&c->depot_demanded, __atomic_load_n(&shed_episodes, __ATOMIC_RELAXED),
                     __ATOMIC_RELAXED);
    __atomic_store_n(&c->depot_shedding, 0, __ATOMIC_RELAXED);
    /* Allocating again within two delays of the shedding's start: the pattern cycles, and
     * what it shed it takes back, whether or not the headroom's slabs spared it a refault
     * (sh8bench's shape shed in two of four rounds). It keeps its memory, as after a refault. */
    if (usi_os_now_ms() < __atomic_load_n(&c->depot_shed_ms, __ATOMIC_RELAXED) +
                              2 * (uint64_t)usi_options.purge_delay_ms)
        usi_slab_keep_memory(c);
}

size_t usi_depot_shed(struct uslab_cache *c, struct usi_mag *m)
{
    if (m == &usi_mag_empty || m->rounds == 0)
        return 0;
    /* Not in flight: its thread holds its cache's lock (an exchange, or a flush at exit),
     * which a fork takes first (usi_tcache_prefork); a fork from a handler of this thread
     * goes on with it in the child. */
    size_t runs = usi_objects_unfill(c, m->rounds, m->objs);
    m->rounds = 0;
    return runs;
}

/* Whether a full magazine given to the depot now is shed instead (cache->lock held): read
 * under the lock, so that none given after usi_depot_sheds drained the depot stays there. */
static int shedding_locked(const struct uslab_cache *c, const struct usi_mag *m)
{
    return m && m != &usi_mag_empty && m->rounds &&
           __atomic_load_n(&c->depot_shedding, __ATOMIC_RELAXED);
}

struct usi_mag *usi_depot_get_empty(struct uslab_cache *c, struct usi_mag *give_full, uint32_t cap)
{
    usi_lock(&c->lock);
    int shed = shedding_locked(c, give_full), pass = !shed && past_depot_locked(c, give_full);
    int kick = 0;
    struct usi_mag *m = NULL;
    if (!shed && !pass) { /* else, emptied, it is the one the caller gets */
        kick = give_full && give_full != &usi_mag_empty && depot_push_locked(c, give_full);
        m = lanes_pop(c->depot_empty, depot_lane());
        if (m) {
            c->depot_nempty--;
            if (c->depot_nempty < c->depot_min_empty)
                c->depot_min_empty = c->depot_nempty;
        }
    }
    unlock_and_kick(c, kick);
    if (shed || pass) {
        if (pass)
            depot_pass(c, give_full);
        else
            usi_depot_shed(c, give_full);
        m = give_full;
    }
    if (m && m->capacity < cap)          /* a thread's slow start left it behind (design §4) */
        return usi_mag_refit(c, m, cap); /* with no memory, the smaller one will do */
    return m ? m : usi_mag_new_cap(c, cap);
}

void usi_depot_flush_later(struct uslab_cache *c, struct usi_mag *m, struct usi_mag **over)
{
    USI_ASSERT(m != &usi_mag_empty); /* the shared empty one is in no depot */
    usi_lock(&c->lock);
    c->depot_flushing++; /* its objects are on their way back to the slabs */
    in_flight_add(c, m);
    usi_unlock(&c->lock);
    m->next = *over;
    *over = m;
}

void usi_depot_put(struct uslab_cache *c, struct usi_mag *m)
{
    if (!m || m == &usi_mag_empty)
        return;
    /* Shed before the lock is taken (its check catches a shedding that starts meanwhile):
     * one hold of it where there were two (3,000 threads' exits: 2 magazines a class). */
    if (m->rounds && usi_depot_sheds(c)) /* may start shedding */
        usi_depot_shed(c, m);
    if (m->rounds == 0 && __atomic_load_n(&c->depot_shedding, __ATOMIC_RELAXED)) {
        /* Beyond the headroom an empty magazine goes back too, without the lock: into the
         * caller's stash where it has one (a thread's exit: 3,000 threads left 2 empty
         * magazines a class in the depots, each put a hold of the class lock). */
        usi_mag_delete(m);
        return;
    }
    usi_lock(&c->lock);
    if (shedding_locked(c, m)) {
        usi_unlock(&c->lock);
        usi_depot_shed(c, m);
        usi_lock(&c->lock);
    }
    unlock_and_kick(c, depot_push_locked(c, m));
}

int usi_depot_block_is_free(struct uslab_cache *c, uintptr_t e, const void *p)
{
    int found = 0;
    usi_lock(&c->lock);
    found = usi_slab_holds(c, e, p);
    for (unsigned lane = 0; lane < USI_DEPOT_LANES; lane++)
        for (const struct usi_mag *m = c->depot_full[lane]; m && !found; m = m->next)
            for (uint32_t i = 0; i < m->rounds && !found; i++)
                found = m->objs[i] == p;
    for (const struct usi_mag *m = c->in_flight; m && !found; m = m->flight_next)
        for (uint32_t i = 0; i < m->rounds && !found; i++)
            found = m->objs[i] == p;
    usi_unlock(&c->lock);
    return found;
}

void usi_depot_postfork_child(struct uslab_cache *c)
{
    /* The forking thread's own flushes (a fork from a destructor they run) go on in the
     * child, by that thread: they stay listed. Before session 15 the child put their
     * objects back here and the thread again when it went on: a double free (a helper's
     * audit). The others' flushing threads are not in the child. */
    uint32_t self = tls_flight_thread;
    usi_lock(&c->lock);
    struct usi_mag *m = c->in_flight, *orphans = NULL, **own = &c->in_flight, **orphan = &orphans;
    c->depot_flushing = 0; /* the registry reset it; the thread counts its own down */
    for (struct usi_mag *next; m; m = next) {
        next = m->flight_next;
        if (self && m->flusher == self) {
            *own = m;
            own = &m->flight_next;
            c->depot_flushing++;
        } else {
            *orphan = m;
            orphan = &m->flight_next;
        }
    }
    *own = NULL; /* kept in their order: each removal still finds its own first */
    *orphan = NULL;
    usi_unlock(&c->lock);
    m = orphans;
    while (m) {
        struct usi_mag *next = m->flight_next;
        /* Those whose destructor returned, and the one it was running on (if any: partly
         * destructed, it can be neither handed out nor destructed again), go back to their
         * slabs; the rest are still constructed and go to the depot as a full magazine, to
         * be handed out or destructed there like any cached object. */
        uint32_t done = m->destructed, back = done < m->rounds && c->dtor ? done + 1 : m->rounds;
        if (back)
            usi_objects_put_back(c, back, m->objs);
        memmove(m->objs, m->objs + back, (m->rounds - back) * sizeof(void *));
        m->rounds -= back;
        usi_lock(&c->lock);
        depot_push_locked(c, m); /* still constructed, or empty for the next exchange */
        usi_unlock(&c->lock);
        m = next;
    }
}

void usi_depot_dispose(struct uslab_cache *c, struct usi_mag *m)
{
    USI_ASSERT_NO_LOCK();
    while (m) {
        struct usi_mag *next = m->next;
        flush_objects(c, m);
        usi_lock(&c->lock);
        depot_push_locked(c, m); /* empty now: kept for the next exchange */
        usi_unlock(&c->lock);
        m = next;
    }
}

/* Flushes (destructs into slabs) and frees two lists of magazines taken off the depot,
 * the full ones counted in depot_flushing; called without the lock. */
static void free_mag_lists(struct uslab_cache *c, struct usi_mag *full, struct usi_mag *empty)
{
    while (full) {
        struct usi_mag *next = full->next;
        flush_objects(c, full);
        usi_mag_delete(full);
        full = next;
    }
    while (empty) {
        struct usi_mag *next = empty->next;
        usi_mag_delete(empty);
        empty = next;
    }
}

void usi_depot_drain(struct uslab_cache *c, int wait_for_flushes)
{
    depot_passed_end(c); /* its objects go to the slabs too: the count starts again */
    for (;;) {
        usi_lock(&c->lock);
        struct usi_mag *full = lanes_take_all(c->depot_full);
        struct usi_mag *empty = lanes_take_all(c->depot_empty);
        size_t taken = c->depot_nfull;
        nfull_add(c, -(long)c->depot_nfull);
        c->depot_nempty = 0;
        c->depot_min_full = c->depot_min_empty = c->depot_min_surplus = 0;
        c->depot_kicked = 0;
        c->depot_rounds = 0;
        depot_recount(c);
        c->depot_flushing += taken;
        in_flight_add_chain(c, full);
        /* Flushes by other threads (a handed-back magazine, a purger pass) still running? */
        int others = c->depot_flushing > taken;
        usi_unlock(&c->lock);
        free_mag_lists(c, full, empty);
        if (!others || !wait_for_flushes)
            return;
        /* Their destructors are running: wait, then take the magazines they give back. */
        usi_os_sleep_ms(1);
    }
}

size_t usi_depot_reap_unused(struct uslab_cache *c, int surplus)
{
    struct usi_mag *full = NULL, *empty = NULL;
    size_t n = 0;
    usi_lock(&c->lock);
    /* That many magazines sat in the depot since the last reap of this kind: not needed. A
     * surplus pass reaps only full magazines, on its own watermark, so that it leaves the
     * working-set interval of the periodic passes alone. */
    size_t idle_full = surplus ? c->depot_min_surplus : c->depot_min_full;
    size_t idle_empty = surplus ? 0 : c->depot_min_empty;
    struct usi_mag *m;
    for (size_t i = 0; i < idle_full && (m = lanes_pop(c->depot_full, 0)) != NULL; i++, n++) {
        nfull_add(c, -1);
        c->depot_rounds -= m->rounds;
        c->depot_flushing++;
        m->next = full;
        full = m;
    }
    in_flight_add_chain(c, full);
    for (size_t i = 0; i < idle_empty && (m = lanes_pop(c->depot_empty, 0)) != NULL; i++, n++) {
        c->depot_nempty--;
        m->next = empty;
        empty = m;
    }
    depot_recount(c);
    if (surplus) {
        c->depot_min_surplus = c->depot_nfull;
        if (c->depot_min_full > c->depot_nfull)
            c->depot_min_full = c->depot_nfull;
    } else {
        c->depot_min_full = c->depot_nfull;
        c->depot_min_empty = c->depot_nempty;
        if (c->depot_min_surplus > c->depot_nfull)
            c->depot_min_surplus = c->depot_nfull;
    }
    if (c->depot_nfull == 0)
        c->depot_kicked = 0; /* the next full magazine asks for a pass again */
    usi_unlock(&c->lock);
    free_mag_lists(c, full, empty);
    return n;
}

void usi_depot_reap_later(struct uslab_cache *c)
{
    __atomic_store_n(&c->reap_wanted, 1, __ATOMIC_RELAXED);
}

void usi_depot_reap_wanted(struct uslab_cache *c)
{
    if (!__atomic_exchange_n(&c->reap_wanted, 0, __ATOMIC_RELAXED))
        return;
    int e = errno; /* the allocation's errno is the caller's */
    usi_depot_reap_unused(c, 0);
    errno = e;
}
