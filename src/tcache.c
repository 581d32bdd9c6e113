/* SPDX-License-Identifier: MIT */
/*
 * tcache.c - per-thread magazine pairs (docs/design.md §4, §5).
 *
 * Each thread holds, per cache, a loaded and a previous magazine (Bonwick & Adams §3.2).
 * The fast paths (usi_tcache_alloc/free in tcache.h) pop and push the loaded magazine
 * with no lock, no atomic and no call. The slow paths below swap the pair, then trade
 * with the depot, then go to the slab layer.
 *
 * A thread's cache is one mapping: header + pairs[npairs], indexed by cache id. Until its
 * first slow path a thread points at `sentinel`, whose pairs are all blank.
 * Thread exit (a pthread key destructor) moves the magazines to their depots.
 *
 * The slow paths run user callbacks (constructors, destructors, reclaim) only as their last
 * step, once the pair is consistent and no lock is held: a callback may free or allocate in
 * any cache, which may change this very pair or grow (remap) the thread's cache, so nothing
 * here touches a pair after a callback. A full magazine that could be traded for no empty
 * one (usi_depot_flush_later) is disposed of the same way.
 */
#include "tcache.h"
#include "base.h"
#include "debug.h"
#include "depot.h"
#include "descriptor.h"
#include "objects.h"
#include "options.h"
#include "os.h"
#include "pages.h"
#include "purge.h"
#include "registry.h"
#include "report.h"
#include "sizeclass.h"
#include "slab.h"

#include <errno.h>
#include <string.h>

#define SENTINEL_PAIRS (USI_RESERVED_IDS + 1)

/* The sentinel is a thread cache followed by its pairs, statically initialised; placing a
 * struct with a flexible array member inside another is a GNU C extension (gcc, clang). Its
 * pairs are blank (pair_is_blank), as a fresh thread cache's are: both fast paths miss on
 * them, and every slow path makes the thread a cache of its own first (tcache_get). Blank,
 * they hold no pointer for the loader to relocate: 388 relocations fewer, 9 KiB of the
 * library's first mapping. */
#ifdef __clang__
#pragma clang diagnostic ignored "-Wgnu-variable-sized-type-not-at-end"
#endif
static struct {
    struct usi_tcache tc;
    struct usi_magpair pairs[SENTINEL_PAIRS];
} sentinel = {
    .tc = {.lock = USI_MUTEX_INIT,
           .pairs_bytes = SENTINEL_PAIRS * sizeof(struct usi_magpair),
           .npairs = SENTINEL_PAIRS},
};

__thread struct usi_tcache *usi_tls __attribute__((tls_model("initial-exec"))) = &sentinel.tc;
/* Set once this thread's cache has been flushed at exit: later calls bypass magazines. */
static __thread int tls_exiting __attribute__((tls_model("initial-exec")));

/* Lock order: the cache registry's lock, registry_lock (of thread caches), then a tcache
 * lock, then cache locks (docs/design.md §6). */
static usi_mutex registry_lock = USI_MUTEX_INIT;
static struct usi_tcache *registry;
static pthread_key_t exit_key;

size_t usi_tcache_bytes;

struct usi_tcache *const *usi_tcache_registry_address(void)
{
    return &registry;
}

uint16_t usi_tcache_size_offsets[USI_SMALL_MAX + 1];
uint16_t usi_tcache_large_offsets[USI_CLASSES_MAX_SIZE / 128 + 1];

/* Bytes the magazines of a pair may cache (the sentinel has capacity 0). */
static size_t pair_bytes(const struct uslab_cache *c, const struct usi_magpair *mp)
{
    return ((size_t)usi_pair_loaded(mp)->capacity + mp->prev->capacity) * c->stride;
}

/* Accounts for a pair whose bytes were `before` (reservation included): gives back what
 * the slow path did not use, or adds what a floor magazine added (past the bound). */
static void pair_account(struct uslab_cache *c, const struct usi_magpair *mp, size_t before)
{
    size_t after = pair_bytes(c, mp);
    if (after < before)
        __atomic_fetch_sub(&usi_tcache_bytes, before - after, __ATOMIC_RELAXED);
    else if (after > before) /* only past the bound: floor magazines (below) */
        __atomic_fetch_add(&usi_tcache_bytes, after - before, __ATOMIC_RELAXED);
}

/*
 * Before a slow path that may trade the pair's previous magazine for another (of any
 * capacity up to the cache's) or add one, reserves the bytes that could add; returns the
 * pair's bytes plus the reservation (what pair_account starts from), or (size_t)-1 when
 * the bound leaves no room: then the thread works straight on the slab layer for this
 * cache until other threads give some back.
 */
static size_t pair_reserve(struct uslab_cache *c, const struct usi_magpair *mp)
{
    size_t given = (size_t)mp->prev->capacity * c->stride;
    size_t need = c->mag_max_bytes > given ? c->mag_max_bytes - given : 0;
    if (need) {
        size_t old = __atomic_fetch_add(&usi_tcache_bytes, need, __ATOMIC_RELAXED);
        if (old + need > usi_options.tcache_max) {
            __atomic_fetch_sub(&usi_tcache_bytes, need, __ATOMIC_RELAXED);
            return (size_t)-1;
        }
    }
    return pair_bytes(c, mp) + need;
}

/*
 * The owner changes its pairs under its own thread cache's lock (tc->lock, uncontended but
 * for a destroy's or a thread exit's flush and another thread's double-free check: a few
 * dozen instructions per magazine exchange). The fork handler takes every thread cache's
 * lock, so fork never copies another thread's pair in the middle of a change (design §7).
 * Until session 14 the owner changed its pairs without a lock, and a fork could copy a
 * magazine already given to the depot but still named by the pair, or base/top/limit of two
 * magazines; the child then left that pair alone, and the objects of its magazines counted
 * as live for good (a child's uslab_cache_destroy aborted: 49 of 200 children of session
 * 13's audit stress; test fork_mid_exchange).
 *
 * A signal handler whose malloc or free interrupted an exchange of its own thread nests
 * one (tls_exchange_depth, thread-local, counted before the lock is taken and after it is
 * released): without the lock, which its thread holds or is about to take. Such a lockless
 * exchange names its pair in `exchanging` (0: none), which a fork child reads: it leaves
 * that one pair alone (a leak, never a magazine handed out twice). A fork by such a handler
 * (fork is async-signal-safe) leaves its own thread cache's lock to the exchange it
 * interrupted. Cleared before any callback runs.
 *
 * `exchange_seq` is odd while a pair is being changed: other threads' free() reads the
 * pairs between two even readings of it (other_pair_holds, design §8). The lock's holder
 * makes it odd; a lockless exchange makes it odd only where it was even (its thread had
 * not taken the lock yet), and even again at its end.
 *
 * exchange_begin returns what exchange_end needs: the pair named before (the low 31 bits)
 * and whether this exchange took the lock or made the sequence odd (the top bits).
 */
static __thread unsigned tls_exchange_depth __attribute__((tls_model("initial-exec")));

/* Calls on the slab path of caches without magazines (and of debugged caches) since this
 * thread's last poll there. Those calls have no other slow path, so they poll for due
 * purger passes and live updates themselves (design §3), every SLAB_PATH_POLL_EVERY of
 * them: a poll reads the clock while a live statistics page exists, about 10% of a
 * constructed pair's time if done at every call. */
#define SLAB_PATH_POLL_EVERY 64
static __thread unsigned tls_slab_path_calls __attribute__((tls_model("initial-exec")));

static inline void slab_path_poll(void)
{
    if (USI_UNLIKELY(++tls_slab_path_calls >= SLAB_PATH_POLL_EVERY)) {
        tls_slab_path_calls = 0;
        usi_purge_poll();
    }
}

#define EXCHANGE_LOCKED   0x80000000u
#define EXCHANGE_MADE_ODD 0x40000000u
#define EXCHANGE_ID_MASK  0x3fffffffu

static inline uint32_t exchange_begin(struct usi_tcache *tc, uintptr_t id)
{
    uint32_t state = tc->exchanging; /* only this thread writes it */
    unsigned depth = tls_exchange_depth++;
    __atomic_signal_fence(__ATOMIC_SEQ_CST); /* counted before locked: a handler nests */
    usi_purge_no_start(1); /* a handler's kick meanwhile starts no thread (design §3) */
    if (depth == 0) {
        usi_lock(&tc->lock);
        usi_mag_stash_use(&tc->mag_stash);
        state |= EXCHANGE_LOCKED;
    } else {
        __atomic_store_n(&tc->exchanging, (uint32_t)id, __ATOMIC_RELAXED); /* no lock */
    }
    if (!(tc->exchange_seq & 1)) {
        __atomic_store_n(&tc->exchange_seq, tc->exchange_seq + 1, __ATOMIC_RELAXED); /* odd */
        state |= EXCHANGE_MADE_ODD;
    }
    __atomic_thread_fence(__ATOMIC_RELEASE); /* before any store to the pair */
    return state;
}

static inline void exchange_end(struct usi_tcache *tc, uint32_t state)
{
    /* after every store to the pair (release) */
    if (state & EXCHANGE_MADE_ODD)
        __atomic_store_n(&tc->exchange_seq, tc->exchange_seq + 1, __ATOMIC_RELEASE); /* even */
    if (state & EXCHANGE_LOCKED) {
        usi_mag_stash_use(NULL);
        usi_unlock(&tc->lock);
    } else {
        __atomic_store_n(&tc->exchanging, state & EXCHANGE_ID_MASK, __ATOMIC_RELEASE);
    }
    __atomic_signal_fence(__ATOMIC_SEQ_CST); /* released before uncounted */
    tls_exchange_depth--;
    usi_purge_no_start(-1);
}

/* A shedding pair's magazine (design §4, "Shedding"): what it holds when the frees stop
 * keeps at most that many slabs from emptying. */
#define USI_MAG_SHED 4
/* ... unless the objects it fills with lie together (shed_capacity). */
#define USI_MAG_SHED_MAX 64

/* The next capacity of a shedding pair's magazine m, whose n objects just went back to
 * their slabs in `runs` runs (usi_slab_put: a run is the neighbours in m within one slab):
 * doubled (up to USI_MAG_SHED_MAX) where they lay in a few slabs, back to USI_MAG_SHED where
 * they were scattered. A program that frees what it allocated together (a garbage
 * collector's sweep, a structure torn down) pins few slabs with a big magazine and sheds in
 * big batches; frees in random order pin a slab an object, and stay at 4 (test
 * burst_return). A shed of 4 cost 700 instructions (lua, python). The slab layer counts the
 * runs as it puts: a loop here over the objects cost lua 8M instructions. */
static uint32_t shed_capacity(const struct uslab_cache *c, const struct usi_mag *m, size_t n,
                              size_t runs)
{
    uint32_t most = c->mag_steady;
    uint32_t cap = m->capacity;
    if (runs * 4 <= n)
        cap = 2 * cap < USI_MAG_SHED_MAX ? 2 * cap : USI_MAG_SHED_MAX;
    else if (runs * 2 > n)
        cap = USI_MAG_SHED;
    return cap < most ? cap : most;
}

/*
 * Slow start (design §4): a pair's level is the capacity of the magazines it uses now. The
 * first magazine it makes or trades for holds at most USI_MAG_START_BYTES of objects (1 to
 * USI_MAG_START_MAX of them); each slow path after that doubles the level, up to the
 * cache's capacity. A thread that uses a cache a little keeps a few of its objects, not a
 * private range of its slabs' pages each; one that keeps using it reaches the capacity
 * after a few slow paths. An empty magazine below the level is freed where the pair would
 * reuse it, so the small ones of the start do not stay in circulation. The fills from the
 * slabs grow more slowly than the level (fill_next).
 *
 * Past the bound a pair stays at this start capacity (the floor): its magazines are
 * counted in usi_tcache_bytes but not refused, so threads that come after the bound is
 * reached do not take a lock per operation; what they may cache is at most two start
 * magazines per cache they use (design §4). A floor of 1 KiB of objects, above the start,
 * made 3,000 live threads hold 21 MB more once they passed the bound (issue 38).
 */
static uint32_t start_capacity(const struct uslab_cache *c)
{
    size_t start = USI_MAG_START_BYTES / c->stride;
    uint32_t most = __atomic_load_n(&c->mag_capacity, __ATOMIC_RELAXED);
    start = start > USI_MAG_START_MAX ? USI_MAG_START_MAX : start < 1 ? 1 : start;
    return start < most ? (uint32_t)start : most ? most : 1;
}

static inline uint32_t pair_level(const struct uslab_cache *c, const struct usi_magpair *mp)
{
    uint32_t most = __atomic_load_n(&c->mag_capacity, __ATOMIC_RELAXED);
    uint32_t level = mp->mag_level ? mp->mag_level : start_capacity(c);
    return level < most ? level : most;
}

/* Raises mp's level: a slow path of the pair's owner (not its first free, design §4). Past
 * the cache's steady capacity only where this slow path is of the other kind than the
 * pair's last one (`alternates`: an allocation found the pair empty, then a free found it
 * full, or the reverse): its working set swings wider than its two magazines. A thread
 * that only frees what another allocates (`prodcons`) keeps the steady capacity, so its
 * full magazines hold no more blocks than before. */
static uint32_t pair_grow(const struct uslab_cache *c, struct usi_magpair *mp, int alternates)
{
    uint32_t most = __atomic_load_n(&c->mag_capacity, __ATOMIC_RELAXED);
    if (!alternates && most > c->mag_steady)
        most = mp->mag_level > c->mag_steady ? mp->mag_level : c->mag_steady;
    uint32_t level = mp->mag_level ? 2 * mp->mag_level : start_capacity(c);
    mp->mag_level = level < most ? level : most;
    return mp->mag_level;
}

/*
 * How many objects the pair's next fill from the slabs takes, at most `room` (design §4):
 * half again the last fill. A thread that asked for n objects (up to 256) then holds about
 * 0.24n more on average, against 0.36n when the fills doubled with the level (3,000 live
 * threads held 7 MB of such objects, issue 38). The level still doubles, and the fills so
 * far sum to at most half of it: a bigger magazine has room for every object the thread
 * took from the smaller ones.
 */
static uint32_t fill_next(struct usi_magpair *mp, uint32_t room)
{
    uint32_t last = mp->fill_level;
    uint32_t n = last ? last + (last > 1 ? last / 2 : 1) : room;
    n = n < room ? n : room;
    mp->fill_level = (uint16_t)(n < UINT16_MAX ? n : UINT16_MAX);
    return n;
}

/* m, an empty magazine of mp, or in its place one of mp's level when m is below it
 * (usi_mag_refit). Never the shared empty one for a real one: with no memory for a bigger
 * magazine the smaller one keeps working, where freeing it first left the thread one
 * slab-layer call per operation (under valgrind, whose address space keeps the reservation
 * from growing: concurrent frees 10 -> 3,000 ns each). */
static inline struct usi_mag *fit_empty(struct uslab_cache *c, const struct usi_magpair *mp,
                                        struct usi_mag *m)
{
    USI_ASSERT(m->rounds == 0);
    uint32_t level = pair_level(c, mp);
    if (m == &usi_mag_empty || m->capacity >= level)
        return m;
    return usi_mag_refit(c, m, level);
}

/* m, an empty magazine from the depot for a pair past the bound, or in its place a new one
 * of floor capacity when m is bigger (m is freed then; with no memory for the small one
 * the bigger one will do). */
static struct usi_mag *fit_floor(struct uslab_cache *c, struct usi_mag *m)
{
    uint32_t cap = start_capacity(c);
    return m->capacity <= cap ? m : usi_mag_refit(c, m, cap);
}

/* Makes m the loaded magazine of mp. */
static void pair_load(struct usi_magpair *mp, struct usi_mag *m)
{
    mp->base = m->objs;
    mp->top = m->objs + m->rounds;
    mp->limit = m->objs + m->capacity;
}

/* The loaded magazine of mp, with its rounds written back from the cached top. */
static struct usi_mag *pair_unload(struct usi_magpair *mp)
{
    struct usi_mag *m = usi_pair_loaded(mp);
    if (m != &usi_mag_empty)
        m->rounds = (uint32_t)(mp->top - mp->base);
    return m;
}

/* Empties mp; its slow start begins again (a cache that gets a destroyed one's id starts
 * small, as its pair in every thread). */
static void pair_clear(struct usi_magpair *mp)
{
    pair_load(mp, &usi_mag_empty);
    mp->prev = &usi_mag_empty;
    mp->mag_level = 0;
    mp->freeing = 0;
    mp->fill_level = 0;
}

static void registry_insert(struct usi_tcache *tc)
{
    tc->reg_prev = NULL;
    tc->reg_next = registry;
    if (registry)
        registry->reg_prev = tc;
    registry = tc;
}

static void registry_remove(struct usi_tcache *tc)
{
    if (tc->reg_prev)
        tc->reg_prev->reg_next = tc->reg_next;
    else
        registry = tc->reg_next;
    if (tc->reg_next)
        tc->reg_next->reg_prev = tc->reg_prev;
}

/*
 * Thread caches of the default size are objects of an internal cache, whose slabs have
 * guard pages (design §3): a thread costs no mmap, mprotect or munmap, and the page of its
 * pairs it uses (3,000 live threads: a mapping and two guard pages each cost 0.1 s and TLB
 * shootdowns, issue 38). Only the pages a thread opens become resident. A pooled cache
 * goes back with every pair clear (tcache_thread_exit) or blank (never opened), as a
 * fresh slab's memory reads as zero (design §2); the header is written anew. A thread
 * that needs more pairs (many object caches) gets a guarded mapping of its own.
 */
#define POOL_BYTES                                                                                 \
    ((sizeof(struct usi_tcache) + (SENTINEL_PAIRS + 64) * sizeof(struct usi_magpair) +             \
      USI_PAGE_SIZE - 1) &                                                                         \
     ~(size_t)(USI_PAGE_SIZE - 1))
static struct uslab_cache tcache_pool;

static struct usi_tcache *tcache_map(uint32_t want_pairs)
{
    size_t bytes = sizeof(struct usi_tcache) + (size_t)want_pairs * sizeof(struct usi_magpair);
    bytes = (bytes + USI_PAGE_SIZE - 1) & ~(size_t)(USI_PAGE_SIZE - 1);
    struct usi_tcache *tc;
    if (bytes <= POOL_BYTES) {
        bytes = POOL_BYTES;
        tc = usi_objects_alloc(&tcache_pool);
    } else {
        tc = usi_os_map_guarded(bytes);
    }
    if (!tc)
        return NULL;
    usi_mutex_init(&tc->lock);
    tc->map_bytes = bytes;
    tc->npairs = (uint32_t)((bytes - sizeof *tc) / sizeof(struct usi_magpair));
    tc->pairs_bytes = tc->npairs * sizeof(struct usi_magpair);
    tc->exchanging = 0;
    memset(tc->limbo, 0, sizeof tc->limbo);          /* an exit inside a passage left one */
    memset(&tc->mag_stash, 0, sizeof tc->mag_stash); /* a grown cache's went to its copy */
    /* Its pairs are blank or clear (tcache_unmap). */
    return tc;
}

/* The ids of tc's pairs on page `page` of it (from its start) up to its last opened one:
 * [*first, the value returned). */
static size_t page_pair_ids(const struct usi_tcache *tc, size_t page, size_t *first)
{
    _Static_assert(offsetof(struct usi_tcache, pairs) % sizeof(struct usi_magpair) == 0,
                   "pairs start on a pair boundary: a page's first id is computed");
    const size_t per_page = USI_PAGE_SIZE / sizeof(struct usi_magpair);
    const size_t head = offsetof(struct usi_tcache, pairs) / sizeof(struct usi_magpair);
    *first = page * per_page > head ? page * per_page - head : 0;
    size_t end = (page + 1) * per_page - head;
    return end < tc->opened_end ? end : tc->opened_end; /* opened_end <= npairs */
}

/* Gives back a thread cache that no thread uses and the registry does not list. A pooled
 * one goes back with every pair clear (pair_clear: tcache_thread_exit's flush) or blank,
 * as the next thread may find it. `blank`: zero every pair it opened first, where some
 * may still name magazines: the old cache of a grow, whose pairs the new one copied, and
 * a fork child's orphan, which keeps the pair its owner was changing (design §7). */
static void tcache_unmap(struct usi_tcache *tc, int blank)
{
    if (tc->map_bytes != POOL_BYTES) {
        usi_os_unmap_guarded(tc, tc->map_bytes);
        return;
    }
    for (size_t w = 0; w < USI_TCACHE_PAGE_WORDS && blank; w++) {
        for (uint64_t bits = tc->pair_pages[w]; bits; bits &= bits - 1) {
            size_t id, end = page_pair_ids(tc, w * 64 + (size_t)__builtin_ctzll(bits), &id);
            for (; id < end; id++)
                if (tc->pairs[id].prev != NULL) /* else blank already */
                    memset(&tc->pairs[id], 0, sizeof tc->pairs[id]);
        }
        tc->pair_pages[w] = 0;
    }
    if (blank)
        tc->opened_end = 0;
    usi_objects_unfill(&tcache_pool, 1, (void *const *)&tc);
}

/* tcache_get where the thread has no cache yet, or one without a pair for id. */
static USI_NOINLINE struct usi_tcache *tcache_make(uintptr_t id, int freeing)
{
    struct usi_tcache *tc = usi_tls;
    /* A signal handler inside an exchange of its own thread: growing would wait for the
     * lock that exchange holds, and unmap the pairs it is changing. No cache this time. */
    if (tc != &sentinel.tc && tls_exchange_depth)
        return NULL;
    uint32_t want =
        (uint32_t)(id + 1 > SENTINEL_PAIRS + 64 ? id + 1 + id / 2 : SENTINEL_PAIRS + 64);
    if (tc == &sentinel.tc) {
        /* A thread whose first call comes in its exit, past the destructors (glibc frees
         * the DTV of a detached thread there): a cache made now would never be flushed,
         * nor its thread uncounted (the seventh audit: 4 mappings and a user for good per
         * such thread). As after its exit: no cache, the block goes to its slab (asked
         * again at its next call, which is rare there). glibc only frees there, so a
         * thread whose first call is an allocation asks the kernel nothing: one system
         * call less a thread (`mt live`, `mleak`). A cache made in the last round of
         * thread-specific data destructors is never flushed (design §12). */
        if (freeing && usi_os_in_glibc_section())
            return NULL;
        (void)usi_os_on_signal_stack(); /* its first question: where its own stack is */
    }
    struct usi_tcache *fresh = tcache_map(want);
    if (!fresh)
        return NULL;
    usi_lock(&registry_lock);
    if (tc != &sentinel.tc) { /* grow: copy the pairs, swap the registry node */
        usi_lock(&tc->lock);
        memcpy(fresh->pairs, tc->pairs, tc->npairs * sizeof(struct usi_magpair));
        memcpy(fresh->pair_pages, tc->pair_pages, sizeof fresh->pair_pages); /* same offsets */
        fresh->opened_end = tc->opened_end;
        /* Passages under way (a callback grew it) end in the copy: they name their slot. */
        memcpy(fresh->limbo, tc->limbo, sizeof fresh->limbo);
        fresh->mag_stash = tc->mag_stash; /* idle: no exchange is under way (above) */
        registry_remove(tc);
        usi_unlock(&tc->lock);
    }
    registry_insert(fresh);
    usi_tls = fresh;
    usi_objects_set_limbo(fresh->limbo);
    usi_unlock(&registry_lock);
    if (tc != &sentinel.tc)
        tcache_unmap(tc, 1);
    /* May allocate (glibc's second-level key blocks); usi_tls is already set. */
    pthread_setspecific(exit_key, fresh);
    return fresh;
}

/* Returns the calling thread's own cache with a pair for id, or NULL (no memory, or the
 * thread is exiting). `freeing`: the call is a free (see tcache_make). Inline where the
 * thread has its cache (every slow path but its first), without the frame the growth
 * needs: about 20 instructions a call less (perl's 29,000 free slow paths 1,124 -> 1,103
 * each; `thread_budget`'s live thread 71,554 -> 70,305). */
static inline struct usi_tcache *tcache_get(uintptr_t id, int freeing)
{
    struct usi_tcache *tc = usi_tls;
    if (USI_UNLIKELY(tls_exiting))
        return NULL;
    if (USI_LIKELY(tc != &sentinel.tc && id < tc->npairs))
        return tc;
    return tcache_make(id, freeing);
}

/* Pairs of a fresh mapping are all zero: base == top == limit (NULL), so both fast paths
 * miss on them as on usi_mag_empty, and only the pages a thread uses become resident.
 * Slow paths give such a pair its empty magazines first; readers of other threads' pairs
 * skip it (prev == NULL). */
static inline int pair_is_blank(const struct usi_magpair *mp)
{
    return mp->prev == NULL;
}

/* The page of tc's mapping that holds pair mp, as a word and a bit of pair_pages. */
static inline size_t pair_page(const struct usi_tcache *tc, const struct usi_magpair *mp)
{
    return (size_t)((const char *)mp - (const char *)tc) / USI_PAGE_SIZE;
}

/* The thread's first slow path on a blank pair: the empty magazines, the free() check, and
 * its page marked as one that readers of the pairs may look at. */
static inline void pair_open(struct usi_tcache *tc, const struct uslab_cache *c,
                             struct usi_magpair *mp)
{
    if (pair_is_blank(mp)) {
        pair_clear(mp);
        mp->lattice = mp->lattice_bound = c->lattice;
        mp->free_secret = c->lattice ? usi_free_secret : 0;
        size_t page = pair_page(tc, mp);
        uint64_t *word = &tc->pair_pages[page / 64], bit = (uint64_t)1 << (page % 64);
        uint64_t old = __atomic_load_n(word, __ATOMIC_RELAXED);
        if (!(old & bit))
            __atomic_store_n(word, old | bit, __ATOMIC_RELAXED); /* only the owner writes */
        uint32_t id = (uint32_t)(mp - tc->pairs);
        if (id >= tc->opened_end)
            tc->opened_end = id + 1;
    }
}

/* Whether the page of pair mp of tc was ever opened (else every pair on it is blank). */
static inline int pair_page_opened(const struct usi_tcache *tc, const struct usi_magpair *mp)
{
    size_t page = pair_page(tc, mp);
    return (__atomic_load_n(&tc->pair_pages[page / 64], __ATOMIC_RELAXED) >> (page % 64)) & 1;
}

/* Fills m with up to n objects from the slabs (usi_objects_fill) for the alloc slow path.
 * With `fresh` (calloc's slow path), the fill's last object, the one the pop would take, is
 * taken out into *fresh where no one ever wrote it: before the pair is loaded with m, so no
 * signal handler's pop can have it meanwhile. Returns m's rounds. */
static inline uint32_t alloc_fill(struct uslab_cache *c, struct usi_mag *m, uint32_t n,
                                  void **fresh)
{
    if (!fresh)
        return m->rounds = (uint32_t)usi_objects_fill(c, n, m->objs, USI_FILL_THREAD, NULL);
    /* A block of more than a page for calloc: one, so the next calloc takes its own from
     * the slabs too, knowing whether it must clear it, not from the magazine (a lock a block,
     * against clearing and faulting pages that read as zero). Not a page or less: a take
     * makes such fresh pages present anyway (usi_slab_populate), and the lock costs more
     * than the clear (4 KiB: 7% more time). */
    if (c->stride > USI_PAGE_SIZE)
        n = 1;
    void *zero = NULL;
    m->rounds = (uint32_t)usi_objects_fill(c, n, m->objs, USI_FILL_THREAD, &zero);
    if (m->rounds && zero == m->objs[m->rounds - 1]) /* a fill that failed put it back */
        *fresh = m->objs[--m->rounds];
    return m->rounds;
}

/* The exchange of the alloc slow path (under exchange_begin): leaves an object in the
 * loaded magazine, or in *fresh (alloc_fill), and returns 1, or returns 0 when the object
 * must come straight from the slab layer (which may run callbacks: the caller does that
 * after exchange_end). */
static int alloc_exchange(struct uslab_cache *c, struct usi_magpair *mp, void **fresh)
{
    size_t before = pair_reserve(c, mp);
    if (before == (size_t)-1) { /* past the bound: swap, else fill a floor magazine */
        struct usi_mag *loaded = pair_unload(mp);
        if (mp->prev->rounds != 0) {
            struct usi_mag *full = mp->prev; /* a swap needs no new magazine */
            pair_load(mp, full);
            mp->prev = loaded;
            return 1;
        }
        if (c->ctor) {
            /* Constructed objects in the depot before a new one is constructed (design §4):
             * its full magazine comes to the pair, counted but not refused, as a floor
             * magazine is. Else one object is constructed, as below the bound. */
            before = pair_bytes(c, mp);
            struct usi_mag *full = usi_depot_get_full(c, loaded);
            if (!full)
                return 0;
            pair_load(mp, full);
            pair_account(c, mp, before);
            return 1;
        }
        before = pair_bytes(c, mp);
        int saved = errno;
        if (loaded == &usi_mag_empty)
            loaded = usi_mag_new_cap(c, start_capacity(c));
        if (loaded) {
            alloc_fill(c, loaded, loaded->capacity, fresh);
            pair_load(mp, loaded);
        }
        pair_account(c, mp, before);
        if (loaded && (loaded->rounds != 0 || (fresh && *fresh)))
            return 1;
        errno = saved;
        return 0;
    }
    struct usi_mag *loaded = pair_unload(mp);
    int ok = 1;
    pair_grow(c, mp, mp->freeing);
    mp->freeing = 0;
    if (loaded->rounds == 0) {
        struct usi_mag *prev = mp->prev;
        if (prev->rounds != 0) { /* swap: the previous magazine has objects */
            mp->prev = fit_empty(c, mp, loaded);
            pair_load(mp, prev);
        } else if ((prev = usi_depot_get_full(c, mp->prev = fit_empty(c, mp, prev))) != NULL) {
            /* Both empty: the previous one went to the depot for a full one. */
            mp->prev = fit_empty(c, mp, loaded);
            pair_load(mp, prev);
        } else if (!c->ctor) {
            usi_depot_demand(c);
            /* No constructed objects anywhere: fill a magazine straight from the slabs,
             * without the reclaim callback (it may run later, once the pair is whole). A
             * failure here is not the caller's: errno is kept (the single-object path
             * below sets it if that fails too). */
            int saved = errno;
            uint32_t cap = pair_level(c, mp), room = 0;
            if (loaded->capacity < cap) {
                /* Slow start: a bigger one, filled only up to what the smaller one held.
                 * The objects the thread took from that one come back to this one: filled
                 * whole, it would overflow when they do, and a thread whose few blocks go
                 * to and fro would trade magazines on every turn (lifetime d=20: 10% of its
                 * time). With no memory for a bigger one, the smaller one is filled again. */
                uint32_t had = loaded->capacity;
                pair_load(mp, &usi_mag_empty);
                loaded = usi_mag_refit(c, loaded == &usi_mag_empty ? NULL : loaded, cap);
                if (loaded && loaded->capacity == cap)
                    room = had;
            }
            if (loaded) {
                /* From a slab of this thread's own where two threads fill at once (design
                 * §3, "Fillers"). */
                uint32_t n = fill_next(mp, loaded->capacity - room);
                alloc_fill(c, loaded, n, fresh);
                pair_load(mp, loaded);
            }
            /* No magazine, or fewer free objects than a magazine: take one. */
            ok = loaded && (loaded->rounds != 0 || (fresh && *fresh));
            if (!ok)
                errno = saved;
        } else {
            /* Objects with a constructor leave the slab one at a time, as the user asks
             * for them: the constructor runs once per object that enters service. */
            ok = 0;
        }
    }
    pair_account(c, mp, before);
    return ok;
}

/* A call on a destroyed object cache: its descriptor is kept back with no pair (cache.c),
 * so its fast paths always miss and come here. */
static USI_COLD USI_NORETURN void dead_cache(const struct uslab_cache *c, const char *call)
{
    usi_report_fatal("%s(%p): not a live cache (destroyed already?)", call, (const void *)c);
}

/* Whether the slow paths keep c's objects in magazines: not for a cache without them, nor
 * for one being destroyed. There a destructor that the destroy's flush runs may allocate
 * and free an object of its own cache (uslab.h allows it); kept in a magazine, that object
 * was flushed in the next round, whose destructor made another: destroy found one live
 * object and aborted (session 16's audit). On the slab path each round gives back all. */
static inline int cached(const struct uslab_cache *c)
{
    return __atomic_load_n(&c->mag_capacity, __ATOMIC_RELAXED) &&
           !__atomic_load_n(&c->closing, __ATOMIC_RELAXED);
}

/* After the reclaim callback ran and the slabs still had nothing: the callback may have
 * freed objects of c itself on this thread, which went into its magazines (or the depot),
 * where the retry at the slabs does not look (session 17's audit: a callback that freed
 * 1 to 16 of its own objects left its caller with ENOMEM). uslab.h promises the retry. The
 * pair is looked up again: the callback may have grown this thread's cache. */
static void *alloc_after_reclaim(struct uslab_cache *c)
{
    struct usi_tcache *tc = cached(c) ? tcache_get(c->id, 0) : NULL;
    if (!tc)
        return NULL;
    int saved = errno;
    struct usi_magpair *mp = &tc->pairs[c->id];
    uint32_t ex = exchange_begin(tc, c->id);
    pair_open(tc, c, mp);
    void *p = usi_pair_pop(mp);
    if (!p && alloc_exchange(c, mp, NULL))
        p = usi_pair_pop(mp);
    exchange_end(tc, ex);
    if (!p)
        errno = saved;
    return p;
}

/* usi_tcache_alloc_slow, and with `fresh` (NULL on entry) calloc's: see alloc_fill. */
static inline __attribute__((always_inline)) void *alloc_slow(struct uslab_cache *c, void **fresh)
{
    if (USI_UNLIKELY(!usi_registry_names(c)))
        dead_cache(c, "uslab_cache_alloc");
    /* The reclaim callback an inline pass asked for under pressure, first: the pair is
     * whole, and no object is yet outside every magazine and record (a fork in the
     * callback would find the one this call takes nowhere, design §7). */
    usi_objects_reclaim_wanted(c);
    if (USI_UNLIKELY(__atomic_load_n(&c->reap_wanted, __ATOMIC_RELAXED)))
        usi_depot_reap_wanted(c); /* an inline pass's reap, with the same care */
    void *p;
    struct usi_tcache *tc = cached(c) ? tcache_get(c->id, 0) : NULL;
    if (!tc) {
        if (c->ctor && usi_tls == &sentinel.tc)
            tcache_get(0, 0); /* the records of its passages (design §7): one a thread */
        p = usi_objects_alloc(c);
        /* A cache without magazines (or debugged) has no other slow path: a one-thread
         * program that uses only such caches would never run an inline pass, and never
         * hear of pressure (design §3). */
        slab_path_poll();
    } else {
        struct usi_magpair *mp = &tc->pairs[c->id];
        uint32_t ex = exchange_begin(tc, c->id);
        pair_open(tc, c, mp);
        int ok = alloc_exchange(c, mp, fresh);
        p = fresh && *fresh ? *fresh : ok ? usi_pair_pop(mp) : NULL;
        exchange_end(tc, ex);
        if (!ok) {
            p = usi_objects_alloc(c); /* last: may run the constructor and reclaim */
            if (!p && c->reclaim)
                p = alloc_after_reclaim(c);
        }
        usi_purge_poll();
    }
    return p;
}

void *usi_tcache_alloc_slow(struct uslab_cache *c)
{
    return alloc_slow(c, NULL);
}

void *usi_tcache_alloc_zeroed_slow(struct uslab_cache *c, int *zero)
{
    void *fresh = NULL;
    void *p = alloc_slow(c, &fresh);
    *zero = fresh != NULL;
    return p;
}

void usi_tcache_free_slow(struct uslab_cache *c, void *p)
{
    if (USI_UNLIKELY(!usi_registry_names(c)))
        dead_cache(c, "uslab_cache_free");
    struct usi_tcache *tc = cached(c) ? tcache_get(c->id, 1) : NULL;
    if (!tc) {
        if (c->dtor && usi_tls == &sentinel.tc)
            tcache_get(0, 1); /* as in the alloc slow path */
        usi_objects_unfill(c, 1, &p);
        slab_path_poll(); /* as in the alloc slow path */
        return;
    }
    struct usi_magpair *mp = &tc->pairs[c->id];
    uint32_t ex = exchange_begin(tc, c->id);
    if (pair_is_blank(mp)) {
        /* The thread's first use of this cache is a free: another thread allocated the
         * block. Kept here, it would be this thread's next block, in a cache line the
         * allocating thread's neighbouring blocks share: false sharing for as long as the
         * two reuse them (cache-scratch, issue 12). It goes back to its slab instead; the
         * thread's first magazine, filled from the slabs, hands out its top object first,
         * a magazine's length away from it. */
        pair_open(tc, c, mp);
        exchange_end(tc, ex);
        usi_objects_unfill(c, 1, &p);
        usi_purge_poll();
        return;
    }
    if (usi_pair_push(mp, p)) {
        exchange_end(tc, ex);
        return;
    }
    if (mp->mag_level == 0 && mp->prev == &usi_mag_empty && mp->base != mp->limit &&
        mp->limit - mp->base <= USI_MAG_SHED_MAX &&
        __atomic_load_n(&c->depot_shedding, __ATOMIC_RELAXED)) {
        /* A shedding pair (below) whose small magazine filled while its cache still sheds:
         * the objects go back to their slabs and the magazine stays, with no trade and no
         * change of capacity (a quarter of the frees of a burst come here: lua). */
        struct usi_mag *m = pair_unload(mp);
        size_t n = m->rounds, runs = usi_depot_shed(c, m);
        uint32_t cap = shed_capacity(c, m, n, runs);
        if (cap != m->capacity) {
            size_t before = cap > m->capacity ? pair_reserve(c, mp) : pair_bytes(c, mp);
            if (before != (size_t)-1) {
                m = usi_mag_refit(c, m, cap); /* m itself where there is no memory */
                pair_load(mp, m);
                pair_account(c, mp, before);
            }
        }
        pair_load(mp, m);
        usi_pair_push(mp, p);
        exchange_end(tc, ex);
        usi_purge_poll();
        return;
    }
    size_t before = pair_reserve(c, mp);
    int past_bound = before == (size_t)-1;
    if (past_bound)
        before = pair_bytes(c, mp);
    struct usi_mag *loaded = pair_unload(mp);
    struct usi_mag *prev = mp->prev;
    struct usi_mag *over = NULL;
    int pushed = 1;
    /* A consumer (design §4, "A consuming pair"): a pair of a medium class that has freed
     * and never filled from the slabs, its last slow path a free too. */
    int consumer = usi_cache_medium(c) && mp->freeing && mp->fill_level == 0 && mp->mag_level;
    if (!past_bound && (consumer || usi_depot_sheds(c))) {
        /* Beyond the headroom (design §4, "Shedding"): the pair's objects go back to their
         * slabs, and it goes on with one magazine of USI_MAG_SHED slots, shed whenever it
         * fills while the cache sheds (its level grows again from its next allocation slow
         * path that finds the depot empty). What the pair holds when
         * the program stops freeing keeps few slabs from emptying: magazines of 256 blocks
         * freed in no order pinned a slab each, most of a class's. A consumer sheds the same
         * way with a magazine of one block, whatever the headroom, and keeps its level: the
         * blocks go back to their spans at once, where the allocating thread's fills find
         * them, not a magazine of up to 512 KiB later (`large prodcons`: 0.91x the time,
         * 0.87x the peak RSS). */
        mp->prev = &usi_mag_empty;
        usi_depot_shed(c, loaded);
        usi_depot_shed(c, prev);
        usi_mag_delete(prev);
        if (!consumer) {
            mp->mag_level = 0;
            mp->fill_level = 0;
        }
        uint32_t most = c->mag_steady;
        uint32_t cap = consumer ? 1 : most < USI_MAG_SHED ? most : USI_MAG_SHED;
        if (loaded == &usi_mag_empty || loaded->capacity != cap)
            loaded = usi_mag_refit(c, loaded == &usi_mag_empty ? NULL : loaded, cap);
        pair_load(mp, loaded ? loaded : &usi_mag_empty);
        pair_account(c, mp, before);
        pushed = loaded != NULL && usi_pair_push(mp, p);
        exchange_end(tc, ex);
        if (!pushed)
            usi_objects_unfill(c, 1, &p);
        usi_purge_poll();
        return;
    }
    int freeing = mp->freeing;
    mp->freeing = 1;
    if (!past_bound) {
        pair_grow(c, mp, !freeing);
        if (prev->rounds == 0)
            mp->prev = prev = fit_empty(c, mp, prev);
    }
    if (freeing && !past_bound && prev->rounds == 0) {
        /* A freeing pair (design §4): its full magazine goes to the depot, where the
         * threads that allocate find it, for an empty one; the pair keeps no full one. */
        int saved = errno;
        struct usi_mag *empty = usi_depot_get_empty(c, loaded, pair_level(c, mp));
        if (!empty) {
            /* No memory for an empty one: the pair's spare, else (as below) a full one's
             * objects go back to their slabs and it comes back empty for the next free. */
            errno = saved;
            if (prev != &usi_mag_empty) {
                empty = prev;
                mp->prev = &usi_mag_empty;
            } else {
                struct usi_mag *full = usi_depot_get_full(c, NULL);
                if (full)
                    usi_depot_flush_later(c, full, &over);
                pushed = 0;
            }
        }
        pair_load(mp, empty ? empty : &usi_mag_empty);
    } else if (prev->rounds == 0 && prev != &usi_mag_empty) { /* swap: the previous one is empty */
        mp->prev = loaded;
        pair_load(mp, prev);
    } else {
        /* Both full (or missing): give the previous one to the depot for an empty one.
         * Past the bound, the empty one has floor capacity (start capacity) and comes
         * from the depot's empty magazines where it has one (made anew at each exchange,
         * the floor magazines piled up there without bound: test tcache_floor), and the
         * previous one's objects go back to their slabs instead, where this thread's fills
         * find them: a pair past the bound never takes full magazines from the depot, so
         * what it gave there stayed until a pass reaped it, for good in a process with no
         * pass due (721 MB after 300,000 rounds of 64 blocks with an unbounded depot; test
         * tcache_floor_depot). */
        mp->prev = &usi_mag_empty; /* from here on the depot owns it */
        int saved = errno;
        struct usi_mag *empty;
        if (past_bound && c->ctor) {
            /* No free destructs a constructed object (design §4): the full magazine goes to
             * the depot, as below the bound, for an empty one of floor capacity. Its
             * objects went back through the destructor before: with every pair past the
             * bound, 98% of allocations ran the constructor (constructed_bound). */
            empty = usi_depot_get_empty(c, prev, start_capacity(c));
            if (empty)
                empty = fit_floor(c, empty);
        } else if (past_bound) {
            empty = usi_depot_get_empty(c, NULL, start_capacity(c));
            if (prev != &usi_mag_empty)
                usi_depot_flush_later(c, prev, &over);
            if (empty)
                empty = fit_floor(c, empty);
        } else {
            empty = usi_depot_get_empty(c, prev, pair_level(c, mp));
            if (empty && usi_cache_medium(c) && mp->fill_level == 0)
                empty = fit_floor(c, empty); /* a consumer's first holds one block */
        }
        if (empty) {
            mp->prev = loaded;
            pair_load(mp, empty);
        } else {
            /* No empty magazine and no memory for one: the loaded one's objects go back
             * to their slabs once the pair is whole, and it goes to the depot empty, for
             * the next free; this object goes to its slab. Before, the pair kept its full
             * magazine and every later free took the slab layer, one object at a time. */
            errno = saved;
            if (loaded != &usi_mag_empty) {
                pair_load(mp, &usi_mag_empty);
                usi_depot_flush_later(c, loaded, &over);
            }
            pushed = 0;
        }
    }
    pair_account(c, mp, before);
    if (pushed)
        usi_pair_push(mp, p);
    exchange_end(tc, ex);
    /* The pair is whole: callbacks may run now. This object first (its destructor runs
     * with it recorded as in passage, design §7), then the depot's surplus, whose
     * destructors may free into this pair. */
    if (!pushed)
        usi_objects_unfill(c, 1, &p);
    usi_depot_dispose(c, over);
    usi_purge_poll();
}

size_t usi_tcache_take_cached(struct uslab_cache *c, size_t n, void **objs)
{
    struct usi_tcache *tc = usi_tls;
    size_t i = 0;
    if (tc == &sentinel.tc && (c->ctor || c->reclaim))
        tcache_get(0, 0); /* the rest come from the slabs: a record of their passage (§7) */
    if (c->pair_offset >= tc->pairs_bytes || tc == &sentinel.tc)
        return 0;
    struct usi_magpair *mp = usi_tcache_pair(tc, c->pair_offset);
    if (pair_is_blank(mp))
        return 0;
    uint32_t ex = exchange_begin(tc, c->id);
    void *p;
    while (i < n && (p = usi_pair_pop(mp)) != NULL)
        objs[i++] = p;
    while (i < n && mp->prev->rounds)
        objs[i++] = mp->prev->objs[--mp->prev->rounds];
    /* Constructed objects in the depot's full magazines before any new one is constructed:
     * with magazines of a few objects at the slow start, a bulk of 30 freed ones left 6
     * in the depot while the slabs constructed 6 more (api_cache). For a cache with a
     * constructor alloc_exchange never fills from the slabs. */
    while (i < n && c->ctor && alloc_exchange(c, mp, NULL))
        while (i < n && (p = usi_pair_pop(mp)) != NULL)
            objs[i++] = p;
    exchange_end(tc, ex);
    return i;
}

/* Moves one pair's magazines to c's depot. Caller holds tc->lock or is the only thread. */
static void pair_flush(struct uslab_cache *c, struct usi_magpair *mp)
{
    if (pair_is_blank(mp))
        return;
    size_t before = pair_bytes(c, mp);
    struct usi_mag *mags[2] = {pair_unload(mp), mp->prev};
    pair_clear(mp);
    pair_account(c, mp, before);
    for (int i = 0; i < 2; i++)
        usi_depot_put(c, mags[i]);
}

void usi_tcache_flush_own(struct uslab_cache *c)
{
    struct usi_tcache *tc = usi_tls;
    /* Not from a signal handler inside an exchange of this thread: that exchange holds the
     * lock (or is about to take it), and the pair is its to change. */
    if (tc == &sentinel.tc || c->id >= tc->npairs || tls_exchange_depth)
        return;
    usi_lock(&tc->lock);
    pair_flush(c, &tc->pairs[c->id]);
    usi_unlock(&tc->lock);
}

void usi_tcache_flush_stash(void)
{
    if (usi_tls != &sentinel.tc)
        usi_mag_stash_drain(&usi_tls->mag_stash); /* not while busy: a handler nested */
}

void usi_tcache_flush_all(struct uslab_cache *c)
{
    usi_lock(&registry_lock);
    for (struct usi_tcache *tc = registry; tc; tc = tc->reg_next) {
        usi_lock(&tc->lock);
        if (c->id < tc->npairs)
            pair_flush(c, &tc->pairs[c->id]);
        usi_unlock(&tc->lock);
    }
    usi_unlock(&registry_lock);
}

/* Whether mp holds no magazine: blank or both the shared empty one. */
static int pair_holds_nothing(const struct usi_magpair *mp)
{
    return mp->prev == NULL || (mp->prev == &usi_mag_empty && mp->base == usi_mag_empty.objs);
}

/* Moves every magazine of tc to its depot, one pair at a time; the caller holds tc->lock
 * (its owner's exit: one hold for every pair, not one a pair, 30 fewer lock pairs for a
 * thread that used 30 classes) or is a fork child's only thread. A pair that holds
 * magazines keeps its cache alive: destroy empties every pair (under the tcache lock)
 * before it lets the cache go. */
static void tcache_flush_every(struct usi_tcache *tc, uint32_t skip)
{
    /* Only the pages with a pair ever opened (pair_pages), a page's pairs in a row. */
    USI_ASSERT(tc->opened_end <= tc->npairs);
    for (size_t w = 0; w < USI_TCACHE_PAGE_WORDS; w++)
        for (uint64_t bits = __atomic_load_n(&tc->pair_pages[w], __ATOMIC_RELAXED); bits;
             bits &= bits - 1) {
            size_t id, end = page_pair_ids(tc, w * 64 + (size_t)__builtin_ctzll(bits), &id);
            for (id = id ? id : 1; id < end; id++) { /* pair 0 never holds a magazine */
                struct usi_magpair *mp = &tc->pairs[id];
                if (id == skip || pair_holds_nothing(mp))
                    continue;
                struct uslab_cache *c = __atomic_load_n(&usi_caches[id], __ATOMIC_ACQUIRE);
                if (c)
                    pair_flush(c, mp);
            }
        }
}

static void tcache_thread_exit(void *arg)
{
    struct usi_tcache *tc = arg;
    /* From here on this thread's calls go straight to the slab layer. */
    tls_exiting = 1;
    usi_tls = &sentinel.tc;
    usi_objects_set_limbo(NULL); /* its passages from here on are not recorded (§12) */
    usi_lock(&tc->lock);
    usi_mag_stash_use(&tc->mag_stash); /* the start magazines the flush frees */
    tcache_flush_every(tc, 0);
    usi_mag_stash_use(NULL);
    usi_unlock(&tc->lock);
    usi_mag_stash_drain(&tc->mag_stash);
    usi_lock(&registry_lock);
    registry_remove(tc);
    int last = !registry || !registry->reg_next; /* at most one thread with a cache is left */
    usi_unlock(&registry_lock);
    tcache_unmap(tc, 0);         /* every pair was cleared by the flush above */
    usi_slab_filler_end();       /* its partial slabs are the next thread's to fill */
    usi_purge_thread_exit(last); /* what this thread leaves idle may go now (design §3) */
}

void usi_tcache_join(void)
{
    if (usi_tls == &sentinel.tc)
        (void)tcache_get(0, 0);
}

/* table[i] for i in [from, to]: the pair offset of the smallest class that holds i * step
 * bytes, a class at a time and four entries a store, as sizeclass.c fills its tables (the classes
 * are multiples of 16, so with step 1 that is usi_class_small[(i + 7) >> 3]'s). An entry at a time,
 * looking each up, cost 15,000 of a short process's instructions. */
static void fill_offsets(uint16_t *table, size_t step, size_t from, size_t to)
{
    size_t i = from;
    for (unsigned id = 1; id <= usi_nclasses && i <= to; id++) {
        size_t last = usi_class_size[id] / step < to ? usi_class_size[id] / step : to;
        uint16_t off = (uint16_t)(id * sizeof(struct usi_magpair));
        uint64_t four = off * UINT64_C(0x0001000100010001);
        for (; i <= last && i % 4; i++)
            table[i] = off;
        for (; i + 3 <= last; i += 4)
            memcpy(table + i, &four, sizeof four);
        for (; i <= last; i++)
            table[i] = off;
    }
    USI_ASSERT(i > to); /* the largest class holds the largest size */
}

void usi_tcache_init(void)
{
    /* USLAB_PROFILE: all 0 (pair 0, always empty), so every malloc takes the slow path,
     * which records its size (malloc.c). */
    if (!usi_options.profile) {
        fill_offsets(usi_tcache_size_offsets, 1, 0, USI_SMALL_MAX);
        fill_offsets(usi_tcache_large_offsets, 128, USI_SMALL_MAX / 128 + 1,
                     usi_options.max_slab_size / 128);
    }
    usi_objects_init_cache(&tcache_pool, "uslab-thread-cache", POOL_BYTES, USI_PAGE_SIZE, NULL,
                           NULL, NULL, NULL,
                           USLAB_CACHE_NOMAGAZINE | USLAB_CACHE_NOCOLOUR | USI_CACHE_INTERNAL);
    if (usi_registry_add(&tcache_pool, USI_RESERVED_IDS + 1, USI_MAX_IDS - 1) != 0)
        usi_report_fatal("no cache id for the thread caches");
    pthread_key_create(&exit_key, tcache_thread_exit);
}

void usi_tcache_init_cache(struct uslab_cache *c)
{
    USI_ASSERT(c->id > 0 && c->id < USI_MAX_IDS);
    c->pair_offset = c->id * sizeof(struct usi_magpair);
}

/* The calling thread's own cache when a signal handler of its forks inside one of its
 * exchanges: the exchange holds that lock (or is about to take it), not the fork. */
static struct usi_tcache *interrupted_exchange(void)
{
    struct usi_tcache *own = usi_tls;
    return own != &sentinel.tc && tls_exchange_depth ? own : NULL;
}

void usi_tcache_prefork(void)
{
    usi_lock(&registry_lock);
    struct usi_tcache *skip = interrupted_exchange();
    for (struct usi_tcache *tc = registry; tc; tc = tc->reg_next)
        if (tc != skip)
            usi_lock(&tc->lock); /* waits for the owner's exchange to end */
}

void usi_tcache_postfork(int child)
{
    struct usi_tcache *skip = interrupted_exchange();
    if (!child) {
        for (struct usi_tcache *tc = registry; tc; tc = tc->reg_next)
            if (tc != skip)
                usi_unlock(&tc->lock);
        usi_unlock(&registry_lock);
        return;
    }
    usi_mutex_init(&registry_lock);
    for (struct usi_tcache *tc = registry; tc; tc = tc->reg_next)
        usi_mutex_init(&tc->lock);
    /* The interrupted exchange goes on in the child once the handler returns, and
     * releases the lock it took (or takes it first: then it finds it free). A handler
     * that came between the sequence's last store and the unlock is not told apart: that
     * exchange then releases a free lock, and the child's lock count stays off by one. */
    if (skip && skip->exchange_seq % 2)
        usi_lock(&skip->lock);
}

void usi_tcache_adopt_orphans(void)
{
    struct usi_tcache *tc = registry;
    while (tc) {
        struct usi_tcache *next = tc->reg_next;
        if (tc != usi_tls) {
            /* Its objects between slab and user while a callback ran (design §7). */
            usi_objects_limbo_return(tc->limbo);
            /* A pair its owner was changing when fork copied it is left alone: its
             * magazines are lost to the child, never put back twice (design §7). */
            tcache_flush_every(tc, __atomic_load_n(&tc->exchanging, __ATOMIC_ACQUIRE));
            usi_mag_stash_drain(&tc->mag_stash); /* unless its owner was changing it */
            registry_remove(tc);
            tcache_unmap(tc, 1);
        }
        tc = next;
    }
}

/* Whether p is among the objects of magazine m's first n slots (another thread's: see
 * other_pair_holds). */
#if USI_TSAN
__attribute__((no_sanitize("thread")))
#endif
static int
mag_holds(const struct usi_mag *m, uint32_t n, const void *p)
{
    /* plain reads (volatile): an atomic read would still be seen by ThreadSanitizer,
     * racing the owner's plain stores, which are its fast path's */
    void *const volatile *objs = m->objs;
    for (uint32_t i = 0; i < n; i++)
        if (objs[i] == p)
            return 1;
    return 0;
}

/*
 * Whether p is in another thread's pair of cache c: read without the owner's help. Its fast
 * paths move only `top`, without a lock; a slow path changes the rest between
 * exchange_begin and exchange_end, under tc->lock (held here) or, nested in a signal
 * handler of the owner, without it; both make exchange_seq odd and then even again. So the pair is
 * read between two readings of an even, unchanged exchange_seq, and only slots below the `top` read
 * there: each held a free object at some moment after the read of `top` (a pop and a push may have
 * replaced it since, by another free object), so a match means p was free at that moment. The
 * caller frees p and is inside that call: p was live when the call began, so a free of it in
 * between is a double free. The only false answer is "not there" (a magazine in passage to the
 * depot, an owner that kept exchanging), never "there". tc->lock keeps out the flushes (thread
 * exit, cache destroy) that change pairs without the sequence. A magazine the owner swapped out
 * while this reads it stays mapped until its slab is freed and the span reused, which the
 * sequence's second reading answers for anyway (the result is thrown away). Under registry_lock,
 * with tc->lock held.
 */
#if USI_TSAN
__attribute__((no_sanitize("thread")))
#endif
static int
other_pair_holds(const struct usi_tcache *tc, const struct uslab_cache *c, const void *p)
{
    const volatile struct usi_magpair *mp = &tc->pairs[c->id];
    /* An exchange takes microseconds, unless its thread is descheduled: spin a little,
     * then wait a millisecond at a time, 20 at most. */
    for (int attempt = 0; attempt < 64 + 20; attempt++) {
        if (attempt >= 64)
            usi_os_sleep_ms(1);
        uint32_t seq = __atomic_load_n(&tc->exchange_seq, __ATOMIC_ACQUIRE);
        if (seq & 1)
            continue;
        void **base = mp->base, **top = mp->top, **limit = mp->limit;
        struct usi_mag *prev = mp->prev;
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&tc->exchange_seq, __ATOMIC_RELAXED) != seq)
            continue;
        if (!prev || top < base || top > limit)
            return 0; /* blank, or not a pair a slow path left (cannot be) */
        /* the magazine of base, as usi_pair_loaded finds it (inline here: no sanitizer) */
        const struct usi_mag *loaded =
            (const struct usi_mag *)(const void *)((const char *)base -
                                                   offsetof(struct usi_mag, objs));
        uint32_t prev_rounds = *(const volatile uint32_t *)&prev->rounds;
        size_t loaded_rounds = (size_t)(top - base);
        int found =
            (prev_rounds <= prev->capacity && mag_holds(prev, prev_rounds, p)) ||
            (loaded_rounds <= loaded->capacity && mag_holds(loaded, (uint32_t)loaded_rounds, p));
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&tc->exchange_seq, __ATOMIC_RELAXED) == seq)
            return found;
    }
    return 0;
}

int usi_tcache_block_is_free(struct uslab_cache *c, uintptr_t e, const void *p)
{
    struct usi_tcache *tc = usi_tls;
    if (c->pair_offset < tc->pairs_bytes) {
        const struct usi_magpair *mp = usi_tcache_pair(tc, c->pair_offset);
        if (!pair_is_blank(mp)) {
            for (void **t = mp->base; t < mp->top; t++)
                if (*t == p)
                    return 1;
            for (uint32_t i = 0; i < mp->prev->rounds; i++)
                if (mp->prev->objs[i] == p)
                    return 1;
        }
    }
    /* Freed first into another thread's magazine (design §8): a block in two magazines
     * would be handed out twice. */
    int found = 0;
    usi_lock(&registry_lock);
    for (struct usi_tcache *o = registry; o && !found; o = o->reg_next) {
        if (o == tc || c->id >= o->npairs || !pair_page_opened(o, &o->pairs[c->id]))
            continue;
        usi_lock(&o->lock);
        found = other_pair_holds(o, c, p);
        usi_unlock(&o->lock);
    }
    usi_unlock(&registry_lock);
    return found || usi_depot_block_is_free(c, e, p);
}

/* Reads other threads' pairs while their owners change them, without a lock or an atomic
 * on the owners' side (their fast paths): a snapshot by design (design §10), which
 * ThreadSanitizer is told not to report. Under registry_lock. */
#if USI_TSAN
__attribute__((no_sanitize("thread")))
#endif
static size_t
count_cached(const struct uslab_cache *c)
{
    size_t n = 0;
    for (struct usi_tcache *tc = registry; tc; tc = tc->reg_next) {
        if (c->id >= tc->npairs)
            continue;
        /* Another thread's pair, read without its lock: a snapshot for statistics. Not on
         * a page the thread never opened a pair on: all blank there, and read it would
         * become resident in every thread (design §4). */
        const volatile struct usi_magpair *mp = &tc->pairs[c->id];
        if (!pair_page_opened(tc, (const struct usi_magpair *)(uintptr_t)mp))
            continue;
        struct usi_mag *prev = mp->prev;
        if (prev)
            n += (size_t)(mp->top - mp->base) + prev->rounds;
    }
    return n;
}

size_t usi_tcache_cached_objects(const struct uslab_cache *c)
{
    usi_lock(&registry_lock);
    size_t n = count_cached(c);
    usi_unlock(&registry_lock);
    return n;
}

int usi_tcache_try_cached_objects(const struct uslab_cache *c, unsigned ms, size_t *n)
{
    if (usi_trylock_for(&registry_lock, ms) != 0)
        return -1;
    *n = count_cached(c);
    usi_unlock(&registry_lock);
    return 0;
}
