/* SPDX-License-Identifier: MIT */
/*
 * test_malloc_api.c - every function of the uslab malloc family and its edge cases (issue 3):
 * sizes 0..64 KiB and beyond, exact usable sizes, alignment, calloc zeroing and overflow,
 * realloc across the slab/glibc boundary, the aligned allocators' EINVAL rules, and ENOMEM
 * with errno on huge sizes. Every block is written to its usable size and verified later.
 *
 * The expected size classes are computed here independently of src/sizeclass.c from the
 * documented rule: 16, 32, 48, ..., 128, then 8 classes per doubling up to 32 KiB (and 4480,
 * between 4096 and 4608), then 2 per doubling (medium blocks) up to
 * USLAB_MAX_SLAB_SIZE (read from the environment like the library does, default 256 KiB).
 */
#include "check.h"
#include "uslab.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

static size_t max_slab = (size_t)256 << 10;

/* The largest class size <= max_slab, by the documented rule. */
static size_t largest_class;

/* Expected class size for a request, or 0 when the request is served by glibc. */
static size_t class_of(size_t size)
{
    if (size > largest_class)
        return 0;
    if (size <= 16)
        return 16; /* no 8-byte class: every block is 16-byte aligned, as glibc's */
    if (size <= 128)
        return (size + 15) & ~(size_t)15;
    size_t lo = 128;
    while (lo * 2 < size)
        lo *= 2;
    size_t step = lo >= 32768 ? lo / 2 : lo / 8; /* medium: 2 per doubling */
    if (lo == 4096 && size <= 4480)
        return 4480;
    return (size + step - 1) / step * step;
}

static void compute_largest_class(void)
{
    largest_class = 128;
    for (size_t base = 128; base < max_slab; base *= 2) {
        size_t per = base < 32768 ? 8 : 2;
        for (size_t j = 1; j <= per; j++)
            if (base + j * (base / per) <= max_slab)
                largest_class = base + j * (base / per);
    }
}

/* ---- patterns --------------------------------------------------------------------------- */

static unsigned char pat(uintptr_t seed, size_t i)
{
    uint64_t x = (uint64_t)seed * 0x9e3779b97f4a7c15ull + i * 0x2545f4914f6cdd1dull;
    return (unsigned char)((x >> 29) ^ (x >> 47) ^ i);
}

static void fill(void *p, size_t n, uintptr_t seed)
{
    unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        b[i] = pat(seed, i);
}

/* Index of the first byte that differs from the pattern, or n. */
static size_t verify(const void *p, size_t n, uintptr_t seed)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != pat(seed, i))
            return i;
    return n;
}

static int all_zero(const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i])
            return 0;
    return 1;
}

struct blk {
    unsigned char *p;
    size_t size, usable;
    uintptr_t seed;
};

static int cmp_blk(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const struct blk *)a)->p, y = (uintptr_t)((const struct blk *)b)->p;
    return x < y ? -1 : x > y;
}

/* Blocks pairwise distinct and not overlapping over their usable sizes. */
static void check_disjoint(struct blk *v, size_t n, const char *what)
{
    struct blk *s = malloc(n * sizeof *s); /* glibc's malloc: this test links libuslab */
    CHECK(s, "malloc");
    memcpy(s, v, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_blk);
    for (size_t i = 1; i < n; i++)
        CHECK(s[i - 1].p + s[i - 1].usable <= s[i].p, "%s: blocks %p+%zu and %p overlap", what,
              (void *)s[i - 1].p, s[i - 1].usable, (void *)s[i].p);
    free(s);
}

static void verify_and_free(struct blk *v, size_t n, const char *what)
{
    check_disjoint(v, n, what);
    for (size_t i = 0; i < n; i++) {
        size_t bad = verify(v[i].p, v[i].usable, v[i].seed);
        CHECK(bad == v[i].usable, "%s: block %zu (size %zu) corrupted at byte %zu", what, i,
              v[i].size, bad);
        CHECK(uslab_malloc_usable_size(v[i].p) == v[i].usable, "%s: usable size changed", what);
        uslab_free(v[i].p);
    }
}

/* Common checks on a fresh block of `size` bytes aligned to `align`; returns its usable size. */
static size_t check_block(void *p, size_t size, size_t align, const char *fn)
{
    CHECK(p != NULL, "%s(%zu) returned NULL (errno %d)", fn, size, errno);
    CHECK(((uintptr_t)p & (align - 1)) == 0, "%s(%zu) = %p not aligned to %zu", fn, size, p, align);
    if (size >= 16)
        CHECK(((uintptr_t)p & 15) == 0, "%s(%zu) = %p not 16-byte aligned", fn, size, p);
    else
        CHECK(((uintptr_t)p & 7) == 0, "%s(%zu) = %p not 8-byte aligned", fn, size, p);
    size_t u = uslab_malloc_usable_size(p);
    CHECK(u >= size, "%s(%zu): usable size %zu too small", fn, size, u);
    return u;
}

/* ---- malloc / free / usable size ------------------------------------------------------------ */

static void test_every_small_size(void)
{
    enum { N = 4097 };
    static struct blk v[N];
    for (size_t s = 0; s < N; s++) {
        void *p = uslab_malloc(s);
        size_t u = check_block(p, s, 1, "malloc");
        if (class_of(s))
            CHECK(u == class_of(s), "malloc(%zu): usable %zu, expected class %zu", s, u,
                  class_of(s));
        if (class_of(s) && s > 128)
            CHECK((u - s) * 8 < u, "malloc(%zu): usable %zu wastes 1/8 or more", s, u);
        v[s] = (struct blk){p, s, u, s * 7 + 1};
        fill(p, u, v[s].seed);
    }
    verify_and_free(v, N, "every size 0..4096");
}

static void test_size_sweep(void)
{
    enum { MAXN = 4096 };
    static struct blk v[MAXN];
    size_t n = 0;
    /* 4097..65536 in odd steps, every power of two and its neighbours, and far beyond. */
    for (size_t s = 4097; s <= 65536 && n < MAXN; s += 97)
        v[n++].size = s;
    for (size_t b = 16; b <= ((size_t)1 << 24); b *= 2)
        for (size_t d = 0; d < 3; d++)
            v[n++].size = b - 1 + d;
    static const size_t extra[] = {28672, 32767, 32768, 32769, 36864,  40000,  40960,  49152,
                                   57344, 65535, 65536, 65537, 100000, 131072, 1000000};
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
        v[n++].size = extra[i];
    for (size_t i = 0; i < n; i++) {
        size_t s = v[i].size;
        void *p = uslab_malloc(s);
        size_t u = check_block(p, s, 1, "malloc");
        size_t c = class_of(s);
        if (c)
            CHECK(u == c, "malloc(%zu): usable %zu, expected class %zu", s, u, c);
        v[i] = (struct blk){p, s, u, i + 12345};
        fill(p, u, v[i].seed);
    }
    verify_and_free(v, n, "size sweep");
}

static void test_malloc_zero(void)
{
    enum { N = 1000 };
    static struct blk v[N];
    for (size_t i = 0; i < N; i++) {
        void *p = uslab_malloc(0);
        size_t u = check_block(p, 0, 16, "malloc");
        CHECK(u == 16, "malloc(0): usable %zu", u);
        v[i] = (struct blk){p, 0, u, i};
        fill(p, u, i);
    }
    verify_and_free(v, N, "malloc(0)");
    CHECK(uslab_malloc_usable_size(NULL) == 0, "usable size of NULL");
    uslab_free(NULL);
}

/* Many blocks of one class at once: several slabs, all distinct, LIFO reuse after free. */
static void test_many_same_class(void)
{
    static const size_t sizes[] = {8, 24, 100, 1000, 3000, 20000, 32768};
    enum { N = 3000 };
    static struct blk v[N];
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t s = sizes[k];
        size_t n = s >= 20000 ? 300 : N;
        for (size_t i = 0; i < n; i++) {
            void *p = uslab_malloc(s);
            size_t u = check_block(p, s, 1, "malloc");
            v[i] = (struct blk){p, s, u, i ^ (s << 20)};
            fill(p, u, v[i].seed);
        }
        verify_and_free(v, n, "same class");
        /* The block freed last is handed out first (thread magazine). */
        void *a = uslab_malloc(s);
        uslab_free(a);
        void *b = uslab_malloc(s);
        CHECK(a == b, "malloc(%zu) after free: %p, expected reuse of %p", s, b, a);
        uslab_free(b);
    }
}

/* ---- calloc --------------------------------------------------------------------------------- */

static void test_calloc(void)
{
    static const size_t sizes[] = {0,     1,     7,     8,       9,      16,     17,    33,
                                   48,    49,    63,    64,      100,    128,    129,   1000,
                                   1024,  4095,  4096,  4097,    10000,  32767,  32768, 32769,
                                   40000, 65536, 65537, 1 << 17, 200000, 1 << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t s = sizes[k];
        /* Dirty memory of this class first, freed, then calloc must still zero it. */
        enum { N = 40 };
        void *dirty[N];
        for (size_t i = 0; i < N; i++) {
            dirty[i] = uslab_malloc(s);
            CHECK(dirty[i], "malloc(%zu)", s);
            memset(dirty[i], 0xa5, uslab_malloc_usable_size(dirty[i]));
        }
        for (size_t i = 0; i < N; i++)
            uslab_free(dirty[N - 1 - i]);
        struct blk v[N];
        for (size_t i = 0; i < N; i++) {
            void *p = uslab_calloc(1, s);
            size_t u = check_block(p, s, 1, "calloc");
            /* the whole usable block, as glibc's calloc clears its whole chunk */
            CHECK(all_zero(p, u), "calloc(1, %zu) not zeroed (reused block %zu)", s, i);
            v[i] = (struct blk){p, s, u, s + i};
            fill(p, u, v[i].seed);
        }
        verify_and_free(v, N, "calloc");
        /* n * size split differently */
        if (s >= 4 && s % 4 == 0) {
            unsigned char *p = uslab_calloc(s / 4, 4);
            check_block(p, s, 1, "calloc");
            CHECK(all_zero(p, s), "calloc(%zu, 4) not zeroed", s / 4);
            uslab_free(p);
        }
    }
    for (size_t i = 0; i < 10; i++) {
        void *a = uslab_calloc(0, 5), *b = uslab_calloc(5, 0), *c = uslab_calloc(0, 0);
        CHECK(a && b && c && a != b && b != c && a != c, "calloc of 0 bytes");
        uslab_free(a), uslab_free(b), uslab_free(c);
    }
    static const size_t ov[][2] = {
        {SIZE_MAX, 2},         {2, SIZE_MAX},
        {SIZE_MAX / 2 + 1, 2}, {(size_t)1 << 33, (size_t)1 << 33},
        {SIZE_MAX, SIZE_MAX},  {65537, 281470681808897ull /* product wraps to a small value */}};
    for (size_t k = 0; k < sizeof ov / sizeof ov[0]; k++) {
        errno = 0;
        void *p = uslab_calloc(ov[k][0], ov[k][1]);
        CHECK(p == NULL && errno == ENOMEM, "calloc(%zu, %zu) overflow: %p errno %d", ov[k][0],
              ov[k][1], p, errno);
    }
}

/* ---- realloc -------------------------------------------------------------------------------- */

/* Grows and shrinks one block through `sizes`, checking the kept prefix at each step. A
 * block is a slab block iff it was last allocated by uslab with a size within the classes;
 * a block that grows past 8 KiB goes to glibc (whose realloc grows it in place, design
 * §8); a glibc block stays with glibc when realloc'ed. */
static void realloc_chain(const size_t *sizes, size_t n, uintptr_t seed)
{
    unsigned char *p = uslab_realloc(NULL, sizes[0]);
    size_t have = check_block(p, sizes[0], 1, "realloc(NULL)");
    int slab = class_of(sizes[0]) != 0;
    if (slab)
        CHECK(have == class_of(sizes[0]), "realloc(NULL, %zu): usable %zu", sizes[0], have);
    fill(p, have, seed);
    for (size_t i = 1; i < n; i++) {
        size_t s = sizes[i];
        unsigned char *q = uslab_realloc(p, s);
        size_t u = check_block(q, s, 1, "realloc");
        size_t keep = have < s ? have : s;
        size_t bad = verify(q, keep, seed);
        CHECK(bad == keep, "realloc %zu -> %zu lost byte %zu", have, s, bad);
        if (slab && q == p)
            CHECK(u == have, "realloc %zu -> %zu in place changed the usable size to %zu", have, s,
                  u);
        if (slab && q != p) {
            slab = class_of(s) != 0 && (s <= have || s <= 8192);
            /* Growth gets room for half as much again, within 8 KiB. */
            size_t asked = s;
            if (slab && s > have) {
                size_t most = max_slab < 8192 ? max_slab : 8192;
                asked = s + s / 2 <= most ? s + s / 2 : most;
            }
            if (slab)
                CHECK(u == class_of(asked), "realloc to %zu: usable %zu, class %zu", s, u,
                      class_of(asked));
        }
        seed = seed * 31 + 7;
        fill(q, u, seed);
        p = q;
        have = u;
    }
    uslab_free(p);
}

static void test_realloc(void)
{
    /* NULL -> malloc */
    void *p = uslab_realloc(NULL, 40);
    CHECK(uslab_malloc_usable_size(p) == 48, "realloc(NULL, 40)");
    /* (p, 0) frees p and returns NULL: the same block comes back from the next malloc. */
    errno = 0;
    CHECK(uslab_realloc(p, 0) == NULL, "realloc(p, 0) returned non-NULL");
    void *q = uslab_malloc(40);
    CHECK(q == p, "realloc(p, 0) did not free p (%p vs %p)", q, p);
    uslab_free(q);
    p = uslab_malloc(100000); /* a glibc block */
    CHECK(uslab_realloc(p, 0) == NULL, "realloc(large, 0)");
    /* A buffer grown by 1.5x: every other step stays in place (room for half as much again). */
    if (max_slab >= 32768) {
        unsigned char *b = uslab_malloc(100);
        size_t moved = 0, steps = 0;
        for (size_t s = 150; s <= 20000; s += s / 2, steps++) {
            unsigned char *c = uslab_realloc(b, s);
            moved += c != b;
            b = c;
        }
        CHECK(moved * 2 <= steps + 1, "a buffer grown by 1.5x moved %zu times in %zu", moved,
              steps);
        uslab_free(b);
    }

    /* Chains across every class boundary and the slab/glibc boundary, both ways. */
    static size_t up[400];
    size_t n = 0;
    for (size_t s = 1; s <= 300000; s = s * 9 / 8 + 1)
        up[n++] = s;
    realloc_chain(up, n, 1);
    static size_t down[400];
    for (size_t i = 0; i < n; i++)
        down[i] = up[n - 1 - i];
    realloc_chain(down, n, 2);
    static const size_t zigzag[] = {10,    32768, 32769, 32768,  32767, 40000, 16,   70000,
                                    1,     65536, 32768, 200000, 8,     32769, 4096, 1 << 20,
                                    24576, 33000, 100,   32768,  65537, 3};
    realloc_chain(zigzag, sizeof zigzag / sizeof zigzag[0], 3);
    static const size_t boundary[] = {32768, 32769, 32768, 65536, 32768, 32769, 16, 32769};
    realloc_chain(boundary, sizeof boundary / sizeof boundary[0], 4);
    static const size_t page[] = {4000, 4096, 4097, 4096, 8192, 8193, 3000, 4097, 16, 8193, 6000};
    realloc_chain(page, sizeof page / sizeof page[0], 5);

    /* Growth within 8 KiB stays in the classes, with room for half as much again, as far as
     * 8 KiB (redis's list nodes); past 8 KiB it goes to glibc (design §8): the block has
     * glibc's usable size (every such block is glibc's where the classes end below 8 KiB). */
    int grows_here = max_slab >= 8192;
    unsigned char *g = uslab_malloc(4000);
    fill(g, 4000, 6);
    g = uslab_realloc(g, 5000);
    CHECK(g && verify(g, 4000, 6) == 4000, "realloc 4000 -> 5000 lost the contents");
    CHECK(grows_here ? class_of(uslab_malloc_usable_size(g)) == uslab_malloc_usable_size(g) &&
                           uslab_malloc_usable_size(g) >= 7500
                     : uslab_malloc_usable_size(g) < 5000 + 32,
          "realloc 4000 -> 5000: usable %zu, not a class with room for 7,500",
          uslab_malloc_usable_size(g));
    fill(g, 5000, 7);
    g = uslab_realloc(g, 8000);
    CHECK(g && verify(g, 5000, 7) == 5000, "realloc 5000 -> 8000 lost the contents");
    CHECK(grows_here ? class_of(uslab_malloc_usable_size(g)) == 8192
                     : uslab_malloc_usable_size(g) < 8000 + 32,
          "realloc 5000 -> 8000: usable %zu", uslab_malloc_usable_size(g));
    g = uslab_realloc(g, 8193);
    CHECK(g && verify(g, 5000, 7) == 5000, "realloc 8000 -> 8193 lost the contents");
    CHECK(uslab_malloc_usable_size(g) < 8193 + 32, "realloc 8000 -> 8193: usable %zu",
          uslab_malloc_usable_size(g));
    uslab_free(g);

    /* In place while the class allows: growing within the class, shrinking by less than
     * half of it. */
    static const size_t inplace[][2] = {{20, 32},       {1, 8},      {100, 112},   {129, 144},
                                        {600, 640},     {1000, 600}, {3000, 2000}, {20000, 16000},
                                        {32768, 20000}, {8, 1},      {16, 9}};
    for (size_t k = 0; k < sizeof inplace / sizeof inplace[0]; k++) {
        size_t a = inplace[k][0], b = inplace[k][1];
        unsigned char *x = uslab_malloc(a);
        fill(x, a, k);
        unsigned char *y = uslab_realloc(x, b);
        CHECK(y == x, "realloc %zu -> %zu moved the block", a, b);
        size_t keep = a < b ? a : b;
        CHECK(verify(y, keep, k) == keep, "realloc in place lost data");
        uslab_free(y);
    }

    /* Failure leaves the block alone. */
    static const size_t from[] = {10, 1000, 32768, 50000};
    static const size_t huge[] = {SIZE_MAX, SIZE_MAX / 2, SIZE_MAX - 4096, (size_t)1 << 62};
    for (size_t k = 0; k < sizeof from / sizeof from[0]; k++)
        for (size_t h = 0; h < sizeof huge / sizeof huge[0]; h++) {
            unsigned char *x = uslab_malloc(from[k]);
            fill(x, from[k], h);
            errno = 0;
            CHECK(uslab_realloc(x, huge[h]) == NULL && errno == ENOMEM,
                  "realloc(%zu -> %zu) errno %d", from[k], huge[h], errno);
            CHECK(verify(x, from[k], h) == from[k], "failed realloc changed the block");
            CHECK(uslab_malloc_usable_size(x) >= from[k], "failed realloc: usable size");
            uslab_free(x);
        }

    /* reallocarray */
    unsigned char *x = uslab_reallocarray(NULL, 10, 10);
    check_block(x, 100, 1, "reallocarray");
    fill(x, 100, 9);
    errno = 0;
    CHECK(uslab_reallocarray(x, SIZE_MAX / 2 + 1, 2) == NULL && errno == ENOMEM,
          "reallocarray overflow");
    errno = 0;
    CHECK(uslab_reallocarray(x, (size_t)1 << 32, (size_t)1 << 32) == NULL && errno == ENOMEM,
          "reallocarray overflow");
    CHECK(verify(x, 100, 9) == 100, "reallocarray overflow touched the block");
    x = uslab_reallocarray(x, 1000, 50); /* 50000: glibc */
    check_block(x, 50000, 16, "reallocarray");
    CHECK(verify(x, 100, 9) == 100, "reallocarray grow lost data");
    x = uslab_reallocarray(x, 3, 5);
    check_block(x, 15, 1, "reallocarray");
    CHECK(verify(x, 15, 9) == 15, "reallocarray shrink lost data");
    errno = 0;
    CHECK(uslab_reallocarray(NULL, SIZE_MAX, SIZE_MAX) == NULL && errno == ENOMEM,
          "reallocarray(NULL) overflow");
    CHECK(uslab_reallocarray(x, 0, 10) == NULL, "reallocarray(p, 0, n) frees");
}

/* ---- aligned allocation --------------------------------------------------------------------- */

/* Expected usable size of an aligned block of `size` bytes from the slab path, else 0. */
static size_t aligned_class(size_t size, size_t align)
{
    if (align <= 16)
        return class_of(size < align ? align : size);
    if (align > 4096)
        return 0;
    size_t s = size > align ? size : align, p = 16;
    while (p < s)
        p *= 2;
    return p <= largest_class ? p : 0;
}

static void test_alignments(void)
{
    enum { MAXN = 4096 };
    static struct blk v[MAXN];
    size_t n = 0;
    for (size_t a = 8; a <= 65536; a *= 2) {
        const size_t sizes[] = {0,    1,     7,     8,     15,    16,    17,    63,     64,
                                65,   100,   a - 1, a,     a + 1, 2 * a, 1000,  4095,   4096,
                                4097, 10000, 16384, 32767, 32768, 32769, 40000, 100000, 3 * a};
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            size_t s = sizes[k];
            for (int fn = 0; fn < 3; fn++) {
                void *p = NULL;
                const char *name;
                if (fn == 0) {
                    name = "posix_memalign";
                    int r = uslab_posix_memalign(&p, a, s);
                    CHECK(r == 0, "posix_memalign(%zu, %zu) = %d", a, s, r);
                } else if (fn == 1) {
                    name = "aligned_alloc";
                    p = uslab_aligned_alloc(a, s);
                } else {
                    name = "memalign";
                    p = uslab_memalign(a, s);
                }
                size_t u = check_block(p, s, a, name);
                size_t c = aligned_class(s, a);
                if (c)
                    CHECK(u == c, "%s(%zu, %zu): usable %zu, expected %zu", name, a, s, u, c);
                CHECK(n < MAXN, "too many blocks");
                v[n] = (struct blk){p, s, u, n * 3 + a};
                fill(p, u, v[n].seed);
                n++;
            }
        }
    }
    verify_and_free(v, n, "alignments");

    /* Many blocks of each alignment at once: every slab's objects are aligned. */
    for (size_t a = 32; a <= 4096; a *= 2) {
        size_t cnt = a >= 1024 ? 200 : 1000;
        n = 0;
        for (size_t i = 0; i < cnt; i++) {
            void *p = uslab_aligned_alloc(a, 24);
            size_t u = check_block(p, 24, a, "aligned_alloc");
            v[n] = (struct blk){p, 24, u, i};
            fill(p, u, i);
            n++;
        }
        verify_and_free(v, n, "many aligned");
    }

    /* Aligned blocks can be realloc'ed and keep their contents. */
    unsigned char *p = uslab_memalign(4096, 100);
    check_block(p, 100, 4096, "memalign");
    fill(p, 100, 5);
    p = uslab_realloc(p, 5000);
    CHECK(p && verify(p, 100, 5) == 100, "realloc of an aligned block");
    uslab_free(p);
}

static void test_aligned_rules(void)
{
    /* posix_memalign: a power of two multiple of sizeof(void *), else EINVAL; the output is
     * not written on failure and the error is returned, not stored in errno. */
    static const size_t bad[] = {0,  1,  2,  3,   4,    5,       7,        12,
                                 24, 48, 96, 100, 4097, 3 << 12, SIZE_MAX, SIZE_MAX / 2};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        void *p = (void *)0x1234;
        errno = 0;
        int r = uslab_posix_memalign(&p, bad[k], 16);
        CHECK(r == EINVAL, "posix_memalign(align %zu) = %d, expected EINVAL", bad[k], r);
        CHECK(p == (void *)0x1234, "posix_memalign wrote the output on failure");
        CHECK(errno == 0, "posix_memalign(align %zu) set errno %d", bad[k], errno);
    }
    for (size_t a = 8; a <= ((size_t)1 << 20); a *= 2) {
        void *p = NULL;
        CHECK(uslab_posix_memalign(&p, a, 1) == 0, "posix_memalign(%zu, 1)", a);
        check_block(p, 1, a, "posix_memalign");
        uslab_free(p);
        CHECK(uslab_posix_memalign(&p, a, 3 * a) == 0, "posix_memalign(%zu, %zu)", a, 3 * a);
        size_t u = check_block(p, 3 * a, a, "posix_memalign");
        memset(p, 1, u);
        uslab_free(p);
    }
    static const size_t enomem[] = {SIZE_MAX, SIZE_MAX / 2, SIZE_MAX - 100};
    for (size_t k = 0; k < sizeof enomem / sizeof enomem[0]; k++)
        for (size_t a = 8; a <= 65536; a *= 4) {
            void *p = (void *)0x1234;
            int r = uslab_posix_memalign(&p, a, enomem[k]);
            CHECK(r == ENOMEM, "posix_memalign(%zu, %zu) = %d, expected ENOMEM", a, enomem[k], r);
            CHECK(p == (void *)0x1234, "posix_memalign wrote the output on failure");
        }

    /* aligned_alloc: as glibc 2.36, memalign's rounding: 0 or a non-power-of-two alignment
     * is rounded up to the next power of two (design §8); above 2^63 EINVAL. */
    static const size_t odd2[][2] = {{0, 16},  {3, 16},    {5, 16},      {12, 16},    {24, 32},
                                     {48, 64}, {100, 128}, {4095, 4096}, {4097, 8192}};
    for (size_t k = 0; k < sizeof odd2 / sizeof odd2[0]; k++) {
        void *p = uslab_aligned_alloc(odd2[k][0], 64);
        check_block(p, 64, odd2[k][1], "aligned_alloc");
        uslab_free(p);
    }
    errno = 0;
    CHECK(uslab_aligned_alloc(SIZE_MAX, 64) == NULL && errno == EINVAL,
          "aligned_alloc(SIZE_MAX, 64): EINVAL");
    errno = 0;
    CHECK(uslab_aligned_alloc((size_t)1 << 63, 1) == NULL && errno == ENOMEM,
          "aligned_alloc(2^63, 1): ENOMEM");
    for (size_t a = 1; a <= 8; a *= 2) {
        void *p = uslab_aligned_alloc(a, 5);
        check_block(p, 5, a, "aligned_alloc");
        uslab_free(p);
    }

    /* memalign: a non-power-of-two alignment is rounded up to the next power of two. */
    static const size_t odd[][2] = {{0, 8},       {1, 8},       {3, 8},        {24, 32},
                                    {33, 64},     {100, 128},   {1000, 1024},  {3000, 4096},
                                    {4097, 8192}, {5000, 8192}, {40000, 65536}};
    for (size_t k = 0; k < sizeof odd / sizeof odd[0]; k++)
        for (size_t s = 1; s <= 10000; s = s * 3 + 1) {
            void *p = uslab_memalign(odd[k][0], s);
            size_t u = check_block(p, s, odd[k][1], "memalign");
            memset(p, 2, u);
            uslab_free(p);
        }

    /* valloc / pvalloc: page aligned; pvalloc rounds the size up to whole pages. */
    static const size_t vs[] = {0, 1, 100, 4095, 4096, 4097, 10000, 32768, 40000, 100000};
    for (size_t k = 0; k < sizeof vs / sizeof vs[0]; k++) {
        void *p = uslab_valloc(vs[k]);
        size_t u = check_block(p, vs[k], 4096, "valloc");
        memset(p, 3, u);
        size_t rounded = vs[k] ? (vs[k] + 4095) & ~(size_t)4095 : 4096;
        void *q = uslab_pvalloc(vs[k]);
        size_t uq = check_block(q, rounded, 4096, "pvalloc");
        memset(q, 4, uq);
        CHECK(p != q, "valloc/pvalloc returned the same block");
        uslab_free(p);
        uslab_free(q);
    }
}

/* ---- ENOMEM with errno for huge sizes, in every function ------------------------------------ */

static void test_enomem(void)
{
    static const size_t huge[] = {SIZE_MAX,      SIZE_MAX / 2,    SIZE_MAX / 2 + 1,
                                  SIZE_MAX - 15, (size_t)1 << 62, (size_t)PTRDIFF_MAX};
    void *live = uslab_malloc(10);
    void *live_big = uslab_malloc(50000);
    for (size_t k = 0; k < sizeof huge / sizeof huge[0]; k++) {
        size_t s = huge[k];
#define EXPECT_ENOMEM(call)                                                                        \
    do {                                                                                           \
        errno = 0;                                                                                 \
        void *r_ = (call);                                                                         \
        CHECK(r_ == NULL && errno == ENOMEM, "%s with size %zu: %p errno %d", #call, s, r_,        \
              errno);                                                                              \
    } while (0)
        EXPECT_ENOMEM(uslab_malloc(s));
        EXPECT_ENOMEM(uslab_calloc(1, s));
        EXPECT_ENOMEM(uslab_calloc(s, 1));
        EXPECT_ENOMEM(uslab_realloc(NULL, s));
        EXPECT_ENOMEM(uslab_realloc(live, s));
        EXPECT_ENOMEM(uslab_realloc(live_big, s));
        EXPECT_ENOMEM(uslab_reallocarray(NULL, 1, s));
        EXPECT_ENOMEM(uslab_reallocarray(live, s, 1));
        EXPECT_ENOMEM(uslab_aligned_alloc(8, s));
        EXPECT_ENOMEM(uslab_aligned_alloc(64, s));
        EXPECT_ENOMEM(uslab_aligned_alloc(4096, s));
        EXPECT_ENOMEM(uslab_aligned_alloc(65536, s));
        EXPECT_ENOMEM(uslab_memalign(16, s));
        EXPECT_ENOMEM(uslab_memalign(256, s));
        EXPECT_ENOMEM(uslab_memalign(1 << 20, s));
        EXPECT_ENOMEM(uslab_valloc(s));
        EXPECT_ENOMEM(uslab_pvalloc(s));
        void *p = NULL;
        CHECK(uslab_posix_memalign(&p, 16, s) == ENOMEM, "posix_memalign(16, %zu)", s);
        CHECK(uslab_posix_memalign(&p, 512, s) == ENOMEM, "posix_memalign(512, %zu)", s);
#undef EXPECT_ENOMEM
    }
    CHECK(uslab_malloc_usable_size(live) == 16, "live block after failures");
    uslab_free(live);
    uslab_free(live_big);
}

int main(void)
{
    const char *env = getenv("USLAB_MAX_SLAB_SIZE");
    if (env)
        max_slab = strtoull(env, NULL, 0);
    compute_largest_class();
    test_every_small_size();
    test_size_sweep();
    test_malloc_zero();
    test_many_same_class();
    test_calloc();
    test_realloc();
    test_alignments();
    test_aligned_rules();
    test_enomem();
    TEST_DONE();
}
