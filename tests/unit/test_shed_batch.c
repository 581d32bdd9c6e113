/* SPDX-License-Identifier: MIT */
/*
 * test_shed_batch.c - a shedding pair's magazine grows where the frees lie together and
 * stays small where they are scattered (design §4, "Shedding"). 400,000 blocks of one
 * malloc class (25 MB) are freed in the order they were allocated: past the headroom the
 * class sheds, and the pair's magazine doubles from 4 up to 64 (a garbage collector's sweep
 * shed 4 objects a slow path, 700 instructions each: lua, python). The same number of
 * blocks of another class freed in a scattered order keep it at 4: each object would pin a
 * slab (test burst_return). Deterministic: one thread, no clock.
 */
#include "check.h"
#include "descriptor.h"
#include "sizeclass.h"
#include "tcache.h"
#include "uslab.h"

#define BLOCKS 400000

static void *blocks[BLOCKS];

/* The calling thread's pair of the malloc class of `size` bytes. */
static struct usi_magpair *class_pair(size_t size, struct uslab_cache **c)
{
    *c = usi_class_caches[usi_class_small[(size + 7) >> 3]];
    return usi_tcache_pair(usi_tls, (*c)->pair_offset);
}

/* Frees the blocks of `size` in order k * step mod BLOCKS; returns the largest capacity
 * the pair's loaded magazine had while its class was shedding, and that at the end. */
static uint32_t free_all(size_t size, size_t step, uint32_t *last)
{
    struct uslab_cache *c;
    uint32_t most = 0;
    *last = 0;
    for (size_t k = 0; k < BLOCKS; k++) {
        size_t i = (k * step) % BLOCKS;
        uslab_free(blocks[i]);
        struct usi_magpair *mp = class_pair(size, &c);
        if (__atomic_load_n(&c->depot_shedding, __ATOMIC_RELAXED)) {
            *last = usi_pair_loaded(mp)->capacity;
            most = *last > most ? *last : most;
        }
    }
    return most;
}

static void alloc_all(size_t size)
{
    for (size_t i = 0; i < BLOCKS; i++)
        CHECK((blocks[i] = uslab_malloc(size)) != NULL, "malloc %zu", i);
}

int main(void)
{
    uint32_t last;
    alloc_all(64);
    uint32_t most = free_all(64, 1, &last);
    printf("freed in order: the shedding magazine reached %u slots (%u at the end)\n", most, last);
    CHECK(most == 64 && last == 64, "in order: the magazine reached %u (%u at the end), not 64",
          most, last);

    alloc_all(48);
    most = free_all(48, 7919, &last); /* 7919 is prime, BLOCKS is not a multiple of it */
    printf("freed scattered: the shedding magazine reached %u slots (%u at the end)\n", most, last);
    CHECK(most != 0, "the class never shed: the test tested nothing");
    CHECK(last == 4, "scattered: the magazine has %u slots at the end, not 4", last);
    TEST_DONE();
}
