/* SPDX-License-Identifier: MIT */
/* mt_common.h - helpers of the thread-layer tests: allocator selection, fills, RSS. */
#ifndef USLAB_MT_COMMON_H
#define USLAB_MT_COMMON_H

#include "check.h"
#include "testutil.h"
#include "uslab.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Built twice: against libuslab (uslab_malloc) and, with MT_PLAIN_MALLOC, against plain
 * malloc to run under LD_PRELOAD of libuslab-preload. */
#ifdef MT_PLAIN_MALLOC
#define MT_MALLOC(n) malloc(n)
#define MT_FREE(p)   free(p)
#else
#define MT_MALLOC(n) uslab_malloc(n)
#define MT_FREE(p)   uslab_free(p)
#endif

/* Starts a thread that uses the allocator and then waits, detached, until the process
 * exits. Under USLAB_PURGER=inline the purger thread runs only while at least two threads use
 * uslab (design §3): a thread started and joined first is no longer enough. */
static inline void *mt_parked_main(void *arg)
{
    void *volatile p = MT_MALLOC(64); /* volatile: a malloc/free pair may be elided */
    MT_FREE(p);
    for (;;)
        pause();
    return arg;
}

static inline int mt_park_thread(void)
{
    pthread_t t;
    return pthread_create(&t, NULL, mt_parked_main, NULL) == 0 && pthread_detach(t) == 0;
}

/* Sanitizer runtimes add their own resident memory: memory bounds are not checked there. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define MT_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define MT_SANITIZED 1
#endif
#endif
#ifndef MT_SANITIZED
#define MT_SANITIZED 0
#endif

/* The longest wait, in milliseconds, for memory to go back. Under a sanitizer the bound is
 * not checked, so the wait only has to let several passes run beside the program: a second
 * (the full waits were 90 s of TSan's run, every one to its end). */
#define MT_WAIT_MS(ms) (MT_SANITIZED ? 1000 : (ms))

/* A count of rounds (forks, threads, objects) whose size gives a test its odds of catching a
 * rare interleaving: a quarter of it under a sanitizer, which runs the program 5-15 times
 * slower and is there for what it reports, not for those odds, and where the build defines
 * MT_FEWER (tests/thread/CMakeLists.txt: the UBSan tree, and the plain-malloc copies run
 * under LD_PRELOAD, whose API twins keep the odds). */
#if MT_SANITIZED || defined(MT_FEWER)
#define MT_SCALED(n) ((n) / 4)
#else
#define MT_SCALED(n) (n)
#endif

static inline uint64_t mt_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Fills p[0..n) with a pattern derived from tag; mt_check verifies it. */
static inline void mt_fill(void *p, size_t n, uint64_t tag)
{
    unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(tag + i * 131);
}

static inline int mt_check(const void *p, size_t n, uint64_t tag)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != (unsigned char)(tag + i * 131))
            return 0;
    return 1;
}

static inline size_t mt_rss(void)
{
    return resident_bytes();
}

#endif
