/* SPDX-License-Identifier: MIT */
/*
 * purge.c - the purger (docs/design.md §3, §4): gives idle memory back to the system
 * without waiting for further allocator activity.
 *
 * An empty slab beyond its cache's reserve is not purged when it empties (a program that
 * frees a batch and allocates again would fault every page back in: the thesis' slab
 * create/destroy churn). It is stamped with the time and purged once it has been idle for
 * USLAB_PURGE_DELAY milliseconds. Each pass also reaps each depot's unused magazines
 * (Bonwick & Adams §3.6: what stayed in the depot for a whole interval was not needed),
 * whose objects then empty slabs that a later pass purges.
 *
 * The work is done by one background thread, started on first need (never in a process
 * that frees nothing), which sleeps on a condition variable while nothing is pending and
 * runs a pass every half delay otherwise. USLAB_PURGE_DELAY=0 purges at once and never
 * starts the thread. The purger's lock is a leaf: it is never held while taking another,
 * and never during the pass. The pass itself (reclaim.c, above the depot) is handed in at
 * initialisation, so this file calls nothing above it.
 */
#include "internal.h"

#include <signal.h>

static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int pending;  /* something may be waiting to be given back (under lock) */
    int starting; /* the thread was asked for, in this process (atomic; reset in a child) */
} purger = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};

/* The pass, set once at initialisation before anything can kick the purger. */
static int (*purge_pass)(uint64_t now_ms);

void usi_purge_set_pass(int (*pass)(uint64_t now_ms))
{
    purge_pass = pass;
}

static void *purger_main(void *arg)
{
    (void)arg;
    size_t tick = usi_options.purge_delay_ms / 2 ? usi_options.purge_delay_ms / 2 : 1;
    for (;;) {
        usi_lock(&purger.lock);
        while (!purger.pending)
            pthread_cond_wait(&purger.wake, &purger.lock);
        purger.pending = 0;
        usi_unlock(&purger.lock);
        usi_os_sleep_ms(tick);
        USI_ASSERT_NO_LOCK();
        if (purge_pass(usi_os_now_ms())) {
            usi_lock(&purger.lock);
            purger.pending = 1;
            usi_unlock(&purger.lock);
        }
    }
    return NULL;
}

static void purger_start(void)
{
    pthread_attr_t attr;
    sigset_t all, old;
    pthread_t t;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, (size_t)256 << 10);
    /* The purger must never receive the program's signals. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    if (pthread_create(&t, &attr, purger_main, NULL) != 0) {
        usi_report_note("cannot start the purger thread; purging empty slabs at once");
        usi_options.purge_delay_ms = 0;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
}

void usi_purge_kick(void)
{
    if (usi_options.purge_delay_ms == 0)
        return;
    usi_lock(&purger.lock);
    purger.pending = 1;
    pthread_cond_signal(&purger.wake);
    usi_unlock(&purger.lock);
    /* Started with no lock held: pthread_create may allocate and free (through uslab),
     * which may kick again; that kick finds `starting` set. */
    if (!__atomic_load_n(&purger.starting, __ATOMIC_ACQUIRE) &&
        !__atomic_exchange_n(&purger.starting, 1, __ATOMIC_ACQ_REL))
        purger_start();
}

void usi_purge_postfork_child(void)
{
    pthread_mutex_init(&purger.lock, NULL);
    pthread_cond_init(&purger.wake, NULL);
    purger.starting = 0; /* the thread did not survive the fork */
    purger.pending = 0;
}
