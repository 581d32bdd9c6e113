/* SPDX-License-Identifier: MIT */
/*
 * next_hook.c - an interposer of pthread_create preloaded after uslab (wrap_create.c) must
 * still see every thread the program creates: uslab's hook calls the next definition in
 * lookup order, as dlsym(RTLD_NEXT) would give it, not glibc's directly (hooks.c finds it
 * in the loaded objects' symbol tables). Run with USLAB_PURGER=inline (the purger's thread
 * would be one more). Prints "next_hook ok".
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define THREADS 10

static void *routine(void *arg)
{
    void *volatile p = malloc(100);
    free(p);
    return arg;
}

int main(void)
{
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], NULL, routine, (void *)i) != 0)
            return 2;
    for (long i = 0; i < THREADS; i++) {
        void *r;
        if (pthread_join(t[i], &r) != 0 || r != (void *)i) {
            fprintf(stderr, "next_hook: thread %ld returned %p\n", i, r);
            return 1;
        }
    }
    unsigned long *calls = (unsigned long *)dlsym(RTLD_DEFAULT, "wrap_create_calls");
    if (!calls) {
        fprintf(stderr, "next_hook: the interposer is not loaded\n");
        return 2;
    }
    if (*calls != THREADS) {
        fprintf(stderr, "next_hook: the interposer saw %lu of %d creations\n", *calls, THREADS);
        return 1;
    }
    printf("next_hook ok\n");
    return 0;
}
