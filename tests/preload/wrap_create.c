/* SPDX-License-Identifier: MIT */
/*
 * wrap_create.c - a second interposer of pthread_create, as tracing tools write one: the
 * start routine and its argument go in a malloc'd record, and glibc's function (or the
 * next interposer's) is found with dlsym(RTLD_NEXT). Preloaded before uslab, it is the
 * pthread_create the purger's start calls (the first in lookup order, design §3).
 *
 * Used by preload_purger_wrapped: a signal handler's first large free started the purger
 * while its thread was in the middle of a magazine exchange; the purger's start called
 * this pthread_create, whose small malloc nested an exchange into the interrupted one and
 * handed a magazine back twice ("double free ... in cache uslab-magazine", in 1-2% of the
 * stress's children; the seventh audit). Now no kick starts the thread during an exchange.
 *
 * Preloaded after uslab, it is the next definition that uslab's own pthread_create must
 * call (what dlsym(RTLD_NEXT) would find; hooks.c looks it up in the objects' symbol
 * tables): preload_next_hook counts its calls (wrap_create_calls).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);

struct record {
    void *(*start)(void *);
    void *arg;
};

static void *trampoline(void *p)
{
    struct record r = *(struct record *)p;
    free(p);
    return r.start(r.arg);
}

__attribute__((visibility("default"))) unsigned long wrap_create_calls;

int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*start)(void *), void *arg)
{
    static create_fn next;
    create_fn f = __atomic_load_n(&next, __ATOMIC_ACQUIRE);
    if (!f) {
        f = (create_fn)(uintptr_t)dlsym(RTLD_NEXT, "pthread_create");
        if (!f)
            return ENOSYS;
        __atomic_store_n(&next, f, __ATOMIC_RELEASE);
    }
    __atomic_fetch_add(&wrap_create_calls, 1, __ATOMIC_RELAXED);
    struct record *r = malloc(sizeof *r);
    if (!r)
        return EAGAIN;
    r->start = start;
    r->arg = arg;
    int e = f(t, attr, trampoline, r);
    if (e)
        free(r);
    return e;
}
