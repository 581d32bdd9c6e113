/* SPDX-License-Identifier: MIT */
/*
 * test_pressure_reclaim.c - memory pressure reaches an object cache's reclaim callback
 * when nothing is idle (USLAB_RETURN, design §3, issue 13). Before, pressure was read only
 * while a purge was pending, so a program whose memory was all in use never had its
 * reclaim callback called, whatever the kernel reported.
 *
 * The pressure is simulated: USLAB_PRESSURE_SOURCE names a PSI-format file this program
 * writes (without allocating). A cache with a reclaim callback is created and 4096 of its
 * objects are allocated and kept: nothing is empty or idle, no purge is pending. Then the
 * file's `some total` grows by 50 ms every 50 ms (so that the first reading, which only
 * takes the level, comes before a growth whenever it happens), and the test waits for the
 * callback, polling, for up to 30 s (no timing threshold):
 *  - `thread` (argv[1]): the process has had a thread, so the purger thread runs the
 *    passes; the callback must run, on that thread;
 *  - `inline`: the process never has a thread, passes run on slow paths; after each growth
 *    it allocates 600 more objects of the cache (more than two magazines: slow paths); the
 *    callback must run, on this thread, inside one of those allocations, and the process
 *    must still have one thread.
 * Under USLAB_RETURN=delay (the test's environment says which) the same runs for 3 s and
 * the callback must not run.
 */
#include "mt_common.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>

#define OBJ     64
#define KEPT    4096
#define MORE    600
#define STEP_MS 50
#define ROUNDS  600 /* 30 s of steps, at most */

static void *objs[KEPT + ROUNDS * MORE];
static size_t nobjs;
static int reclaims;
static long reclaim_tid;
static int in_alloc;
static int reclaim_in_alloc;
static const char *source;

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static long tid(void)
{
    return (long)syscall(SYS_gettid);
}

/* Writes the PSI file with `some total` = total; open, write and close only. */
static void psi(unsigned long total)
{
    char text[200];
    int n = snprintf(text, sizeof text,
                     "some avg10=0.00 avg60=0.00 avg300=0.00 total=%lu\n"
                     "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
                     total);
    int fd = open(source, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CHECK(fd >= 0, "cannot write %s: %s", source, strerror(errno));
    CHECK(write(fd, text, (size_t)n) == n, "write %s", source);
    close(fd);
}

static void reclaim(void *arg)
{
    (void)arg;
    __atomic_store_n(&reclaim_tid, tid(), __ATOMIC_RELAXED);
    __atomic_store_n(&reclaim_in_alloc, __atomic_load_n(&in_alloc, __ATOMIC_RELAXED),
                     __ATOMIC_RELAXED);
    __atomic_fetch_add(&reclaims, 1, __ATOMIC_RELEASE);
}

static void alloc_more(uslab_cache_t *c, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        __atomic_store_n(&in_alloc, 1, __ATOMIC_RELAXED);
        void *p = uslab_cache_alloc(c);
        __atomic_store_n(&in_alloc, 0, __ATOMIC_RELAXED);
        CHECK(p != NULL, "alloc");
        memset(p, 0x5a, OBJ);
        objs[nobjs++] = p;
    }
}

/* Threads: line of /proc/self/status. */
static long threads(void)
{
    char line[256];
    long n = -1;
    FILE *f = fopen("/proc/self/status", "r");
    CHECK(f != NULL, "/proc/self/status");
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "Threads:", 8) == 0)
            n = strtol(line + 8, NULL, 10);
    fclose(f);
    return n;
}

static void *nothing(void *arg)
{
    return arg;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "thread";
    int inline_mode = strcmp(mode, "inline") == 0;
    CHECK(inline_mode || strcmp(mode, "thread") == 0, "mode: thread or inline");
    source = getenv("USLAB_PRESSURE_SOURCE");
    CHECK(source && *source, "USLAB_PRESSURE_SOURCE must be set by the test");
    const char *policy = getenv("USLAB_RETURN");
    int expect = !(policy && strcmp(policy, "delay") == 0);
    unsigned long total = 1000;
    psi(total);

    if (!inline_mode) {
        pthread_t t;
        CHECK(pthread_create(&t, NULL, nothing, NULL) == 0 && pthread_join(t, NULL) == 0, "thread");
    }
    uslab_cache_t *c = uslab_cache_create("watched", OBJ, 0, NULL, NULL, reclaim, NULL, 0);
    CHECK(c != NULL, "create");
    alloc_more(c, KEPT);
    CHECK(__atomic_load_n(&reclaims, __ATOMIC_ACQUIRE) == 0, "reclaim callback before pressure");

    int rounds = expect ? ROUNDS : 3000 / STEP_MS, round = 0;
    for (; round < rounds && __atomic_load_n(&reclaims, __ATOMIC_ACQUIRE) == 0; round++) {
        total += 50000; /* 50 ms more stall */
        psi(total);
        sleep_ms(STEP_MS);
        if (inline_mode)
            alloc_more(c, MORE);
    }
    int n = __atomic_load_n(&reclaims, __ATOMIC_ACQUIRE);
    printf("%s, USLAB_RETURN=%s: %d reclaim callback(s) after %d growth(s) of the stall "
           "time; %zu objects in use\n",
           mode, policy ? policy : "(unset)", n, round, nobjs);
    if (!expect) {
        CHECK(n == 0, "USLAB_RETURN=delay: the reclaim callback ran on pressure");
    } else {
        CHECK(n > 0, "%s: no reclaim callback %d s after the pressure began", mode,
              ROUNDS * STEP_MS / 1000);
        long on = __atomic_load_n(&reclaim_tid, __ATOMIC_RELAXED);
        if (inline_mode) {
            CHECK(on == tid(), "inline: the callback ran on thread %ld, not this one", on);
            CHECK(__atomic_load_n(&reclaim_in_alloc, __ATOMIC_RELAXED),
                  "inline: the callback ran outside uslab_cache_alloc");
        } else {
            CHECK(on != tid(), "thread: the callback ran on this thread, not the purger");
        }
    }
    if (inline_mode)
        CHECK(threads() == 1, "inline: the process has %ld threads", threads());

    for (size_t i = 0; i < nobjs; i++)
        uslab_cache_free(c, objs[i]);
    uslab_cache_destroy(c);
    TEST_DONE();
}
