/* SPDX-License-Identifier: MIT */
/*
 * test_fork_mid_exchange.c - a fork while another thread exchanges magazines with the
 * depot (docs/design.md §7). The exchange holds its thread cache's lock, which the fork
 * handler takes too: the fork waits for the exchange to end, and the child adopts the
 * worker's pair whole. Before session 14 the exchange took no lock; a fork in its middle
 * left that pair to the child unadopted (a magazine may have been named twice), and the
 * objects of its magazines counted as live in the child for good: its
 * uslab_cache_destroy aborted with "live objects" (session 13's audit stress: 49 of 200
 * children).
 *
 * The test build's lock hook (os.h's usi_test_lock_hook, defined here) runs after every
 * uslab lock and unlock: armed, the worker's first unlock inside an exchange (its thread
 * cache's `exchange_seq` is odd; the depot's lock, say, released mid-exchange, not the
 * thread cache's own) tells the main thread to fork and waits 5 ms there. After that free
 * returns, the worker waits for the fork, so the child's copy of it is between two frees.
 * The child frees the objects the worker had not freed yet and destroys the cache, which
 * must find no live object (an abort is the failure), then checks that every object is
 * back.
 */
#define _GNU_SOURCE
#include "check.h"
#include "os.h"
#include "tcache.h"
#include "uslab.h"

#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define ROUNDS  20
#define OBJECTS 700 /* several magazines' worth: frees exchange with the depot */

static pthread_t worker_thread;
static int armed, go_fork, forked, paused_in_exchange; /* atomic */
static uslab_cache_t *cache;
static void *held[OBJECTS];
static long next_free; /* atomic: the index the worker frees next */

void usi_test_lock_hook(const void *m, int taken)
{
    if (taken)
        return;
    if (__atomic_load_n(&armed, __ATOMIC_ACQUIRE) && pthread_equal(pthread_self(), worker_thread) &&
        (usi_tls->exchange_seq & 1) && m != &usi_tls->lock) {
        __atomic_store_n(&armed, 0, __ATOMIC_RELAXED);
        __atomic_fetch_add(&paused_in_exchange, 1, __ATOMIC_RELAXED);
        __atomic_store_n(&go_fork, 1, __ATOMIC_RELEASE);
        usleep(5000); /* mid-exchange: the main thread forks now */
    }
}

static void *worker(void *arg)
{
    (void)arg;
    for (int round = 0; round < ROUNDS; round++) {
        for (long i = 0; i < OBJECTS; i++) {
            held[i] = uslab_cache_alloc(cache);
            if (!held[i])
                _exit(3);
            memset(held[i], (int)(i & 0xff), 48);
        }
        __atomic_store_n(&forked, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&armed, 1, __ATOMIC_RELEASE);
        for (long i = 0; i < OBJECTS; i++) {
            __atomic_store_n(&next_free, i, __ATOMIC_RELEASE);
            uslab_cache_free(cache, held[i]);
            if (__atomic_load_n(&go_fork, __ATOMIC_ACQUIRE)) /* this free paused: wait */
                while (!__atomic_load_n(&forked, __ATOMIC_ACQUIRE))
                    sched_yield();
        }
        __atomic_store_n(&armed, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&next_free, OBJECTS, __ATOMIC_RELEASE);
    }
    return NULL;
}

static void child(void)
{
    alarm(20);
    /* The free of held[next_free] had returned: the worker waited after it. */
    for (long i = __atomic_load_n(&next_free, __ATOMIC_ACQUIRE) + 1; i < OBJECTS; i++) {
        for (int b = 0; b < 48; b++)
            if (((unsigned char *)held[i])[b] != (unsigned char)(i & 0xff))
                _exit(4);
        uslab_cache_free(cache, held[i]);
    }
    struct uslab_cache_stats st;
    if (uslab_cache_stats(cache, &st) != 0 || st.active_objects != 0)
        _exit(5);
    uslab_cache_destroy(cache); /* aborts if any object is still counted live */
    _exit(0);
}

int main(void)
{
    alarm(120);
    cache = uslab_cache_create("mid-exchange", 48, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(cache, "uslab_cache_create");
    CHECK(pthread_create(&worker_thread, NULL, worker, NULL) == 0, "pthread_create");
    int forks = 0;
    for (int round = 0; round < ROUNDS; round++) {
        while (!__atomic_load_n(&go_fork, __ATOMIC_ACQUIRE)) /* SIGALRM if never */
            sched_yield();
        pid_t pid = fork(); /* the worker is inside an exchange: this waits for its end */
        CHECK(pid >= 0, "fork");
        if (pid == 0)
            child();
        __atomic_store_n(&go_fork, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&forked, 1, __ATOMIC_RELEASE);
        int status;
        CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "child %d, forked during an exchange: %s %d", round,
              WIFEXITED(status) ? "exit" : "signal",
              WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        forks++;
    }
    CHECK(pthread_join(worker_thread, NULL) == 0, "pthread_join");
    CHECK(__atomic_load_n(&paused_in_exchange, __ATOMIC_RELAXED) == ROUNDS,
          "%d of %d rounds paused inside an exchange", paused_in_exchange, ROUNDS);
    uslab_cache_destroy(cache);
    printf("ok: %d children forked while the worker exchanged magazines\n", forks);
    return 0;
}
