/* SPDX-License-Identifier: MIT */
/*
 * test_span_groups.c - object caches in the span groups (docs/design.md §3, "Span groups"),
 * under threads: each thread, round after round, frees 2 MiB of 1 KiB malloc blocks (past what
 * magazines and the depot keep: most of their class's 64 KiB slabs are left empty), creates a cache
 * of 1 KiB objects with a constructor (64 KiB spans: the same group), fills several slabs, checks
 * and frees them (the cache's empty slabs beyond its reserve are spares for the group), mallocs the
 * blocks again and destroys the cache. So caches join, adopt, are adopted from and leave their
 * group while other threads walk it. Every object's and block's contents are verified; at least one
 * cache must have taken a span that held one of its thread's malloc blocks (else nothing was
 * tested). Usage: test_span_groups [ROUNDS [THREADS]]  (default 100, 4)
 */
#include "check.h"
#include "uslab.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BLOCKS 2048
#define BLOCK  1024u
#define OBJS   256
#define OBJ    1024u
#define SPAN   ((uintptr_t)64 << 10)
#define BUILT  0x5ba9c0de5ba9c0deull

static long rounds;
static unsigned long adopted; /* objects found in a span that held the thread's malloc block */

static int ctor(void *obj, void *arg)
{
    (void)arg;
    *(uint64_t *)obj = BUILT;
    return 0;
}

static void dtor(void *obj, void *arg)
{
    (void)arg;
    CHECK(*(uint64_t *)obj == BUILT, "destructor: object %p not as its constructor left it", obj);
}

static void fill(unsigned char *p, size_t n, unsigned char v)
{
    memset(p, v, n);
}

/* Every 64th byte and the last: a block handed out twice, or written by another owner, shows. */
static void verify(const unsigned char *p, size_t n, unsigned char v, const char *what)
{
    for (size_t i = 0; i < n; i += 64)
        CHECK(p[i] == v, "%s %p: byte %zu is %#x, not %#x", what, (const void *)p, i, p[i], v);
    CHECK(p[n - 1] == v, "%s %p: its last byte is %#x, not %#x", what, (const void *)p, p[n - 1],
          v);
}

static int cmp_span(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

static void *worker(void *arg)
{
    unsigned id = (unsigned)(uintptr_t)arg;
    static __thread unsigned char *blocks[BLOCKS];
    static __thread uintptr_t spans[BLOCKS];
    void *objs[OBJS];
    for (int i = 0; i < BLOCKS; i++) {
        blocks[i] = uslab_malloc(BLOCK);
        CHECK(blocks[i] != NULL, "malloc %u", BLOCK);
        fill(blocks[i], BLOCK, (unsigned char)(id + i));
    }
    for (long r = 0; r < rounds; r++) {
        for (int i = 0; i < BLOCKS; i++) {
            verify(blocks[i], BLOCK, (unsigned char)(id + i + r), "block");
            spans[i] = (uintptr_t)blocks[i] & ~(SPAN - 1);
            uslab_free(blocks[i]);
        }
        qsort(spans, BLOCKS, sizeof spans[0], cmp_span);
        uslab_cache_t *c = uslab_cache_create("group-stress", OBJ, 0, ctor, dtor, NULL, NULL,
                                              r % 2 ? USLAB_CACHE_NOMAGAZINE : 0);
        CHECK(c != NULL, "create");
        for (int k = 0; k < OBJS; k++) {
            unsigned char *o = uslab_cache_alloc(c);
            CHECK(o != NULL, "cache alloc");
            CHECK(*(uint64_t *)o == BUILT, "object %p not constructed", (void *)o);
            fill(o + 8, OBJ - 8, (unsigned char)(k + r));
            objs[k] = o;
            uintptr_t span = (uintptr_t)o & ~(SPAN - 1);
            if (bsearch(&span, spans, BLOCKS, sizeof spans[0], cmp_span))
                __atomic_add_fetch(&adopted, 1, __ATOMIC_RELAXED);
        }
        for (int k = 0; k < OBJS; k++) {
            verify((unsigned char *)objs[k] + 8, OBJ - 8, (unsigned char)(k + r), "object");
            *(uint64_t *)objs[k] = BUILT; /* as constructed: the destructor checks it */
            uslab_cache_free(c, objs[k]);
        }
        for (int i = 0; i < BLOCKS; i++) {
            blocks[i] = uslab_malloc(BLOCK);
            CHECK(blocks[i] != NULL, "malloc %u", BLOCK);
            fill(blocks[i], BLOCK, (unsigned char)(id + i + r + 1));
        }
        uslab_cache_destroy(c); /* aborts if an object is unaccounted for */
    }
    for (int i = 0; i < BLOCKS; i++)
        uslab_free(blocks[i]);
    return NULL;
}

int main(int argc, char **argv)
{
    rounds = argc > 1 ? atol(argv[1]) : 100;
    long nthreads = argc > 2 ? atol(argv[2]) : 4;
    CHECK(rounds > 0 && nthreads > 0 && nthreads <= 64, "arguments");
    pthread_t tid[64];
    for (long t = 0; t < nthreads; t++)
        CHECK(pthread_create(&tid[t], NULL, worker, (void *)(uintptr_t)t) == 0, "pthread_create");
    for (long t = 0; t < nthreads; t++)
        pthread_join(tid[t], NULL);
    CHECK(adopted > 0, "no cache took a span its thread's malloc blocks had left (tested nothing)");
    printf("%lu objects in spans that held their thread's malloc blocks\n", adopted);
    TEST_DONE();
}
