/* SPDX-License-Identifier: MIT */
/*
 * thread_loop.c - N times: a thread is created, mallocs and frees one 64-byte block, and is
 * joined (test_thread_budget.sh counts the instructions with callgrind, under uslab's
 * preload library and under glibc alone). With a second argument B, the N threads live at
 * once, as `mt live`'s 3,000 do: each mallocs B blocks of 16 to 1,024 bytes (sizes stepping
 * through the small classes) and writes a byte of each; when all have, each frees its
 * blocks and exits. Prints "ok".
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static int blocks;
static pthread_barrier_t all;

static void *run(void *arg)
{
    if (blocks == 0) {
        void *volatile p = malloc(64); /* volatile: the pair must not be elided */
        free(p);
        return arg;
    }
    char *b[256];
    for (int k = 0; k < blocks; k++) {
        b[k] = malloc(16 + (size_t)(k * 37) % 1009);
        if (!b[k])
            abort();
        b[k][0] = (char)k;
    }
    pthread_barrier_wait(&all);
    for (int k = 0; k < blocks; k++)
        free(b[k]);
    return arg;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 100;
    blocks = argc > 2 ? atoi(argv[2]) : 0;
    if (blocks < 0 || blocks > 256 || n < 1)
        return 1;
    if (blocks) {
        pthread_t *t = malloc((size_t)n * sizeof *t);
        if (!t || pthread_barrier_init(&all, NULL, (unsigned)n) != 0)
            return 1;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 64 << 10);
        for (int i = 0; i < n; i++)
            if (pthread_create(&t[i], &attr, run, NULL) != 0)
                return 1;
        for (int i = 0; i < n; i++)
            if (pthread_join(t[i], NULL) != 0)
                return 1;
        pthread_attr_destroy(&attr);
        pthread_barrier_destroy(&all);
        free(t);
        puts("ok");
        return 0;
    }
    for (int i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, run, NULL) != 0 || pthread_join(t, NULL) != 0)
            return 1;
    }
    puts("ok");
    return 0;
}
