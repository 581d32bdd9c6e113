/* SPDX-License-Identifier: MIT */
/*
 * test_destroy_vs_walk.c - uslab_cache_destroy while walks that run destructors (another
 * thread's uslab_reap, the purger thread's passes) are on the same cache, whose objects
 * each hold a sub-object of that very cache (the constructor allocates it, the destructor
 * frees it: uslab.h allows both). Such a walk's destructors free into their own thread's
 * magazines; before session 15 destroy moved those magazines meanwhile, and objects were
 * lost ("destroyed with N live objects"), freed to the wrong cache, or a magazine used
 * after it was given away (a helper's audit: 3-7 of 40 runs of its program). Destroy now
 * closes the cache to such walks first (docs/design.md §5). Run with USLAB_PURGER=thread
 * and USLAB_PURGE_DELAY=1 so that the purger thread walks all the time too. This stress of
 * the shape did not hit the old race in 12 runs; it checks that the closing keeps every
 * object accounted for under it.
 */
#include "mt_common.h"

#define WORKERS     3
#define CYCLES      MT_SCALED(2000)
#define MAX_OBJECTS 400

struct node {
    uint64_t magic;
    struct node *sub;
};
static __thread int in_ctor;
static int stop; /* atomic */

static int ctor(void *obj, void *arg)
{
    uslab_cache_t **self = arg;
    struct node *n = obj;
    n->magic = 0x5ab5ab;
    n->sub = NULL;
    if (!in_ctor) { /* one level: the sub-object has none of its own */
        in_ctor = 1;
        n->sub = uslab_cache_alloc(*self);
        in_ctor = 0;
        if (!n->sub)
            return -1;
    }
    return 0;
}

static void dtor(void *obj, void *arg)
{
    uslab_cache_t **self = arg;
    struct node *n = obj;
    CHECK(n->magic == 0x5ab5ab, "a constructed node");
    if (n->sub)
        uslab_cache_free(*self, n->sub);
}

static void *worker(void *arg)
{
    unsigned s = (unsigned)(uintptr_t)arg * 7919u + 1;
    static __thread void *objs[MAX_OBJECTS];
    for (int k = 0; k < CYCLES; k++) {
        s = s * 1103515245u + 12345u;
        uslab_cache_t **self = malloc(sizeof *self);
        CHECK(self != NULL, "malloc");
        unsigned flags = (s >> 8) % 5 == 0 ? USLAB_CACHE_NOMAGAZINE : 0;
        *self =
            uslab_cache_create("walked", 24 + (s >> 20) % 160, 0, ctor, dtor, NULL, self, flags);
        CHECK(*self != NULL, "create");
        int n = 1 + (int)((s >> 12) % MAX_OBJECTS);
        for (int i = 0; i < n; i++)
            CHECK((objs[i] = uslab_cache_alloc(*self)) != NULL, "alloc");
        for (int i = 0; i < n; i++)
            uslab_cache_free(*self, objs[i]);
        if (k % 3 == 0)
            uslab_cache_reap(*self);
        uslab_cache_destroy(*self); /* aborts if an object was lost */
        free(self);
    }
    return NULL;
}

static void *reaper(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
        uslab_reap();
        usleep(200);
    }
    return NULL;
}

int main(void)
{
    pthread_t w[WORKERS], r;
    CHECK(pthread_create(&r, NULL, reaper, NULL) == 0, "thread");
    for (int i = 0; i < WORKERS; i++)
        CHECK(pthread_create(&w[i], NULL, worker, (void *)(uintptr_t)(i + 1)) == 0, "thread");
    for (int i = 0; i < WORKERS; i++)
        pthread_join(w[i], NULL);
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    pthread_join(r, NULL);
    TEST_DONE();
}
