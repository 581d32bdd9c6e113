/* SPDX-License-Identifier: MIT */
/*
 * probe - prints which allocator serves malloc in this process (allocator=<name>), so the
 * runner can check that an LD_PRELOAD took effect before it times a program it cannot
 * instrument itself (python3, sqlite3, perl).
 */
#include "common.h"

int main(void)
{
    bench_print_allocator();
    void *p = malloc(24);
    bench_escape(p);
    free(p);
    return 0;
}
