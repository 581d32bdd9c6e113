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
 *  - `thread` (argv[1]): a second thread uses uslab and stays, so the purger thread runs
 *    the passes; the callback must run, on that thread;
 *  - `inline`: the process never has a thread, passes run on slow paths; after each growth
 *    it allocates 600 more objects of the cache (more than two magazines: slow paths); the
 *    callback must run, on this thread, inside one of those allocations, and the process
 *    must still have one thread.
 *  - `inline_nomag`: as `inline`, with a cache without magazines (USLAB_CACHE_NOMAGAZINE),
 *    whose every call takes the slab path with no thread cache; before session 16 those
 *    paths ran no inline pass, so the callback never came (design §12 said so);
 *  - `fork`: as `thread`, but first a fork child must get its callback, from the parent's
 *    watch carried over the fork (the child's own purger thread, which the pressure policy
 *    starts at its first kick, or its slow paths).
 * The inline modes run with USLAB_PURGER=inline (a pressure policy otherwise starts the
 * thread). Under USLAB_RETURN=delay (the test's environment says which) `thread` and
 * `inline` run for 3 s and the callback must not run.
 */
#include "mt_common.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/wait.h>
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
static unsigned long total = 1000; /* the PSI file's `some total` */

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
static void psi(unsigned long some_total)
{
    char text[200];
    int n = snprintf(text, sizeof text,
                     "some avg10=0.00 avg60=0.00 avg300=0.00 total=%lu\n"
                     "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
                     some_total);
    /* Written aside and renamed: a reading between a truncation and the write would find
     * no PSI file and drop the source for good. */
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.new", source);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CHECK(fd >= 0, "cannot write %s: %s", tmp, strerror(errno));
    CHECK(write(fd, text, (size_t)n) == n, "write %s", tmp);
    close(fd);
    CHECK(rename(tmp, source) == 0, "rename %s: %s", tmp, strerror(errno));
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

/* Grows the stall time until the callback has run (at most `rounds` steps), allocating
 * between steps when `slow` (slow paths of this thread); returns the callbacks seen. */
static int pressure_until_reclaim(uslab_cache_t *c, int rounds, int slow, int *steps)
{
    int round = 0;
    for (; round < rounds && __atomic_load_n(&reclaims, __ATOMIC_ACQUIRE) == 0; round++) {
        total += 50000; /* 50 ms more stall */
        psi(total);
        sleep_ms(STEP_MS);
        if (slow)
            alloc_more(c, MORE);
    }
    *steps = round;
    return __atomic_load_n(&reclaims, __ATOMIC_ACQUIRE);
}

/* The callback ran on this thread, inside one of its uslab_cache_alloc calls, and the
 * process still has one thread: an inline pass saw the pressure. */
static void check_inline(const char *mode)
{
    long on = __atomic_load_n(&reclaim_tid, __ATOMIC_RELAXED);
    CHECK(on == tid(), "%s: the callback ran on thread %ld, not this one", mode, on);
    CHECK(__atomic_load_n(&reclaim_in_alloc, __ATOMIC_RELAXED),
          "%s: the callback ran outside uslab_cache_alloc", mode);
    CHECK(threads() == 1, "%s: the process has %ld threads", mode, threads());
}

/* fork: the parent's purger thread watches; the thread did not survive the fork, and the
 * child must watch all the same (design §3). */
static void fork_child(uslab_cache_t *c)
{
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        __atomic_store_n(&reclaims, 0, __ATOMIC_RELAXED);
        int steps, n = pressure_until_reclaim(c, ROUNDS, 1, &steps);
        printf("fork child: %d reclaim callback(s) after %d growth(s)\n", n, steps);
        CHECK(n > 0, "fork child: no reclaim callback %d s after the pressure began",
              ROUNDS * STEP_MS / 1000);
        fflush(stdout);
        _exit(0);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "fork child failed (status %#x)", status);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "thread";
    int nomag = strcmp(mode, "inline_nomag") == 0;
    int inline_mode = strcmp(mode, "inline") == 0 || nomag;
    int fork_mode = strcmp(mode, "fork") == 0;
    CHECK(inline_mode || fork_mode || strcmp(mode, "thread") == 0,
          "mode: thread, inline, inline_nomag or fork");
    source = getenv("USLAB_PRESSURE_SOURCE");
    CHECK(source && *source, "USLAB_PRESSURE_SOURCE must be set by the test");
    const char *policy = getenv("USLAB_RETURN");
    int expect = !(policy && strcmp(policy, "delay") == 0);
    CHECK(expect || !fork_mode, "%s: not under USLAB_RETURN=delay", mode);
    psi(total);

    /* A second thread that uses uslab (the purger thread is the policy's, design §3). */
    if (!inline_mode)
        CHECK(mt_park_thread(), "thread");
    uslab_cache_t *c = uslab_cache_create("watched", OBJ, 0, NULL, NULL, reclaim, NULL,
                                          nomag ? USLAB_CACHE_NOMAGAZINE : 0);
    CHECK(c != NULL, "create");
    alloc_more(c, KEPT);
    CHECK(__atomic_load_n(&reclaims, __ATOMIC_ACQUIRE) == 0, "reclaim callback before pressure");

    if (fork_mode)
        fork_child(c);
    int steps, n = pressure_until_reclaim(c, expect ? ROUNDS : 3000 / STEP_MS, inline_mode, &steps);
    printf("%s, USLAB_RETURN=%s: %d reclaim callback(s) after %d growth(s) of the stall "
           "time; %zu objects in use\n",
           mode, policy ? policy : "(unset)", n, steps, nobjs);
    if (!expect) {
        CHECK(n == 0, "USLAB_RETURN=delay: the reclaim callback ran on pressure");
    } else {
        CHECK(n > 0, "%s: no reclaim callback %d s after the pressure began", mode,
              ROUNDS * STEP_MS / 1000);
        if (inline_mode)
            check_inline(mode);
        else
            CHECK(__atomic_load_n(&reclaim_tid, __ATOMIC_RELAXED) != tid(),
                  "%s: the callback ran on this thread, not the purger", mode);
    }
    if (inline_mode && !expect)
        CHECK(threads() == 1, "inline: the process has %ld threads", threads());

    for (size_t i = 0; i < nobjs; i++)
        uslab_cache_free(c, objs[i]);
    uslab_cache_destroy(c);
    TEST_DONE();
}
