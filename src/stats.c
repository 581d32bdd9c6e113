/* SPDX-License-Identifier: MIT */
/*
 * stats.c - statistics (docs/design.md §10): a slabinfo-style table and JSON of every
 * cache, uslab_cache_stats for one cache, and USLAB_STATS=1|json printed at exit.
 *
 * Nothing here costs the fast paths anything: the counts come from what the slab layer and
 * the depot keep under their lock, and from each thread's magazines, read on demand (the
 * per-thread part is merged when asked, without stopping the threads, so it is a snapshot
 * that may be off by the objects moving at that instant). The snapshot of a cache is the
 * live page's (live.c), the text statsfmt.c's, which the `uslab` tool shares.
 */
#include "internal.h"
#include "live.h"

#include <string.h>
#ifdef USLAB_PRELOAD
#include <malloc.h>
#endif

int uslab_cache_stats(const uslab_cache_t *cache, struct uslab_cache_stats *out)
{
    usi_cache_check_live(cache, "uslab_cache_stats");
    struct usi_live_cache r;
    usi_live_snap_cache(cache, &r);
    memset(out, 0, sizeof *out);
    out->name = cache->name;
    out->object_size = r.object_size;
    out->slab_size = r.slab_size;
    out->objects_per_slab = r.objs_per_slab;
    out->slabs = r.slabs;
    out->partial_slabs = r.partial;
    out->empty_slabs = r.empty;
    out->active_objects = r.active;
    out->cached_objects = r.cached_depot + r.cached_thread;
    out->total_objects = r.total_objects;
    return 0;
}

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

/* uslab_stats_print; at exit (at_exit) without waiting for any lock. */
static int stats_print(FILE *f, int format, int at_exit)
{
    if (!f)
        return -1;
    if (usi_ensure_init() != 0) { /* slabs disabled: say so, in the format asked for */
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
    };
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

int uslab_stats_print(FILE *f, int format)
{
    return stats_print(f, format, 0);
}

/* USLAB_STATS=1|json. exit() may run in a signal handler that interrupted this thread in
 * malloc or free, holding a cache lock or the registry's: nothing here waits for a lock
 * (design §10), what could not be locked is named as not scanned. */
static void stats_report(void)
{
    stats_print(stderr, usi_options.stats == USI_STATS_JSON ? USLAB_STATS_JSON : USLAB_STATS_TABLE,
                1);
}

/* After every library's destructor when possible, as the leak report (design §9). */
__attribute__((destructor)) static void stats_at_exit(void)
{
    if (usi_initialized == 0 || usi_options.stats == USI_STATS_OFF) /* read by options.c */
        return;
    if (usi_os_after_destructors(stats_report) != 0)
        stats_report();
}

#ifdef USLAB_PRELOAD
/* ---- mallinfo2 and mallinfo (preload library): glibc's figures plus the malloc classes' -- */

/* The malloc classes' slab bytes and the bytes of the blocks the program holds (each
 * counted at its class size, what malloc_usable_size says). */
struct class_totals {
    size_t slab_bytes, used_bytes;
};

static void add_class(struct uslab_cache *c, void *arg)
{
    struct class_totals *t = arg;
    struct usi_live_cache r;
    if (c->id < 1 || c->id > USI_NCLASSES || !usi_live_snap_cache(c, &r))
        return;
    t->slab_bytes += (size_t)(r.slabs * r.slab_size);
    t->used_bytes += (size_t)(r.active * r.object_size);
}

/* glibc's mallinfo2 sees only its own heap: the blocks above the slab range. Its fields
 * get the malloc classes added where they have a meaning for slabs: `arena` (bytes of
 * non-mmapped memory the allocator holds) the slabs' bytes, `uordblks` (bytes in blocks in
 * use) the blocks the program holds, `fordblks` (free bytes) the rest of the slabs (cached
 * in magazines, free in slabs, and slack). Chunk counts, mmapped blocks and `keepcost` stay
 * glibc's own (design §8). */
__attribute__((visibility("default"))) struct mallinfo2 mallinfo2(void)
{
    struct mallinfo2 m;
    usi_sys_mallinfo2(&m);
    if (__atomic_load_n(&usi_initialized, __ATOMIC_ACQUIRE) > 0) {
        struct class_totals t = {0, 0};
        usi_registry_for_each(add_class, &t);
        m.arena += t.slab_bytes;
        m.uordblks += t.used_bytes;
        m.fordblks += t.slab_bytes > t.used_bytes ? t.slab_bytes - t.used_bytes : 0;
    }
    return m;
}

/* The older mallinfo: the same figures in ints, cut as glibc's own cuts them. */
__attribute__((visibility("default"))) struct mallinfo mallinfo(void)
{
    struct mallinfo2 m2 = mallinfo2();
    struct mallinfo m = {
        .arena = (int)m2.arena,
        .ordblks = (int)m2.ordblks,
        .smblks = (int)m2.smblks,
        .hblks = (int)m2.hblks,
        .hblkhd = (int)m2.hblkhd,
        .usmblks = (int)m2.usmblks,
        .fsmblks = (int)m2.fsmblks,
        .uordblks = (int)m2.uordblks,
        .fordblks = (int)m2.fordblks,
        .keepcost = (int)m2.keepcost,
    };
    return m;
}
#endif
