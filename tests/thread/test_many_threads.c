/* SPDX-License-Identifier: MIT */
/*
 * test_many_threads.c - threads that come after USLAB_TCACHE_MAX is reached still work on
 * magazines (floor magazines, docs/design.md §5), not on the slab layer's lock. Run under
 * libuslab-preload.so (a test build: each thread counts the locks it takes, read with
 * uslab_locks_taken) with a small bound: 200 threads allocate and free blocks of 8 sizes up
 * to 30000 bytes; once all are past their first slow paths, the steady phase must take
 * (almost) no lock: fewer than 0.05 per malloc+free (it was 1.1 before floor magazines). The bound
 * must really have been reached (statistics), or the test proves nothing.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 200
#define ITERS   1000
#define NSIZES  8

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "many_threads: " __VA_ARGS__);                                             \
        fprintf(stderr, "\n");                                                                     \
        exit(1);                                                                                   \
    } while (0)

static const size_t sizes[NSIZES] = {24, 100, 500, 3000, 9000, 14000, 20000, 30000};
static pthread_barrier_t warm, done, leave;
static unsigned long (*locks_taken)(void);
static unsigned long steady_locks; /* atomic: the workers' locks in their steady phase */

static void *worker(void *arg)
{
    unsigned char tag = (unsigned char)(uintptr_t)arg;
    void *p[NSIZES];
    for (int i = 0; i < 2; i++) { /* first slow paths: thread cache, first magazines */
        for (int k = 0; k < NSIZES; k++)
            p[k] = malloc(sizes[k]);
        for (int k = 0; k < NSIZES; k++)
            free(p[k]);
    }
    pthread_barrier_wait(&warm);
    unsigned long before = locks_taken();
    for (int i = 0; i < ITERS; i++) {
        for (int k = 0; k < NSIZES; k++) {
            if (!(p[k] = malloc(sizes[k])))
                FAIL("malloc(%zu)", sizes[k]);
            memset(p[k], tag, 16);
        }
        for (int k = 0; k < NSIZES; k++) {
            for (int j = 0; j < 16; j++)
                if (((unsigned char *)p[k])[j] != tag)
                    FAIL("block of %zu bytes changed", sizes[k]);
            free(p[k]);
        }
    }
    __atomic_fetch_add(&steady_locks, locks_taken() - before, __ATOMIC_RELAXED);
    pthread_barrier_wait(&done);
    pthread_barrier_wait(&leave);
    return NULL;
}

/* thread_cache_bytes > thread_cache_max in uslab's JSON statistics. */
static int bound_reached(void)
{
    int (*print)(FILE *, int) = (int (*)(FILE *, int))dlsym(RTLD_DEFAULT, "uslab_stats_print");
    if (!print)
        FAIL("not running under libuslab-preload.so");
    static char buf[1 << 18];
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    if (!f || print(f, 1) != 0)
        FAIL("uslab_stats_print");
    fclose(f);
    const char *a = strstr(buf, "\"thread_cache_bytes\":");
    const char *b = strstr(buf, "\"thread_cache_max\":");
    if (!a || !b)
        FAIL("statistics without thread-cache figures");
    unsigned long long held = strtoull(a + 21, NULL, 10), max = strtoull(b + 19, NULL, 10);
    printf("thread caches hold %llu KiB, bound %llu KiB\n", held >> 10, max >> 10);
    return held > max;
}

int main(void)
{
    locks_taken = (unsigned long (*)(void))dlsym(RTLD_DEFAULT, "uslab_locks_taken");
    if (!locks_taken)
        FAIL("not running under a test build of libuslab-preload.so");
    pthread_barrier_init(&warm, NULL, THREADS + 1);
    pthread_barrier_init(&done, NULL, THREADS + 1);
    pthread_barrier_init(&leave, NULL, THREADS + 1);
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++)
        if (pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)i) != 0)
            FAIL("pthread_create");
    pthread_barrier_wait(&warm);
    pthread_barrier_wait(&done);
    double per = (double)__atomic_load_n(&steady_locks, __ATOMIC_RELAXED) /
                 ((double)THREADS * ITERS * NSIZES);
    printf("%d threads: %.4f locks per malloc+free\n", THREADS, per);
    int reached = bound_reached();
    pthread_barrier_wait(&leave);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    if (!reached)
        FAIL("the thread-cache bound was not reached: the test proves nothing");
    if (per >= 0.05)
        FAIL("%.4f locks per malloc+free past the bound (want < 0.05)", per);
    printf("many_threads: ok\n");
    return 0;
}
