/* SPDX-License-Identifier: MIT */
/*
 * stats.c - statistics (docs/design.md §10): a slabinfo-style table and JSON of every
 * cache, uslab_cache_stats for one cache, and USLAB_STATS=1|json printed at exit.
 *
 * Nothing here costs the fast paths anything: the counts come from what the slab layer and
 * the depot keep under their lock, and from each thread's magazines, read on demand (the
 * per-thread part is merged when asked, without stopping the threads, so it is a snapshot
 * that may be off by the objects moving at that instant).
 */
#include "internal.h"

#include <stdio.h>
#include <string.h>

struct snap {
    char name[32];
    size_t size, stride, slab_size, nobjs, slabs, partial, full, empty;
    size_t out_of_slabs, depot_cached, thread_cached, active, total;
    uint64_t created, released;
    uint32_t mag_capacity;
    unsigned debug;
};

static void snap_cache(const struct uslab_cache *c, struct snap *s)
{
    memset(s, 0, sizeof *s);
    memcpy(s->name, c->name, sizeof s->name);
    s->thread_cached = usi_tcache_cached_objects(c);
    usi_lock((pthread_mutex_t *)&c->lock);
    s->size = c->size;
    s->stride = c->stride;
    s->slab_size = c->slab_size;
    s->nobjs = c->nobjs;
    s->partial = c->lists[USI_SLAB_PARTIAL].count;
    s->full = c->lists[USI_SLAB_FULL].count;
    s->empty = c->lists[USI_SLAB_EMPTY].count;
    s->slabs = s->partial + s->full + s->empty;
    s->out_of_slabs = c->slab_inuse;
    s->depot_cached = c->depot_rounds;
    s->created = c->slabs_created;
    s->released = c->slabs_released;
    usi_unlock((pthread_mutex_t *)&c->lock);
    s->mag_capacity = __atomic_load_n(&c->mag_capacity, __ATOMIC_RELAXED);
    s->debug = c->debug;
    s->total = s->slabs * s->nobjs;
    size_t cached = s->depot_cached + s->thread_cached;
    s->active = s->out_of_slabs > cached ? s->out_of_slabs - cached : 0;
    /* The thread part is read without their locks: keep the snapshot consistent. */
    size_t room = s->out_of_slabs > s->depot_cached ? s->out_of_slabs - s->depot_cached : 0;
    if (s->thread_cached > room)
        s->thread_cached = room;
}

int uslab_cache_stats(const uslab_cache_t *cache, struct uslab_cache_stats *out)
{
    struct snap s;
    snap_cache(cache, &s);
    memset(out, 0, sizeof *out);
    out->name = cache->name;
    out->object_size = s.size;
    out->slab_size = s.slab_size;
    out->objects_per_slab = s.nobjs;
    out->slabs = s.slabs;
    out->partial_slabs = s.partial;
    out->empty_slabs = s.empty;
    out->active_objects = s.active;
    out->cached_objects = s.depot_cached + s.thread_cached;
    out->total_objects = s.total;
    return 0;
}

struct collect {
    struct snap *snaps;
    size_t n, cap;
    int all;
};

static void collect_one(struct uslab_cache *c, void *arg)
{
    struct collect *col = arg;
    if (col->n == col->cap)
        return;
    snap_cache(c, &col->snaps[col->n]);
    struct snap *s = &col->snaps[col->n];
    if (col->all || s->slabs || s->out_of_slabs)
        col->n++;
}

static void debug_letters(unsigned d, char *buf)
{
    char *p = buf;
    for (size_t i = 0; i < usi_settings_nletters; i++)
        if (d & usi_settings_letters[i].bit)
            *p++ = usi_settings_letters[i].letter;
    *p = '\0';
}

static double pct(double a, double b)
{
    return b > 0 ? 100.0 * a / b : 0.0;
}

static void print_size(FILE *f, size_t bytes)
{
    static const char units[] = "BKMGT";
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        fprintf(f, "%7zu", bytes);
    else
        fprintf(f, "%6.1f%c", v, units[u]);
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
    size_t bytes = col.cap * sizeof(struct snap);
    col.snaps = usi_os_map(bytes);
    if (!col.snaps)
        return -1;
    usi_registry_for_each(collect_one, &col);
    size_t tc_bytes = __atomic_load_n(&usi_tcache_bytes, __ATOMIC_RELAXED);
    if (format == USLAB_STATS_JSON) {
        fprintf(f,
                "{\"uslab\":{\"version\":\"%d.%d\",\"reserved_bytes\":%zu,"
                "\"thread_cache_bytes\":%zu,\"thread_cache_max\":%zu},\n \"caches\":[",
                USLAB_VERSION_MAJOR, USLAB_VERSION_MINOR, usi_pages_reserved_bytes(), tc_bytes,
                usi_options.tcache_max);
        for (size_t i = 0; i < col.n; i++) {
            struct snap *s = &col.snaps[i];
            char dbg[32];
            debug_letters(s->debug, dbg);
            fprintf(f,
                    "%s\n  {\"name\":\"%s\",\"objects\":%zu,\"objsize\":%zu,\"stride\":%zu,"
                    "\"slab_size\":%zu,\"objs_per_slab\":%zu,\"slabs\":%zu,\"partial\":%zu,"
                    "\"full\":%zu,\"empty\":%zu,\"total_objects\":%zu,\"cached_thread\":%zu,"
                    "\"cached_depot\":%zu,\"space\":%zu,\"free_pct\":%.1f,"
                    "\"efficiency_pct\":%.1f,\"slabs_created\":%llu,\"slabs_released\":%llu,"
                    "\"magazine\":%u,\"debug\":\"%s\"}",
                    i ? "," : "", s->name, s->active, s->size, s->stride, s->slab_size, s->nobjs,
                    s->slabs, s->partial, s->full, s->empty, s->total, s->thread_cached,
                    s->depot_cached, s->slabs * s->slab_size,
                    pct((double)(s->total - s->active), (double)s->total),
                    pct((double)s->active * (double)s->size, (double)(s->slabs * s->slab_size)),
                    (unsigned long long)s->created, (unsigned long long)s->released,
                    s->mag_capacity, dbg);
        }
        fprintf(f, "\n]}\n");
    } else {
        fprintf(
            f,
            "Name                   Objects Objsize   Space Slabs/Part/Cpu  O/S %%Fr %%Ef Flg\n");
        for (size_t i = 0; i < col.n; i++) {
            struct snap *s = &col.snaps[i];
            char dbg[32], spc[40];
            debug_letters(s->debug, dbg);
            snprintf(spc, sizeof spc, "%zu/%zu/%zu", s->slabs, s->partial, s->thread_cached);
            fprintf(f, "%-22s %8zu %7zu ", s->name, s->active, s->size);
            print_size(f, s->slabs * s->slab_size);
            fprintf(f, " %-15s %4zu %3.0f %3.0f %s\n", spc, s->nobjs,
                    pct((double)(s->total - s->active), (double)s->total),
                    pct((double)s->active * (double)s->size, (double)(s->slabs * s->slab_size)),
                    dbg);
        }
        fprintf(f,
                "thread caches may hold %zu KiB (bound %zu KiB); reserved address space %zu MiB\n",
                tc_bytes >> 10, usi_options.tcache_max >> 10, usi_pages_reserved_bytes() >> 20);
    }
    fflush(f);
    usi_os_unmap(col.snaps, bytes);
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
