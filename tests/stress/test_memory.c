/* SPDX-License-Identifier: MIT */
/*
 * test_memory.c - footprint: 1,000,000 live 32-byte objects of one cache take at most 5%
 * more resident memory than their payload plus 1 MiB, and after freeing them all,
 * uslab_cache_reap gives the memory back. The same for malloc sizes 16..256 (then
 * uslab_reap). Resident memory is read from /proc/self/statm, as the increase over a
 * baseline taken just before.
 */
#include "check.h"
#include "testutil.h"
#include "uslab.h"

#include <stdint.h>
#include <string.h>

#define MIB ((size_t)1 << 20)

static void **ptrs;

static void report(const char *what, size_t n, size_t size, size_t base, size_t full, size_t after)
{
    size_t payload = n * size;
    size_t used = full > base ? full - base : 0;
    double over = (double)used - (double)payload;
    printf("%-14s %8zu x %4zu B: payload %6.2f MiB, resident +%6.2f MiB, %+.2f MiB over payload "
           "(%+.2f%%); after freeing and reaping: %+.2f MiB over the baseline\n",
           what, n, size, (double)payload / MIB, (double)used / MIB, over / MIB,
           100.0 * over / (double)payload, ((double)after - (double)base) / MIB);
    CHECK((double)used <= (double)payload * 1.05 + (double)MIB,
          "%s: %zu objects of %zu bytes take %zu bytes resident, more than payload %zu * 1.05 + "
          "1 MiB",
          what, n, size, used, payload);
    CHECK(after < base + 2 * MIB,
          "%s: after freeing everything and reaping, resident is %zu bytes over the baseline", what,
          after - base);
}

static void test_cache(size_t n, size_t size)
{
    size_t base = resident_bytes();
    uslab_cache_t *c = uslab_cache_create("footprint", size, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(c, "create");
    for (size_t i = 0; i < n; i++) {
        uint64_t *p = uslab_cache_alloc(c);
        CHECK(p, "alloc %zu", i);
        p[0] = i;
        p[size / 8 - 1] = ~(uint64_t)i;
        ptrs[i] = p;
    }
    size_t full = resident_bytes();
    for (size_t i = 0; i < n; i++) {
        uint64_t *p = ptrs[i];
        CHECK(p[0] == i && p[size / 8 - 1] == ~(uint64_t)i, "contents of %zu", i);
        uslab_cache_free(c, p);
    }
    uslab_cache_reap(c);
    size_t after = resident_bytes();
    report("cache", n, size, base, full, after);
    uslab_cache_destroy(c);
}

static void test_malloc(size_t n, size_t size)
{
    uslab_reap();
    size_t base = resident_bytes();
    for (size_t i = 0; i < n; i++) {
        unsigned char *p = uslab_malloc(size);
        CHECK(p, "malloc %zu", i);
        CHECK((uintptr_t)p % 16 == 0, "alignment");
        uint32_t v = (uint32_t)i;
        memcpy(p, &v, sizeof v);
        p[size - 1] = (unsigned char)(i * 7);
        ptrs[i] = p;
    }
    size_t full = resident_bytes();
    for (size_t i = 0; i < n; i++) {
        unsigned char *p = ptrs[i];
        uint32_t v;
        memcpy(&v, p, sizeof v);
        CHECK(v == (uint32_t)i && p[size - 1] == (unsigned char)(i * 7), "contents of %zu", i);
        uslab_free(p);
    }
    uslab_reap();
    size_t after = resident_bytes();
    char what[32];
    snprintf(what, sizeof what, "malloc(%zu)", size);
    report(what, n, size, base, full, after);
}

int main(void)
{
    enum { N = 1000000 };
    /* The test's own memory, touched before any baseline. */
    ptrs = malloc(N * sizeof *ptrs);
    CHECK(ptrs, "malloc");
    memset(ptrs, 0xff, N * sizeof *ptrs); /* not 0: malloc + memset(0) may become calloc */
    uslab_free(uslab_malloc(1));          /* initialise uslab */
    test_cache(N, 32);
    /* Twice: the second round reuses purged address space. */
    test_cache(N, 32);
    static const size_t sizes[] = {16, 64, 128, 256}; /* 8 bytes take a 16-byte block */
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        test_malloc(N, sizes[i]);
    free(ptrs);
    TEST_DONE();
}
