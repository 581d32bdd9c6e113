/* SPDX-License-Identifier: MIT */
/*
 * test_fresh_pages.c - a take's fresh pages (docs/design.md §3, "Fresh pages"): the pages a
 * take reaches first in a slab are noted, exactly those on which it hands out objects and no
 * page beyond, only where the taker writes every such page (a constructor, a malloc class's
 * handout) and objects are a page or smaller, and only USI_FRESH_MIN or more; made present in one
 * call, they are resident and the slab's untaken pages are not; only on the first
 * USI_POPULATE_THREADS threads (by filler number). And the os layer's call: present pages, errno
 * kept, and a failure that is not a refusal (a range not mapped) does not stop it.
 */
#include "check.h"
#include "descriptor.h"
#include "os.h"
#include "pages.h"
#include "registry.h"
#include "slab.h"
#include "uslab.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGE ((uintptr_t)USI_PAGE_SIZE)

static int ctor(void *obj, void *arg)
{
    (void)obj, (void)arg;
    return 0;
}

/* 1 if the page at p is resident. */
static int resident(uintptr_t p)
{
    unsigned char v = 0;
    CHECK(mincore((void *)(p & ~(PAGE - 1)), PAGE, &v) == 0, "mincore %#lx", (unsigned long)p);
    return v & 1;
}

static uintptr_t lowest(void *const *objs, size_t n)
{
    uintptr_t lo = UINTPTR_MAX;
    for (size_t i = 0; i < n; i++)
        lo = (uintptr_t)objs[i] < lo ? (uintptr_t)objs[i] : lo;
    return lo;
}

/* A cache of `size`-byte objects with a constructor: fresh pages noted, made present, the
 * rest of the slab left alone; a take of objects already handed out once notes nothing. */
static void check_noted(size_t size)
{
    struct uslab_cache *c =
        uslab_cache_create("fresh", size, 0, ctor, NULL, NULL, NULL, USLAB_CACHE_NOMAGAZINE);
    CHECK(c != NULL, "create");
    size_t n = (USI_FRESH_MIN + PAGE) / c->stride + 1; /* on USI_FRESH_MIN and a page or more */
    size_t few = PAGE / c->stride + 1;                 /* a take that reaches one or two pages */
    CHECK(n * 2 + few <= c->nobjs, "a slab of %zu-byte objects holds three takes", size);
    static void *first[2048], *second[2048], *again[2048];
    CHECK(n <= 2048, "n");

    struct usi_fresh_pages fresh = {.n = 0};
    usi_lock(&c->lock);
    CHECK(usi_slab_take(c, n, first, &fresh, 0) == n, "take %zu", n);
    usi_unlock(&c->lock);
    struct usi_slab *s = usi_slab_of_entry(usi_pagemap_lookup(first[0]));
    uintptr_t top = ((uintptr_t)usi_slab_object(c, s, 0) + c->stride + PAGE - 1) & ~(PAGE - 1);
    uintptr_t lo = lowest(first, n) & ~(PAGE - 1);
    CHECK(fresh.n == 1, "%zu: one range, not %u", size, fresh.n);
    CHECK(fresh.start[0] == lo && fresh.start[0] + fresh.len[0] == top,
          "%zu: the range is the taken objects' pages [%#lx, %#lx), not [%#lx, +%zu)", size,
          (unsigned long)lo, (unsigned long)top, (unsigned long)fresh.start[0], fresh.len[0]);
    CHECK(fresh.start[0] >= (uintptr_t)s->span, "%zu: within the slab", size);
    usi_slab_populate(&fresh);
    for (uintptr_t p = fresh.start[0]; p < top; p += PAGE)
        CHECK(resident(p), "%zu: fresh page %#lx present", size, (unsigned long)p);
    CHECK(!resident(lo - PAGE), "%zu: the page below the take is left alone", size);

    /* The next take of the same slab: the pages below the first range only. */
    fresh.n = 0;
    usi_lock(&c->lock);
    CHECK(usi_slab_take(c, n, second, &fresh, 0) == n, "take again");
    usi_unlock(&c->lock);
    CHECK(usi_slab_of_entry(usi_pagemap_lookup(second[0])) == s, "%zu: same slab", size);
    uintptr_t lo2 = lowest(second, n) & ~(PAGE - 1);
    CHECK(fresh.n == 1 && fresh.start[0] == lo2 && fresh.start[0] + fresh.len[0] <= lo &&
              fresh.start[0] + fresh.len[0] >= lo - PAGE,
          "%zu: the second range ends where the first begins, or a page below", size);

    /* A take of fewer fresh pages than USI_FRESH_MIN: left to fault. */
    fresh.n = 0;
    usi_lock(&c->lock);
    CHECK(usi_slab_take(c, few, again, &fresh, 0) == few, "a small take");
    usi_unlock(&c->lock);
    CHECK(fresh.n == 0, "%zu: a take of one or two fresh pages is not noted", size);
    struct usi_slab *back = NULL;
    usi_lock(&c->lock);
    usi_slab_put(c, few, again, &back);
    usi_unlock(&c->lock);
    CHECK(back == NULL, "the slab is not empty");

    /* Back and taken again: nothing is fresh. */
    struct usi_slab *release = NULL;
    usi_lock(&c->lock);
    usi_slab_put(c, n, second, &release);
    usi_slab_put(c, n, first, &release);
    fresh.n = 0;
    CHECK(usi_slab_take(c, n, again, &fresh, 0) == n, "take a third time");
    CHECK(fresh.n == 0, "%zu: pages taken before are not fresh (%u ranges)", size, fresh.n);
    usi_slab_put(c, n, again, &release);
    usi_slab_detach_empty(c, 0, &release);
    usi_unlock(&c->lock);
    usi_slab_release(c, release);
    uslab_cache_destroy(c);
}

/* None noted: objects nobody writes at the take (no constructor, no malloc class), or larger
 * than a page (the take writes one line of each). */
static void check_not_noted(size_t size, uslab_ctor_fn with)
{
    struct uslab_cache *c =
        uslab_cache_create("fresh", size, 0, with, NULL, NULL, NULL, USLAB_CACHE_NOMAGAZINE);
    CHECK(c != NULL, "create");
    void *objs[4];
    struct usi_fresh_pages fresh = {.n = 0};
    usi_lock(&c->lock);
    CHECK(usi_slab_take(c, 4, objs, &fresh, 0) == 4, "take");
    CHECK(fresh.n == 0, "%zu bytes, %s constructor: nothing noted", size, with ? "a" : "no");
    struct usi_slab *release = NULL;
    usi_slab_put(c, 4, objs, &release);
    usi_slab_detach_empty(c, 0, &release);
    usi_unlock(&c->lock);
    usi_slab_release(c, release);
    uslab_cache_destroy(c);
}

/* A cache past its first slab grows: a take that reaches fewer fresh pages than
 * USI_FRESH_MIN notes USI_FRESH_MIN, the taken objects' pages and those below, which the
 * next takes reach; those then note nothing until they pass them. Never below the slab. */
static void check_growing(struct uslab_cache *c)
{
    static void *held[8192], *grown[12 * 64];
    size_t nheld = 0, per_page = PAGE / c->stride, taken = 0;
    CHECK(per_page >= 1 && per_page <= 64, "%s: objects a page", c->name);
    /* One object at a time until a take made a slab, the cache's second or later. */
    uint64_t created = c->slabs_created;
    struct usi_fresh_pages fresh;
    do {
        CHECK(nheld < sizeof held / sizeof held[0], "%s: no new slab", c->name);
        fresh.n = 0;
        usi_lock(&c->lock);
        CHECK(usi_slab_take(c, 1, held + nheld++, &fresh, 0) == 1, "take");
        usi_unlock(&c->lock);
        usi_slab_populate(&fresh);
    } while (c->slabs_created == created || c->slabs_created < 2);
    struct usi_slab *s = usi_slab_of_entry(usi_pagemap_lookup(held[nheld - 1]));
    uintptr_t slab_low = (uintptr_t)s->objs & ~(PAGE - 1);
    CHECK(fresh.n == 1 && fresh.len[0] == USI_FRESH_MIN,
          "%s: the new slab's first take notes USI_FRESH_MIN (%u ranges)", c->name, fresh.n);
    uintptr_t noted_low = fresh.start[0];
    for (int round = 0; round < 12; round++) {
        void **few = grown + taken;
        fresh.n = 0;
        usi_lock(&c->lock);
        CHECK(usi_slab_take(c, per_page, few, &fresh, 0) == per_page, "take");
        usi_unlock(&c->lock);
        CHECK(usi_slab_of_entry(usi_pagemap_lookup(few[per_page - 1])) == s, "%s: the same slab",
              c->name);
        uintptr_t lo = lowest(few, per_page) & ~(PAGE - 1);
        if (lo >= noted_low) {
            CHECK(fresh.n == 0, "%s: round %d: pages made present before noted again", c->name,
                  round);
        } else if (noted_low - slab_low < USI_FRESH_MIN) {
            CHECK(fresh.n == 0, "%s: round %d: the slab's last %zu pages noted", c->name, round,
                  (size_t)((noted_low - slab_low) / PAGE));
            noted_low = slab_low; /* they fault, as before */
        } else {
            CHECK(fresh.n == 1, "%s: round %d: a take of a page in a growing cache is noted",
                  c->name, round);
            CHECK(fresh.len[0] == USI_FRESH_MIN, "%s: %zu bytes noted, not USI_FRESH_MIN", c->name,
                  fresh.len[0]);
            CHECK(fresh.start[0] <= lo && fresh.start[0] + fresh.len[0] > lo &&
                      fresh.start[0] >= slab_low,
                  "%s: the range holds the taken objects' page, within the slab", c->name);
            usi_slab_populate(&fresh);
            for (uintptr_t p = fresh.start[0]; p < fresh.start[0] + fresh.len[0]; p += PAGE)
                CHECK(resident(p), "%s: noted page %#lx present", c->name, (unsigned long)p);
            if (fresh.start[0] > slab_low)
                CHECK(!resident(fresh.start[0] - PAGE), "%s: the page below is left alone",
                      c->name);
            noted_low = fresh.start[0];
        }
        taken += per_page;
        for (size_t i = 0; i < per_page; i++)
            ((char *)few[i])[0] = 1; /* the pages the caller writes */
    }
    struct usi_slab *release = NULL;
    usi_lock(&c->lock);
    usi_slab_put(c, nheld, held, &release);
    usi_slab_put(c, taken, grown, &release);
    usi_unlock(&c->lock);
    usi_slab_release(c, release);
}

/* The same in a user cache with a constructor, and in uslab's own cache of magazines (the
 * taker writes each magazine's header). */
static void check_growing_caches(void)
{
    static const size_t sizes[] = {64, 1024};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        struct uslab_cache *c = uslab_cache_create("fresh", sizes[i], 0, ctor, NULL, NULL, NULL,
                                                   USLAB_CACHE_NOMAGAZINE);
        CHECK(c != NULL, "create");
        check_growing(c);
        uslab_cache_destroy(c);
    }
    struct uslab_cache *mags = NULL;
    for (unsigned id = 1; id < USI_MAX_IDS && !mags; id++)
        if (usi_caches[id] && strcmp(usi_caches[id]->name, "uslab-magazine-4") == 0)
            mags = usi_caches[id];
    CHECK(mags != NULL, "no cache named uslab-magazine-4");
    check_growing(mags);
}

static void check_os_populate(void)
{
    char *m = mmap(NULL, 16 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED, "mmap");
    errno = 1234;
    usi_os_populate(m, 8 * PAGE);
    CHECK(errno == 1234, "errno kept");
    for (int i = 0; i < 16; i++)
        CHECK(resident((uintptr_t)m + i * PAGE) == (i < 8), "page %d %s", i,
              i < 8 ? "present" : "left alone");
    munmap(m + 8 * PAGE, 8 * PAGE);
    usi_os_populate(m + 8 * PAGE, 8 * PAGE); /* ENOMEM: not mapped, not a refusal */
    CHECK(errno == 1234, "errno kept on failure");
    munmap(m, 8 * PAGE);
    m = mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED, "mmap");
    usi_os_populate(m, 4 * PAGE);
    for (int i = 0; i < 4; i++)
        CHECK(resident((uintptr_t)m + i * PAGE), "after a failure, page %d still made present", i);
    munmap(m, 4 * PAGE);
}

/* A range of `pages` fresh pages of a new mapping, made present by usi_slab_populate on the
 * calling thread: how many of them are resident after it. */
static unsigned populate_here(unsigned pages)
{
    char *m = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED, "mmap");
    struct usi_fresh_pages fresh = {.start = {(uintptr_t)m}, .len = {pages * PAGE}, .n = 1};
    usi_slab_populate(&fresh);
    unsigned n = 0;
    for (unsigned i = 0; i < pages; i++)
        n += (unsigned)resident((uintptr_t)m + i * PAGE);
    munmap(m, pages * PAGE);
    return n;
}

static pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cond = PTHREAD_COND_INITIALIZER;
static int hold_go;

struct holder {
    pthread_t tid;
    unsigned filler, present;
    pthread_barrier_t *claimed;
};

/* Takes a filler number, populates a fresh range, waits until released, gives the number back. */
static void *holder(void *arg)
{
    struct holder *h = arg;
    h->filler = usi_slab_filler();
    h->present = populate_here(4);
    pthread_barrier_wait(h->claimed);
    pthread_mutex_lock(&hold_lock);
    while (!hold_go)
        pthread_cond_wait(&hold_cond, &hold_lock);
    pthread_mutex_unlock(&hold_lock);
    usi_slab_filler_end();
    return NULL;
}

static void start_holder(struct holder *h)
{
    pthread_barrier_t claimed;
    pthread_barrier_init(&claimed, NULL, 2);
    h->claimed = &claimed;
    CHECK(pthread_create(&h->tid, NULL, holder, h) == 0, "pthread_create");
    pthread_barrier_wait(&claimed);
    pthread_barrier_destroy(&claimed);
}

/* Threads hold filler numbers 1 to USI_POPULATE_THREADS at once (the main thread's among them):
 * the next thread's fresh pages are left to fault; once a holder exits, the thread that takes
 * its number makes them present again. */
static void check_thread_limit(void)
{
    unsigned mine = usi_slab_filler();
    CHECK(mine >= 1 && mine <= USI_POPULATE_THREADS, "the main thread's number %u", mine);
    CHECK(populate_here(4) == 4, "the main thread makes fresh pages present");
    struct holder h[USI_POPULATE_THREADS + 1];
    unsigned n = 0;
    do {
        CHECK(n <= USI_POPULATE_THREADS, "%u threads and no number above %u", n,
              USI_POPULATE_THREADS);
        start_holder(&h[n]);
        CHECK(h[n].filler >= 1, "a thread's number");
        CHECK(h[n].present == (h[n].filler <= USI_POPULATE_THREADS ? 4u : 0u),
              "thread with number %u: %u of 4 fresh pages present", h[n].filler, h[n].present);
    } while (h[n++].filler <= USI_POPULATE_THREADS);
    CHECK(h[n - 1].filler == USI_POPULATE_THREADS + 1, "the last thread's number is %u",
          h[n - 1].filler);
    pthread_mutex_lock(&hold_lock);
    hold_go = 1;
    pthread_cond_broadcast(&hold_cond);
    pthread_mutex_unlock(&hold_lock);
    for (unsigned i = 0; i < n; i++)
        pthread_join(h[i].tid, NULL);
    hold_go = 0;
    struct holder again;
    start_holder(&again);
    CHECK(again.filler <= USI_POPULATE_THREADS && again.present == 4,
          "a thread after them (number %u): %u of 4 fresh pages present", again.filler,
          again.present);
    pthread_mutex_lock(&hold_lock);
    hold_go = 1;
    pthread_cond_broadcast(&hold_cond);
    pthread_mutex_unlock(&hold_lock);
    pthread_join(again.tid, NULL);
}

int main(void)
{
    uslab_free(uslab_malloc(1)); /* initialise */
    char *probe = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(probe != MAP_FAILED, "mmap");
    if (madvise(probe, PAGE, 23 /* MADV_POPULATE_WRITE */) != 0 && errno == EINVAL) {
        printf("skipped: the kernel has no MADV_POPULATE_WRITE (Linux 5.14)\n");
        return 77;
    }
    munmap(probe, PAGE);
    check_os_populate();
    static const size_t sizes[] = {16, 200, 1000, 4096};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        check_noted(sizes[i]);
    check_not_noted(200, NULL);
    check_not_noted(8192, ctor);
    check_growing_caches();
    check_thread_limit();
    TEST_DONE();
}
