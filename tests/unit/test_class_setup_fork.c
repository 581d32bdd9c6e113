/* SPDX-License-Identifier: MIT */
/*
 * test_class_setup_fork.c - a fork while another thread sets a malloc class up (design §7).
 * The set-up holds init_lock; the fork handler takes that lock too, so the fork waits for
 * the set-up to end, and the child finds every class either set up or untouched. Without
 * that, a child forked mid-set-up inherited init_lock held by a thread it does not have
 * (its first malloc of a new class hung), or a class registered but not marked ready,
 * whose set-up the child then ran again ("its cache id is taken").
 *
 * The test build's lock hook (os.h's usi_test_lock_hook, defined here) runs after every
 * uslab lock and unlock: the worker's first unlock in the first allocation of each class
 * (the registry's, in usi_class_setup: the class has its id, and is not marked ready yet)
 * tells the main thread, then waits 5 ms, holding init_lock, while the main thread forks.
 * Each child allocates a block of every class (and sets up those nobody had) under a 20 s
 * alarm.
 */
#define _GNU_SOURCE
#include "check.h"
#include "options.h"
#include "os.h"
#include "pages.h"
#include "sizeclass.h"
#include "uslab.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static pthread_t worker_thread;
static int worker_armed, in_setup, worker_done;

void usi_test_lock_hook(const void *m, int taken)
{
    if (taken)
        return;
    (void)m;
    if (__atomic_load_n(&worker_armed, __ATOMIC_ACQUIRE) &&
        pthread_equal(pthread_self(), worker_thread)) {
        __atomic_store_n(&worker_armed, 0, __ATOMIC_RELAXED);
        __atomic_store_n(&in_setup, 1, __ATOMIC_RELEASE);
        usleep(5000); /* the main thread forks now */
    }
}

#define CLASSES 12

static size_t size_of_class(unsigned k)
{
    return 1000 + 2500 * (size_t)k; /* 1000 .. 28500 bytes: 12 classes above 1 KiB */
}

static void *worker(void *arg)
{
    (void)arg;
    for (unsigned k = 0; k < CLASSES; k++) {
        __atomic_store_n(&worker_armed, 1, __ATOMIC_RELEASE);
        void *p = uslab_malloc(size_of_class(k));
        if (!p || usi_pagemap_lookup(p) == 0)
            _exit(3); /* not a slab block */
        uslab_free(p);
        while (__atomic_load_n(&in_setup, __ATOMIC_ACQUIRE)) /* until the fork */
            sched_yield();
    }
    __atomic_store_n(&worker_done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void child(void)
{
    alarm(20); /* a hang is the failure: SIGALRM kills */
    for (size_t size = 16; size <= usi_options.max_slab_size; size += 16 + size / 8) {
        unsigned char *p = uslab_malloc(size);
        if (!p || usi_pagemap_lookup(p) == 0)
            _exit(2);
        memset(p, 0x3c, size);
        for (size_t i = 0; i < size; i += 64)
            if (p[i] != 0x3c)
                _exit(4);
        uslab_free(p);
    }
    _exit(0);
}

int main(void)
{
    uslab_free(uslab_malloc(64)); /* initialises uslab */
    for (unsigned k = 0; k < CLASSES; k++) {
        unsigned id = usi_sizeclass_of_large(size_of_class(k));
        CHECK(!usi_class_caches[id], "class %u was set up before its first use", id);
        CHECK(k == 0 || id != usi_sizeclass_of_large(size_of_class(k - 1)), "two sizes, one class");
    }
    CHECK(pthread_create(&worker_thread, NULL, worker, NULL) == 0, "pthread_create");
    int forks = 0;
    while (!__atomic_load_n(&worker_done, __ATOMIC_ACQUIRE)) {
        if (!__atomic_load_n(&in_setup, __ATOMIC_ACQUIRE)) {
            sched_yield();
            continue;
        }
        pid_t pid = fork(); /* the worker holds init_lock: this waits for it */
        CHECK(pid >= 0, "fork");
        if (pid == 0)
            child();
        __atomic_store_n(&in_setup, 0, __ATOMIC_RELEASE);
        int status;
        CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "child %d forked during a class set-up: %s %d", forks,
              WIFEXITED(status) ? "exit" : "signal",
              WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        forks++;
    }
    CHECK(pthread_join(worker_thread, NULL) == 0, "pthread_join");
    CHECK(forks == CLASSES, "%d forks, one per class set-up expected (%d)", forks, CLASSES);
    printf("ok: %d children forked during a class set-up\n", forks);
    return 0;
}
