/* SPDX-License-Identifier: MIT */
/*
 * test_class_setup.c - a malloc class is set up at its first allocation (design §7), under
 * init_lock. A signal handler that interrupted its own thread there, holding that lock,
 * and whose malloc needs another class not set up yet would wait for the lock for ever; it
 * gets that one block from glibc instead.
 *
 * The test build's lock hook (os.h's usi_test_lock_hook, defined here) runs after every
 * uslab lock and unlock: armed, the first lock taken (init_lock, in usi_class_setup) raises
 * SIGUSR1 once it is held, and the handler mallocs a size of a second class not set up
 * yet. A hang is caught by SIGALRM.
 */
#define _GNU_SOURCE
#include "check.h"
#include "os.h"
#include "pages.h"
#include "sizeclass.h"
#include "uslab.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t armed, raised;
static void *volatile handler_block;

void usi_test_lock_hook(const void *m, int taken)
{
    (void)m;
    if (taken && armed) {
        armed = 0;
        raised = 1;
        raise(SIGUSR1); /* the handler runs now, with the lock held */
    }
}

#define FIRST  3000 /* two classes no allocation of the start-up touched */
#define SECOND 5000

static void on_usr1(int sig)
{
    (void)sig;
    handler_block = uslab_malloc(SECOND);
    if (handler_block)
        memset(handler_block, 0x5a, SECOND);
}

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "DEADLOCK: the handler's malloc waited for init_lock\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(1);
}

int main(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0, "sigaction");
    sa.sa_handler = on_alarm;
    CHECK(sigaction(SIGALRM, &sa, NULL) == 0, "sigaction");
    alarm(20);

    uslab_free(uslab_malloc(64)); /* initialises uslab; sets up one class */
    unsigned first = usi_sizeclass_of_large(FIRST);
    unsigned second = usi_sizeclass_of_large(SECOND);
    CHECK(first && second && first != second, "classes %u and %u", first, second);
    CHECK(!usi_class_caches[first] && !usi_class_caches[second],
          "the two classes were set up before their first allocation");

    armed = 1;
    void *p = uslab_malloc(FIRST);
    armed = 0;
    CHECK(raised, "no lock was taken by the first allocation of a class");
    CHECK(p && usi_pagemap_lookup(p) != 0, "the first class's block %p is not a slab block", p);
    CHECK(usi_class_caches[first] != NULL, "the first class is not set up");
    /* The handler's block: glibc's (no slab), whole, and freed like any other. */
    CHECK(handler_block, "the handler's malloc returned NULL");
    CHECK(usi_pagemap_lookup(handler_block) == 0, "the handler's block %p is in a slab",
          handler_block);
    CHECK(!usi_class_caches[second], "the handler set the second class up");
    for (int i = 0; i < SECOND; i++)
        CHECK(((unsigned char *)handler_block)[i] == 0x5a, "the handler's block at %d", i);
    uslab_free(handler_block);
    uslab_free(p);
    /* Outside the handler the second class is set up as usual. */
    void *q = uslab_malloc(SECOND);
    CHECK(q && usi_pagemap_lookup(q) != 0, "the second class's block %p is not a slab block", q);
    CHECK(usi_class_caches[second] != NULL, "the second class is not set up");
    uslab_free(q);
    printf("ok\n");
    return 0;
}
