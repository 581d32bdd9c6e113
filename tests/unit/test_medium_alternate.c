/* SPDX-License-Identifier: MIT */
/*
 * test_medium_alternate.c - a pair of a medium class grows its magazines past the steady
 * capacity (512 KiB of blocks) only while its slow paths alternate between allocation and
 * free (design §4, "Slow start"; issue 38's `medium` bench row). A thread whose live count
 * of 64 KiB blocks swings by 48 reaches magazines of 32 blocks (2 MiB); a thread that only
 * allocates and one that only frees (the `prodcons` row's shape) stay at 8, so the freeing
 * thread's full magazines hold no more blocks than before. Deterministic: one thread at a
 * time, no clock; 6 MiB at most live or idle, under the headroom (no shedding).
 */
#include "check.h"
#include "descriptor.h"
#include "sizeclass.h"
#include "tcache.h"
#include "uslab.h"

#include <pthread.h>

#define SIZE  ((size_t)64 << 10)
#define SWING 48

static struct uslab_cache *cache_of_size(void)
{
    return &usi_class_caches[usi_sizeclass_of_large(SIZE)];
}

/* The largest capacity the calling thread's loaded magazine of the class has had. */
static uint32_t most_seen;
static void note_capacity(void)
{
    struct usi_magpair *mp = usi_tcache_pair(usi_tls, cache_of_size()->pair_offset);
    uint32_t cap = usi_pair_loaded(mp)->capacity;
    most_seen = cap > most_seen ? cap : most_seen;
}

static void *blocks[SWING];

static void *alternate(void *arg)
{
    most_seen = 0;
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < SWING; i++) {
            CHECK((blocks[i] = uslab_malloc(SIZE)) != NULL, "malloc");
            note_capacity();
        }
        for (int i = 0; i < SWING; i++) {
            uslab_free(blocks[i]);
            note_capacity();
        }
    }
    return arg;
}

static void *produce(void *arg)
{
    most_seen = 0;
    for (int i = 0; i < SWING; i++) {
        CHECK((blocks[i] = uslab_malloc(SIZE)) != NULL, "malloc");
        note_capacity();
    }
    return arg;
}

static void *consume(void *arg)
{
    most_seen = 0;
    for (int i = 0; i < SWING; i++) {
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

int main(void)
{
    uslab_free(uslab_malloc(SIZE)); /* the classes are set up */
    const struct uslab_cache *c = cache_of_size();
    CHECK(c->mag_steady == 8 && c->mag_capacity == 32, "64 KiB: steady %u, most %u", c->mag_steady,
          c->mag_capacity);

    for (int k = 0; k < 4; k++) { /* the producer's and consumer's blocks go round */
        uint32_t p = on_thread(produce), q = on_thread(consume);
        printf("allocating only: %u slots; freeing only: %u slots\n", p, q);
        CHECK(p <= c->mag_steady && q <= c->mag_steady,
              "a pair that does not alternate grew past %u: %u, %u", c->mag_steady, p, q);
    }
    uint32_t a = on_thread(alternate);
    printf("alternating: %u slots\n", a);
    CHECK(a == c->mag_capacity, "an alternating pair reached %u slots, not %u", a, c->mag_capacity);
    TEST_DONE();
}
