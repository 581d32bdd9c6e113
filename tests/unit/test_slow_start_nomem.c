/* SPDX-License-Identifier: MIT */
/*
 * test_slow_start_nomem.c - magazines when no memory is left for a new one (design §4).
 * Slow start replaces a pair's magazines by bigger ones; with no memory for the bigger
 * one, the smaller one must keep working. Before, it was freed first, and the thread was
 * left with no magazine: one slab-layer call per allocation and per free for good (under
 * valgrind, where uslab's reservation cannot grow, concurrent frees took 3,000 ns instead
 * of 10). And a thread whose loaded magazine is full and that can get no empty one
 * flushes it into the slabs and gets it back empty, instead of sending every later free
 * to the slab layer. Needs the fault switch (builds with USLAB_FAULT_INJECTION): every
 * mmap and mprotect fails once the cache and its first magazines exist, and every span
 * already committed (the range's first part is, design §2) is taken, so no magazine cache
 * can get a new slab.
 */
#include "check.h"
#include "depot.h"
#include "descriptor.h"
#include "faults.h"
#include "pages.h"
#include "tcache.h"
#include "uslab.h"

#define OBJ 256

int main(void)
{
    /* 256-byte objects: magazines of 1, 2 and 4 come from the cache of 4-slot magazines
     * (its first slab is made here), one of 8 would need the 16-slot one's first slab. */
    uslab_cache_t *cache = uslab_cache_create("nomem", OBJ, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(cache != NULL, "create");
    struct uslab_cache *ci = (struct uslab_cache *)cache;
    void *objs[200];
    int n = 0;
    objs[n++] = uslab_cache_alloc(cache); /* the cache's slab, a magazine of 1 */
    struct usi_magpair *mp = usi_tcache_pair(usi_tls, ci->pair_offset);
    CHECK(usi_pair_loaded(mp)->capacity == 1, "first magazine: %u", usi_pair_loaded(mp)->capacity);
    CHECK(uslab_faults_set("1,1,mp") == 0, "faults");
    size_t taken = 0;
    while (usi_pages_alloc_span(0, 0))
        taken++;
    printf("%zu spans of 64 KiB taken: the rest needs a commit\n", taken);

    /* Allocating on: 2 and 4 are made from that slab; 8 cannot be. The pair keeps its
     * magazine of 4 and fills it again from the cache's slab. */
    while (n < 60) {
        objs[n] = uslab_cache_alloc(cache);
        CHECK(objs[n] != NULL, "alloc %d", n);
        n++;
        CHECK(usi_pair_loaded(mp) != &usi_mag_empty, "alloc %d left the pair without a magazine",
              n);
    }
    CHECK(usi_pair_loaded(mp)->capacity == 4, "loaded magazine of %u",
          usi_pair_loaded(mp)->capacity);
    unsigned long failed = uslab_faults_injected("mp");
    CHECK(failed > 0, "no mmap or mprotect failed: the test tested nothing");

    /* Freeing: the magazine of 4 fills; no empty one can be had (the depot has none, and
     * none can be made). The full one is flushed and comes back empty, so at most one free
     * in 4 takes the slab layer, and the pair always has a magazine to push onto. */
    int bare = 0, last_bare = -2;
    for (int i = 0; i < n; i++) {
        uslab_cache_free(cache, objs[i]);
        if (usi_pair_loaded(mp) == &usi_mag_empty && mp->prev == &usi_mag_empty) {
            CHECK(last_bare != i - 1, "frees %d and %d both left the pair with no magazine", i - 1,
                  i);
            last_bare = i;
            bare++;
        }
    }
    CHECK(bare <= n / 4 + 1, "%d of %d frees left the pair with no magazine", bare, n);
    /* The next frees of a full pair find the flushed magazine in the depot. */
    for (int round = 0; round < 100; round++) {
        for (int i = 0; i < 40; i++)
            CHECK((objs[i] = uslab_cache_alloc(cache)) != NULL, "alloc");
        int was_bare = 0;
        for (int i = 0; i < 40; i++) {
            uslab_cache_free(cache, objs[i]);
            int is_bare = usi_pair_loaded(mp) == &usi_mag_empty;
            CHECK(!(was_bare && is_bare), "round %d: frees %d and %d both left no magazine", round,
                  i - 1, i);
            was_bare = is_bare;
        }
    }
    printf("%lu mmap/mprotect calls failed; the pair kept a magazine of %u\n",
           uslab_faults_injected("mp"), usi_pair_loaded(mp)->capacity);
    CHECK(uslab_faults_set(NULL) == 0, "faults off");
    uslab_cache_destroy(cache);
    printf("ok\n");
    return 0;
}
