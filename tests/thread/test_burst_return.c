/* SPDX-License-Identifier: MIT */
/*
 * test_burst_return.c - memory goes back in the frees that made it idle, with no thread
 * and no later allocator call (issue 37; docs/design.md §3 and §4, "Shedding").
 *
 * A burst of 1,000,000 small blocks (16 to 256 bytes, each filled with a pattern) is
 * allocated, checked and freed in a shuffled order, by one thread (`single`) or by four
 * (`threads`: each frees blocks the others allocated, then waits on a barrier, alive, with
 * its magazines). Then the process makes no allocator call: RSS, read with raw system
 * calls, must fall to at most a quarter of its peak within 3 s. It falls at once (no thread
 * runs); the 3 s only leave room for a slow machine. Before issue 37 the depots kept every
 * magazine until a pass that no slow path came to run: RSS stayed at its peak.
 *
 * With uslab's purger thread (USLAB_PURGER=thread) there is no headroom: the thread gives
 * idle memory back after the delay, calls or not (design §3). `kept` (a delay of 60 s):
 * the freed burst stays resident and the same burst allocated again faults at most a
 * tenth as often as the first (the thesis' size benchmark: 0.97-1.16x mimalloc's time, not
 * 1.19-1.28x; docs/benchmarks.md, "Results", "Fresh pages made present in one call"); with the
 * headroom, the frees gave it back and the second burst faulted it all again. `idle` (a
 * delay of 200 ms): with no allocator call after the frees, RSS falls to a quarter of
 * its peak within 10 s, by the thread's passes. `clone` (a delay of 60 s): once the thread
 * runs, a child made by a raw clone (no fork handlers: the parent's thread is not its own)
 * frees a burst, and it goes back in the frees as without a thread.
 *
 * Under glibc (`*_glibc` runs, for comparison) the same program is not checked.
 */
#include "mt_common.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

/* A fifth under a sanitizer, where no memory bound is checked (mt_common.h). */
#define BLOCKS  (MT_SANITIZED ? 200000 : 1000000)
#define THREADS 4
#define MIB     ((size_t)1 << 20)

static void *blocks[BLOCKS];
static pthread_barrier_t allocated, freed, done;

static size_t block_size(size_t i)
{
    uint64_t s = i * 0x9e3779b97f4a7c15ull;
    return 16 + (size_t)((s >> 40) % 241);
}

/* Resident bytes from /proc/self/statm, with system calls only: no allocator call. */
static size_t rss_raw(void)
{
    char buf[128];
    int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    long n = syscall(SYS_read, fd, buf, sizeof(buf) - 1);
    syscall(SYS_close, fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    size_t pages = 0;
    const char *p = buf;
    while (*p && *p != ' ')
        p++;
    for (p++; *p >= '0' && *p <= '9'; p++)
        pages = pages * 10 + (size_t)(*p - '0');
    return pages * (size_t)sysconf(_SC_PAGESIZE);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    syscall(SYS_nanosleep, &ts, NULL);
}

static void alloc_range(size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) {
        size_t n = block_size(i);
        blocks[i] = MT_MALLOC(n);
        CHECK(blocks[i] != NULL, "malloc(%zu)", n);
        mt_fill(blocks[i], n, i);
    }
}

/* Frees the blocks of a stride through a shuffled order: every slab empties only near the
 * end, so the memory must come back from the frees themselves. */
static void free_range(size_t part, size_t parts)
{
    for (size_t k = part; k < BLOCKS; k += parts) {
        size_t i = (k * 7919) % BLOCKS; /* 7919 is prime, BLOCKS is not a multiple of it */
        CHECK(mt_check(blocks[i], block_size(i), i), "block %zu corrupted", i);
        MT_FREE(blocks[i]);
    }
}

static void *worker(void *arg)
{
    size_t t = (size_t)arg, per = BLOCKS / THREADS;
    alloc_range(t * per, (t + 1) * per);
    pthread_barrier_wait(&allocated);
    free_range((t + 1) % THREADS, THREADS); /* blocks the other threads allocated too */
    pthread_barrier_wait(&freed);
    pthread_barrier_wait(&done); /* alive, magazines and all, while main measures */
    return NULL;
}

static long minor_faults(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_minflt : 0;
}

/* `kept`: the burst freed with the purger thread and a long delay stays resident, and
 * allocating it again faults little. */
static void burst_kept(void)
{
    size_t base = rss_raw();
    long f0 = minor_faults();
    alloc_range(0, BLOCKS);
    long first = minor_faults() - f0;
    size_t peak = rss_raw();
    free_range(0, 1);
    size_t after = rss_raw();
    f0 = minor_faults();
    alloc_range(0, BLOCKS);
    long again = minor_faults() - f0;
    printf("kept: RSS base %zu KiB, peak %zu KiB, after the frees %zu KiB; faults %ld in the "
           "first burst, %ld in the second\n",
           base >> 10, peak >> 10, after >> 10, first, again);
    CHECK(MT_SANITIZED || peak >= base + 40 * MIB,
          "only %zu KiB resident over the start at the peak", (peak - base) >> 10);
    CHECK(MT_SANITIZED || after - base >= (peak - base) / 2,
          "%zu KiB resident after the frees: the burst went back (peak %zu KiB)", after >> 10,
          peak >> 10);
    CHECK(MT_SANITIZED || again <= first / 10, "the second burst faulted %ld times, the first %ld",
          again, first);
    CHECK(MT_SANITIZED || task_count() == 2, "%d threads: no purger thread", task_count());
    free_range(0, 1);
}

/* `clone`: the purger thread started by a small burst, then a child made without the fork
 * handlers runs `single`'s burst, which must go back in the frees. */
static int burst_in_raw_child(void)
{
    /* Slabs emptied within the headroom (no shedding, which a later burst taken back would
     * count as a cycle to keep): the kick that starts the thread. */
    alloc_range(0, BLOCKS / 50);
    for (size_t i = 0; i < BLOCKS / 50; i++)
        MT_FREE(blocks[i]);
    for (int waited = 0; task_count() < 2 && waited < MT_WAIT_MS(10000); waited += 10)
        sleep_ms(10);
    CHECK(MT_SANITIZED || task_count() == 2, "%d threads: the purger did not start", task_count());
    long pid = syscall(SYS_clone, (long)SIGCHLD, 0L, 0L, 0L, 0L);
    CHECK(pid >= 0, "clone");
    if (pid == 0)
        return 0; /* the child goes on as `single` */
    int st = 0;
    CHECK(waitpid((pid_t)pid, &st, 0) == (pid_t)pid, "waitpid");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child failed: status 0x%x", st);
    return 1;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "single";
    if (strcmp(mode, "kept") == 0) {
        burst_kept();
        TEST_DONE();
    }
    if (strcmp(mode, "clone") == 0 && burst_in_raw_child())
        TEST_DONE();
    int threads = strcmp(mode, "threads") == 0, glibc = argc > 2 && !strcmp(argv[2], "glibc");
    int idle = strcmp(mode, "idle") == 0; /* the purger thread's passes, 10 s at most */
    pthread_t tid[THREADS];
    size_t base = rss_raw(), peak;
    if (threads) {
        pthread_barrier_init(&allocated, NULL, THREADS + 1);
        pthread_barrier_init(&freed, NULL, THREADS + 1);
        pthread_barrier_init(&done, NULL, THREADS + 1);
        for (size_t t = 0; t < THREADS; t++)
            CHECK(pthread_create(&tid[t], NULL, worker, (void *)t) == 0, "pthread_create");
        pthread_barrier_wait(&allocated);
        peak = rss_raw();
        pthread_barrier_wait(&freed);
    } else {
        alloc_range(0, BLOCKS);
        peak = rss_raw();
        free_range(0, 1);
    }
    size_t now = rss_raw(), at_free = now;
    int waited = 0;
    while (now > peak / 4 && waited < MT_WAIT_MS(idle ? 10000 : 3000)) {
        sleep_ms(100);
        waited += 100;
        now = rss_raw();
    }
    printf("%s: RSS base %zu KiB, peak %zu KiB, after the frees %zu KiB, after %d ms %zu KiB "
           "(%.1f%% of the peak)\n",
           mode, base >> 10, peak >> 10, at_free >> 10, waited, now >> 10,
           100.0 * (double)now / (double)peak);
    CHECK(MT_SANITIZED || peak >= base + 40 * MIB,
          "only %zu KiB resident over the start at the peak", (peak - base) >> 10);
    CHECK(glibc || MT_SANITIZED || now <= peak / 4,
          "%zu KiB resident %d ms after the frees: more than a quarter of the peak %zu KiB",
          now >> 10, waited, peak >> 10);
    CHECK(glibc || MT_SANITIZED || task_count() == (threads ? THREADS + 1 : 1) + idle,
          "%d threads: uslab started one, or none in `idle`", task_count());
    if (threads) {
        pthread_barrier_wait(&done);
        for (size_t t = 0; t < THREADS; t++)
            pthread_join(tid[t], NULL);
    }
    TEST_DONE();
}
