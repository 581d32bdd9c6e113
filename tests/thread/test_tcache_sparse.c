/* SPDX-License-Identifier: MIT */
/*
 * test_tcache_sparse.c - a thread that uses only a cache with a high id gets a thread cache
 * whose pairs are indexed up to that id, but only the pages it touches become resident
 * (docs/design.md §5: blank pairs). 32 threads each use one cache of id > 4000; mincore()
 * over each thread's cache mapping must find a few resident pages, not the whole table.
 */
#include "mt_common.h"
#include "tcache.h"
#include "uslab.h"

#include <pthread.h>
#include <sys/mman.h>

#define THREADS 32
#define CACHES  4000

static uslab_cache_t *caches[CACHES];
static pthread_barrier_t parked, release;
static size_t resident[THREADS], mapped[THREADS];

static size_t resident_pages(const void *addr, size_t bytes)
{
    size_t pages = bytes / 4096;
    unsigned char vec[4096];
    CHECK(pages <= sizeof vec, "thread cache larger than the test expects: %zu pages", pages);
    CHECK(mincore((void *)addr, bytes, vec) == 0, "mincore");
    size_t n = 0;
    for (size_t i = 0; i < pages; i++)
        n += vec[i] & 1;
    return n;
}

static void *worker(void *arg)
{
    unsigned k = (unsigned)(uintptr_t)arg;
    uslab_cache_t *c = caches[CACHES - 1 - k];
    void *p[100];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 100; i++) {
            p[i] = uslab_cache_alloc(c);
            CHECK(p[i] != NULL, "alloc");
            memset(p[i], (int)k, 64);
        }
        for (int i = 0; i < 100; i++)
            uslab_cache_free(c, p[i]);
    }
    struct usi_tcache *tc = usi_tls;
    CHECK(tc->npairs > CACHES, "the thread's cache covers the high id");
    mapped[k] = tc->map_bytes;
    resident[k] = resident_pages(tc, tc->map_bytes);
    pthread_barrier_wait(&parked);
    pthread_barrier_wait(&release);
    return NULL;
}

int main(void)
{
    char name[32];
    for (int i = 0; i < CACHES; i++) {
        snprintf(name, sizeof name, "sparse-%d", i);
        caches[i] = uslab_cache_create(name, 64, 0, NULL, NULL, NULL, NULL, 0);
        CHECK(caches[i] != NULL, "create %d", i);
    }
    pthread_barrier_init(&parked, NULL, THREADS + 1);
    pthread_barrier_init(&release, NULL, THREADS + 1);
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)i) == 0, "thread");
    pthread_barrier_wait(&parked);
    size_t total = 0, total_mapped = 0;
    for (int i = 0; i < THREADS; i++) {
        total += resident[i];
        total_mapped += mapped[i] / 4096;
        /* Header + class offsets (2 pages), the page of the pair used, the page the
         * growth copied from the thread's first, smaller cache. */
        CHECK(resident[i] <= 6, "thread %d: %zu of %zu pages of its cache resident", i, resident[i],
              mapped[i] / 4096);
    }
    printf("thread caches: %zu pages resident of %zu mapped\n", total, total_mapped);
    pthread_barrier_wait(&release);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < CACHES; i++)
        uslab_cache_destroy(caches[i]);
    TEST_DONE();
}
