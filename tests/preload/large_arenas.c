/* SPDX-License-Identifier: MIT */
/*
 * large_arenas.c - large blocks freed in glibc's thread arenas go back to the system
 * (design §8, "Sentinels of the thread arenas"; session 16's audit). Under the preload
 * library glibc holds only blocks above the slab range, and uslab raises its trim
 * threshold to 64 MiB so that a working set of large blocks is not trimmed and faulted
 * back at every turn. A thread's free then never shrinks its arena's heap, and glibc's
 * malloc_trim shrinks only the main arena's top: THREADS threads that each allocated,
 * wrote and freed PER_THREAD_MIB in blocks of 100 KB kept all of it resident for good,
 * after uslab's idle trim and after the program's own malloc_trim(0) (8 threads: 314 MB,
 * where glibc alone keeps 2 MB). The tests run it with USLAB_MAX_SLAB_SIZE=32768, and
 * `idle` and `shrunk` also with the default, where the 100 KB blocks are uslab's medium
 * blocks: threads that freed them into their depots and idle must see them go back too
 * (the purger thread's start, put off inside the frees, was lost). Modes (argv[1]):
 *  - `trim`: the threads stay alive, waiting; the main thread calls malloc_trim(0) once,
 *    and resident memory must be back within SLACK_MIB of where it was before the threads;
 *  - `idle`: the same, with no call: the purger thread's idle trim must give it back
 *    (the test polls the resident size, with no malloc in between, for up to 60 s; run
 *    with USLAB_PURGER=thread: without it, nothing runs while every thread idles);
 *  - `joined`: the threads free their blocks and exit, and are joined; then as `idle`,
 *    with no purger thread: each thread's exit gives back what it freed (issue 37).
 *  - `shrunk` (session 17's memory-return audit): as `idle` until the frees are given
 *    back; then each thread grows BUILDERS blocks to 1 MiB by realloc, in turn in 64 KiB
 *    steps, shrinks each to 100 bytes and keeps it: the idle trim must give back the
 *    shrunk blocks' tails (a realloc scheduled none: they stayed resident for good);
 *  - `small`: THREADS threads each allocate PER_THREAD_MIB in blocks of 1 to 2 KiB, free
 *    them and exit, and are joined: their exits must give the slabs back (4 threads of
 *    50 MB once kept 209 MB, glibc 8);
 *  - `serial`: the same threads one after another, each joined before the next starts,
 *    and the main thread never calls malloc.
 * Run under glibc alone too (`_glibc`), which trims each arena at its frees.
 * Resident sizes are read with open/read only: no malloc, so no slow path of the main
 * thread that could run a pass inline.
 */
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define THREADS        4
#define PER_THREAD_MIB 20
#define BLOCK          (100 * 1024)
#define BLOCKS         (PER_THREAD_MIB * 1024 * 1024 / BLOCK)
#define SLACK_MIB      12 /* under one thread's share */
#define MIB            ((size_t)1 << 20)

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "large_arenas: " __VA_ARGS__);                                             \
        fputc('\n', stderr);                                                                       \
        exit(1);                                                                                   \
    } while (0)

#define BUILDERS 20

static pthread_barrier_t freed, release, regrown;
static int stay, shrink, small;
static char *builders[8][BUILDERS];

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static size_t resident(void)
{
    char text[128];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0)
        return 0;
    text[n] = 0;
    const char *p = strchr(text, ' ');
    return p ? (size_t)strtoul(p + 1, NULL, 10) * (size_t)sysconf(_SC_PAGESIZE) : 0;
}

/* Small blocks: PER_THREAD_MIB in blocks of 1 to 2 KiB (many classes), freed. */
static void small_blocks(void)
{
    size_t n = PER_THREAD_MIB * MIB / 1536;
    unsigned char **blocks = malloc(n * sizeof *blocks);
    if (!blocks)
        FAIL("malloc");
    for (size_t i = 0; i < n; i++) {
        size_t size = 1024 + (i * 37) % 1024;
        blocks[i] = malloc(size);
        if (!blocks[i])
            FAIL("malloc");
        memset(blocks[i], (int)i, size);
    }
    for (size_t i = 0; i < n; i++) {
        if (blocks[i][0] != (unsigned char)i)
            FAIL("block %zu changed", i);
        free(blocks[i]);
    }
    free(blocks);
}

/* BUILDERS blocks grown to 1 MiB by realloc, in turn (so that each one's old place is a
 * hole between the others), then shrunk to 100 bytes and kept: their tails are holes in
 * glibc's heap that only a trim gives back. */
static void grow_and_shrink(char **mine)
{
    for (int b = 0; b < BUILDERS; b++)
        mine[b] = NULL;
    for (size_t size = 64 << 10; size <= MIB; size += 64 << 10)
        for (int b = 0; b < BUILDERS; b++) {
            mine[b] = realloc(mine[b], size);
            if (!mine[b])
                FAIL("realloc");
            memset(mine[b] + size - (64 << 10), b, 64 << 10);
        }
    for (int b = 0; b < BUILDERS; b++) {
        if (mine[b][0] != (char)b || mine[b][MIB - 1] != (char)b)
            FAIL("builder %d changed", b);
        mine[b] = realloc(mine[b], 100);
        if (!mine[b] || mine[b][99] != (char)b)
            FAIL("shrink");
    }
}

static void *worker(void *arg)
{
    if (small) {
        small_blocks();
        return arg;
    }
    unsigned char *blocks[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) {
        blocks[i] = malloc(BLOCK);
        if (!blocks[i])
            FAIL("malloc");
        memset(blocks[i], i, BLOCK);
    }
    for (int i = 0; i < BLOCKS; i++) {
        if (blocks[i][0] != (unsigned char)i || blocks[i][BLOCK - 1] != (unsigned char)i)
            FAIL("block %d changed", i);
        free(blocks[i]);
    }
    if (stay) {
        pthread_barrier_wait(&freed);
        if (shrink) {
            pthread_barrier_wait(&regrown); /* the frees are back: now the builders */
            grow_and_shrink(builders[(intptr_t)arg]);
            pthread_barrier_wait(&freed);
        }
        pthread_barrier_wait(&release);
        if (shrink)
            for (int b = 0; b < BUILDERS; b++)
                free(builders[(intptr_t)arg][b]);
    }
    return arg;
}

/* Polls the resident size, with no malloc, until it is within SLACK_MIB of base or 60 s
 * have passed; returns it. */
static size_t wait_for_return(size_t base)
{
    size_t now = resident();
    for (int waited = 0; waited < 60000 && now > base + SLACK_MIB * MIB; waited += 100) {
        sleep_ms(100);
        now = resident();
    }
    return now;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "trim";
    int trim = strcmp(mode, "trim") == 0;
    shrink = strcmp(mode, "shrunk") == 0;
    int serial = strcmp(mode, "serial") == 0;
    small = strcmp(mode, "small") == 0 || serial;
    int joined = strcmp(mode, "joined") == 0 || small;
    if (!trim && !joined && !shrink && strcmp(mode, "idle") != 0)
        FAIL("mode: trim, idle, joined, shrunk, small or serial");
    stay = !joined;
    pthread_barrier_init(&freed, NULL, THREADS + 1);
    pthread_barrier_init(&release, NULL, THREADS + 1);
    pthread_barrier_init(&regrown, NULL, THREADS + 1);
    size_t base = resident();
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        if (pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) != 0)
            FAIL("pthread_create");
        if (serial)
            pthread_join(t[i], NULL);
    }
    if (!joined)
        pthread_barrier_wait(&freed);
    else if (!serial)
        for (int i = 0; i < THREADS; i++)
            pthread_join(t[i], NULL);
    size_t after_frees = resident();
    size_t now = after_frees;
    if (trim) {
        int r = malloc_trim(0);
        now = resident();
        printf("malloc_trim(0) = %d\n", r);
    } else {
        now = wait_for_return(base);
    }
    if (shrink) {
        if (now > base + SLACK_MIB * MIB)
            FAIL("shrunk: the frees before the builders were not given back");
        pthread_barrier_wait(&regrown);
        pthread_barrier_wait(&freed); /* grown and shrunk */
        after_frees = resident();
        now = wait_for_return(base);
    }
    printf("%s: resident over the start %zu KiB after the frees, %zu KiB at the end\n", mode,
           after_frees > base ? (after_frees - base) >> 10 : 0,
           now > base ? (now - base) >> 10 : 0);
    if (now > base + SLACK_MIB * MIB)
        FAIL("%s: %zu MiB that the threads freed still resident (%d threads, %d MiB each)", mode,
             (now - base) / MIB, THREADS, PER_THREAD_MIB);
    if (!joined) {
        pthread_barrier_wait(&release);
        for (int i = 0; i < THREADS; i++)
            pthread_join(t[i], NULL);
    }
    printf("large arenas ok\n");
    return 0;
}
