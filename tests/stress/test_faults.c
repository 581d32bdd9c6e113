/* SPDX-License-Identifier: MIT */
/*
 * test_faults.c - uslab while the os layer's mmap, mprotect, madvise and munmap fail at
 * random (issue 10; the fault switch of builds with USLAB_FAULT_INJECTION, docs/design.md
 * §2). Four threads (the main one included) run random malloc, calloc, realloc,
 * aligned_alloc and free, allocate from three shared object caches with constructors and
 * destructors, create and destroy a private cache each, reap, and pass blocks to each
 * other through a mailbox. The main thread changes the fault rate as it goes (up to every
 * call failing), starts short-lived threads, and forks twice: the child checks and frees
 * the main thread's blocks, allocates and verifies under the same faults, and exits 0
 * (under ThreadSanitizer it only checks, see child_work).
 *
 * Checked, whatever fails underneath:
 *  - no crash, and every block's contents intact (a pattern of its id, checked before it
 *    is realloc'ed or freed), calloc blocks zero, alignment kept;
 *  - no block handed out twice: every live block is in one set, inserted at allocation;
 *  - the malloc family never returns NULL for the sizes used here (glibc would not fail:
 *    uslab must fall back to it); uslab_cache_alloc may return NULL, with errno ENOMEM;
 *  - objects leave a cache constructed and come back to the destructor constructed;
 *  - nothing is lost once the faults stop: every cache is destroyed without live objects,
 *    each ran its destructor once per constructor call, and after uslab_reap no cache has
 *    a slab or an object left. That last check runs against libuslab only (under
 *    LD_PRELOAD the process's own blocks live in uslab's malloc), with USLAB_PURGE_DELAY=0
 *    (a purger pass could be flushing magazines at that moment); the preload run keeps the
 *    purger busy instead (USLAB_PURGE_DELAY=1).
 *
 * Usage: stress_faults [ops per thread] [seed]. Built twice: against libuslab
 * (uslab_malloc) and, with PLAIN_MALLOC, against plain malloc, run under LD_PRELOAD of
 * libuslab-preload.
 */
#define _GNU_SOURCE
#include "check.h"
#include "faults.h"
#include "testutil.h"
#include "uslab.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef PLAIN_MALLOC
#define F_MALLOC(n)     malloc(n)
#define F_CALLOC(n, m)  calloc(n, m)
#define F_REALLOC(p, n) realloc(p, n)
#define F_ALIGNED(a, n) aligned_alloc(a, n)
#define F_FREE(p)       free(p)
#define F_USABLE(p)     malloc_usable_size(p)
#include <malloc.h>
#else
#define F_MALLOC(n)     uslab_malloc(n)
#define F_CALLOC(n, m)  uslab_calloc(n, m)
#define F_REALLOC(p, n) uslab_realloc(p, n)
#define F_ALIGNED(a, n) uslab_aligned_alloc(a, n)
#define F_FREE(p)       uslab_free(p)
#define F_USABLE(p)     uslab_malloc_usable_size(p)
#endif

#if defined(__SANITIZE_THREAD__)
#define TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TSAN 1
#endif
#endif
#ifndef TSAN
#define TSAN 0
#endif
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED TSAN
#endif

#define NTHREADS 4    /* the main thread and three workers */
#define NSLOTS   1024 /* blocks a thread holds at most */
#define NSHARED  3    /* object caches all threads use */
#define NMAIL    64   /* mailbox slots: blocks passed between threads */
#define NHELPERS 4    /* short-lived threads started by the main thread */

/* ---- memory of the test itself: mmap, never the allocator under test ---------------- */

static void *test_map(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED, "mmap of %zu bytes for the test", bytes);
    return p;
}

/* ---- the set of live blocks: sharded, one lock per shard ------------------------------ */

#define NSHARDS     64
#define SHARD_SLOTS 8192

struct shard {
    pthread_mutex_t lock;
    struct ptrset set;
};
static struct shard *shards;
/* In a fork child the shard locks may be held by threads that do not exist there: the
 * child keeps its own set. */
static struct ptrset *child_set;

static void sets_init(void)
{
    shards = test_map(NSHARDS * sizeof *shards);
    for (int i = 0; i < NSHARDS; i++) {
        pthread_mutex_init(&shards[i].lock, NULL);
        shards[i].set.slot = test_map(SHARD_SLOTS * sizeof(uintptr_t));
        shards[i].set.mask = SHARD_SLOTS - 1;
    }
}

static struct shard *shard_of(const void *p)
{
    return &shards[splitmix64((uintptr_t)p) >> 58];
}

static void live_add(const void *p, size_t size)
{
    int fresh;
    if (child_set) {
        fresh = ptrset_insert(child_set, p);
    } else {
        struct shard *s = shard_of(p);
        pthread_mutex_lock(&s->lock);
        fresh = ptrset_insert(&s->set, p);
        pthread_mutex_unlock(&s->lock);
    }
    CHECK(fresh, "block %p (%zu bytes) handed out while it is live", p, size);
}

static void live_del(const void *p)
{
    int found;
    if (child_set) {
        found = ptrset_remove(child_set, p);
    } else {
        struct shard *s = shard_of(p);
        pthread_mutex_lock(&s->lock);
        found = ptrset_remove(&s->set, p);
        pthread_mutex_unlock(&s->lock);
    }
    CHECK(found, "block %p freed but not live", p);
}

/* ---- object caches: constructed objects carry a magic word and a state -------------- */

#define OBJ_MAGIC 0x6661756c74732121ull /* constructed */
#define OBJ_DEAD  0x6465616464656164ull /* destructed */
#define OBJ_HEAD  16

struct counts {
    unsigned long ctors, dtors;
};

static int obj_ctor(void *obj, void *arg)
{
    uint64_t head[2] = {OBJ_MAGIC, 0};
    memcpy(obj, head, sizeof head);
    __atomic_fetch_add(&((struct counts *)arg)->ctors, 1, __ATOMIC_RELAXED);
    return 0;
}

static void obj_dtor(void *obj, void *arg)
{
    uint64_t head[2];
    memcpy(head, obj, sizeof head);
    CHECK(head[0] == OBJ_MAGIC && head[1] == 0,
          "destructor of %p: not constructed (magic %#llx, state %llu)", obj,
          (unsigned long long)head[0], (unsigned long long)head[1]);
    head[0] = OBJ_DEAD;
    memcpy(obj, head, sizeof head);
    __atomic_fetch_add(&((struct counts *)arg)->dtors, 1, __ATOMIC_RELAXED);
}

static const size_t shared_size[NSHARED] = {48, 264, 3000};
static uslab_cache_t *shared[NSHARED];
static struct counts shared_counts[NSHARED];

/* ---- blocks ---------------------------------------------------------------------------- */

enum { B_NONE, B_MALLOC, B_SHARED, B_PRIVATE };

struct block {
    unsigned char *p;
    size_t size; /* asked for; objects: the cache's object size */
    uint64_t id;
    int kind;
    int cache; /* B_SHARED: index in shared[] */
};

struct worker {
    int idx;
    int helper; /* short-lived: no private cache, frees everything under faults */
    long ops;
    struct rng r;
    uint64_t next_id;
    struct block slot[NSLOTS];
    uslab_cache_t *priv;
    struct counts *priv_counts; /* one per private cache made, kept to the end */
    size_t npriv, maxpriv;
    unsigned long cache_nulls; /* uslab_cache_alloc returned NULL (ENOMEM) */
    unsigned long creates_failed;
    pthread_t th;
};

static struct block *mail;
static FILE *devnull; /* statistics are printed here */
static pthread_mutex_t mail_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t rand_size(struct rng *r)
{
    unsigned pick = (unsigned)rng_below(r, 100);
    if (pick < 80)
        return (size_t)rng_below(r, 513);
    if (pick < 97)
        return 512 + (size_t)rng_below(r, 32 * 1024 - 512);
    return 32 * 1024 + (size_t)rng_below(r, 160 * 1024); /* glibc's, and never fails */
}

static void check_block(const struct block *b)
{
    if (b->kind == B_MALLOC) {
        size_t bad = pattern_check(b->p, b->size, b->id);
        CHECK(bad == (size_t)-1, "block %p (%zu bytes, id %#llx) corrupted at byte %zu",
              (void *)b->p, b->size, (unsigned long long)b->id, bad);
        return;
    }
    uint64_t head[2];
    memcpy(head, b->p, sizeof head);
    CHECK(head[0] == OBJ_MAGIC && head[1] == 1, "object %p: header overwritten", (void *)b->p);
    size_t bad = pattern_check(b->p + OBJ_HEAD, b->size - OBJ_HEAD, b->id);
    CHECK(bad == (size_t)-1, "object %p (%zu bytes) corrupted at byte %zu", (void *)b->p, b->size,
          OBJ_HEAD + bad);
}

static uslab_cache_t *cache_of(struct worker *w, const struct block *b)
{
    return b->kind == B_SHARED ? shared[b->cache] : w->priv;
}

static void new_malloc(struct worker *w, struct block *b)
{
    size_t n = rand_size(&w->r);
    unsigned how = (unsigned)rng_below(&w->r, 8);
    size_t align = 0;
    unsigned char *p;
    if (how == 0) {
        p = F_CALLOC(1, n);
        CHECK(p, "calloc(1, %zu) failed, errno %d: glibc would not", n, errno);
        for (size_t i = 0; i < n; i++)
            CHECK(p[i] == 0, "calloc(1, %zu) byte %zu is %#x", n, i, p[i]);
    } else if (how == 1) {
        align = (size_t)32 << rng_below(&w->r, 8); /* 32 .. 4096 */
        n = (n + align - 1) & ~(align - 1);
        p = F_ALIGNED(align, n);
        CHECK(p, "aligned_alloc(%zu, %zu) failed, errno %d: glibc would not", align, n, errno);
        CHECK(((uintptr_t)p & (align - 1)) == 0, "aligned_alloc(%zu) = %p", align, (void *)p);
    } else {
        p = F_MALLOC(n);
        CHECK(p, "malloc(%zu) failed, errno %d: glibc would not", n, errno);
    }
    CHECK(n < 16 || ((uintptr_t)p & 15) == 0, "block of %zu bytes at %p not 16-aligned", n,
          (void *)p);
    CHECK(F_USABLE(p) >= n, "usable size of a %zu-byte block: %zu", n, F_USABLE(p));
    live_add(p, n);
    *b = (struct block){p, n, ++w->next_id, B_MALLOC, 0};
    pattern_fill(p, n, b->id);
}

static void new_object(struct worker *w, struct block *b, int kind, int cache)
{
    uslab_cache_t *c = kind == B_SHARED ? shared[cache] : w->priv;
    errno = 0;
    unsigned char *p = uslab_cache_alloc(c);
    if (!p) {
        CHECK(errno == ENOMEM, "uslab_cache_alloc failed with errno %d, not ENOMEM", errno);
        w->cache_nulls++;
        return;
    }
    size_t size = uslab_cache_object_size(c);
    uint64_t head[2];
    memcpy(head, p, sizeof head);
    CHECK(head[0] == OBJ_MAGIC && head[1] == 0, "object %p of %s not constructed", (void *)p,
          uslab_cache_name(c));
    live_add(p, size);
    head[1] = 1;
    memcpy(p, head, sizeof head);
    *b = (struct block){p, size, ++w->next_id, kind, cache};
    pattern_fill(p + OBJ_HEAD, size - OBJ_HEAD, b->id);
}

static void free_block(struct worker *w, struct block *b)
{
    check_block(b);
    live_del(b->p);
    if (b->kind == B_MALLOC) {
        F_FREE(b->p);
    } else {
        uint64_t head[2] = {OBJ_MAGIC, 0}; /* back in its constructed state */
        memcpy(b->p, head, sizeof head);
        uslab_cache_free(cache_of(w, b), b->p);
    }
    b->kind = B_NONE;
}

static void realloc_block(struct worker *w, struct block *b)
{
    check_block(b);
    size_t n = rng_below(&w->r, 4) ? rand_size(&w->r) : b->size / 2;
    n += n == 0; /* realloc(p, 0) frees */
    live_del(b->p);
    unsigned char *q = F_REALLOC(b->p, n);
    CHECK(q, "realloc(%zu -> %zu) failed, errno %d: glibc would not", b->size, n, errno);
    size_t keep = n < b->size ? n : b->size;
    size_t bad = pattern_check(q, keep, b->id);
    CHECK(bad == (size_t)-1, "realloc(%zu -> %zu) lost byte %zu", b->size, n, bad);
    live_add(q, n);
    b->p = q;
    b->size = n;
    pattern_fill(q, n, b->id);
}

/* Swaps a block (malloc or shared cache, or an empty slot) with a mailbox slot: the other
 * thread that takes it will realloc or free it. */
static void mailbox(struct worker *w, struct block *b)
{
    if (b->kind == B_PRIVATE)
        return;
    unsigned i = (unsigned)rng_below(&w->r, NMAIL);
    pthread_mutex_lock(&mail_lock);
    struct block t = mail[i];
    mail[i] = *b;
    *b = t;
    pthread_mutex_unlock(&mail_lock);
}

/* Destroys the private cache (all its objects freed first) and makes another one. */
static void private_cycle(struct worker *w)
{
    if (w->priv) {
        for (int i = 0; i < NSLOTS; i++)
            if (w->slot[i].kind == B_PRIVATE)
                free_block(w, &w->slot[i]);
        uslab_cache_destroy(w->priv); /* aborts if uslab still counts a live object */
        struct counts *k = &w->priv_counts[w->npriv - 1];
        CHECK(k->ctors == k->dtors, "private cache destroyed: %lu constructed, %lu destructed",
              k->ctors, k->dtors);
        w->priv = NULL;
    }
    if (w->npriv == w->maxpriv)
        return;
    struct counts *k = &w->priv_counts[w->npriv];
    size_t size = OBJ_HEAD + (size_t)rng_below(&w->r, 2000);
    errno = 0;
    w->priv = uslab_cache_create("private", size, 0, obj_ctor, obj_dtor, NULL, k, 0);
    if (!w->priv) {
        CHECK(errno == ENOMEM, "uslab_cache_create failed with errno %d, not ENOMEM", errno);
        w->creates_failed++;
        return;
    }
    w->npriv++;
}

static void one_op(struct worker *w)
{
    struct block *b = &w->slot[rng_below(&w->r, NSLOTS)];
    unsigned op = (unsigned)rng_below(&w->r, 1000);
    if (op < 2 && !w->helper) {
        private_cycle(w);
    } else if (op < 3) {
        uslab_reap();
    } else if (op < 5) {
        uslab_cache_reap(shared[rng_below(&w->r, NSHARED)]);
    } else if (op < 6 && !TSAN) {
        /* Maps and unmaps its snapshot memory: -1 when that mapping is refused. Not under
         * ThreadSanitizer: it reads other threads' magazine pairs without their locks, a
         * snapshot by design (usi_tcache_cached_objects) that TSan reports as a race. */
        int r =
            uslab_stats_print(devnull, rng_below(&w->r, 2) ? USLAB_STATS_JSON : USLAB_STATS_TABLE);
        CHECK(r == 0 || r == -1, "uslab_stats_print returned %d", r);
    } else if (op < 40) {
        mailbox(w, b);
    } else if (b->kind == B_NONE) {
        unsigned what = (unsigned)rng_below(&w->r, 10);
        if (what < 5)
            new_malloc(w, b);
        else if (what < 9 || !w->priv)
            new_object(w, b, B_SHARED, (int)rng_below(&w->r, NSHARED));
        else
            new_object(w, b, B_PRIVATE, 0);
    } else if (b->kind == B_MALLOC && op < 300) {
        realloc_block(w, b);
    } else {
        free_block(w, b);
    }
}

static void free_all(struct worker *w)
{
    for (int i = 0; i < NSLOTS; i++)
        if (w->slot[i].kind != B_NONE)
            free_block(w, &w->slot[i]);
}

static struct worker *worker_new(int idx, int helper, long ops, uint64_t seed)
{
    struct worker *w = test_map(sizeof *w);
    w->idx = idx;
    w->helper = helper;
    w->ops = ops;
    w->r.s = seed * 1000003u + (uint64_t)idx;
    w->next_id = (uint64_t)idx << 48;
    w->maxpriv = helper ? 0 : 4096;
    if (w->maxpriv)
        w->priv_counts = test_map(w->maxpriv * sizeof(struct counts));
    return w;
}

/* ---- the main thread: fault phases, helpers, fork -------------------------------------- */

static const char *const phases[] = {"0.01,11", "0.1,12",  "0.5,13", "0.02,14",
                                     "1,15",    "0.25,16", "0.9,17", "0.05,18"};
#define NPHASES ((int)(sizeof phases / sizeof phases[0]))

static void *helper_main(void *arg)
{
    struct worker *w = arg;
    for (long i = 0; i < w->ops; i++)
        one_op(w);
    free_all(w); /* under faults: thread exit flushes its magazines as well */
    return NULL;
}

/* In the child: the main thread's blocks are checked and half of them freed, new ones
 * come and go under the same faults, and the private cache cycles; then exit 0. The
 * mailbox and the shared set are left alone: their locks may be held by threads that do
 * not exist here. */
static void child_work(struct worker *w)
{
    static struct ptrset set;
    set.slot = test_map(65536 * sizeof(uintptr_t));
    set.mask = 65535;
    child_set = &set;
    for (int i = 0; i < NSLOTS; i++)
        if (w->slot[i].kind != B_NONE)
            CHECK(ptrset_insert(&set, w->slot[i].p), "the parent held %p twice",
                  (void *)w->slot[i].p);
    for (int i = 0; i < NSLOTS; i++)
        if (w->slot[i].kind != B_NONE)
            check_block(&w->slot[i]);
    /* Under ThreadSanitizer the child only checks: the sanitizer's own allocator (clang
     * 14's) is not fork-safe, and a child whose realloc reached it (a block for glibc)
     * waited forever on a lock that another thread of the parent held at the fork. The
     * other builds free and allocate here. */
    if (TSAN)
        _exit(0);
    for (int i = 1; i < NSLOTS; i += 2)
        if (w->slot[i].kind != B_NONE)
            free_block(w, &w->slot[i]);
    for (long i = 0; i < 20000; i++) {
        struct block *b = &w->slot[rng_below(&w->r, NSLOTS)];
        unsigned op = (unsigned)rng_below(&w->r, 100);
        if (op == 0)
            private_cycle(w);
        else if (b->kind == B_NONE && (op & 1))
            new_malloc(w, b);
        else if (b->kind == B_NONE)
            new_object(w, b, B_SHARED, (int)(op % NSHARED));
        else if (b->kind == B_MALLOC && op < 30)
            realloc_block(w, b);
        else
            free_block(w, b);
    }
    free_all(w);
    _exit(0);
}

static void fork_and_check(struct worker *w)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0)
        child_work(w);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the fork child failed (status %#x)",
          status);
}

static pthread_barrier_t barrier;

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    for (long i = 0; i < w->ops; i++)
        one_op(w);
    pthread_barrier_wait(&barrier); /* all done under faults */
    pthread_barrier_wait(&barrier); /* faults off */
    free_all(w);
    private_cycle(w); /* destroys the private cache (and makes one more) */
    if (w->priv) {
        uslab_cache_destroy(w->priv);
        w->priv = NULL;
    }
    return NULL;
}

/*
 * Freed spans are reused without a kernel call: slabs fail to grow only where the pages
 * layer must commit more of its range (mprotect). So a burst of objects at fault rate 1
 * must end in ENOMEM once the committed range is used up; while the burst holds it all,
 * the malloc family must still succeed (glibc serves what the slabs cannot). The bursts at
 * other rates (limit n) get through or not.
 */
#define BURST_CAP    (256 * 1024) /* 750 MiB of 3000-byte objects: more than ever committed */
#define BURST_MALLOC 1024
static void *burst_objs[BURST_CAP], *burst_blocks[BURST_MALLOC];
/* Allocates n objects of a shared cache, or until refused; checks and frees them. Returns
 * how many it got. */
static size_t burst(struct worker *w, size_t n)
{
    const size_t size = shared_size[2];
    size_t got = 0;
    for (; got < n; got++) {
        errno = 0;
        unsigned char *p = uslab_cache_alloc(shared[2]);
        if (!p) {
            CHECK(errno == ENOMEM, "burst: uslab_cache_alloc errno %d, not ENOMEM", errno);
            w->cache_nulls++;
            break;
        }
        live_add(p, size);
        pattern_fill(p + OBJ_HEAD, size - OBJ_HEAD, got);
        burst_objs[got] = p;
    }
    CHECK(n < BURST_CAP || got < n, "%zu objects at fault rate 1: the slabs kept growing", got);
    struct block b[4] = {{0}};
    for (int i = 0; i < 4; i++) /* malloc, calloc, aligned_alloc in any mix */
        new_malloc(w, &b[i]);
    for (size_t i = 0; i < BURST_MALLOC; i++) {
        size_t bytes = 16 + i * 8;
        burst_blocks[i] = F_MALLOC(bytes);
        CHECK(burst_blocks[i], "burst: malloc(%zu) failed, errno %d: glibc would not", bytes,
              errno);
        live_add(burst_blocks[i], bytes);
        pattern_fill(burst_blocks[i], bytes, i);
    }
    realloc_block(w, &b[0]);
    for (size_t i = 0; i < got; i++) {
        unsigned char *p = burst_objs[i];
        size_t bad = pattern_check(p + OBJ_HEAD, size - OBJ_HEAD, i);
        CHECK(bad == (size_t)-1, "burst object %zu corrupted at byte %zu", i, bad);
        live_del(p);
        uslab_cache_free(shared[2], p);
    }
    for (size_t i = 0; i < BURST_MALLOC; i++) {
        size_t bad = pattern_check(burst_blocks[i], 16 + i * 8, i);
        CHECK(bad == (size_t)-1, "burst block %zu corrupted at byte %zu", i, bad);
        live_del(burst_blocks[i]);
        F_FREE(burst_blocks[i]);
    }
    for (int i = 0; i < 4; i++)
        free_block(w, &b[i]);
    return got;
}

/* Caches with ids past the thread caches' first size: the calling thread's cache grows
 * (a new mapping, the old one unmapped), under faults. */
#define NMANY 120
static void many_caches(struct worker *w)
{
    static uslab_cache_t *many[NMANY];
    static struct counts many_counts[NMANY];
    for (int i = 0; i < NMANY; i++) {
        many[i] = uslab_cache_create("many", 64, 0, obj_ctor, obj_dtor, NULL, &many_counts[i], 0);
        CHECK(many[i] || errno == ENOMEM, "uslab_cache_create: errno %d, not ENOMEM", errno);
    }
    for (int i = NMANY - 1; i >= 0; i--) {
        struct block b = {0};
        if (!many[i])
            continue;
        uslab_cache_t *priv = w->priv;
        w->priv = many[i];
        new_object(w, &b, B_PRIVATE, 0);
        if (b.kind != B_NONE)
            free_block(w, &b);
        w->priv = priv;
        uslab_cache_destroy(many[i]);
        CHECK(many_counts[i].ctors == many_counts[i].dtors,
              "cache %d: %lu constructed, %lu destructed", i, many_counts[i].ctors,
              many_counts[i].dtors);
    }
}

static void main_ops(struct worker *w)
{
    int phase = -1, helpers = 0;
    pthread_t helper[NHELPERS];
    for (long i = 0; i < w->ops; i++) {
        int p = (int)(i * NPHASES / w->ops);
        if (p != phase) {
            phase = p;
            CHECK(uslab_faults_set(phases[p]) == 0, "fault spec %s", phases[p]);
            if (p == 2 || p == 6)
                fork_and_check(w);
            if (p == 2 || p == 6) /* rates 0.5 and 0.9: 12 and 48 MiB */
                burst(w, (size_t)(p == 2 ? 4096 : 16384));
            if (p == 4) { /* rate 1: until refused */
                burst(w, BURST_CAP);
                /* Then mprotect alone, always: the slabs grow until committing more is
                 * refused. Without it, an mprotect fails only where the random calls
                 * happened to refuse a guard marker first (1 run in ~150 had none). */
                unsigned long before = uslab_faults_injected("p");
                CHECK(uslab_faults_set("1,19,p") == 0, "fault spec 1,19,p");
                burst(w, BURST_CAP);
                CHECK(uslab_faults_injected("p") > before, "no commit was refused");
                CHECK(uslab_faults_set(phases[p]) == 0, "fault spec %s", phases[p]);
            }
            if (p == 5)
                many_caches(w);
            if (p & 1 && helpers < NHELPERS) {
                struct worker *h = worker_new(NTHREADS + helpers, 1, w->ops / 8, w->r.s);
                CHECK(pthread_create(&helper[helpers], NULL, helper_main, h) == 0, "helper");
                helpers++;
            }
        }
        one_op(w);
    }
    for (int i = 0; i < helpers; i++)
        pthread_join(helper[i], NULL);
}

#ifndef PLAIN_MALLOC
/* After everything was freed and reaped: the statistics list no cache with a slab or an
 * object (uslab_stats_print leaves out caches with neither), but the descriptor cache,
 * which holds the descriptors of the malloc classes used (design §7): at most one a class. */
static void check_nothing_left(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(f, "open_memstream");
    CHECK(uslab_stats_print(f, USLAB_STATS_JSON) == 0, "uslab_stats_print");
    fclose(f);
    const char *caches = strstr(buf, "\"caches\":[");
    CHECK(caches, "no cache list in %s", buf);
    for (const char *n = strstr(caches, "\"name\""); n; n = strstr(n + 1, "\"name\"")) {
        unsigned long objects = 0;
        CHECK(sscanf(n, "\"name\":\"uslab-cache\",\"objects\":%lu", &objects) == 1 && objects <= 96,
              "memory left in caches after reaping:\n%s", buf);
    }
    free(buf);
}
#endif

int main(int argc, char **argv)
{
    long ops = argc > 1 ? atol(argv[1]) : 200000;
    uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 0) : 1;
    sets_init();
    devnull = fopen("/dev/null", "w");
    CHECK(devnull, "/dev/null");
    mail = test_map(NMAIL * sizeof *mail);
    for (int k = 0; k < NSHARED; k++) {
        shared[k] = uslab_cache_create("shared", shared_size[k], 0, obj_ctor, obj_dtor, NULL,
                                       &shared_counts[k], 0);
        CHECK(shared[k], "shared cache %d", k);
    }
#if !SANITIZED /* a sanitizer's allocator reports the size instead of failing */
    errno = 0;
    volatile size_t too_much = SIZE_MAX / 2;
    void *huge = F_MALLOC(too_much);
    CHECK(!huge && errno == ENOMEM, "malloc(SIZE_MAX / 2): %p, errno %d", huge, errno);
#endif

    struct worker *w[NTHREADS];
    CHECK(pthread_barrier_init(&barrier, NULL, NTHREADS) == 0, "barrier");
    for (int i = 0; i < NTHREADS; i++)
        w[i] = worker_new(i, 0, ops, seed);
    for (int i = 1; i < NTHREADS; i++)
        CHECK(pthread_create(&w[i]->th, NULL, worker_main, w[i]) == 0, "worker %d", i);
    main_ops(w[0]);
    pthread_barrier_wait(&barrier);
    unsigned long injected = uslab_faults_injected("mrpau");
    CHECK(uslab_faults_set(NULL) == 0, "faults off");
    pthread_barrier_wait(&barrier);

    /* Once the faults stop, the slabs grow again, whatever growth they refused (a side
     * array's extension undone by a failed munmap once stood in the way of every later
     * one): 192 MiB, more than the range ever held under faults. */
    size_t grown = burst(w[0], 65536);
    CHECK(grown == 65536, "after the faults: %zu of 65536 objects, the slabs no longer grow",
          grown);

    free_all(w[0]);
    private_cycle(w[0]);
    if (w[0]->priv)
        uslab_cache_destroy(w[0]->priv);
    for (int i = 1; i < NTHREADS; i++)
        pthread_join(w[i]->th, NULL);
    for (int i = 0; i < NMAIL; i++)
        if (mail[i].kind != B_NONE)
            free_block(w[0], &mail[i]);

    /* Nothing lost: each cache goes without live objects (destroy aborts otherwise), and
     * every object constructed was destructed. */
    unsigned long nulls = 0, failed_creates = 0, privs = 0;
    for (int i = 0; i < NTHREADS; i++) {
        nulls += w[i]->cache_nulls;
        failed_creates += w[i]->creates_failed;
        privs += w[i]->npriv;
        for (size_t k = 0; k < w[i]->npriv; k++)
            CHECK(w[i]->priv_counts[k].ctors == w[i]->priv_counts[k].dtors,
                  "thread %d private cache %zu: %lu constructed, %lu destructed", i, k,
                  w[i]->priv_counts[k].ctors, w[i]->priv_counts[k].dtors);
    }
    for (int k = 0; k < NSHARED; k++) {
        uslab_cache_destroy(shared[k]);
        CHECK(shared_counts[k].ctors == shared_counts[k].dtors,
              "shared cache %d: %lu constructed, %lu destructed", k, shared_counts[k].ctors,
              shared_counts[k].dtors);
    }
    uslab_reap();
    uslab_reap(); /* magazines freed by the first pass went to caches it had passed */
#ifndef PLAIN_MALLOC
    check_nothing_left();
#endif
    printf("faults injected: %lu (madvise %lu, mmap %lu, MAP_FIXED %lu, mprotect %lu, munmap "
           "%lu); cache allocations refused: %lu; private caches: %lu made, %lu refused\n",
           injected, uslab_faults_injected("a"), uslab_faults_injected("m"),
           uslab_faults_injected("r"), uslab_faults_injected("p"), uslab_faults_injected("u"),
           nulls, privs, failed_creates);
    CHECK(injected > 0 && uslab_faults_injected("a") > 0, "no madvise was made to fail");
    CHECK(uslab_faults_injected("p") > 0, "no mprotect was made to fail");
    CHECK(nulls > 0, "no uslab_cache_alloc failed: the faults did not reach the slabs");
    TEST_DONE();
}
