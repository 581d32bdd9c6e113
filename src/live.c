/* SPDX-License-Identifier: MIT */
/*
 * live.c - the live statistics page of a running process (docs/design.md §10.1), which
 * `uslab stats PID` and `uslab top PID` read: the statistics of every cache in use, in a
 * file of tmpfs (/dev/shm/uslab.<euid>.<pid>, mode 0600, format in live.h) that the
 * process maps shared and rewrites now and then.
 *
 * Nothing here runs on a fast path. The page is made and refreshed by the update that the
 * purger runs (handed in by init.c, like the pass): on the slow paths of the thread caches,
 * after their locks are dropped, once USI_LIVE_INTERVAL_MS have passed since the last
 * update (one clock read per slow path while the page is wanted), and by the purger
 * thread after its passes; uslab_cache_reap and uslab_reap publish at once. No thread of
 * its own.
 *
 * Where: USLAB_LIVE=auto (the default) makes the page in a process without a seccomp
 * filter once it has allocated for a second (USI_LIVE_FIRST_MS), and only in the shared
 * libraries, whose hooks see a filter coming (hooks.c); `always` from the first slow path,
 * also in the static archive; `never` nowhere. Making it is a handful of system calls
 * (open, fchmod, fallocate, mmap, close, a read of /proc/self/stat, a scan of /dev/shm for
 * stale pages) that a sandbox may refuse: a failure is silent and final for the process,
 * and a refreshed page costs no system call at all. A filter about to be installed
 * through libc removes the page first (usi_live_before_sandbox). A process that exits
 * normally unlinks its page (destructor); a fork child drops its parent's mapping and
 * makes its own; pages of processes that are gone are removed by the next page made and
 * by the tool.
 */
#include "live.h"
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* live.state (atomic): */
enum live_state {
    LIVE_NONE,     /* no page yet; made at the next update where USLAB_LIVE allows */
    LIVE_CREATING, /* a thread holding live.lock is making it */
    LIVE_ON,       /* page mapped and published */
    LIVE_OFF,      /* none in this process, for good: not allowed, failed, or closed at exit */
};

/*
 * The process's page. Invariants: page is non-NULL iff state is LIVE_ON or, while its
 * maker finishes, LIVE_CREATING; pid and path are the page's while it exists; only a
 * thread that holds `lock` makes the page or writes into it (the seqlock's one writer);
 * LIVE_OFF is final, except in a fork child, which starts again from LIVE_NONE unless
 * its parent's page was refused.
 */
static struct {
    pthread_mutex_t lock;
    int state;
    struct usi_live_header *page;
    int pid;           /* the process that made the page: a clone that skipped the fork handlers
                        * never unlinks its parent's */
    int owner;         /* the process this state and lock are of (0: not known yet), stored
                        * before the lock is first taken: a child that shares or copied
                        * them (vfork, a raw clone) sees another pid and keeps out */
    uint64_t first_ms; /* `auto`: no page before this time (0: not yet set) */
    char path[USI_LIVE_PATH_MAX];
} live = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Whether the calling thread holds live.lock: a hook called from a signal handler that
 * interrupted the thread there must not wait for it (usi_live_before_sandbox). */
static __thread int live_lock_held;

/* Before the lock is taken: the process the state is of, stored while it is still 0 (once
 * per process, a fork child again), so that a thread that holds the lock has always stored
 * it first. A child cloned meanwhile then sees its parent's pid (live_ours). */
static void live_claim(void)
{
    if (!__atomic_load_n(&live.owner, __ATOMIC_ACQUIRE))
        __atomic_store_n(&live.owner, usi_os_getpid(), __ATOMIC_SEQ_CST);
}

/* Whether the state may be of process `self`: not when another process claimed it, which
 * makes this a vfork child (sharing its parent's memory) or a clone that skipped the fork
 * handlers (a copy, whose lock another thread of the parent may have held at the clone:
 * never to be taken here). */
static int live_ours(int self)
{
    int owner = __atomic_load_n(&live.owner, __ATOMIC_ACQUIRE);
    return owner == 0 || owner == self;
}

static void live_lock(void)
{
    live_claim();
    usi_lock(&live.lock);
    live_lock_held = 1;
}

static int live_trylock(void)
{
    live_claim();
    if (usi_trylock(&live.lock) != 0)
        return -1;
    live_lock_held = 1;
    return 0;
}

static void live_unlock(void)
{
    live_lock_held = 0;
    usi_unlock(&live.lock);
}

/* ---- snapshots --------------------------------------------------------------------------- */

/* The counts kept under c's lock (held), into r; returns the objects out of the slabs. */
static uint64_t snap_counts(const struct uslab_cache *c, struct usi_live_cache *r)
{
    r->partial = c->lists[USI_SLAB_PARTIAL].count;
    r->full = c->lists[USI_SLAB_FULL].count;
    r->empty = c->lists[USI_SLAB_EMPTY].count;
    r->cached_depot = c->depot_rounds;
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
    r->total_objects = r->slabs * r->objs_per_slab;
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
    pthread_mutex_t *lock = (pthread_mutex_t *)&c->lock;
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
    pthread_mutex_t *lock = (pthread_mutex_t *)&c->lock;
    if (usi_trylock_for(lock, ms) != 0)
        return -1;
    uint64_t out = snap_counts(c, r);
    usi_unlock(lock);
    return snap_finish(c, r, out, thread_cached);
}

/* ---- the page ---------------------------------------------------------------------------- */

/* Whether USLAB_LIVE lets this process have a page: 1 yes, -1 never (`never`; `auto` in a
 * library without hooks, which cannot see a filter arrive; a seccomp filter, which stays).
 * `auto`'s wait for the process's first second is usi_live_update's. */
static int page_allowed(void)
{
    switch (usi_options.live) {
    case USI_LIVE_AUTO:
        if (!USI_HOOKS)
            return -1;
        /* fall through */
    case USI_LIVE_ALWAYS:
        return usi_os_seccomp_mode() == 0 ? 1 : -1;
    default:
        return -1;
    }
}

/* "/proc/<pid>/stat" in buf[40]. */
static void proc_stat_path(char *buf, int pid)
{
    memcpy(buf, "/proc/", 6);
    char *p = usi_live_put_decimal(buf + 6, (uint64_t)(unsigned)pid);
    memcpy(p, "/stat", 6);
}

/* The state letter and start time of process pid: 0; 1 when there is no such process; -1
 * when it cannot be told (no /proc, a hidden process). */
static int process_stat(int pid, char *state, uint64_t *start)
{
    char path[40], text[1024];
    proc_stat_path(path, pid);
    long n = usi_os_read_file(path, text, sizeof text);
    if (n < 0)
        return errno == ENOENT || errno == ESRCH ? 1 : -1;
    return usi_live_parse_stat(text, (size_t)n, state, start) == 0 ? 0 : -1;
}

/* What a sweep removes: pages named for `uid` (the caller's effective id), never the one of
 * pid `self`, which the caller is about to make. */
struct sweep {
    unsigned uid;
    int self;
};

/* A page of ours (by name) is stale when its process is gone, a zombie, or another
 * process with the same pid (its start time differs from the page's). A page whose
 * header cannot be read or is not uslab's is left alone while its pid lives. */
static void sweep_one(const char *name, void *arg)
{
    const struct sweep *sw = arg;
    unsigned uid;
    int pid;
    if (!usi_live_parse_name(name, &uid, &pid) || uid != sw->uid || pid == sw->self)
        return;
    char path[USI_LIVE_PATH_MAX], state;
    uint64_t start;
    usi_live_path(path, uid, pid);
    int known = process_stat(pid, &state, &start);
    int stale = known == 1 || (known == 0 && (state == 'Z' || state == 'X'));
    if (!stale && known == 0) {
        struct usi_live_header h;
        stale = usi_os_read_own_file(path, &h, sizeof h) >= (long)sizeof h &&
                memcmp(h.magic, USI_LIVE_MAGIC, sizeof h.magic) == 0 && h.start_time != start;
    }
    if (stale)
        usi_os_unlink(path);
}

/* Makes the page (state LIVE_NONE, live.lock held): 0, or -1 and LIVE_OFF. */
static int page_create(void)
{
    int expected = LIVE_NONE;
    if (!__atomic_compare_exchange_n(&live.state, &expected, LIVE_CREATING, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_RELAXED))
        return -1; /* closed at exit meanwhile */
    int saved = errno;
    unsigned uid = usi_os_geteuid();
    int pid = usi_os_getpid();
    char state;
    uint64_t start;
    struct usi_live_header *h = NULL;
    if (process_stat(pid, &state, &start) == 0) {
        struct sweep sw = {uid, pid};
        usi_os_list_dir(USI_LIVE_DIR, sweep_one, &sw);
        usi_live_path(live.path, uid, pid);
        /* A page with our name that we did not make: left by an earlier process with this
         * pid, or by this one before it called exec (which runs no destructor). It goes
         * also when ours cannot be made. */
        usi_os_unlink(live.path);
        /* Only where it leaves the program its room (usi_live_room): never ENOSPC for its
         * own shm_open or posix_fallocate because of the page. */
        uint64_t size, avail;
        if (usi_os_fs_space(USI_LIVE_DIR, &size, &avail) == 0 &&
            usi_live_room(size, avail, USI_LIVE_FILE_BYTES))
            h = usi_os_create_shared_file(live.path, USI_LIVE_FILE_BYTES);
    }
    errno = saved;
    if (!h) {
        __atomic_store_n(&live.state, LIVE_OFF, __ATOMIC_RELEASE);
        return -1;
    }
    /* The file reads as zeros: the constant fields, then seq 0 (even, no records). */
    memcpy(h->magic, USI_LIVE_MAGIC, sizeof h->magic);
    h->version = USI_LIVE_VERSION;
    h->header_bytes = sizeof *h;
    h->record_bytes = sizeof(struct usi_live_cache);
    h->capacity = USI_LIVE_CAPACITY;
    h->pid = pid;
    h->uid = uid;
    h->start_time = start;
    h->lib_version = (uint32_t)USLAB_VERSION_MAJOR << 16 | USLAB_VERSION_MINOR;
    live.page = h;
    live.pid = pid;
    expected = LIVE_CREATING;
    if (!__atomic_compare_exchange_n(&live.state, &expected, LIVE_ON, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_RELAXED)) {
        /* The process began to exit, or to sandbox itself from a signal handler, while we
         * made it: nobody else removes it. Not under a filter that may have arrived. */
        if (usi_os_seccomp_mode() == 0)
            usi_os_unlink(live.path);
        usi_os_unmap_shared_file(h, USI_LIVE_FILE_BYTES);
        live.page = NULL;
        return -1;
    }
    return 0;
}

/* Records the caches in use, in id order, into the page (during the seqlock's write).
 * Invariant: n <= capacity and n <= in_use; records[0 .. n) are written. */
struct fill {
    struct usi_live_cache *records;
    uint32_t n, capacity, in_use;
};

static void fill_one(struct uslab_cache *c, void *arg)
{
    struct fill *f = arg;
    struct usi_live_cache r;
    if (!usi_live_snap_cache(c, &r))
        return;
    f->in_use++;
    if (f->n < f->capacity)
        f->records[f->n++] = r;
}

/* Rewrites the page under the seqlock (live.lock held, page there). */
static void page_write(struct usi_live_header *h)
{
    uint64_t seq = h->seq;
    __atomic_store_n(&h->seq, seq + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE); /* odd before any change is seen */
    struct fill f = {(struct usi_live_cache *)(void *)(h + 1), 0, h->capacity, 0};
    usi_registry_read_each(fill_one, &f);
    h->ncaches = f.n;
    h->caches_in_use = f.in_use;
    h->reserved_bytes = usi_pages_reserved_bytes();
    h->thread_cache_bytes = __atomic_load_n(&usi_tcache_bytes, __ATOMIC_RELAXED);
    h->thread_cache_max = usi_options.tcache_max;
    h->updated_ms = usi_os_now_ms();
    h->updates++;
    __atomic_store_n(&h->seq, seq + 2, __ATOMIC_RELEASE); /* after every change */
}

/* Makes the page if need be and allowed, and refreshes it (live.lock held): 1 done, 0 not
 * yet allowed, -1 never in this process. */
static int publish_locked(void)
{
    int state = __atomic_load_n(&live.state, __ATOMIC_ACQUIRE);
    if (state == LIVE_NONE) {
        int allowed = page_allowed();
        if (allowed < 0) {
            int expected = LIVE_NONE;
            __atomic_compare_exchange_n(&live.state, &expected, LIVE_OFF, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED);
        }
        if (allowed <= 0)
            return allowed;
        if (page_create() != 0)
            return -1;
    } else if (state != LIVE_ON) {
        return -1;
    }
    page_write(live.page);
    return 1;
}

uint64_t usi_live_update(uint64_t now_ms)
{
    /* Under `auto`, no page before the process (or fork child) has allocated for
     * USI_LIVE_FIRST_MS: a short command makes none and sees no system call of it. The
     * first update starts that clock. */
    if (usi_options.live == USI_LIVE_AUTO &&
        __atomic_load_n(&live.state, __ATOMIC_ACQUIRE) == LIVE_NONE) {
        uint64_t first = __atomic_load_n(&live.first_ms, __ATOMIC_RELAXED);
        if (!first) {
            first = now_ms + USI_LIVE_FIRST_MS;
            __atomic_store_n(&live.first_ms, first, __ATOMIC_RELAXED);
        }
        if (now_ms < first)
            return first;
    }
    /* Another thread is at it: this slow path goes on. */
    if (live_trylock() != 0)
        return now_ms + USI_LIVE_INTERVAL_MS;
    int done = publish_locked();
    live_unlock();
    return done > 0 ? now_ms + USI_LIVE_INTERVAL_MS : 0;
}

void usi_live_publish(void)
{
    if (__atomic_load_n(&live.state, __ATOMIC_ACQUIRE) == LIVE_OFF)
        return;
    int saved = errno;
    live_lock();
    publish_locked();
    live_unlock();
    errno = saved;
}

void usi_live_postfork_child(void)
{
    pthread_mutex_init(&live.lock, NULL);
    live_lock_held = 0;
    /* The parent's mapping: the child would write into its parent's page. */
    if (live.page)
        usi_os_unmap_shared_file(live.page, USI_LIVE_FILE_BYTES);
    live.page = NULL;
    live.first_ms = 0;
    live.owner = 0; /* the child's, claimed when it first takes the lock */
    int state = __atomic_load_n(&live.state, __ATOMIC_RELAXED);
    if (state == LIVE_ON || state == LIVE_CREATING) {
        __atomic_store_n(&live.state, LIVE_NONE, __ATOMIC_RELAXED);
        __atomic_store_n(&usi_purge_live_due_ms, 1, __ATOMIC_RELAXED);
    }
}

/* usi_live_before_sandbox where no thread has claimed the state yet (so none has taken the
 * lock, and there is no page): a filter or a move turns it off for good, without the lock;
 * a new user or an exec has nothing to remove. 1 done; 0 when a thread of this process
 * claimed it meanwhile (a page is being made): the caller takes the lock. */
static int before_sandbox_unclaimed(int again)
{
    for (;;) {
        int state = __atomic_load_n(&live.state, __ATOMIC_ACQUIRE);
        if (state == LIVE_OFF)
            return 1;
        if (state != LIVE_NONE)
            return 0;
        if (again)
            return __atomic_load_n(&live.owner, __ATOMIC_SEQ_CST) == 0;
        if (__atomic_compare_exchange_n(&live.state, &state, LIVE_OFF, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED)) {
            __atomic_store_n(&usi_purge_live_due_ms, 0, __ATOMIC_RELAXED);
            return 1;
        }
    }
}

void usi_live_before_sandbox(int again)
{
    int saved = errno;
    int self = usi_os_getpid();
    /* Another process's state (a vfork child, a raw clone): nothing here is this one's, and
     * the lock may be a copy that a thread of the parent held at the clone. Lock-free. */
    if (!live_ours(self)) {
        errno = saved;
        return;
    }
    if (__atomic_load_n(&live.owner, __ATOMIC_ACQUIRE) == 0 && before_sandbox_unclaimed(again)) {
        errno = saved;
        return;
    }
    if (live_lock_held) {
        /* A signal handler that interrupted this thread inside the page's code: no wait,
         * no unmap (the interrupted code may be writing the page). The page is turned off
         * for good and its file goes; a page being made meanwhile is left by its maker
         * (page_create), not removed under what may be a filter by now. */
        if (__atomic_exchange_n(&live.state, LIVE_OFF, __ATOMIC_ACQ_REL) == LIVE_ON &&
            live.pid == self)
            usi_os_unlink(live.path);
        __atomic_store_n(&usi_purge_live_due_ms, 0, __ATOMIC_RELAXED);
        errno = saved;
        return;
    }
    live_lock(); /* no page is being made or written meanwhile */
    /* A page of another process: this is a child that shares its parent's memory (vfork)
     * or skipped the fork handlers (a raw clone); the page and its state are the
     * parent's, which keeps them. */
    if (__atomic_load_n(&live.state, __ATOMIC_ACQUIRE) == LIVE_ON && live.pid != self) {
        live_unlock();
        errno = saved;
        return;
    }
    int was = __atomic_load_n(&live.state, __ATOMIC_ACQUIRE);
    int next = again && was != LIVE_OFF ? LIVE_NONE : LIVE_OFF;
    __atomic_store_n(&live.state, next, __ATOMIC_RELEASE);
    if (was == LIVE_ON)
        usi_os_unlink(live.path);
    if (live.page)
        usi_os_unmap_shared_file(live.page, USI_LIVE_FILE_BYTES);
    live.page = NULL;
    if (next == LIVE_NONE) /* as the new user, once a second has passed from now */
        __atomic_store_n(&live.first_ms, usi_os_now_ms() + USI_LIVE_FIRST_MS, __ATOMIC_RELAXED);
    live_unlock();
    __atomic_store_n(&usi_purge_live_due_ms, next == LIVE_NONE ? 1 : 0, __ATOMIC_RELAXED);
    errno = saved;
}

void usi_live_quick_exit(void)
{
    /* Maybe in a signal handler, or with another thread at the page: never wait. No page
     * on, no system call; the lock of another process (a raw clone's copy) is not tried. */
    if (live_lock_held || __atomic_load_n(&live.state, __ATOMIC_ACQUIRE) != LIVE_ON)
        return;
    int self = usi_os_getpid();
    if (__atomic_load_n(&live.owner, __ATOMIC_ACQUIRE) != self || live_trylock() != 0)
        return;
    if (__atomic_load_n(&live.state, __ATOMIC_ACQUIRE) == LIVE_ON && live.pid == self) {
        __atomic_store_n(&live.state, LIVE_OFF, __ATOMIC_RELEASE);
        usi_os_unlink(live.path);
    }
    live_unlock();
}

/* At exit (and only in the process that made the page): the page goes. With hooks, a page
 * that is still on has seen no filter installed through libc (usi_live_before_sandbox
 * removes it first), so the exit makes no system call but getpid and unlink. Without
 * hooks (a static archive, under `always`), not under a seccomp filter that arrived
 * after the page was made, which might kill the process for the unlink: that page is
 * left to the sweepers. No lock: a thread still writing into the mapping harms nothing,
 * and one making the page sees LIVE_OFF and removes it itself.
 *
 * The state of another process (claimed by it, live_ours) is left alone: a clone with a
 * copy of its parent's memory changes nothing of the parent's. A vfork child that calls
 * exit (after a failed exec, a common bug) is the exception: it runs the destructors in
 * its parent's memory, where the dynamic linker marks them done, so the parent's own exit
 * runs none of them and would leave the page. Its last chance to go is here: the child
 * removes it and turns the state off for good (the parent makes no page it could not
 * remove; its mapping stays, unwritten). */
__attribute__((destructor)) static void live_at_exit(void)
{
    if (__atomic_load_n(&live.state, __ATOMIC_ACQUIRE) == LIVE_OFF)
        return; /* final, and nothing is due */
    int saved = errno;
    int self = 0;
    /* No thread claimed the state (none took the lock): there is no page, and no pid is
     * asked. Under a filter that libc's hooks did not see, none either. */
    int owner = __atomic_load_n(&live.owner, __ATOMIC_ACQUIRE);
    if (owner != 0 && (USI_HOOKS || usi_os_seccomp_mode() == 0)) {
        self = usi_os_getpid();
        if (!live_ours(self)) {
            int on = LIVE_ON;
            if (usi_os_shares_memory_with(owner) &&
                __atomic_compare_exchange_n(&live.state, &on, LIVE_OFF, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_RELAXED)) {
                __atomic_store_n(&usi_purge_live_due_ms, 0, __ATOMIC_RELAXED);
                usi_os_unlink(live.path);
            }
            errno = saved;
            return;
        }
    }
    __atomic_store_n(&usi_purge_live_due_ms, 0, __ATOMIC_RELAXED);
    if (__atomic_exchange_n(&live.state, LIVE_OFF, __ATOMIC_ACQ_REL) == LIVE_ON &&
        (self || USI_HOOKS || usi_os_seccomp_mode() == 0) &&
        live.pid == (self ? self : usi_os_getpid()))
        usi_os_unlink(live.path);
    errno = saved;
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
