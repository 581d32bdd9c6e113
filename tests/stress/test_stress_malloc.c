/* SPDX-License-Identifier: MIT */
/*
 * test_stress_malloc.c - random malloc/calloc/realloc/free/memalign operations against a
 * shadow table (issue 3). Every block is filled with a byte tag over its whole size and
 * verified before it is realloc'ed or freed, so overlapping blocks, lost contents and
 * calloc blocks that are not zero are caught. Sizes are mostly small, some medium (spans
 * of their own) and a few above the largest slab class (glibc's); alignments up to 256 KiB
 * (medium classes above a page). Deterministic: a fixed-seed generator.
 *
 * Phase 1: one thread, 10M operations by default (argument 1 changes the count; ctest passes
 * 5M).
 * Phase 2: 4 threads, each with its own table, passing blocks to each other through a
 * shared mailbox, so blocks are freed and realloc'ed by threads that did not allocate them;
 * half phase 1's operations in all (argument 2 changes the count).
 */
#include "check.h"
#include "uslab.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

struct rng {
    uint64_t s;
};

static uint64_t next(struct rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* 85%: 0..256, 13%: up to 32 KiB (log-uniform), 2%: 32 KiB .. 256 KiB. */
static size_t rand_size(struct rng *r)
{
    uint64_t x = next(r);
    unsigned pick = (unsigned)(x % 1000);
    x >>= 10;
    if (pick < 850)
        return (size_t)(x % 257);
    if (pick < 980) {
        unsigned lg = 8 + (unsigned)(x % 7); /* 256 .. 32767 */
        return ((size_t)1 << lg) + (size_t)((x >> 8) % ((size_t)1 << lg));
    }
    if (pick < 999) { /* medium: 32 KiB .. 1 MiB, as many per doubling */
        unsigned lg = 15 + (unsigned)(x % 5);
        return ((size_t)1 << lg) + 1 + (size_t)((x >> 8) % ((size_t)1 << lg));
    }
    return (1 << 20) + 1 + (size_t)((x >> 8) % (256 << 10)); /* glibc's */
}

struct slot {
    unsigned char *p;
    size_t size;
    unsigned char tag;
};

/* Word-at-a-time check that p[0..n) are all `tag`. */
static int all_tag(const unsigned char *p, size_t n, unsigned char tag)
{
    uint64_t w = 0x0101010101010101ull * tag;
    size_t i = 0;
    for (; i < n && ((uintptr_t)(p + i) & 7); i++)
        if (p[i] != tag)
            return 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        if (v != w)
            return 0;
    }
    for (; i < n; i++)
        if (p[i] != tag)
            return 0;
    return 1;
}

static void check_new(const void *p, size_t size, size_t align, const char *fn)
{
    CHECK(p != NULL, "%s(%zu) failed, errno %d", fn, size, errno);
    CHECK(((uintptr_t)p & (align - 1)) == 0, "%s(%zu) = %p misaligned (%zu)", fn, size, p, align);
    CHECK(size < 16 || ((uintptr_t)p & 15) == 0, "%s(%zu) = %p not 16-aligned", fn, size, p);
    CHECK(uslab_malloc_usable_size((void *)p) >= size, "%s(%zu): usable size %zu", fn, size,
          uslab_malloc_usable_size((void *)p));
}

static unsigned char new_tag(struct rng *r)
{
    return (unsigned char)(1 + next(r) % 255);
}

static void verify_slot(const struct slot *s, const char *when)
{
    CHECK(all_tag(s->p, s->size, s->tag), "%s: block %p of %zu bytes (tag %u) corrupted", when,
          (void *)s->p, s->size, s->tag);
}

/* One random operation on slot s. */
static void random_op(struct rng *r, struct slot *s)
{
    if (!s->p) {
        size_t size = rand_size(r);
        unsigned op = (unsigned)(next(r) % 10);
        if (op < 6) {
            s->p = uslab_malloc(size);
            check_new(s->p, size, 1, "malloc");
        } else if (op < 8) {
            s->p = uslab_calloc(1, size);
            check_new(s->p, size, 1, "calloc");
            CHECK(all_tag(s->p, size, 0), "calloc(%zu) not zeroed", size);
        } else if (op < 9) {
            size_t align = (size_t)8 << (next(r) % 16); /* 8 .. 256 KiB */
            s->p = uslab_memalign(align, size);
            check_new(s->p, size, align, "memalign");
        } else {
            s->p = uslab_realloc(NULL, size);
            check_new(s->p, size, 1, "realloc(NULL)");
        }
        s->size = size;
        s->tag = new_tag(r);
        memset(s->p, s->tag, size);
        return;
    }
    verify_slot(s, "before free/realloc");
    if (next(r) % 3 == 0) {
        size_t size = rand_size(r);
        if (size == 0)
            size = 1; /* realloc(p, 0) frees: tested in the API test */
        unsigned char *q = uslab_realloc(s->p, size);
        check_new(q, size, 1, "realloc");
        size_t keep = size < s->size ? size : s->size;
        CHECK(all_tag(q, keep, s->tag), "realloc %zu -> %zu lost contents", s->size, size);
        s->p = q;
        s->size = size;
        s->tag = new_tag(r);
        memset(q, s->tag, size);
    } else {
        uslab_free(s->p);
        s->p = NULL;
    }
}

static void free_all(struct slot *t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (t[i].p) {
            verify_slot(&t[i], "final");
            uslab_free(t[i].p);
            t[i].p = NULL;
        }
}

/* ---- phase 1 ------------------------------------------------------------------------------ */

static void single_thread(unsigned long ops)
{
    enum { SLOTS = 8192 };
    static struct slot t[SLOTS];
    struct rng r = {42};
    for (unsigned long i = 0; i < ops; i++) {
        /* Slots in a moving window: bursts of allocation and of freeing. */
        uint64_t x = next(&r);
        size_t idx = (size_t)(x % SLOTS);
        random_op(&r, &t[idx]);
        if (i % 2000000 == 1999999)
            uslab_reap(); /* flush magazines and depots into slabs mid-run */
    }
    free_all(t, SLOTS);
}

/* ---- phase 2 ------------------------------------------------------------------------------ */

enum { THREADS = 4, TSLOTS = 2048, MAILBOX = 256 };

static struct {
    pthread_mutex_t lock;
    struct slot box[MAILBOX];
    size_t count;
} mail = {.lock = PTHREAD_MUTEX_INITIALIZER};

static unsigned long thread_ops;

static void *worker(void *arg)
{
    struct rng r = {1000 + (uintptr_t)arg};
    static __thread struct slot t[TSLOTS];
    for (unsigned long i = 0; i < thread_ops; i++) {
        uint64_t x = next(&r);
        struct slot *s = &t[x % TSLOTS];
        unsigned m = (unsigned)((x >> 32) % 16);
        if (m == 0 && s->p) { /* post a live block */
            verify_slot(s, "before posting");
            pthread_mutex_lock(&mail.lock);
            if (mail.count < MAILBOX) {
                mail.box[mail.count++] = *s;
                s->p = NULL;
            }
            pthread_mutex_unlock(&mail.lock);
        } else if (m == 1 && !s->p) { /* adopt a block from another thread */
            pthread_mutex_lock(&mail.lock);
            if (mail.count)
                *s = mail.box[--mail.count];
            pthread_mutex_unlock(&mail.lock);
            if (s->p)
                verify_slot(s, "after adopting");
        } else {
            random_op(&r, s);
        }
    }
    free_all(t, TSLOTS);
    return NULL;
}

static void multi_thread(unsigned long ops)
{
    thread_ops = ops / THREADS;
    pthread_t th[THREADS];
    for (uintptr_t i = 0; i < THREADS; i++)
        CHECK(pthread_create(&th[i], NULL, worker, (void *)i) == 0, "pthread_create");
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    free_all(mail.box, mail.count);
    mail.count = 0;
}

int main(int argc, char **argv)
{
    unsigned long ops = argc > 1 ? strtoul(argv[1], NULL, 0) : 10000000ul;
    single_thread(ops);
    multi_thread(argc > 2 ? strtoul(argv[2], NULL, 0) : ops / 2);
    uslab_reap();
    TEST_DONE();
}
