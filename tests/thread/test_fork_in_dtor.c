/* SPDX-License-Identifier: MIT */
/*
 * test_fork_in_dtor.c - fork from a destructor that the forking thread runs while it
 * flushes magazines (docs/design.md §4, "Magazines in flight"), with a second thread
 * using uslab, so that the fork handlers do their work. The flush goes on in the child, by
 * the same thread: the child must leave that thread's magazines in flight to it. Before
 * session 15 the child put their objects back itself and the thread put them back again
 * (`uslab: double free ... in cache`), and with a reap its destroy then waited for ever on
 * a flush count the child had reset. argv[1]: `destroy` (the destroy's drain forks) or
 * `reap` (uslab_cache_reap forks; the child then destroys the cache).
 */
#include "mt_common.h"

#include <signal.h>
#include <sys/wait.h>

#define OBJECTS 300
#define ROUNDS  20

static uslab_cache_t *side;
static int forked, in_child;
static int stop; /* atomic */

static void dtor(void *obj, void *arg)
{
    (void)obj, (void)arg;
    if (forked)
        return;
    forked = 1;
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        in_child = 1;
        alarm(30); /* a hang fails the test, not the suite's timeout */
        return;    /* the child goes on with the flush this destructor is part of */
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child %s %d",
          WIFEXITED(status) ? "exited with" : "died by signal",
          WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
}

static void *spinner(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
        void *p = uslab_cache_alloc(side);
        CHECK(p != NULL, "alloc");
        uslab_cache_free(side, p);
        uslab_free(uslab_malloc(100));
    }
    return NULL;
}

/* The child's end: the cache is gone, and uslab works as before. */
static void child_finish(uslab_cache_t *c, int reap)
{
    if (reap)
        uslab_cache_destroy(c);
    for (int k = 0; k < 50; k++) {
        uslab_cache_t *d = uslab_cache_create("child", 40, 0, NULL, NULL, NULL, NULL, 0);
        CHECK(d != NULL, "create");
        uslab_cache_free(d, uslab_cache_alloc(d));
        uslab_cache_destroy(d);
    }
    uslab_reap();
    _exit(0);
}

int main(int argc, char **argv)
{
    CHECK(argc == 2 && (strcmp(argv[1], "destroy") == 0 || strcmp(argv[1], "reap") == 0),
          "usage: fork_in_dtor destroy|reap");
    int reap = strcmp(argv[1], "reap") == 0;
    side = uslab_cache_create("side", 64, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(side != NULL, "create");
    pthread_t t;
    CHECK(pthread_create(&t, NULL, spinner, NULL) == 0, "thread");
    for (int round = 0; round < ROUNDS; round++) {
        forked = 0;
        uslab_cache_t *c = uslab_cache_create("forking", 128, 0, NULL, dtor, NULL, NULL, 0);
        CHECK(c != NULL, "create");
        void *objs[OBJECTS];
        for (int i = 0; i < OBJECTS; i++)
            CHECK((objs[i] = uslab_cache_alloc(c)) != NULL, "alloc");
        for (int i = 0; i < OBJECTS; i++)
            uslab_cache_free(c, objs[i]);
        if (reap) {
            uslab_cache_reap(c); /* its flush forks */
            if (in_child)
                child_finish(c, 1);
        }
        uslab_cache_destroy(c); /* without a reap, its drain forks */
        if (in_child)
            child_finish(c, 0);
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    pthread_join(t, NULL);
    uslab_cache_destroy(side);
    TEST_DONE();
}
