/* SPDX-License-Identifier: MIT */
/*
 * test_kick_in_handler.c - a signal handler's allocation that kicks the purger while its
 * own thread holds the purger's lock (design §3, §6). A thread at exit holds that lock to
 * wake the purger (usi_purge_thread_exited), and a kick holds it to signal it; a handler
 * that interrupted either and whose malloc reached a kick waited for the lock for ever
 * (the fifth audit's reproducer hung in every run: SIGALRM every 100 us, a malloc in the
 * handler, threads created and joined). Now a kick only tries the lock, and schedules an
 * inline pass when it is busy.
 *
 * This program defines pthread_cond_signal and pthread_cond_broadcast itself, so that the
 * statically linked library's calls come here, with the purger's lock held: armed, they
 * raise SIGUSR1 first, whose handler kicks, as a handler's malloc would. A hang is caught
 * by SIGALRM. Runs with USLAB_PURGER=thread: the purger thread runs from the first kick.
 */
#define _GNU_SOURCE
#include "check.h"
#include "purge.h"
#include "uslab.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static int (*real_signal)(pthread_cond_t *);
static int (*real_broadcast)(pthread_cond_t *);
static pthread_t armed_thread;
static volatile sig_atomic_t armed, raised, handled;

static void maybe_raise(void)
{
    if (armed && pthread_equal(pthread_self(), armed_thread)) {
        armed = 0;
        raised = 1;
        raise(SIGUSR1); /* the handler runs now, on this thread, with the lock held */
    }
}

int pthread_cond_signal(pthread_cond_t *c)
{
    maybe_raise();
    return real_signal(c);
}

int pthread_cond_broadcast(pthread_cond_t *c)
{
    maybe_raise();
    return real_broadcast(c);
}

static void on_usr1(int sig)
{
    (void)sig;
    usi_purge_kick(); /* what a handler's malloc reaches on its slow path */
    handled = 1;
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "DEADLOCK: the handler's kick waited for the purger's lock\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(1);
}

static void *worker(void *arg)
{
    (void)arg;
    uslab_free(uslab_malloc(64)); /* a second thread that uses uslab */
    armed_thread = pthread_self();
    armed = 1; /* its exit broadcasts to the purger under the lock */
    return NULL;
}

int main(void)
{
    real_signal =
        (int (*)(pthread_cond_t *))dlvsym(RTLD_NEXT, "pthread_cond_signal", "GLIBC_2.3.2");
    real_broadcast =
        (int (*)(pthread_cond_t *))dlvsym(RTLD_NEXT, "pthread_cond_broadcast", "GLIBC_2.3.2");
    CHECK(real_signal && real_broadcast, "glibc's pthread_cond_signal/broadcast not found");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0, "sigaction");
    sa.sa_handler = on_alarm;
    CHECK(sigaction(SIGALRM, &sa, NULL) == 0, "sigaction");
    alarm(20);

    uslab_free(uslab_malloc(64));
    /* A kick inside a kick: the first starts the purger thread, a later one signals it
     * under the lock. */
    for (int i = 0; i < 1000 && !raised; i++) {
        armed_thread = pthread_self();
        armed = 1;
        usi_purge_kick();
        armed = 0;
        if (!raised)
            usleep(1000);
    }
    CHECK(raised, "no kick signalled the purger thread (is USLAB_PURGER=thread set?)");
    CHECK(handled, "the handler's kick did not return");

    /* A kick inside a thread's exit, which wakes the purger under the lock. */
    raised = handled = 0;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, worker, NULL) == 0, "pthread_create");
    CHECK(pthread_join(t, NULL) == 0, "pthread_join");
    CHECK(!raised || handled, "the handler's kick in the exiting thread did not return");
    printf("ok (exit case %s)\n", raised ? "raised" : "not reached");
    return 0;
}
