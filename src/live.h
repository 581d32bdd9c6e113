/* SPDX-License-Identifier: MIT */
/*
 * live.h - the statistics of a running process (docs/design.md §10.1): the records of
 * uslab_stats_print, USLAB_STATS and `uslab stats PID` / `uslab top PID` (one per cache in
 * use, with the process's figures), and the map with which the tool reads them from the
 * process's memory (process_vm_readv). Shared by the library (live.c, stats.c, statsfmt.c)
 * and the tool (tools/top.c), which includes it without linking the library: fixed-width
 * fields, inline helpers only, and at the end the declarations of live.c, which the tool
 * never calls. The header of the live statistics layer (rank 16; docs/design.md §1).
 */
#ifndef USLAB_LIVE_H
#define USLAB_LIVE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Hidden in the library (as every header's declarations); harmless in the tool. */
#pragma GCC visibility push(hidden)

/* The process's figures beside its records. Invariant: ncaches <= caches_in_use (the
 * caches in use that did not fit are counted, not shown). */
struct usi_live_header {
    int32_t pid;                 /* the process (0 in the library's own reports) */
    uint32_t lib_version;        /* uslab's version: major << 16 | minor */
    uint64_t updated_ms;         /* CLOCK_MONOTONIC time of the reading, in ms */
    uint64_t updates;            /* readings so far (the tool's) */
    uint32_t ncaches;            /* records that are valid */
    uint32_t caches_in_use;      /* caches with slabs or objects out */
    uint64_t reserved_bytes;     /* address space reserved for slabs */
    uint64_t thread_cache_bytes; /* bytes the threads' magazines may hold */
    uint64_t thread_cache_max;   /* USLAB_TCACHE_MAX */
    uint64_t large_blocks;       /* blocks above the slab classes (glibc's) live now */
    uint64_t large_bytes;        /* their bytes (malloc_usable_size) */
    uint64_t large_peak;         /* the most large_bytes was */
    uint64_t rss_bytes;          /* the process's resident memory (VmRSS); 0: unknown */
    uint64_t rss_peak;           /* its peak (VmHWM) */
};

/* The counts of the blocks above the slab classes (malloc.c keeps them, on glibc's paths
 * only): blocks and bytes live, and the most bytes at once. */
struct usi_large_counts {
    uint64_t blocks, bytes, peak;
};

/*
 * One cache, as uslab_stats_print shows it (design §10). Counts are read under the cache's
 * lock, except cached_thread, which sums the threads' magazines without stopping them.
 * Invariants: total_objects <= slabs * objs_per_slab (equal but for a malloc class, whose
 * slabs hold what fits after their lattice's phase), slabs = partial + full + empty,
 * active + cached_thread + cached_depot = slab_takes - slab_puts (objects out of the slabs;
 * cached_thread is clamped to keep it so), resident_bytes <= slabs * slab_size.
 */
struct usi_live_cache {
    char name[32];          /* NUL-terminated */
    uint64_t id;            /* the cache id (malloc classes 1..96) */
    uint64_t object_size;   /* the size asked for */
    uint64_t stride;        /* the size of a slot in the slab */
    uint64_t slab_size;     /* bytes per slab */
    uint64_t objs_per_slab; /* the most objects a slab holds */
    uint64_t slabs, partial, full, empty;
    uint64_t total_objects;         /* objects the slabs hold room for */
    uint64_t active;                /* objects the program holds */
    uint64_t cached_thread;         /* objects in the threads' magazines */
    uint64_t cached_depot;          /* in the depot's full magazines and its flushes */
    uint64_t resident_bytes;        /* pages of its slabs that objects have been in (an estimate) */
    uint64_t slab_takes, slab_puts; /* cumulative: objects taken from and returned to slabs */
    uint64_t depot_in, depot_out;   /* cumulative: objects given to and taken from the depot */
    uint64_t slabs_created, slabs_released; /* cumulative */
    uint32_t magazine;                      /* capacity of new magazines (0: none) */
    uint32_t debug;                         /* USI_DEBUG_* letters (settings.h) */
};

_Static_assert(sizeof(struct usi_live_cache) == 200, "a record has no padding");

/*
 * The map of a process's caches (design §10.1): one exported object, `uslab_introspect`,
 * which the `uslab` tool finds in the process's symbol table and reads with
 * process_vm_readv, with what it needs to read the caches and thread caches themselves: the
 * addresses of their tables and the offsets of the fields it reads. The process does
 * nothing for it: no file, no thread, no update, no hook. Filled once at initialisation,
 * `ready` set last. Invariant: a change of anything the tool reads (a field's meaning or
 * width, this layout) changes USI_INTROSPECT_VERSION, and the tool refuses another.
 * Widths in the process: c_name is char[32]; c_nobjs, c_mag_capacity, c_debug, t_npairs and
 * m_rounds are 4 bytes; every other field named is 8 bytes (pointers, sizes, counts).
 */
#define USI_INTROSPECT_SYMBOL  "uslab_introspect"
#define USI_INTROSPECT_MAGIC   "USLABMAP" /* 8 bytes, no terminating NUL */
#define USI_INTROSPECT_VERSION 3u
struct usi_introspect {
    char magic[8];
    uint32_t version;      /* USI_INTROSPECT_VERSION */
    uint32_t bytes;        /* sizeof(struct usi_introspect) */
    uint32_t lib_version;  /* major << 16 | minor */
    uint32_t ready;        /* 1 once every field is set (atomic store, last) */
    uint64_t caches;       /* address of struct uslab_cache *[max_ids] (NULL: no cache) */
    uint64_t tcaches;      /* address of the pointer to the first thread cache */
    uint64_t reserved;     /* address of the bytes reserved for slabs */
    uint64_t tcache_bytes; /* address of the bytes threads' magazines may cache */
    uint64_t tcache_max;   /* USLAB_TCACHE_MAX, a value */
    uint32_t max_ids;      /* entries of the cache table */
    uint32_t page_size;    /* a thread cache's pair_pages has a bit per page of it */
    /* struct uslab_cache */
    uint32_t cache_bytes;
    uint32_t c_name, c_id, c_size, c_stride, c_slab_size, c_nobjs, c_mag_capacity, c_debug;
    uint32_t c_lists, list_bytes, list_count; /* lists[partial, full, empty]: the array, its
                                               * stride, the count's offset in an entry */
    uint32_t c_slab_inuse, c_depot_rounds, c_touched, c_slab_takes, c_slab_puts, c_depot_in,
        c_depot_out, c_slabs_created, c_slabs_released, c_slab_objects;
    /* struct usi_tcache, its pairs (struct usi_magpair) and magazines (struct usi_mag) */
    uint32_t t_next, t_npairs, t_pair_pages, t_pair_pages_words, t_pairs, pair_bytes;
    uint32_t p_top, p_base, p_prev, m_rounds;
    uint64_t large; /* address of the struct usi_large_counts */
};
_Static_assert(sizeof(struct usi_introspect) == 208, "the map has no padding");

/* The objects a cache churned between two readings: those that went through its depot or
 * its slab layer (the fast paths count nothing, so magazine hits are not in it). */
static inline uint64_t usi_live_churn(const struct usi_live_cache *now,
                                      const struct usi_live_cache *before)
{
    return (now->slab_takes - before->slab_takes) + (now->slab_puts - before->slab_puts) +
           (now->depot_in - before->depot_in) + (now->depot_out - before->depot_out);
}

/*
 * statsfmt.c (with stats.c, design §10): the statistics as text, the same for
 * uslab_stats_print and USLAB_STATS (the library) and `uslab stats PID` (the tool). From
 * h: lib_version, reserved_bytes, thread_cache_bytes, thread_cache_max.
 *  - the table has the columns of Linux's slabinfo plus Resident, one row per record, then
 *    a line on the thread caches and the reservation;
 *  - the JSON is {"uslab":{...},"caches":[...]}; `more` is added to the "uslab" object as
 *    is (",\"key\":value..." or "").
 */
void usi_statsfmt_table(FILE *f, const struct usi_live_header *h, const struct usi_live_cache *r,
                        size_t n);
/* The totals under the table and in the JSON: the program's caches and malloc classes
 * (objects in use, their bytes, slab bytes held, resident), uslab's own caches (names
 * `uslab-...`), and the system allocator's blocks from h, clamped at 0. */
struct usi_statsfmt_totals {
    uint64_t objects, in_use, held, resident, own_bytes, large_blocks, large_bytes;
};
void usi_statsfmt_totals(const struct usi_live_header *h, const struct usi_live_cache *r, size_t n,
                         struct usi_statsfmt_totals *t);
int usi_statsfmt_internal(const struct usi_live_cache *c); /* one of uslab's own caches */
/* VmRSS and VmHWM of a /proc/PID/status text, in bytes (0 where missing). */
void usi_statsfmt_rss(const char *status, uint64_t *rss, uint64_t *peak);
void usi_statsfmt_json(FILE *f, const struct usi_live_header *h, const struct usi_live_cache *r,
                       size_t n, const char *more);
/* s as the contents of a JSON string (quotes, backslashes and control characters escaped). */
void usi_statsfmt_json_string(FILE *f, const char *s);
/* A cache's name fit for a terminal: a copy into out (size > 0) with every control
 * character (below 0x20, and 0x7f) as '?', so that a name cannot move the cursor or start a
 * new row of a table (session 16's audit); JSON escapes them instead. Returns out. */
const char *usi_statsfmt_name(const char *name, char *out, size_t size);
/* bytes in 7 columns: "1234567" below 1 KiB, else "  12.3K", "1023.9M"... */
void usi_statsfmt_size(FILE *f, uint64_t bytes);

/* live.c: snapshots of the caches for the statistics (the library only) */

struct uslab_cache;
/* malloc.c's counts of the system allocator's blocks: blocks, bytes, peak bytes (struct
 * usi_large_counts above). */
extern uint64_t usi_large_counts[3];
/* A snapshot of c as the live page and uslab_stats_print show it: counts under c's lock,
 * the threads' magazines read without stopping them. Returns whether c is in use (has
 * slabs or objects out of them). */
int usi_live_snap_cache(const struct uslab_cache *c, struct usi_live_cache *r);
/* The same for a report that must never wait (USLAB_STATS at exit, design §10): each lock
 * is tried for up to ms milliseconds (usi_trylock_for). *threads: whether to count the
 * threads' magazines; set to 0 when their list's lock was busy (their objects then count
 * as active, and later calls skip the lock). 1 or 0 as above, or -1: c's lock was busy,
 * r holds nothing. */
int usi_live_try_snap_cache(const struct uslab_cache *c, struct usi_live_cache *r, unsigned ms,
                            int *threads);
/* Fills the map above (`uslab_introspect`) once, at initialisation. */
void usi_live_init_map(void);
/* The statistics of every cache on f, as a table or JSON (USLAB_STATS_TABLE or _JSON):
 * uslab_stats_print's text; at exit (at_exit) no lock is waited for, and what could not be
 * locked is named as not scanned; with `disabled`, only that the slabs are disabled.
 * 0, or -1 without memory for the snapshots. */
int usi_live_print_all(FILE *f, int format, int at_exit, int disabled);

#pragma GCC visibility pop

#endif
