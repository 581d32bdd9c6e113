/* SPDX-License-Identifier: MIT */
/*
 * foreign_libc_check.c - run with LD_PRELOAD="libuslab-preload.so libforeign_libc.so"
 * (foreign_libc.c exports glibc's __libc_* names, as mimalloc does): blocks above the slab
 * range and alignments above a page, which uslab takes from glibc, keep their contents
 * through realloc across the slab limit and back, have glibc's usable sizes, and free
 * without a report. Before, uslab's system allocator was whatever __libc_malloc the
 * dynamic linker bound first: the foreign library's (with mimalloc: realloc copied the
 * length read from a glibc chunk header mimalloc's blocks do not have, and aborted on the
 * next free). Prints "foreign ok".
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

static void fail(const char *what, size_t a, size_t b)
{
    printf("FAIL: %s (%zu, %zu)\n", what, a, b);
    failures++;
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(seed + i * 7);
}

static int same(const unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(seed + i * 7))
            return 0;
    return 1;
}

int main(void)
{
    static const size_t sizes[] = {100, 40000, 70000, 300000, 5u << 20, 33000, 1000};
    size_t n = sizeof sizes / sizeof sizes[0];
    for (size_t i = 0; i < n; i++) {
        size_t cur = sizes[i];
        unsigned char *p = malloc(cur);
        if (!p || malloc_usable_size(p) < cur) {
            fail("malloc", cur, p ? malloc_usable_size(p) : 0);
            continue;
        }
        fill(p, cur, (unsigned)i);
        for (size_t j = 0; j < n; j++) {
            size_t next = sizes[(i + j + 1) % n];
            unsigned char *q = realloc(p, next);
            if (!q) {
                fail("realloc", cur, next);
                break;
            }
            size_t kept = cur < next ? cur : next;
            if (!same(q, kept, (unsigned)i))
                fail("realloc lost the contents", cur, next);
            if (malloc_usable_size(q) < next || malloc_usable_size(q) > next + (64u << 10))
                fail("usable size after realloc", next, malloc_usable_size(q));
            fill(q, next, (unsigned)i);
            p = q;
            cur = next;
        }
        free(p);
    }
    for (size_t align = 8192; align <= (1u << 20); align <<= 3) {
        void *p = NULL;
        if (posix_memalign(&p, align, 100000) != 0 || ((uintptr_t)p & (align - 1)))
            fail("posix_memalign", align, 100000);
        free(p);
        unsigned char *q = memalign(align, 50);
        if (!q || ((uintptr_t)q & (align - 1)))
            fail("memalign", align, 50);
        else
            fill(q, 50, 1);
        q = realloc(q, 200000);
        if (!q || !same(q, 50, 1))
            fail("realloc of an aligned block", align, 200000);
        free(q);
    }
    unsigned char *z = calloc(1, 1u << 20);
    for (size_t i = 0; z && i < (1u << 20); i++)
        if (z[i]) {
            fail("calloc", i, 0);
            break;
        }
    free(z);
    if (failures)
        return 1;
    printf("foreign ok\n");
    return 0;
}
