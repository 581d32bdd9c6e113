/* SPDX-License-Identifier: MIT */
/*
 * test_callbacks.c - destructors that call back into uslab (include/uslab.h: "Constructors,
 * destructors and reclaim callbacks run without uslab locks held; they may allocate and
 * free (also from their own cache, for the constructor via other objects)"), and
 * destructors running on the purger thread (docs/design.md §4-§7). Five correct programs,
 * one per case, selected by argv[1]; each is its own ctest with the environment it needs:
 *
 *  dtor_frees_own        a destructor frees another object of its own cache (a partner the
 *                        constructor allocated) while uslab_cache_reap flushes the
 *                        cache's magazines.
 *  dtor_frees_high_id    a destructor frees to another cache whose id is beyond the calling
 *                        thread's pairs (that thread never used it): the thread cache grows
 *                        under the destroy that runs the destructor.
 *  stats_in_destroy      a destructor calls uslab_cache_stats while uslab_cache_destroy
 *                        flushes the magazines.
 *  app_lock_purger OP    a destructor takes an application lock M on the purger thread while
 *                        the main thread holds M and calls OP: create (uslab_cache_create),
 *                        reap (uslab_reap), fork (fork()) or stats (uslab_stats_print).
 *  destroy_during_reap   uslab_cache_destroy of a cache whose every object was freed while
 *                        the purger flushes its idle depot magazines with a slow destructor.
 *
 * Races are made certain with handshakes, not timing: the purger's first destructor of a
 * round waits until the main thread is at the step that conflicts with it (every wait is
 * bounded, so a build whose purger never runs a destructor still finishes; the test then
 * only reports that the cases did not overlap). Sleeps only widen windows. A deadlock is
 * reported by SIGALRM ("DEADLOCK in <case>") after WATCHDOG_S seconds (in sanitized builds
 * also by a watchdog thread). Every case ends with a line "ok".
 */
#include "check.h"
#include "testutil.h"
#include "uslab.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ThreadSanitizer (and ASan) defer an asynchronous signal until its thread leaves the
 * runtime, which a thread deadlocked on a mutex never does: there a thread does the alarm's
 * job as well. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

#define WATCHDOG_S 20
#define WAIT_MS    10000 /* bound on waiting for the other thread's step of a handshake */

#define MAGIC_LIVE 0x6c6976656f626a31ull /* constructed */
#define MAGIC_DEAD 0x646561646f626a31ull /* destructed */

/* ---- harness ------------------------------------------------------------------------- */

static char alarm_msg[128];
static size_t alarm_len;

static void on_alarm(int sig)
{
    (void)sig;
    /* Async-signal-safe only: the message was formatted before the alarm was armed. */
    ssize_t r = write(STDERR_FILENO, alarm_msg, alarm_len);
    (void)r;
    _exit(1);
}

static long watchdog_deadline_s; /* CLOCK_MONOTONIC seconds; 0: disarmed */

static long now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec;
}

/* Sanitized builds: the alarm's job, from a thread that is not blocked (a few seconds after
 * the alarm, which fires first where signals get through). */
static void *watchdog_thread(void *arg)
{
    (void)arg;
    for (;;) {
        struct timespec ts = {0, 100 * 1000000L};
        nanosleep(&ts, NULL);
        long d = __atomic_load_n(&watchdog_deadline_s, __ATOMIC_ACQUIRE);
        if (d && now_s() >= d + 2)
            on_alarm(SIGALRM);
    }
    return NULL;
}

/* Arms the deadlock watchdog for the case `name`; watchdog(NULL) re-arms it. */
static void watchdog(const char *name)
{
    if (!alarm_len) {
        snprintf(alarm_msg, sizeof alarm_msg, "DEADLOCK in %s (no progress in %d s)\n", name,
                 WATCHDOG_S);
        alarm_len = strlen(alarm_msg);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_alarm;
        sigemptyset(&sa.sa_mask);
        CHECK(sigaction(SIGALRM, &sa, NULL) == 0, "sigaction");
        if (SANITIZED) {
            pthread_t t;
            __atomic_store_n(&watchdog_deadline_s, now_s() + WATCHDOG_S, __ATOMIC_RELEASE);
            CHECK(pthread_create(&t, NULL, watchdog_thread, NULL) == 0, "pthread_create");
            CHECK(pthread_detach(t) == 0, "pthread_detach");
        }
    }
    __atomic_store_n(&watchdog_deadline_s, now_s() + WATCHDOG_S, __ATOMIC_RELEASE);
    alarm(WATCHDOG_S);
}

static void watchdog_off(void)
{
    alarm(0);
    __atomic_store_n(&watchdog_deadline_s, 0, __ATOMIC_RELEASE);
}

/* The options are read when the library loads: they come from ctest's ENVIRONMENT. */
static void need_env(const char *name, const char *value)
{
    const char *v = getenv(name);
    CHECK(v && strcmp(v, value) == 0, "needs %s=%s in the environment (run it through ctest)", name,
          value);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static int flag_get(const int *f)
{
    return __atomic_load_n(f, __ATOMIC_ACQUIRE);
}

static void flag_set(int *f, int v)
{
    __atomic_store_n(f, v, __ATOMIC_RELEASE);
}

/* Waits until *f >= v, at most about max_ms; returns whether it was seen. */
static int flag_wait(const int *f, int v, long max_ms)
{
    for (long waited = 0; flag_get(f) < v; waited++) {
        if (waited >= max_ms)
            return 0;
        sleep_ms(1);
    }
    return 1;
}

static size_t count_get(const size_t *n)
{
    return __atomic_load_n(n, __ATOMIC_ACQUIRE);
}

static void count_add(size_t *n, long d)
{
    __atomic_fetch_add(n, (size_t)d, __ATOMIC_ACQ_REL);
}

static pthread_t main_thread;

static int on_main_thread(void)
{
    return pthread_equal(pthread_self(), main_thread);
}

static struct uslab_cache_stats stats_of(uslab_cache_t *c)
{
    struct uslab_cache_stats st;
    CHECK(uslab_cache_stats(c, &st) == 0, "uslab_cache_stats");
    return st;
}

/* Objects of the tests: a magic word, a link the destructor releases, and a payload the
 * program fills and verifies. 64 bytes: 256 per magazine (32 KiB of objects, at most
 * 256: design §4), 16 KiB per full magazine. */
struct obj {
    uint64_t magic;
    void *link;
    uint64_t link_id;
    unsigned char payload[40];
};

#define OBJ_SIZE sizeof(struct obj)

/* Allocates n objects of c, fills their payloads with patterns from id_base. */
static void alloc_fill(uslab_cache_t *c, struct obj **objs, size_t n, uint64_t id_base)
{
    for (size_t i = 0; i < n; i++) {
        objs[i] = uslab_cache_alloc(c);
        CHECK(objs[i] != NULL, "alloc %zu: %s", i, strerror(errno));
        CHECK(objs[i]->magic == MAGIC_LIVE, "object %p handed out unconstructed (magic %#llx)",
              (void *)objs[i], (unsigned long long)objs[i]->magic);
        pattern_fill(objs[i]->payload, sizeof objs[i]->payload, id_base + i);
    }
}

/* Verifies the payloads, then frees every object. */
static void check_free(uslab_cache_t *c, struct obj **objs, size_t n, uint64_t id_base)
{
    for (size_t i = 0; i < n; i++) {
        size_t bad = pattern_check(objs[i]->payload, sizeof objs[i]->payload, id_base + i);
        CHECK(bad == (size_t)-1, "object %zu corrupted at byte %zu", i, bad);
        CHECK(objs[i]->magic == MAGIC_LIVE, "object %zu destructed while allocated", i);
    }
    for (size_t i = 0; i < n; i++)
        uslab_cache_free(c, objs[i]);
}

/* Destructors report a destructor run on an object that is not constructed (run twice),
 * and the program goes on: uslab's own report, if any, follows. */
static size_t dtor_errors;

static int dtor_check(struct obj *o, const char *who)
{
    if (o->magic == MAGIC_LIVE) {
        o->magic = MAGIC_DEAD;
        return 1;
    }
    if (count_get(&dtor_errors) < 5)
        fprintf(stderr, "%s: destructor ran on %p, which is not constructed (magic %#llx)\n", who,
                (void *)o, (unsigned long long)o->magic);
    count_add(&dtor_errors, 1);
    return 0;
}

/* ---- 1. a destructor frees an object of its own cache ---------------------------------- */

#define OWN_OBJS 4096

static uslab_cache_t *own_cache;
static _Thread_local int own_in_ctor;
static size_t own_ctors, own_dtors, own_held; /* held: partners owned by constructed objects */

/* Each object owns a partner of the same cache, allocated by the constructor (a partner made
 * by this nested call has none: the chain ends there, or at an older partner's). */
static int own_ctor(void *p, void *arg)
{
    struct obj *o = p;
    (void)arg;
    o->magic = MAGIC_LIVE;
    o->link = NULL;
    o->link_id = 0;
    if (!own_in_ctor) {
        own_in_ctor = 1;
        struct obj *partner = uslab_cache_alloc(own_cache);
        own_in_ctor = 0;
        if (!partner)
            return -1;
        CHECK(partner->magic == MAGIC_LIVE, "partner %p not constructed", (void *)partner);
        o->link = partner;
        count_add(&own_held, 1);
    }
    count_add(&own_ctors, 1);
    return 0;
}

static void own_dtor(void *p, void *arg)
{
    struct obj *o = p;
    (void)arg;
    if (!dtor_check(o, "dtor_frees_own"))
        return;
    count_add(&own_dtors, 1);
    struct obj *partner = o->link;
    o->link = NULL;
    if (partner) {
        count_add(&own_held, -1);
        uslab_cache_free(own_cache, partner); /* into the cache being flushed */
    }
}

static void case_dtor_frees_own(void)
{
    need_env("USLAB_PURGE_DELAY", "0"); /* single-threaded: the counts below are exact */
    static struct obj *objs[OWN_OBJS];
    own_cache = uslab_cache_create("pairs", OBJ_SIZE, 0, own_ctor, own_dtor, NULL, NULL, 0);
    CHECK(own_cache != NULL, "create");
    for (int round = 0; round < 3; round++) {
        alloc_fill(own_cache, objs, OWN_OBJS, (uint64_t)round * OWN_OBJS);
        /* The depot keeps every magazine: the objects stay constructed. */
        check_free(own_cache, objs, OWN_OBJS, (uint64_t)round * OWN_OBJS);
        CHECK(count_get(&dtor_errors) == 0, "round %d: %zu destructor runs on destructed objects",
              round, count_get(&dtor_errors));
        struct uslab_cache_stats st = stats_of(own_cache);
        CHECK(st.active_objects == count_get(&own_held),
              "round %d: %zu active objects, but the cached objects own %zu partners", round,
              st.active_objects, count_get(&own_held));
        CHECK(count_get(&own_ctors) - count_get(&own_dtors) ==
                  st.active_objects + st.cached_objects,
              "round %d: %zu constructed - %zu destructed != %zu active + %zu cached", round,
              count_get(&own_ctors), count_get(&own_dtors), st.active_objects, st.cached_objects);
    }
    /* Reaping destructs the cached objects, whose destructors free their partners into the
     * thread's magazine: reap until nothing is left. */
    struct uslab_cache_stats st = stats_of(own_cache);
    for (int i = 0; i < 1000 && (st.active_objects || st.cached_objects); i++) {
        uslab_cache_reap(own_cache);
        st = stats_of(own_cache);
    }
    CHECK(st.active_objects == 0 && st.cached_objects == 0,
          "after reaping: %zu active, %zu cached objects", st.active_objects, st.cached_objects);
    CHECK(count_get(&own_held) == 0, "%zu partners still held", count_get(&own_held));
    CHECK(count_get(&own_ctors) == count_get(&own_dtors), "%zu constructed, %zu destructed",
          count_get(&own_ctors), count_get(&own_dtors));
    CHECK(count_get(&dtor_errors) == 0, "%zu destructor runs on destructed objects",
          count_get(&dtor_errors));
    uslab_cache_destroy(own_cache);
    printf("dtor_frees_own: %zu objects constructed and destructed once each\n",
           count_get(&own_ctors));
}

/* ---- 2. a destructor frees to a cache of a high id the thread never used ----------------- */

#define HIGH_OBJS    1024
#define HIGH_FILLERS 300 /* a new thread cache has pairs for ids up to ~245 */
#define RES_SIZE     48
#define RES_ID(i)    (1000000u + (uint64_t)(i))

static uslab_cache_t *high_cache, *res_cache;
static void *res_pool[HIGH_OBJS];
static size_t res_next; /* taken by constructors (main thread) */
static size_t high_ctors, high_dtors, res_freed, res_bad;

/* Each object holds a resource of res_cache, allocated by another thread. */
static int high_ctor(void *p, void *arg)
{
    struct obj *o = p;
    (void)arg;
    size_t i = __atomic_fetch_add(&res_next, 1, __ATOMIC_ACQ_REL);
    if (i >= HIGH_OBJS) {
        errno = ENOMEM;
        return -1;
    }
    o->magic = MAGIC_LIVE;
    o->link = res_pool[i];
    o->link_id = RES_ID(i);
    count_add(&high_ctors, 1);
    return 0;
}

static void high_dtor(void *p, void *arg)
{
    struct obj *o = p;
    (void)arg;
    if (!dtor_check(o, "dtor_frees_high_id"))
        return;
    count_add(&high_dtors, 1);
    if (pattern_check(o->link, RES_SIZE, o->link_id) != (size_t)-1)
        count_add(&res_bad, 1);
    /* The first free of this thread into res_cache: its pair does not exist yet. */
    uslab_cache_free(res_cache, o->link);
    o->link = NULL;
    count_add(&res_freed, 1);
}

static void *res_producer(void *arg)
{
    (void)arg;
    for (size_t i = 0; i < HIGH_OBJS; i++) {
        res_pool[i] = uslab_cache_alloc(res_cache);
        CHECK(res_pool[i] != NULL, "resource alloc %zu", i);
        pattern_fill(res_pool[i], RES_SIZE, RES_ID(i));
    }
    return NULL;
}

static void case_dtor_frees_high_id(void)
{
    need_env("USLAB_PURGE_DELAY", "0"); /* destructors run on this thread only */
    static struct obj *objs[HIGH_OBJS];
    static uslab_cache_t *fillers[HIGH_FILLERS];
    /* This thread's cache exists (default size) before anything else happens. */
    uslab_cache_t *warm = uslab_cache_create("warm", 32, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(warm != NULL, "create");
    void *w = uslab_cache_alloc(warm);
    CHECK(w != NULL, "alloc");
    uslab_cache_free(warm, w);
    high_cache = uslab_cache_create("holder", OBJ_SIZE, 0, high_ctor, high_dtor, NULL, NULL, 0);
    CHECK(high_cache != NULL, "create");
    for (int i = 0; i < HIGH_FILLERS; i++) {
        fillers[i] = uslab_cache_create("filler", 16, 0, NULL, NULL, NULL, NULL, 0);
        CHECK(fillers[i] != NULL, "create filler %d", i);
    }
    res_cache = uslab_cache_create("resource", RES_SIZE, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(res_cache != NULL, "create");
    /* Another thread allocates the resources: this one never touches res_cache itself. */
    pthread_t t;
    CHECK(pthread_create(&t, NULL, res_producer, NULL) == 0, "pthread_create");
    CHECK(pthread_join(t, NULL) == 0, "pthread_join");

    alloc_fill(high_cache, objs, HIGH_OBJS, 0);
    /* Destroy flushes the magazines, and the destructors make this thread's first frees
     * into res_cache. */
    check_free(high_cache, objs, HIGH_OBJS, 0);
    uslab_cache_destroy(high_cache);
    CHECK(count_get(&dtor_errors) == 0, "%zu destructor runs on destructed objects",
          count_get(&dtor_errors));
    CHECK(count_get(&high_ctors) == HIGH_OBJS && count_get(&high_dtors) == HIGH_OBJS,
          "%zu constructed, %zu destructed, %d expected", count_get(&high_ctors),
          count_get(&high_dtors), HIGH_OBJS);
    CHECK(count_get(&res_freed) == HIGH_OBJS, "%zu of %d resources freed", count_get(&res_freed),
          HIGH_OBJS);
    CHECK(count_get(&res_bad) == 0, "%zu resources corrupted", count_get(&res_bad));
    struct uslab_cache_stats st = stats_of(res_cache);
    CHECK(st.active_objects == 0, "resource cache: %zu active objects after all were freed",
          st.active_objects);
    uslab_cache_destroy(res_cache);
    for (int i = 0; i < HIGH_FILLERS; i++)
        uslab_cache_destroy(fillers[i]);
    uslab_cache_destroy(warm);
    printf("dtor_frees_high_id: %d resources freed by destructors\n", HIGH_OBJS);
}

/* ---- 3. a destructor calls uslab_cache_stats during uslab_cache_destroy ---------------- */

#define STATS_OBJS 1024

static uslab_cache_t *stats_cache;
static size_t stats_ctors, stats_dtors;

static int counting_ctor(void *p, void *arg)
{
    struct obj *o = p;
    o->magic = MAGIC_LIVE;
    o->link = NULL;
    count_add(arg, 1);
    return 0;
}

static void stats_dtor(void *p, void *arg)
{
    (void)arg;
    if (!dtor_check(p, "stats_in_destroy"))
        return;
    struct uslab_cache_stats st = stats_of(stats_cache);
    CHECK(st.object_size == OBJ_SIZE && st.objects_per_slab > 0,
          "stats in a destructor: object size %zu, %zu per slab", st.object_size,
          st.objects_per_slab);
    count_add(&stats_dtors, 1);
}

static void case_stats_in_destroy(void)
{
    need_env("USLAB_PURGE_DELAY", "0");
    static struct obj *objs[STATS_OBJS];
    stats_cache =
        uslab_cache_create("stats", OBJ_SIZE, 0, counting_ctor, stats_dtor, NULL, &stats_ctors, 0);
    CHECK(stats_cache != NULL, "create");
    alloc_fill(stats_cache, objs, STATS_OBJS, 0);
    check_free(stats_cache, objs, STATS_OBJS, 0);
    /* The thread's pair and the depot hold full magazines: destroy's flush runs
     * destructors, which read the statistics. */
    uslab_cache_destroy(stats_cache);
    CHECK(count_get(&dtor_errors) == 0, "%zu destructor runs on destructed objects",
          count_get(&dtor_errors));
    CHECK(count_get(&stats_ctors) == STATS_OBJS && count_get(&stats_dtors) == STATS_OBJS,
          "%zu constructed, %zu destructed, %d expected", count_get(&stats_ctors),
          count_get(&stats_dtors), STATS_OBJS);
    printf("stats_in_destroy: %d destructors read the statistics\n", STATS_OBJS);
}

/* ---- purger helpers (cases 4, 5) ---------------------------------------------------------- */

/* Frees a few slabs of a cache without magazines: an empty slab beyond the reserve wakes
 * the purger, which then reaps the idle depot magazines of every cache. */
static void kick_purger(uslab_cache_t *kick)
{
    static void *k[4096];
    size_t n = 3 * stats_of(kick).objects_per_slab;
    n = n > 4096 ? 4096 : n;
    for (size_t i = 0; i < n; i++)
        CHECK((k[i] = uslab_cache_alloc(kick)) != NULL, "kick alloc");
    for (size_t i = 0; i < n; i++)
        uslab_cache_free(kick, k[i]);
}

/* Handshake with the purger's first destructor of round r (1, 2, ...): main sets `armed`
 * to r; the first destructor on another thread claims it (armed back to 0), sets `in_dtor`
 * to r, and waits until `go` reaches r. Round numbers only grow: nothing is reset under a
 * thread that may not have looked yet. */
static int armed, in_dtor, go;

/* In a destructor: returns 1 if this call claimed a round (and waited for `go`). */
static int purger_handshake(void)
{
    if (on_main_thread())
        return 0;
    int r = __atomic_exchange_n(&armed, 0, __ATOMIC_ACQ_REL);
    if (!r)
        return 0;
    flag_set(&in_dtor, r);
    flag_wait(&go, r, WAIT_MS);
    return 1;
}

/* In main: arm(r) opens round r. */
static void arm(int r)
{
    flag_set(&armed, r);
}

/* In main, after arm(r): returns 1 once a destructor on the purger waits for release(r), 0
 * if none came within WAIT_MS (the round is then disarmed). */
static int wait_purger_dtor(int r)
{
    if (flag_wait(&in_dtor, r, WAIT_MS))
        return 1;
    if (__atomic_exchange_n(&armed, 0, __ATOMIC_ACQ_REL))
        return 0;                     /* nobody claimed it, nobody will */
    flag_wait(&in_dtor, r, -1L >> 1); /* claimed just now */
    return 1;
}

/* In main: lets round r's destructor go on. */
static void release(int r)
{
    flag_set(&go, r);
}

/* ---- 4. a destructor takes an application lock on the purger thread ---------------------- */

#define LOCK_OBJS   2048 /* 8 magazines: 2 stay with the thread, 6 go to the depot */
#define LOCK_ROUNDS 3

static pthread_mutex_t app_lock; /* recursive: uslab_reap may run the destructor here */
static uslab_cache_t *lock_cache;
static size_t lock_ctors, lock_dtors, lock_on_purger;

static void lock_dtor(void *p, void *arg)
{
    (void)arg;
    if (!dtor_check(p, "app_lock_purger"))
        return;
    purger_handshake();
    pthread_mutex_lock(&app_lock);
    count_add(&lock_dtors, 1);
    if (!on_main_thread())
        count_add(&lock_on_purger, 1);
    pthread_mutex_unlock(&app_lock);
}

static void case_app_lock_purger(const char *op)
{
    need_env("USLAB_PURGE_DELAY", "20");
    CHECK(op && (strcmp(op, "create") == 0 || strcmp(op, "reap") == 0 || strcmp(op, "fork") == 0 ||
                 strcmp(op, "stats") == 0),
          "app_lock_purger needs an operation: create, reap, fork or stats");
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&app_lock, &ma);
    pthread_mutexattr_destroy(&ma);
    FILE *devnull = fopen("/dev/null", "w");
    CHECK(devnull != NULL, "/dev/null");
    static struct obj *objs[LOCK_OBJS];
    lock_cache =
        uslab_cache_create("applock", OBJ_SIZE, 0, counting_ctor, lock_dtor, NULL, &lock_ctors, 0);
    uslab_cache_t *kick =
        uslab_cache_create("kick", 1024, 0, NULL, NULL, NULL, NULL, USLAB_CACHE_NOMAGAZINE);
    CHECK(lock_cache && kick, "create");
    int overlapped = 0;
    for (int round = 0; round < LOCK_ROUNDS; round++) {
        watchdog(NULL);
        alloc_fill(lock_cache, objs, LOCK_OBJS, (uint64_t)round * LOCK_OBJS);
        check_free(lock_cache, objs, LOCK_OBJS, (uint64_t)round * LOCK_OBJS);
        arm(round + 1);
        kick_purger(kick);
        /* The purger reaps the idle depot magazines and runs a destructor, which waits until
         * this thread holds the application lock. */
        overlapped += wait_purger_dtor(round + 1);
        pthread_mutex_lock(&app_lock);
        release(round + 1);
        uslab_cache_t *made = NULL;
        pid_t pid = -1;
        if (strcmp(op, "create") == 0) {
            made = uslab_cache_create("made-under-lock", 32, 0, NULL, NULL, NULL, NULL, 0);
            CHECK(made != NULL, "uslab_cache_create under the application lock");
        } else if (strcmp(op, "reap") == 0) {
            uslab_reap();
        } else if (strcmp(op, "stats") == 0) {
            CHECK(uslab_stats_print(devnull, USLAB_STATS_TABLE) == 0, "uslab_stats_print");
        } else {
            pid = fork();
            CHECK(pid >= 0, "fork: %s", strerror(errno));
            if (pid == 0)
                _exit(0);
        }
        pthread_mutex_unlock(&app_lock);
        if (made) {
            void *p = uslab_cache_alloc(made);
            CHECK(p != NULL, "alloc from the new cache");
            uslab_cache_free(made, p);
            uslab_cache_destroy(made);
        }
        if (pid > 0) {
            int status;
            CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
            CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x", status);
        }
    }
    /* Wait until the purger's flush is over (nothing in flight), then tear down. */
    watchdog(NULL);
    struct uslab_cache_stats st;
    for (;;) {
        uslab_cache_reap(lock_cache);
        st = stats_of(lock_cache);
        if (st.active_objects == 0 && st.cached_objects == 0)
            break;
        sleep_ms(1);
    }
    uslab_cache_destroy(lock_cache);
    uslab_cache_destroy(kick);
    fclose(devnull);
    CHECK(count_get(&dtor_errors) == 0, "%zu destructor runs on destructed objects",
          count_get(&dtor_errors));
    CHECK(count_get(&lock_ctors) == count_get(&lock_dtors), "%zu constructed, %zu destructed",
          count_get(&lock_ctors), count_get(&lock_dtors));
    printf("app_lock_purger %s: %d of %d rounds overlapped a purger destructor; %zu of %zu "
           "destructors ran on the purger\n",
           op, overlapped, LOCK_ROUNDS, count_get(&lock_on_purger), count_get(&lock_dtors));
    /* The purger waits up to WAIT_MS for each round: a run where it never reached a
     * destructor tested nothing (as when magazines grew and no magazine reached the depot). */
    CHECK(overlapped > 0, "app_lock_purger %s: no round overlapped a purger destructor", op);
}

/* ---- 5. uslab_cache_destroy while the purger flushes idle depot magazines ----------------- */

#define REAP_OBJS 1792 /* 7 magazines: 2 stay with the thread, 5 (1280 objects) go to the depot */

static int destroying;
static size_t reap_ctors, reap_dtors, reap_on_purger;

static void slow_dtor(void *p, void *arg)
{
    (void)arg;
    if (!dtor_check(p, "destroy_during_reap"))
        return;
    if (!on_main_thread()) {
        if (purger_handshake() || flag_get(&destroying))
            sleep_ms(1); /* slow: the flush of 1280 objects outlasts destroy's own work */
        count_add(&reap_on_purger, 1);
    }
    count_add(&reap_dtors, 1);
}

static void case_destroy_during_reap(void)
{
    need_env("USLAB_PURGE_DELAY", "20");
    static struct obj *objs[REAP_OBJS];
    uslab_cache_t *c =
        uslab_cache_create("obj", OBJ_SIZE, 0, counting_ctor, slow_dtor, NULL, &reap_ctors, 0);
    uslab_cache_t *kick =
        uslab_cache_create("kick", 1024, 0, NULL, NULL, NULL, NULL, USLAB_CACHE_NOMAGAZINE);
    CHECK(c && kick, "create");
    alloc_fill(c, objs, REAP_OBJS, 0);
    /* Armed first: the depot's first full magazine asks for a pass itself (design §4), so
     * the purger may reap the idle magazines before kick_purger below. */
    arm(1);
    check_free(c, objs, REAP_OBJS, 0);
    kick_purger(kick);
    /* The purger takes the idle magazines off the depot and starts destructing them. */
    int overlapped = wait_purger_dtor(1);
    flag_set(&destroying, 1);
    release(1);
    /* Every object was freed: destroy must wait for the purger's flush, not abort. */
    uslab_cache_destroy(c);
    size_t dtors = count_get(&reap_dtors);
    CHECK(count_get(&dtor_errors) == 0, "%zu destructor runs on destructed objects",
          count_get(&dtor_errors));
    CHECK(count_get(&reap_ctors) == REAP_OBJS && dtors == REAP_OBJS,
          "after destroy: %zu constructed, %zu destructed, %d expected", count_get(&reap_ctors),
          dtors, REAP_OBJS);
    uslab_cache_destroy(kick);
    printf("destroy_during_reap: %s; %zu of %d destructors ran on the purger\n",
           overlapped ? "destroy overlapped the purger's flush" : "the purger did not flush",
           count_get(&reap_on_purger), REAP_OBJS);
    CHECK(overlapped, "destroy_during_reap: the purger did not flush within %d ms", WAIT_MS);
}

/* ---- main ------------------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    main_thread = pthread_self();
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *name = argc > 1 ? argv[1] : "";
    char label[64];
    if (strcmp(name, "app_lock_purger") == 0) {
        snprintf(label, sizeof label, "%s %s", name, argc > 2 ? argv[2] : "");
        name = label;
        watchdog(name);
        case_app_lock_purger(argc > 2 ? argv[2] : NULL);
    } else if (strcmp(name, "dtor_frees_own") == 0) {
        watchdog(name);
        case_dtor_frees_own();
    } else if (strcmp(name, "dtor_frees_high_id") == 0) {
        watchdog(name);
        case_dtor_frees_high_id();
    } else if (strcmp(name, "stats_in_destroy") == 0) {
        watchdog(name);
        case_stats_in_destroy();
    } else if (strcmp(name, "destroy_during_reap") == 0) {
        watchdog(name);
        case_destroy_during_reap();
    } else {
        fprintf(stderr,
                "usage: %s dtor_frees_own | dtor_frees_high_id | stats_in_destroy | "
                "app_lock_purger create|reap|fork|stats | destroy_during_reap\n",
                argv[0]);
        return 2;
    }
    watchdog_off();
    printf("%s: %lu checks passed\nok\n", name, check_count);
    return 0;
}
