/* SPDX-License-Identifier: MIT */
/*
 * objects.c - objects between the slab layer and the magazines (docs/design.md §5), the
 * constructed-state contract of Bonwick (USENIX 1994) §3: an object is constructed when it
 * leaves the slab layer and destructed when it goes back; in between it may pass through
 * the user and the magazines any number of times.
 *
 * This layer takes the cache lock around the slab layer, retries once after the reclaim
 * callback when the slabs cannot grow, runs that callback too when an inline pass saw
 * memory pressure (on the cache's next allocation slow path: design §3), hands emptied
 * slabs back to the pages layer and wakes the purger. Every user callback (constructor,
 * destructor, reclaim) is called from here, with no uslab lock held (asserted in builds
 * with assertions): the callers above call in only once their own state is consistent.
 */
#include "objects.h"
#include "base.h"
#include "debug.h"
#include "descriptor.h"
#include "options.h"
#include "os.h"
#include "pages.h"
#include "purge.h"
#include "report.h"
#include "slab.h"
#include "uslab.h"

#include <string.h>

#include <errno.h>
#include <stdio.h>

/* The callbacks' key, set once by init.c (usi_objects_set_key) before any cache exists. */
static uint64_t callbacks_key;

void usi_objects_set_key(uint64_t key)
{
    callbacks_key = key;
}

/* A keyed hash of the callback pointers and their argument, bound to the descriptor's
 * address: a stray or hostile write to any of them is caught before the call
 * (docs/security.md). */
static uint64_t callbacks_hash(const struct uslab_cache *c)
{
    uint64_t h = usi_mix64(callbacks_key ^ (uint64_t)(uintptr_t)c);
    h = usi_mix64(h ^ (uint64_t)(uintptr_t)c->ctor);
    h = usi_mix64(h ^ (uint64_t)(uintptr_t)c->dtor);
    h = usi_mix64(h ^ (uint64_t)(uintptr_t)c->reclaim);
    return usi_mix64(h ^ (uint64_t)(uintptr_t)c->arg);
}

static void check_callbacks(const struct uslab_cache *c)
{
    if (USI_UNLIKELY(c->callbacks_check != callbacks_hash(c)))
        usi_report_fatal("cache %s (descriptor %p): its callback pointers were overwritten; "
                         "not calling them",
                         c->name, (const void *)c);
}

void usi_objects_init_cache(struct uslab_cache *c, const char *name, size_t size, size_t align,
                            uslab_ctor_fn ctor, uslab_dtor_fn dtor, uslab_reclaim_fn reclaim,
                            void *arg, unsigned flags)
{
    if (align == 0)
        align = size >= 16 ? 16 : 8;
    if (align < 8)
        align = 8;
    const char *src = name ? name : "(unnamed)"; /* copied, not formatted: start-up cost */
    size_t len = strnlen(src, sizeof c->name - 1);
    memcpy(c->name, src, len);
    c->name[len] = '\0';
    c->flags = flags;
    c->size = size;
    c->align = align;
    c->stride = (size + align - 1) & ~(align - 1);
    if (c->stride < USI_MIN_STRIDE) /* the side bitmaps have a bit per 16 bytes (§3) */
        c->stride = USI_MIN_STRIDE;
    c->debug = usi_debug_enabled ? usi_debug_flags_for(c->name, flags) : 0;
    if (c->debug)
        usi_debug_layout(c); /* red zones and tracking records widen the slot */
    c->ctor = ctor;
    c->dtor = dtor;
    c->reclaim = reclaim;
    c->arg = arg;
    c->callbacks_check = callbacks_hash(c);
    usi_slab_geometry(c);
    c->stride_recip = (((uint64_t)1 << 32) + c->stride - 1) / c->stride;
    if (flags & USLAB_CACHE_NOCOLOUR)
        c->colour_max = 0;
    c->empty_reserve = usi_cache_medium(c) ? 0 : usi_options.empty_reserve;
    c->purge_mult = 1;
    usi_mutex_init(&c->lock);
}

/* ---- the callbacks -------------------------------------------------------------------- */

/* The caches whose callbacks this thread is inside, outermost first (the first
 * CALLBACKS_KEPT of them; a deeper nesting is counted only), so that uslab_cache_destroy can
 * refuse a cache from inside its own callback: a destructor run by a reap or a purger pass
 * that destroyed its cache waited for that walk to end, for ever (session 17's contract
 * audit). An array, not a chain through the callers' frames: a callback that longjmps out
 * leaves a stale entry, never a dangling pointer. */
#define CALLBACKS_KEPT 8
static __thread const struct uslab_cache *tls_callbacks[CALLBACKS_KEPT]
    __attribute__((tls_model("initial-exec")));
static __thread unsigned tls_callback_depth __attribute__((tls_model("initial-exec")));

static inline void callback_enter(const struct uslab_cache *c)
{
    unsigned d = tls_callback_depth++;
    if (d < CALLBACKS_KEPT)
        tls_callbacks[d] = c;
}

static inline void callback_leave(void)
{
    tls_callback_depth--;
}

int usi_objects_in_callback_of(const struct uslab_cache *c)
{
    unsigned depth = tls_callback_depth < CALLBACKS_KEPT ? tls_callback_depth : CALLBACKS_KEPT;
    for (unsigned i = 0; i < depth; i++)
        if (tls_callbacks[i] == c)
            return 1;
    return 0;
}

/* Runs the destructor on an object uslab holds (freed, as far as Valgrind knows). */
static inline __attribute__((always_inline)) void destruct(struct uslab_cache *c, void *obj)
{
    USI_ASSERT_NO_LOCK();
    check_callbacks(c);
    USI_VG_DEFINED(obj, c->size);
    callback_enter(c);
    c->dtor(obj, c->arg);
    callback_leave();
    USI_VG_NOACCESS(obj, c->size);
}

/* Runs the constructor; on failure errno says why (ENOMEM if the constructor left none). */
static int construct(struct uslab_cache *c, void *obj)
{
    USI_ASSERT_NO_LOCK();
    check_callbacks(c);
    USI_VG_UNDEFINED(obj, c->size);
    int saved = errno;
    errno = 0;
    callback_enter(c);
    int failed = c->ctor(obj, c->arg) != 0;
    callback_leave();
    if (failed) {
        if (errno == 0)
            errno = ENOMEM;
        return -1;
    }
    errno = saved;
    return 0;
}

/* Set while this thread runs a reclaim callback: an allocation that fails inside one calls
 * none (of any cache) again. A callback that allocated from its own starved cache called
 * itself until the stack overflowed (SIGSEGV; session 16), and two caches whose callbacks
 * allocate from each other would do the same. The nested allocation fails instead
 * (ENOMEM), after the starved pass, and the outer call goes on. */
static __thread int tls_in_reclaim __attribute__((tls_model("initial-exec")));

void usi_objects_call_reclaim(struct uslab_cache *c)
{
    USI_ASSERT_NO_LOCK();
    check_callbacks(c);
    tls_in_reclaim++;
    callback_enter(c);
    c->reclaim(c->arg);
    callback_leave();
    tls_in_reclaim--;
}

void usi_objects_reclaim_later(struct uslab_cache *c)
{
    if (c->reclaim)
        __atomic_store_n(&c->reclaim_wanted, 1, __ATOMIC_RELAXED);
}

void usi_objects_reclaim_now(struct uslab_cache *c)
{
    if (!__atomic_exchange_n(&c->reclaim_wanted, 0, __ATOMIC_RELAXED) || !c->reclaim)
        return;
    int e = errno; /* the allocation's errno, if it failed, is the caller's */
    usi_objects_call_reclaim(c);
    errno = e;
}

/* ---- objects in passage (a fork child puts an orphaned thread's back) ------------------ */

static __thread struct usi_limbo *tls_limbo __attribute__((tls_model("initial-exec")));
/* Records in use: passages nest (a callback's or a signal handler's ends before the one it
 * interrupted), so the records are a stack. */
static __thread unsigned tls_limbo_depth __attribute__((tls_model("initial-exec")));

void usi_objects_set_limbo(struct usi_limbo *slots)
{
    tls_limbo = slots;
}

/* A passage is named by its record's slot (+1; 0: none), never by the record's address:
 * a callback may grow the thread cache, which moves the records (tcache.c). */
typedef uintptr_t limbo_slot;

/* Records objs[0 .. n) of c as this thread's objects in passage (the record is updated
 * where *slot names one already), under c->lock for a take. *slot stays 0 where the
 * thread has no thread cache or all its records are in use (design §12). */
static inline void limbo_note(limbo_slot *slot, struct uslab_cache *c, void *const *objs, size_t n)
{
    struct usi_limbo *slots = tls_limbo;
    if (!slots || n == 0)
        return;
    if (!*slot) {
        unsigned depth = tls_limbo_depth;
        if (depth >= USI_LIMBO_SLOTS)
            return;
        tls_limbo_depth = depth + 1;
        *slot = depth + 1;
    }
    struct usi_limbo *l = &slots[*slot - 1];
    l->n = n;
    l->one = objs[0];
    l->objs = objs; /* read only where n > 1: the caller's array may be on its stack */
    __atomic_store_n(&l->cache, c, __ATOMIC_RELEASE);
}

static inline void limbo_end(limbo_slot slot)
{
    struct usi_limbo *slots = tls_limbo;
    if (!slot)
        return;
    tls_limbo_depth = (unsigned)slot - 1;
    if (slots)
        __atomic_store_n(&slots[slot - 1].cache, NULL, __ATOMIC_RELEASE);
}

/* put_raw_then's `locked` step that ends a passage: in the hold that puts the objects. */
static void limbo_end_locked(struct uslab_cache *c, void *arg)
{
    (void)c;
    limbo_end((limbo_slot)arg);
}

/* ---- raw objects to and from the slabs ----------------------------------------------- */

/* take_raw's retry: `want` more objects into objs[got ..]. */
static size_t take_more(struct uslab_cache *c, size_t want, void **objs, size_t got, limbo_slot *lp,
                        size_t held, struct usi_fresh_pages *fresh)
{
    usi_lock(&c->lock);
    size_t more = usi_slab_take(c, want, objs + got, fresh, 0);
    if (lp)
        limbo_note(lp, c, objs - held, held + got + more);
    usi_unlock(&c->lock);
    return more;
}

/* Takes n raw objects; when the slabs cannot grow and `how` has USI_FILL_RECLAIM, calls
 * the reclaim callback once and tries again. Where a constructor will run on them (`lp`
 * non-NULL), they are recorded as in passage in the hold that takes them, with the
 * `held` objects before objs[0] (the caller's, recorded already). */
static size_t take_raw(struct uslab_cache *c, size_t n, void **objs, int how, limbo_slot *lp,
                       size_t held, void **zero)
{
    int reclaim = how & USI_FILL_RECLAIM;
    /* A filler keeps two threads' objects out of one cache line (design §3, "Fillers"). A
     * lattice class whose stride is a multiple of a line has no line to share (its objects
     * start at multiples of the stride), and a slab a thread cost its first pages. */
    int shares_lines = !(c->flags & USI_CACHE_LATTICE) || c->stride % USI_CACHE_LINE;
    unsigned filler = how & USI_FILL_THREAD && shares_lines ? usi_slab_filler() : 0;
    if (USI_UNLIKELY(c->debug))
        usi_debug_capture();
    struct usi_fresh_pages fresh = {.n = 0, .zero = zero ? USI_FRESH_ASK : NULL};
    usi_lock(&c->lock);
    size_t got = usi_slab_take(c, n, objs, &fresh, filler);
    if (lp)
        limbo_note(lp, c, objs - held, held + got);
    usi_unlock(&c->lock);
    /* The slabs could not grow: other caches' empty slabs (and cached objects where no
     * destructor runs) go back first, then the reclaim callback, then again what it freed,
     * to any cache (uslab.h; design §3, "When the slabs cannot grow"). */
    if (got < n && usi_purge_starved())
        got += take_more(c, n - got, objs, got, lp, held, &fresh);
    if (got < n && reclaim && c->reclaim && !tls_in_reclaim) {
        usi_objects_call_reclaim(c);
        usi_purge_starved();
        got += take_more(c, n - got, objs, got, lp, held, &fresh);
    }
    if (fresh.n) /* most takes reach no fresh range: no call */
        usi_slab_populate(&fresh);
    if (c->lattice) {
        usi_slab_handout(got, objs);
        if (zero)
            *zero = got && !c->ctor && fresh.zero == objs[got - 1] ? fresh.zero : NULL;
    }
    if (USI_UNLIKELY(got < n))
        __atomic_store_n(&c->starved, USI_STARVED_SKIP, __ATOMIC_RELAXED);
    if (USI_UNLIKELY(__atomic_load_n(&usi_slab_surplus_seen, __ATOMIC_RELAXED)) &&
        __atomic_exchange_n(&usi_slab_surplus_seen, 0, __ATOMIC_RELAXED))
        usi_purge_surplus();
    return got;
}

/* Returns objs to their slabs; `locked`, if given, runs under the same hold of the cache
 * lock (the depot's in-flight list: a fork never sees the objects back and the magazine
 * still listed, or the reverse). Returns usi_slab_put's count of runs. */
static size_t put_raw_then(struct uslab_cache *c, size_t n, void *const *objs,
                           void (*locked)(struct uslab_cache *, void *), void *arg)
{
    if (USI_UNLIKELY(c->debug))
        usi_debug_capture_put(c);
    struct usi_slab *release = NULL;
    usi_lock(&c->lock);
    int was_pending = c->purge_pending;
    size_t runs = usi_slab_put(c, n, objs, &release);
    if (locked)
        locked(c, arg);
    if (USI_UNLIKELY(__atomic_load_n(&c->starved, __ATOMIC_RELAXED)))
        __atomic_store_n(&c->starved, 0, __ATOMIC_RELAXED); /* a slab has room again */
    int kick = c->purge_pending && !was_pending;
    usi_unlock(&c->lock);
    if (release)
        usi_slab_release(c, release);
    if (kick)
        usi_purge_kick();
    return runs;
}

static void put_raw(struct uslab_cache *c, size_t n, void *const *objs)
{
    put_raw_then(c, n, objs, NULL, NULL);
}

void usi_objects_put_back(struct uslab_cache *c, size_t n, void *const *objs)
{
    put_raw(c, n, objs);
}

int usi_objects_debug_check_live(struct uslab_cache *c, const void *p, const char *fn)
{
    usi_debug_capture(); /* a report's "detected in": the unwinder runs before the lock */
    usi_lock(&c->lock);
    int bad = usi_slab_debug_check_live(c, p, fn);
    usi_unlock(&c->lock);
    return bad;
}

/* ---- constructed objects -------------------------------------------------------------- */

void *usi_objects_alloc(struct uslab_cache *c)
{
    void *obj;
    limbo_slot l = 0;
    /* In passage from the take (and the reclaim callback) to the constructor's return. */
    if (take_raw(c, 1, &obj, USI_FILL_RECLAIM, c->ctor || c->reclaim ? &l : NULL, 0, NULL) == 0) {
        limbo_end(l);
        if (!(c->flags & USI_CACHE_KEEP_ERRNO))
            errno = ENOMEM;
        return NULL;
    }
    if (c->ctor && construct(c, obj) != 0) {
        int e = errno;
        put_raw_then(c, 1, &obj, limbo_end_locked, (void *)l);
        errno = e;
        return NULL;
    }
    limbo_end(l);
    return obj;
}

/* usi_objects_fill into objs[0 .. n), where the `held` objects before objs[0] are the
 * caller's (constructed, from its magazines): they are recorded with the new ones as in
 * passage while constructors or the reclaim callback run (design §7). */
static size_t fill(struct uslab_cache *c, size_t held, size_t n, void **objs, int how, void **zero)
{
    limbo_slot l = 0;
    int record = c->ctor || ((how & USI_FILL_RECLAIM) && c->reclaim);
    if (record && held)
        limbo_note(&l, c, objs - held, held);
    size_t got = take_raw(c, n, objs, how, record ? &l : NULL, held, zero);
    if (got < n) {
        if (got)
            put_raw_then(c, got, objs, limbo_end_locked, (void *)l);
        else
            limbo_end(l);
        if (!(c->flags & USI_CACHE_KEEP_ERRNO))
            errno = ENOMEM;
        return 0;
    }
    for (size_t i = 0; c->ctor && i < n; i++) {
        if (construct(c, objs[i]) != 0) {
            int e = errno;
            if (c->dtor)
                for (size_t j = 0; j < i; j++)
                    destruct(c, objs[j]);
            put_raw_then(c, n, objs, limbo_end_locked, (void *)l);
            errno = e;
            return 0;
        }
    }
    limbo_end(l);
    return n;
}

size_t usi_objects_fill(struct uslab_cache *c, size_t n, void **objs, int how, void **zero)
{
    return fill(c, 0, n, objs, how, zero);
}

size_t usi_objects_fill_bulk(struct uslab_cache *c, size_t held, size_t n, void **objs)
{
    return fill(c, held, n - held, objs + held, USI_FILL_RECLAIM, NULL) ? n : 0;
}

size_t usi_objects_unfill_then(struct uslab_cache *c, size_t n, void *const *objs,
                               uint32_t *destructed, void (*locked)(struct uslab_cache *, void *),
                               void *arg)
{
    /* A magazine in flight is on its cache's list (the depot's `locked`); other objects
     * are recorded as in passage while the destructor runs on them. */
    if (c->dtor && !locked && n) {
        limbo_slot l = 0;
        limbo_note(&l, c, objs, n);
        if (l) {
            locked = limbo_end_locked;
            arg = (void *)l;
        }
    }
    if (c->dtor)
        for (size_t i = 0; i < n; i++) {
            destruct(c, objs[i]);
            if (destructed) /* read by a fork child: a plain store, after the call */
                __atomic_store_n(destructed, (uint32_t)(i + 1), __ATOMIC_RELAXED);
        }
    return put_raw_then(c, n, objs, locked, arg);
}

size_t usi_objects_unfill(struct uslab_cache *c, size_t n, void *const *objs)
{
    return usi_objects_unfill_then(c, n, objs, NULL, NULL, NULL);
}

void usi_objects_limbo_return(struct usi_limbo *slots)
{
    for (unsigned i = 0; i < USI_LIMBO_SLOTS; i++) {
        struct usi_limbo *l = &slots[i];
        struct uslab_cache *c = __atomic_load_n(&l->cache, __ATOMIC_ACQUIRE);
        if (!c)
            continue;
        /* Raw: a constructor or destructor may have been half way through any of them. */
        put_raw(c, l->n, l->n == 1 ? (void *const *)&l->one : l->objs);
        __atomic_store_n(&l->cache, NULL, __ATOMIC_RELAXED);
    }
}
