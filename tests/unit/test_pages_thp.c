/* SPDX-License-Identifier: MIT */
/*
 * test_pages_thp.c - chunks of huge pages for dense spans (docs/design.md §2), with
 * USLAB_HUGE_PAGES=1 (without it, none: "pages thp off ok"): below 16 MiB
 * committed no span is advised MADV_HUGEPAGE; past it, dense spans come from 2 MiB chunks
 * that are (VmFlags "hg"), other spans never do; a chunk is advised MADV_NOHUGEPAGE ("nh")
 * before a span of it is purged while others are in use, and MADV_HUGEPAGE again once all
 * of it is free, the free units purged in both cases and by an explicit reap (usi_pages_trim);
 * chunk spans read as zero when reused. The advice is read back from
 * /proc/self/smaps, which says the same whatever the machine's THP mode; a kernel without
 * THP advice (no "hg" in any VmFlags after the first chunk) skips (77).
 */
#include "base.h"
#include "check.h"
#include "pages.h"
#include "testutil.h"
#include "uslab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define CHUNK ((uintptr_t)2 << 20)

/* The VmFlags of the mapping that holds addr ("" where none does), in flags[size]. */
static void vm_flags(uintptr_t addr, char *flags, size_t size)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    CHECK(f, "open /proc/self/smaps");
    char line[512];
    int inside = 0;
    flags[0] = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            inside = addr >= lo && addr < hi;
            continue;
        }
        if (inside && strncmp(line, "VmFlags:", 8) == 0) {
            size_t n = strlen(line + 8);
            n = n < size - 1 ? n : size - 1;
            memcpy(flags, line + 8, n);
            flags[n] = 0;
            break;
        }
    }
    fclose(f);
}

static int advised(uintptr_t addr, const char *flag)
{
    char flags[256], word[8];
    vm_flags(addr, flags, sizeof flags);
    snprintf(word, sizeof word, " %s", flag);
    return strstr(flags, word) != NULL;
}

/* Pages of [addr, addr + len) resident (mincore). */
static size_t resident_pages(uintptr_t addr, size_t len)
{
    unsigned char vec[CHUNK / 4096];
    CHECK(len <= CHUNK && mincore((void *)addr, len, vec) == 0, "mincore");
    size_t n = 0;
    for (size_t i = 0; i < len / 4096; i++)
        n += vec[i] & 1;
    return n;
}

static void check_zero(const unsigned char *s, size_t bytes)
{
    for (size_t off = 0; off < bytes; off += 4096)
        CHECK(s[off] == 0 && s[off + 4095] == 0, "span %p reads zero at %zu", (const void *)s, off);
}

int main(void)
{
    /* Whether this kernel takes the advice at all (CONFIG_TRANSPARENT_HUGEPAGE). */
    void *probe = mmap(NULL, 2 * CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(probe != MAP_FAILED, "mmap");
    int takes = madvise(probe, 2 * CHUNK, MADV_HUGEPAGE) == 0 && advised((uintptr_t)probe, "hg");
    munmap(probe, 2 * CHUNK);
    if (!takes) {
        printf("skipped: this kernel takes no MADV_HUGEPAGE\n");
        return 77;
    }
    void *p = uslab_malloc(1); /* initialises uslab */
    CHECK(p, "first malloc");
    uslab_free(p);
    /* Below 16 MiB committed: a dense span is an ordinary one. */
    unsigned char *small = usi_pages_alloc_span(0, 1);
    CHECK(small, "dense span");
    small[0] = 1;
    CHECK(!advised((uintptr_t)small, "hg"), "a dense span below 16 MiB is advised huge pages");
    usi_pages_free_span(small, 0, 0, 0);
    /* Past it: commit 24 MiB with ordinary spans of the largest order. */
    void *big[3];
    for (int i = 0; i < 3; i++) {
        big[i] = usi_pages_alloc_span(USI_SPAN_ORDERS - 1, 0);
        CHECK(big[i], "span of order %d", USI_SPAN_ORDERS - 1);
        CHECK(!advised((uintptr_t)big[i], "hg"), "an ordinary span is advised huge pages");
    }
    /* Off by default (USLAB_HUGE_PAGES): no chunk, dense spans as any other. */
    const char *on = getenv("USLAB_HUGE_PAGES");
    if (!on || strcmp(on, "1") != 0) {
        unsigned char *plain = usi_pages_alloc_span(0, 1);
        CHECK(plain && !advised((uintptr_t)plain, "hg"), "a chunk without USLAB_HUGE_PAGES=1");
        usi_pages_free_span(plain, 0, 0, 0);
        printf("pages thp off ok\n");
        return 0;
    }
    /* A fresh chunk's only span, written and freed: nothing of the chunk stays resident (its
     * first write may have faulted the whole huge page). */
    unsigned char *only = usi_pages_alloc_span(0, 1);
    CHECK(only && advised((uintptr_t)only, "hg"), "a dense span past 16 MiB not in a chunk");
    memset(only, 7, USI_UNIT_SIZE);
    usi_pages_free_span(only, 0, 0, 0);
    CHECK(resident_pages((uintptr_t)only & ~(CHUNK - 1), CHUNK) == 0,
          "a chunk whose only span was freed holds %zu pages",
          resident_pages((uintptr_t)only & ~(CHUNK - 1), CHUNK));
    /* An explicit reap (usi_pages_trim) takes a chunk in use its huge pages, and purges its
     * free units. */
    unsigned char *keep = usi_pages_alloc_span(0, 1);
    uintptr_t kc = (uintptr_t)keep & ~(CHUNK - 1);
    CHECK(keep && advised(kc, "hg"), "a dense span past 16 MiB not in a chunk");
    memset(keep, 9, USI_UNIT_SIZE);
    usi_pages_trim();
    CHECK(advised(kc, "nh"), "a trimmed chunk still advised huge pages");
    CHECK(resident_pages(kc, CHUNK) <= USI_UNIT_SIZE / 4096, "a trimmed chunk holds %zu pages",
          resident_pages(kc, CHUNK));
    CHECK(keep[0] == 9 && keep[USI_UNIT_SIZE - 1] == 9, "the trim lost the span's data");
    usi_pages_free_span(keep, 0, 0, 0);
    CHECK(advised(kc, "hg") && resident_pages(kc, CHUNK) == 0, "an emptied chunk");
    unsigned char *a = usi_pages_alloc_span(0, 1), *b = usi_pages_alloc_span(1, 1);
    CHECK(a && b, "dense spans");
    uintptr_t chunk = (uintptr_t)a & ~(CHUNK - 1);
    CHECK(advised(chunk, "hg"), "a dense span past 16 MiB is not advised huge pages");
    CHECK(((uintptr_t)b & ~(CHUNK - 1)) == chunk, "two dense spans in two chunks");
    CHECK((uintptr_t)b % (USI_UNIT_SIZE << 1) == 0, "a chunk's span of order 1 is aligned");
    check_zero(a, USI_UNIT_SIZE);
    check_zero(b, USI_UNIT_SIZE << 1);
    memset(a, 0xa5, USI_UNIT_SIZE);
    memset(b, 0x5a, USI_UNIT_SIZE << 1);
    /* Every order below a chunk's comes from one; a chunk's order and a medium span do not. */
    unsigned char *o4 = usi_pages_alloc_span(4, 1), *o5 = usi_pages_alloc_span(5, 1);
    unsigned char *m = usi_pages_alloc_span(0, 0);
    CHECK(o4 && o5 && m, "spans");
    CHECK(advised((uintptr_t)o4, "hg"), "a dense span of order 4 is not in a chunk");
    CHECK(!advised((uintptr_t)o5, "hg"), "a dense span of a chunk's size is advised huge pages");
    CHECK(!advised((uintptr_t)m, "hg"), "a span that is not dense is advised huge pages");
    /* A span purged while the chunk's other spans are in use: no huge pages for the chunk. */
    usi_pages_free_span(a, 0, 0, 0);
    CHECK(advised(chunk, "nh") && !advised(chunk, "hg"), "chunk still advised huge pages");
    /* and its free units, resident where a huge page held them, are purged with it */
    CHECK(resident_pages(chunk, USI_UNIT_SIZE) == 0, "the purged span is resident");
    CHECK(resident_pages(chunk + 4 * USI_UNIT_SIZE, 12 * USI_UNIT_SIZE) == 0,
          "a chunk's free units are resident after its first purge");
    CHECK(b[0] == 0x5a && b[(USI_UNIT_SIZE << 1) - 1] == 0x5a, "the other span kept its data");
    /* The freed span is the chunk's again, and reads as zero. */
    unsigned char *again = usi_pages_alloc_span(0, 1);
    CHECK(again == a, "the chunk's free unit not reused: %p, not %p", (void *)again, (void *)a);
    check_zero(again, USI_UNIT_SIZE);
    /* All of the chunk free: huge pages again. */
    CHECK(((uintptr_t)o4 & ~(CHUNK - 1)) == chunk, "the span of order 4 not in the chunk");
    usi_pages_free_span(again, 0, 0, 0);
    usi_pages_free_span(b, 1, 0, 0);
    CHECK(advised(chunk, "nh"), "a chunk with a span in use advised huge pages again");
    usi_pages_free_span(o4, 4, 0, 0);
    CHECK(advised(chunk, "hg"), "an empty chunk is not advised huge pages again");
    CHECK(resident_pages(chunk, CHUNK) == 0, "an empty chunk holds %zu pages",
          resident_pages(chunk, CHUNK));
    unsigned char *c = usi_pages_alloc_span(0, 1);
    CHECK(c && ((uintptr_t)c & ~(CHUNK - 1)) == chunk, "the empty chunk not reused");
    check_zero(c, USI_UNIT_SIZE);
    /* Thirty-two spans of order 0 fill a chunk; the next one starts another. */
    unsigned char *s[40];
    for (int i = 0; i < 40; i++) {
        s[i] = usi_pages_alloc_span(0, 1);
        CHECK(s[i] && advised((uintptr_t)s[i], "hg"), "dense span %d not in a chunk", i);
        check_zero(s[i], USI_UNIT_SIZE);
        s[i][0] = (unsigned char)i;
    }
    for (int i = 0; i < 40; i++)
        for (int j = 0; j < i; j++)
            CHECK(s[i] != s[j] && s[i] != c, "span %d handed out twice", i);
    for (int i = 0; i < 40; i++) {
        CHECK(s[i][0] == (unsigned char)i, "span %d lost its data", i);
        usi_pages_free_span(s[i], 0, 0, 0);
    }
    usi_pages_free_span(c, 0, 0, 0);
    usi_pages_free_span(o5, 5, 0, 0);
    usi_pages_free_span(m, 0, 0, 0);
    for (int i = 0; i < 3; i++)
        usi_pages_free_span(big[i], USI_SPAN_ORDERS - 1, 0, 0);
    /* Chunks emptied are used again before new ones are made (which come from above): 200
     * spans (7 chunks), freed, then 200 again twice, in no chunk above the first round's. */
    static unsigned char *many[200];
    uintptr_t top = 0, top2 = 0;
    for (int round = 0; round < 3; round++) {
        uintptr_t *t = round == 0 ? &top : &top2;
        for (int i = 0; i < 200; i++) {
            many[i] = usi_pages_alloc_span(0, 1);
            CHECK(many[i] && advised((uintptr_t)many[i], "hg") + advised((uintptr_t)many[i], "nh"),
                  "dense span %d not in a chunk", i);
            if ((uintptr_t)many[i] > *t)
                *t = (uintptr_t)many[i];
        }
        for (int i = 0; i < 200; i++)
            usi_pages_free_span(many[round == 1 ? 199 - i : i], 0, 0, 0);
    }
    CHECK(top2 / CHUNK <= top / CHUNK, "emptied chunks not used again: a span at %p, past %p",
          (void *)top2, (void *)top);
    /* Blocks through malloc still work over chunks. */
    void *blocks[20000];
    for (int i = 0; i < 20000; i++) {
        blocks[i] = uslab_malloc(64 + (size_t)(i % 7) * 16);
        CHECK(blocks[i], "malloc %d", i);
        memset(blocks[i], i & 0xff, 64);
    }
    /* The slab layer's: a small class's new slabs come from chunks, a medium block's never. */
    CHECK(advised((uintptr_t)blocks[19999], "hg"), "a small class's new slab not in a chunk");
    void *medium = uslab_malloc(100 << 10);
    CHECK(medium && !advised((uintptr_t)medium, "hg"), "a medium block in a chunk");
    uslab_free(medium);
    for (int i = 0; i < 20000; i++) {
        CHECK(((unsigned char *)blocks[i])[63] == (i & 0xff), "block %d lost its data", i);
        uslab_free(blocks[i]);
    }
    printf("pages thp ok\n");
    return 0;
}
