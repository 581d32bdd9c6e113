/* SPDX-License-Identifier: MIT */
/*
 * test_tcache_bound.c - what threads cache in their magazines is bounded as a whole
 * (USLAB_TCACHE_MAX), not per thread: 64 threads each allocate and free in many size
 * classes and an object cache, then wait, holding their magazines. The bytes their
 * magazines may cache (usi_tcache_bytes) must stay within the bound; with a large bound
 * (argv[1] = "unbounded") the same run must exceed the small one, which shows the bound is
 * what held it. When the threads exit, the count returns to zero.
 */
#include "internal.h"
#include "mt_common.h"

#include <pthread.h>

#define THREADS     64
#define SMALL_BOUND ((size_t)4 << 20)

static uslab_cache_t *cache;
static pthread_barrier_t parked, release;

static void *worker(void *arg)
{
    uint64_t seed = (uint64_t)(uintptr_t)arg;
    static const size_t sizes[] = {16, 48, 128, 320, 1000, 2500, 6000, 14000, 30000};
    void *p[200];
    for (unsigned k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        for (int i = 0; i < 200; i++) {
            p[i] = uslab_malloc(sizes[k]);
            CHECK(p[i] != NULL, "malloc");
            mt_fill(p[i], sizes[k] < 64 ? sizes[k] : 64, seed + (uint64_t)i);
        }
        for (int i = 0; i < 200; i++) {
            CHECK(mt_check(p[i], sizes[k] < 64 ? sizes[k] : 64, seed + (uint64_t)i), "contents");
            uslab_free(p[i]);
        }
    }
    for (int i = 0; i < 200; i++)
        p[i] = uslab_cache_alloc(cache);
    for (int i = 0; i < 200; i++)
        uslab_cache_free(cache, p[i]);
    pthread_barrier_wait(&parked);  /* hold the magazines while main looks */
    pthread_barrier_wait(&release); /* then exit */
    return NULL;
}

int main(int argc, char **argv)
{
    int unbounded = argc > 1 && strcmp(argv[1], "unbounded") == 0;
    cache = uslab_cache_create("bound", 200, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(cache != NULL, "create");
    pthread_barrier_init(&parked, NULL, THREADS + 1);
    pthread_barrier_init(&release, NULL, THREADS + 1);
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)(i + 1)) == 0, "thread");
    pthread_barrier_wait(&parked);
    size_t held = __atomic_load_n(&usi_tcache_bytes, __ATOMIC_RELAXED);
    printf("%d threads parked: their magazines may cache %zu KiB (bound %zu KiB)\n", THREADS,
           held >> 10, usi_options.tcache_max >> 10);
    if (unbounded)
        CHECK(held > SMALL_BOUND, "without a small bound the threads cache more (%zu KiB)",
              held >> 10);
    else
        CHECK(held > 0 && held <= usi_options.tcache_max, "bound exceeded: %zu KiB", held >> 10);
    pthread_barrier_wait(&release);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    held = __atomic_load_n(&usi_tcache_bytes, __ATOMIC_RELAXED);
    CHECK(held <= (size_t)2 << 20, "after the threads exit: %zu KiB (main thread only)",
          held >> 10);
    uslab_cache_destroy(cache);
    TEST_DONE();
}
