/* SPDX-License-Identifier: MIT */
/*
 * test_fork_flush.c - fork while another thread flushes magazines back to their slabs
 * (docs/design.md §4, "Magazines in flight"). A worker allocates and frees 16 objects of a
 * cache with a destructor and calls uslab_cache_reap; its first destructor call waits until
 * the main thread has forked. The child, where the worker does not exist, must find those
 * objects back in their slabs: it allocates, frees and destroys the cache, which before
 * aborted with "destroyed with 16 live objects"; every object constructed in the child,
 * and the 15 the worker had not reached, must be destructed there, all but the one whose
 * destructor the fork interrupted (exit 12 otherwise). The parent's worker then finishes,
 * and every object constructed in the parent is destructed there.
 */
#include "mt_common.h"

#include <sys/wait.h>

#define OBJECTS 16

static uslab_cache_t *cache;
static long constructed, destructed; /* atomic */
static int forked;                   /* atomic: the worker's destructor may go on */
static int in_dtor;                  /* atomic: a destructor is waiting for the fork */

static int ctor(void *obj, void *arg)
{
    (void)arg;
    memset(obj, 0x5a, 64);
    __atomic_fetch_add(&constructed, 1, __ATOMIC_RELAXED);
    return 0;
}

static void dtor(void *obj, void *arg)
{
    (void)arg;
    CHECK(((unsigned char *)obj)[63] == 0x5a, "constructed state kept");
    if (!__atomic_load_n(&forked, __ATOMIC_ACQUIRE)) {
        __atomic_store_n(&in_dtor, 1, __ATOMIC_RELEASE);
        while (!__atomic_load_n(&forked, __ATOMIC_ACQUIRE))
            usleep(1000);
    }
    __atomic_fetch_add(&destructed, 1, __ATOMIC_RELAXED);
}

static void *worker(void *arg)
{
    (void)arg;
    void *objs[OBJECTS];
    for (int i = 0; i < OBJECTS; i++)
        CHECK((objs[i] = uslab_cache_alloc(cache)) != NULL, "alloc");
    for (int i = 0; i < OBJECTS; i++)
        uslab_cache_free(cache, objs[i]);
    uslab_cache_reap(cache); /* flushes this thread's magazines and the depot */
    return NULL;
}

static int child(void)
{
    __atomic_store_n(&forked, 1, __ATOMIC_RELEASE); /* the child's own destructors go on */
    void *objs[4 * OBJECTS];
    for (int i = 0; i < 4 * OBJECTS; i++) {
        objs[i] = uslab_cache_alloc(cache);
        if (!objs[i] || ((unsigned char *)objs[i])[0] != 0x5a)
            return 10;
    }
    for (int i = 0; i < 4 * OBJECTS; i++)
        uslab_cache_free(cache, objs[i]);
    struct uslab_cache_stats st;
    uslab_cache_stats(cache, &st);
    if (st.active_objects != 0)
        return 11;
    uslab_cache_destroy(cache); /* aborted: the worker's objects counted as live */
    /* The one the worker's destructor was running on at the fork stays undestructed here;
     * the other 15 were still constructed and were destructed by the child's destroy. */
    long left = __atomic_load_n(&constructed, __ATOMIC_RELAXED) -
                __atomic_load_n(&destructed, __ATOMIC_RELAXED);
    return left == 1 ? 0 : 12;
}

int main(int argc, char **argv)
{
    (void)argc, (void)argv;
    cache = uslab_cache_create("flushing", 64, 0, ctor, dtor, NULL, NULL, 0);
    CHECK(cache != NULL, "create");
    pthread_t t;
    CHECK(pthread_create(&t, NULL, worker, NULL) == 0, "thread");
    while (!__atomic_load_n(&in_dtor, __ATOMIC_ACQUIRE))
        usleep(1000);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0)
        _exit(child());
    __atomic_store_n(&forked, 1, __ATOMIC_RELEASE);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child %s %d",
          WIFEXITED(status) ? "exited with" : "died by signal",
          WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    pthread_join(t, NULL);
    uslab_cache_destroy(cache);
    CHECK(__atomic_load_n(&constructed, __ATOMIC_RELAXED) ==
              __atomic_load_n(&destructed, __ATOMIC_RELAXED),
          "%ld constructed, %ld destructed", constructed, destructed);
    TEST_DONE();
}
