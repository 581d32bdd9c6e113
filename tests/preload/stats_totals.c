/* SPDX-License-Identifier: MIT */
/*
 * stats_totals.c - the statistics of the whole process (issue 39): 200 live blocks of 256 KiB
 * (the largest medium class) and 20 of 2 MiB (the system allocator's, above the slab classes), left
 * live at exit; USLAB_STATS=1 (or json) must show both, in the table and in the totals.
 */
#include <stdlib.h>
#include <string.h>

int main(void)
{
    static char *volatile blocks[220];
    for (int i = 0; i < 220; i++) {
        size_t n = i < 200 ? (size_t)256 << 10 : (size_t)2 << 20;
        blocks[i] = malloc(n);
        if (!blocks[i])
            return 1;
        memset(blocks[i], 1, 4096);
    }
    return 0;
}
