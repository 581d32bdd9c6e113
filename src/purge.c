/* SPDX-License-Identifier: MIT */
/*
 * purge.c - the purger (docs/design.md §3, §4): gives idle memory back to the system.
 *
 * An empty slab beyond its cache's reserve is not purged when it empties (a program that
 * frees a batch and allocates again would fault every page back in: the thesis' slab
 * create/destroy churn). It is stamped with the time and purged once it has been idle for
 * USLAB_PURGE_DELAY milliseconds. Each pass also reaps each depot's unused magazines
 * (Bonwick & Adams §3.6: what stayed in the depot for a whole interval was not needed),
 * whose objects then empty slabs that a later pass purges.
 *
 * Passes run in one of two places (USLAB_PURGER, design §3):
 *  - a background thread, which sleeps on a condition variable while nothing is pending
 *    and runs a pass every half delay otherwise, so memory returns without any further
 *    activity. Under USLAB_RETURN=pressure|both, while some cache has a reclaim callback
 *    (the registry counts them), it ticks even with nothing pending: each pass reads the
 *    pressure, which is how such a callback hears of it when nothing else is idle. It
 *    is started on need, and only where a thread can live: by default (`auto`) while at
 *    least two threads use uslab (the live thread caches, counted here as tcache.c reports
 *    their start and exit; it leaves by itself when they are down to one) and there is no
 *    seccomp filter, no low RLIMIT_NPROC or cgroup pids.max, since a guest's thread
 *    breaks unshare(CLONE_NEWUSER) and sandboxes that allow no clone;
 *  - otherwise the slow paths of the thread caches (usi_purge_poll): once a pass is due,
 *    the next slow path runs it. Such an inline pass calls no user code (it does not reap
 *    the depots of caches with a destructor; under pressure it leaves the reclaim
 *    callbacks to their caches' next allocation slow path, objects.c), since the caller
 *    may hold its own locks. While the thread would tick with nothing pending (above), a
 *    pass is due again each tick.
 * USLAB_PURGE_DELAY=0 purges at once and needs neither.
 *
 * The same two places run the live statistics page's update (live.c, design §10.1), at
 * most every USI_LIVE_INTERVAL_MS: the slow paths once it is due (a clock read), the
 * thread after each pass.
 *
 * The purger's lock is a leaf: it is never held while taking another, and never during the
 * pass. The pass itself (reclaim.c, above the depot) is handed in at initialisation, so
 * this file calls nothing above it.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <signal.h>

static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int pending;  /* the thread: something may be waiting to be given back (under lock) */
    int more;     /* the thread: its last pass left idle memory to give back later (under
                   * lock) */
    int exited;   /* a thread that used uslab exited since the thread last left: it may
                   * start with one user or none (atomic; thread_wanted) */
    int thread;   /* the thread: 0 none yet, 1 asked for or running, -1 never in this
                   * process (refused or failed), 2 paused (usi_purge_pause: none now,
                   * passes inline) (atomic; reset in a fork child) */
    int started;  /* the thread: created and joinable as `tid` (under lock) */
    int stop;     /* the thread: leave now (under lock) */
    int creating; /* threads in purger_start (atomic) */
    int users;    /* live thread caches: threads that have used uslab and not exited, the
                   * purger's own not counted (atomic; in a fork child, the forking one) */
    pthread_t tid;
    uint32_t ktid;     /* the thread's kernel id, set by itself (atomic) */
    int running;       /* a pass runs on some thread, inline or the purger (atomic) */
    uint32_t fork_tid; /* in a fork child: its one thread, until another calls into uslab
                        * (glibc's __libc_single_threaded stays false there); else 0 */
    uint64_t alone_ms; /* when the count of threads using uslab last fell to 1 (atomic; 0
                        * while two or more use it) */
    int pid;           /* the process whose thread it is (atomic; written before the thread
                        * is asked for): a child made by clone without the fork handlers, or
                        * by vfork, has a copy of this state, or shares it, but not the thread */
    int home;          /* the process that may start the thread: the one that initialised,
                        * or a fork child (its handler); never a clone or vfork child (set
                        * at initialisation, and in a fork child) */
} purger = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

/* This thread: 1 counted in purger.users, 2 the purger thread itself, else 0. */
static __thread int tls_role __attribute__((tls_model("initial-exec")));
/* This thread's depth in sections where it must not start the purger thread
 * (usi_purge_no_start): glibc's pthread_create, pthread_join and pthread_detach family and
 * C11 thrd_create and thrd_join (hooks.c), which hold glibc's stack-cache lock for a
 * moment, which pthread_create takes too (a signal handler's kick there would wait for it
 * for ever); and its own magazine exchanges (tcache.c), which pthread_create's mallocs
 * would nest into from a handler that interrupted one. */
static __thread int tls_no_start __attribute__((tls_model("initial-exec")));

void usi_purge_no_start(int delta)
{
    tls_no_start += delta;
}

void usi_purge_thread_creating(void)
{
    __atomic_store_n(&purger.fork_tid, 0, __ATOMIC_RELAXED);
}

/* The thread calls the purger makes. With the hooks (shared libraries), the program's
 * pthread_create, pthread_join and pthread_detach are hooks.c's, a layer above, so the
 * purger calls the first definitions in the process's lookup order (a sanitizer's
 * interceptor, which must see the thread, or hooks.c's own, or glibc's). pthread_create's
 * is handed down by hooks.c at load: a kick may come in a signal handler, where dlsym
 * could wait for a lock the interrupted code holds; none yet, and the thread cannot start
 * (not now: a later kick tries again). The two others are looked up where they are
 * used, on the purger thread itself (every signal blocked) and by a pause (never in a
 * handler): fewer lookups at every process's start. The static archive calls glibc's. */
#if USI_HOOKS
static usi_thread_create_fn thread_create_fn;

void usi_purge_set_thread_create(usi_thread_create_fn create)
{
    __atomic_store_n(&thread_create_fn, create, __ATOMIC_RELEASE);
}

static usi_thread_create_fn thread_create(void)
{
    return __atomic_load_n(&thread_create_fn, __ATOMIC_ACQUIRE);
}

static int thread_join(pthread_t t)
{
    usi_thread_join_fn join = (usi_thread_join_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "pthread_join");
    return join ? join(t, NULL) : ENOSYS;
}

static int thread_detach(pthread_t t)
{
    usi_thread_detach_fn detach =
        (usi_thread_detach_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "pthread_detach");
    return detach ? detach(t) : ENOSYS;
}
#else
static usi_thread_create_fn thread_create(void)
{
    return pthread_create;
}

static int thread_join(pthread_t t)
{
    return pthread_join(t, NULL);
}

static int thread_detach(pthread_t t)
{
    return pthread_detach(t);
}
#endif

uint64_t usi_purge_due_ms;
/* The next pass releases every empty slab beyond the reserves, idle or not (atomic). */
static int surplus_pending;
uint64_t usi_purge_live_due_ms;
/* A thread that claimed the live update sets its next time when done; until then the
 * update is due again after this long (ms), in case it never finishes (a fork). */
#define USI_LIVE_CLAIM_MS 1000

/* USLAB_PURGER=auto starts no thread under a soft RLIMIT_NPROC below this: such a limit is
 * set on purpose, and a program near it would find one thread fewer than under glibc. */
#define USI_PURGER_MIN_NPROC 4096

/* The live statistics page's update (live.c), set once at initialisation. */
static uint64_t (*live_update)(uint64_t now_ms);

void usi_purge_set_live(uint64_t (*update)(uint64_t now_ms))
{
    live_update = update;
    __atomic_store_n(&usi_purge_live_due_ms, 1, __ATOMIC_RELEASE); /* due at once */
}

void usi_purge_poll_live(void)
{
    uint64_t due = __atomic_load_n(&usi_purge_live_due_ms, __ATOMIC_ACQUIRE);
    if (!due)
        return;
    uint64_t now = usi_os_now_ms();
    /* One thread claims the update (the others see it due later and go on). */
    if (now < due || usi_os_on_signal_stack() ||
        !__atomic_compare_exchange_n(&usi_purge_live_due_ms, &due, now + USI_LIVE_CLAIM_MS, 0,
                                     __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
        return;
    USI_ASSERT_NO_LOCK();
    int e = errno;
    uint64_t next = live_update(now);
    errno = e;
    /* Unless the update gave up for good, or something set another time meanwhile. */
    uint64_t claimed = now + USI_LIVE_CLAIM_MS;
    __atomic_compare_exchange_n(&usi_purge_live_due_ms, &claimed, next, 0, __ATOMIC_RELEASE,
                                __ATOMIC_RELAXED);
}

/* glibc's large blocks (design §8): once the program holds LARGE_TUNE_LIVE of them at once,
 * or has freed LARGE_TUNE_AFTER, glibc is tuned to keep their memory (raised thresholds,
 * usi_sys_tune_for_large), and from then on trimmed once they are idle (usi_purge_trim_glibc).
 * Until then glibc's defaults hold: a program with a few large blocks has them mmapped and
 * unmapped, or trimmed, at once (cfrac holds at most 4 and frees 8, lifetime 4 and 4: 1 MB
 * and 0.2 MB less at their peak than with thresholds raised at start), while one that
 * works with many is tuned early: bench/'s `large` (40 held at once, 10,000 frees) and
 * git log -p (21 held, 2,000 frees) at their 6th block held. Tuned late, a program pays
 * once for the blocks glibc mmapped before: they are unmapped at their free and the heap
 * faults their replacements in (`large` tuned at its 64th free took 3,300 more page faults
 * than tuned at start, +10% of its quick run; at its 6th block, about 1,000).
 *
 * state: OFF (never tuned: the user tuned glibc, USLAB_PURGE_DELAY=0, libuslab), COUNTING,
 * TUNING (one thread is in mallopt), TUNED. Only the thread that moves COUNTING to TUNING
 * calls mallopt; a program's own mallopt of a threshold (usi_purge_large_user_tunes) moves
 * COUNTING to OFF, and waits out a TUNING so that its call comes after ours and wins. */
enum { LARGE_OFF, LARGE_COUNTING, LARGE_TUNING, LARGE_TUNED };
#define LARGE_TUNE_AFTER 64
#define LARGE_TUNE_LIVE  6
/* glibc's dynamic mmap threshold (malloc.c): it starts at 128 KiB, and a free of an mmapped
 * chunk larger than the threshold, up to 32 MiB, raises it to that chunk's size (the trim
 * threshold to twice that). Setting a threshold with mallopt turns that rule off, so
 * uslab's tuning keeps it itself: its own trim threshold stays raised, and the mmap
 * threshold follows the same rule (usi_purge_large_freeing). Before issue 36 the tuning
 * fixed it at 4 MiB: every buffer above was mapped and unmapped, with a fault per page at
 * each use (mimalloc-bench's malloc-large 7x glibc's time, bench/'s large buffers too). */
#define GLIBC_MMAP_THRESHOLD_MIN ((size_t)128 << 10)
#define GLIBC_MMAP_THRESHOLD_MAX ((size_t)32 << 20)
static struct {
    int state;         /* LARGE_* (atomic) */
    int user;          /* the program set a threshold of glibc's (mallopt), maybe before
                        * uslab's initialisation: no tuning, no trim of uslab's (atomic) */
    unsigned frees;    /* large frees while COUNTING (atomic) */
    int live;          /* large mallocs less large frees while COUNTING (atomic; a block of
                        * glibc's below the slab limit, made when slabs could not grow, is
                        * counted at its free only: an estimate) */
    int pending;       /* a large block was freed since the last trim (atomic) */
    uint64_t freed_ms; /* when the last one was freed (relaxed) */
    size_t threshold;  /* glibc's mmap threshold as its own rule would have it (atomic) */
    size_t applied;    /* the threshold uslab last gave glibc (written under TUNING) */
} large = {.threshold = GLIBC_MMAP_THRESHOLD_MIN};

/* Gives glibc the threshold its own rule would have now; the caller holds TUNING and has
 * tuned glibc. A raise that comes meanwhile is applied by the next loop, or by the free
 * that sees it unapplied (usi_purge_large_freeing). */
static void apply_threshold(void)
{
    size_t t;
    while ((t = __atomic_load_n(&large.threshold, __ATOMIC_ACQUIRE)) !=
           __atomic_load_n(&large.applied, __ATOMIC_RELAXED)) {
        if (!usi_sys_tune_mmap(t))
            break;
        __atomic_store_n(&large.applied, t, __ATOMIC_RELEASE);
    }
}

/* The pass, set once at initialisation before anything can kick the purger. */
static int (*purge_pass)(uint64_t now_ms, uint64_t idle_ms, unsigned how);

void usi_purge_set_pass(int (*pass)(uint64_t now_ms, uint64_t idle_ms, unsigned how))
{
    purge_pass = pass;
    __atomic_store_n(&purger.home, usi_os_getpid(), __ATOMIC_RELEASE);
}

/* Time between passes while something is pending (or, under pressure|both, while a cache
 * has a reclaim callback: watching below): half the delay; at most 250 ms where the policy
 * watches memory pressure, so that pressure is seen within a quarter second. */
static uint64_t tick_ms(void)
{
    uint64_t tick = usi_options.purge_delay_ms / 2 ? usi_options.purge_delay_ms / 2 : 1;
    if (usi_options.return_policy != USI_RETURN_DELAY && tick > 250)
        tick = 250;
    return tick;
}

/* Whether passes must run with nothing pending: the policy reads memory pressure and some
 * cache has a reclaim callback that only a pass can call on pressure (design §3). Under
 * `delay`, never: no registry read, nothing changes. */
static int watching(void)
{
    return usi_options.return_policy != USI_RETURN_DELAY && usi_registry_reclaimers() != 0;
}

/*
 * Sentinels of glibc's thread arenas (session 16's audit). With the trim threshold raised,
 * a free in a thread's arena never shrinks its heap (at most 64 MiB a heap, 8 arenas a
 * core), and glibc's malloc_trim shrinks only the main arena's top: in a thread's arena it
 * gives back free chunks inside the heap, not its top, where a burst freed in full ends. 8
 * threads that freed 40 MB each of 100 KB blocks and then waited kept 314 MB resident for
 * good, after uslab's idle trim and the program's own malloc_trim(0) alike; glibc alone
 * keeps 2 MB. glibc shrinks a thread arena's heap at the free of a chunk of at least 64 KiB
 * (its FASTBIN_CONSOLIDATION_THRESHOLD), whatever thread frees it, when the top is above
 * the trim threshold. So each thread, at its first large malloc after glibc is tuned,
 * takes one chunk of 64 KiB from glibc (its own arena's): a sentinel, kept on a list (the
 * chunk holds the link; glibc touches its first and last page). A trim (the idle one, the
 * pressure one, the program's malloc_trim) sets glibc's default threshold, frees every
 * sentinel, and raises the threshold again, in the TUNING state that a program's mallopt
 * waits out. A thread makes a new sentinel at its next large malloc after that (the
 * generation moved). A thread that exited leaves its sentinel for the next trim, as glibc
 * leaves its arena to the next thread. At most SENTINELS_MAX at a time; an arena whose
 * threads made none since the last trim (they only freed, or came after the cap) keeps
 * its top until then (design §12).
 */
#define SENTINEL_BYTES ((size_t)64 << 10)
#define SENTINELS_MAX  64
struct sentinel {
    struct sentinel *next;
};
static struct {
    struct sentinel *head; /* pushed by CAS, taken whole by exchange (no ABA) */
    unsigned count;        /* on the list, or being made (atomic) */
    unsigned generation;   /* trims so far (atomic) */
} sentinels;
/* generation + 1 of this thread's sentinel, 0 before its first. */
static __thread unsigned tls_sentinel_generation __attribute__((tls_model("initial-exec")));

static void sentinel_make(unsigned generation)
{
    tls_sentinel_generation = generation + 1; /* one try a thread and generation */
    if (__atomic_add_fetch(&sentinels.count, 1, __ATOMIC_RELAXED) > SENTINELS_MAX) {
        __atomic_sub_fetch(&sentinels.count, 1, __ATOMIC_RELAXED);
        return;
    }
    int e = errno;
    struct sentinel *s = usi_sys_malloc(SENTINEL_BYTES);
    errno = e;
    if (!s) {
        __atomic_sub_fetch(&sentinels.count, 1, __ATOMIC_RELAXED);
        return;
    }
    s->next = __atomic_load_n(&sentinels.head, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(&sentinels.head, &s->next, s, 1, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED))
        ;
}

/* Frees every sentinel; returns how many. */
static unsigned sentinels_free(void)
{
    struct sentinel *s = __atomic_exchange_n(&sentinels.head, NULL, __ATOMIC_ACQUIRE);
    unsigned n = 0;
    while (s) {
        struct sentinel *next = s->next;
        usi_sys_free(s);
        s = next;
        n++;
    }
    __atomic_sub_fetch(&sentinels.count, n, __ATOMIC_RELAXED);
    return n;
}

/* The arenas' tops, by their sentinels, where uslab tuned glibc and the program has not
 * set a threshold since (its setting wins: it waits for TUNING to end, and then finds
 * OFF). */
static void trim_arenas(void)
{
    int s = LARGE_TUNED;
    if (!__atomic_load_n(&sentinels.head, __ATOMIC_RELAXED) ||
        !__atomic_compare_exchange_n(&large.state, &s, LARGE_TUNING, 0, __ATOMIC_SEQ_CST,
                                     __ATOMIC_RELAXED))
        return;
    __atomic_add_fetch(&sentinels.generation, 1, __ATOMIC_RELAXED);
    int user = __atomic_load_n(&large.user, __ATOMIC_SEQ_CST);
    int lowered = !user && usi_sys_tune_trim(0);
    sentinels_free();
    if (lowered)
        usi_sys_tune_trim(1);
    if (!user)
        apply_threshold();
    __atomic_store_n(&large.state, user ? LARGE_OFF : LARGE_TUNED, __ATOMIC_SEQ_CST);
}

int usi_purge_trim_glibc(size_t pad)
{
    if (!__atomic_load_n(&large.user, __ATOMIC_RELAXED))
        trim_arenas();
    return usi_sys_trim_pad(pad);
}

/* uslab's own trims: not under strict seccomp mode, where glibc's madvise would kill. */
static void trim_glibc_idle(void)
{
    if (!usi_os_quiet() && !__atomic_load_n(&large.user, __ATOMIC_RELAXED))
        usi_purge_trim_glibc(0);
}

void usi_purge_track_large(int may_tune)
{
    int on = may_tune && !__atomic_load_n(&large.user, __ATOMIC_SEQ_CST);
    __atomic_store_n(&large.state, on ? LARGE_COUNTING : LARGE_OFF, __ATOMIC_SEQ_CST);
}

/* The program's threshold wins, whenever it comes: before initialisation (a library's
 * constructor, a .preinit_array function: the flag keeps usi_purge_track_large from
 * counting), while counting, or after uslab tuned glibc, when uslab's idle trims stop too
 * (malloc_trim would give back what the program asked glibc to keep). The flag is set
 * first: a thread about to tune looks at it once it holds TUNING, and this one waits for
 * such a thread to finish, so its own call comes last either way. */
void usi_purge_large_user_tunes(void)
{
    __atomic_store_n(&large.user, 1, __ATOMIC_SEQ_CST);
    for (;;) {
        int s = __atomic_load_n(&large.state, __ATOMIC_SEQ_CST);
        if (s == LARGE_TUNING) { /* our mallopt is in flight: the program's comes after it */
            usi_os_sleep_ms(1);
            continue;
        }
        if (s == LARGE_OFF || __atomic_compare_exchange_n(&large.state, &s, LARGE_OFF, 0,
                                                          __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
            break;
    }
    __atomic_store_n(&large.pending, 0, __ATOMIC_RELEASE); /* no trim on its way either */
    sentinels_free(); /* no use now: the program's threshold decides */
}

/* Tunes glibc (one thread does: the one that moves COUNTING to TUNING), unless the program
 * has set a threshold itself by then. */
static void large_tune(void)
{
    int s = LARGE_COUNTING;
    if (!__atomic_compare_exchange_n(&large.state, &s, LARGE_TUNING, 0, __ATOMIC_SEQ_CST,
                                     __ATOMIC_RELAXED))
        return;
    size_t t = __atomic_load_n(&large.threshold, __ATOMIC_ACQUIRE);
    int ok = !__atomic_load_n(&large.user, __ATOMIC_SEQ_CST) && usi_sys_tune_for_large(t);
    if (ok) {
        __atomic_store_n(&large.applied, t, __ATOMIC_RELEASE);
        apply_threshold();
    }
    __atomic_store_n(&large.state, ok ? LARGE_TUNED : LARGE_OFF, __ATOMIC_SEQ_CST);
}

void usi_purge_large_freeing(const void *p)
{
    int s = __atomic_load_n(&large.state, __ATOMIC_RELAXED);
    if (s == LARGE_OFF)
        return;
    size_t chunk = usi_sys_mmapped_chunk(p); /* read before glibc unmaps it */
    size_t t = __atomic_load_n(&large.threshold, __ATOMIC_RELAXED);
    while (chunk > t && chunk <= GLIBC_MMAP_THRESHOLD_MAX &&
           !__atomic_compare_exchange_n(&large.threshold, &t, chunk, 1, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED))
        ;
    /* Before tuning glibc applies its own rule; after, uslab gives it the new value. */
    if (s != LARGE_TUNED || __atomic_load_n(&large.threshold, __ATOMIC_ACQUIRE) ==
                                __atomic_load_n(&large.applied, __ATOMIC_ACQUIRE))
        return;
    if (!__atomic_compare_exchange_n(&large.state, &s, LARGE_TUNING, 0, __ATOMIC_SEQ_CST,
                                     __ATOMIC_RELAXED))
        return; /* a trim or a program's mallopt is under way: a later free applies it */
    int user = __atomic_load_n(&large.user, __ATOMIC_SEQ_CST);
    if (!user)
        apply_threshold();
    __atomic_store_n(&large.state, user ? LARGE_OFF : LARGE_TUNED, __ATOMIC_SEQ_CST);
}

static void large_count_free(void)
{
    __atomic_sub_fetch(&large.live, 1, __ATOMIC_RELAXED);
    if (__atomic_add_fetch(&large.frees, 1, __ATOMIC_RELAXED) >= LARGE_TUNE_AFTER)
        large_tune();
}

int usi_purge_large_allocated(void)
{
    int s = __atomic_load_n(&large.state, __ATOMIC_RELAXED);
    if (s == LARGE_TUNED) {
        unsigned g = __atomic_load_n(&sentinels.generation, __ATOMIC_RELAXED);
        if (USI_UNLIKELY(tls_sentinel_generation != g + 1)) {
            sentinel_make(g);
            return 1;
        }
    } else if (USI_UNLIKELY(s == LARGE_COUNTING) &&
               __atomic_add_fetch(&large.live, 1, __ATOMIC_RELAXED) >= LARGE_TUNE_LIVE) {
        large_tune();
    }
    return 0;
}

/* A large block's memory went back into glibc's heap (tuned or tuning): the idle trim is
 * due a purge delay from now. */
static void large_idle_trim_due(void)
{
    __atomic_store_n(&large.freed_ms, usi_os_now_ms(), __ATOMIC_RELAXED);
    if (!__atomic_load_n(&large.pending, __ATOMIC_RELAXED) &&
        !__atomic_exchange_n(&large.pending, 1, __ATOMIC_ACQ_REL))
        usi_purge_kick();
}

void usi_purge_large_freed(void)
{
    int s = __atomic_load_n(&large.state, __ATOMIC_RELAXED);
    if (USI_UNLIKELY(s != LARGE_TUNED && s != LARGE_TUNING)) { /* TUNING: maybe a trim */
        if (s == LARGE_COUNTING)
            large_count_free();
        return;
    }
    large_idle_trim_due();
}

void usi_purge_large_resized(void)
{
    int s = __atomic_load_n(&large.state, __ATOMIC_RELAXED);
    if (s == LARGE_TUNED || s == LARGE_TUNING)
        large_idle_trim_due();
}

/* Trims glibc once its blocks have been idle for the delay; returns whether that is still
 * to come. */
static int trim_large(uint64_t now, uint64_t idle)
{
    if (!__atomic_load_n(&large.pending, __ATOMIC_ACQUIRE))
        return 0;
    if (now < __atomic_load_n(&large.freed_ms, __ATOMIC_RELAXED) + idle)
        return 1;
    __atomic_store_n(&large.pending, 0, __ATOMIC_RELEASE); /* a free from here on: again */
    trim_glibc_idle(); /* unless the program set glibc's trim itself */
    return 0;
}

/* One pass at `now` (USLAB_RETURN, design §3): idle memory older than the delay (10 delays
 * under `pressure`) goes back; under pressure reported by the kernel, everything the pass
 * can reach goes at once, with glibc's free memory. Pressure is read only where the policy
 * asks for it, and inline only then too: reading a file is a system call a sandbox may
 * refuse. Returns whether anything remains to be given back later. */
static int run_pass(uint64_t now, unsigned how)
{
    uint64_t idle = usi_options.purge_delay_ms;
    if (usi_options.return_policy == USI_RETURN_PRESSURE)
        idle *= 10;
    if (usi_options.return_policy != USI_RETURN_DELAY && usi_pressure_now()) {
        purge_pass(now, 0, how | USI_PASS_URGENT);
        __atomic_store_n(&large.pending, 0, __ATOMIC_RELEASE);
        trim_glibc_idle(); /* unless the program set glibc's trim itself */
        return 0;
    }
    /* Other caches' empty slabs while new ones are made: those that were empty already
     * at the previous surplus pass go now, whatever the delay (design §3). The first pass
     * only marks the time. */
    int surplus = __atomic_exchange_n(&surplus_pending, 0, __ATOMIC_ACQ_REL);
    int more;
    if (surplus) {
        static uint64_t previous_ms; /* passes never run two at a time (purger.running) */
        uint64_t since = previous_ms && now > previous_ms ? now - previous_ms : now;
        previous_ms = now;
        more = purge_pass(now, since, how | USI_PASS_SURPLUS);
    } else {
        more = purge_pass(now, idle, how);
    }
    return trim_large(now, idle) || more;
}

static void schedule_inline(void);

/* When the purger thread may leave (under purger.lock), or 0 while it stays: under `auto`,
 * once at most one thread uses uslab (design §3) and has for a purge delay (a program
 * whose threads come and go, thread churn, would otherwise start a purger per
 * generation), and its start has been recorded (`started`). Not before glibc's idle trim
 * it waits for (`large.pending`, at most a delay after the last large free): threads that
 * freed large blocks and exited leave them in their arenas' tops, which the one thread
 * left would otherwise keep until its next slow path (session 16's audit). Nor while its
 * last pass left idle memory to give back (`more`: empty slabs not yet idle for the delay,
 * depots with magazines): the slabs that exiting threads emptied became due as it left,
 * and the one thread left kept them until its next slow path, for good if it idled (4
 * workers that freed 50 MB each and exited: 209 MB resident, glibc 8; session 17's
 * memory-return audit). */
static uint64_t leave_at_ms(void)
{
    if (usi_options.purger != USI_PURGER_AUTO || !purger.started ||
        __atomic_load_n(&purger.users, __ATOMIC_ACQUIRE) > 1 ||
        __atomic_load_n(&large.pending, __ATOMIC_ACQUIRE) || purger.more)
        return 0;
    uint64_t alone = __atomic_load_n(&purger.alone_ms, __ATOMIC_ACQUIRE);
    return alone ? alone + usi_options.purge_delay_ms : 1;
}

static int leaving(void)
{
    uint64_t at = leave_at_ms();
    return at && usi_os_now_ms() >= at;
}

static void *purger_main(void *arg)
{
    (void)arg;
    /* Never cancelled in a wait (pthread_cond_wait is a cancellation point) with a lock
     * held: nobody outside uslab has its handle, but a cancel of every thread may come. */
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
    tls_role = 2;
    __atomic_store_n(&purger.ktid, usi_os_gettid(), __ATOMIC_RELEASE);
    usi_os_helper_thread(1); /* not the program's: usi_os_runtime_freeres */
    uint64_t tick = tick_ms();
    for (;;) {
        usi_lock(&purger.lock);
        while (!purger.pending && !purger.stop && !watching() && !leaving()) {
            uint64_t at = leave_at_ms(), now = usi_os_now_ms();
            if (!at) {
                pthread_cond_wait(&purger.wake, &purger.lock);
                continue;
            }
            struct timespec until; /* alone: wait until it may leave */
            usi_os_realtime_after(at > now ? at - now : 1, &until);
            pthread_cond_timedwait(&purger.wake, &purger.lock, &until);
        }
        /* A kick since the last pass (`work`) gets a pass before any leave: the pass is
         * what tells whether idle memory is left (`more`); a leave that came due during
         * the tick's sleep went before it, with the memory the kick was for. */
        int work = purger.pending;
        if (work || !leaving()) {
            purger.pending = 0;
            /* The tick's sleep, cut short by a stop (usi_purge_pause), or a leave when no
             * kick came. */
            struct timespec until;
            usi_os_realtime_after(tick, &until);
            while (!purger.stop && (work || !leaving()) &&
                   pthread_cond_timedwait(&purger.wake, &purger.lock, &until) == 0)
                ;
        }
        int stop = purger.stop, leave = !stop && !work && leaving();
        if (leave) {
            /* Unless paused, none now (0). Detached: nobody joins a thread that left by
             * itself (a finished thread never joined is a leak to TSan); a pause waits for
             * its kernel id to leave the thread group instead (ktid stays set). */
            int state = 1;
            __atomic_compare_exchange_n(&purger.thread, &state, 0, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED);
            purger.started = 0;
            __atomic_store_n(&purger.exited, 0, __ATOMIC_RELEASE);
            thread_detach(pthread_self());
        }
        usi_unlock(&purger.lock);
        if (leave)
            schedule_inline(); /* what is pending goes back on the slow paths */
        if (stop || leave) {
            usi_os_helper_thread(-1);
            return NULL;
        }
        USI_ASSERT_NO_LOCK();
        /* Never two passes at a time (pressure.c relies on it): an inline pass scheduled
         * before this thread started may still run on a slow path. */
        while (__atomic_exchange_n(&purger.running, 1, __ATOMIC_ACQUIRE))
            usi_os_sleep_ms(1);
        int more = run_pass(usi_os_now_ms(), USI_PASS_USER);
        __atomic_store_n(&purger.running, 0, __ATOMIC_RELEASE);
        usi_lock(&purger.lock);
        purger.more = more;
        if (more)
            purger.pending = 1;
        usi_unlock(&purger.lock);
        usi_purge_poll_live(); /* the page shows what the pass gave back */
    }
    return NULL;
}

/* Returns 1 if the thread started, 0 if it could not, -1 if it cannot now (another is still
 * recorded as running, or this thread is where it must not start one: the caller must not
 * wait for it). */
static int purger_start(void)
{
    pthread_attr_t attr;
    sigset_t all, old;
    pthread_t t;
    usi_thread_create_fn create = thread_create();
    if (!create)
        return -1; /* the hooks have not handed it down yet: a later kick */
    /* Inside glibc's own thread code: a thread's exit frees its DTV (and the stacks its
     * cache holds beyond 40 MiB) while it holds the stack-cache lock that pthread_create
     * takes (the seventh audit's batches of detached threads on their own stacks hung in
     * every run under the default settings). A later kick. */
    if (usi_os_in_glibc_section())
        return -1;
    __atomic_add_fetch(&purger.creating, 1, __ATOMIC_ACQ_REL);
    usi_lock(&purger.lock);
    int busy = purger.started; /* one that left by itself has cleared it (detached) */
    usi_unlock(&purger.lock);
    if (busy) {
        __atomic_sub_fetch(&purger.creating, 1, __ATOMIC_ACQ_REL);
        return -1;
    }
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, (size_t)256 << 10);
    /* The purger must never receive the program's signals. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    /* Joinable: usi_purge_pause joins it once `started` is set. No lock across
     * pthread_create, which may allocate and free through uslab and so kick (that kick
     * finds the state set and takes purger.lock); `creating` tells a pause to wait. */
    usi_debug_own_allocations(1); /* its TLS is uslab's, not a leak of the program's */
    int ok = create(&t, &attr, purger_main, NULL) == 0;
    usi_debug_own_allocations(-1);
    usi_lock(&purger.lock);
    if (ok) {
        purger.tid = t;
        purger.started = 1;
        pthread_cond_broadcast(&purger.wake); /* it may leave from now on */
    }
    usi_unlock(&purger.lock);
    __atomic_sub_fetch(&purger.creating, 1, __ATOMIC_ACQ_REL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (!ok)
        usi_report_note("cannot start the purger thread; memory goes back on slow paths");
    return ok;
}

int usi_purge_process_threaded(void)
{
    return !usi_os_single_threaded() && !__atomic_load_n(&purger.fork_tid, __ATOMIC_RELAXED);
}

/* The cgroup pids limit (usi_pressure_pids_max: v2 and v1), read once in the process, by the
 * first thread that asks; -2 while it is being read. */
static struct {
    int state; /* 0 unread, 1 being read, 2 read (atomic; a fork child reads it again if
                * another thread was reading it) */
    long long value;
} pids;

static long long pids_limit(void)
{
    int st = __atomic_load_n(&pids.state, __ATOMIC_ACQUIRE);
    if (st == 2)
        return pids.value;
    st = 0;
    if (!__atomic_compare_exchange_n(&pids.state, &st, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
        return -2;
    pids.value = usi_pressure_pids_max();
    __atomic_store_n(&pids.state, 2, __ATOMIC_RELEASE);
    return pids.value;
}

/* Whether this process gets the thread now (USLAB_PURGER). `auto` asks again at each kick
 * until the process has threads; then, once, whether a seccomp filter is in force: a
 * program that filters system calls may well refuse clone (the check itself is prctl,
 * which a filter that refuses it is unlikely to allow clone after). */
static int thread_wanted(void)
{
    switch (usi_options.purger) {
    case USI_PURGER_ALWAYS:
        return 1;
    case USI_PURGER_AUTO:
        /* Asked again at each kick: threads come and go (the thread leaves when alone).
         * With one user or none, only after a thread's exit: what it freed and flushed
         * goes back by the purger, which leaves once that is done, rather than wait for a
         * slow path of the threads left (workers that ran one after another, their
         * process's main thread idle: session 17). */
        if (!usi_purge_process_threaded() ||
            (__atomic_load_n(&purger.users, __ATOMIC_ACQUIRE) <= 1 &&
             !__atomic_load_n(&purger.exited, __ATOMIC_ACQUIRE)))
            return 0;
        /* The reads below (the status file for seccomp, the cgroup's pids.max) need some
         * hundred bytes of stack: on a handler's alternate stack, a later kick does them
         * (design §12). */
        if ((!usi_os_seccomp_known() || __atomic_load_n(&pids.state, __ATOMIC_ACQUIRE) != 2) &&
            usi_os_on_signal_stack())
            return 0;
        if (usi_os_seccomp_mode() != 0) {
            usi_report_note("a seccomp filter is in force: no purger thread; memory goes "
                            "back on slow paths");
            return -1;
        }
        /* A low limit on the user's threads (a sandbox against fork bombs, a judge): the
         * program's own pthread_create must not fail for our thread. */
        long long nproc = usi_os_nproc_limit();
        if (nproc >= 0 && nproc < USI_PURGER_MIN_NPROC) {
            usi_report_note("RLIMIT_NPROC is %lld: no purger thread; memory goes back on "
                            "slow paths",
                            nproc);
            return -1;
        }
        /* The same for a cgroup's pids controller (read once; -2: another thread reads it
         * now, ask again at the next kick). */
        long long pmax = pids_limit();
        if (pmax == -2)
            return 0;
        if (pmax >= 0 && pmax < USI_PURGER_MIN_NPROC) {
            usi_report_note("the cgroup's pids.max is %lld: no purger thread; memory goes "
                            "back on slow paths",
                            pmax);
            return -1;
        }
        return 1;
    default:
        return -1;
    }
}

/* Inline: a pass is due tick ms from now, unless one is due already. */
static void schedule_inline(void)
{
    uint64_t none = 0, due = usi_os_now_ms() + tick_ms();
    __atomic_compare_exchange_n(&usi_purge_due_ms, &none, due ? due : 1, 0, __ATOMIC_RELAXED,
                                __ATOMIC_RELAXED);
}

/* Whether the thread asked for (state 1) is this process's. A child made by glibc's clone()
 * or syscall(SYS_clone) runs no fork handler: it has a copy of the state, with the thread
 * (and maybe its lock, held at the clone) left in the parent; a vfork child shares the
 * state itself with its parent, whose thread runs on. Either way the child neither waits
 * for, signals nor touches the thread, nor writes the state (the parent's, in a vfork
 * child): to it the thread is gone, and its passes run inline. */
static int thread_here(void)
{
    return __atomic_load_n(&purger.pid, __ATOMIC_ACQUIRE) == usi_os_getpid();
}

void usi_purge_kick(void)
{
    /* Under strict seccomp mode a pass's madvise would kill: idle memory stays. */
    if (usi_options.purge_delay_ms == 0 || usi_os_quiet())
        return;
    int state = __atomic_load_n(&purger.thread, __ATOMIC_ACQUIRE);
    if (state == 0) {
        int want = thread_wanted();
        if (want < 0)
            __atomic_store_n(&purger.thread, -1, __ATOMIC_RELEASE);
        /* The purger, leaving, starts no other. Nor does a child that ran no fork handler
         * (glibc's clone(), syscall(SYS_clone), vfork): a thread started there would be
         * the child's, and a child that leaves by the exit system call (the end of a
         * clone()d function) would then live on as that thread, never reaped: its parent's
         * waitpid hung for good. Its passes run inline. Nor does a thread inside glibc's
         * thread calls or a magazine exchange (tls_no_start) or holding a uslab lock (a
         * signal handler's kick there); a later kick starts it. */
        if (want <= 0 || tls_role == 2 || tls_no_start != 0 || usi_lock_depth != 0 ||
            __atomic_load_n(&purger.home, __ATOMIC_ACQUIRE) != usi_os_getpid() ||
            usi_os_on_signal_stack()) {
            /* Inside a magazine exchange (a depot's first full magazine, design §4): due
             * at once, so that the same slow path's poll, outside the exchange, runs the
             * pass and starts the thread. */
            if (want > 0 && tls_no_start != 0 && tls_role != 2)
                __atomic_store_n(&usi_purge_due_ms, 1, __ATOMIC_RELAXED);
            else
                schedule_inline();
            return;
        }
        /* Started with no lock held: pthread_create may allocate and free (through uslab),
         * which may kick again; that kick finds the state set. The process's id first, so
         * that whoever sees the state set sees whose thread it is. */
        __atomic_store_n(&purger.pid, usi_os_getpid(), __ATOMIC_RELEASE);
        state = 0;
        if (__atomic_compare_exchange_n(&purger.thread, &state, 1, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED)) {
            int started = purger_start();
            if (started <= 0) {
                __atomic_store_n(&purger.thread, started < 0 ? 0 : -1, __ATOMIC_RELEASE);
                schedule_inline();
                return;
            }
        }
    } else if (state < 0 || state == 2 || !thread_here()) {
        schedule_inline();
        return;
    }
    /* Tried, not waited for: a signal handler's malloc may kick while its thread holds
     * the lock, in a kick or at its exit (usi_purge_thread_exited), and would wait for
     * ever. When it is busy, an inline pass is scheduled instead: the work is done all
     * the same, on a later slow path. */
    if (usi_trylock(&purger.lock) != 0) {
        schedule_inline();
        return;
    }
    /* The thread may have left (or been paused) since the state was read. */
    int running = __atomic_load_n(&purger.thread, __ATOMIC_ACQUIRE) == 1;
    if (running) {
        purger.pending = 1;
        pthread_cond_signal(&purger.wake);
    }
    usi_unlock(&purger.lock);
    if (!running)
        schedule_inline();
}

void usi_purge_surplus(void)
{
    /* Under USLAB_RETURN=pressure|both the program asked to keep memory until the kernel
     * reports pressure: that signal decides there (design §3). */
    if (usi_options.purge_delay_ms == 0 || usi_os_quiet() ||
        usi_options.return_policy != USI_RETURN_DELAY)
        return;
    __atomic_store_n(&surplus_pending, 1, __ATOMIC_RELEASE);
    /* Due at once: the caller's slow path runs it after its locks are dropped, whether or
     * not the purger thread runs (its tick may be half a delay away). */
    __atomic_store_n(&usi_purge_due_ms, 1, __ATOMIC_RELAXED);
}

int usi_purge_starved(void)
{
    if (!purge_pass || !__atomic_load_n(&usi_slab_surplus_bytes, __ATOMIC_RELAXED) ||
        usi_lock_depth != 0 || usi_os_quiet())
        return 0;
    if (__atomic_exchange_n(&purger.running, 1, __ATOMIC_ACQUIRE))
        return 0;
    int ran = 0;
    if (!usi_os_on_signal_stack()) {
        USI_ASSERT_NO_LOCK();
        int e = errno;
        purge_pass(usi_os_now_ms(), 0, USI_PASS_STARVED);
        errno = e;
        ran = 1;
    }
    __atomic_store_n(&purger.running, 0, __ATOMIC_RELEASE);
    return ran;
}

void usi_purge_poll_due(void)
{
    if (usi_os_quiet()) {
        __atomic_store_n(&usi_purge_due_ms, 0, __ATOMIC_RELAXED);
        return;
    }
    uint64_t now = usi_os_now_ms();
    uint64_t due = __atomic_load_n(&usi_purge_due_ms, __ATOMIC_RELAXED);
    if (!due || now < due || __atomic_exchange_n(&purger.running, 1, __ATOMIC_ACQUIRE))
        return;
    if (usi_os_on_signal_stack()) { /* a small stack: the pass stays due (design §12) */
        __atomic_store_n(&purger.running, 0, __ATOMIC_RELEASE);
        return;
    }
    /* Cleared first: a kick during the pass schedules the next one. */
    __atomic_store_n(&usi_purge_due_ms, 0, __ATOMIC_RELAXED);
    USI_ASSERT_NO_LOCK();
    int e = errno;
    /* Due again; or the thread, if the process has threads by now. */
    if (run_pass(now, 0) || watching())
        usi_purge_kick();
    errno = e;
    __atomic_store_n(&purger.running, 0, __ATOMIC_RELEASE);
}

void usi_purge_watch(void)
{
    if (usi_options.return_policy != USI_RETURN_DELAY)
        usi_purge_kick();
}

void usi_purge_thread_started(void)
{
    if (tls_role == 0) {
        tls_role = 1;
        /* A second thread: an inline pass is due at once, so that this thread's slow path
         * runs it and, if anything is left or watched, its kick starts the purger thread
         * (otherwise that would wait for slow paths that may never come). */
        int users = __atomic_add_fetch(&purger.users, 1, __ATOMIC_ACQ_REL);
        if (users >= 2)
            __atomic_store_n(&purger.alone_ms, 0, __ATOMIC_RELEASE);
        if (users == 2 && usi_options.purger == USI_PURGER_AUTO && usi_options.purge_delay_ms &&
            __atomic_load_n(&purger.thread, __ATOMIC_ACQUIRE) == 0)
            __atomic_store_n(&usi_purge_due_ms, 1, __ATOMIC_RELAXED);
    }
    uint32_t tid = __atomic_load_n(&purger.fork_tid, __ATOMIC_RELAXED);
    if (tid && tid != usi_os_gettid())
        __atomic_store_n(&purger.fork_tid, 0, __ATOMIC_RELAXED);
}

void usi_purge_thread_exited(void)
{
    if (tls_role != 1)
        return;
    tls_role = 0;
    if (__atomic_sub_fetch(&purger.users, 1, __ATOMIC_ACQ_REL) > 1)
        return;
    uint64_t now = usi_os_now_ms();
    __atomic_store_n(&purger.alone_ms, now ? now : 1, __ATOMIC_RELEASE);
    if (__atomic_load_n(&purger.thread, __ATOMIC_ACQUIRE) == 1) {
        usi_lock(&purger.lock); /* the thread rechecks under it: no lost wake-up */
        pthread_cond_broadcast(&purger.wake);
        usi_unlock(&purger.lock);
    } else if (usi_options.purger == USI_PURGER_AUTO && usi_options.purge_delay_ms) {
        /* None running: this thread's flush may have left empty slabs and full depots that
         * no other thread's slow path will ever pass by. The purger comes for them. */
        __atomic_store_n(&purger.exited, 1, __ATOMIC_RELEASE);
        usi_purge_kick();
    }
}

int usi_purge_pause(void)
{
    int state = 1;
    /* Another process's thread (a clone or vfork child): not this one's to stop, nor in
     * its thread group (the kernel's checks see none). */
    int now = __atomic_load_n(&purger.thread, __ATOMIC_ACQUIRE);
    if ((now != 1 && now != 0) || !thread_here())
        return 0; /* never here, paused already, or none of this process's */
    if (!__atomic_compare_exchange_n(&purger.thread, &state, 2, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_RELAXED)) {
        /* None now: one that left by itself (detached) may still be on its way out of the
         * thread group, which the wait below covers; paused meanwhile, none starts. */
        state = 0;
        if (!__atomic_compare_exchange_n(&purger.thread, &state, 2, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_RELAXED))
            return 0;
    }
    while (__atomic_load_n(&purger.creating, __ATOMIC_ACQUIRE))
        usi_os_sleep_ms(1); /* another thread is starting it: its tid comes next */
    usi_lock(&purger.lock);
    int started = purger.started;
    pthread_t t = purger.tid;
    purger.stop = 1;
    pthread_cond_broadcast(&purger.wake);
    usi_unlock(&purger.lock);
    if (started)
        thread_join(t);
    /* pthread_join returns when the thread has released its memory, a little before the
     * kernel takes it out of the thread group, which is what unshare(CLONE_NEWUSER) counts;
     * a thread that left by itself was not joined at all: wait for the kernel (at most a
     * second; it takes microseconds). */
    uint32_t k = __atomic_exchange_n(&purger.ktid, 0, __ATOMIC_ACQ_REL);
    for (int i = 0; k && i < 1000 && usi_os_thread_exists(k); i++)
        usi_os_sleep_ms(1);
    usi_lock(&purger.lock);
    purger.stop = 0;
    purger.started = 0;
    purger.pending = 0;
    purger.more = 0;
    usi_unlock(&purger.lock);
    schedule_inline(); /* what it had still to give back */
    return 1;
}

void usi_purge_never(void)
{
    usi_purge_pause();
    /* Not started yet, or paused (by this call or another thread's): never again here. A
     * running thread of another process stays its own (state 1). */
    int state = 0;
    if (!__atomic_compare_exchange_n(&purger.thread, &state, -1, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_RELAXED) &&
        state == 2)
        __atomic_compare_exchange_n(&purger.thread, &state, -1, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED);
}

void usi_purge_resume(void)
{
    int state = 2;
    __atomic_compare_exchange_n(&purger.thread, &state, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

void usi_purge_postfork_home(void)
{
    __atomic_store_n(&purger.home, usi_os_getpid(), __ATOMIC_RELEASE);
}

void usi_purge_postfork_child(void)
{
    pthread_mutex_init(&purger.lock, NULL);
    pthread_cond_init(&purger.wake, NULL);
    /* The thread did not survive the fork; the child decides afresh (it has one thread). */
    purger.thread = 0;
    purger.pending = 0;
    purger.more = 0;
    purger.exited = 0;
    purger.started = 0; /* the parent's thread is not the child's to join */
    purger.ktid = 0;
    purger.stop = 0;
    purger.creating = 0;
    purger.users = tls_role == 1; /* the forking thread: the child's only one */
    purger.alone_ms = 0;
    if (pids.state == 1)
        pids.state = 0;
    purger.fork_tid = usi_os_single_threaded() ? 0 : usi_os_gettid();
    purger.running = 0; /* a pass on another thread of the parent is not ours to finish */
    /* A thread of the parent was in mallopt, or in a trim of the arenas (whose sentinels,
     * taken off the list, are then lost to the child, and glibc's trim threshold may be its
     * default until the next trim raises it): glibc's fork handlers let the call finish or
     * not start; either way no thread here will end it. */
    if (large.state == LARGE_TUNING)
        large.state = LARGE_TUNED;
    if (watching())
        schedule_inline(); /* the parent's thread watched; the child's next slow paths do */
}
