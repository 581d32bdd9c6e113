/* SPDX-License-Identifier: MIT */
/*
 * test_fillers.c - threads that fill one class at once take its objects from a slab each
 * (design §3, "Fillers"):
 *  - two threads that malloc blocks of one class in turns share no cache line: with 8
 *    blocks of 16 bytes a turn (before fillers their fills alternated on one slab and every
 *    boundary between them was a shared line, which each write of either thread took from
 *    the other's core: `mt glibcthread` ran 1.3x to 1.8x one thread's time), and with one
 *    block of 144 bytes a turn, the slow start's fills of one object (while only pairs past
 *    it were fillers, 79 lines of 80 held blocks of both); a class whose stride is a
 *    multiple of a line (192, 2048 bytes) shares none with one slab for both threads;
 *  - a thread's filler number goes to the next thread at its exit, which fills the slab the
 *    first left partial (while each thread's number was new, it made a slab of its own);
 *  - a fork child holds only its thread's number, so its next thread takes the number of a
 *    thread the parent had;
 *  - no two live threads hold one number, and with all 4,096 held a thread fills as none.
 * Deterministic: the threads take turns under a mutex, one at a time.
 */
#include "check.h"
#include "pages.h"
#include "slab.h"
#include "uslab.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

enum { ROUNDS = 40, MAX_BLOCKS = ROUNDS * 8 };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t turned = PTHREAD_COND_INITIALIZER;
static pthread_barrier_t done; /* neither exits while the other mallocs */
static int turn, per_turn;
static size_t size;
static void *blocks[2][MAX_BLOCKS];

static void *worker(void *arg)
{
    int me = (int)(intptr_t)arg;
    for (int r = 0; r < ROUNDS; r++) {
        pthread_mutex_lock(&lock);
        while (turn != me)
            pthread_cond_wait(&turned, &lock);
        for (int k = 0; k < per_turn; k++) {
            char *p = uslab_malloc(size);
            CHECK(p, "malloc");
            p[0] = (char)me; /* written, as a program would */
            blocks[me][r * per_turn + k] = p;
        }
        turn = !me;
        pthread_cond_broadcast(&turned);
        pthread_mutex_unlock(&lock);
    }
    /* A thread that exits gives its magazines to the depot, where the other's next fill
     * finds them: blocks beside its own, which it no longer writes. */
    pthread_barrier_wait(&done);
    return NULL;
}

static int cmp(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

/* The cache lines that hold (a byte of) blocks of both threads. */
static int shared_lines(int n)
{
    static uintptr_t lines[2 * MAX_BLOCKS * 4];
    int k = 0;
    for (int i = 0; i < 2; i++)
        for (int b = 0; b < n; b++)
            for (uintptr_t l = (uintptr_t)blocks[i][b] / 64;
                 l <= ((uintptr_t)blocks[i][b] + size - 1) / 64; l++)
                lines[k++] = l << 1 | (uintptr_t)i;
    qsort(lines, (size_t)k, sizeof lines[0], cmp);
    int shared = 0;
    for (int i = 1; i < k; i++)
        shared += (lines[i] >> 1) == (lines[i - 1] >> 1) && (lines[i] & 1) != (lines[i - 1] & 1);
    return shared;
}

static struct usi_slab *slab_of(void *p)
{
    return usi_slab_of_entry(usi_pagemap_lookup(p));
}

/* `one_slab`: a class whose stride is a multiple of a line has no line to share, so no
 * fillers: the second thread's first block comes from the first thread's slab (a slab a thread cost
 * each such class its first pages: `mt glibcthread` 0.875x the peak RSS without). */
static void in_turns(size_t bytes, int blocks_a_turn, int one_slab)
{
    size = bytes;
    per_turn = blocks_a_turn;
    turn = 0;
    pthread_barrier_init(&done, NULL, 2);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i) == 0, "pthread_create");
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&done);
    int n = ROUNDS * per_turn, shared = shared_lines(n);
    CHECK(shared == 0, "%zu bytes, %d a turn: %d cache lines hold blocks of both threads", bytes,
          blocks_a_turn, shared);
    CHECK((slab_of(blocks[1][0]) == slab_of(blocks[0][0])) == one_slab,
          "%zu bytes, %d a turn: the second thread's first block in %s", bytes, blocks_a_turn,
          one_slab ? "a slab of its own" : "the first thread's slab");
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < n; k++)
            uslab_free(blocks[i][k]);
    printf("%zu bytes, %d a turn: no shared line\n", bytes, blocks_a_turn);
}

/* A thread that mallocs `n` blocks of `size` bytes, keeps them, and notes its number. */
struct holder {
    size_t size;
    int n;
    void *blocks[64];
    unsigned filler;
};

static void *hold(void *arg)
{
    struct holder *h = arg;
    for (int i = 0; i < h->n; i++) {
        h->blocks[i] = uslab_malloc(h->size);
        CHECK(h->blocks[i], "malloc");
    }
    h->filler = usi_slab_filler();
    return NULL;
}

static void run_holder(struct holder *h)
{
    pthread_t t;
    CHECK(pthread_create(&t, NULL, hold, h) == 0, "pthread_create");
    pthread_join(t, NULL);
}

static void next_thread(void)
{
    struct holder a = {.size = 288, .n = 40}, b = {.size = 288, .n = 40};
    run_holder(&a);
    run_holder(&b);
    CHECK(a.filler != 0 && b.filler == a.filler, "the next thread's number %u, the first's %u",
          b.filler, a.filler);
    /* The first thread's leftovers (its magazine, flushed to the depot at its exit) and
     * the next thread's fills: all from the slab the first left partial. */
    struct usi_slab *s = slab_of(a.blocks[0]);
    for (int i = 0; i < b.n; i++)
        CHECK(slab_of(b.blocks[i]) == s, "the next thread's block %d is in another slab", i);
    for (int i = 0; i < a.n; i++) {
        uslab_free(a.blocks[i]);
        uslab_free(b.blocks[i]);
    }
    printf("the next thread fills the slab the first left\n");
}

static pthread_barrier_t forked;

static void *wait_for_fork(void *arg)
{
    hold(arg);
    pthread_barrier_wait(&forked); /* holds its number */
    pthread_barrier_wait(&forked); /* the fork is done */
    return NULL;
}

static void fork_child(void)
{
    struct holder mine = {.size = 320, .n = 1}, other = {.size = 320, .n = 1};
    hold(&mine); /* this thread's number */
    pthread_barrier_init(&forked, NULL, 2);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, wait_for_fork, &other) == 0, "pthread_create");
    pthread_barrier_wait(&forked);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        /* The other thread's number is free here: the child's next thread takes it. */
        struct holder next = {.size = 320, .n = 1};
        run_holder(&next);
        if (next.filler != other.filler) {
            fprintf(stderr, "the child's thread took number %u, not the parent's thread's %u\n",
                    next.filler, other.filler);
            _exit(1);
        }
        _exit(0);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "the fork child (status %d)", status);
    pthread_barrier_wait(&forked);
    pthread_join(t, NULL);
    CHECK(other.filler != mine.filler, "two live threads with number %u", mine.filler);
    uslab_free(mine.blocks[0]);
    uslab_free(other.blocks[0]);
    printf("a fork child's thread takes the number of a thread it has not\n");
}

/* 4,096 threads alive at once, the main thread holding a number already: each of the
 * others takes a number of its own at its first fill, but for one, which gets none. */
enum { ALL = 4096 };
static pthread_barrier_t all_alive;
static unsigned numbers[ALL];

static void *take_number(void *arg)
{
    unsigned *slot = arg;
    void *p = uslab_malloc(16);
    CHECK(p, "malloc");
    *slot = usi_slab_filler();
    pthread_barrier_wait(&all_alive);
    uslab_free(p);
    return NULL;
}

static void every_number(void)
{
    CHECK(usi_slab_filler() != 0, "the main thread holds a number");
    static pthread_t t[ALL];
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 << 10);
    pthread_barrier_init(&all_alive, NULL, ALL + 1);
    for (int i = 0; i < ALL; i++)
        CHECK(pthread_create(&t[i], &attr, take_number, &numbers[i]) == 0, "pthread_create %d", i);
    pthread_barrier_wait(&all_alive);
    for (int i = 0; i < ALL; i++)
        pthread_join(t[i], NULL);
    pthread_barrier_destroy(&all_alive);
    static unsigned char seen[ALL + 1];
    int none = 0;
    for (int i = 0; i < ALL; i++) {
        unsigned f = numbers[i];
        CHECK(f <= ALL && f != usi_slab_filler(), "thread %d: number %u", i, f);
        if (f == 0) {
            none++;
            continue;
        }
        CHECK(!seen[f], "two live threads hold number %u", f);
        seen[f] = 1;
    }
    CHECK(none == 1, "%d threads got no number, not 1", none);
    struct holder after = {.size = 16, .n = 1};
    run_holder(&after); /* the numbers went back with their threads */
    CHECK(after.filler != 0, "no number once the threads were gone");
    uslab_free(after.blocks[0]);
    pthread_attr_destroy(&attr);
    printf("%d live threads: distinct numbers, one with none\n", ALL);
}

int main(void)
{
    in_turns(16, 8, 0);
    in_turns(144, 1, 0); /* the slow start's one-object fills */
    in_turns(192, 1, 1); /* line-aligned: no fillers */
    in_turns(2048, 1, 1);
    next_thread();
    fork_child();
    every_number();
    TEST_DONE();
}
