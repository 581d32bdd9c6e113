/* SPDX-License-Identifier: MIT */
/*
 * glibc_answers.c - the malloc family's answers at its edges (issue 15, docs/design.md §8).
 * A plain C program, run by compare.sh without and with LD_PRELOAD=libuslab-preload.so:
 * each call prints whether it returned NULL, errno afterwards (set to 4242 before, so
 * "kept" means untouched) and whether the block has the alignment glibc gives it. The two
 * outputs must be the same: where C allows either answer, uslab answers as glibc 2.36.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SENTINEL 4242

/* Sizes and alignments go through a volatile, so the compiler neither warns about nor
 * folds the calls it knows must fail. */
static volatile size_t vsz;
static size_t v(size_t x)
{
    vsz = x;
    return vsz;
}

static void say(const char *call, const void *p, int err, size_t align)
{
    char e[32];
    if (err == SENTINEL)
        snprintf(e, sizeof e, "kept");
    else
        snprintf(e, sizeof e, "%s", strerrorname_np(err) ? strerrorname_np(err) : "?");
    printf("%-40s %s errno=%s", call, p ? "ptr " : "NULL", e);
    if (p && align)
        printf(" aligned(%zu)=%s", align, (uintptr_t)p % align == 0 ? "yes" : "NO");
    printf("\n");
}

/* What glibc's memalign gives: the next power of two, at least malloc's 16. */
static size_t effective(size_t a)
{
    size_t e = 16;
    while (e < a && e < ((size_t)1 << 62))
        e *= 2;
    return e;
}

static const size_t aligns[] = {0,
                                1,
                                2,
                                3,
                                4,
                                8,
                                12,
                                16,
                                24,
                                32,
                                48,
                                64,
                                100,
                                4096,
                                4097,
                                8192,
                                (size_t)1 << 20,
                                (size_t)1 << 40,
                                (size_t)1 << 62,
                                ((size_t)1 << 62) + 1,
                                (size_t)1 << 63,
                                ((size_t)1 << 63) + 1,
                                SIZE_MAX};
static const size_t sizes[] = {0, 1, 100, 5000, (size_t)PTRDIFF_MAX, SIZE_MAX - 4096, SIZE_MAX};

int main(void)
{
    char call[96];
    void *p;
    int err;

    /* malloc: small blocks are 16-aligned (max_align_t), huge sizes fail with ENOMEM. */
    for (size_t n = 0; n <= 8; n++) {
        int all = 1;
        void *keep[64];
        for (int i = 0; i < 64; i++) {
            keep[i] = malloc(v(n));
            all &= keep[i] && (uintptr_t)keep[i] % 16 == 0;
        }
        printf("malloc(%zu) x64 all 16-aligned: %s\n", n, all ? "yes" : "NO");
        for (int i = 0; i < 64; i++)
            free(keep[i]);
    }
    const size_t big[] = {(size_t)PTRDIFF_MAX - 100, (size_t)PTRDIFF_MAX + 1, SIZE_MAX - 15,
                          SIZE_MAX};
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        errno = SENTINEL;
        p = malloc(v(big[i]));
        err = errno;
        snprintf(call, sizeof call, "malloc(%#zx)", big[i]);
        say(call, p, err, 16);
        free(p);
    }

    /* calloc: overflow of n * size. */
    const size_t cn[][2] = {{0, 0},        {1, 0},
                            {SIZE_MAX, 2}, {(size_t)1 << 32, (size_t)1 << 32},
                            {1, SIZE_MAX}, {(size_t)1 << 31, 8}};
    for (size_t i = 0; i < sizeof cn / sizeof cn[0]; i++) {
        errno = SENTINEL;
        p = calloc(v(cn[i][0]), v(cn[i][1]));
        err = errno;
        snprintf(call, sizeof call, "calloc(%#zx, %#zx)", cn[i][0], cn[i][1]);
        say(call, p, err, 16);
        free(p);
    }

    /* calloc clears the whole usable block (malloc_usable_size), as glibc clears its whole
     * chunk, also where a freed block of the same size left its bytes there. */
    const size_t dirty[] = {1, 17, 20, 100, 1000, 1025, 5000, 30000};
    for (size_t i = 0; i < sizeof dirty / sizeof dirty[0]; i++) {
        unsigned char *d = malloc(v(dirty[i]));
        volatile unsigned char *w = d; /* not a dead store before the free */
        for (size_t k = 0; k < malloc_usable_size(d); k++)
            w[k] = 0xAA;
        free(d);
        unsigned char *z = calloc(1, v(dirty[i]));
        size_t usable = malloc_usable_size(z), nonzero = 0;
        for (size_t k = 0; k < usable; k++)
            nonzero += z[k] != 0;
        printf("calloc(1, %zu) after a dirty free: usable bytes all zero: %s\n", dirty[i],
               nonzero ? "no" : "yes");
        free(z);
    }

    /* realloc and reallocarray: NULL, zero, overflow; a failed call keeps the block. */
    errno = SENTINEL;
    p = realloc(NULL, v(10));
    say("realloc(NULL, 10)", p, errno, 16);
    errno = SENTINEL;
    void *q = realloc(p, v(0));
    say("realloc(p, 0)", q, errno, 16);
    free(q);
    errno = SENTINEL;
    p = realloc(NULL, v(0));
    say("realloc(NULL, 0)", p, errno, 16);
    free(p);
    p = malloc(24);
    memset(p, 0x5a, 24);
    for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) {
        errno = SENTINEL;
        q = realloc(p, v(big[i]));
        err = errno;
        snprintf(call, sizeof call, "realloc(p, %#zx)", big[i]);
        say(call, q, err, 16);
        if (q)
            p = q;
    }
    printf("block kept after failed reallocs: %s\n",
           ((unsigned char *)p)[0] == 0x5a && ((unsigned char *)p)[23] == 0x5a ? "yes" : "NO");
    const size_t ra[][2] = {{SIZE_MAX, 2}, {(size_t)1 << 33, (size_t)1 << 33}, {0, 0}, {4, 8}};
    for (size_t i = 0; i < sizeof ra / sizeof ra[0]; i++) {
        errno = SENTINEL;
        q = reallocarray(p, v(ra[i][0]), v(ra[i][1]));
        err = errno;
        snprintf(call, sizeof call, "reallocarray(p, %#zx, %#zx)", ra[i][0], ra[i][1]);
        say(call, q, err, 16);
        if (q || (ra[i][0] * ra[i][1] == 0 && !q)) /* a freed block (size 0) is gone */
            p = q;
    }
    free(p);
    errno = SENTINEL;
    p = reallocarray(NULL, v(SIZE_MAX), v(2));
    say("reallocarray(NULL, SIZE_MAX, 2)", p, errno, 16);

    /* The aligned family over every alignment and size above. */
    for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++)
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            size_t a = aligns[i], n = sizes[k];
            errno = SENTINEL;
            p = aligned_alloc(v(a), v(n));
            err = errno;
            snprintf(call, sizeof call, "aligned_alloc(%#zx, %#zx)", a, n);
            say(call, p, err, effective(a));
            free(p);
            errno = SENTINEL;
            p = memalign(v(a), v(n));
            err = errno;
            snprintf(call, sizeof call, "memalign(%#zx, %#zx)", a, n);
            say(call, p, err, effective(a));
            free(p);
            errno = SENTINEL;
            p = (void *)&p;
            int r = posix_memalign(&p, v(a), v(n));
            err = errno;
            snprintf(call, sizeof call, "posix_memalign(%#zx, %#zx)=%s", a, n,
                     r ? strerrorname_np(r) : "0");
            printf("%s%s\n", p == (void *)&p ? "(out untouched) " : "", r ? "" : "(out set)");
            say(call, r ? NULL : p, err, effective(a));
            if (!r)
                free(p);
        }

    /* valloc and pvalloc: page-aligned; pvalloc rounds the size up to pages. */
    long page = sysconf(_SC_PAGESIZE);
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        errno = SENTINEL;
        p = valloc(v(n));
        err = errno;
        snprintf(call, sizeof call, "valloc(%#zx)", n);
        say(call, p, err, (size_t)page);
        free(p);
        errno = SENTINEL;
        p = pvalloc(v(n));
        err = errno;
        snprintf(call, sizeof call, "pvalloc(%#zx)", n);
        say(call, p, err, (size_t)page);
        free(p);
    }
    errno = SENTINEL;
    p = pvalloc(v(SIZE_MAX - (size_t)page + 1));
    say("pvalloc(SIZE_MAX - page + 1)", p, errno, (size_t)page);

    /* malloc_usable_size and free of NULL. */
    errno = SENTINEL;
    size_t u = malloc_usable_size(NULL);
    printf("malloc_usable_size(NULL) = %zu errno=%s\n", u, errno == SENTINEL ? "kept" : "set");
    errno = SENTINEL;
    free(NULL);
    printf("free(NULL) errno=%s\n", errno == SENTINEL ? "kept" : "set");
    p = malloc(100);
    errno = SENTINEL;
    free(p);
    printf("free(p) errno=%s\n", errno == SENTINEL ? "kept" : "set");
    return 0;
}
