/* SPDX-License-Identifier: MIT */
/*
 * test_pages_small_hole.c - the range in a hole too small to share with its side arrays
 * (docs/design.md §2, "The reservation"). The holes are found by mapping a probe and
 * unmapping it at once (usi_os_find_hole), then only the first parts are mapped. A hole
 * smaller than the range needs below it keeps the range at its start, and the side arrays
 * get a hole of their own, found while the range's is held.
 *
 * uslab initialises when it is loaded, so the test sets the scene and runs itself again:
 * RLIMIT_AS at what the process maps plus about 110 MiB (its 900 MiB of zeroed data count
 * too), and USLAB_RESERVE=100M. The probe for three times the range (300 MiB) finds no
 * hole, nor the half; the quarter, 75 MiB, is too small to share. There uslab must work:
 * blocks of 64 KiB from its range, as the range grows towards the end of the hole, every
 * block's contents intact, all of them freed.
 */
#include "check.h"
#include "pages.h"
#include "uslab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Address space only, never touched; `used`: kept although nothing reads it. */
__attribute__((used)) static char zeroed[(size_t)900 << 20];

static size_t mapped_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long pages = 0;
    CHECK(f && fscanf(f, "%lu", &pages) == 1, "statm");
    fclose(f);
    return pages * (size_t)sysconf(_SC_PAGESIZE);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        size_t vm = mapped_bytes();
        if (vm > ((size_t)4 << 30)) { /* a sanitizer's shadow: no limit fits it */
            printf("skipped: %zu MiB mapped at start\n", vm >> 20);
            return 77;
        }
        struct rlimit rl = {vm + ((size_t)110 << 20), vm + ((size_t)110 << 20)};
        CHECK(setrlimit(RLIMIT_AS, &rl) == 0, "setrlimit");
        CHECK(setenv("USLAB_RESERVE", "100M", 1) == 0, "setenv");
        execl("/proc/self/exe", argv[0], "child", (char *)NULL);
        CHECK(0, "exec");
    }
    enum { SIZE = 64 << 10, MOST = 1200 }; /* the 75 MiB hole */
    static unsigned char *p[MOST + 1];
    int n = 0;
    while (n <= MOST) {
        unsigned char *b = uslab_malloc(SIZE);
        if (!b || !usi_pages_in_range(b)) { /* the hole (or the limit) is full */
            uslab_free(b);
            break;
        }
        memset(b, n & 0xff, SIZE);
        p[n++] = b;
    }
    CHECK(n > 200 && n <= MOST, "%d blocks of 64 KiB in a 75 MiB hole", n);
    CHECK(usi_pages_reserved_bytes() > ((size_t)16 << 20), "the range grew: %zu MiB",
          usi_pages_reserved_bytes() >> 20);
    for (int i = 0; i < n; i++) {
        CHECK(p[i][0] == (i & 0xff) && p[i][SIZE - 1] == (i & 0xff), "block %d", i);
        uslab_free(p[i]);
    }
    printf("pages small hole ok: %d blocks\n", n);
    return 0;
}
