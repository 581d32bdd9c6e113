/* SPDX-License-Identifier: MIT */
/*
 * live.c - the statistics of a running process (docs/design.md §10.1): snapshots of a
 * cache's counts (uslab_cache_stats, uslab_stats_print, USLAB_STATS at exit), and the map
 * (`uslab_introspect`, live.h) with which `uslab stats PID` and `uslab top PID` read them
 * from outside, with process_vm_readv. The process writes no file, starts no thread and
 * does nothing at all for the tool: the map is filled once at initialisation.
 */
#include "live.h"
#include "base.h"
#include "depot.h"
#include "descriptor.h"
#include "options.h"
#include "os.h"
#include "pages.h"
#include "registry.h"
#include "tcache.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* malloc.c's counts of the system allocator's blocks (live.h), kept here, below it, for
 * the statistics and the tool's map. */
uint64_t usi_large_counts[3];

/* ---- snapshots --------------------------------------------------------------------------- */

/* The counts kept under c's lock (held), into r; returns the objects out of the slabs. */
static uint64_t snap_counts(const struct uslab_cache *c, struct usi_live_cache *r)
{
    r->partial = c->lists[USI_SLAB_PARTIAL].count;
    r->full = c->lists[USI_SLAB_FULL].count;
    r->empty = c->lists[USI_SLAB_EMPTY].count;
    /* The depot's full magazines, and those taken out to be flushed whose objects are not
     * back in their slabs yet (depot.c's in-flight list): the cache's, not the program's.
     * Counted as active, they made a reap that ran beside another thread's flush (a purger
     * pass) report objects the program had freed (TSan stress, constructed_shrink_thread). */
    uint64_t flushing = 0;
    for (const struct usi_mag *m = c->in_flight; m; m = m->flight_next)
        flushing += m->rounds;
    r->cached_depot = c->depot_rounds + flushing;
    r->resident_bytes = c->touched_bytes;
    r->slab_takes = c->slab_takes;
    r->slab_puts = c->slab_puts;
    r->depot_in = c->depot_in;
    r->depot_out = c->depot_out;
    r->slabs_created = c->slabs_created;
    r->slabs_released = c->slabs_released;
    return c->slab_inuse; /* = slab_takes - slab_puts */
}

/* The rest of r, from c's geometry, the counts and the threads' part; whether c is in use. */
static int snap_finish(const struct uslab_cache *c, struct usi_live_cache *r, uint64_t out,
                       uint64_t thread_cached)
{
    memcpy(r->name, c->name, sizeof r->name);
    r->name[sizeof r->name - 1] = '\0';
    r->id = c->id;
    r->object_size = c->size;
    r->stride = c->stride;
    r->slab_size = c->slab_size;
    r->objs_per_slab = c->nobjs;
    r->slabs = r->partial + r->full + r->empty;
    r->total_objects = c->slab_objects;
    r->magazine = __atomic_load_n(&c->mag_capacity, __ATOMIC_RELAXED);
    r->debug = c->debug;
    /* The threads' part is read without their locks while they go on: clamp it to what
     * is out of the slabs and not in the depot, so that the counts add up. */
    uint64_t room = out > r->cached_depot ? out - r->cached_depot : 0;
    r->cached_thread = thread_cached < room ? thread_cached : room;
    r->active = room - r->cached_thread;
    return r->slabs != 0 || out != 0;
}

int usi_live_snap_cache(const struct uslab_cache *c, struct usi_live_cache *r)
{
    memset(r, 0, sizeof *r);
    uint64_t thread_cached = usi_tcache_cached_objects(c);
    usi_mutex *lock = (usi_mutex *)&c->lock;
    usi_lock(lock);
    uint64_t out = snap_counts(c, r);
    usi_unlock(lock);
    return snap_finish(c, r, out, thread_cached);
}

int usi_live_try_snap_cache(const struct uslab_cache *c, struct usi_live_cache *r, unsigned ms,
                            int *threads)
{
    memset(r, 0, sizeof *r);
    size_t thread_cached = 0;
    if (*threads && usi_tcache_try_cached_objects(c, ms, &thread_cached) != 0)
        *threads = 0;
    usi_mutex *lock = (usi_mutex *)&c->lock;
    if (usi_trylock_for(lock, ms) != 0)
        return -1;
    uint64_t out = snap_counts(c, r);
    usi_unlock(lock);
    return snap_finish(c, r, out, thread_cached);
}

/* ---- the map ----------------------------------------------------------------------------- */

#include "uslab.h"

/* Exported (the one data symbol of the library): `uslab stats PID` finds it by name. */
USLAB_API struct usi_introspect uslab_introspect;

void usi_live_init_map(void)
{
    struct usi_introspect *m = &uslab_introspect;
    if (__atomic_load_n(&m->ready, __ATOMIC_ACQUIRE))
        return;
    memcpy(m->magic, USI_INTROSPECT_MAGIC, sizeof m->magic);
    m->version = USI_INTROSPECT_VERSION;
    m->bytes = sizeof *m;
    m->lib_version = (uint32_t)USLAB_VERSION_MAJOR << 16 | USLAB_VERSION_MINOR;
    m->caches = (uint64_t)(uintptr_t)usi_caches;
    m->tcaches = (uint64_t)(uintptr_t)usi_tcache_registry_address();
    m->reserved = (uint64_t)(uintptr_t)usi_pages_reserved_address();
    m->tcache_bytes = (uint64_t)(uintptr_t)&usi_tcache_bytes;
    m->tcache_max = usi_options.tcache_max;
    m->large = (uint64_t)(uintptr_t)usi_large_counts;
    m->max_ids = USI_MAX_IDS;
    m->page_size = USI_PAGE_SIZE;
#define OFF(type, field) ((uint32_t)offsetof(type, field))
    m->cache_bytes = sizeof(struct uslab_cache);
    m->c_name = OFF(struct uslab_cache, name);
    m->c_id = OFF(struct uslab_cache, id);
    m->c_size = OFF(struct uslab_cache, size);
    m->c_stride = OFF(struct uslab_cache, stride);
    m->c_slab_size = OFF(struct uslab_cache, slab_size);
    m->c_nobjs = OFF(struct uslab_cache, nobjs);
    m->c_mag_capacity = OFF(struct uslab_cache, mag_capacity);
    m->c_debug = OFF(struct uslab_cache, debug);
    m->c_lists = OFF(struct uslab_cache, lists);
    m->list_bytes = sizeof(struct usi_slab_list_head);
    m->list_count = OFF(struct usi_slab_list_head, count);
    m->c_slab_inuse = OFF(struct uslab_cache, slab_inuse);
    m->c_depot_rounds = OFF(struct uslab_cache, depot_rounds);
    m->c_touched = OFF(struct uslab_cache, touched_bytes);
    m->c_slab_takes = OFF(struct uslab_cache, slab_takes);
    m->c_slab_puts = OFF(struct uslab_cache, slab_puts);
    m->c_depot_in = OFF(struct uslab_cache, depot_in);
    m->c_depot_out = OFF(struct uslab_cache, depot_out);
    m->c_slabs_created = OFF(struct uslab_cache, slabs_created);
    m->c_slabs_released = OFF(struct uslab_cache, slabs_released);
    m->c_slab_objects = OFF(struct uslab_cache, slab_objects);
    m->t_next = OFF(struct usi_tcache, reg_next);
    m->t_npairs = OFF(struct usi_tcache, npairs);
    m->t_pair_pages = OFF(struct usi_tcache, pair_pages);
    m->t_pair_pages_words = USI_TCACHE_PAGE_WORDS;
    m->t_pairs = OFF(struct usi_tcache, pairs);
    m->pair_bytes = sizeof(struct usi_magpair);
    m->p_top = OFF(struct usi_magpair, top);
    m->p_base = OFF(struct usi_magpair, base);
    m->p_prev = OFF(struct usi_magpair, prev);
    m->m_rounds = OFF(struct usi_mag, rounds);
#undef OFF
    /* The widths the map promises (live.h). */
    _Static_assert(sizeof(((struct uslab_cache *)0)->nobjs) == 4 &&
                       sizeof(((struct uslab_cache *)0)->mag_capacity) == 4 &&
                       sizeof(((struct uslab_cache *)0)->debug) == 4 &&
                       sizeof(((struct usi_tcache *)0)->npairs) == 4 &&
                       sizeof(((struct usi_mag *)0)->rounds) == 4,
                   "4-byte fields of the map");
    _Static_assert(sizeof(((struct uslab_cache *)0)->id) == 8 &&
                       sizeof(((struct uslab_cache *)0)->slab_inuse) == 8 &&
                       sizeof(((struct uslab_cache *)0)->touched_bytes) == 8 &&
                       sizeof(((struct usi_slab_list_head *)0)->count) == 8 &&
                       sizeof(((struct uslab_cache *)0)->slab_objects) == 8 &&
                       sizeof(usi_tcache_bytes) == 8,
                   "8-byte fields of the map");
    __atomic_store_n(&m->ready, 1, __ATOMIC_RELEASE);
}

/* ---- statistics of every cache as text (uslab_stats_print, USLAB_STATS at exit) ------- */

/* How long a busy lock is tried at exit before its cache is given up (as the leak
 * report's), and how many names of caches not scanned are kept (more are only counted). */
#define STATS_LOCK_MS 20u
#define STATS_SKIPPED 64u
#define STATS_NAME    32u /* a cache's name, with its NUL */
_Static_assert(sizeof(((struct uslab_cache *)0)->name) == STATS_NAME, "a cache's name");

/* Snapshots of the caches in use, in id order, up to cap. Invariant: n <= cap, and
 * records[0 .. n) are snapshots of caches in use. At exit (`at_exit`) no lock is waited
 * for (design §10): a cache whose lock stays busy is not in records but in skipped (a
 * copy of its name: printed after the walk, when the cache may be gone), every cache when
 * the registry's lock is busy (registry_busy), and `threads` is cleared when the thread
 * caches' lock was busy, their magazines then not counted. */
struct collect {
    struct usi_live_cache *records;
    size_t n, cap;
    int at_exit, threads, registry_busy;
    char (*skipped)[STATS_NAME];
    size_t nskipped;
};

static void collect_one(struct uslab_cache *c, void *arg)
{
    struct collect *col = arg;
    if (col->n == col->cap)
        return;
    struct usi_live_cache *r = &col->records[col->n];
    int in_use = col->at_exit ? usi_live_try_snap_cache(c, r, STATS_LOCK_MS, &col->threads)
                              : usi_live_snap_cache(c, r);
    if (in_use > 0) {
        col->n++;
    } else if (in_use < 0) {
        if (col->nskipped < STATS_SKIPPED) {
            memcpy(col->skipped[col->nskipped], c->name, STATS_NAME);
            col->skipped[col->nskipped][STATS_NAME - 1] = '\0';
        }
        col->nskipped++;
    }
}

/* A bounded text buffer for the JSON of what was not scanned; overflow is cut. */
struct text {
    char *buf;
    size_t cap, len;
};

static void text_put(struct text *t, const char *s)
{
    for (; *s && t->len + 1 < t->cap; s++)
        t->buf[t->len++] = *s;
    t->buf[t->len] = '\0';
}

/* One more string of the list (a JSON string, escaped). */
static void text_item(struct text *t, const char *name, int first)
{
    text_put(t, first ? "\"" : ",\"");
    for (; *name; name++) {
        unsigned char ch = (unsigned char)*name;
        char esc[8] = {(char)ch, '\0'};
        if (ch == '"' || ch == '\\')
            snprintf(esc, sizeof esc, "\\%c", ch);
        else if (ch < 0x20)
            snprintf(esc, sizeof esc, "\\u%04x", ch);
        text_put(t, esc);
    }
    text_put(t, "\"");
}

/* The field "not_scanned" of the JSON's "uslab" object, as the leak report's: the caches
 * not scanned, "*" for all of them, "thread magazines" when those were not counted. */
static void not_scanned_json(const struct collect *col, struct text *t)
{
    text_put(t, ",\"not_scanned\":[");
    size_t n = 0;
    if (col->registry_busy)
        text_item(t, "*", n++ == 0);
    for (size_t i = 0; i < col->nskipped && i < STATS_SKIPPED; i++)
        text_item(t, col->skipped[i], n++ == 0);
    if (col->nskipped > STATS_SKIPPED) {
        char more[40];
        snprintf(more, sizeof more, "+%zu more", col->nskipped - STATS_SKIPPED);
        text_item(t, more, n++ == 0);
    }
    if (!col->threads)
        text_item(t, "thread magazines", n++ == 0);
    text_put(t, "]");
}

/* The same as lines after the table, only for what was not scanned. */
static void not_scanned_text(FILE *f, const struct collect *col)
{
    if (col->registry_busy)
        fprintf(f, "uslab: statistics: no cache scanned: the cache registry's lock is held\n");
    for (size_t i = 0; i < col->nskipped && i < STATS_SKIPPED; i++)
        fprintf(f, "uslab: statistics: cache %s not scanned: its lock is held\n", col->skipped[i]);
    if (col->nskipped > STATS_SKIPPED)
        fprintf(f, "uslab: statistics: %zu more caches not scanned\n",
                col->nskipped - STATS_SKIPPED);
    if (!col->threads)
        fprintf(f, "uslab: statistics: the threads' magazines not counted (their objects show "
                   "as active): the thread caches' lock is held\n");
}

int usi_live_print_all(FILE *f, int format, int at_exit, int disabled)
{
    if (disabled) { /* slabs disabled: say so, in the format asked for */
        if (format == USLAB_STATS_JSON)
            fprintf(f,
                    "{\"uslab\":{\"version\":\"%d.%d\",\"reserved_bytes\":0,"
                    "\"slabs_disabled\":true},\n \"caches\":[]}\n",
                    USLAB_VERSION_MAJOR, USLAB_VERSION_MINOR);
        else
            fprintf(f, "uslab: slabs disabled (no room for the reservation within RLIMIT_AS); "
                       "every allocation goes to the system allocator\n");
        return 0;
    }
    /* One mapping: the records, at exit the names not scanned and their JSON. */
    struct collect col = {.cap = 4096, .at_exit = at_exit, .threads = 1};
    size_t records = col.cap * sizeof(struct usi_live_cache);
    size_t names = at_exit ? STATS_SKIPPED * STATS_NAME : 0;
    struct text more = {.cap = at_exit ? STATS_SKIPPED * (6 * STATS_NAME + 3) + 128 : 0};
    size_t bytes = records + names + more.cap;
    char *mem = usi_os_map(bytes);
    if (!mem)
        return -1;
    col.records = (struct usi_live_cache *)(void *)mem;
    col.skipped = (char(*)[STATS_NAME])(void *)(mem + records);
    more.buf = mem + records + names;
    if (!at_exit)
        usi_registry_for_each(collect_one, &col);
    else if (usi_registry_try_each(collect_one, &col, STATS_LOCK_MS) != 0)
        col.registry_busy = 1;
    struct usi_live_header h = {
        .lib_version = (uint32_t)USLAB_VERSION_MAJOR << 16 | USLAB_VERSION_MINOR,
        .reserved_bytes = usi_pages_reserved_bytes(),
        .thread_cache_bytes = __atomic_load_n(&usi_tcache_bytes, __ATOMIC_RELAXED),
        .thread_cache_max = usi_options.tcache_max,
        .large_blocks = __atomic_load_n(&usi_large_counts[0], __ATOMIC_RELAXED),
        .large_bytes = __atomic_load_n(&usi_large_counts[1], __ATOMIC_RELAXED),
        .large_peak = __atomic_load_n(&usi_large_counts[2], __ATOMIC_RELAXED),
    };
    char status[4096];
    long len = usi_os_read_file("/proc/self/status", status, sizeof status - 1);
    if (len > 0) {
        status[len] = '\0';
        usi_statsfmt_rss(status, &h.rss_bytes, &h.rss_peak);
    }
    if (format == USLAB_STATS_JSON) {
        if (at_exit)
            not_scanned_json(&col, &more);
        usi_statsfmt_json(f, &h, col.records, col.n, at_exit ? more.buf : "");
    } else {
        usi_statsfmt_table(f, &h, col.records, col.n);
        if (at_exit)
            not_scanned_text(f, &col);
    }
    fflush(f);
    usi_os_unmap(mem, bytes);
    return 0;
}
