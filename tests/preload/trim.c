/* SPDX-License-Identifier: MIT */
/*
 * trim.c - malloc_trim gives free memory back (design §8): a single-threaded program frees
 * 64 MiB of 256-byte blocks, then calls malloc_trim(0); resident memory must fall back near
 * where it started, as with glibc alone. Under uslab the frees give back what is beyond the
 * headroom (8 MiB); the purge delay is set to 10 minutes by the test and the process has no
 * thread, so nothing else gives the headroom's slabs back: without uslab's malloc_trim they
 * stay. An object cache of the program's (looked up with
 * dlsym: only under the preload library) keeps its constructed object: malloc_trim runs
 * no destructor of the program's.
 *
 * Run as `trim uslab` (LD_PRELOAD=libuslab-preload.so) or `trim glibc` (no preload, the
 * reference). Prints "malloc_trim ok" on success.
 *
 * `trim info-uslab` / `trim info-glibc`: mallinfo2 and mallinfo count the program's small
 * blocks (before, under uslab they saw only glibc's heap): 40,000 blocks of 100 bytes raise
 * uordblks by at least 4,000,000, arena covers uordblks, mallinfo agrees with mallinfo2,
 * and after the frees uordblks is back within 1 MiB of where it was. Prints "mallinfo ok".
 */
#include <dlfcn.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h" /* resident_bytes */

#define BLOCK 256
#define COUNT ((64u << 20) / BLOCK)
#define MIB   ((size_t)1 << 20)

static int dtors;

static void count_dtor(void *obj, void *arg)
{
    (void)obj;
    (void)arg;
    dtors++;
}

#define INFO_BLOCKS 40000

static int check_info(void)
{
    static char *blocks[INFO_BLOCKS];
    struct mallinfo2 before = mallinfo2();
    for (unsigned i = 0; i < INFO_BLOCKS; i++)
        if (!(blocks[i] = malloc(100)))
            return 1;
    struct mallinfo2 during = mallinfo2();
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* the old call is what is tested */
    struct mallinfo old = mallinfo();
#pragma GCC diagnostic pop
    for (unsigned i = 0; i < INFO_BLOCKS; i++)
        free(blocks[i]);
    struct mallinfo2 after = mallinfo2();
    printf("uordblks %zu -> %zu -> %zu, arena %zu, fordblks %zu\n", before.uordblks,
           during.uordblks, after.uordblks, during.arena, during.fordblks);
    if (during.uordblks < before.uordblks + (size_t)INFO_BLOCKS * 100) {
        fprintf(stderr, "trim: mallinfo2 did not count the blocks in use\n");
        return 1;
    }
    if (during.arena < during.uordblks) {
        fprintf(stderr, "trim: arena %zu below uordblks %zu\n", during.arena, during.uordblks);
        return 1;
    }
    if ((size_t)old.uordblks < during.uordblks - during.uordblks / 10 ||
        (size_t)old.uordblks > during.uordblks + during.uordblks / 10) {
        fprintf(stderr, "trim: mallinfo says %d, mallinfo2 %zu\n", old.uordblks, during.uordblks);
        return 1;
    }
    if (after.uordblks > before.uordblks + ((size_t)1 << 20)) {
        fprintf(stderr, "trim: uordblks %zu after the frees (%zu before)\n", after.uordblks,
                before.uordblks);
        return 1;
    }
    printf("mallinfo ok\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && (!strcmp(argv[1], "info-uslab") || !strcmp(argv[1], "info-glibc")))
        return check_info();
    if (argc != 2 || (strcmp(argv[1], "uslab") && strcmp(argv[1], "glibc"))) {
        fprintf(stderr, "usage: trim uslab|glibc|info-uslab|info-glibc\n");
        return 2;
    }
    int uslab = strcmp(argv[1], "uslab") == 0;
    typedef void *(*create_fn)(const char *, size_t, size_t, int (*)(void *, void *),
                               void (*)(void *, void *), void (*)(void *), void *, unsigned);
    create_fn create = (create_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "uslab_cache_create");
    void *(*cache_alloc)(void *) =
        (void *(*)(void *))(uintptr_t)dlsym(RTLD_DEFAULT, "uslab_cache_alloc");
    void (*cache_free)(void *, void *) =
        (void (*)(void *, void *))(uintptr_t)dlsym(RTLD_DEFAULT, "uslab_cache_free");
    if (uslab != (create && cache_alloc && cache_free)) {
        fprintf(stderr, "trim: run `trim uslab` under the preload library, `trim glibc` "
                        "without it\n");
        return 2;
    }
    void *cache = NULL;
    if (uslab) {
        cache = create("trim-objects", 64, 0, NULL, count_dtor, NULL, NULL, 0);
        void *obj = cache ? cache_alloc(cache) : NULL;
        if (!obj) {
            fprintf(stderr, "trim: uslab_cache_create/alloc failed\n");
            return 1;
        }
        cache_free(cache, obj); /* constructed, cached in this thread's magazine */
    }

    size_t base = resident_bytes();
    static char *blocks[COUNT];
    for (unsigned i = 0; i < COUNT; i++) {
        blocks[i] = malloc(BLOCK);
        if (!blocks[i]) {
            fprintf(stderr, "trim: malloc failed\n");
            return 1;
        }
        memset(blocks[i], (int)i, BLOCK);
    }
    size_t full = resident_bytes();
    for (unsigned i = 0; i < COUNT; i++)
        free(blocks[i]);
    size_t freed = resident_bytes();
    int r = malloc_trim(0);
    size_t trimmed = resident_bytes();
    printf("%s: resident over start: %zu KiB full, %zu KiB freed, %zu KiB after malloc_trim "
           "(returned %d)\n",
           argv[1], (full - base) >> 10, (freed - base) >> 10,
           trimmed > base ? (trimmed - base) >> 10 : 0, r);
    if (full < base + 48 * MIB) {
        fprintf(stderr, "trim: only %zu KiB resident with every block allocated\n",
                (full - base) >> 10);
        return 1;
    }
    if (trimmed > base + 16 * MIB) {
        fprintf(stderr, "trim: %zu KiB still resident after malloc_trim\n", (trimmed - base) >> 10);
        return 1;
    }
    if (uslab && (r != 1 || freed < trimmed + 4 * MIB)) {
        /* The frees gave back what was beyond the headroom (design §4, "Shedding"); the
         * headroom's empty slabs were held until the trim (no purge ran), and it said so. */
        fprintf(stderr, "trim: malloc_trim returned %d; %zu KiB resident before it\n", r,
                (freed - base) >> 10);
        return 1;
    }
    if (uslab && dtors != 0) {
        fprintf(stderr, "trim: malloc_trim ran %d destructors of the program's cache\n", dtors);
        return 1;
    }
    printf("malloc_trim ok\n");
    return 0;
}
