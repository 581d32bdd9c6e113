/* SPDX-License-Identifier: MIT */
/*
 * test_pair_alternate.c - a pair grows its magazines past the steady capacity only while its
 * slow paths alternate between allocation and free (design §4, "Slow start"), for a medium
 * class (issue 38's `medium` bench row) and for a class up to 1 KiB (the `mt lifo` row,
 * sh6bench's shape). A thread whose live count swings by six steady magazines reaches the
 * grown capacity: 64 KiB blocks 8 -> 32 (2 MiB), 576-byte ones 56 -> 224. A thread that only
 * allocates and one that only frees (the `prodcons` row's shape) stay at the steady capacity,
 * so the freeing thread's full magazines hold no more blocks than before. A class above 1 KiB
 * (4 KiB) does not grow. Deterministic: one thread at a time, no clock; 6 MiB at most live or
 * idle, under the headroom (no shedding).
 *
 * check_consumer: a thread that only frees medium blocks another thread allocated (a consuming
 * pair, design §4) holds one at most, and the others are back in their spans, where the
 * allocating thread's next blocks come from without a new span. Before, it held a magazine of
 * up to 8 blocks of 64 KiB, and the allocating thread made 8 new spans. USLAB_PURGE_DELAY is
 * raised for it (CMakeLists.txt): no pass gives the empty spans back while it runs.
 */
#include "check.h"
#include "descriptor.h"
#include "sizeclass.h"
#include "tcache.h"
#include "uslab.h"

#include <pthread.h>

#define MAX_SWING 512

static size_t size;  /* the class under test: its blocks' size */
static size_t swing; /* how far the alternating thread's live count swings */

static struct uslab_cache *cache_of_size(void)
{
    return usi_class_caches[size <= USI_SMALL_MAX ? usi_class_small[(size + 7) >> 3]
                                                  : usi_sizeclass_of_large(size)];
}

/* The largest capacity the calling thread's loaded magazine of the class has had. */
static uint32_t most_seen;
static void note_capacity(void)
{
    struct usi_magpair *mp = usi_tcache_pair(usi_tls, cache_of_size()->pair_offset);
    uint32_t cap = usi_pair_loaded(mp)->capacity;
    most_seen = cap > most_seen ? cap : most_seen;
}

static void *blocks[MAX_SWING];

static void *alternate(void *arg)
{
    most_seen = 0;
    for (int round = 0; round < 20; round++) {
        for (size_t i = 0; i < swing; i++) {
            CHECK((blocks[i] = uslab_malloc(size)) != NULL, "malloc");
            note_capacity();
        }
        for (size_t i = 0; i < swing; i++) {
            uslab_free(blocks[i]);
            note_capacity();
        }
    }
    return arg;
}

static void *produce(void *arg)
{
    most_seen = 0;
    for (size_t i = 0; i < swing; i++) {
        CHECK((blocks[i] = uslab_malloc(size)) != NULL, "malloc");
        note_capacity();
    }
    return arg;
}

static void *consume(void *arg)
{
    most_seen = 0;
    for (size_t i = 0; i < swing; i++) {
        uslab_free(blocks[i]);
        note_capacity();
    }
    return arg;
}

/* Runs fn on a thread of its own (a fresh pair); returns the largest capacity it saw. */
static uint32_t on_thread(void *(*fn)(void *))
{
    pthread_t t;
    CHECK(pthread_create(&t, NULL, fn, NULL) == 0, "pthread_create");
    CHECK(pthread_join(t, NULL) == 0, "pthread_join");
    return most_seen;
}

/* The class of `bytes`: its steady and grown capacities are as given, a pair that does not
 * alternate stays at the steady one, and one that does reaches the grown one. */
static void check_class(size_t bytes, uint32_t steady, uint32_t grown)
{
    size = bytes;
    swing = 6 * (size_t)steady;
    uslab_free(uslab_malloc(bytes)); /* the class is set up at its first use */
    CHECK(swing <= MAX_SWING, "swing %zu", swing);
    const struct uslab_cache *c = cache_of_size();
    CHECK(c->mag_steady == steady && c->mag_capacity == grown, "%zu bytes: steady %u, most %u",
          bytes, c->mag_steady, c->mag_capacity);
    for (int k = 0; k < 4; k++) { /* the producer's and consumer's blocks go round */
        uint32_t p = on_thread(produce), q = on_thread(consume);
        printf("%zu bytes: allocating only: %u slots; freeing only: %u slots\n", bytes, p, q);
        CHECK(p <= c->mag_steady && q <= c->mag_steady,
              "a pair that does not alternate grew past %u: %u, %u", c->mag_steady, p, q);
    }
    uint32_t a = on_thread(alternate);
    printf("%zu bytes: alternating: %u slots\n", bytes, a);
    CHECK(a == c->mag_capacity, "an alternating pair reached %u slots, not %u", a, c->mag_capacity);
}

/* Blocks in the calling thread's magazines of the class. */
static uint32_t pair_holds(void)
{
    struct usi_magpair *mp = usi_tcache_pair(usi_tls, cache_of_size()->pair_offset);
    return (uint32_t)(mp->top - mp->base) + (mp->prev ? mp->prev->rounds : 0);
}

static pthread_barrier_t consumed, allocated;
static uint32_t consumer_most;

static void *consume_and_stay(void *arg)
{
    consumer_most = 0;
    for (size_t i = 0; i < swing; i++) {
        uslab_free(blocks[i]);
        uint32_t n = pair_holds();
        consumer_most = n > consumer_most ? n : consumer_most;
    }
    pthread_barrier_wait(&consumed);
    pthread_barrier_wait(&allocated); /* alive, its pair unflushed, while main allocates */
    return arg;
}

static void check_consumer(size_t bytes)
{
    size = bytes;
    swing = 32;
    for (size_t i = 0; i < swing; i++)
        CHECK((blocks[i] = uslab_malloc(size)) != NULL, "malloc");
    CHECK(pthread_barrier_init(&consumed, NULL, 2) == 0 &&
              pthread_barrier_init(&allocated, NULL, 2) == 0,
          "barriers");
    pthread_t t;
    CHECK(pthread_create(&t, NULL, consume_and_stay, NULL) == 0, "pthread_create");
    pthread_barrier_wait(&consumed);
    const struct uslab_cache *c = cache_of_size();
    uint64_t spans = c->slabs_created;
    for (size_t i = 0; i < swing; i++)
        CHECK((blocks[i] = uslab_malloc(size)) != NULL, "malloc");
    uint64_t made = c->slabs_created - spans;
    pthread_barrier_wait(&allocated);
    CHECK(pthread_join(t, NULL) == 0, "pthread_join");
    for (size_t i = 0; i < swing; i++)
        uslab_free(blocks[i]);
    printf("%zu bytes: the consuming thread held %u blocks at most; %llu new spans for %zu "
           "blocks\n",
           bytes, consumer_most, (unsigned long long)made, swing);
    CHECK(consumer_most <= 1, "a consuming pair held %u blocks", consumer_most);
    CHECK(made == 0, "the allocating thread made %llu spans, its blocks held by the consumer",
          (unsigned long long)made);
}

int main(void)
{
    check_class((size_t)64 << 10, 8, 32);
    check_class(576, 56, 224);
    check_class(4096, 8, 8);
    check_consumer((size_t)64 << 10);
    TEST_DONE();
}
