/* SPDX-License-Identifier: MIT */
/*
 * stats_static.c - USLAB_STATS in a program linked with libuslab.a that calls no statistics
 * function (design §10; session 16's audit). The linker takes from an archive only the
 * objects a program refers to, and the exit hook lived in stats.o: the table was never
 * printed. The test runs with USLAB_STATS=1 and passes on this cache's row (ctest's
 * PASS_REGULAR_EXPRESSION).
 */
#include <stdio.h>
#include <string.h>
#include <uslab.h>

int main(void)
{
    uslab_cache_t *c = uslab_cache_create("static-stats-row", 64, 0, NULL, NULL, NULL, NULL, 0);
    if (!c)
        return 1;
    void *kept = uslab_cache_alloc(c); /* one active object in the row */
    if (!kept)
        return 1;
    memset(kept, 1, 64);
    printf("stats_static: one object kept\n");
    return 0;
}
