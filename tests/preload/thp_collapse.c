/* SPDX-License-Identifier: MIT */
/*
 * thp_collapse.c - uslab's mappings take no transparent huge pages (design §2), run with
 * LD_PRELOAD=libuslab-preload.so. Where THP is "always", khugepaged collapses every 2 MiB
 * block that has a page in it into one huge page, wholly resident; MADV_COLLAPSE (Linux
 * 6.1) does the same at once, whatever the system's setting, so this program does it to
 * every writable anonymous mapping of its own after allocating one block in each of a
 * hundred size classes, and requires its resident size to grow by less than 1 MiB.
 * Before, uslab's range of slabs, sparse by design (a span per class), went from 2.4 MB
 * to 6.3 MB resident; glibc's heap grows by about 0.2 MB here.
 * Exit 0, 1 (grew too much), or 77 (skipped: no MADV_COLLAPSE on this kernel).
 */
#define _GNU_SOURCE
#include "testutil.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
#define HUGE ((uintptr_t)2 << 20)

/* Whether this kernel collapses a fresh block with one page in it. */
static int collapse_works(void)
{
    char *m = mmap(NULL, 2 * HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return 0;
    char *block = (char *)(((uintptr_t)m + HUGE - 1) & ~(HUGE - 1));
    block[0] = 1;
    int ok = madvise(block, HUGE, MADV_COLLAPSE) == 0;
    munmap(m, 2 * HUGE);
    return ok;
}

int main(void)
{
    static void *blocks[128];
    int n = 0;
    for (size_t size = 16; size <= 32768 && n < 128; size += size < 1024 ? 16 : size / 8) {
        blocks[n] = malloc(size);
        if (!blocks[n])
            return 2;
        memset(blocks[n++], 1, size);
    }
    if (!collapse_works()) {
        printf("thp_collapse: MADV_COLLAPSE not available (%s): skipped\n", strerror(errno));
        return 77;
    }
    long before = (long)(resident_bytes() >> 10);
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[512];
    int collapsed = 0;
    while (maps && fgets(line, sizeof line, maps)) {
        unsigned long from, to;
        char perm[8], path[256] = "";
        if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %255s", &from, &to, perm, path) < 3)
            continue;
        if (perm[0] != 'r' || perm[1] != 'w' || path[0] == '/' || strcmp(path, "[stack]") == 0)
            continue;
        uintptr_t s = ((uintptr_t)from + HUGE - 1) & ~(HUGE - 1), e = (uintptr_t)to & ~(HUGE - 1);
        if (s < e && madvise((void *)s, e - s, MADV_COLLAPSE) == 0)
            collapsed++;
    }
    if (maps)
        fclose(maps);
    long after = (long)(resident_bytes() >> 10);
    printf("thp_collapse: %d blocks, resident %ld kB, %ld kB after collapsing (%d mappings "
           "collapsed)\n",
           n, before, after, collapsed);
    for (int i = 0; i < n; i++)
        free(blocks[i]);
    return after - before < 1024 ? 0 : 1;
}
