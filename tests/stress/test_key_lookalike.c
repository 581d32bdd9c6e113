/* SPDX-License-Identifier: MIT */
/*
 * test_key_lookalike.c - legitimate blocks that look like double frees, while other threads
 * churn (design §8, docs/security.md §2.2). Each block's first word holds the slab layer's
 * free mark (what a block back in its slab holds there; main learns it from one) and its
 * second word free()'s key (the process's secret, learned from a freed block), so every
 * handout of it takes the exact check, as every free of it did before free became a store
 * (and free's slow path and realloc still do). That check looks into the other threads'
 * magazines without their help, while those threads allocate and free the same class, and
 * swap magazines, all the time. It must never find a block that is live (a false "double
 * free" would abort the program), and no block may be handed out twice (each block
 * carries its owner's tag, checked before its free). Blocks travel between threads through
 * a mailbox, so frees are also remote.
 *
 * Arguments: [operations per thread] (default 400000).
 */
#include "check.h"
#include "uslab.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 4
#define HELD    300
#define MAILBOX 64
#define SIZE    64

struct block {
    uintptr_t mark, key; /* the slab's free mark, and free()'s key */
    uint64_t tag;        /* who holds it, and which of its blocks */
    unsigned char fill[SIZE - 24];
};

static long ops_per_thread = 400000;
static uintptr_t secret; /* free()'s key */
static uintptr_t mark;   /* the slab layer's free mark */
static struct block *mailbox[MAILBOX];
static pthread_mutex_t mailbox_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t next_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void claim(struct block *b, uint64_t tag)
{
    b->mark = mark;  /* what a block back in its slab holds there */
    b->key = secret; /* what a freed block holds there */
    b->tag = tag;
    memset(b->fill, (int)(tag & 0xff), sizeof b->fill);
}

static void check_held(const struct block *b, uint64_t tag)
{
    CHECK(b->mark == mark && b->key == secret && b->tag == tag,
          "block %p changed while held (tag %llx, want %llx): handed out twice?", (void *)b,
          (unsigned long long)b->tag, (unsigned long long)tag);
    for (size_t i = 0; i < sizeof b->fill; i++)
        CHECK(b->fill[i] == (unsigned char)(tag & 0xff), "block %p: byte %zu changed", (void *)b,
              i);
}

static void *worker(void *arg)
{
    uint64_t id = (uint64_t)(uintptr_t)arg, seed = id * 7919 + 1, serial = 0;
    struct block *held[HELD] = {0};
    uint64_t tags[HELD] = {0};
    for (long op = 0; op < ops_per_thread; op++) {
        uint64_t r = next_rand(&seed);
        size_t i = (size_t)(r % HELD);
        if (held[i]) {
            check_held(held[i], tags[i]);
            if ((r >> 32) % 4 == 0) { /* to the mailbox: another thread frees it */
                size_t m = (size_t)((r >> 40) % MAILBOX);
                pthread_mutex_lock(&mailbox_lock);
                struct block *old = mailbox[m];
                mailbox[m] = held[i];
                pthread_mutex_unlock(&mailbox_lock);
                if (old)
                    uslab_free(old); /* its tag is the sender's: not checked here */
            } else {
                uslab_free(held[i]);
            }
            held[i] = NULL;
        } else {
            held[i] = uslab_malloc(sizeof(struct block));
            CHECK(held[i] != NULL, "malloc failed");
            tags[i] = id << 56 | ++serial;
            claim(held[i], tags[i]);
        }
    }
    for (size_t i = 0; i < HELD; i++)
        if (held[i]) {
            check_held(held[i], tags[i]);
            uslab_free(held[i]);
        }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        ops_per_thread = atol(argv[1]);
    /* The key a free writes and the mark of a block back in its slab (docs/security.md
     * §2.2): read back from freed blocks, which only a test of the allocator itself may
     * do. A neighbour keeps the slab (uslab_reap would give an empty one back). */
    uintptr_t *probe = uslab_malloc(sizeof(struct block));
    uintptr_t *other = uslab_malloc(sizeof(struct block));
    uintptr_t *neighbour = uslab_malloc(sizeof(struct block));
    CHECK(probe != NULL && other != NULL && neighbour != NULL, "malloc failed");
    uslab_free(probe);
    uslab_free(other);
    secret = ((volatile uintptr_t *)probe)[1];
    CHECK(secret != 0 && secret != (uintptr_t)probe, "no secret in free()'s key: %llx",
          (unsigned long long)secret);
    CHECK(((volatile uintptr_t *)other)[1] == secret, "free()'s key differs between blocks");
    uslab_reap();
    mark = ((volatile uintptr_t *)probe)[0];
    CHECK(mark != 0 && mark != secret, "no free mark in a block back in its slab: %llx",
          (unsigned long long)mark);
    CHECK(((volatile uintptr_t *)other)[0] == mark, "the free mark differs between blocks");
    pthread_t t[THREADS];
    for (uintptr_t i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, worker, (void *)(i + 1)) == 0, "pthread_create");
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    for (int m = 0; m < MAILBOX; m++)
        uslab_free(mailbox[m]);
    uslab_free(neighbour);
    return 0;
}
