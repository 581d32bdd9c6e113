/* SPDX-License-Identifier: MIT */
/*
 * test_dlclose.c - a program that dlopens libuslab, uses a cache until the purger thread
 * starts, then dlcloses it: the library must stay mapped (it is linked -z nodelete), or the
 * purger and the thread-exit key would run unmapped code.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>

typedef void *(*create_fn)(const char *, size_t, size_t, void *, void *, void *, void *, unsigned);
typedef void *(*alloc_fn)(void *);
typedef void (*free_fn)(void *, void *);

static void *worker(void *arg)
{
    (void)arg; /* a thread that exits after the dlclose: its exit key must still work */
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) {
        printf("dlopen: %s\n", dlerror());
        return 1;
    }
    create_fn create = (create_fn)dlsym(h, "uslab_cache_create");
    alloc_fn alloc = (alloc_fn)dlsym(h, "uslab_cache_alloc");
    free_fn release = (free_fn)dlsym(h, "uslab_cache_free");
    if (!create || !alloc || !release)
        return 1;
    void *c = create("dlclosed", 1000, 0, NULL, NULL, NULL, NULL, 0);
    static void *o[5000];
    for (int i = 0; i < 5000; i++)
        o[i] = alloc(c);
    for (int i = 0; i < 5000; i++)
        release(c, o[i]); /* empty slabs beyond the reserve: the purger thread starts */
    dlclose(h);
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_join(t, NULL);
    struct timespec ts = {1, 500000000}; /* the purger runs passes meanwhile */
    nanosleep(&ts, NULL);
    printf("survived dlclose\n");
    return 0;
}
