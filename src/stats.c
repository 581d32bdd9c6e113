/* SPDX-License-Identifier: MIT */
/*
 * stats.c - statistics (docs/design.md §10): uslab_stats_print (a slabinfo-style table or
 * JSON of every cache, made by live.c, which USLAB_STATS=1|json prints at exit from init.c,
 * so that a program linked with libuslab.a gets it without calling anything here),
 * uslab_cache_stats for one cache, and the preload library's mallinfo2 and mallinfo.
 *
 * Nothing here costs the fast paths anything: the counts come from what the slab layer and
 * the depot keep under their lock, and from each thread's magazines, read on demand (the
 * per-thread part is merged when asked, without stopping the threads, so it is a snapshot
 * that may be off by the objects moving at that instant). The snapshot of a cache is the
 * live page's (live.c), the text statsfmt.c's, which the `uslab` tool shares.
 */
#include "cache.h"
#include "descriptor.h"
#include "init.h"
#include "live.h"
#include "os.h"
#include "registry.h"
#include "sizeclass.h"
#include "uslab.h"

#include <errno.h>
#include <string.h>
#ifdef USLAB_PRELOAD
#include <malloc.h>
#endif

int uslab_cache_stats(const uslab_cache_t *cache, struct uslab_cache_stats *out)
{
    usi_cache_check_live(cache, "uslab_cache_stats");
    if (!out) { /* before: SIGSEGV */
        errno = EINVAL;
        return -1;
    }
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

int uslab_stats_print(FILE *f, int format)
{
    if (!f || (format != USLAB_STATS_TABLE && format != USLAB_STATS_JSON)) {
        errno = EINVAL; /* before: another format printed the table, and 0 */
        return -1;
    }
    return usi_live_print_all(f, format, 0, usi_ensure_init() != 0);
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
