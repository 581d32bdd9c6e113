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

/* Snapshots of the caches in use, in id order, up to cap. Invariant: n <= cap, and
 * records[0 .. n) are snapshots of caches in use. */
struct collect {
    struct usi_live_cache *records;
    size_t n, cap;
};

static void collect_one(struct uslab_cache *c, void *arg)
{
    struct collect *col = arg;
    if (col->n < col->cap && usi_live_snap_cache(c, &col->records[col->n]))
        col->n++;
}

int uslab_stats_print(FILE *f, int format)
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
    struct collect col = {.cap = 4096};
    size_t bytes = col.cap * sizeof(struct usi_live_cache);
    col.records = usi_os_map(bytes);
    if (!col.records)
        return -1;
    usi_registry_for_each(collect_one, &col);
    struct usi_live_header h = {
        .lib_version = (uint32_t)USLAB_VERSION_MAJOR << 16 | USLAB_VERSION_MINOR,
        .reserved_bytes = usi_pages_reserved_bytes(),
        .thread_cache_bytes = __atomic_load_n(&usi_tcache_bytes, __ATOMIC_RELAXED),
        .thread_cache_max = usi_options.tcache_max,
    };
    if (format == USLAB_STATS_JSON)
        usi_statsfmt_json(f, &h, col.records, col.n, "");
    else
        usi_statsfmt_table(f, &h, col.records, col.n);
    fflush(f);
    usi_os_unmap(col.records, bytes);
    return 0;
}

__attribute__((destructor)) static void stats_at_exit(void)
{
    if (usi_initialized == 0)
        return;
    const char *v = usi_os_getenv("USLAB_STATS");
    if (!v || v[0] == '\0' || strcmp(v, "0") == 0)
        return;
    uslab_stats_print(stderr, strcmp(v, "json") == 0 ? USLAB_STATS_JSON : USLAB_STATS_TABLE);
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
