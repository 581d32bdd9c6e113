/* SPDX-License-Identifier: MIT */
/*
 * test_thread_churn.c - thousands of short-lived threads allocate (malloc classes and an
 * object cache), free most of it, hand some blocks to the main thread, and exit leaving
 * objects in their magazines. Thread exit must return those magazines to the depots, so
 * resident memory must not grow with the number of threads; handed-over blocks must keep
 * their contents.
 */
#include "mt_common.h"

#include <pthread.h>

#define THREADS    MT_SCALED(4000)
#define BATCH      8
#define PER_THREAD 300
#define KEEP       2

static uslab_cache_t *cache;
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kept {
    void *p;
    size_t n;
    uint64_t tag;
    int from_cache;
} kept[THREADS * KEEP * 2];
static size_t nkept;

static void *worker(void *arg)
{
    uint64_t seed = (uint64_t)(uintptr_t)arg;
    void *blocks[PER_THREAD];
    size_t sizes[PER_THREAD];
    void *objs[PER_THREAD];
    for (int i = 0; i < PER_THREAD; i++) {
        sizes[i] = 1 + mt_rand(&seed) % 600;
        blocks[i] = MT_MALLOC(sizes[i]);
        CHECK(blocks[i] != NULL, "malloc(%zu)", sizes[i]);
        mt_fill(blocks[i], sizes[i], (uintptr_t)blocks[i]);
        objs[i] = uslab_cache_alloc(cache);
        CHECK(objs[i] != NULL, "cache alloc");
        mt_fill(objs[i], 96, (uintptr_t)objs[i]);
    }
    for (int i = 0; i < PER_THREAD; i++) {
        CHECK(mt_check(blocks[i], sizes[i], (uintptr_t)blocks[i]), "block %d corrupted", i);
        CHECK(mt_check(objs[i], 96, (uintptr_t)objs[i]), "object %d corrupted", i);
    }
    pthread_mutex_lock(&kept_lock);
    for (int i = 0; i < KEEP; i++) {
        kept[nkept++] = (struct kept){blocks[i], sizes[i], (uintptr_t)blocks[i], 0};
        kept[nkept++] = (struct kept){objs[i], 96, (uintptr_t)objs[i], 1};
    }
    pthread_mutex_unlock(&kept_lock);
    for (int i = KEEP; i < PER_THREAD; i++) {
        MT_FREE(blocks[i]);
        uslab_cache_free(cache, objs[i]);
    }
    return NULL; /* exits with full magazines */
}

static void run_threads(int from, int to)
{
    for (int t = from; t < to; t += BATCH) {
        pthread_t th[BATCH];
        for (int i = 0; i < BATCH; i++)
            CHECK(pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)(t + i + 1)) == 0,
                  "pthread_create");
        for (int i = 0; i < BATCH; i++)
            pthread_join(th[i], NULL);
    }
}

int main(void)
{
    cache = uslab_cache_create("churn", 96, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(cache != NULL, "create");
    run_threads(0, 400);
    size_t rss_early = mt_rss();
    run_threads(400, THREADS);
    size_t rss_late = mt_rss();
    long growth = (long)rss_late - (long)rss_early;
    printf("rss after 400 threads %zu KiB, after %d threads %zu KiB (growth %ld KiB)\n",
           rss_early >> 10, THREADS, rss_late >> 10, growth / 1024);
    /* 3600 more threads kept 2 blocks + 2 objects each (~2.5 MiB with slack); magazines
     * left behind must not add up (they would be ~3600 * 2 * 300 objects). */
    CHECK(MT_SANITIZED || growth < (long)8 << 20, "resident memory grew by %ld KiB over %d threads",
          growth / 1024, THREADS - 400);
    for (size_t i = 0; i < nkept; i++) {
        CHECK(mt_check(kept[i].p, kept[i].n, kept[i].tag), "kept block %zu corrupted", i);
        if (kept[i].from_cache)
            uslab_cache_free(cache, kept[i].p);
        else
            MT_FREE(kept[i].p);
    }
    uslab_cache_destroy(cache); /* aborts if thread exit lost track of objects */
    TEST_DONE();
}
