/* SPDX-License-Identifier: MIT */
/*
 * thread_loop.c - N times: a thread is created, mallocs and frees one 64-byte block, and is
 * joined (test_thread_budget.sh counts the instructions with callgrind, under uslab's
 * preload library and under glibc alone). Prints "ok".
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static void *run(void *arg)
{
    void *volatile p = malloc(64); /* volatile: the pair must not be elided */
    free(p);
    return arg;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 100;
    for (int i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, run, NULL) != 0 || pthread_join(t, NULL) != 0)
            return 1;
    }
    puts("ok");
    return 0;
}
