/* SPDX-License-Identifier: MIT */
/*
 * mutex_count.c - a preloadable shim that counts pthread_mutex_lock and _trylock calls
 * (placed before libuslab-preload.so in LD_PRELOAD, it sees uslab's lock calls, which go
 * through the PLT). The test program reads the count with dlsym("mutex_count").
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>

static unsigned long count;
static int (*real_lock)(pthread_mutex_t *);
static int (*real_trylock)(pthread_mutex_t *);

int pthread_mutex_lock(pthread_mutex_t *m)
{
    __atomic_fetch_add(&count, 1, __ATOMIC_RELAXED);
    if (!real_lock)
        real_lock = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_lock");
    return real_lock(m);
}

int pthread_mutex_trylock(pthread_mutex_t *m)
{
    __atomic_fetch_add(&count, 1, __ATOMIC_RELAXED);
    if (!real_trylock)
        real_trylock = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_trylock");
    return real_trylock(m);
}

unsigned long mutex_count(void);
unsigned long mutex_count(void)
{
    return __atomic_load_n(&count, __ATOMIC_RELAXED);
}
