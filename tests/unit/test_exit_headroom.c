/* SPDX-License-Identifier: MIT */
/*
 * test_exit_headroom.c - a thread's exit gives back the empty memory beyond the headroom,
 * and no more (design §3, "At a thread's exit"; issue 37's promise, issue 38's rptest). A
 * worker allocates and frees 24 MiB of a cache whose purges were faulted back (its
 * multiplier at the cap: its frees keep their memory) and exits. Its exit must bring the
 * surplus (empty slabs beyond the reserves, objects in depots) within USI_SLAB_HEADROOM,
 * and keep the headroom: the exit released every empty slab before, and a program that
 * starts its threads again (rptest: 4 rounds of 2 threads) faulted all of it back, twice
 * the page faults of mimalloc. The second worker does the same after the first, and must
 * find its slabs: it makes fewer new ones than the first. White-box: the multiplier is set
 * with usi_slab_keep_memory, as a refault would (USLAB_PURGE_DELAY=60000: no pass of the
 * library's own runs meanwhile).
 *
 * With uslab's purger thread (`thread`, USLAB_PURGER=thread) the exit gives nothing back:
 * the thread does after the delay (design §3), and the second worker makes no slab. Before,
 * the exit released down to the headroom there too, and the second worker made 256.
 */
#include "check.h"
#include "descriptor.h"
#include "slab.h"
#include "uslab.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define OBJ   1024
#define TOTAL ((size_t)24 << 20)
#define N     (TOTAL / OBJ)

static void *objs[N];
static uslab_cache_t *cache;

static void *worker(void *arg)
{
    (void)arg;
    for (size_t i = 0; i < N; i++) {
        objs[i] = uslab_cache_alloc(cache);
        CHECK(objs[i] != NULL, "alloc %zu", i);
        ((char *)objs[i])[0] = 1;
    }
    for (size_t i = 0; i < N; i++)
        uslab_cache_free(cache, objs[i]);
    return NULL;
}

static int thread_mode;

static size_t run_worker(const char *which)
{
    struct uslab_cache *c = (struct uslab_cache *)cache;
    usi_slab_keep_memory(c); /* as after a purge the pattern faulted back */
    size_t made = c->slabs_created;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, worker, NULL) == 0, "thread");
    pthread_join(t, NULL);
    made = c->slabs_created - made;
    uint64_t surplus = __atomic_load_n(&usi_slab_surplus_bytes, __ATOMIC_RELAXED);
    printf("%s worker: %zu slabs made; after its exit %.1f MiB empty beyond the reserves "
           "(headroom %.0f MiB)\n",
           which, made, (double)surplus / (1 << 20), (double)USI_SLAB_HEADROOM / (1 << 20));
    if (thread_mode) { /* everything stays for the purger thread's delay */
        CHECK(usi_slab_purger_runs(), "no purger thread");
        CHECK(surplus >= TOTAL - ((size_t)1 << 20), "%s exit left only %llu bytes", which,
              (unsigned long long)surplus);
        return made;
    }
    CHECK(surplus <= USI_SLAB_HEADROOM, "%s exit left %llu bytes beyond the headroom", which,
          (unsigned long long)(surplus - USI_SLAB_HEADROOM));
    /* Within one slab of the headroom: the exit stopped there. */
    CHECK(surplus + c->slab_size > USI_SLAB_HEADROOM,
          "%s exit gave back the headroom too: %llu bytes left", which,
          (unsigned long long)surplus);
    return made;
}

int main(int argc, char **argv)
{
    thread_mode = argc > 1 && strcmp(argv[1], "thread") == 0;
    cache = uslab_cache_create("exit-headroom", OBJ, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(cache != NULL, "create");
    size_t first = run_worker("first");
    size_t second = run_worker("second");
    if (thread_mode) /* the first's slabs, all kept: none made */
        CHECK(second == 0, "the second worker made %zu slabs, the first %zu", second, first);
    /* The second took the headroom's slabs again: 8 MiB of the 24 it needed. */
    CHECK(second + USI_SLAB_HEADROOM / (64 << 10) / 2 <= first,
          "the second worker made %zu slabs, the first %zu", second, first);
    uslab_cache_destroy(cache);
    printf("ok\n");
    return 0;
}
