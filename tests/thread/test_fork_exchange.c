/* SPDX-License-Identifier: MIT */
/*
 * test_fork_exchange.c - fork while other threads are in the middle of magazine exchanges
 * (docs/design.md §7). Workers use objects big enough that a magazine holds 4 of them, and
 * allocate and free 6 at a time, so nearly every burst trades magazines with the depot.
 * Each child then allocates many objects of the same cache and class and checks that no
 * block is handed out twice (sorted addresses, all distinct) and that the contents written
 * into each survive the others' writes. A magazine that the child put back into the depot a
 * second time (from a pair that its owner was changing at the moment of fork) shows up as
 * a duplicate address.
 *
 * How sharp (session 55): with prefork made to skip the thread caches' locks (a scratch
 * build), a fork caught it with a chance of about 1%, whether the child allocated 60, 200 or
 * 1,500 objects of each kind (first catches, 8 runs each, at forks 2 to 379). A child of 200
 * takes a quarter of the time of one of 1,500, so the test makes 400 forks of 200 (about 96%
 * to catch that bug, and 12 s) where it made 150 of 1,500 (78%, 17 s); 100 where MT_SCALED says.
 */
#include "mt_common.h"

#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#define WORKERS  3
#define FORKS    MT_SCALED(400)
#define OBJ_SIZE 8000 /* 32 KiB / 8000: 4 objects per magazine */
#define BURST    6
#define CHILD_N  200

static uslab_cache_t *cache;
static int stop; /* atomic */

static void *worker(void *arg)
{
    uint64_t tag = (uint64_t)(uintptr_t)arg;
    void *c[BURST], *m[BURST];
    while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
        for (int i = 0; i < BURST; i++) {
            c[i] = uslab_cache_alloc(cache);
            m[i] = MT_MALLOC(OBJ_SIZE);
            CHECK(c[i] && m[i], "worker allocation");
            *(uint64_t *)c[i] = tag;
            *(uint64_t *)m[i] = tag;
        }
        for (int i = 0; i < BURST; i++) {
            CHECK(*(uint64_t *)c[i] == tag && *(uint64_t *)m[i] == tag, "worker block changed");
            uslab_cache_free(cache, c[i]);
            MT_FREE(m[i]);
        }
    }
    return NULL;
}

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

/* 0 when every block is distinct and keeps what was written into it. */
static int child_check(void **p, int n)
{
    for (int i = 0; i < n; i++)
        *(uint64_t *)p[i] = (uint64_t)i * 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n; i++)
        if (*(uint64_t *)p[i] != (uint64_t)i * 0x9e3779b97f4a7c15ull)
            return 1;
    qsort(p, (size_t)n, sizeof *p, cmp_ptr);
    for (int i = 1; i < n; i++)
        if (p[i] == p[i - 1])
            return 1;
    return 0;
}

static int child_work(void)
{
    alarm(30);
    static void *c[CHILD_N], *m[CHILD_N];
    for (int i = 0; i < CHILD_N; i++) {
        c[i] = uslab_cache_alloc(cache);
        m[i] = MT_MALLOC(OBJ_SIZE);
        if (!c[i])
            return 2;
        if (!m[i])
            return 5;
    }
    if (child_check(c, CHILD_N))
        return 3;
    if (child_check(m, CHILD_N))
        return 4;
    return 0;
}

int main(void)
{
    cache = uslab_cache_create("exchange", OBJ_SIZE, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(cache != NULL, "create");
    pthread_t th[WORKERS];
    for (int i = 0; i < WORKERS; i++)
        CHECK(pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)(i + 1)) == 0, "thread");
    for (int f = 0; f < FORKS; f++) {
        usleep(500);
        pid_t pid = fork();
        CHECK(pid >= 0, "fork");
        if (pid == 0)
            _exit(child_work());
        int status = 0;
        CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "fork %d: child %s %d (3/4: a block handed out twice in the child)", f,
              WIFEXITED(status) ? "exited with" : "killed by signal",
              WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(th[i], NULL);
    TEST_DONE();
}
