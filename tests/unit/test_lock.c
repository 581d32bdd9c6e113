/* SPDX-License-Identifier: MIT */
/*
 * test_lock.c - uslab's lock (base.h's usi_mutex, os.h's usi_lock; design §6): mutual
 * exclusion under contention (threads add to a counter that only the lock protects, with
 * lock and trylock), a waiter put to sleep and woken by the unlock (errno untouched by
 * both), trylock on a held lock, and the depth and count every lock keeps.
 */
#define _GNU_SOURCE
#include "base.h"
#include "check.h"
#include "os.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#define THREADS 4
#define ROUNDS  200000

static usi_mutex lock = USI_MUTEX_INIT;
static unsigned long counter; /* only under `lock`: plain loads and stores */
static unsigned long tried;   /* trylock successes, under `lock` */

static void *adder(void *arg)
{
    (void)arg;
    for (long i = 0; i < ROUNDS; i++) {
        if (i % 7 == 0 && usi_trylock(&lock) == 0) {
            tried++;
        } else {
            usi_lock(&lock);
        }
        unsigned long v = counter; /* a lost update shows in the total */
        if (i % 64 == 0)
            sched_yield(); /* held across a yield: others must wait, some in the kernel */
        counter = v + 1;
        usi_unlock(&lock);
    }
    CHECK(usi_lock_depth == 0, "no lock held after the adder's loop");
    return NULL;
}

static void test_exclusion(void)
{
    unsigned long before = counter;
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, adder, NULL) == 0, "pthread_create");
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    CHECK(counter - before == (unsigned long)THREADS * ROUNDS,
          "every increment under the lock counted");
    CHECK(tried > 0, "some trylocks succeeded");
}

static void *blocked(void *arg)
{
    int *done = arg;
    errno = 1234;
    usi_lock(&lock); /* held by the main thread: sleeps until its unlock */
    CHECK(errno == 1234, "errno kept by a lock that waited");
    counter++;
    usi_unlock(&lock);
    __atomic_store_n(done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static int signals; /* atomic: handler runs */

static void on_signal(int sig)
{
    (void)sig;
    __atomic_fetch_add(&signals, 1, __ATOMIC_RELAXED);
}

static void test_wake(void)
{
    /* Signals interrupt the waiter's sleep (no SA_RESTART: EINTR), which must not show in
     * its errno. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGUSR1, &sa, NULL);
    int done = 0;
    usi_lock(&lock);
    CHECK(usi_trylock(&lock) != 0, "trylock fails on a held lock");
    unsigned long before = counter;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, blocked, &done) == 0, "pthread_create");
#if !USI_TSAN
    /* The waiter marks the word contended (2) before it sleeps: the unlock must wake it. */
    while (__atomic_load_n(&lock.word, __ATOMIC_ACQUIRE) != 2)
        sched_yield();
#endif
    for (int i = 0; i < 20; i++) {
        pthread_kill(t, SIGUSR1);
        while (__atomic_load_n(&signals, __ATOMIC_ACQUIRE) <= i)
            sched_yield();
    }
    CHECK(!__atomic_load_n(&done, __ATOMIC_ACQUIRE), "the waiter did not get a held lock");
    errno = 4321;
    usi_unlock(&lock);
    CHECK(errno == 4321, "errno kept by an unlock that woke a waiter");
    pthread_join(t, NULL);
    CHECK(done && counter == before + 1, "the waiter woke and took the lock");
#if !USI_TSAN
    CHECK(lock.word == 0, "free again");
#endif
    CHECK(usi_trylock(&lock) == 0, "trylock takes a free lock");
    usi_unlock(&lock);
}

static void test_depth_and_count(void)
{
    usi_mutex a = USI_MUTEX_INIT, b;
    usi_mutex_init(&b);
    unsigned depth = usi_lock_depth;
#ifdef USLAB_ASSERTS
    unsigned long taken = uslab_locks_taken();
#endif
    usi_lock(&a);
    CHECK(usi_trylock(&b) == 0, "trylock of a second lock");
    CHECK(usi_lock_depth == depth + 2, "two locks held");
    CHECK(usi_trylock(&a) != 0 && usi_lock_depth == depth + 2, "a failed trylock counts nothing");
    usi_unlock(&b);
    usi_unlock(&a);
    CHECK(usi_lock_depth == depth, "none held");
#ifdef USLAB_ASSERTS
    CHECK(uslab_locks_taken() == taken + 2, "two locks taken");
#endif
}

int main(void)
{
    test_depth_and_count();
    test_wake();
    test_exclusion();
    TEST_DONE();
}
