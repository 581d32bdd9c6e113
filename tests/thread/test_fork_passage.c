/* SPDX-License-Identifier: MIT */
/*
 * test_fork_passage.c - fork while another thread's objects are between their slab and
 * the user, a constructor or destructor running on them (docs/design.md §7, "Objects in
 * passage at a fork"). The worker's callback waits until the main thread has forked. In
 * the child, where the worker does not exist, those objects must be back in their slabs:
 * no active object, and uslab_cache_destroy (which before aborted with "destroyed with
 * N live objects") goes through. Cases (argv[1]):
 *   alloc_nomag  a cache without magazines: its constructor runs on every allocation;
 *   alloc_mag    a cache with magazines whose depot is empty: objects with a constructor
 *                leave their slab one at a time, constructed by the allocating thread;
 *   free_nomag   the destructor of a cache without magazines, at each free;
 *   bulk         uslab_cache_alloc_bulk of 8 objects, the constructor waiting at the 5th;
 *   bulk_warm    the same after the thread freed 3 objects into its magazines: the bulk
 *                call takes those first, and they wait outside the magazines, with the
 *                caller, while the constructors of the other 5 run (the audit of session
 *                15: the child counted those 3 as live);
 *   nested       a constructor that allocates from a second cache, whose constructor waits:
 *                two passages at once, one in each cache.
 */
#include "mt_common.h"

#include <sys/wait.h>

#define BULK 8

static uslab_cache_t *outer, *inner;
static int forked;      /* atomic: the worker's callback may go on */
static int waiting;     /* atomic: a callback waits for the fork */
static int wait_at = 1; /* the callback call (1 = first) that waits */
static int calls;       /* atomic: callback calls that may wait */

/* The worker's callback: the wait_at-th call waits for the fork. */
static void maybe_wait(void)
{
    if (__atomic_add_fetch(&calls, 1, __ATOMIC_ACQ_REL) != wait_at)
        return;
    __atomic_store_n(&waiting, 1, __ATOMIC_RELEASE);
    while (!__atomic_load_n(&forked, __ATOMIC_ACQUIRE))
        usleep(1000);
}

static int ctor_wait(void *obj, void *arg)
{
    (void)arg;
    memset(obj, 0x5a, 64);
    maybe_wait();
    return 0;
}

static void dtor_wait(void *obj, void *arg)
{
    (void)obj, (void)arg;
    maybe_wait();
}

/* The outer cache's constructor in `nested`: its object holds one of the inner cache. */
static int ctor_nested(void *obj, void *arg)
{
    (void)arg;
    void *in = uslab_cache_alloc(inner);
    if (!in)
        return -1;
    memcpy(obj, &in, sizeof in);
    return 0;
}

static void dtor_nested(void *obj, void *arg)
{
    (void)arg;
    void *in;
    memcpy(&in, obj, sizeof in);
    uslab_cache_free(inner, in);
}

static const char *mode;
static void *held[BULK]; /* the worker's objects, freed by the parent afterwards */

static void *worker(void *arg)
{
    (void)arg;
    if (strcmp(mode, "bulk_warm") == 0) {
        void *warm[3];
        for (int i = 0; i < 3; i++)
            CHECK((warm[i] = uslab_cache_alloc(outer)) != NULL, "alloc");
        for (int i = 0; i < 3; i++)
            uslab_cache_free(outer, warm[i]); /* into this thread's magazine */
    }
    if (strncmp(mode, "bulk", 4) == 0) {
        CHECK(uslab_cache_alloc_bulk(outer, BULK, held) == BULK, "bulk");
    } else if (strcmp(mode, "free_nomag") == 0) {
        uslab_cache_free(outer, held[0]);
        held[0] = NULL;
    } else {
        CHECK((held[0] = uslab_cache_alloc(outer)) != NULL, "alloc");
    }
    return NULL;
}

/* Every cache of the case: none has an active object, and it can be used and destroyed. */
static int check_cache(uslab_cache_t *c, int code)
{
    struct uslab_cache_stats st;
    uslab_cache_stats(c, &st);
    if (st.active_objects != 0) {
        fprintf(stderr, "child: %s has %zu active objects\n", uslab_cache_name(c),
                st.active_objects);
        return code;
    }
    return 0;
}

static int child(void)
{
    __atomic_store_n(&forked, 1, __ATOMIC_RELEASE); /* the child's own callbacks go on */
    int r = check_cache(outer, 10);
    if (!r && inner)
        r = check_cache(inner, 11);
    if (r)
        return r;
    void *p = uslab_cache_alloc(outer);
    if (!p)
        return 12;
    uslab_cache_free(outer, p);
    uslab_cache_destroy(outer); /* aborted: the worker's objects counted as live */
    if (inner)
        uslab_cache_destroy(inner);
    return 0;
}

int main(int argc, char **argv)
{
    CHECK(argc == 2, "usage: fork_passage CASE");
    mode = argv[1];
    uslab_ctor_fn ctor = ctor_wait;
    uslab_dtor_fn dtor = NULL;
    unsigned flags = USLAB_CACHE_NOMAGAZINE;
    if (strcmp(mode, "alloc_mag") == 0) {
        flags = 0;
    } else if (strcmp(mode, "free_nomag") == 0) {
        ctor = NULL;
        dtor = dtor_wait;
    } else if (strcmp(mode, "bulk") == 0) {
        flags = 0;
        wait_at = 5;
    } else if (strcmp(mode, "bulk_warm") == 0) {
        flags = 0;
        wait_at = 4; /* the first constructor of the bulk call (3 ran before it) */
    } else if (strcmp(mode, "nested") == 0) {
        inner = uslab_cache_create("passage-inner", 64, 0, ctor_wait, NULL, NULL, NULL,
                                   USLAB_CACHE_NOMAGAZINE);
        CHECK(inner != NULL, "create");
        ctor = ctor_nested;
        dtor = dtor_nested;
    } else {
        CHECK(strcmp(mode, "alloc_nomag") == 0, "unknown case %s", mode);
    }
    outer = uslab_cache_create("passage", 64, 0, ctor, dtor, NULL, NULL, flags);
    CHECK(outer != NULL, "create");
    if (dtor == dtor_wait) /* an object for the worker to free, made on this thread */
        CHECK((held[0] = uslab_cache_alloc(outer)) != NULL, "alloc");

    pthread_t t;
    CHECK(pthread_create(&t, NULL, worker, NULL) == 0, "thread");
    while (!__atomic_load_n(&waiting, __ATOMIC_ACQUIRE))
        usleep(1000);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0)
        _exit(child());
    __atomic_store_n(&forked, 1, __ATOMIC_RELEASE);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: the child %s %d", mode,
          WIFEXITED(status) ? "exited with" : "died by signal",
          WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    pthread_join(t, NULL);
    /* The parent is whole: its worker finished, and everything goes back. */
    for (int i = 0; i < BULK; i++)
        if (held[i])
            uslab_cache_free(outer, held[i]);
    struct uslab_cache_stats st;
    uslab_cache_stats(outer, &st);
    CHECK(st.active_objects == 0, "parent: %zu active", st.active_objects);
    uslab_cache_destroy(outer);
    if (inner)
        uslab_cache_destroy(inner);
    TEST_DONE();
}
