/* SPDX-License-Identifier: MIT */
/*
 * test_purge.c - idle memory goes back to the system without further allocator activity
 * (docs/design.md §3, §4): fill a cache and malloc classes with 64 MiB each, free it all,
 * then make no allocator call at all and watch resident memory fall within a few purge
 * delays (the purger flushes the unused depot magazines, then purges the idle slabs).
 * Also: while memory is reused quickly, nothing is purged (no refault churn).
 *
 * Only with USLAB_PURGER=thread (the test sets it; design §3): by default this program
 * starts a thread that allocates and then waits (mt_park_thread); with the argument
 * `always` it stays single-threaded. Either way the purger thread must then exist (the
 * process has three or two threads).
 */
#include "mt_common.h"

#include <dirent.h>
#include <pthread.h>
#include <time.h>

#define OBJ   1024
#define COUNT (64 * 1024)

static void *objs[COUNT];

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Threads of this process, from /proc/self/task. */
int main(int argc, char **argv)
{
    /* USLAB_PURGE_DELAY (200 ms here) and USLAB_PURGER are read when the library loads:
     * the test sets them (tests/thread/CMakeLists.txt). */
    int always = argc > 1 && strcmp(argv[1], "always") == 0;
    if (!always) {
        CHECK(mt_park_thread(), "pthread_create");
    }
    uslab_cache_t *c = uslab_cache_create("purge", OBJ, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(c != NULL, "create");
    size_t base = mt_rss();
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < COUNT; i++) {
            objs[i] = uslab_cache_alloc(c);
            CHECK(objs[i] != NULL, "alloc");
            mt_fill(objs[i], OBJ, (uint64_t)i);
        }
        size_t full = mt_rss();
        CHECK(full - base >= (size_t)COUNT * OBJ, "resident memory %zu KiB below the payload",
              (full - base) >> 10);
        for (int i = 0; i < COUNT; i++) {
            CHECK(mt_check(objs[i], OBJ, (uint64_t)i), "object %d corrupted", i);
            uslab_cache_free(c, objs[i]);
        }
        /* The same for malloc blocks. */
        for (int i = 0; i < COUNT; i++) {
            objs[i] = MT_MALLOC(OBJ);
            CHECK(objs[i] != NULL, "malloc");
            memset(objs[i], 0x5a, OBJ);
        }
        for (int i = 0; i < COUNT; i++)
            MT_FREE(objs[i]);
        size_t freed = mt_rss();
        CHECK(MT_SANITIZED || task_count() == (always ? 2 : 3),
              "round %d: %d threads: the purger should run", round, task_count());
        /* No allocator call from here on: only the purger can give memory back. */
        size_t now = freed;
        for (int waited = 0; waited < MT_WAIT_MS(5000) && now > base + ((size_t)8 << 20);
             waited += 100) {
            sleep_ms(100);
            now = mt_rss();
        }
        printf("round %d: payload %d MiB x2, resident over baseline: full %zu KiB, freed %zu "
               "KiB, after idling %zu KiB\n",
               round, (COUNT * OBJ) >> 20, (full - base) >> 10, (freed - base) >> 10,
               (now - base) >> 10);
        CHECK(MT_SANITIZED || now <= base + ((size_t)8 << 20),
              "round %d: %zu KiB still resident over baseline after idling", round,
              (now - base) >> 10);
    }
    uslab_cache_destroy(c);
    TEST_DONE();
}
