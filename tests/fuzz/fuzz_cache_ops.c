/* SPDX-License-Identifier: MIT */
/*
 * fuzz_cache_ops.c - a libFuzzer target: the input is a program of object-cache operations
 * (create, alloc, free, bulk alloc, bulk free, write, reap, destroy when empty) on up to
 * four caches, run against a shadow model. Every live object holds a pattern derived from
 * its id, checked before it is freed and at the end; live pointers are distinct and
 * aligned; constructor caches hand out objects in constructed state; constructor and
 * destructor calls balance. Any violation aborts (a crash for the fuzzer).
 *
 * Input: a sequence of operations, each one opcode byte (low 3 bits: the operation, next 2
 * bits: the cache slot) followed by one argument byte. Missing bytes read as 0.
 */
#include "fuzz_check.h"
#include "testutil.h"
#include "uslab.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NSLOTS    4
#define MAXLIVE   256
#define CTOR_SEED 0xf022c7042ull

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const size_t sizes[16] = {1,  7,   8,   16,  24,  32,   40,   64,
                                 96, 128, 200, 256, 512, 1000, 4096, 9000};

struct rec {
    void *p;
    uint64_t id;
};

static struct slot {
    uslab_cache_t *c;
    size_t size, align;
    int ctor;
    long nctor, ndtor, bad_dtor;
    struct rec live[MAXLIVE];
    size_t nlive;
} slots[NSLOTS];

static struct ptrset live_set;
static uint64_t next_id;

static int f_ctor(void *obj, void *arg)
{
    struct slot *s = arg;
    pattern_fill(obj, s->size, (uintptr_t)obj ^ CTOR_SEED);
    s->nctor++;
    return 0;
}

static void f_dtor(void *obj, void *arg)
{
    struct slot *s = arg;
    if (pattern_check(obj, s->size, (uintptr_t)obj ^ CTOR_SEED) != (size_t)-1)
        s->bad_dtor++;
    s->ndtor++;
}

static void slot_create(struct slot *s, uint8_t arg)
{
    if (s->c)
        return;
    s->size = sizes[arg & 15];
    size_t align = (arg >> 4) & 3 ? (size_t)8 << (((arg >> 4) & 3) * 3) : 0; /* 0, 64, 512, 4096 */
    s->align = align ? align : (s->size >= 16 ? 16 : 8);
    s->ctor = (arg >> 6) & 1;
    unsigned flags = (arg >> 7) ? USLAB_CACHE_NOMAGAZINE : 0;
    s->nctor = s->ndtor = s->bad_dtor = 0;
    s->nlive = 0;
    s->c = uslab_cache_create("fuzz", s->size, align, s->ctor ? f_ctor : NULL,
                              s->ctor ? f_dtor : NULL, NULL, s, flags);
    FCHECK(s->c, "create size %zu align %zu", s->size, align);
}

static void took(struct slot *s, void *p)
{
    FCHECK(p, "allocation of %zu bytes failed", s->size);
    FCHECK((uintptr_t)p % s->align == 0, "%p not aligned to %zu", p, s->align);
    FCHECK(ptrset_insert(&live_set, p), "%p handed out while live", p);
    if (s->ctor)
        FCHECK(pattern_check(p, s->size, (uintptr_t)p ^ CTOR_SEED) == (size_t)-1,
               "%p not in constructed state", p);
    s->live[s->nlive].p = p;
    s->live[s->nlive].id = ++next_id;
    pattern_fill(p, s->size, next_id);
    s->nlive++;
}

static void *release(struct slot *s, size_t i)
{
    struct rec r = s->live[i];
    s->live[i] = s->live[--s->nlive];
    size_t bad = pattern_check(r.p, s->size, r.id);
    FCHECK(bad == (size_t)-1, "object %p of %zu bytes corrupted at byte %zu", r.p, s->size, bad);
    FCHECK(ptrset_remove(&live_set, r.p), "%p not live", r.p);
    if (s->ctor)
        pattern_fill(r.p, s->size, (uintptr_t)r.p ^ CTOR_SEED);
    return r.p;
}

static void slot_destroy(struct slot *s)
{
    uslab_cache_destroy(s->c);
    s->c = NULL;
    FCHECK(s->nctor == s->ndtor, "ctor %ld dtor %ld after destroy", s->nctor, s->ndtor);
    FCHECK(s->bad_dtor == 0, "destructor saw %ld unconstructed objects", s->bad_dtor);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!live_set.slot)
        ptrset_init(&live_set, NSLOTS * MAXLIVE);
    void *buf[32];
    for (size_t pos = 0; pos < size; pos += 2) {
        uint8_t op = data[pos], arg = pos + 1 < size ? data[pos + 1] : 0;
        struct slot *s = &slots[(op >> 3) & 3];
        if (!s->c && (op & 7) != 0) {
            slot_create(s, arg);
            continue;
        }
        switch (op & 7) {
        case 0:
            slot_create(s, arg);
            break;
        case 1: /* alloc */
            if (s->nlive < MAXLIVE)
                took(s, uslab_cache_alloc(s->c));
            break;
        case 2: /* free */
            if (s->nlive)
                uslab_cache_free(s->c, release(s, arg % s->nlive));
            else
                uslab_cache_free(s->c, NULL);
            break;
        case 3: { /* bulk alloc */
            size_t n = arg % 32 + 1;
            if (s->nlive + n > MAXLIVE)
                break;
            FCHECK(uslab_cache_alloc_bulk(s->c, n, buf) == n, "bulk alloc of %zu", n);
            for (size_t i = 0; i < n; i++)
                took(s, buf[i]);
            break;
        }
        case 4: { /* bulk free */
            size_t n = arg % 32 + 1;
            if (n > s->nlive)
                n = s->nlive;
            for (size_t i = 0; i < n; i++)
                buf[i] = release(s, (arg + i * 7) % s->nlive);
            uslab_cache_free_bulk(s->c, n, buf);
            break;
        }
        case 5: /* rewrite an object's contents */
            if (s->nlive) {
                struct rec *r = &s->live[arg % s->nlive];
                FCHECK(pattern_check(r->p, s->size, r->id) == (size_t)-1, "corrupted");
                r->id = ++next_id;
                pattern_fill(r->p, s->size, r->id);
            }
            break;
        case 6:                   /* reap */
            if ((arg & 15) == 15) /* rarely: it walks every cache id */
                uslab_reap();
            else
                uslab_cache_reap(s->c);
            if (s->ctor)
                FCHECK(s->nctor - s->ndtor == (long)s->nlive,
                       "after reap ctor %ld - dtor %ld != live %zu", s->nctor, s->ndtor, s->nlive);
            break;
        case 7: /* destroy when empty */
            if (s->nlive == 0)
                slot_destroy(s);
            break;
        }
    }
    /* Tear down: verify and free everything, destroy every cache. */
    for (int k = 0; k < NSLOTS; k++) {
        struct slot *s = &slots[k];
        if (!s->c)
            continue;
        while (s->nlive)
            uslab_cache_free(s->c, release(s, s->nlive - 1));
        slot_destroy(s);
    }
    FCHECK(live_set.count == 0, "live set not empty");
    return 0;
}
