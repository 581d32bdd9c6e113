/* SPDX-License-Identifier: MIT */
/*
 * hardening_cases.c - attacks on the allocator's own state (issue 11, hardening), one per
 * argv[1], run under LD_PRELOAD of libuslab-preload.so WITHOUT USLAB_DEBUG (see
 * CMakeLists.txt); death_driver checks how each ends. A plain C program with the standard
 * names: what any buggy or hostile program can do to the default configuration.
 *
 * Each case first does the misuse, then checks whether the allocator was fooled by it (a
 * block handed out twice, an interior pointer handed out as a block, a live block or a
 * pointer outside the heap handed out); if so it says so on stderr and exits 0, otherwise
 * it exits 1. death_driver wants SIGABRT with the report's text, so either way the test
 * fails unless the allocator stopped the misuse. Two kinds of case must instead leave the
 * allocator unharmed, and exit 0 only if it was: poison_freelist* (a write after free into
 * a block back in its slab, which keeps nothing there) and overflow_into_next_slab. uslab_reap
 * (include/uslab.h) is looked up with dlsym: the program runs only under the preload library (exit
 * 3 otherwise).
 *
 * free only stores the key; a double free is caught where the block would be handed out
 * again, or put back into its slab (docs/security.md §2.2).
 *
 * Built with -fno-builtin, and the misuse goes through volatile pointers and a volatile
 * function pointer: the compiler must neither fold a malloc/free pair nor see the bug.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* uslab_reap of the preloaded library: the calling thread's magazines and the depots go
 * back to the slabs. */
static size_t (*reap_fn)(void);

static void find_reap(void)
{
    reap_fn = (size_t(*)(void))dlsym(RTLD_DEFAULT, "uslab_reap");
    if (!reap_fn) {
        fprintf(stderr, "hardening_cases: uslab_reap not found: run under "
                        "LD_PRELOAD=libuslab-preload.so\n");
        exit(3);
    }
}

static void reap(void)
{
    reap_fn();
}

/* Kept out of the optimiser's reach: the misuse must really happen. */
static void free_impl(void *p)
{
    free(p);
}
static void (*volatile do_free)(void *) = free_impl;

static void write_impl(void *dst, int byte, size_t n)
{
    memset(dst, byte, n);
}
static void (*volatile do_write)(void *, int, size_t) = write_impl;

static void store_ptr_impl(void *dst, uintptr_t value)
{
    memcpy(dst, &value, sizeof value);
}
static void (*volatile store_ptr)(void *, uintptr_t) = store_ptr_impl;

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

/* Is p one of the n sorted pointers? */
static int in_sorted(void *const *sorted, size_t n, const void *p)
{
    return bsearch(&p, sorted, n, sizeof *sorted, cmp_ptr) != NULL;
}

/* ---- double frees ----------------------------------------------------------------------- */

/* After a misuse of p: do the next `tries` allocations of that size hand p out `times`
 * times (2: a double free handed out twice; 1: p, still held, handed out again)? */
static int handed_out(size_t size, char *p, int tries, int times)
{
    int seen = 0;
    for (int i = 0; i < tries; i++) {
        char *volatile q = malloc(size);
        if (q == p && ++seen == times) {
            fprintf(stderr,
                    "hardening_cases: double free not caught: malloc(%zu) handed out %p %d "
                    "time(s) more than it should\n",
                    size, (void *)p, times);
            return 1;
        }
    }
    return 0;
}

static int handed_out_twice(size_t size, char *p, int tries)
{
    return handed_out(size, p, tries, 2);
}

static int case_double_free(void)
{
    char *volatile p = malloc(32);
    do_free(p);
    do_free(p);
    char *volatile a = malloc(32);
    char *volatile b = malloc(32);
    if (a == b) {
        fprintf(stderr,
                "hardening_cases: double free not caught: malloc(32) returned the "
                "same block twice (%p)\n",
                (void *)a);
        return 0;
    }
    fprintf(stderr, "hardening_cases: double free of %p not caught\n", (void *)p);
    return 1;
}

static int case_double_free_after_reap(void)
{
    /* A live neighbour keeps the slab: the reap would give an empty one back, and the
     * second free would then be of a pointer "not in a live slab". */
    char *volatile neighbour = malloc(48);
    char *volatile p = malloc(48);
    do_free(p);
    reap(); /* p is back in its slab */
    do_free(p);
    if (handed_out_twice(48, p, 256))
        return 0;
    fprintf(stderr, "hardening_cases: double free of %p not caught\n", (void *)p);
    do_free(neighbour);
    return 1;
}

static void *free_in_thread(void *arg)
{
    do_free(arg);
    return NULL; /* its magazines go to the depot at thread exit */
}

static int case_double_free_other_thread(void)
{
    char *volatile p = malloc(64);
    pthread_t t;
    if (pthread_create(&t, NULL, free_in_thread, p) != 0 || pthread_join(t, NULL) != 0) {
        fprintf(stderr, "hardening_cases: no thread\n");
        return 2;
    }
    do_free(p);
    if (handed_out_twice(64, p, 256))
        return 0;
    fprintf(stderr, "hardening_cases: double free of %p not caught\n", (void *)p);
    return 1;
}

/* A block freed by this thread, then again as the first call of a new thread: that free
 * takes the slow path (the thread has no thread cache yet), which checks exactly at the
 * free (design §8). */
static int case_double_free_first_in_thread(void)
{
    char *volatile p = malloc(64);
    do_free(p);
    pthread_t t;
    if (pthread_create(&t, NULL, free_in_thread, p) != 0 || pthread_join(t, NULL) != 0) {
        fprintf(stderr, "hardening_cases: no thread\n");
        return 2;
    }
    if (handed_out_twice(64, p, 256))
        return 0;
    fprintf(stderr, "hardening_cases: double free of %p not caught\n", (void *)p);
    return 1;
}

/*
 * A block freed first into the magazine of a thread that lives on, then freed again by
 * this thread: without the look into other threads' pairs (design §8) it was in two
 * magazines, and both threads were handed it. It lies in the other thread's loaded
 * magazine; with `in_prev`, in its previous one: that thread holds 100 blocks when it
 * frees it and frees them after it (the pair swaps its magazines on the way).
 */
static pthread_barrier_t live_barrier;
static void *live_got[2][256];

static void *free_and_live_on(void *arg)
{
    char *p = *(char **)arg;
    int in_prev = ((char **)arg)[1] != NULL;
    for (int i = 0; i < 600; i++) /* this thread's pair holds magazines of 64-byte blocks */
        do_free(malloc(64));
    void *more[100];
    int nmore = in_prev ? 100 : 0;
    for (int i = 0; i < nmore; i++)
        more[i] = malloc(64);
    do_free(p);
    for (int i = 0; i < nmore; i++)
        do_free(more[i]);
    pthread_barrier_wait(&live_barrier); /* p freed here */
    pthread_barrier_wait(&live_barrier); /* and again by the main thread */
    for (int i = 0; i < 256; i++)
        live_got[1][i] = malloc(64);
    return NULL;
}

static int case_double_free_live_thread(int in_prev)
{
    char *volatile p = malloc(64);
    char *arg[2] = {p, in_prev ? p : NULL};
    pthread_t t;
    pthread_barrier_init(&live_barrier, NULL, 2);
    if (pthread_create(&t, NULL, free_and_live_on, arg) != 0) {
        fprintf(stderr, "hardening_cases: no thread\n");
        return 2;
    }
    pthread_barrier_wait(&live_barrier);
    do_free(p);
    pthread_barrier_wait(&live_barrier);
    for (int i = 0; i < 256; i++)
        live_got[0][i] = malloc(64);
    pthread_join(t, NULL);
    for (int i = 0; i < 256; i++)
        for (int j = 0; j < 256; j++)
            if (live_got[0][i] == live_got[1][j]) {
                fprintf(stderr,
                        "hardening_cases: double free not caught: %p handed out to both "
                        "threads\n",
                        live_got[0][i]);
                return 0;
            }
    fprintf(stderr, "hardening_cases: double free of %p not caught\n", (void *)p);
    return 1;
}

/*
 * A block freed twice by a thread that then gets it back once and exits: its magazine,
 * with the second copy, goes to the depot (or its slab), and this thread's mallocs take
 * it from there: the second pop is on another thread than the first (the key is
 * gone by then; a put back into its slab checks the key as a pop does).
 */
static void *free_twice_and_pop(void *arg)
{
    char *p = malloc(64);
    do_free(p);
    do_free(p);
    char *volatile first = malloc(64);
    *(char **)arg = p;
    return first;
}

static int case_double_free_pop_other_thread(void)
{
    char *p = NULL;
    void *first = NULL;
    pthread_t t;
    if (pthread_create(&t, NULL, free_twice_and_pop, &p) != 0 || pthread_join(t, &first) != 0) {
        fprintf(stderr, "hardening_cases: no thread\n");
        return 2;
    }
    if (first != p) {
        fprintf(stderr, "hardening_cases: the thread's malloc(64) was not %p\n", (void *)p);
        return 2;
    }
    if (handed_out(64, p, 4096, 1)) /* held by the thread's first pop */
        return 0;
    fprintf(stderr, "hardening_cases: double free of %p not caught\n", (void *)p);
    return 1;
}

/* A block freed twice, handed out once; the second copy goes back to its slab (reap): the
 * put refuses a block without the key, or the block would be free in its slab while its
 * holder uses it. */
static int case_double_free_then_reap(void)
{
    char *volatile neighbour = malloc(64); /* keeps the slab */
    char *volatile p = malloc(64);
    do_free(p);
    do_free(p);
    char *volatile mine = malloc(64);
    if (mine != p) {
        fprintf(stderr, "hardening_cases: the first malloc(64) was not %p\n", (void *)p);
        return 2;
    }
    reap();
    if (handed_out(64, p, 4096, 1)) /* held by `mine` */
        return 0;
    fprintf(stderr, "hardening_cases: double free of %p not caught\n", (void *)p);
    do_free(neighbour);
    return 1;
}

/* A write after free into the key's word of a block in a magazine: the handout refuses it
 * (glibc's tcache hands it out). */
static int case_write_after_free(void)
{
    char *volatile p = malloc(64);
    do_free(p);
    store_ptr(p + 8, 0x1234);
    char *volatile q = malloc(64);
    fprintf(stderr,
            "hardening_cases: write after free into %p not caught: malloc(64) returned %p\n",
            (void *)p, (void *)q);
    return q == p ? 0 : 1;
}

/* ---- interior pointers ------------------------------------------------------------------- */

static int case_interior(size_t size, size_t offset)
{
    char *volatile q = malloc(size);
    char *volatile bad = q + offset;
    do_free(bad);
    char *volatile r = malloc(size);
    if (r == bad) {
        fprintf(stderr,
                "hardening_cases: free(%p + %zu) not caught: malloc(%zu) handed out "
                "an interior pointer (%p)\n",
                (void *)q, offset, size, (void *)r);
        return 0;
    }
    fprintf(stderr, "hardening_cases: free(%p + %zu) not caught\n", (void *)q, offset);
    return 1;
}

/* ---- realloc of a pointer that is not a live block ---------------------------------------- */

static void *realloc_impl(void *p, size_t n)
{
    return realloc(p, n);
}
static void *(*volatile do_realloc)(void *, size_t) = realloc_impl;

/* realloc(q + offset, n): kept in place (n below the class size) or moved (above it); both
 * must stop with realloc's report before the block is kept or read. `last`: the block is
 * the last of a fresh slab of 32 KiB blocks, where a copy of a whole block from an
 * interior pointer reads past the slab's end (a SIGSEGV before the fix). */
static int case_realloc_interior(size_t size, size_t offset, size_t n, int last)
{
    char *volatile q = malloc(size);
    if (last)
        for (int i = 0; i < 4; i++) /* a slab of the 32 KiB class holds 4 (the 5th: a new one) */
            q = malloc(size);
    char *volatile r = do_realloc(q + offset, n);
    fprintf(stderr, "hardening_cases: realloc(%p + %zu, %zu) not caught: it returned %p\n",
            (void *)q, offset, n, (void *)r);
    return r != NULL ? 0 : 1;
}

/* realloc of a block already freed: it must not be copied from or handed back. */
static int case_realloc_freed(size_t n)
{
    char *volatile q = malloc(64);
    do_free(q);
    char *volatile r = do_realloc(q, n);
    fprintf(stderr, "hardening_cases: realloc of freed %p not caught: it returned %p\n", (void *)q,
            (void *)r);
    return r != NULL ? 0 : 1;
}

/* ---- slab free lists ---------------------------------------------------------------------- */

#define POISON_BLOCKS 4000
static void *blocks[POISON_BLOCKS];
static void *live_sorted[POISON_BLOCKS / 2];
static void *again[POISON_BLOCKS];
/* A write after free aims a free list here: its first word (the "next" link if the
 * allocator follows it) is 0. */
static uintptr_t target_global[8];

/* What the write after free puts in the free object's first word. Before issue 11 that
 * word was the slab's free-list link, taken on trust: a live block of the victim's own slab
 * was handed out again (TARGET_LIVE); a link outside the slab made the slab layer write the
 * allocation bitmap 512 MiB past the slab header (TARGET_GLOBAL) or read the next link from
 * unmapped memory (TARGET_FAR): SIGSEGV, before anything was handed out. Now the slab layer
 * keeps nothing in a free object (its bitmap is its free list): the write must change
 * nothing the allocator hands out. */
enum poison_target {
    TARGET_LIVE,   /* a live block of the same slab */
    TARGET_GLOBAL, /* a global variable outside the heap */
    TARGET_FAR,    /* the freed block's address + 64 MiB: far outside its slab */
};

/* Frees every second one of POISON_BLOCKS malloc(64) blocks, reaps so they go back to
 * their slabs, then overwrites the first word of the last one freed (a write after free),
 * and allocates POISON_BLOCKS blocks again: none may be the address written, a block still
 * in use, or one handed out twice. Exits 0 (death_driver's "-") only then. */
static int case_poison(enum poison_target target)
{
    for (size_t i = 0; i < POISON_BLOCKS; i++) {
        blocks[i] = malloc(64);
        if (!blocks[i])
            return 2;
        memset(blocks[i], 0, 64);
    }
    size_t nlive = 0;
    for (size_t i = 0; i < POISON_BLOCKS; i += 2)
        live_sorted[nlive++] = blocks[i];
    qsort(live_sorted, nlive, sizeof *live_sorted, cmp_ptr);
    for (size_t i = 1; i < POISON_BLOCKS; i += 2)
        do_free(blocks[i]);
    reap(); /* the freed blocks are on their slabs' free lists now */

    char *victim = blocks[POISON_BLOCKS - 1]; /* the last one freed */
    uintptr_t value;
    if (target == TARGET_LIVE) {
        /* A live block of the victim's slab (a malloc-64 slab is one aligned 64 KiB span):
         * one index check per link would not notice it, the allocator hands it out again. */
        char *live = NULL;
        for (size_t i = 0; i < nlive && !live; i++)
            if (((uintptr_t)live_sorted[i] >> 16) == ((uintptr_t)victim >> 16))
                live = live_sorted[i];
        if (!live) {
            fprintf(stderr, "hardening_cases: no live block in the slab of %p\n", (void *)victim);
            return 2;
        }
        value = (uintptr_t)live;
    } else if (target == TARGET_GLOBAL) {
        value = (uintptr_t)target_global;
    } else {
        value = (uintptr_t)victim + ((uintptr_t)64 << 20);
    }
    store_ptr(victim, value); /* the write after free */

    for (size_t i = 0; i < POISON_BLOCKS; i++) {
        char *volatile q = malloc(64);
        again[i] = q;
        if (!q)
            return 2;
        if ((uintptr_t)q == value || in_sorted(live_sorted, nlive, q)) {
            fprintf(stderr,
                    "hardening_cases: free list poisoned through %p: malloc(64) handed out %p "
                    "(%s)\n",
                    (void *)victim, (void *)q,
                    (uintptr_t)q == (uintptr_t)target_global ? "a global variable"
                    : in_sorted(live_sorted, nlive, q)       ? "a block still in use"
                                                             : "the address written");
            return 1;
        }
    }
    qsort(again, POISON_BLOCKS, sizeof *again, cmp_ptr);
    for (size_t i = 1; i < POISON_BLOCKS; i++)
        if (again[i] == again[i - 1]) {
            fprintf(stderr, "hardening_cases: malloc(64) handed out %p twice\n", again[i]);
            return 1;
        }
    fprintf(stderr,
            "hardening_cases: the write after free into %p changed nothing the allocator "
            "handed out\n",
            (void *)victim);
    return 0;
}

/* ---- a linear overflow out of the last block of a slab -------------------------------------- */

#define OVERFLOW_BLOCKS 20000
static void *held[OVERFLOW_BLOCKS];
static void *held_sorted[OVERFLOW_BLOCKS];

/* A block p whose end is a 64 KiB boundary (the end of its span) while a block of the next
 * span is held too: the next span is a live malloc-64 slab. Overflowing p writes the start
 * of that span, where today's slabs keep their header; it must only ever reach a user's
 * data. */
static int case_overflow_into_next_slab(void)
{
    for (size_t i = 0; i < OVERFLOW_BLOCKS; i++) {
        held[i] = malloc(64);
        if (!held[i])
            return 2;
        held_sorted[i] = held[i];
    }
    qsort(held_sorted, OVERFLOW_BLOCKS, sizeof *held_sorted, cmp_ptr);
    char *p = NULL;
    for (size_t i = 0; i + 1 < OVERFLOW_BLOCKS && !p; i++) {
        uintptr_t end = (uintptr_t)held_sorted[i] + 64;
        uintptr_t next = (uintptr_t)held_sorted[i + 1]; /* the lowest held block above */
        if (end % 65536 == 0 && next >= end && next < end + 65536)
            p = held_sorted[i];
    }
    if (!p) {
        fprintf(stderr, "hardening_cases: no held block ends where a live malloc-64 slab "
                        "starts: the attack cannot be set up\n");
        return 4;
    }
    do_write(p + 64, 'A', 40); /* 40 bytes past the end of p */

    for (size_t i = 0; i < OVERFLOW_BLOCKS; i++)
        do_free(held[i]);
    reap();

    /* The heap must still work: distinct blocks that keep what is written into them. */
    for (size_t i = 0; i < OVERFLOW_BLOCKS; i++) {
        uint64_t *b = malloc(64);
        if (!b)
            return 2;
        for (size_t j = 0; j < 8; j++)
            b[j] = (uint64_t)i << 8 | j;
        held[i] = b;
        held_sorted[i] = b;
    }
    qsort(held_sorted, OVERFLOW_BLOCKS, sizeof *held_sorted, cmp_ptr);
    for (size_t i = 0; i + 1 < OVERFLOW_BLOCKS; i++) {
        if (held_sorted[i] == held_sorted[i + 1]) {
            fprintf(stderr, "hardening_cases: block %p handed out twice\n", held_sorted[i]);
            return 1;
        }
    }
    for (size_t i = 0; i < OVERFLOW_BLOCKS; i++) {
        const uint64_t *b = held[i];
        for (size_t j = 0; j < 8; j++) {
            if (b[j] != ((uint64_t)i << 8 | j)) {
                fprintf(stderr, "hardening_cases: block %zu (%p) overwritten\n", i,
                        (const void *)b);
                return 1;
            }
        }
    }
    for (size_t i = 0; i < OVERFLOW_BLOCKS; i++)
        free(held[i]);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: hardening_cases CASE\n");
        return 2;
    }
    const char *c = argv[1];
    find_reap(); /* before any misuse: the cases need the preload library */
    if (strcmp(c, "double_free") == 0)
        return case_double_free();
    if (strcmp(c, "double_free_after_reap") == 0)
        return case_double_free_after_reap();
    if (strcmp(c, "double_free_other_thread") == 0)
        return case_double_free_other_thread();
    if (strcmp(c, "double_free_first_in_thread") == 0)
        return case_double_free_first_in_thread();
    if (strcmp(c, "double_free_live_thread") == 0)
        return case_double_free_live_thread(0);
    if (strcmp(c, "double_free_live_thread_prev") == 0)
        return case_double_free_live_thread(1);
    if (strcmp(c, "double_free_pop_other_thread") == 0)
        return case_double_free_pop_other_thread();
    if (strcmp(c, "double_free_then_reap") == 0)
        return case_double_free_then_reap();
    if (strcmp(c, "write_after_free") == 0)
        return case_write_after_free();
    if (strcmp(c, "interior_8") == 0)
        return case_interior(64, 8);
    if (strcmp(c, "interior_16") == 0)
        return case_interior(48, 16);
    if (strcmp(c, "interior_32") == 0)
        return case_interior(96, 32);
    if (strcmp(c, "realloc_interior_keep") == 0)
        return case_realloc_interior(64, 16, 40, 0);
    if (strcmp(c, "realloc_misaligned_keep") == 0)
        return case_realloc_interior(64, 1, 40, 0);
    if (strcmp(c, "realloc_interior_move") == 0)
        return case_realloc_interior(64, 16, 200, 0);
    if (strcmp(c, "realloc_interior_slab_end") == 0)
        return case_realloc_interior(32768, 16, 40000, 1);
    if (strcmp(c, "realloc_freed_keep") == 0)
        return case_realloc_freed(40);
    if (strcmp(c, "realloc_freed_move") == 0)
        return case_realloc_freed(200);
    if (strcmp(c, "poison_freelist") == 0)
        return case_poison(TARGET_LIVE);
    if (strcmp(c, "poison_freelist_global") == 0)
        return case_poison(TARGET_GLOBAL);
    if (strcmp(c, "poison_freelist_index") == 0)
        return case_poison(TARGET_FAR);
    if (strcmp(c, "overflow_into_next_slab") == 0)
        return case_overflow_into_next_slab();
    fprintf(stderr, "hardening_cases: unknown case %s\n", c);
    return 2;
}
