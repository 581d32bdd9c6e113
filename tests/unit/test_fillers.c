/* SPDX-License-Identifier: MIT */
/*
 * test_fillers.c - two threads that malloc blocks of one class in turns, each past its first
 * fills, take them from a slab each (design §3, "Fillers"), so that at most the lines of their
 * first, small fills hold blocks of both. Before fillers their fills alternated on one slab
 * and every boundary between them was a shared cache line, which each write of either thread
 * took from the other's core (`mt glibcthread` ran 1.3x to 1.8x one thread's time).
 * Deterministic: the threads take turns under a mutex, one at a time.
 */
#include "check.h"
#include "uslab.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

enum { ROUNDS = 40, PER_TURN = 8, BLOCKS = ROUNDS * PER_TURN, SIZE = 16 };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t turned = PTHREAD_COND_INITIALIZER;
static int turn;
static void *blocks[2][BLOCKS];

static void *worker(void *arg)
{
    int me = (int)(intptr_t)arg;
    for (int r = 0; r < ROUNDS; r++) {
        pthread_mutex_lock(&lock);
        while (turn != me)
            pthread_cond_wait(&turned, &lock);
        for (int k = 0; k < PER_TURN; k++) {
            char *p = uslab_malloc(SIZE);
            CHECK(p, "malloc");
            p[0] = (char)me; /* written, as a program would */
            blocks[me][r * PER_TURN + k] = p;
        }
        turn = !me;
        pthread_cond_broadcast(&turned);
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

static int cmp(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

int main(void)
{
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) == 0, "pthread_create");
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    /* Each block's line, tagged with its thread; a line with both tags is shared. */
    static uintptr_t lines[2 * BLOCKS];
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < BLOCKS; k++)
            lines[i * BLOCKS + k] = ((uintptr_t)blocks[i][k] / 64) << 1 | (uintptr_t)i;
    qsort(lines, 2 * BLOCKS, sizeof lines[0], cmp);
    int shared = 0;
    for (int i = 1; i < 2 * BLOCKS; i++)
        shared += (lines[i] >> 1) == (lines[i - 1] >> 1) && lines[i] != lines[i - 1];
    /* Without fillers: 10 here (a turn of 8 blocks is 2 lines: every other boundary). */
    CHECK(shared <= 4, "%d cache lines hold blocks of both threads", shared);
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < BLOCKS; k++)
            uslab_free(blocks[i][k]);
    printf("fillers ok (%d shared lines)\n", shared);
    TEST_DONE();
}
