/* SPDX-License-Identifier: MIT */
/*
 * test_purge_hysteresis.c - a purge that the same pattern faults straight back makes the
 * cache keep its empty slabs longer (design §3, issue 12): a slab created within two
 * (multiplied) delays of the cache's last purge sets its purge multiplier to
 * USI_PURGE_MULT_MAX (it doubled until issue 37's headroom, which it multiplies too); a
 * purge with no refault since the previous one halves it. The passes
 * are called directly with chosen times (USLAB_PURGE_DELAY=60000 here, so no pass of the
 * library's own runs meanwhile).
 */
#include "check.h"
#include "depot.h"
#include "descriptor.h"
#include "options.h"
#include "os.h"
#include "purge.h"
#include "reclaim.h"
#include "slab.h"
#include "tcache.h"
#include "uslab.h"

#define N 640 /* objects: several 64 KiB slabs of 1 KiB objects */

static void *objs[N];
static struct uslab_cache *c;

static void fill(void)
{
    for (int i = 0; i < N; i++) {
        objs[i] = uslab_cache_alloc(c);
        CHECK(objs[i] != NULL, "alloc");
    }
}

static void empty(void)
{
    for (int i = 0; i < N; i++)
        uslab_cache_free(c, objs[i]);
    /* The thread's magazines and the depot back to the slabs (no purge: reap would). */
    usi_tcache_flush_own(c);
    usi_depot_drain(c, 0);
}

static size_t empty_slabs(void)
{
    usi_lock(&c->lock);
    size_t n = c->lists[USI_SLAB_EMPTY].count;
    usi_unlock(&c->lock);
    return n;
}

int main(void)
{
    const uint64_t d = usi_options.purge_delay_ms;
    CHECK(d == 60000, "USLAB_PURGE_DELAY=60000 expected, got %llu", (unsigned long long)d);
    c = uslab_cache_create("hysteresis", 1024, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(c != NULL && c->purge_mult == 1, "create");

    fill();
    empty();
    CHECK(empty_slabs() > 2, "only %zu empty slabs", empty_slabs());
    uint64_t t = usi_os_now_ms();
    usi_reclaim_pass(t + d + 10, d, USI_PASS_USER | USI_PASS_REAP); /* idle for a delay: purged */
    CHECK(empty_slabs() == c->empty_reserve, "%zu empty slabs left", empty_slabs());
    CHECK(c->purge_mult == 1 && c->purged_ms != 0, "first purge: mult %u", c->purge_mult);

    /* Faulted straight back: the multiplier goes to its cap. */
    fill();
    CHECK(c->purge_mult == USI_PURGE_MULT_MAX && c->refaulted, "after a refault: mult %u",
          c->purge_mult);
    empty();
    t = usi_os_now_ms();
    size_t before = empty_slabs();
    usi_reclaim_pass(t + d + 10, d,
                     USI_PASS_USER | USI_PASS_REAP); /* one delay: no longer enough */
    CHECK(empty_slabs() == before, "purged after one delay with mult %u (%zu of %zu left)",
          c->purge_mult, empty_slabs(), before);
    usi_reclaim_pass(t + USI_PURGE_MULT_MAX * d + 10, d, USI_PASS_USER | USI_PASS_REAP);
    CHECK(empty_slabs() == c->empty_reserve, "not purged after %u delays", USI_PURGE_MULT_MAX);
    CHECK(c->purge_mult == USI_PURGE_MULT_MAX, "a purge after a refault halved the multiplier: %u",
          c->purge_mult);

    /* Refaults again and again: capped. */
    for (int i = 0; i < 8; i++) {
        fill();
        empty();
        usi_reclaim_pass(usi_os_now_ms() + USI_PURGE_MULT_MAX * d + 10, d,
                         USI_PASS_USER | USI_PASS_REAP);
    }
    CHECK(c->purge_mult == USI_PURGE_MULT_MAX, "mult %u, cap %u", c->purge_mult,
          USI_PURGE_MULT_MAX);

    /* No refault (no purge on record before the slabs are made): each purge halves it. */
    for (uint32_t want = USI_PURGE_MULT_MAX / 2; want >= 1; want /= 2) {
        c->purged_ms = 0; /* no purge on record: no slab counts as a refault */
        fill();
        CHECK(!c->refaulted || want == USI_PURGE_MULT_MAX / 2, "a refault long after");
        empty();
        usi_reclaim_pass(usi_os_now_ms() + USI_PURGE_MULT_MAX * d + 10, d,
                         USI_PASS_USER | USI_PASS_REAP);
        if (want == USI_PURGE_MULT_MAX / 2)
            continue; /* the refault flag of the loop above is consumed by this purge */
        CHECK(c->purge_mult == want, "mult %u, expected %u", c->purge_mult, want);
        if (want == 1)
            break;
    }
    CHECK(c->purge_mult == 1, "back to 1: %u", c->purge_mult);
    uslab_cache_destroy(c);
    TEST_DONE();
}
