/* SPDX-License-Identifier: MIT */
/*
 * large_trim.c - the large blocks uslab hands to glibc (design §8, issues 12 and 36), run
 * with USLAB_MAX_SLAB_SIZE=32768 so that its 64 KiB and 1 MiB blocks are large. Under
 * the preload library glibc's malloc holds only blocks above the slab range, so uslab
 * raises its trim threshold (no trim-and-refault per block), keeps glibc's own dynamic mmap
 * threshold (which any mallopt turns off in glibc) and gives the memory back with
 * malloc_trim once those blocks have been idle for the purge delay. uslab tunes glibc only
 * once a program works with many large blocks: its 6th held at once, or its 16th large
 * free (before, glibc's own defaults hold, so a program with a few large blocks keeps
 * less). Modes (argv[1]):
 *  - `tuned`: after 16 blocks of 64 KiB were allocated and freed one by one (uslab tunes
 *    glibc), an 8 MiB block mmapped by glibc is freed: as glibc's own rule does, that
 *    raises the mmap threshold, so a 6 MiB block then comes from the heap (with the 4 MiB
 *    threshold uslab fixed before issue 36, every such buffer was mapped, faulted page by
 *    page, and unmapped: 7x glibc's time), and 100 blocks of 1 MiB come from glibc's heap,
 *    not from mmap (mallinfo2's hblks is 0); once all are freed, resident memory falls back
 *    to where it was, with no further call (the process has had a thread: the purger
 *    runs);
 *  - `held`: with no large block freed before, the first 5 blocks are mmapped, as glibc
 *    alone does (its threshold rises only at a free, and uslab's at a malloc only up to
 *    twice it); at the 6th held at once uslab tunes glibc, and from then on a large malloc
 *    raises the threshold above it, so the other 95 come from the heap; memory falls back
 *    once they are freed and idle;
 *  - `few`: 4 blocks of 1 MiB, never more held at once: glibc's defaults mmap all 4, and
 *    their memory goes back at their free, at once, as without uslab;
 *  - `user`: the test sets GLIBC_TUNABLES=glibc.malloc.mmap_threshold=131072, and the
 *    user's setting wins: the blocks are mmapped (hblks is 100), also after the churn;
 *  - `mallopt`: the program sets mallopt(M_MMAP_THRESHOLD, 128 KiB) before the churn, and
 *    its setting wins (hblks is 100): uslab's tuning at the 16th free must not override it;
 *  - `preinit`: the same call from the program's .preinit_array, before uslab's own
 *    initialisation (as a library's constructor may make it): still the program's (the
 *    twelfth audit: 5 of 40 mmapped, then none);
 *  - `late`: after one 2 MiB block (its free raises glibc's threshold), the blocks are held
 *    (uslab tunes glibc at the 6th, keeping that threshold), then the program sets
 *    M_TRIM_THRESHOLD to 512 MiB and frees them: the heap must keep them after idling, as
 *    glibc keeps them, with no trim of uslab's (the audit: malloc_trim gave them back);
 *  - `grow` (issue 38): one buffer at a time of 2, 3, ... 24 MiB, each written and freed.
 *    glibc's rule maps each new largest block (its threshold rises only at the free) and
 *    faults all of it in, 299 MiB in all; uslab raises the threshold at the malloc of a
 *    block up to twice the threshold, so after the first every one comes from the heap,
 *    which keeps the pages of the one before (mallinfo2's hblks is 0 while each is held;
 *    `grow glibc`, the control, without uslab: 1);
 *  - `keep` (issue 38): tuned by the churn's 16 frees, with an mmapped 16 MiB block freed
 *    (the threshold is then 16 MiB), 3 blocks of 16 MiB are held and freed: the heap's top
 *    keeps them (uslab's tuned trim threshold is 8 times the mmap threshold, 128 MiB here; at
 *    64 MiB glibc trimmed 6 such blocks at the last free, and bench/'s large buffers faulted
 *    them back), and gives them back once idle. Fewer than 6 are held, so only the count of
 *    frees tunes glibc: untuned, glibc's rule (twice the threshold, 32 MiB) trims them;
 *  - `calloc` (session 72): 100 blocks of 1 MiB calloc'd and held (tuned at the 6th, the
 *    rest from the heap's top) read as zero, and of each only its first and last pages are
 *    resident: with glibc's top pad, each calloc from the top cleared the 128 KiB the growth
 *    before had left there (design §12); run as `calloc glibc` without uslab and with its
 *    thresholds by hand, the control shows the pad cleared.
 */
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h" /* resident_bytes */

#define N   100
#define MIB ((size_t)1 << 20)

static void *nothing(void *arg)
{
    return arg;
}

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "large_trim: " __VA_ARGS__);                                               \
        fputc('\n', stderr);                                                                       \
        exit(1);                                                                                   \
    } while (0)

/* Runs before every library's initialisation, uslab's included. */
static void early(int argc, char **argv, char **envp)
{
    (void)envp;
    if (argc > 1 && strcmp(argv[1], "preinit") == 0 && mallopt(M_MMAP_THRESHOLD, 128 << 10) != 1)
        FAIL("mallopt(M_MMAP_THRESHOLD) in .preinit_array failed");
}
__attribute__((section(".preinit_array"), used)) static void (*early_entry)(int, char **,
                                                                            char **) = early;

/* A churn of 16 large blocks (64 KiB here): uslab tunes glibc at its 16th free. */
static void tune_by_churn(void)
{
    for (int i = 0; i < 16; i++) {
        char *q = malloc(64 << 10);
        if (!q)
            FAIL("malloc");
        q[0] = (char)i;
        free(q);
    }
}

/* Slow paths, where a single-threaded process runs its due passes inline. */
static void slow_paths(void)
{
    static void *q[4096];
    for (int i = 0; i < 4096; i++)
        q[i] = malloc(16 + (size_t)(i % 64) * 48);
    for (int i = 0; i < 4096; i++)
        free(q[i]);
}

/* Waits until resident memory is within 8 MiB of base, for at most 10 s (with `calls`,
 * making slow paths meanwhile; else no call of the allocator's), and fails if it is not;
 * then the test has passed. */
static int back_to(size_t base, int calls)
{
    size_t now = resident_bytes();
    for (int waited = 0; waited < 10000 && now > base + 8 * MIB; waited += 50) {
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
        if (calls)
            slow_paths();
        now = resident_bytes();
    }
    printf("after the frees and idling: %zu KiB over the baseline\n", (now - base) >> 10);
    if (now > base + 8 * MIB)
        FAIL("%zu KiB still resident over the baseline", (now - base) >> 10);
    printf("large trim ok\n");
    return 0;
}

/* `grow`: glibc_alone says which allocator the test expects. */
static int grow(int glibc_alone)
{
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    for (size_t mib = 2; mib <= 24; mib++) {
        unsigned char *q = malloc(mib * MIB);
        if (!q)
            FAIL("malloc");
        size_t mapped = mallinfo2().hblks;
        size_t want = glibc_alone || mib == 2 ? 1 : 0;
        if (mapped != want)
            FAIL("a block of %zu MiB after one of %zu: %zu blocks mmapped, expected %zu", mib,
                 mib - 1, mapped, want);
        memset(q, (int)mib, mib * MIB);
        free(q);
    }
    getrusage(RUSAGE_SELF, &r1);
    printf("buffers of 2 to 24 MiB: %ld page faults\n", r1.ru_minflt - r0.ru_minflt);
    printf("large trim ok\n");
    return 0;
}

/* `keep`: what the heap keeps after the frees, then after idling. */
static int keep(void)
{
    tune_by_churn();
    char *big = malloc(16 * MIB); /* mmapped, then freed: the threshold rises to it */
    if (!big)
        FAIL("malloc");
    big[0] = 1;
    free(big);
    pthread_t t;
    if (pthread_create(&t, NULL, nothing, NULL) != 0 || pthread_join(t, NULL) != 0)
        FAIL("pthread_create");
    size_t base = resident_bytes();
    static unsigned char *p[3];
    for (int i = 0; i < 3; i++) {
        p[i] = malloc(16 * MIB);
        if (!p[i])
            FAIL("malloc");
        memset(p[i], i, 16 * MIB);
    }
    if (mallinfo2().hblks != 0)
        FAIL("blocks of 16 MiB mmapped after one was freed");
    for (int i = 2; i >= 0; i--) /* the top block first: the top grows at each free */
        free(p[i]);
    size_t now = resident_bytes();
    printf("right after the frees: %zu KiB over the baseline\n", (now - base) >> 10);
    if (now < base + 40 * MIB)
        FAIL("the heap's top was trimmed at the frees: %zu KiB left", (now - base) >> 10);
    return back_to(base, 1);
}

/* `calloc`: blocks carved from the top are not cleared past what glibc wrote itself. */
static int calloc_top(int glibc_control)
{
    static unsigned char *p[N];
    size_t resident_max = 0;
    for (int i = 0; i < N; i++) {
        p[i] = calloc(1, MIB);
        if (!p[i])
            FAIL("calloc");
        unsigned char vec[MIB / 4096 + 2];
        uintptr_t lo = ((uintptr_t)p[i] + 4095) & ~(uintptr_t)4095;
        size_t pages = (((uintptr_t)p[i] + MIB) & ~(uintptr_t)4095) - lo;
        if (mincore((void *)lo, pages, vec) != 0)
            FAIL("mincore");
        size_t resident = 0;
        for (size_t k = 0; k < pages / 4096; k++)
            resident += vec[k] & 1;
        if (i >= 10 && resident > resident_max) /* past the tuning, and glibc's first blocks */
            resident_max = resident;
    }
    for (int i = 0; i < N; i++)
        for (size_t k = 0; k < MIB; k += 1024)
            if (p[i][k])
                FAIL("calloc'd block %d not zero at %zu", i, k);
    for (int i = 0; i < N; i++)
        free(p[i]);
    printf("at most %zu pages of a 1 MiB calloc'd block resident before use\n", resident_max);
    if (glibc_control && resident_max < 16)
        FAIL("the control cleared no top pad");
    if (!glibc_control && resident_max > 2)
        FAIL("calloc cleared a top pad");
    printf("large trim ok\n");
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "tuned";
    if (strcmp(mode, "calloc") == 0)
        return calloc_top(argc > 2 && strcmp(argv[2], "glibc") == 0);
    if (strcmp(mode, "grow") == 0)
        return grow(argc > 2 && strcmp(argv[2], "glibc") == 0);
    if (strcmp(mode, "keep") == 0)
        return keep();
    int late = strcmp(mode, "late") == 0;
    int user =
        strcmp(mode, "user") == 0 || strcmp(mode, "mallopt") == 0 || strcmp(mode, "preinit") == 0;
    int few = strcmp(mode, "few") == 0, held = strcmp(mode, "held") == 0 || late;
    int tuned = strcmp(mode, "tuned") == 0;
    int n = few ? 4 : N;
    /* The blocks glibc mmaps: all (glibc's defaults, its threshold never raised by a free,
     * or the user's threshold), those before the tuning (held), or none (the threshold
     * raised before). */
    size_t all = user || few;
    size_t mapped_min = all ? (size_t)n : held && !late ? 5 : 0, mapped_max = mapped_min;
    if (strcmp(mode, "mallopt") == 0 && mallopt(M_MMAP_THRESHOLD, 128 << 10) != 1)
        FAIL("mallopt(M_MMAP_THRESHOLD) failed");
    if (!few && !held && strcmp(mode, "preinit") != 0)
        tune_by_churn();
    if (tuned || late) { /* mmapped, then freed: glibc's rule raises the threshold */
        size_t big = (tuned ? 8 : 2) * MIB;
        char *q = malloc(big);
        if (!q)
            FAIL("malloc");
        memset(q, 1, big);
        free(q);
    }
    if (tuned) {
        char *q = malloc(6 * MIB);
        if (!q)
            FAIL("malloc");
        size_t mapped = mallinfo2().hblks;
        free(q);
        if (mapped != 0)
            FAIL("a 6 MiB block after an 8 MiB one was freed is mmapped (glibc's own rule "
                 "takes it from the heap)");
    }
    pthread_t t;
    if (pthread_create(&t, NULL, nothing, NULL) != 0 || pthread_join(t, NULL) != 0)
        FAIL("pthread_create");
    static unsigned char *p[N];
    size_t base = resident_bytes();
    for (int i = 0; i < n; i++) {
        p[i] = malloc(MIB);
        if (!p[i])
            FAIL("malloc");
        memset(p[i], i, MIB);
    }
    struct mallinfo2 mi = mallinfo2();
    size_t full = resident_bytes();
    printf("hblks %zu, resident over the baseline %zu KiB\n", mi.hblks, (full - base) >> 10);
    if (full < base + (size_t)n * MIB * 9 / 10)
        FAIL("only %zu KiB resident for %d MiB of blocks", (full - base) >> 10, n);
    if (mi.hblks < mapped_min || mi.hblks > mapped_max)
        FAIL("%zu blocks mmapped by glibc, expected %zu to %zu", mi.hblks, mapped_min, mapped_max);
    if (late && mallopt(M_TRIM_THRESHOLD, 512 << 20) != 1)
        FAIL("mallopt(M_TRIM_THRESHOLD) failed");
    for (int i = 0; i < n; i++) {
        if (p[i][0] != (unsigned char)i || p[i][MIB - 1] != (unsigned char)i)
            FAIL("block %d changed", i);
        free(p[i]);
    }
    if (late) { /* glibc keeps its heap now, and so must uslab's idle passes */
        struct timespec ts = {1, 500 * 1000000L};
        nanosleep(&ts, NULL);
        for (int r = 0; r < 4; r++)
            slow_paths();
        size_t kept = resident_bytes();
        printf("1.5 s after the frees: %zu KiB over the baseline\n", (kept - base) >> 10);
        if (kept < base + 80 * MIB)
            FAIL("the heap was trimmed against the program's M_TRIM_THRESHOLD: %zu KiB left",
                 (kept - base) >> 10);
        printf("large trim ok\n");
        return 0;
    }
    size_t now = resident_bytes();
    if (few && now > base + MIB) /* unmapped at their free, as under glibc alone */
        FAIL("%zu KiB still resident right after the frees of mmapped blocks", (now - base) >> 10);
    return back_to(base, 0);
}
