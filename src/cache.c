/* SPDX-License-Identifier: MIT */
/*
 * cache.c - the object-cache API (docs/design.md §5): uslab_cache_*, uslab_reap.
 *
 * Above the thread cache: allocation and free go through the thread's magazines
 * (tcache.c); objects enter and leave service constructed (objects.c, Bonwick 1994 §3).
 * Constructors, destructors and reclaim callbacks never run with a uslab lock held.
 */
#include "cache.h"
#include "base.h"
#include "debug.h"
#include "descriptor.h"
#include "init.h"
#include "objects.h"
#include "os.h"
#include "pages.h"
#include "purge.h"
#include "reclaim.h"
#include "registry.h"
#include "report.h"
#include "slab.h"
#include "tcache.h"
#include "uslab.h"

#include <errno.h>
#include <string.h>

#define USLAB_CACHE_KNOWN_FLAGS (USLAB_CACHE_NOMAGAZINE | USLAB_CACHE_NOCOLOUR)

/* ---- the handle check ------------------------------------------------------------------ */

/* Whether c is a cache that uslab_cache_create returned and uslab_cache_destroy has not
 * destroyed: a live object of the descriptor cache (the exact page map, so a pointer into
 * memory given back is never read) whose id names it in the registry. A destroyed
 * descriptor that a later create reused is live again: that double destroy cannot be told
 * from a first one (as a double free of a reused block cannot). */
int usi_cache_is_live(const struct uslab_cache *c)
{
    uintptr_t e = c ? usi_pagemap_lookup(c) : 0;
    if (e == 0 || (e & USI_ID_MASK) != usi_descriptor_cache.id)
        return 0;
    unsigned id = c->id;
    return id > USI_RESERVED_IDS && id < USI_MAX_IDS &&
           __atomic_load_n(&usi_caches[id], __ATOMIC_ACQUIRE) == c;
}

/* The object-cache calls off the fast paths refuse a handle that is not a live cache with
 * a message, instead of reading a freed descriptor (or NULL). */
void usi_cache_check_live(const struct uslab_cache *c, const char *call)
{
    if (USI_UNLIKELY(!usi_cache_is_live(c)))
        usi_report_fatal("%s(%p): not a live cache (NULL, destroyed already, or not made by "
                         "uslab_cache_create)",
                         call, (const void *)c);
}

/* ---- destroyed descriptors, kept back --------------------------------------------------- */

/* The descriptor cache hands out its lowest free slot, so the next create after a destroy
 * took the destroyed cache's descriptor at once: a second destroy, or a late alloc or free
 * on the old handle, then acted on the new cache. So a destroyed descriptor is kept back
 * until DESCRIPTORS_KEPT more caches have been destroyed (or uslab_reap runs): until then
 * its handle is not a live cache (the registry no longer names it, whoever has its id
 * now), and it has no pair, so its fast paths miss and their slow paths report (tcache.c).
 * A ring of slots exchanged atomically: no lock (a fork child may find one descriptor out
 * of it, which it then never frees). */
#define DESCRIPTORS_KEPT 64
static struct uslab_cache *kept[DESCRIPTORS_KEPT];
static unsigned kept_next;

static void retire(struct uslab_cache *c)
{
    c->pair_offset = 0; /* pair 0: always empty, every fast path misses */
    unsigned slot = __atomic_fetch_add(&kept_next, 1, __ATOMIC_RELAXED) % DESCRIPTORS_KEPT;
    struct uslab_cache *old = __atomic_exchange_n(&kept[slot], c, __ATOMIC_ACQ_REL);
    if (old)
        usi_objects_unfill(&usi_descriptor_cache, 1, (void *const *)&old);
}

/* uslab_reap gives back everything held for nothing: the kept descriptors too (their
 * handles are then no longer known as destroyed). */
static void free_kept(void)
{
    for (unsigned i = 0; i < DESCRIPTORS_KEPT; i++) {
        struct uslab_cache *old = __atomic_exchange_n(&kept[i], NULL, __ATOMIC_ACQ_REL);
        if (old)
            usi_objects_unfill(&usi_descriptor_cache, 1, (void *const *)&old);
    }
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
    if (usi_ensure_init() != 0) {
        errno = ENOMEM; /* no room for slabs (design §2) */
        return NULL;
    }
    struct uslab_cache *c = usi_objects_alloc(&usi_descriptor_cache);
    if (!c)
        return NULL;
    memset(c, 0, sizeof *c);
    if (usi_init_cache(c, name, size, align, ctor, dtor, reclaim, arg, flags, USI_RESERVED_IDS + 1,
                       USI_MAX_IDS - 1) != 0) {
        int e = errno;
        usi_objects_unfill(&usi_descriptor_cache, 1, (void *const *)&c);
        errno = e;
        return NULL;
    }
    if (!c->debug)
        usi_slab_share_spans(c); /* its slabs' spans and the malloc classes' (design §3) */
    if (reclaim)
        usi_purge_watch(); /* pressure must reach it (design §3) */
    return c;
}

/* The object caches' fast paths, aligned to a cache line as malloc and free are (a
 * layout that moves with unrelated code moves their time). */
__attribute__((aligned(64))) void *uslab_cache_alloc(uslab_cache_t *c)
{
    void *p = usi_tcache_alloc(c);
    if (p)
        USI_VG_HANDOUT(c, p);
    return p;
}

/* uslab_cache_free of an object that is not c's: the handle is blamed first if it is not
 * a live cache. One call off the fast path (two would cost it a frame). */
static USI_COLD USI_NORETURN void free_refused(uslab_cache_t *c, void *obj, uintptr_t e)
{
    usi_cache_check_live(c, "uslab_cache_free");
    usi_slab_bad_pointer(c, obj, e);
}

__attribute__((aligned(64))) void uslab_cache_free(uslab_cache_t *c, void *obj)
{
    uintptr_t e = usi_pagemap_lookup(obj); /* 0 for NULL: handled off the fast path */
    if (USI_UNLIKELY((e & USI_ID_MASK) != c->id)) {
        if (obj == NULL)
            return;
        free_refused(c, obj, e);
    }
    USI_VG_TAKEBACK(obj);
    usi_tcache_free(c, obj);
}

size_t uslab_cache_alloc_bulk(uslab_cache_t *c, size_t n, void **objs)
{
    usi_cache_check_live(c, "uslab_cache_alloc_bulk");
    if (n && !objs) { /* before: SIGSEGV */
        errno = EINVAL;
        return 0;
    }
    /* First what the thread's magazines hold, then the rest straight from the slabs. */
    size_t i = usi_tcache_take_cached(c, n, objs);
    if (i < n && usi_objects_fill_bulk(c, i, n, objs) == 0) {
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
    usi_cache_check_live(c, "uslab_cache_free_bulk");
    if (n && !objs) /* before: SIGSEGV; the objects it meant are lost to the program */
        usi_report_fatal("uslab_cache_free_bulk(%s, %zu, NULL): no array of objects", c->name, n);
    for (size_t i = 0; i < n; i++)
        uslab_cache_free(c, objs[i]);
}

size_t uslab_cache_reap(uslab_cache_t *c)
{
    usi_cache_check_live(c, "uslab_cache_reap");
    size_t bytes = usi_reclaim_cache(c);
    return bytes;
}

/* By contract no thread uses c any more. Its objects may still be on their way back: in
 * other threads' magazines (moved to the depot here), or in magazines being flushed by a
 * purger pass or a thread's slow path (usi_depot_drain waits for those). Only then is a
 * remaining object live, which is a bug of the caller. */
void uslab_cache_destroy(uslab_cache_t *c)
{
    if (!c)
        return;
    usi_cache_check_live(c, "uslab_cache_destroy");
    if (USI_UNLIKELY(usi_objects_in_callback_of(c)))
        usi_report_fatal("uslab_cache_destroy(%p): cache %s destroyed from inside one of its own "
                         "callbacks (constructor, destructor or reclaim); destroy it after they "
                         "return",
                         (void *)c, c->name);
    /* First no purger pass or uslab_reap on c: their destructors could free into their
     * own thread's pair while the return below moves it (design §5). */
    usi_registry_close(c);
    usi_reclaim_return(c, 1);
    usi_lock(&c->lock);
    size_t live = c->slab_inuse;
    usi_unlock(&c->lock);
    if (live != 0) {
        usi_debug_report_live(c); /* which objects, where they were allocated (U) */
        usi_report_fatal("cache %s destroyed with %zu live objects", c->name, live);
    }
    usi_registry_remove(c); /* waits for a purger pass or reap still on c */
    struct usi_slab *release = NULL;
    usi_lock(&c->lock);
    usi_slab_quarantine_drain(c, &release); /* a debug cache's last freed objects */
    usi_slab_detach_empty(c, 0, &release);
    usi_slab_leave_spans(c); /* no walk of its group reaches it from here on */
    void **ring = c->quarantine;
    size_t ring_bytes = ring ? c->quarantine_cap * sizeof(void *) : 0;
    c->quarantine = NULL;
    c->quarantine_cap = c->quarantine_head = c->quarantine_count = 0;
    usi_unlock(&c->lock);
    usi_slab_release(c, release);
    if (ring)
        usi_os_unmap(ring, ring_bytes);
    retire(c);
}

size_t uslab_reap(void)
{
    if (__atomic_load_n(&usi_initialized, __ATOMIC_ACQUIRE) <= 0)
        return 0;
    free_kept(); /* first: the reap gives their slab back */
    size_t bytes = usi_reclaim_all();
    return bytes;
}

const char *uslab_cache_name(const uslab_cache_t *c)
{
    usi_cache_check_live(c, "uslab_cache_name");
    return c->name;
}

size_t uslab_cache_object_size(const uslab_cache_t *c)
{
    usi_cache_check_live(c, "uslab_cache_object_size");
    return c->size;
}
