/* SPDX-License-Identifier: MIT */
/*
 * phases.c - a program that works in phases of different block sizes (design §3, "Across
 * classes"): 32 MiB of blocks of one size are allocated, written and freed, then 32 MiB of
 * another size, eight sizes in all. glibc reuses the freed memory for the next size; a
 * slab allocator keeps each class's empty slabs for the purge delay, and before, every
 * phase came on top of the ones before it: resident memory reached eight phases' worth
 * (under a memory cgroup of twice one phase, uslab was killed where glibc ran through).
 * Resident memory after each phase's allocations must stay below LIMIT phases (3 unless
 * given) above where it started. The test sets a 10-minute purge delay, so only the
 * headroom and the surplus pass give memory back.
 *
 * `phases N [LIMIT]` runs each phase on N new threads (each a share of the 32 MiB), or on
 * the main thread for N = 0: no thread's exit then gives memory back, so under
 * USLAB_PURGER=thread (where a slab emptied beyond the headroom waits for the delay) only
 * the surplus pass does (design §3, "Across classes"). Prints "phases ok" on success.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h" /* resident_bytes */

#define PHASE ((size_t)32 << 20)
#define MIB   ((size_t)1 << 20)

static int nthreads;
static size_t peak;

static void *phase(void *arg)
{
    size_t size = *(const size_t *)arg, n = PHASE / (size_t)nthreads / size;
    char **v = malloc(n * sizeof *v);
    if (!v)
        abort();
    for (size_t i = 0; i < n; i++) {
        if (!(v[i] = malloc(size)))
            abort();
        memset(v[i], (int)(i & 0xff), size);
    }
    size_t rss = resident_bytes();
    size_t old = __atomic_load_n(&peak, __ATOMIC_RELAXED);
    while (rss > old &&
           !__atomic_compare_exchange_n(&peak, &old, rss, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        ;
    for (size_t i = 0; i < n; i++) {
        if ((unsigned char)v[i][size - 1] != (i & 0xff))
            abort();
        free(v[i]);
    }
    free(v);
    return NULL;
}

int main(int argc, char **argv)
{
    nthreads = argc > 1 ? atoi(argv[1]) : 1;
    size_t limit = PHASE * (argc > 2 ? (size_t)atoi(argv[2]) : 3);
    int on_main = nthreads == 0;
    if (on_main)
        nthreads = 1;
    if (nthreads < 1 || nthreads > 8 || limit == 0)
        return 2;
    static const size_t sizes[] = {64, 1000, 48, 2000, 96, 5000, 160, 12000};
    size_t start = resident_bytes();
    for (unsigned k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t size = sizes[k];
        pthread_t t[8];
        if (on_main)
            phase(&size);
        for (int i = 0; i < nthreads && !on_main; i++)
            if (pthread_create(&t[i], NULL, phase, &size) != 0)
                return 1;
        for (int i = 0; i < nthreads && !on_main; i++)
            pthread_join(t[i], NULL);
        printf("phase %u (%zu bytes): peak %zu MiB above the start\n", k, size,
               (peak - start) / MIB);
    }
    if (peak - start > limit) {
        printf("FAIL: resident memory grew by %zu MiB (limit %zu MiB)\n", (peak - start) / MIB,
               limit / MIB);
        return 1;
    }
    puts("phases ok");
    return 0;
}
