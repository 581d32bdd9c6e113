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
 * Passes run on the allocator's own activity by default, with no thread: once a pass is
 * due, the next slow path of any thread runs it (usi_purge_poll), and so does a thread's
 * exit. Such an inline pass calls no user code (it leaves the depots of caches with a
 * destructor to their own next allocation slow path; under pressure it leaves the reclaim
 * callbacks to their caches' next allocation slow path, objects.c), since the caller may
 * hold its own locks. USLAB_PURGER=thread asks for a background thread instead, as
 * jemalloc's background_thread: started at the first kick, it runs a pass every half delay
 * while anything is pending, sleeps on its `pending` word otherwise (a futex that a kick
 * sets and wakes, with no lock), and lives as long as the process (its caveats: design
 * §3). Under USLAB_RETURN=pressure|both, while some cache has a reclaim callback (the
 * registry counts them), passes are due every tick even with nothing pending: each reads
 * the pressure. USLAB_PURGE_DELAY=0 purges at once and needs neither.
 *
 * The pass itself (reclaim.c, above the depot) is handed in at initialisation, so this
 * file calls nothing above it.
 */
#include "purge.h"
#include "base.h"
#include "debug.h"
#include "options.h"
#include "os.h"
#include "registry.h"
#include "report.h"
#include "settings.h"
#include "slab.h"

#include <errno.h>
#include <signal.h>

static struct {
    int pending; /* the thread: something may be waiting to be given back (atomic; the futex
                  * word it sleeps on while 0) */
    int thread;  /* the thread: 0 none yet, 1 asked for or running, -1 never in this
                  * process (it could not start) (atomic; reset in a fork child) */
    int running; /* a pass runs on some thread, inline or the purger (atomic) */
    int pid;     /* the process whose thread it is (atomic; written before the thread is
                  * asked for): a child made by clone without the fork handlers, or by
                  * vfork, has a copy of this state, or shares it, but not the thread */
} purger;

/* This thread's depth in sections where it must not start the purger thread: its own
 * magazine exchanges (tcache.c), which pthread_create's mallocs would nest into from a
 * handler that interrupted one. */
__thread int usi_purge_tls_no_start __attribute__((tls_model("initial-exec")));
/* Whether this thread is the purger thread. */
static __thread int tls_purger __attribute__((tls_model("initial-exec")));

uint64_t usi_purge_due_ms;
/* The next pass releases every empty slab beyond the reserves, idle or not (atomic). */
static int surplus_pending;

/* glibc's large blocks (design §8). glibc's own rule (malloc.c): its mmap threshold starts
 * at 128 KiB, and a free of an mmapped chunk larger than the threshold, up to 32 MiB, raises
 * it to that chunk's size and the trim threshold to twice that. So each new largest block
 * is mmapped, faulted in and unmapped once before the heap keeps blocks of its size: in a
 * program that grows its buffers, most of its faults (bench/'s large churn, 4-24 MiB: 40k
 * faults against 11k). uslab applies that rule at the malloc too: a large malloc whose
 * chunk glibc would mmap, up to twice the threshold, raises the threshold above it first
 * (usi_purge_large_allocated), and the free of an mmapped chunk still raises it
 * (usi_purge_large_freeing). A block further above is mapped, as glibc would: in the heap it
 * would sit beyond the holes the smaller ones left (cfrac's 1, 2 and 2.5 MiB buffers,
 * each freed after the next is made: 6.7 MB at its peak from the heap, 5.7 mapped); once
 * glibc is tuned (below), any large malloc raises it (bench/'s large buffers, 20 blocks of
 * 5-25 MiB made before any is freed: 137k faults against 143k). Setting
 * a threshold with mallopt turns glibc's rule off, so from the first raise uslab keeps
 * both thresholds itself, the trim threshold at glibc's twice the mmap threshold.
 *
 * Once the program holds LARGE_TUNE_LIVE large blocks at once or has freed
 * LARGE_TUNE_AFTER, glibc is **tuned** to keep their memory: the trim threshold goes to
 * trim_for(threshold, 1), and from then on glibc is trimmed once its blocks are idle
 * (usi_purge_trim_glibc). Until then a program with a few keeps glibc's trims (cfrac holds
 * at most 4 and frees 8, lifetime 4 and 4: 1 MB and 0.2 MB less at their peak than with the
 * trim threshold raised at start), while one that works with many is tuned early: bench/'s
 * `large` (40 held at once, 10,000 frees) and git log -p (21 held, 2,000 frees) at their
 * 6th block held. Tuned late, a program pays once for the blocks trimmed before (`large`
 * tuned at its 64th free took 3,300 more page faults than tuned at start), and a program
 * that hands a few blocks from one thread to another pays at each trim: bench/'s `large
 * prodcons` (at most 6 held, their bytes above the untuned trim threshold) trimmed its heap
 * about ten times before its 64th free, 5,700 page faults against 2,700 at the 16th.
 *
 * state: OFF (never tuned: the user tuned glibc, USLAB_PURGE_DELAY=0, libuslab), COUNTING,
 * TUNING (one thread is in mallopt), TUNED. Only a thread that moved the state to TUNING
 * calls mallopt, and puts it back after; a program's own mallopt of a threshold
 * (usi_purge_large_user_tunes) moves COUNTING or TUNED to OFF, and waits out a TUNING so
 * that its call comes after ours and wins. */
enum { LARGE_OFF, LARGE_COUNTING, LARGE_TUNING, LARGE_TUNED };
#define LARGE_TUNE_AFTER         16
#define LARGE_TUNE_LIVE          6
#define GLIBC_MMAP_THRESHOLD_MIN ((size_t)128 << 10)
#define GLIBC_MMAP_THRESHOLD_MAX ((size_t)32 << 20)
#define GLIBC_TRIM_THRESHOLD     ((size_t)128 << 10) /* glibc's DEFAULT_TRIM_THRESHOLD */
static struct {
    int state;         /* LARGE_* (atomic) */
    int user;          /* the program set a threshold of glibc's (mallopt), maybe before
                        * uslab's initialisation: no tuning, no trim of uslab's (atomic) */
    unsigned frees;    /* large frees while COUNTING (atomic) */
    int live;          /* large mallocs less large frees while COUNTING (atomic; a block of
                        * glibc's below the slab limit, made when slabs could not grow, is
                        * counted at its free only: an estimate) */
    int pending;       /* a large block was freed since the last trim (atomic) */
    unsigned freed;    /* large frees (and resizes) since tuning, moved without a lock (a
                        * lost increment still moves it): the passes see it move */
    unsigned seen;     /* `freed` as the last pass saw it (passes never run two at a time) */
    uint64_t still_ms; /* since when the passes have seen it not move */
    size_t threshold;  /* glibc's mmap threshold as the rule has it (atomic) */
    size_t applied;    /* the threshold uslab last gave glibc, 0 before the first (written
                        * under TUNING) */
    int resume;        /* the state TUNING goes back to (written under TUNING) */
} large = {.threshold = GLIBC_MMAP_THRESHOLD_MIN};

/* The trim threshold for mmap threshold t: glibc's rule keeps twice t at the top of its
 * heap; tuned, eight times (at least 64 MiB). bench/'s large buffers (20 live blocks of
 * 5-25 MiB) trimmed and faulted back its heap's top at 64 MiB: 224k faults against 143k
 * at 192 MiB and above (tcmalloc 126k), for the same peak. */
static size_t trim_for(size_t t, int tuned)
{
    size_t floor = (size_t)64 << 20;
    return !tuned ? 2 * t : 8 * t > floor ? 8 * t : floor;
}

/* Gives glibc the thresholds for the current mmap threshold; the caller holds TUNING,
 * having moved the state from `from` (TUNED: tuned; COUNTING: glibc's rule only). A raise
 * that comes meanwhile is applied by the next loop, or by the malloc or free that sees it
 * unapplied (threshold_raise). Returns 0 if glibc refused. */
static int apply_thresholds(int from)
{
    size_t t;
    do {
        t = __atomic_load_n(&large.threshold, __ATOMIC_ACQUIRE);
        if (!usi_sys_tune(t, trim_for(t, from == LARGE_TUNED)))
            return 0;
        __atomic_store_n(&large.applied, t, __ATOMIC_RELEASE);
    } while (t != __atomic_load_n(&large.threshold, __ATOMIC_ACQUIRE));
    return 1;
}

/* Moves the state from `from` to TUNING (nothing if it was not `from`: a later call does
 * it), applies the thresholds (tuned: to TUNED) unless the program has set one itself, and
 * ends TUNING. */
static void retune(int from, int tuned)
{
    USI_ASSERT(from == LARGE_COUNTING || from == LARGE_TUNED);
    if (!__atomic_compare_exchange_n(&large.state, &from, LARGE_TUNING, 0, __ATOMIC_SEQ_CST,
                                     __ATOMIC_RELAXED))
        return;
    large.resume = from;
    int ok = !__atomic_load_n(&large.user, __ATOMIC_SEQ_CST) &&
             apply_thresholds(tuned ? LARGE_TUNED : from);
    __atomic_store_n(&large.state, !ok ? LARGE_OFF : tuned ? LARGE_TUNED : from, __ATOMIC_SEQ_CST);
}

/* glibc's rule for a chunk it would mmap (or did): the threshold goes up to its size,
 * and uslab gives it to glibc (state s: what the caller read, COUNTING or TUNED). */
static void threshold_raise(size_t chunk, int s)
{
    size_t t = __atomic_load_n(&large.threshold, __ATOMIC_RELAXED);
    while (chunk > t && chunk <= GLIBC_MMAP_THRESHOLD_MAX &&
           !__atomic_compare_exchange_n(&large.threshold, &t, chunk, 1, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED))
        ;
    if (__atomic_load_n(&large.threshold, __ATOMIC_ACQUIRE) !=
        __atomic_load_n(&large.applied, __ATOMIC_ACQUIRE))
        retune(s, s == LARGE_TUNED); /* busy: a later malloc or free applies it */
}

/* The pass, set once at initialisation before anything can kick the purger. */
static int (*purge_pass)(uint64_t now_ms, uint64_t idle_ms, unsigned how);

void usi_purge_set_pass(int (*pass)(uint64_t now_ms, uint64_t idle_ms, unsigned how))
{
    purge_pass = pass;
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
/* This thread freed a block of glibc's since uslab tuned it: its exit trims its arena. */
static __thread int tls_large_freed __attribute__((tls_model("initial-exec")));

/* The main thread (the one that loads the library: no system call asks it later, which a
 * memory-only seccomp filter could kill for). */
static pthread_t main_thread;
static int main_known;

__attribute__((constructor)) static void note_main_thread(void)
{
    main_thread = pthread_self();
    main_known = 1;
}

static void sentinel_make(unsigned generation)
{
    tls_sentinel_generation = generation + 1; /* one try a thread and generation */
    /* Not on the main thread: its arena is glibc's main one, whose top malloc_trim shrinks
     * itself, and a sentinel there sat above the heap's top blocks, so that a buffer grown
     * by realloc was copied where it would have grown in place (issue 36: 28% more page
     * faults than glibc on bench/'s large realloc row). */
    if (main_known && pthread_equal(pthread_self(), main_thread))
        return;
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
    if (!__atomic_load_n(&sentinels.head, __ATOMIC_RELAXED))
        return;
    /* A raise of the mmap threshold (a free on another thread) holds TUNING for a moment:
     * waited for, not taken for a trim in progress (the trim would be lost). */
    int s = LARGE_TUNED;
    while (!__atomic_compare_exchange_n(&large.state, &s, LARGE_TUNING, 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_RELAXED)) {
        if (s != LARGE_TUNING)
            return; /* never tuned, or the program's threshold decides */
        usi_os_sleep_ms(1);
        s = LARGE_TUNED;
    }
    large.resume = LARGE_TUNED;
    __atomic_add_fetch(&sentinels.generation, 1, __ATOMIC_RELAXED);
    int user = __atomic_load_n(&large.user, __ATOMIC_SEQ_CST);
    int lowered = !user && usi_sys_tune(0, GLIBC_TRIM_THRESHOLD);
    sentinels_free();
    int ok = lowered && apply_thresholds(LARGE_TUNED);
    __atomic_store_n(&large.state, ok ? LARGE_TUNED : LARGE_OFF, __ATOMIC_SEQ_CST);
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

void usi_purge_large_freeing(const void *p)
{
    int s = __atomic_load_n(&large.state, __ATOMIC_RELAXED);
    if (s == LARGE_COUNTING || s == LARGE_TUNED)
        threshold_raise(usi_sys_mmapped_chunk(p), s); /* read before glibc unmaps it */
}

static void large_count_free(void)
{
    __atomic_sub_fetch(&large.live, 1, __ATOMIC_RELAXED);
    if (__atomic_add_fetch(&large.frees, 1, __ATOMIC_RELAXED) >= LARGE_TUNE_AFTER)
        retune(LARGE_COUNTING, 1);
}

int usi_purge_large_allocated(size_t size)
{
    int s = __atomic_load_n(&large.state, __ATOMIC_RELAXED);
    if (USI_UNLIKELY(s == LARGE_COUNTING) &&
        __atomic_add_fetch(&large.live, 1, __ATOMIC_RELAXED) >= LARGE_TUNE_LIVE) {
        retune(LARGE_COUNTING, 1);
        s = __atomic_load_n(&large.state, __ATOMIC_RELAXED);
    }
    size_t chunk = usi_sys_mmapped_chunk_for(size);
    if (s == LARGE_TUNED ||
        (s == LARGE_COUNTING && chunk / 2 <= __atomic_load_n(&large.threshold, __ATOMIC_RELAXED)))
        threshold_raise(chunk, s);
    if (s == LARGE_TUNED) {
        unsigned g = __atomic_load_n(&sentinels.generation, __ATOMIC_RELAXED);
        if (USI_UNLIKELY(tls_sentinel_generation != g + 1)) {
            sentinel_make(g);
            return 1;
        }
    }
    return 0;
}

/* A large block's memory went back into glibc's heap (tuned or tuning): the idle trim is
 * due once the passes have seen no such free for a purge delay. No clock here: a large
 * free of glibc's costs about 20 ns, and a clock read a third of that (bench/'s large pow2:
 * a fifth of uslab's time above glibc's). */
static void large_idle_trim_due(void)
{
    tls_large_freed = 1;
    __atomic_store_n(&large.freed, __atomic_load_n(&large.freed, __ATOMIC_RELAXED) + 1,
                     __ATOMIC_RELAXED);
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

/* Trims glibc once its blocks have been idle for the delay: the count of large frees is
 * where a pass at least a delay before left it (passes a tick apart: a delay to a delay and
 * a tick after the last free; with rarer slow paths, the second pass after it). Returns
 * whether that is still to come. */
static int trim_large(uint64_t now, uint64_t idle)
{
    if (!__atomic_load_n(&large.pending, __ATOMIC_ACQUIRE))
        return 0;
    unsigned freed = __atomic_load_n(&large.freed, __ATOMIC_RELAXED);
    if (freed != large.seen || !large.still_ms) {
        large.seen = freed;
        large.still_ms = now ? now : 1;
        return 1;
    }
    if (now < large.still_ms + idle)
        return 1;
    large.still_ms = 0; /* the next pending free starts the watch again */
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
        /* The working-set interval is half the idle time, not the tick: under `pressure`
         * passes come every 250 ms to read it, and the depots kept their working set for
         * half a second only. */
        static uint64_t reaped_ms; /* passes never run two at a time (purger.running) */
        if (now >= reaped_ms + idle / 2) {
            reaped_ms = now;
            how |= USI_PASS_REAP;
        }
        more = purge_pass(now, idle, how);
    }
    return trim_large(now, idle) || more;
}

/* Inline: a pass is due tick ms from now, unless one is due already. */
static void schedule_inline(void)
{
    uint64_t none = 0, due = usi_os_now_ms() + tick_ms();
    __atomic_compare_exchange_n(&usi_purge_due_ms, &none, due ? due : 1, 0, __ATOMIC_RELAXED,
                                __ATOMIC_RELAXED);
}

static void *purger_main(void *arg)
{
    (void)arg;
    /* Never cancelled in a pass's callback: nobody outside uslab has its handle, but a
     * cancel of every thread may come. */
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
    tls_purger = 1;
    usi_os_helper_thread(1); /* not the program's: usi_os_runtime_freeres */
    uint64_t tick = tick_ms();
    for (;;) {
        /* A kick sets `pending` and wakes this sleep; watching, the sleep is a tick long. */
        while (!__atomic_load_n(&purger.pending, __ATOMIC_ACQUIRE) && !watching())
            usi_os_futex_wait(&purger.pending, 0, (unsigned)tick);
        __atomic_store_n(&purger.pending, 0, __ATOMIC_RELAXED);
        usi_os_sleep_ms(tick); /* a tick between passes */
        USI_ASSERT_NO_LOCK();
        /* Never two passes at a time (pressure.c relies on it): an inline pass scheduled
         * before this thread started may still run on a slow path. */
        while (__atomic_exchange_n(&purger.running, 1, __ATOMIC_ACQUIRE))
            usi_os_sleep_ms(1);
        int more = run_pass(usi_os_now_ms(), USI_PASS_USER);
        __atomic_store_n(&purger.running, 0, __ATOMIC_RELEASE);
        if (more)
            __atomic_store_n(&purger.pending, 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

/* Returns 1 if the thread started, 0 if it could not, -1 if it cannot now (this thread is
 * where it must not start one: a later kick tries again). */
static int purger_start(void)
{
    /* Inside glibc's own thread code: a thread's exit frees its DTV (and the stacks its
     * cache holds beyond 40 MiB) while it holds the stack-cache lock that pthread_create
     * takes (the seventh audit's batches of detached threads on their own stacks hung). */
    if (usi_os_in_glibc_section())
        return -1;
    pthread_attr_t attr;
    sigset_t all, old;
    pthread_t t;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, (size_t)256 << 10);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* The purger must never receive the program's signals. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    usi_debug_own_allocations(1); /* its TLS is uslab's, not a leak of the program's */
    int ok = pthread_create(&t, &attr, purger_main, NULL) == 0;
    usi_debug_own_allocations(-1);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (!ok)
        usi_report_note("cannot start the purger thread; memory goes back on slow paths");
    else /* empty slabs go back after the delay, calls or not (slab.h) */
        __atomic_store_n(&usi_slab_purger_pid, usi_os_getpid(), __ATOMIC_RELAXED);
    return ok;
}

/* The thread runs where the program asked for it, or, unless USLAB_PURGER says otherwise,
 * for a policy that must hear of memory pressure while the program idles
 * (USLAB_RETURN=pressure|both). */
static int thread_mode(void)
{
    if (usi_options.purger == USI_PURGER_THREAD)
        return 1;
    return usi_options.return_policy != USI_RETURN_DELAY &&
           !usi_os_getenv(usi_settings_table[USI_SETTING_PURGER].name);
}

/* The thread could not start where it was kicked: the same slow path starts it once its
 * locks are dropped (usi_purge_poll_due). Left to a later kick, the start was lost where
 * none came: threads that freed into their depots and idled kept 60 MB for good. */
static int start_deferred;

static void defer_start(void)
{
    __atomic_store_n(&start_deferred, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&usi_purge_due_ms, 1, __ATOMIC_RELAXED); /* polled at once */
}

void usi_purge_kick(void)
{
    /* Under strict seccomp mode a pass's madvise would kill: idle memory stays. */
    if (usi_options.purge_delay_ms == 0 || usi_os_quiet())
        return;
    if (!thread_mode()) {
        schedule_inline();
        return;
    }
    int state = __atomic_load_n(&purger.thread, __ATOMIC_ACQUIRE);
    if (state == 0) {
        /* Not from the purger itself, inside a magazine exchange, with a uslab lock held
         * or on a signal handler's stack: a later kick starts it. */
        if (tls_purger || usi_purge_tls_no_start != 0 || usi_lock_depth != 0 ||
            usi_os_on_signal_stack()) {
            defer_start();
            return;
        }
        /* The process's id first, so that whoever sees the state set sees whose thread it
         * is. No lock across pthread_create, which may allocate and free through uslab and
         * so kick: that kick finds the state set. */
        __atomic_store_n(&purger.pid, usi_os_getpid(), __ATOMIC_RELEASE);
        if (__atomic_compare_exchange_n(&purger.thread, &state, 1, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED)) {
            int started = purger_start();
            if (started <= 0) {
                __atomic_store_n(&purger.thread, started < 0 ? 0 : -1, __ATOMIC_RELEASE);
                if (started < 0)
                    defer_start();
                else
                    schedule_inline();
                return;
            }
        }
    } else if (state < 0 || __atomic_load_n(&purger.pid, __ATOMIC_ACQUIRE) != usi_os_getpid()) {
        /* None here: it could not start, or this is a child made by clone without the fork
         * handlers, or by vfork, whose parent's thread is not its own. */
        schedule_inline();
        return;
    }
    /* No lock: a signal handler's malloc may kick from anywhere. */
    __atomic_store_n(&purger.pending, 1, __ATOMIC_RELEASE);
    usi_os_futex_wake(&purger.pending, 1);
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
    if (__atomic_exchange_n(&start_deferred, 0, __ATOMIC_RELAXED)) {
        __atomic_store_n(&usi_purge_due_ms, 0, __ATOMIC_RELAXED);
        usi_purge_kick(); /* the thread's start, put off */
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
    if (run_pass(now, 0) || watching())
        usi_purge_kick(); /* due again (or the thread's, under USLAB_PURGER=thread) */
    errno = e;
    __atomic_store_n(&purger.running, 0, __ATOMIC_RELEASE);
}

void usi_purge_thread_exit(int last)
{
    /* The exiting thread's magazines went to their depots, shed beyond the headroom as any
     * free's (design §4). What the purge multipliers kept beyond the headroom (a pattern
     * that faulted its memory back) goes now: no later slow path of this thread will come,
     * and the threads left may idle (workers that ran and exited, their process's main
     * thread waiting: design §3). Empty slabs beyond the reserves go until the surplus is
     * within the headroom, whose slabs wait for the delay as after any free: a program
     * that starts its threads again finds them. When at most one thread with a cache is
     * left, the depots of caches without callbacks go first. So does glibc's free memory
     * if it freed large blocks. While the purger thread runs, it gives the slabs back after
     * the delay instead (usi_slab_purger_runs): threads started again find them. */
    if (usi_options.purge_delay_ms == 0 || usi_os_quiet() || !purge_pass || usi_lock_depth ||
        usi_os_on_signal_stack())
        return;
    int large_freed = tls_large_freed || __atomic_load_n(&large.pending, __ATOMIC_ACQUIRE);
    int slabs = usi_slab_idle_bytes() > USI_SLAB_HEADROOM && !usi_slab_purger_runs();
    if (!slabs && !large_freed) {
        usi_purge_poll(); /* a pass that came due anyway */
        return;
    }
    /* After a pass that runs now (another thread's exit, say): what it left is seen. Only
     * the last thread with a cache and a thread that freed glibc's blocks (its own arena's
     * sentinel, below) wait for it; another finds its magazines in the depots that pass or
     * the last exit's walks. 3,000 threads exiting at once each waited their turn, in 1 ms
     * sleeps (`mt live`: 59 of them). */
    while (__atomic_exchange_n(&purger.running, 1, __ATOMIC_ACQUIRE)) {
        if (!last && !tls_large_freed)
            return;
        usi_os_sleep_ms(1);
    }
    USI_ASSERT_NO_LOCK();
    int e = errno;
    if (slabs && usi_slab_idle_bytes() > USI_SLAB_HEADROOM)
        purge_pass(usi_os_now_ms(), 0, USI_PASS_EXIT | (last ? USI_PASS_SHED : 0));
    /* A thread that freed glibc's blocks trims its own arena, by a sentinel of its own made
     * now: another thread's exit that trimmed while this one was still freeing used up its
     * sentinel and took the `pending` of its last frees, and its arena's top kept them for
     * good (preload_large_arenas_joined, 1 run in 20 with two at a time). */
    if (tls_large_freed) {
        unsigned g = __atomic_load_n(&sentinels.generation, __ATOMIC_RELAXED);
        if (tls_sentinel_generation != g + 1 &&
            __atomic_load_n(&large.state, __ATOMIC_RELAXED) == LARGE_TUNED)
            sentinel_make(g);
        tls_large_freed = 0;
    }
    if (__atomic_exchange_n(&large.pending, 0, __ATOMIC_ACQ_REL) || large_freed)
        trim_glibc_idle(); /* unless the program set glibc's trim itself */
    errno = e;
    __atomic_store_n(&purger.running, 0, __ATOMIC_RELEASE);
}

void usi_purge_watch(void)
{
    if (usi_options.return_policy != USI_RETURN_DELAY)
        usi_purge_kick();
}

void usi_purge_postfork_child(void)
{
    /* The thread did not survive the fork; the child starts its own at its first kick. */
    purger.thread = 0;
    purger.pending = 0;
    purger.running = 0; /* a pass on another thread of the parent is not ours to finish */
    /* A thread of the parent was in mallopt, or in a trim of the arenas (whose sentinels,
     * taken off the list, are then lost to the child, and glibc's trim threshold may be its
     * default until the next trim raises it): glibc's fork handlers let the call finish or
     * not start; either way no thread here will end it. */
    if (large.state == LARGE_TUNING)
        large.state = large.resume;
    if (watching())
        schedule_inline(); /* the parent's thread watched; the child's next slow paths do */
}
