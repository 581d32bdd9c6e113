/* SPDX-License-Identifier: MIT */
/*
 * test_calloc_fresh.c - calloc of blocks never written (design §8, "calloc"): a block of a
 * page or more that calloc takes from memory no one wrote since its span was made or purged
 * is not cleared again, so its pages past the first (which the handout writes) stay out of
 * memory until the program uses them, as glibc's mmapped blocks do. And every calloc'd
 * block reads as zero: fresh ones, ones written and freed before, and, in a random churn of
 * malloc, calloc, free and reaps, ones whose spans other classes used.
 */
#include "check.h"
#include "testutil.h"
#include "uslab.h"

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGE 4096u

/* The pages wholly inside [p, p + n) past p's own page that are resident. */
static size_t resident_inside(const void *p, size_t n)
{
    uintptr_t lo = ((uintptr_t)p + PAGE) & ~(uintptr_t)(PAGE - 1);
    uintptr_t hi = ((uintptr_t)p + n) & ~(uintptr_t)(PAGE - 1);
    if (hi <= lo)
        return 0;
    unsigned char vec[128];
    size_t pages = (hi - lo) / PAGE, count = 0;
    CHECK(pages <= sizeof vec, "block of %zu pages", pages);
    CHECK(mincore((void *)lo, hi - lo, vec) == 0, "mincore");
    for (size_t i = 0; i < pages; i++)
        count += vec[i] & 1;
    return count;
}

static int all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

int main(void)
{
    static const size_t sizes[] = {20000, 40000, 100000, 200000, 256 << 10};
    enum { K = sizeof sizes / sizeof sizes[0], N = 24 };
    unsigned char *b[K][N];
    /* Fresh: spans no one wrote (nothing is freed before all are taken); mincore before
     * anything reads them (a read would map the zero page). */
    for (size_t k = 0; k < K; k++)
        for (size_t i = 0; i < N; i++) {
            b[k][i] = uslab_calloc(1, sizes[k]);
            CHECK(b[k][i], "calloc(1, %zu)", sizes[k]);
            size_t r = resident_inside(b[k][i], sizes[k]);
            CHECK(r == 0, "calloc(1, %zu) #%zu: %zu of its pages resident before use", sizes[k], i,
                  r);
        }
    for (size_t k = 0; k < K; k++)
        for (size_t i = 0; i < N; i++) {
            size_t u = uslab_malloc_usable_size(b[k][i]);
            CHECK(all_zero(b[k][i], u), "fresh calloc(1, %zu) #%zu not zero", sizes[k], i);
            memset(b[k][i], 0xa5, u); /* dirty, for the next callocs */
            uslab_free(b[k][i]);
        }
    for (size_t k = 0; k < K; k++) {
        for (size_t i = 0; i < N; i++) {
            b[k][i] = uslab_calloc(sizes[k], 1);
            CHECK(b[k][i] && all_zero(b[k][i], uslab_malloc_usable_size(b[k][i])),
                  "calloc(%zu, 1) of a block written and freed, #%zu, not zero", sizes[k], i);
        }
        for (size_t i = 0; i < N; i++)
            uslab_free(b[k][i]);
    }

    /* A churn over every size up to the largest medium class: spans pass between classes
     * (span groups), slabs empty and fill, reaps purge them. */
    enum { LIVE = 256 };
    unsigned char *live[LIVE] = {0};
    size_t len[LIVE] = {0};
    struct rng r = {.s = 42};
    for (long op = 0; op < 60000; op++) {
        size_t i = rng_below(&r, LIVE);
        if (live[i]) {
            uslab_free(live[i]);
            live[i] = NULL;
            continue;
        }
        size_t s = 1 + rng_below(&r, rng_below(&r, 4) ? 70000 : 300000);
        if (rng_below(&r, 2)) {
            live[i] = uslab_calloc(1, s);
            CHECK(live[i], "calloc(1, %zu)", s);
            CHECK(all_zero(live[i], uslab_malloc_usable_size(live[i])),
                  "calloc(1, %zu) not zero at op %ld", s, op);
        } else {
            live[i] = uslab_malloc(s);
            CHECK(live[i], "malloc(%zu)", s);
        }
        len[i] = uslab_malloc_usable_size(live[i]);
        memset(live[i], (int)(op | 1), len[i]);
        if (op % 5000 == 4999)
            uslab_reap();
    }
    for (size_t i = 0; i < LIVE; i++)
        uslab_free(live[i]);
    TEST_DONE();
}
