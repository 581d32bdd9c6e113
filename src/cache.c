/* SPDX-License-Identifier: MIT */
/*
 * cache.c - object caches (docs/design.md §5): the public uslab_cache_* API and the
 * constructed-state contract of Bonwick (USENIX 1994) §3.
 *
 * An object is constructed when it leaves the slab layer and destructed when it goes back;
 * in between it may pass through the user and the magazines any number of times. The
 * reclaim callback runs when the cache cannot grow. Constructors, destructors and reclaim
 * callbacks never run with a cache lock held.
 */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

struct uslab_cache *usi_caches[USI_MAX_IDS];
/* Protects usi_caches and id allocation; taken before any other lock (design §6). */
static pthread_mutex_t caches_lock = PTHREAD_MUTEX_INITIALIZER;
/* Storage for user caches' descriptors: an internal cache without magazines. */
static struct uslab_cache cache_cache;

#define USLAB_CACHE_KNOWN_FLAGS (USLAB_CACHE_NOMAGAZINE | USLAB_CACHE_NOCOLOUR)

/* Objects per magazine at first: 64 for small objects, fewer for large ones so that a
 * magazine holds at most 32 KiB (but at least 4 objects); contention may grow it later. */
static uint32_t magazine_capacity(size_t stride)
{
    size_t cap = ((size_t)32 << 10) / stride;
    if (cap > 64)
        cap = 64;
    return (uint32_t)(cap < 4 ? 4 : cap);
}

int usi_cache_init(struct uslab_cache *c, const char *name, size_t size, size_t align,
                   uslab_ctor_fn ctor, uslab_dtor_fn dtor, uslab_reclaim_fn reclaim, void *arg,
                   unsigned flags)
{
    if (align == 0)
        align = size >= 16 ? 16 : 8;
    if (align < 8)
        align = 8;
    snprintf(c->name, sizeof c->name, "%s", name ? name : "(unnamed)");
    c->flags = flags;
    c->size = size;
    c->align = align;
    c->stride = (size + align - 1) & ~(align - 1);
    if (c->stride < sizeof(void *))
        c->stride = sizeof(void *);
    c->debug = usi_debug_flags_for(c->name, flags);
    if (c->debug)
        usi_debug_layout(c); /* red zones and tracking records widen the slot */
    c->ctor = ctor;
    c->dtor = dtor;
    c->reclaim = reclaim;
    c->arg = arg;
    usi_slab_geometry(c);
    c->stride_recip = (((uint64_t)1 << 32) + c->stride - 1) / c->stride;
    if (flags & USLAB_CACHE_NOCOLOUR)
        c->colour_max = 0;
    /* Debug caches bypass magazines so that every operation is checked (libumem, SLUB). */
    c->mag_capacity =
        (flags & USLAB_CACHE_NOMAGAZINE) || c->debug ? 0 : magazine_capacity(c->stride);
    /* Under contention magazines may grow to 128 KiB of objects, at most 256 of them. */
    size_t max = ((size_t)128 << 10) / c->stride;
    max = max > USI_MAG_MAX ? USI_MAG_MAX : max;
    c->mag_max = c->mag_capacity && usi_options.mag_growth
                     ? (uint32_t)(max > c->mag_capacity ? max : c->mag_capacity)
                     : c->mag_capacity;
    c->mag_max_bytes = (size_t)c->mag_max * c->stride;
    usi_depot_set_limit(c);
    c->empty_reserve = usi_options.empty_reserve;
    pthread_mutex_init(&c->lock, NULL);

    pthread_mutex_lock(&caches_lock);
    unsigned id = usi_nclasses ? USI_NCLASSES + 1 : 1; /* low ids: malloc classes */
    while (id < USI_MAX_IDS && usi_caches[id])
        id++;
    if (id == USI_MAX_IDS) {
        pthread_mutex_unlock(&caches_lock);
        errno = ENOMEM;
        return -1;
    }
    c->id = id;
    c->pair_offset = id * sizeof(struct usi_magpair);
    usi_caches[id] = c;
    pthread_mutex_unlock(&caches_lock);
    return 0;
}

void usi_cache_internal_init(void);
void usi_cache_internal_init(void)
{
    usi_cache_init(&cache_cache, "uslab-cache", sizeof(struct uslab_cache), 64, NULL, NULL, NULL,
                   NULL, USLAB_CACHE_NOMAGAZINE | USI_CACHE_INTERNAL);
}

/* Takes n raw objects, calling the reclaim callback once if the cache cannot grow. */
static size_t cache_take(struct uslab_cache *c, size_t n, void **objs)
{
    if (USI_UNLIKELY(c->debug))
        usi_debug_capture();
    pthread_mutex_lock(&c->lock);
    size_t got = usi_slab_take(c, n, objs);
    pthread_mutex_unlock(&c->lock);
    if (got < n && c->reclaim) {
        c->reclaim(c->arg);
        pthread_mutex_lock(&c->lock);
        got += usi_slab_take(c, n - got, objs + got);
        pthread_mutex_unlock(&c->lock);
    }
    return got;
}

static void cache_put_raw(struct uslab_cache *c, size_t n, void *const *objs)
{
    if (USI_UNLIKELY(c->debug))
        usi_debug_capture();
    struct usi_slab *release = NULL;
    pthread_mutex_lock(&c->lock);
    int was_pending = c->purge_pending;
    usi_slab_put(c, n, objs, &release);
    int kick = c->purge_pending && !was_pending;
    pthread_mutex_unlock(&c->lock);
    if (release)
        usi_slab_release(release, c->slab_size);
    if (kick)
        usi_purge_kick();
}

/* Runs the destructor on an object uslab holds (freed, as far as Valgrind knows). */
static void cache_destruct(struct uslab_cache *c, void *obj)
{
    USI_VG_DEFINED(obj, c->size);
    c->dtor(obj, c->arg);
    USI_VG_NOACCESS(obj, c->size);
}

/* Runs the constructor; on failure errno says why (ENOMEM if the constructor left none). */
static int cache_construct(struct uslab_cache *c, void *obj)
{
    USI_VG_UNDEFINED(obj, c->size);
    int saved = errno;
    errno = 0;
    if (c->ctor(obj, c->arg) != 0) {
        if (errno == 0)
            errno = ENOMEM;
        return -1;
    }
    errno = saved;
    return 0;
}

void *usi_cache_alloc_from_slab(struct uslab_cache *c)
{
    void *obj;
    if (cache_take(c, 1, &obj) == 0) {
        errno = ENOMEM;
        return NULL;
    }
    if (c->ctor && cache_construct(c, obj) != 0) {
        int e = errno;
        cache_put_raw(c, 1, &obj);
        errno = e;
        return NULL;
    }
    return obj;
}

size_t usi_cache_fill(struct uslab_cache *c, size_t n, void **objs)
{
    size_t got = cache_take(c, n, objs);
    if (got < n) {
        if (got)
            cache_put_raw(c, got, objs);
        errno = ENOMEM;
        return 0;
    }
    for (size_t i = 0; c->ctor && i < n; i++) {
        if (cache_construct(c, objs[i]) != 0) {
            int e = errno;
            if (c->dtor)
                for (size_t j = 0; j < i; j++)
                    cache_destruct(c, objs[j]);
            cache_put_raw(c, n, objs);
            errno = e;
            return 0;
        }
    }
    return n;
}

void usi_cache_unfill(struct uslab_cache *c, size_t n, void *const *objs)
{
    if (c->dtor)
        for (size_t i = 0; i < n; i++)
            cache_destruct(c, objs[i]);
    cache_put_raw(c, n, objs);
}

void usi_cache_bad_free(struct uslab_cache *c, const void *p, uintptr_t entry)
{
    if (usi_debug_enabled) {
        char what[160];
        struct uslab_cache *owner = entry ? usi_caches[entry & USI_ID_MASK] : NULL;
        if (entry == 0)
            snprintf(what, sizeof what, "Invalid pointer %p: not allocated by uslab", p);
        else
            snprintf(what, sizeof what, "Object %p belongs to cache %s", p,
                     owner ? owner->name : "(destroyed)");
        usi_debug_bug(c->name, what);
    }
    if (entry == 0)
        usi_report_fatal("free of invalid pointer %p to cache %s: not allocated by uslab", p,
                         c->name);
    struct uslab_cache *owner = usi_caches[entry & USI_ID_MASK];
    usi_report_fatal("free of %p to cache %s, but it belongs to cache %s", p, c->name,
                     owner ? owner->name : "(destroyed)");
}

/* ---- public API ------------------------------------------------------------------------ */

uslab_cache_t *uslab_cache_create(const char *name, size_t size, size_t align, uslab_ctor_fn ctor,
                                  uslab_dtor_fn dtor, uslab_reclaim_fn reclaim, void *arg,
                                  unsigned flags)
{
    if (size == 0 || size > USI_CACHE_MAX_OBJECT || (align & (align - 1)) != 0 ||
        align > USI_PAGE_SIZE || (flags & ~USLAB_CACHE_KNOWN_FLAGS)) {
        errno = EINVAL;
        return NULL;
    }
    if (usi_ensure_init() != 0)
        return NULL;
    struct uslab_cache *c = usi_cache_alloc_from_slab(&cache_cache);
    if (!c)
        return NULL;
    memset(c, 0, sizeof *c);
    if (usi_cache_init(c, name, size, align, ctor, dtor, reclaim, arg, flags) != 0) {
        int e = errno;
        usi_cache_unfill(&cache_cache, 1, (void *const *)&c);
        errno = e;
        return NULL;
    }
    return c;
}

void *uslab_cache_alloc(uslab_cache_t *c)
{
    void *p = usi_tcache_alloc(c);
    if (p)
        USI_VG_HANDOUT(c, p);
    return p;
}

void uslab_cache_free(uslab_cache_t *c, void *obj)
{
    uintptr_t e = usi_pagemap_lookup(obj); /* 0 for NULL: handled off the fast path */
    if (USI_UNLIKELY((e & USI_ID_MASK) != c->id)) {
        if (obj == NULL)
            return;
        usi_cache_bad_free(c, obj, e);
    }
    USI_VG_TAKEBACK(obj);
    usi_tcache_free(c, obj);
}

size_t uslab_cache_alloc_bulk(uslab_cache_t *c, size_t n, void **objs)
{
    size_t i = 0;
    /* First what the thread's magazines hold, then the rest straight from the slabs. */
    struct usi_tcache *tc = usi_tls;
    if (c->pair_offset < tc->pairs_bytes) {
        struct usi_magpair *mp = usi_tcache_pair(tc, c->pair_offset);
        void *p;
        while (i < n && (p = usi_pair_pop(mp)) != NULL)
            objs[i++] = p;
        while (i < n && mp->prev->rounds)
            objs[i++] = mp->prev->objs[--mp->prev->rounds];
    }
    if (i < n && usi_cache_fill(c, n - i, objs + i) == 0) {
        int e = errno;
        for (size_t j = 0; j < i; j++) /* never handed out: back without the user checks */
            usi_tcache_free(c, objs[j]);
        errno = e;
        return 0;
    }
    for (size_t j = 0; j < n; j++)
        USI_VG_HANDOUT(c, objs[j]);
    return n;
}

void uslab_cache_free_bulk(uslab_cache_t *c, size_t n, void **objs)
{
    for (size_t i = 0; i < n; i++)
        uslab_cache_free(c, objs[i]);
}

size_t uslab_cache_reap(uslab_cache_t *c)
{
    usi_tcache_flush_own(c);
    usi_depot_drain(c);
    struct usi_slab *release = NULL;
    pthread_mutex_lock(&c->lock);
    usi_slab_detach_empty(c, 0, &release);
    c->purge_pending = 0;
    pthread_mutex_unlock(&c->lock);
    return usi_slab_release(release, c->slab_size);
}

void uslab_cache_destroy(uslab_cache_t *c)
{
    if (!c)
        return;
    usi_tcache_flush_all(c);
    usi_depot_drain(c);
    struct usi_slab *release = NULL;
    pthread_mutex_lock(&c->lock);
    if (c->slab_inuse != 0)
        usi_report_fatal("cache %s destroyed with %zu live objects", c->name, c->slab_inuse);
    usi_slab_detach_empty(c, 0, &release);
    pthread_mutex_unlock(&c->lock);
    usi_slab_release(release, c->slab_size);
    pthread_mutex_lock(&caches_lock);
    usi_caches[c->id] = NULL;
    pthread_mutex_unlock(&caches_lock);
    pthread_mutex_destroy(&c->lock);
    usi_cache_unfill(&cache_cache, 1, (void *const *)&c);
}

size_t uslab_reap(void)
{
    if (!usi_initialized)
        return 0;
    size_t bytes = 0;
    pthread_mutex_lock(&caches_lock);
    for (unsigned id = 1; id < USI_MAX_IDS; id++) {
        struct uslab_cache *c = usi_caches[id];
        if (c && __atomic_load_n(&c->mag_capacity, __ATOMIC_RELAXED))
            bytes += uslab_cache_reap(c);
        else if (c) {
            struct usi_slab *release = NULL;
            pthread_mutex_lock(&c->lock);
            usi_slab_detach_empty(c, 0, &release);
            c->purge_pending = 0;
            pthread_mutex_unlock(&c->lock);
            bytes += usi_slab_release(release, c->slab_size);
        }
    }
    pthread_mutex_unlock(&caches_lock);
    return bytes;
}

void usi_caches_for_each(void (*fn)(struct uslab_cache *c, void *arg), void *arg)
{
    pthread_mutex_lock(&caches_lock);
    for (unsigned id = 1; id < USI_MAX_IDS; id++)
        if (usi_caches[id])
            fn(usi_caches[id], arg);
    pthread_mutex_unlock(&caches_lock);
}

int usi_purge_pass(uint64_t now_ms)
{
    int more = 0;
    uint64_t before =
        now_ms >= usi_options.purge_delay_ms ? now_ms - usi_options.purge_delay_ms : 0;
    pthread_mutex_lock(&caches_lock);
    for (unsigned id = 1; id < USI_MAX_IDS; id++) {
        struct uslab_cache *c = usi_caches[id];
        if (!c)
            continue;
        if (__atomic_load_n(&c->mag_capacity, __ATOMIC_RELAXED))
            usi_depot_reap_unused(c);
        struct usi_slab *release = NULL;
        pthread_mutex_lock(&c->lock);
        if (c->purge_pending)
            c->purge_pending = usi_slab_detach_idle(c, c->empty_reserve, before, &release) != 0;
        if (c->purge_pending || c->depot_nfull || c->depot_nempty)
            more = 1;
        pthread_mutex_unlock(&c->lock);
        if (release)
            usi_slab_release(release, c->slab_size);
    }
    pthread_mutex_unlock(&caches_lock);
    return more;
}

const char *uslab_cache_name(const uslab_cache_t *c)
{
    return c->name;
}

size_t uslab_cache_object_size(const uslab_cache_t *c)
{
    return c->size;
}

/* ---- fork: every cache lock, in id order, after the registry and tcache locks --------- */

void usi_caches_prefork_table(void)
{
    pthread_mutex_lock(&caches_lock);
}

void usi_caches_prefork(void)
{
    for (unsigned id = 1; id < USI_MAX_IDS; id++)
        if (usi_caches[id])
            pthread_mutex_lock(&usi_caches[id]->lock);
}

void usi_caches_postfork(int child)
{
    for (unsigned id = 1; id < USI_MAX_IDS; id++) {
        struct uslab_cache *c = usi_caches[id];
        if (!c)
            continue;
        if (child)
            pthread_mutex_init(&c->lock, NULL);
        else
            pthread_mutex_unlock(&c->lock);
    }
    if (child)
        pthread_mutex_init(&caches_lock, NULL);
    else
        pthread_mutex_unlock(&caches_lock);
}
