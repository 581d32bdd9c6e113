/* SPDX-License-Identifier: MIT */
/*
 * live.h - the live statistics page (docs/design.md §10.1): its format, shared by the
 * library, which writes it (live.c), and the `uslab` tool, which reads it (`uslab stats
 * PID`, `uslab top PID`).
 *
 * A process that uses uslab publishes the statistics of its caches in a file of tmpfs,
 * /dev/shm/uslab.<euid>.<pid>, mode 0600, that it maps shared: a header, then up to
 * `capacity` records, one per cache in use. One writer at a time updates it under a
 * seqlock: `seq` is odd while the writer changes anything after it, and a reader that saw
 * the same even value before and after its copy has a consistent snapshot.
 *
 * Self-contained (the C library's string functions; the helpers are inline), so that the
 * tool includes it without linking the library; the text of the statistics, made from the
 * records, is statsfmt.c, which the tool compiles in as it does settings.c. Every field is
 * of a fixed width: the writer and the reader may be built apart. A change of layout
 * changes USI_LIVE_VERSION.
 */
#ifndef USLAB_LIVE_H
#define USLAB_LIVE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Hidden in the library (as internal.h's declarations); harmless in the tool. */
#pragma GCC visibility push(hidden)

#define USI_LIVE_DIR     "/dev/shm"
#define USI_LIVE_PREFIX  "uslab."
#define USI_LIVE_MAGIC   "USLABLIV" /* 8 bytes, no terminating NUL in the page */
#define USI_LIVE_VERSION 1u
/* Records a page has room for: the malloc classes, uslab's own caches and 400 more. */
#define USI_LIVE_CAPACITY 512u
/* The shortest time between two updates made on slow paths or by the purger (ms);
 * uslab_cache_reap and uslab_reap publish at once. */
#define USI_LIVE_INTERVAL_MS 200u
/* USLAB_LIVE=auto: no page before a process (or fork child) has allocated for this long
 * (ms), counted from its first slow path; uslab_reap publishes at once. */
#define USI_LIVE_FIRST_MS 1000u

/*
 * The header. Invariants: magic, version, header_bytes, record_bytes, capacity, pid, uid
 * and start_time are written once, before the file is complete, and never change; seq is
 * even except while the writer changes what follows it; when it is even, records[0 ..
 * ncaches) are the caches that were in use at updated_ms, in cache id order, ncaches <=
 * capacity, and caches_in_use >= ncaches counts those that did not fit too.
 */
struct usi_live_header {
    char magic[8];         /* USI_LIVE_MAGIC */
    uint32_t version;      /* USI_LIVE_VERSION */
    uint32_t header_bytes; /* sizeof(struct usi_live_header): where the records start */
    uint32_t record_bytes; /* sizeof(struct usi_live_cache) */
    uint32_t capacity;     /* records the file has room for */
    int32_t pid;           /* the process that writes it */
    uint32_t uid;          /* its effective user id, also in the file name */
    uint64_t start_time;   /* field 22 of /proc/<pid>/stat: clock ticks after boot */
    /* Up to here the layout is the same in every version: a sweeper of stale pages reads
     * start_time from pages of other versions too. */
    uint32_t lib_version;        /* uslab's version of the writer: major << 16 | minor */
    uint32_t flags;              /* 0 (none defined yet) */
    uint64_t seq;                /* the seqlock */
    uint64_t updated_ms;         /* CLOCK_MONOTONIC time of the last update, in ms */
    uint64_t updates;            /* updates so far */
    uint32_t ncaches;            /* records that are valid */
    uint32_t caches_in_use;      /* caches with slabs or objects out, also those that did not fit */
    uint64_t reserved_bytes;     /* address space reserved for slabs */
    uint64_t thread_cache_bytes; /* bytes the threads' magazines may hold */
    uint64_t thread_cache_max;   /* USLAB_TCACHE_MAX */
};

/*
 * One cache, as uslab_stats_print shows it (design §10). Counts are read under the cache's
 * lock, except cached_thread, which sums the threads' magazines without stopping them.
 * Invariants: total_objects = slabs * objs_per_slab, slabs = partial + full + empty,
 * active + cached_thread + cached_depot = slab_takes - slab_puts (objects out of the slabs;
 * cached_thread is clamped to keep it so), resident_bytes <= slabs * slab_size.
 */
struct usi_live_cache {
    char name[32];          /* NUL-terminated */
    uint64_t id;            /* the cache id (malloc classes 1..96) */
    uint64_t object_size;   /* the size asked for */
    uint64_t stride;        /* the size of a slot in the slab */
    uint64_t slab_size;     /* bytes per slab */
    uint64_t objs_per_slab; /* objects per slab */
    uint64_t slabs, partial, full, empty;
    uint64_t total_objects;         /* objects the slabs hold room for */
    uint64_t active;                /* objects the program holds */
    uint64_t cached_thread;         /* objects in the threads' magazines */
    uint64_t cached_depot;          /* objects in the depot's full magazines */
    uint64_t resident_bytes;        /* pages of its slabs that objects have been in (an estimate) */
    uint64_t slab_takes, slab_puts; /* cumulative: objects taken from and returned to slabs */
    uint64_t depot_in, depot_out;   /* cumulative: objects given to and taken from the depot */
    uint64_t slabs_created, slabs_released; /* cumulative */
    uint32_t magazine;                      /* capacity of new magazines (0: none) */
    uint32_t debug;                         /* USI_DEBUG_* letters (settings.h) */
};

_Static_assert(sizeof(struct usi_live_header) == 104, "the header has no padding");
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
#define USI_INTROSPECT_VERSION 1u
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
        c_depot_out, c_slabs_created, c_slabs_released;
    /* struct usi_tcache, its pairs (struct usi_magpair) and magazines (struct usi_mag) */
    uint32_t t_next, t_npairs, t_pair_pages, t_pair_pages_words, t_pairs, pair_bytes;
    uint32_t p_top, p_base, p_prev, m_rounds;
    uint32_t spare; /* 0 */
};
_Static_assert(sizeof(struct usi_introspect) == 200, "the map has no padding");

/* Bytes of a page of USI_LIVE_CAPACITY records, rounded up to 4 KiB pages. */
#define USI_LIVE_FILE_BYTES                                                                        \
    ((sizeof(struct usi_live_header) + USI_LIVE_CAPACITY * sizeof(struct usi_live_cache) + 4095) & \
     ~(size_t)4095)

/* Whether a page may be made in a filesystem of size_bytes with free_bytes free (statfs of
 * USI_LIVE_DIR; size 0: no size given, as a tmpfs of size=0). The pages are a convenience
 * and must not take the room a program counts on (a container's small /dev/shm, where
 * posix_fallocate or shm_open would then fail with ENOSPC): after the page, at least
 * USI_LIVE_MIN_FREE bytes and half of the filesystem must stay free. So a /dev/shm below
 * 16 MiB gets no page at all, and the pages of all processes together never take the
 * upper half of any /dev/shm, nor anything of one the program already half fills. */
#define USI_LIVE_MIN_FREE ((uint64_t)16 << 20)
static inline int usi_live_room(uint64_t size_bytes, uint64_t free_bytes, uint64_t page_bytes)
{
    if (size_bytes == 0)
        return 1;
    if (free_bytes < page_bytes)
        return 0;
    uint64_t after = free_bytes - page_bytes;
    return after >= USI_LIVE_MIN_FREE && after >= size_bytes / 2;
}

/* The objects a cache churned between two readings: those that went through its depot or
 * its slab layer (the fast paths count nothing, so magazine hits are not in it). */
static inline uint64_t usi_live_churn(const struct usi_live_cache *now,
                                      const struct usi_live_cache *before)
{
    return (now->slab_takes - before->slab_takes) + (now->slab_puts - before->slab_puts) +
           (now->depot_in - before->depot_in) + (now->depot_out - before->depot_out);
}

/* Writes v in decimal at p; returns the end. */
static inline char *usi_live_put_decimal(char *p, uint64_t v)
{
    char digits[24];
    int n = 0;
    do
        digits[n++] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    while (n)
        *p++ = digits[--n];
    return p;
}

/* The page's path for a user and process, in buf (at least USI_LIVE_PATH_MAX bytes). */
#define USI_LIVE_PATH_MAX 64
static inline void usi_live_path(char *buf, unsigned uid, int pid)
{
    char *p = buf;
    memcpy(p, USI_LIVE_DIR "/" USI_LIVE_PREFIX, sizeof USI_LIVE_DIR "/" USI_LIVE_PREFIX - 1);
    p += sizeof USI_LIVE_DIR "/" USI_LIVE_PREFIX - 1;
    p = usi_live_put_decimal(p, uid);
    *p++ = '.';
    p = usi_live_put_decimal(p, (uint64_t)(unsigned)pid);
    *p = '\0';
}

/* Parses a decimal number without sign or leading zero from *s, advancing it; 0 or -1. */
static inline int usi_live_get_decimal(const char **s, uint64_t *v)
{
    const char *p = *s;
    uint64_t x = 0;
    if (*p < '0' || *p > '9' || (*p == '0' && p[1] >= '0' && p[1] <= '9'))
        return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (x > (UINT64_MAX - 9) / 10)
            return -1;
        x = x * 10 + (uint64_t)(*p - '0');
    }
    *s = p;
    *v = x;
    return 0;
}

/* Whether a file name of USI_LIVE_DIR is a page, "uslab.<uid>.<pid>"; its uid and pid. */
static inline int usi_live_parse_name(const char *name, unsigned *uid, int *pid)
{
    uint64_t u, p;
    if (strncmp(name, USI_LIVE_PREFIX, sizeof USI_LIVE_PREFIX - 1) != 0)
        return 0;
    name += sizeof USI_LIVE_PREFIX - 1;
    if (usi_live_get_decimal(&name, &u) != 0 || *name++ != '.' ||
        usi_live_get_decimal(&name, &p) != 0 || *name != '\0' || u > UINT32_MAX || p == 0 ||
        p > INT32_MAX)
        return 0;
    *uid = (unsigned)u;
    *pid = (int)p;
    return 1;
}

/* From the text of /proc/<pid>/stat (len bytes): the state letter (field 3) and the start
 * time (field 22, clock ticks after boot). The command name (field 2, in parentheses) may
 * hold anything, so fields are counted from its last ')'. 0, or -1 if malformed. */
static inline int usi_live_parse_stat(const char *text, size_t len, char *state, uint64_t *start)
{
    size_t i = len;
    while (i > 0 && text[i - 1] != ')')
        i--;
    if (i == 0 || i + 2 >= len || text[i] != ' ')
        return -1;
    *state = text[i + 1];
    /* After ") S": 18 more fields, each preceded by a space, to reach field 22. */
    unsigned field = 3;
    for (i += 2; i < len && field < 22; i++)
        if (text[i] == ' ')
            field++;
    if (field != 22)
        return -1;
    uint64_t v = 0;
    size_t digits = 0;
    for (; i < len && text[i] >= '0' && text[i] <= '9'; i++, digits++)
        v = v * 10 + (uint64_t)(text[i] - '0');
    if (digits == 0)
        return -1;
    *start = v;
    return 0;
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

#pragma GCC visibility pop

#endif
