/* SPDX-License-Identifier: MIT */
/*
 * test_fork_threads.c - fork, repeatedly, while other threads are allocating and freeing
 * (malloc classes and an object cache). Each child must be able to allocate and free at
 * once (no lock left held by a thread that does not exist in the child), verify what it
 * got, and exit 0; a deadlock in the child is turned into a failure by alarm().
 */
#include "mt_common.h"

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#define WORKERS 3
#define FORKS   MT_SCALED(60)

static uslab_cache_t *cache;
static int stop; /* atomic: read by the workers, set once by main */

static void *worker(void *arg)
{
    uint64_t seed = (uint64_t)(uintptr_t)arg;
    void *slot[64] = {0};
    size_t size[64] = {0};
    while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
        unsigned i = (unsigned)(mt_rand(&seed) % 64);
        if (slot[i]) {
            CHECK(mt_check(slot[i], size[i], (uintptr_t)slot[i]), "worker block corrupted");
            if (size[i] == 0)
                uslab_cache_free(cache, slot[i]);
            else
                MT_FREE(slot[i]);
            slot[i] = NULL;
        } else if (mt_rand(&seed) & 1) {
            size[i] = 1 + mt_rand(&seed) % 2000;
            slot[i] = MT_MALLOC(size[i]);
            mt_fill(slot[i], size[i], (uintptr_t)slot[i]);
        } else {
            size[i] = 0;
            slot[i] = uslab_cache_alloc(cache);
        }
    }
    for (int i = 0; i < 64; i++)
        if (slot[i] && size[i] == 0)
            uslab_cache_free(cache, slot[i]);
        else if (slot[i])
            MT_FREE(slot[i]);
    return NULL;
}

static int child_work(void)
{
    alarm(20);
    uint64_t seed = 42;
    void *p[2000];
    size_t n[2000];
    for (int i = 0; i < 2000; i++) {
        n[i] = 1 + mt_rand(&seed) % 3000;
        p[i] = MT_MALLOC(n[i]);
        if (!p[i])
            return 2;
        mt_fill(p[i], n[i], (uintptr_t)i);
    }
    void *o[500];
    for (int i = 0; i < 500; i++)
        if (!(o[i] = uslab_cache_alloc(cache)))
            return 3;
    for (int i = 0; i < 2000; i++) {
        if (!mt_check(p[i], n[i], (uintptr_t)i))
            return 4;
        MT_FREE(p[i]);
    }
    for (int i = 0; i < 500; i++)
        uslab_cache_free(cache, o[i]);
    /* A thread in the child must work too. */
    pthread_t t;
    stop = 0;
    if (pthread_create(&t, NULL, worker, (void *)99) != 0)
        return 5;
    usleep(1000);
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    pthread_join(t, NULL);
    return 0;
}

int main(void)
{
    cache = uslab_cache_create("forked", 80, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(cache != NULL, "create");
    pthread_t th[WORKERS];
    for (int i = 0; i < WORKERS; i++)
        CHECK(pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)(i + 1)) == 0, "thread");
    for (int f = 0; f < FORKS; f++) {
        usleep(2000);
        pid_t pid = fork();
        CHECK(pid >= 0, "fork");
        if (pid == 0)
            _exit(child_work());
        int status = 0;
        CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "fork %d: child %s %d", f,
              WIFEXITED(status) ? "exited with" : "killed by signal",
              WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(th[i], NULL);
    TEST_DONE();
}
