/* SPDX-License-Identifier: MIT */
/*
 * test_remote_first_free.c - no allocator-induced false sharing (issue 12, design §4): the
 * main thread allocates one small block per worker, adjacent, in one cache line; each
 * worker frees its block, then allocates. The block it gets must not share a cache line
 * with a block another thread holds then: the main thread's blocks not freed yet, and the
 * other workers' (before, it got the very block it freed, and two workers then wrote one
 * line for good). Also with a user cache.
 */
#include "mt_common.h"

#include <pthread.h>

#define WORKERS 4
#define LINE    64

static void *initial[WORKERS];
static void *got[WORKERS];
static uslab_cache_t *cache;
static int use_cache;
static pthread_barrier_t bar;

static void *worker(void *arg)
{
    long id = (long)(intptr_t)arg;
    /* One at a time, in order: each sees the same state. */
    for (long turn = 0; turn < WORKERS; turn++) {
        pthread_barrier_wait(&bar);
        if (turn != id)
            continue;
        if (use_cache) {
            uslab_cache_free(cache, initial[id]);
            got[id] = uslab_cache_alloc(cache);
        } else {
            MT_FREE(initial[id]);
            got[id] = MT_MALLOC(16);
        }
        CHECK(got[id] != NULL, "alloc");
        memset(got[id], (int)id, 16);
    }
    pthread_barrier_wait(&bar); /* the main thread checks while every block is live */
    pthread_barrier_wait(&bar);
    if (use_cache)
        uslab_cache_free(cache, got[id]);
    else
        MT_FREE(got[id]);
    return NULL;
}

static void run(void)
{
    for (int i = 0; i < WORKERS; i++) {
        initial[i] = use_cache ? uslab_cache_alloc(cache) : MT_MALLOC(16);
        CHECK(initial[i] != NULL, "alloc");
    }
    int shared = 0;
    for (int i = 1; i < WORKERS; i++)
        shared += (uintptr_t)initial[i] / LINE == (uintptr_t)initial[i - 1] / LINE;
    CHECK(shared > 0, "the main thread's blocks share no cache line: the test shows nothing");
    pthread_barrier_init(&bar, NULL, WORKERS);
    pthread_t t[WORKERS];
    for (long i = 0; i < WORKERS; i++)
        CHECK(pthread_create(&t[i], NULL, worker, (void *)i) == 0, "pthread_create");
    /* The workers' barriers: WORKERS turns, then the check point. */
    for (long i = 0; i < WORKERS; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&bar);
}

int main(void)
{
    /* The workers check nothing themselves: record, then compare after the joins. */
    for (use_cache = 0; use_cache < 2; use_cache++) {
        if (use_cache)
            cache = uslab_cache_create("remote-first", 16, 0, NULL, NULL, NULL, NULL, 0);
        run();
        /* Worker i took its turn after workers 0 .. i - 1 had freed theirs: the main
         * thread's blocks i + 1 .. were still live. */
        for (int i = 0; i < WORKERS; i++)
            for (int j = 0; j < WORKERS; j++) {
                CHECK(j <= i || (uintptr_t)got[i] / LINE != (uintptr_t)initial[j] / LINE,
                      "%s: worker %d got %p, in the cache line of the main thread's block %p "
                      "(worker %d's, live then)",
                      use_cache ? "cache" : "malloc", i, got[i], initial[j], j);
                CHECK(j == i || (uintptr_t)got[i] / LINE != (uintptr_t)got[j] / LINE,
                      "%s: workers %d and %d got %p and %p, in one cache line",
                      use_cache ? "cache" : "malloc", i, j, got[i], got[j]);
            }
        if (use_cache)
            uslab_cache_destroy(cache);
    }
    TEST_DONE();
}
