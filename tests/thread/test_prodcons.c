/* SPDX-License-Identifier: MIT */
/*
 * test_prodcons.c - a producer allocates, a consumer frees (xmalloc-style remote frees),
 * through malloc classes and an object cache. The consumer's magazines fill with objects
 * the producer allocated; the depot must hand them back (or flush them to their slabs) so
 * resident memory stays bounded however many objects flow through.
 */
#include "mt_common.h"

#include <pthread.h>

#define TOTAL MT_SCALED(4000000L)
#define RING  4096

static uslab_cache_t *cache;
static void *ring[RING];
static uint32_t ring_size[RING];
static long head, tail; /* head: next to write; tail: next to read */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_full = PTHREAD_COND_INITIALIZER, not_empty = PTHREAD_COND_INITIALIZER;
static size_t peak_rss;

static void *producer(void *arg)
{
    (void)arg;
    uint64_t seed = 7;
    for (long i = 0; i < TOTAL; i++) {
        uint32_t n = (uint32_t)(mt_rand(&seed) % 4 == 0 ? 0 : 8 + mt_rand(&seed) % 250);
        void *p = n ? MT_MALLOC(n) : uslab_cache_alloc(cache);
        CHECK(p != NULL, "alloc");
        mt_fill(p, n ? n : 64, (uint64_t)i);
        pthread_mutex_lock(&lock);
        while (head - tail == RING)
            pthread_cond_wait(&not_full, &lock);
        ring[head % RING] = p;
        ring_size[head % RING] = n;
        head++;
        pthread_cond_signal(&not_empty);
        pthread_mutex_unlock(&lock);
        if ((i & 0xffff) == 0) {
            size_t r = mt_rss();
            if (r > peak_rss)
                peak_rss = r;
        }
    }
    return NULL;
}

static void *consumer(void *arg)
{
    (void)arg;
    for (long i = 0; i < TOTAL; i++) {
        pthread_mutex_lock(&lock);
        while (head == tail)
            pthread_cond_wait(&not_empty, &lock);
        void *p = ring[tail % RING];
        uint32_t n = ring_size[tail % RING];
        tail++;
        pthread_cond_signal(&not_full);
        pthread_mutex_unlock(&lock);
        CHECK(mt_check(p, n ? n : 64, (uint64_t)i), "object %ld corrupted", i);
        if (n)
            MT_FREE(p);
        else
            uslab_cache_free(cache, p);
    }
    return NULL;
}

int main(void)
{
    cache = uslab_cache_create("prodcons", 64, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(cache != NULL, "create");
    size_t base = mt_rss();
    pthread_t p, c;
    pthread_create(&p, NULL, producer, NULL);
    pthread_create(&c, NULL, consumer, NULL);
    pthread_join(p, NULL);
    pthread_join(c, NULL);
    long growth = (long)peak_rss - (long)base;
    printf("%ld objects through a ring of %d: peak resident growth %ld KiB\n", TOTAL, RING,
           growth / 1024);
    /* In flight: at most RING objects (< 1 MiB); allow depots, magazines and slabs slack. */
    CHECK(MT_SANITIZED || growth < (long)24 << 20, "resident memory grew by %ld KiB",
          growth / 1024);
    uslab_cache_destroy(cache);
    TEST_DONE();
}
