/* SPDX-License-Identifier: MIT */
/*
 * test_mag_stash.c - a thread's start magazines come from its stash (depot.h, design §4
 * "Slow start"), which takes USI_MAG_STASH of them from their internal cache at a time and
 * gives them back as many at a time: a thread's first slow paths in many caches take that
 * cache's lock once in USI_MAG_STASH (3,000 live threads: the most contended lock of `mt
 * live`, issue 38). Checked, white-box:
 * - a fresh thread's first magazines in 2 * USI_MAG_STASH + 1 caches are the stash's, in
 *   the order it holds them, and it refills when empty;
 * - a start magazine freed (the pair grows past it) goes back to the stash;
 * - a busy stash (a signal handler nested in its change) is left alone;
 * - nothing is lost: the thread's exit gives its stash back, a reap the caller's, and a
 *   fork child its orphaned threads' (the internal cache's objects in use are 0 again).
 */
#include "base.h"
#include "check.h"
#include "depot.h"
#include "descriptor.h"
#include "os.h"
#include "registry.h"
#include "tcache.h"
#include "uslab.h"

#include <pthread.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define OBJ     64 /* a start magazine of USI_MAG_START_BYTES / 64 = 4 slots */
#define NCACHES (2 * USI_MAG_STASH + 1)

static uslab_cache_t *caches[NCACHES + 1];
static void *held[NCACHES + 1];

/* Objects of the start magazines' internal cache outside its slabs. */
static size_t start_mags_in_use(void)
{
    for (size_t id = 0; id < USI_MAX_IDS; id++) {
        struct uslab_cache *c = usi_caches[id];
        if (c && strcmp(c->name, "uslab-magazine-4") == 0) {
            usi_lock(&c->lock);
            size_t n = c->slab_inuse;
            usi_unlock(&c->lock);
            return n;
        }
    }
    CHECK(0, "no cache named uslab-magazine-4");
    return 0;
}

static struct usi_mag *loaded(uslab_cache_t *cache)
{
    struct uslab_cache *c = (struct uslab_cache *)cache;
    return usi_pair_loaded(usi_tcache_pair(usi_tls, c->pair_offset));
}

static void *first_magazines(void *arg)
{
    (void)arg;
    struct usi_mag_stash *s = NULL;
    struct usi_mag *expect = NULL;
    for (int i = 0; i < NCACHES; i++) {
        if (s && s->n > 0)
            expect = s->mags[s->n - 1]; /* the next one it hands out */
        held[i] = uslab_cache_alloc(caches[i]);
        CHECK(held[i] != NULL, "alloc");
        s = &usi_tls->mag_stash;
        struct usi_mag *m = loaded(caches[i]);
        CHECK(m->capacity <= USI_MAG_START_MAX, "cache %d: a start magazine (%u)", i, m->capacity);
        /* Taken 8 at a time: 7 left after the first, none after the eighth, 7 again after
         * the ninth. */
        uint32_t want = (uint32_t)(USI_MAG_STASH - 1 - i % USI_MAG_STASH);
        CHECK(s->n == want, "cache %d: %u in the stash, want %u", i, s->n, want);
        if (i % USI_MAG_STASH != 0)
            CHECK(m == expect, "cache %d: the stash's top magazine", i);
        CHECK(!s->busy, "stash left busy");
    }
    /* The pair of cache 0 grows past its start magazine (level 8 of 16 slots): the one of 4
     * slots goes back to the stash. */
    uint32_t before = s->n;
    struct usi_mag *start = loaded(caches[0]);
    void *more[64];
    int k = 0;
    while (loaded(caches[0])->capacity <= USI_MAG_START_MAX) {
        CHECK(k < 64, "no bigger magazine after 64 allocations");
        more[k++] = uslab_cache_alloc(caches[0]);
    }
    CHECK(s->n == before + 1 && s->mags[s->n - 1] == start,
          "the start magazine back in the stash (%u, was %u)", s->n, before);
    while (k > 0)
        uslab_cache_free(caches[0], more[--k]);
    /* A busy stash is left alone: the magazine comes from the internal cache. */
    s->busy = 1;
    uint32_t n = s->n;
    held[NCACHES] = uslab_cache_alloc(caches[NCACHES]);
    CHECK(held[NCACHES] != NULL, "alloc");
    struct usi_mag *m = loaded(caches[NCACHES]);
    for (uint32_t j = 0; j < n; j++)
        CHECK(s->mags[j] != m, "a busy stash's magazine handed out");
    CHECK(s->n == n, "a busy stash changed: %u, was %u", s->n, n);
    s->busy = 0;
    for (int i = 0; i <= NCACHES; i++)
        uslab_cache_free(caches[i], held[i]);
    return NULL;
}

static pthread_barrier_t both;

static void *hold_stash(void *arg)
{
    (void)arg;
    void *p = uslab_cache_alloc(caches[0]);
    CHECK(p != NULL && usi_tls->mag_stash.n == USI_MAG_STASH - 1, "a stash of 7");
    pthread_barrier_wait(&both); /* the main thread forks */
    pthread_barrier_wait(&both);
    uslab_cache_free(caches[0], p);
    return NULL;
}

int main(void)
{
    for (int i = 0; i <= NCACHES; i++) {
        char name[32];
        snprintf(name, sizeof name, "stash-%d", i);
        caches[i] = uslab_cache_create(name, OBJ, 0, NULL, NULL, NULL, NULL, 0);
        CHECK(caches[i] != NULL, "create");
    }
    pthread_t t;
    CHECK(pthread_create(&t, NULL, first_magazines, NULL) == 0, "thread");
    pthread_join(t, NULL);
    uslab_reap();
    CHECK(start_mags_in_use() == 0, "start magazines lost after an exit and a reap: %zu",
          start_mags_in_use());

    /* A fork child gives its orphaned thread's stash back (usi_tcache_adopt_orphans). */
    pthread_barrier_init(&both, NULL, 2);
    CHECK(pthread_create(&t, NULL, hold_stash, NULL) == 0, "thread");
    pthread_barrier_wait(&both);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        uslab_reap();
        size_t n = start_mags_in_use();
        if (n != 0)
            fprintf(stderr, "child: %zu start magazines lost\n", n);
        _exit(n != 0);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the fork child lost start magazines");
    pthread_barrier_wait(&both);
    pthread_join(t, NULL);
    uslab_reap();
    CHECK(start_mags_in_use() == 0, "start magazines lost: %zu", start_mags_in_use());
    for (int i = 0; i <= NCACHES; i++)
        uslab_cache_destroy(caches[i]);
    printf("ok\n");
    return 0;
}
