/* SPDX-License-Identifier: MIT */
/*
 * test_tcache_bound.c - what threads cache in their magazines is bounded as a whole
 * (USLAB_TCACHE_MAX), not per thread: 64 threads each allocate and free in many size
 * classes and an object cache, then wait, holding their magazines. The bytes their
 * magazines may cache (usi_tcache_bytes) must stay within the bound; with a large bound
 * (argv[1] = "unbounded") the same run must exceed the small one, which shows the bound is
 * what held it. Past the bound, pairs still get floor magazines (1 KiB of objects, at least
 * one; docs/design.md §5), so the bound is exceeded by at most two of those per thread and
 * cache. When the threads exit, the count returns to zero.
 */
#include "base.h"
#include "descriptor.h"
#include "mt_common.h"
#include "options.h"
#include "sizeclass.h"
#include "tcache.h"
#include "uslab.h"

#include <pthread.h>

#define THREADS     64
#define SMALL_BOUND ((size_t)4 << 20)

static uslab_cache_t *cache;
static const size_t sizes[] = {16, 48, 128, 320, 1000, 2500, 6000, 14000, 30000};

static unsigned class_of(size_t n)
{
    return n <= USI_SMALL_MAX ? usi_class_small[(n + 7) >> 3] : usi_sizeclass_of_large(n);
}

/* Two floor magazines of c (tcache.c: USI_MAG_FLOOR_BYTES). */
static size_t floor_pair_bytes(const struct uslab_cache *c)
{
    size_t cap = 1024 / c->stride;
    if (cap > c->mag_capacity)
        cap = c->mag_capacity;
    return 2 * (cap ? cap : 1) * c->stride;
}
static pthread_barrier_t parked, release;

static void *worker(void *arg)
{
    uint64_t seed = (uint64_t)(uintptr_t)arg;
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
    else {
        size_t floor = floor_pair_bytes(cache);
        for (unsigned k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
            floor += floor_pair_bytes(usi_class_caches[class_of(sizes[k])]);
        CHECK(held > 0 && held <= usi_options.tcache_max + THREADS * floor,
              "bound exceeded: %zu KiB > %zu KiB + %d threads x %zu bytes of floor magazines",
              held >> 10, usi_options.tcache_max >> 10, THREADS, floor);
    }
    pthread_barrier_wait(&release);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    held = __atomic_load_n(&usi_tcache_bytes, __ATOMIC_RELAXED);
    CHECK(held <= (size_t)2 << 20, "after the threads exit: %zu KiB (main thread only)",
          held >> 10);
    uslab_cache_destroy(cache);
    TEST_DONE();
}
