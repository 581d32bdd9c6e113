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
 * where glibc alone keeps 2 MB). Modes (argv[1]):
 *  - `trim`: the threads stay alive, waiting; the main thread calls malloc_trim(0) once,
 *    and resident memory must be back within SLACK_MIB of where it was before the threads;
 *  - `idle`: the same, with no call: the purger thread's idle trim must give it back
 *    (the test polls the resident size, with no malloc in between, for up to 60 s);
 *  - `joined`: the threads free their blocks and exit, and are joined; then as `idle`
 *    (the purger thread must stay for the trim, although one thread is left).
 * Run under glibc alone too (`_glibc`), which trims each arena at its frees.
 * Resident sizes are read with open/read only: no malloc, so no slow path of the main
 * thread that could run a pass inline.
 */
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
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

static pthread_barrier_t freed, release;
static int stay;

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

static void *worker(void *arg)
{
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
        pthread_barrier_wait(&release);
    }
    return arg;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "trim";
    int trim = strcmp(mode, "trim") == 0, joined = strcmp(mode, "joined") == 0;
    if (!trim && !joined && strcmp(mode, "idle") != 0)
        FAIL("mode: trim, idle or joined");
    stay = !joined;
    pthread_barrier_init(&freed, NULL, THREADS + 1);
    pthread_barrier_init(&release, NULL, THREADS + 1);
    size_t base = resident();
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], NULL, worker, NULL) != 0)
            FAIL("pthread_create");
    if (joined)
        for (int i = 0; i < THREADS; i++)
            pthread_join(t[i], NULL);
    else
        pthread_barrier_wait(&freed);
    size_t after_frees = resident();
    size_t now = after_frees;
    if (trim) {
        int r = malloc_trim(0);
        now = resident();
        printf("malloc_trim(0) = %d\n", r);
    } else {
        for (int waited = 0; waited < 60000 && now > base + SLACK_MIB * MIB; waited += 100) {
            sleep_ms(100);
            now = resident();
        }
    }
    printf("%s: resident over the start %zu KiB after the frees, %zu KiB at the end\n", mode,
           after_frees > base ? (after_frees - base) >> 10 : 0,
           now > base ? (now - base) >> 10 : 0);
    if (now > base + SLACK_MIB * MIB)
        FAIL("%s: %zu MiB of freed large blocks still resident (%d threads freed %d MiB each)",
             mode, (now - base) / MIB, THREADS, PER_THREAD_MIB);
    if (!joined) {
        pthread_barrier_wait(&release);
        for (int i = 0; i < THREADS; i++)
            pthread_join(t[i], NULL);
    }
    printf("large arenas ok\n");
    return 0;
}
