/* SPDX-License-Identifier: MIT */
/*
 * pages.c - the pages layer (docs/design.md §2): one reserved address range, carved into
 * spans of 64 KiB << order bytes aligned to their size, and the page map that tells, for
 * any pointer, the slab that owns it in O(1), or that uslab did not hand it out.
 *
 * Spans come from per-order free lists, then from a bump pointer over the reservation,
 * then by splitting a larger free span; with USLAB_HUGE_PAGES=1, past 16 MiB, dense ones
 * from chunks of huge pages (thp_take). Alignment gaps left by the bump pointer are put on
 * the smaller orders' free lists, so no address space is lost. Free-list links live in the
 * spans' header records (span_link), never in the purged span, so a free span stays unbacked.
 * A freed span always reads as zero when reused, even where the kernel refuses to purge it
 * (span_discard).
 */
#include "pages.h"
#include "base.h"
#include "debug.h"
#include "options.h"
#include "os.h"
#include "report.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#define MAX_SKIPS 8 /* times the range may go on past another mapping (grow) */

/* One cache line: free's fast path reads base, nunits and tags (usi_unit_tag). */
__attribute__((aligned(64))) struct usi_pagemap usi_pagemap;

/* Everything below is protected by pages.lock; it is the innermost lock (design §6). */
static struct {
    usi_mutex lock;
    uintptr_t bump;      /* next never-used address */
    uintptr_t committed; /* [base, committed) is read/write */
    /* The ends of the slab headers' and bitmaps' read/write pages: a page there covers
     * many units, and one made read/write is not asked for again (0: none yet). */
    uintptr_t meta_committed, bits_committed;
    uintptr_t end;     /* [base, end) is reserved now; it grows up to max_end */
    uintptr_t max_end; /* the end of the hole found for the range */
    /* Unit index + 1 of the first free span of each order; 0: none. A span zeroed by hand
     * (span_discard) is on them too: it reads as zero, and a list is reused newest first. */
    uint32_t free_head[USI_SPAN_ORDERS];
    size_t reserved; /* bytes of [base, end) reserved: all but the skips (also read
                      * without the lock, for reports) */
    /* Stretches of [base, end) that are not ours: where another mapping stood in the way,
     * the range went on past it (grow). Appended under the lock; read without it up to
     * nskips (release/acquire). */
    struct {
        uintptr_t from, to;
    } skips[MAX_SKIPS];
    unsigned nskips;
    size_t side_bytes; /* side arrays mapped or reserved (as far as the reservation) */
    size_t abandoned;  /* bytes of spans that could not be made zero again (free_span) */
} pages = {.lock = USI_MUTEX_INIT};

/*
 * Chunks of huge pages for dense spans (design §2), with USLAB_HUGE_PAGES=1. Once THP_FROM
 * bytes of the range are committed, a span the slab layer fills from one end (`dense`: a small
 * class's, an object cache's) comes from a chunk, a 2 MiB span advised MADV_HUGEPAGE, so that its
 * memory faults in a huge page at a time (lua 22.2k -> 8.9k page faults); other spans (medium
 * blocks, written in part; internal caches, whose guard pages would split the mapping)
 * never come from one. A chunk whose span is purged while others of it are in use is
 * advised MADV_NOHUGEPAGE first (khugepaged would make the purged pages resident again),
 * and MADV_HUGEPAGE again once all of it is free. Chunks are never given back to the free
 * lists; their free units are purged. Under pages.lock.
 * Invariants: used[i] has a bit per unit of chunk i handed out; bit i of room is set iff
 * used[i] is not full; split[i] iff chunk i is advised MADV_NOHUGEPAGE; every unit of
 * chunk i has the free-span link THP_LINK | i (never on a free list, its link is free).
 */
#define THP_ORDER  5 /* a chunk: span_bytes(5), one huge page */
#define THP_UNITS  (1u << THP_ORDER)
#define THP_FROM   ((size_t)16 << 20) /* committed before the first chunk is made */
#define THP_CHUNKS 4096               /* at most 8 GiB in chunks */
#define THP_LINK   0x80000000u
_Static_assert(USI_UNIT_SIZE << THP_ORDER == (size_t)2 << 20, "a chunk is a 2 MiB huge page");
_Static_assert(THP_UNITS == 32, "a chunk's units are the bits of a uint32_t");
static struct {
    uint32_t unit[THP_CHUNKS]; /* the chunk's first unit */
    uint32_t used[THP_CHUNKS];
    uint8_t split[THP_CHUNKS];
    uint64_t room[THP_CHUNKS / 64]; /* a bit per chunk with a free unit */
    unsigned n, cur;                /* chunks made, the one tried first */
    int refused;                    /* the process locks its future mappings: no chunks */
} thp USI_COLD_ZEROED;

static inline size_t span_bytes(unsigned order)
{
    return USI_UNIT_SIZE << order;
}

static inline uint32_t unit_of(uintptr_t addr)
{
    return (uint32_t)((addr - usi_pagemap.base) >> USI_UNIT_SHIFT);
}

/*
 * The address-space budget (design §2). RLIMIT_AS and mlockall's RLIMIT_MEMLOCK check count
 * every mapping, PROT_NONE too, so uslab's own mappings grow with use: at first only
 * INITIAL_RESERVE of the range is reserved, with side arrays for just that; the reservation
 * and every side array grow in place (doubling, with MAP_FIXED_NOREPLACE right after their
 * ends, in the holes found at initialisation; the range past another mapping in its way)
 * when the bump pointer reaches the end. Under a finite RLIMIT_AS, as read at
 * initialisation, uslab's mappings stay within a quarter of it, so the system allocator
 * keeps three quarters. Below room for MIN_RESERVE at start-up uslab steps aside: the
 * caller disables slabs.
 */
#define BUDGET_SHARE    4                  /* of RLIMIT_AS */
#define MIN_RESERVE     ((size_t)64 << 20) /* eight largest spans: the least useful budget */
#define INITIAL_RESERVE ((size_t)2 << 20)  /* reserved at first; also the least step */
#define COMMIT_AHEAD    ((size_t)4 << 20)  /* the most committed beyond a new span */

/* The side arrays, indexed by unit: page map and unit tags (read/write as reserved,
 * MAP_NORESERVE: resident only where written), slab headers (with the span links) and
 * bitmaps (PROT_NONE until the bump pointer commits their spans). Each sits in a hole found
 * for the whole range's worth and is mapped only as far as the reservation, in whole pages;
 * each is a mapping every fork copies (design §2). */
enum { SIDE_MAP, SIDE_TAGS, SIDE_META, SIDE_BITS, NSIDES };
static const size_t side_unit[NSIDES] = {sizeof(uintptr_t), sizeof(uint16_t), USI_SLAB_META_BYTES,
                                         USI_SLAB_BITS_BYTES};
static char *side_base[NSIDES];
static size_t side_len[NSIDES]; /* bytes mapped, a multiple of the page size */
#define SIDE_PER_UNIT                                                                              \
    (sizeof(uintptr_t) + sizeof(uint16_t) + USI_SLAB_META_BYTES + USI_SLAB_BITS_BYTES)

static inline size_t page_up(size_t n)
{
    return (n + USI_PAGE_SIZE - 1) & ~(size_t)(USI_PAGE_SIZE - 1);
}

/* RLIMIT_AS as it was at initialisation (SIZE_MAX: none). Not read again: a growth path
 * that asked the kernel would make a system call that sandboxes allowing only memory calls
 * refuse (design §2, §3). A limit lowered later makes mmap fail, which every growth path
 * handles. Written once, before the range exists. */
static size_t as_limit = SIZE_MAX;

/* Bytes uslab may still map under RLIMIT_AS (SIZE_MAX without a limit); pages.lock held. */
static size_t budget_left(void)
{
    if (as_limit == SIZE_MAX)
        return SIZE_MAX;
    size_t used = pages.reserved + pages.side_bytes;
    return as_limit / BUDGET_SHARE > used ? as_limit / BUDGET_SHARE - used : 0;
}

/* Maps side array i up to `units` units, in place after what it has: the first three
 * read/write at once, headers and bitmaps reserved unless `committed` (the range's first
 * part, read/write from the start). It never shrinks: a growth that fails after it keeps
 * the extension for the next one, so no unmap (which may fail, leaving a mapping in the
 * way of every later extension) is ever needed. 0, or -1 with nothing changed. */
static int side_extend(int i, size_t units, int committed)
{
    size_t len = page_up(units * side_unit[i]);
    if (len <= side_len[i])
        return 0;
    char *at = side_base[i] + side_len[i];
    if ((i < SIDE_META || committed ? usi_os_map_at(at, len - side_len[i])
                                    : usi_os_reserve_at(at, len - side_len[i])) != 0)
        return -1;
    pages.side_bytes += len - side_len[i];
    side_len[i] = len;
    return 0;
}

/* All side arrays up to `units`; 0, or -1 (those extended stay so). */
static int sides_extend(size_t units, int committed)
{
    for (int i = 0; i < NSIDES; i++)
        if (side_extend(i, units, committed) != 0)
            return -1;
    return 0;
}

/* Finds the holes for a range of *size bytes and its side arrays (see usi_pages_init) and
 * maps their first parts: the range's base, or NULL (errno EEXIST: a hole was taken
 * meanwhile, worth another try). */
static char *place_range(size_t *size, size_t *first, size_t *first_units)
{
    size_t align = span_bytes(USI_SPAN_ORDERS - 1);
    size_t hole_size = *size <= SIZE_MAX / 3 ? 3 * *size : *size;
    char *hole_base = usi_os_find_hole(&hole_size, align, MIN_RESERVE);
    if (!hole_base)
        return NULL;
    if ((uintptr_t)hole_base + hole_size > ((uintptr_t)1 << USI_ADDRESS_BITS)) {
        errno = ENOMEM;
        return NULL;
    }
    size_t below = (hole_size / 3) & ~(align - 1); /* multiples of the span alignment */
    if (hole_size - below < MIN_RESERVE)
        below = 0;
    size_t above = ((hole_size - below) / 2) & ~(align - 1);
    if (hole_size - below - above < MIN_RESERVE)
        above = 0;
    if (*size > hole_size - below - above)
        *size = hole_size - below - above;
    char *base = hole_base + below;
    *first = *size < INITIAL_RESERVE ? *size : INITIAL_RESERVE;
    size_t nunits = *size >> USI_UNIT_SHIFT;
    *first_units = *first >> USI_UNIT_SHIFT;
    size_t whole[NSIDES], total = 0;
    for (int i = 0; i < NSIDES; i++)
        total += whole[i] = page_up(nunits * side_unit[i]);
    char *hole = base - total; /* the side arrays' */
    if (total > below) {
        /* found while the range's hole is held, so not in it */
        if (usi_os_reserve_at(hole_base, hole_size) != 0)
            return NULL;
        size_t got = total;
        hole = usi_os_find_hole(&got, USI_PAGE_SIZE, total);
        usi_os_unmap(hole_base, hole_size);
        if (!hole)
            return NULL;
    }
    for (int i = 0; i < NSIDES; i++) {
        side_base[i] = hole;
        side_len[i] = 0;
        hole += whole[i];
    }
    pages.side_bytes = 0;
    if (usi_os_map_at(base, *first) != 0) /* committed: see usi_pages_init */
        return NULL;
    if (sides_extend(*first_units, 1) != 0) { /* their first parts, as a growth maps more */
        int e = errno;
        for (int i = 0; i < NSIDES; i++)
            if (side_len[i])
                usi_os_unmap(side_base[i], side_len[i]);
        usi_os_unmap(base, *first);
        pages.side_bytes = 0;
        errno = e;
        return NULL;
    }
    return base;
}

int usi_pages_init(void)
{
    size_t align = span_bytes(USI_SPAN_ORDERS - 1);
    size_t size = usi_options.reserve_bytes;
    size_t limit = usi_os_address_limit();
    as_limit = limit;
    if (limit != SIZE_MAX) {
        size_t budget = limit / BUDGET_SHARE;
        if (budget < MIN_RESERVE + align)
            budget = 0;
        /* The range and its side arrays can never outgrow the budget: no larger hole. */
        size_t fit = budget / (SIDE_PER_UNIT + USI_UNIT_SIZE) * USI_UNIT_SIZE;
        if (size > fit)
            size = fit;
    }
    if (size < MIN_RESERVE) {
        errno = ENOMEM;
        return -1;
    }
    /* One hole for the range and its side arrays (design §2), three times the range's
     * size: the side arrays at the top of its lower third, each with room to cover the
     * whole range, then the range, then a third left free. Each array and the range map
     * their first part and grow upwards into their own tails; the rest of the hole stays
     * free. The kernel places other mappings top-down, in the highest gap that fits: the
     * free third above the range takes any mapping the range's tail could, so the tail is
     * reached only after it (snmalloc's 256 GiB map landed right after a 2 MiB range that
     * had nothing above it). A bottom-up layout (valgrind's, `setarch -L`) fills the hole
     * from its lower end, up towards the side arrays. A hole smaller than asked for (a
     * limit, valgrind's address space) is shared the same way; one too small for that
     * keeps the range at its start and the side arrays in a hole of their own. The holes
     * are found, not kept (usi_os_find_hole), and only the first parts are mapped: 14
     * system calls, as many as trimming one reservation to them took, but none a split of
     * a mapping, where 11 of those were (42-54 -> 30-39 us; docs/benchmarks.md, "A
     * process's start: its mappings placed, not cut"). A thread that maps into a hole
     * meanwhile makes a piece fail: the holes are found again. */
    char *base = NULL;
    size_t first = 0, first_units = 0;
    for (int tries = 0; !base; tries++) {
        size_t want = size;
        base = place_range(&want, &first, &first_units);
        if (!base && (errno != EEXIST || tries == 3)) {
            memset(side_base, 0, sizeof side_base); /* nothing of them is mapped */
            memset(side_len, 0, sizeof side_len);
            return -1;
        }
        size = want;
    }
    /* The first part is read/write from the start, with the headers and bitmaps of its
     * spans: a short program's first spans, a class each, took a commit each (and two for
     * their side pages), 11 of a start's system calls (docs/benchmarks.md, "A process's
     * start: its first spans committed"). Under mlockall that is at most INITIAL_RESERVE
     * resident beyond what the spans use. */
    pages.bump = (uintptr_t)base;
    pages.committed = pages.end = (uintptr_t)base + first;
    pages.meta_committed = (uintptr_t)side_base[SIDE_META] + side_len[SIDE_META];
    pages.bits_committed = (uintptr_t)side_base[SIDE_BITS] + side_len[SIDE_BITS];
    pages.max_end = (uintptr_t)base + size;
    __atomic_store_n(&pages.reserved, first, __ATOMIC_RELAXED);
    usi_pagemap.base = (uintptr_t)base;
    usi_pagemap.map = (uintptr_t *)side_base[SIDE_MAP];
    usi_pagemap.tags = (uint16_t *)side_base[SIDE_TAGS];
    usi_pagemap.meta = side_base[SIDE_META];
    usi_pagemap.bits = (uint64_t *)side_base[SIDE_BITS];
    /* Published last: lookups see nunits == 0 (nothing is ours) until the map exists. */
    __atomic_store_n(&usi_pagemap.nunits, first_units, __ATOMIC_RELEASE);
    return 0;
}

/* Unit u's span link (pages.h): unit index + 1 of the next free span of its order (0: the
 * end), or THP_LINK | chunk. Its record is read/write: such a span was committed. */
static inline uint32_t *span_link(uint32_t u)
{
    return (uint32_t *)(usi_pagemap.meta + (size_t)u * USI_SLAB_META_BYTES + USI_SPAN_LINK_AT);
}

/* Push and pop on the free list of an order (pages.lock held). */
static void span_push(uintptr_t addr, unsigned order)
{
    uint32_t u = unit_of(addr);
    *span_link(u) = pages.free_head[order];
    pages.free_head[order] = u + 1;
}

static uintptr_t span_pop(unsigned order)
{
    uint32_t head = pages.free_head[order];
    if (!head)
        return 0;
    pages.free_head[order] = *span_link(head - 1);
    return usi_pagemap.base + ((uintptr_t)(head - 1) << USI_UNIT_SHIFT);
}

/* Puts [from, to), fresh or purged, on the free lists in pieces aligned to their size. */
static void free_range(uintptr_t from, uintptr_t to)
{
    while (from < to) {
        unsigned o = 0;
        while (o + 1 < USI_SPAN_ORDERS && (from & (span_bytes(o + 1) - 1)) == 0 &&
               from + span_bytes(o + 1) <= to)
            o++;
        span_push(from, o);
        from += span_bytes(o);
    }
}

/* Under pages.lock, after a growth in place found another mapping in the way: reserves
 * `want` bytes further on, at the first of end + 2 MiB, + 4 MiB, + 8 MiB ... that is
 * free, within the range; the stretch in between becomes a skip (not ours), with the
 * uncommitted rest of the old reservation. Returns the new start, or 0 (nothing changed;
 * the range stops growing where it finds no room or no skip left). */
static uintptr_t skip_to(size_t want)
{
    size_t align = span_bytes(USI_SPAN_ORDERS - 1);
    if (pages.nskips == MAX_SKIPS)
        return 0;
    for (size_t d = INITIAL_RESERVE; d <= pages.max_end - pages.end; d *= 2) {
        uintptr_t at = (pages.end + d + align - 1) & ~(uintptr_t)(align - 1);
        if (at > pages.max_end || want > pages.max_end - at)
            break;
        size_t left = budget_left(), cost = (at - pages.end) / USI_UNIT_SIZE * SIDE_PER_UNIT;
        if (left != SIZE_MAX &&
            (cost > left || want > (left - cost) / (USI_UNIT_SIZE + SIDE_PER_UNIT) * USI_UNIT_SIZE))
            break;
        if (usi_os_reserve_at((void *)at, want) == 0)
            return at;
        if (errno != EEXIST)
            break;
    }
    if (errno == EEXIST)
        pages.max_end = pages.end; /* nowhere left to go: no more searches */
    return 0;
}

/* Under pages.lock: reserves more of the range after pages.end so that [.., need) is
 * reserved, with the side arrays for it; doubles the reservation when the budget and the
 * neighbours allow. Where another mapping is in the way, the range goes on past it
 * (skip_to): the bump pointer moves, and the caller aligns its span again. */
static int grow(uintptr_t need)
{
    size_t step = INITIAL_RESERVE;
    if (need > pages.max_end)
        return -1;
    size_t least = ((need - pages.end) + step - 1) & ~(step - 1);
    size_t want = pages.reserved > least ? pages.reserved : least;
    if (want > pages.max_end - pages.end)
        want = pages.max_end - pages.end;
    size_t left = budget_left(); /* for the range and its side arrays */
    if (left != SIZE_MAX)
        left = left / (USI_UNIT_SIZE + SIDE_PER_UNIT) * USI_UNIT_SIZE;
    if (want > left)
        want = left & ~(step - 1);
    if (want < least)
        return -1;
    uintptr_t at = pages.end;
    if (usi_os_reserve_at((void *)at, want) != 0 &&
        (want == least || usi_os_reserve_at((void *)at, want = least) != 0)) {
        /* past the mapping in the way, with room for the largest span */
        size_t most = span_bytes(USI_SPAN_ORDERS - 1);
        if (errno != EEXIST || !(at = skip_to(want = want > most ? want : most)))
            return -1;
    }
    /* The side arrays' part for the new units, right after their ends (in their holes). */
    size_t units = (at + want - usi_pagemap.base) >> USI_UNIT_SHIFT;
    if (sides_extend(units, 0) != 0) {
        usi_os_unmap((void *)at, want); /* where that fails, the next growth skips it */
        return -1;
    }
    if (at != pages.end) {
        /* The committed rest goes to the free lists; the uncommitted rest back. */
        free_range(pages.bump, pages.committed);
        if (pages.end > pages.committed)
            usi_os_unmap((void *)pages.committed, pages.end - pages.committed);
        __atomic_store_n(&pages.reserved, pages.reserved - (pages.end - pages.committed),
                         __ATOMIC_RELAXED);
        pages.skips[pages.nskips].from = pages.committed;
        pages.skips[pages.nskips].to = at;
        __atomic_store_n(&pages.nskips, pages.nskips + 1, __ATOMIC_RELEASE);
        pages.bump = pages.committed = pages.end = at;
    }
    pages.end += want;
    __atomic_store_n(&pages.reserved, pages.reserved + want, __ATOMIC_RELAXED);
    /* The page map covers the new units now: lookups may look at them. */
    __atomic_store_n(&usi_pagemap.nunits, units, __ATOMIC_RELEASE);
    return 0;
}

size_t usi_pages_reserved_bytes(void)
{
    return __atomic_load_n(&pages.reserved, __ATOMIC_RELAXED);
}

int usi_pages_in_range(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    if ((a - usi_pagemap.base) >> USI_UNIT_SHIFT >=
        __atomic_load_n(&usi_pagemap.nunits, __ATOMIC_ACQUIRE))
        return 0;
    unsigned n = __atomic_load_n(&pages.nskips, __ATOMIC_ACQUIRE); /* after nunits: see grow */
    for (unsigned i = 0; i < n; i++)
        if (a >= pages.skips[i].from && a < pages.skips[i].to)
            return 0;
    return 1;
}

const size_t *usi_pages_reserved_address(void)
{
    return &pages.reserved;
}

/* Makes the pages of a side array's bytes [from, to) read/write, but for those below *done
 * (made so before: a first small program's spans shared one header page and one bitmap page,
 * and asked for each again: two system calls a span); raises *done. 0, or -1. */
static int side_commit(uintptr_t *done, uintptr_t from, uintptr_t to)
{
    uintptr_t lo = from & ~(uintptr_t)(USI_PAGE_SIZE - 1), hi = page_up(to);
    if (lo < *done)
        lo = *done;
    if (lo >= hi)
        return 0;
    if (usi_os_commit((void *)lo, hi - lo) != 0)
        return -1;
    *done = hi;
    return 0;
}

/* Takes a span from the bump pointer; gaps below the aligned start go to the free lists. */
static uintptr_t bump_take(unsigned order)
{
    size_t size = span_bytes(order);
    uintptr_t start = (pages.bump + size - 1) & ~(uintptr_t)(size - 1);
    if (start + size < start || (start + size > pages.end && grow(start + size) != 0))
        return 0;
    start = (pages.bump + size - 1) & ~(uintptr_t)(size - 1); /* a skip moved the bump */
    if (start + size > pages.committed) {
        /* The span (and any alignment gap before it), and ahead of it an eighth of what
         * is committed, at most COMMIT_AHEAD: under mlockall every committed page is made
         * resident at once, so a small program commits what it uses; a large one makes a
         * system call per few MiB, not per span. The spans' headers and bitmaps first, in
         * whole pages (their arrays are mapped in whole pages past the reservation). */
        size_t ahead = (pages.committed - usi_pagemap.base) / 8;
        ahead = ahead < COMMIT_AHEAD ? ahead & ~(USI_UNIT_SIZE - 1) : COMMIT_AHEAD;
        uintptr_t want = start + size + ahead;
        if (want > pages.end)
            want = pages.end;
        if (side_commit(&pages.meta_committed, (uintptr_t)usi_pages_meta(pages.committed),
                        (uintptr_t)usi_pages_meta(want)) != 0 ||
            side_commit(&pages.bits_committed, (uintptr_t)usi_pages_bits(pages.committed),
                        (uintptr_t)usi_pages_bits(want)) != 0 ||
            usi_os_commit((void *)pages.committed, want - pages.committed) != 0)
            return 0;
        pages.committed = want;
    }
    free_range(pages.bump, start); /* the alignment gap */
    pages.bump = start + size;
    return start;
}

static inline uintptr_t thp_chunk(unsigned i)
{
    return usi_pagemap.base + ((uintptr_t)thp.unit[i] << USI_UNIT_SHIFT);
}

/* n units' bits (n <= THP_UNITS), from bit 0. */
static inline uint32_t thp_run(unsigned n)
{
    return (uint32_t)(((uint64_t)1 << n) - 1);
}

/* The bits of chunk `i`'s used word for the span at unit u of `order` units. */
static inline uint32_t thp_bits(unsigned i, uint32_t u, unsigned order)
{
    return thp_run(1u << order) << (u - thp.unit[i]);
}

/* Chunk i's used word becomes `used`, its bit in room with it. */
static void thp_set_used(unsigned i, uint32_t used)
{
    thp.used[i] = used;
    if (used == UINT32_MAX)
        thp.room[i / 64] &= ~((uint64_t)1 << (i % 64));
    else
        thp.room[i / 64] |= (uint64_t)1 << (i % 64);
}

/* The first unit of a free run of n units aligned to n in chunk i, or THP_UNITS. */
static unsigned thp_fit(unsigned i, unsigned n)
{
    uint32_t mask = thp_run(n);
    unsigned at = 0;
    while (at < THP_UNITS && (thp.used[i] & (mask << at)))
        at += n;
    return at;
}

/* A dense span of `order` (< THP_ORDER) from a chunk with room (the one used last, then the
 * lowest), or from a new chunk; 0 where there is none (below THP_FROM, no chunk left, the
 * pages refused). */
static uintptr_t thp_take(unsigned order)
{
    if (!usi_options.huge_pages || thp.refused || pages.committed - usi_pagemap.base < THP_FROM)
        return 0;
    unsigned n = 1u << order, i = thp.cur, at = thp.n ? thp_fit(i, n) : THP_UNITS;
    for (unsigned w = 0; at == THP_UNITS && w < (thp.n + 63) / 64; w++)
        for (uint64_t bits = thp.room[w]; at == THP_UNITS && bits; bits &= bits - 1) {
            i = w * 64 + (unsigned)__builtin_ctzll(bits);
            at = thp_fit(i, n);
        }
    if (at < THP_UNITS) {
        thp_set_used(i, thp.used[i] | thp_run(n) << at);
        thp.cur = i;
        return thp_chunk(i) + ((uintptr_t)at << USI_UNIT_SHIFT);
    }
    if (thp.n == THP_CHUNKS)
        return 0;
    if (usi_os_locks_future()) { /* every committed page is resident anyway (design §2) */
        thp.refused = 1;
        return 0;
    }
    uintptr_t c = span_pop(THP_ORDER);
    if (!c)
        c = bump_take(THP_ORDER);
    if (!c)
        return 0;
    usi_os_huge_pages((void *)c, span_bytes(THP_ORDER), 1);
    i = thp.cur = thp.n++;
    thp.unit[i] = unit_of(c);
    thp_set_used(i, thp_run(n));
    thp.split[i] = 0;
    for (uint32_t u = 0; u < THP_UNITS; u++)
        *span_link(thp.unit[i] + u) = THP_LINK | i;
    return c;
}

/* The chunk of a span being freed, or -1: not a chunk's. */
static int thp_chunk_of(uintptr_t span)
{
    uint32_t link = *span_link(unit_of(span));
    return link & THP_LINK ? (int)(link & ~THP_LINK) : -1;
}

void *usi_pages_alloc_span(unsigned order, int dense)
{
    int saved_errno = errno; /* the system calls of a growth or commit may set it */
    usi_lock(&pages.lock);
    uintptr_t s = dense && order < THP_ORDER ? thp_take(order) : 0;
    if (!s)
        s = span_pop(order);
    if (!s)
        s = bump_take(order);
    for (unsigned o = order + 1; !s && o < USI_SPAN_ORDERS; o++) {
        uintptr_t big = span_pop(o);
        if (!big)
            continue;
        /* Split: keep the lowest piece, give the upper halves back to the lists. */
        for (unsigned k = o; k > order; k--)
            span_push(big + span_bytes(k - 1), k - 1);
        s = big;
    }
    usi_unlock(&pages.lock);
    errno = saved_errno;
    return (void *)s; /* NULL: the caller says why (errno untouched here) */
}

enum { PURGED, REPLACED, ZEROED, ABANDONED };

/*
 * Makes a freed span read as zero, giving its memory back where the kernel lets us
 * (design §2). The slab layer trusts that: a reused span's header and bitmap must be zero.
 * MADV_DONTNEED fails on locked pages (mlock, mlockall): then a fresh mapping goes over the
 * span. If that fails too, the span holds its old contents, or nothing where the kernel
 * unmapped it before failing: a mapped span is zeroed by hand (its memory stays until it is
 * reused: locked pages, a shortage of mappings, or strict seccomp mode), a hole
 * is filled with zero pages unless something else took it. ABANDONED: none of that worked.
 */
static int span_discard(void *span, size_t size, int guarded)
{
    /* Under strict seccomp mode every call would kill the process: zeroed by hand. */
    if (usi_os_quiet()) {
        if (guarded)
            return ABANDONED;
        USI_VG_UNDEFINED(span, size);
        memset(span, 0, size);
        return ZEROED;
    }
    /* A span whose guard pages are still PROT_NONE needs a fresh mapping, and can be
     * neither purged nor zeroed by hand. */
    if (!guarded && usi_os_purge(span, size) == 0)
        return PURGED;
    if (usi_os_replace(span, size) == 0)
        return REPLACED;
    if (guarded)
        return ABANDONED;
    if (usi_os_is_mapped(span, size)) {
        USI_VG_UNDEFINED(span, size);
        memset(span, 0, size);
        return ZEROED;
    }
    return usi_os_map_at(span, size) == 0 ? REPLACED : ABANDONED;
}

/* A span neither zero nor surely ours: never reused; only its address space is lost. */
static void abandon(void *span, size_t bytes)
{
    usi_lock(&pages.lock);
    int first = pages.abandoned == 0;
    pages.abandoned += bytes;
    usi_unlock(&pages.lock);
    if (first)
        usi_report_note("span %p (%zu KiB) could not be purged, replaced or zeroed; its address "
                        "space is abandoned",
                        span, bytes >> 10);
}

/* Under pages.lock: chunk i, in use, gets no more huge pages, and its free units (resident
 * in the huge page its first span faulted) are purged, a run at a time. A purge that fails
 * leaves zeros: a chunk's free units were never written or were purged already. */
static void thp_split(unsigned i)
{
    uintptr_t c = thp_chunk(i);
    uint32_t used = thp.used[i];
    if (!thp.split[i]) {
        thp.split[i] = 1;
        usi_os_huge_pages((void *)c, span_bytes(THP_ORDER), 0);
    }
    for (uint32_t u = 0; u < THP_UNITS; u++)
        if (!((used >> u) & 1)) {
            uint32_t end = u;
            while (end < THP_UNITS && !((used >> end) & 1))
                end++;
            (void)usi_os_purge((void *)(c + ((uintptr_t)u << USI_UNIT_SHIFT)),
                               (size_t)(end - u) << USI_UNIT_SHIFT);
            u = end;
        }
}

void usi_pages_trim(void)
{
    usi_lock(&pages.lock);
    for (unsigned i = 0; i < thp.n; i++) /* split ones too: what khugepaged made resident */
        if (thp.used[i] && thp.used[i] != UINT32_MAX)
            thp_split(i);
    usi_unlock(&pages.lock);
}

/*
 * A span of chunk i back, purged. While other spans of the chunk are in use the chunk is
 * split first (thp_split, under the lock: no other thread takes its free units meanwhile;
 * khugepaged would make the purged pages resident again). The last span of a chunk purges
 * the whole chunk, which is taken whole meanwhile, and the chunk gets huge pages again.
 * Where the span cannot be made zero again it stays taken.
 */
static void thp_give(unsigned i, uintptr_t span, unsigned order)
{
    uintptr_t c = thp_chunk(i);
    usi_lock(&pages.lock);
    uint32_t bits = thp_bits(i, unit_of(span), order), used = thp.used[i];
    USI_ASSERT((used & bits) == bits);
    int whole = (used & ~bits) == 0;
    if (!whole && !thp.split[i])
        thp_split(i);
    if (whole) /* taken whole while it is purged */
        thp_set_used(i, UINT32_MAX);
    usi_unlock(&pages.lock);
    int how = whole ? span_discard((void *)c, span_bytes(THP_ORDER), 0)
                    : span_discard((void *)span, span_bytes(order), 0);
    if (how == ABANDONED) { /* stays taken: never reused */
        abandon(whole ? (void *)c : (void *)span,
                whole ? span_bytes(THP_ORDER) : span_bytes(order));
        return;
    }
    usi_lock(&pages.lock);
    thp_set_used(i, whole ? 0 : thp.used[i] & ~bits);
    if (!thp.used[i] && thp.split[i]) {
        thp.split[i] = 0;
        usi_os_huge_pages((void *)c, span_bytes(THP_ORDER), 1);
    }
    usi_unlock(&pages.lock);
}

void usi_pages_free_span(void *span, unsigned order, size_t guard, int guard_how)
{
    /* Guard pages back to read/write; where that fails, the whole span is replaced. */
    int guarded =
        guard && (usi_os_quiet() || usi_os_unguard(span, guard, guard_how) != 0 ||
                  usi_os_unguard((char *)span + span_bytes(order) - guard, guard, guard_how) != 0);
    /* A chunk's span (thp_give) */
    int chunk = thp_chunk_of((uintptr_t)span);
    if (chunk >= 0) {
        thp_give((unsigned)chunk, (uintptr_t)span, order);
        return;
    }
    /* Outside the lock: madvise can be slow, the fallbacks more so. */
    int how = span_discard(span, span_bytes(order), guarded);
    if (how == ABANDONED) {
        abandon(span, span_bytes(order));
        return;
    }
    usi_lock(&pages.lock);
    span_push((uintptr_t)span, order);
    usi_unlock(&pages.lock);
}

size_t usi_pages_abandoned_bytes(void)
{
    usi_lock(&pages.lock);
    size_t n = pages.abandoned;
    usi_unlock(&pages.lock);
    return n;
}

/* Set once guard markers were refused: a kernel older than 6.13 or mlockall (EINVAL), or a
 * seccomp filter that allows only some advice (OpenSSH's pre-auth sandbox answers EINVAL;
 * another may answer EPERM). A shortage (EAGAIN, ENOMEM) refuses only that span's. */
static int markers_refused;

int usi_pages_guard(void *span, size_t size, size_t guard, int *how)
{
    char *last = (char *)span + size - guard;
    for (int h = __atomic_load_n(&markers_refused, __ATOMIC_RELAXED) ? USI_GUARD_PROT
                                                                     : USI_GUARD_MARKERS;
         h <= USI_GUARD_PROT; h++) {
        *how = h;
        if (usi_os_guard(span, guard, h) != 0) {
            if (h == USI_GUARD_MARKERS && (errno == EINVAL || errno == EPERM))
                __atomic_store_n(&markers_refused, 1, __ATOMIC_RELAXED);
            continue; /* nothing made */
        }
        return usi_os_guard(last, guard, h); /* on failure the first stays, made `h` */
    }
    return -1;
}

void usi_pages_set_owner(void *span, unsigned order, uintptr_t entry, uint16_t unit_tag)
{
    uint32_t u = unit_of((uintptr_t)span);
    for (size_t i = 0; i < ((size_t)1 << order); i++) {
        __atomic_store_n(&usi_pagemap.map[u + i], entry, __ATOMIC_RELEASE);
        __atomic_store_n(&usi_pagemap.tags[u + i], unit_tag, __ATOMIC_RELAXED);
    }
}

void usi_pages_prefork(void)
{
    usi_lock(&pages.lock);
}

void usi_pages_postfork(int child)
{
    if (child)
        usi_mutex_init(&pages.lock);
    else
        usi_unlock(&pages.lock);
}
