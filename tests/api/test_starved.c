/* SPDX-License-Identifier: MIT */
/*
 * test_starved.c - when a cache's slabs cannot grow, other caches' empty slabs go back to
 * it first (design §3, "When the slabs cannot grow"; session 16's audit). The test runs
 * under USLAB_RESERVE=64M (uslab's smallest reservation): cache B takes objects until the
 * reservation is full, then
 *  - `empty`: B frees them all (its slabs are all empty, 60 MiB) and cache A, of another
 *    size, must get objects at once, three times. Before, A got ENOMEM until a purger pass
 *    released B's slabs after USLAB_PURGE_DELAY (1 s);
 *  - `reclaim`: B keeps them, and A's reclaim callback frees them all, as uslab.h invites
 *    ("free objects you can spare, to any cache"): A's allocation must succeed after one
 *    callback. Before, the retry failed every time (B's slabs, empty now, were not given
 *    back before it), and only a uslab_cache_reap(B) in the callback helped.
 *  - `own1`, `own16`: A's reclaim callback frees 1 or 16 of A's own objects, which go into
 *    the calling thread's magazine: the allocation that ran out must return one of them
 *    (uslab.h: "uslab tries once more"). Before session 17 the retry looked only at the
 *    slabs and returned ENOMEM (the contract audit);
 *  - `nested`: both caches have reclaim callbacks that allocate, A's from A and B's from A:
 *    filling B, then A, must end in ENOMEM with each callback called once per failure, not
 *    in a callback calling itself (A's did, until SIGSEGV) or the two calling each other.
 * Contents of every object are checked before it is freed.
 */
#include "check.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uslab.h>

#define B_SIZE  1000
#define A_SIZE  3000
#define MAX_OBJ 200000

static uslab_cache_t *a, *b;
static unsigned char *kept[MAX_OBJ];
static size_t nkept;
static int reclaims;

static void free_b(void)
{
    while (nkept) {
        unsigned char *p = kept[--nkept];
        CHECK(p[0] == (unsigned char)nkept && p[B_SIZE - 1] == (unsigned char)(nkept >> 8),
              "object %zu of B changed", nkept);
        uslab_cache_free(b, p);
    }
}

static void reclaim_a(void *arg)
{
    (void)arg;
    reclaims++;
    free_b();
}

static int nested_calls, nested_depth, nested_max;
static void *nested_got[16];
static int nested_n;

/* Allocates from A inside a reclaim callback (while A or B is starved). */
static void reclaim_alloc_a(void *arg)
{
    (void)arg;
    nested_calls++;
    if (++nested_depth > nested_max)
        nested_max = nested_depth;
    void *q = uslab_cache_alloc(a);
    if (q && nested_n < 16)
        nested_got[nested_n++] = q;
    else if (q)
        uslab_cache_free(a, q);
    nested_depth--;
}

static int nested(void)
{
    a = uslab_cache_create("nested-a", A_SIZE, 0, NULL, NULL, reclaim_alloc_a, NULL, 0);
    b = uslab_cache_create("nested-b", B_SIZE, 0, NULL, NULL, reclaim_alloc_a, NULL, 0);
    CHECK(a && b, "create");
    static void *held_a[MAX_OBJ];
    size_t na = 0;
    unsigned char *p;
    while (nkept < MAX_OBJ && (p = uslab_cache_alloc(b)) != NULL) {
        p[0] = (unsigned char)nkept;
        p[B_SIZE - 1] = (unsigned char)(nkept >> 8);
        kept[nkept++] = p;
    }
    CHECK(errno == ENOMEM, "B's last allocation: errno %d", errno);
    int after_b = nested_calls;
    while (na < MAX_OBJ && (held_a[na] = uslab_cache_alloc(a)) != NULL)
        na++;
    CHECK(errno == ENOMEM, "A's last allocation: errno %d", errno);
    printf("nested: B %zu, A %zu objects; %d callbacks (%d filling B), at most %d deep\n", nkept,
           na, nested_calls, after_b, nested_max);
    CHECK(nested_max == 1, "a reclaim callback ran inside one: %d deep", nested_max);
    CHECK(after_b >= 1 && nested_calls >= after_b + 1, "%d callbacks", nested_calls);
    while (na)
        uslab_cache_free(a, held_a[--na]);
    while (nested_n)
        uslab_cache_free(a, nested_got[--nested_n]);
    free_b();
    uslab_cache_destroy(a);
    uslab_cache_destroy(b);
    TEST_DONE();
}

#define OWN_SIZE (1 << 20)
static int own_frees;

static void reclaim_own(void *arg)
{
    (void)arg;
    reclaims++;
    for (int i = 0; i < own_frees && nkept; i++) {
        unsigned char *p = kept[--nkept];
        CHECK(p[0] == (unsigned char)nkept && p[OWN_SIZE - 1] == (unsigned char)(nkept >> 8),
              "object %zu changed", nkept);
        uslab_cache_free(a, p);
    }
}

static int own(int frees)
{
    own_frees = frees;
    a = uslab_cache_create("starved-own", OWN_SIZE, 0, NULL, NULL, reclaim_own, NULL, 0);
    CHECK(a != NULL, "create");
    unsigned char *p = NULL;
    while (nkept < MAX_OBJ && (p = uslab_cache_alloc(a)) != NULL) {
        p[0] = (unsigned char)nkept;
        p[OWN_SIZE - 1] = (unsigned char)(nkept >> 8);
        kept[nkept++] = p;
        if (reclaims)
            break; /* this allocation needed the callback, and got an object */
    }
    CHECK(reclaims == 1, "the reclaim callback ran %d times", reclaims);
    CHECK(p != NULL, "own%d: the allocation after the callback freed %d objects failed (errno %d)",
          frees, frees, errno);
    printf("own%d: %zu objects of 1 MiB held; the allocation after the callback got one\n", frees,
           nkept);
    while (nkept) {
        p = kept[--nkept];
        CHECK(p[0] == (unsigned char)nkept && p[OWN_SIZE - 1] == (unsigned char)(nkept >> 8),
              "object %zu changed", nkept);
        uslab_cache_free(a, p);
    }
    uslab_cache_destroy(a);
    TEST_DONE();
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "nested") == 0)
        return nested();
    if (argc > 1 && strncmp(argv[1], "own", 3) == 0)
        return own(atoi(argv[1] + 3));
    int reclaim = argc > 1 && strcmp(argv[1], "reclaim") == 0;
    CHECK(reclaim || (argc > 1 && strcmp(argv[1], "empty") == 0), "mode: empty, reclaim or nested");
    a = uslab_cache_create("starved-a", A_SIZE, 0, NULL, NULL, reclaim ? reclaim_a : NULL, NULL, 0);
    b = uslab_cache_create("starved-b", B_SIZE, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(a && b, "create");
    unsigned char *p;
    while (nkept < MAX_OBJ && (p = uslab_cache_alloc(b)) != NULL) {
        p[0] = (unsigned char)nkept;
        p[B_SIZE - 1] = (unsigned char)(nkept >> 8);
        kept[nkept++] = p;
    }
    CHECK(nkept < MAX_OBJ, "the reservation never filled (%zu objects): USLAB_RESERVE=64M?", nkept);
    CHECK(errno == ENOMEM, "B's last allocation: errno %d", errno);
    printf("B filled the reservation with %zu objects of %d bytes\n", nkept, B_SIZE);
    if (!reclaim)
        free_b();
    for (int i = 0; i < 3; i++) {
        errno = 0;
        unsigned char *q = uslab_cache_alloc(a);
        CHECK(q != NULL, "%s: allocation %d from A failed (errno %d) with B's %s", argv[1], i,
              errno, reclaim ? "objects freed by A's reclaim callback" : "slabs all empty");
        memset(q, 0xa5, A_SIZE);
        uslab_cache_free(a, q);
    }
    if (reclaim)
        CHECK(reclaims == 1, "the reclaim callback ran %d times", reclaims);
    struct uslab_cache_stats st;
    uslab_cache_stats(b, &st);
    printf("%s: A served; B keeps %zu slabs, %zu active objects\n", argv[1], st.slabs,
           st.active_objects);
    uslab_cache_destroy(a);
    uslab_cache_destroy(b);
    TEST_DONE();
}
