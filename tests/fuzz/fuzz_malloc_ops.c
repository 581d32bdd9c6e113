/* SPDX-License-Identifier: MIT */
/*
 * fuzz_malloc_ops.c - a libFuzzer target: the input is a program of malloc-family calls
 * (malloc, calloc, realloc, reallocarray, free, the aligned allocations, a rewrite of a block
 * up to its usable size, a reap) on up to 256 live blocks, run against a shadow table. Sizes
 * are drawn around the class boundaries, the medium classes and the sizes glibc serves, so
 * the fuzzer reaches every source of blocks and realloc's moves between them. Every live
 * block holds a pattern derived from its id over its whole usable size, checked before it is
 * resized or freed and at the end: a usable size that overstates, two blocks that overlap, a
 * realloc that loses contents or a calloc block that is not zero abort (a crash for the
 * fuzzer). So do a misaligned block, a pointer handed out twice, and an overflowing calloc or
 * reallocarray that does not fail with ENOMEM.
 *
 * Input: a sequence of operations of three bytes each: an opcode (low 3 bits: the operation,
 * the rest a selector) and two argument bytes. Missing bytes read as 0.
 */
#include "fuzz_check.h"
#include "testutil.h"
#include "uslab.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXLIVE 256
/* Live blocks above 64 KiB at once: the fuzzer's memory and time stay bounded. */
#define BIG_MAX 8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The contents' fills and checks run over every byte of every block: left out of the
 * fuzzer's comparison tracing, which made them 60% of its time (no branch of uslab's there). */
#if defined(__clang__)
#define NO_COVERAGE __attribute__((no_sanitize("coverage"), noinline))
#else
#define NO_COVERAGE __attribute__((noinline))
#endif

NO_COVERAGE static void fill(void *p, size_t n, uint64_t id)
{
    pattern_fill(p, n, id);
}

/* The offset of the first byte of p[0..n) that is not id's pattern, or (size_t)-1. */
NO_COVERAGE static size_t intact(const void *p, size_t n, uint64_t id)
{
    return pattern_check(p, n, id);
}

/* The offset of the first byte of p[0..n) that is not 0, or (size_t)-1. */
NO_COVERAGE static size_t zero(const unsigned char *p, size_t n)
{
    size_t i = 0;
    for (uint64_t w; i + 8 <= n && (memcpy(&w, p + i, 8), w == 0);)
        i += 8;
    for (; i < n; i++)
        if (p[i])
            return i;
    return (size_t)-1;
}

struct block {
    unsigned char *p;
    size_t size, usable;
    uint64_t id;
    int big; /* above 64 KiB, or aligned above it */
};

static struct block live[MAXLIVE];
static size_t nlive, nbig;
static struct ptrset live_set;
static uint64_t next_id;

/* A size from two bytes: a small one, one within 32 bytes of a power of two or of the middle
 * between two (class boundaries up to 32 KiB, the medium classes, glibc's sizes above), or a
 * multiple of 2 KiB up to 512 KiB. */
static size_t draw_size(uint8_t a, uint8_t b)
{
    switch (a >> 6) {
    case 0:
        return b;
    case 1:
        return (size_t)b << 6 | (a & 63); /* up to 16 KiB */
    case 2: {
        size_t base = (size_t)16 << (a & 15); /* 16 B .. 512 KiB */
        if (a & 16)
            base += base / 2;
        size_t delta = b & 31;
        return b & 32 ? base + delta : (base > delta ? base - delta : 0);
    }
    default:
        return ((size_t)b + 1) << 11; /* 2 KiB .. 512 KiB */
    }
}

static int is_big(size_t n)
{
    return n > ((size_t)64 << 10);
}

/* Checks a block the allocator just returned for n bytes and records it. */
static void took_aligned(unsigned char *p, size_t n, size_t align, int zeroed)
{
    FCHECK(p, "allocation of %zu bytes failed", n);
    FCHECK((uintptr_t)p % align == 0, "%p not aligned to %zu", (void *)p, align);
    if (n >= 16)
        FCHECK((uintptr_t)p % 16 == 0, "%p of %zu bytes not 16-byte aligned", (void *)p, n);
    size_t usable = uslab_malloc_usable_size(p);
    FCHECK(usable >= n, "usable size %zu below %zu", usable, n);
    /* calloc clears the whole block, as glibc's its whole chunk: a program may use what
     * malloc_usable_size reports */
    size_t nonzero = zeroed ? zero(p, usable) : (size_t)-1;
    FCHECK(nonzero == (size_t)-1, "calloc(%zu): byte %zu of %zu usable is %#x", n, nonzero, usable,
           p[nonzero]);
    FCHECK(ptrset_insert(&live_set, p), "%p handed out while live", (void *)p);
    struct block *b = &live[nlive++];
    b->p = p;
    b->size = n;
    b->usable = usable;
    b->id = ++next_id;
    b->big = is_big(n) || is_big(align);
    fill(p, usable, b->id); /* the whole usable size is the caller's */
    nbig += b->big;
}

static void took(unsigned char *p, size_t n, int zeroed)
{
    took_aligned(p, n, 1, zeroed);
}

/* Checks block i's contents and takes it out of the table; the block stays allocated. */
static struct block untrack(size_t i)
{
    struct block b = live[i];
    live[i] = live[--nlive];
    size_t bad = intact(b.p, b.usable, b.id);
    FCHECK(bad == (size_t)-1, "block %p of %zu bytes (%zu usable) corrupted at byte %zu",
           (void *)b.p, b.size, b.usable, bad);
    FCHECK(ptrset_remove(&live_set, b.p), "%p not live", (void *)b.p);
    nbig -= b.big;
    return b;
}

static int room_for(size_t n, size_t align)
{
    return nlive < MAXLIVE && ((!is_big(n) && !is_big(align)) || nbig < BIG_MAX);
}

static void op_realloc(uint8_t sel, size_t n)
{
    if (!nlive || (sel & 8)) { /* realloc(NULL, n) is malloc(n) */
        if (room_for(n, 1))
            took(uslab_realloc(NULL, n), n, 0);
        return;
    }
    size_t i = (size_t)(sel >> 4) % nlive;
    if (is_big(n) && !live[i].big && nbig >= BIG_MAX)
        return;
    struct block b = untrack(i);
    if (n == 0) { /* glibc's choice: frees and returns NULL */
        FCHECK(uslab_realloc(b.p, 0) == NULL, "realloc(%p, 0) returned a block", (void *)b.p);
        return;
    }
    unsigned char *q = uslab_realloc(b.p, n);
    FCHECK(q, "realloc(%p, %zu) failed", (void *)b.p, n);
    size_t kept = b.usable < n ? b.usable : n;
    size_t bad = intact(q, kept, b.id);
    FCHECK(bad == (size_t)-1, "realloc(%zu -> %zu) lost byte %zu", b.size, n, bad);
    took(q, n, 0);
}

static void op_aligned(uint8_t sel, uint8_t a, uint8_t b)
{
    size_t align = (size_t)1 << (3 + a % 19); /* 8 B .. 2 MiB */
    size_t n = draw_size(b, a);
    if (!room_for(n, align))
        return;
    void *p = NULL;
    switch (sel & 3) {
    case 0:
        p = uslab_memalign(align, n);
        break;
    case 1:
        FCHECK(uslab_posix_memalign(&p, align, n) == 0, "posix_memalign(%zu, %zu)", align, n);
        break;
    case 2:
        p = uslab_aligned_alloc(align, n);
        break;
    default:
        align = 4096;
        p = uslab_valloc(n);
        break;
    }
    took_aligned(p, n, align, 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!live_set.slot)
        ptrset_init(&live_set, MAXLIVE);
    for (size_t pos = 0; pos < size; pos += 3) {
        uint8_t op = data[pos], a = pos + 1 < size ? data[pos + 1] : 0,
                b = pos + 2 < size ? data[pos + 2] : 0;
        uint8_t sel = op >> 3;
        size_t n = draw_size(a, b);
        switch (op & 7) {
        case 0: /* malloc */
            if (room_for(n, 1))
                took(uslab_malloc(n), n, 0);
            break;
        case 1: { /* calloc, split in two factors; an overflowing pair must fail */
            if (sel & 16) {
                size_t k = SIZE_MAX / ((size_t)a + 2) + 1 + b;
                errno = 0;
                FCHECK(uslab_calloc(k, (size_t)a + 2) == NULL && errno == ENOMEM,
                       "calloc(%zu, %zu) overflows", k, (size_t)a + 2);
                break;
            }
            size_t m = n > ((size_t)64 << 10) ? 1 : (size_t)(sel & 7) + 1;
            if (room_for(n * m, 1))
                took(uslab_calloc(m, n), m * n, 1);
            break;
        }
        case 2:
            op_realloc(sel, n);
            break;
        case 3: /* reallocarray, and its overflow */
            if (sel & 16) {
                errno = 0;
                FCHECK(uslab_reallocarray(NULL, SIZE_MAX / 2 + 1 + b, 2) == NULL && errno == ENOMEM,
                       "reallocarray overflow");
            } else if (nlive) {
                struct block old = untrack((size_t)a % nlive);
                size_t m = (size_t)(sel & 7) + 1, want = (size_t)b * m;
                unsigned char *q = uslab_reallocarray(old.p, b, m);
                if (want == 0) {
                    FCHECK(q == NULL, "reallocarray(%p, 0) returned a block", (void *)old.p);
                    break;
                }
                size_t kept = old.usable < want ? old.usable : want;
                FCHECK(q && intact(q, kept, old.id) == (size_t)-1,
                       "reallocarray(%zu -> %zu) lost contents", old.size, want);
                took(q, want, 0);
            }
            break;
        case 4: /* free; free(NULL) does nothing */
            if (nlive)
                uslab_free(untrack((size_t)a % nlive).p);
            else
                uslab_free(NULL);
            break;
        case 5:
            op_aligned(sel, a, b);
            break;
        case 6: /* rewrite a block over its usable size, which must not have changed */
            if (nlive) {
                struct block *bl = &live[(size_t)a % nlive];
                FCHECK(intact(bl->p, bl->usable, bl->id) == (size_t)-1, "corrupted");
                FCHECK(uslab_malloc_usable_size(bl->p) == bl->usable, "usable size moved");
                bl->id = ++next_id;
                fill(bl->p, bl->usable, bl->id);
            }
            break;
        case 7: /* rarely a reap of every cache (it walks every cache id) */
            if ((a & 31) == 31)
                uslab_reap();
            break;
        }
    }
    while (nlive)
        uslab_free(untrack(nlive - 1).p);
    FCHECK(live_set.count == 0 && nbig == 0, "live set not empty");
    return 0;
}
