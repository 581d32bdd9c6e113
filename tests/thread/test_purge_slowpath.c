/* SPDX-License-Identifier: MIT */
/*
 * test_purge_slowpath.c - without a purger thread, memory still goes back: on the slow
 * paths, once the purge delay has passed (docs/design.md §3, issue 15).
 *
 * Modes (argv[1]):
 *  - `auto`: a program that never starts a thread (USLAB_PURGER=inline) gets no purger thread;
 *  - `never`: a program that started (and joined) a thread, with USLAB_PURGER=inline;
 *  - `joined`: a program that started a thread that allocated and freed a burst while the
 *    main thread had used uslab too, then joined it: no purger thread ever runs by default
 *    (issue 37), so the program has one thread again right after the join (before, a purger
 *    thread ran while two threads used uslab, and left a delay after; before that it stayed
 *    for good: Python 3.12's os.fork() warned that the process was multi-threaded).
 * Both fill a cache and malloc classes with 64 MiB each and free it all (the frees give back
 * what is beyond the 8 MiB headroom themselves, design §3); the process must still have
 * one thread; idling gives nothing more back (no thread does it); then a little allocator
 * activity (slow paths) gives the rest back once the delay has passed. The
 * objects of a cache with a destructor stay in its depot (an inline pass runs no user
 * code), and come back by uslab_reap.
 */
#include "mt_common.h"

#include <dirent.h>
#include <pthread.h>
#include <time.h>

#define OBJ   1024
#define COUNT (64 * 1024)
#define MIB   ((size_t)1 << 20)

static void *objs[COUNT];
static int destructed;

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void *nothing(void *arg)
{
    return arg;
}

/* joined: frees a burst of malloc blocks (a kick with two threads using uslab): no purger
 * thread is started for it. */
static void *burst(void *arg)
{
    enum { N = 16384 };
    static void *p[N];
    for (int i = 0; i < N; i++)
        p[i] = MT_MALLOC(512);
    for (int i = 0; i < N; i++)
        MT_FREE(p[i]);
    sleep_ms(300); /* past the purge delay: an inline pass, not a thread */
    CHECK(MT_SANITIZED || task_count() == 2, "%d threads: a purger thread was started",
          task_count());
    return arg;
}

static void dtor(void *obj, void *arg)
{
    (void)obj;
    (void)arg;
    __atomic_fetch_add(&destructed, 1, __ATOMIC_RELAXED);
}

/* Slow paths: batches larger than a magazine, of two sizes, allocated and freed. */
static void activity(void)
{
    void *p[600];
    for (size_t n = 0; n < 600; n++)
        p[n] = MT_MALLOC(n % 2 ? 48 : 1024);
    for (size_t n = 0; n < 600; n++)
        MT_FREE(p[n]);
}

int main(int argc, char **argv)
{
    /* USLAB_PURGE_DELAY (200 ms) and USLAB_PURGER (mode) are read when the library loads:
     * the test sets them (tests/thread/CMakeLists.txt). */
    const char *mode = argc > 1 ? argv[1] : "auto";
    int joined = strcmp(mode, "joined") == 0;
    if (joined) {
        pthread_t t;
        void *volatile p = MT_MALLOC(64); /* this thread uses uslab too */
        MT_FREE(p);
        CHECK(pthread_create(&t, NULL, burst, NULL) == 0, "pthread_create");
        CHECK(pthread_join(t, NULL) == 0, "pthread_join");
        CHECK(MT_SANITIZED || task_count() == 1, "%d threads after the join: uslab's own",
              task_count());
    } else if (strcmp(mode, "never") == 0) {
        pthread_t t;
        CHECK(pthread_create(&t, NULL, nothing, NULL) == 0, "pthread_create");
        CHECK(pthread_join(t, NULL) == 0, "pthread_join");
    }
    uslab_cache_t *c = uslab_cache_create("plain", OBJ, 0, NULL, NULL, NULL, NULL, 0);
    uslab_cache_t *d = uslab_cache_create("with-dtor", 64, 0, NULL, dtor, NULL, NULL, 0);
    CHECK(c != NULL && d != NULL, "create");
    /* What earlier phases left (joined: the burst, which a loaded machine's purger may not
     * have given back before it left) goes now, not during the fill below, where an
     * inline pass would lower the resident memory the fill is measured against. */
    uslab_reap();
    size_t base = mt_rss(), full;
    for (int i = 0; i < COUNT; i++) {
        objs[i] = uslab_cache_alloc(c);
        CHECK(objs[i] != NULL, "alloc");
        mt_fill(objs[i], OBJ, (uint64_t)i);
    }
    full = mt_rss();
    for (int i = 0; i < COUNT; i++) {
        CHECK(mt_check(objs[i], OBJ, (uint64_t)i), "object %d corrupted", i);
        uslab_cache_free(c, objs[i]);
    }
    for (int i = 0; i < COUNT; i++) {
        objs[i] = MT_MALLOC(OBJ);
        CHECK(objs[i] != NULL, "malloc");
        memset(objs[i], 0x5a, OBJ);
    }
    if (mt_rss() > full)
        full = mt_rss(); /* the peak: on a slow machine the cache's part may be gone */
    for (int i = 0; i < COUNT; i++)
        MT_FREE(objs[i]);
    /* Objects with a destructor, freed into their depot: beyond the depot's bound, the
     * surplus is destructed at once; what the depot holds stays constructed. */
    for (int i = 0; i < 4096; i++)
        objs[i] = uslab_cache_alloc(d);
    /* Objects a magazine took from the slabs but nobody allocated are cached too (a
     * thread's magazines start small and double, design §4): they are destructed as well. */
    struct uslab_cache_stats dst;
    uslab_cache_stats(d, &dst);
    int left_out = (int)dst.cached_objects;
    for (int i = 0; i < 4096; i++)
        uslab_cache_free(d, objs[i]);
    int destructed_before = __atomic_load_n(&destructed, __ATOMIC_RELAXED);
    size_t freed = mt_rss();
    CHECK(MT_SANITIZED || task_count() == 1, "%d threads: no purger thread expected here",
          task_count());
    CHECK(full >= base + 60 * MIB, "only %zu KiB resident over the baseline when full",
          (full - base) >> 10);

    /* No allocator call for longer than the delay: nothing goes back (a thread would have
     * given back what the frees left; on a slow machine, slow paths during the frees may
     * already have given back part of it, which is right too). */
    sleep_ms(500);
    size_t idle = mt_rss(); /* before task_count(), whose opendir allocates: a slow path */
    CHECK(MT_SANITIZED || task_count() == 1, "%d threads after idling: no purger thread expected",
          task_count());
    CHECK(idle + MIB >= freed, "%zu KiB went back without a thread or a slow path",
          (freed - idle) >> 10);

    /* Slow paths give it back: the first pass flushes the idle depots into the slabs; the
     * slabs they empty go once idle for the delay too. */
    size_t now = idle;
    for (int waited = 0; waited < MT_WAIT_MS(10000) && now > base + 8 * MIB; waited += 50) {
        sleep_ms(50);
        activity();
        now = mt_rss();
    }
    printf("%s: resident over baseline: full %zu KiB, freed %zu KiB, idle %zu KiB, after slow "
           "paths %zu KiB\n",
           mode, (full - base) >> 10, (freed - base) >> 10, (idle - base) >> 10,
           (now - base) >> 10);
    CHECK(MT_SANITIZED || now <= base + 8 * MIB,
          "%zu KiB still resident over the baseline after slow paths", (now - base) >> 10);
    CHECK(MT_SANITIZED || task_count() == 1, "a thread was started");
    CHECK(__atomic_load_n(&destructed, __ATOMIC_RELAXED) == destructed_before,
          "an inline pass ran %d destructors",
          __atomic_load_n(&destructed, __ATOMIC_RELAXED) - destructed_before);
    uslab_reap();
    CHECK(__atomic_load_n(&destructed, __ATOMIC_RELAXED) == 4096 + left_out,
          "%d of 4096 + %d destructed", __atomic_load_n(&destructed, __ATOMIC_RELAXED), left_out);
    uslab_cache_destroy(d);
    uslab_cache_destroy(c);
    TEST_DONE();
}
