/* SPDX-License-Identifier: MIT */
/*
 * start_loop - a short program, as a shell or make starts thousands of: it mallocs and frees
 * 20 blocks of 16 bytes to 4 KiB (process_bench's child, bench/process_bench.c), then
 * prints "ok" and the page faults of its whole life (getrusage), for test_start_budget.sh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

int main(void)
{
    void *p[20];
    for (int i = 0; i < 20; i++) {
        size_t n = (size_t)16 << (i % 9);
        p[i] = malloc(n);
        if (!p[i])
            return 1;
        ((volatile unsigned char *)p[i])[0] = (unsigned char)i;
    }
    for (int i = 0; i < 20; i++)
        free(p[i]);
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 1;
    printf("ok\nfaults=%ld\n", ru.ru_minflt + ru.ru_majflt);
    return 0;
}
