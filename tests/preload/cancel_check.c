/* SPDX-License-Identifier: MIT */
/*
 * cancel_check.c - uslab never makes a cancellation point, nor a call that another
 * preloaded library may wrap, inside malloc or free (docs/design.md §1, os layer). A worker
 * thread with a deferred pthread_cancel pending runs a loop of only malloc and free for
 * 0.5 s (slow paths: magazine exchanges, purges, the live statistics page made and
 * refreshed); under glibc it is cancelled only at the pthread_testcancel after the loop. A
 * thread cancelled inside uslab would leave its locks held: the next reap (or malloc of
 * its class) would hang, or an assertion would abort. Run with openwrap.so preloaded too,
 * which prints "openwrap:" for every open, openat or fopen that reaches it: the program
 * opens nothing itself, so any such line is uslab's (the test fails on it). Prints
 * "cancel ok".
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile int reached_end;

static long elapsed_ms(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

static void *worker(void *arg)
{
    (void)arg;
    static void *p[8000];
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long round = 0; elapsed_ms(&t0) < 500; round++) {
        int n = round % 8 == 0 ? 8000 : 2000;
        for (int i = 0; i < n; i++) {
            p[i] = malloc(16 + (size_t)((i + round) * 37) % 4000);
            if (!p[i])
                abort();
        }
        for (int i = 0; i < n; i++)
            free(p[i]);
    }
    reached_end = 1;
    pthread_testcancel();
    return NULL;
}

int main(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) != 0)
        return 1;
    usleep(20000);
    if (pthread_cancel(t) != 0)
        return 1;
    void *r;
    if (pthread_join(t, &r) != 0 || r != PTHREAD_CANCELED)
        return 1;
    if (!reached_end) {
        fprintf(stderr, "the worker was cancelled inside malloc or free\n");
        return 1;
    }
    /* The locks are free: more of the same, on this thread and a new one. */
    for (int i = 0; i < 100000; i++)
        free(malloc((size_t)(i % 3000) + 1));
    if (pthread_create(&t, NULL, worker, NULL) != 0 || pthread_join(t, &r) != 0)
        return 1;
    printf("cancel ok\n");
    return 0;
}
