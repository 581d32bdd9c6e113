/* SPDX-License-Identifier: MIT */
/*
 * testutil.h - helpers shared by the object-cache tests: a seeded PRNG, object patterns
 * derived from an id (written into every byte of an object and verified later), resident
 * memory from /proc/self/statm, a set of live pointers, the process's thread count, a
 * file writer for fake /proc and cgroup trees, and a write that must fault.
 */
#ifndef USLAB_TESTUTIL_H
#define USLAB_TESTUTIL_H

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- PRNG: xoshiro-like splitmix64 stream, deterministic for a seed ------------------ */

struct rng {
    uint64_t s;
};

static inline uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static inline uint64_t rng_next(struct rng *r)
{
    r->s += 0x9e3779b97f4a7c15ull;
    uint64_t z = r->s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n), n > 0. */
static inline uint64_t rng_below(struct rng *r, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)rng_next(r) * n) >> 64);
}

/* ---- patterns: every byte of an object is a function of (id, offset) ---------------- */

static inline uint64_t pattern_word(uint64_t h, size_t k)
{
    return h + (uint64_t)k * 0x9e3779b97f4a7c15ull;
}

static inline void pattern_fill(void *obj, size_t size, uint64_t id)
{
    unsigned char *p = obj;
    uint64_t h = splitmix64(id);
    size_t i = 0;
    for (; i + 8 <= size; i += 8) {
        uint64_t w = pattern_word(h, i >> 3);
        memcpy(p + i, &w, 8);
    }
    if (i < size) {
        uint64_t w = pattern_word(h, i >> 3);
        memcpy(p + i, &w, size - i);
    }
}

/* Returns the offset of the first wrong byte, or (size_t)-1 when the object is intact. */
static inline size_t pattern_check(const void *obj, size_t size, uint64_t id)
{
    const unsigned char *p = obj;
    uint64_t h = splitmix64(id);
    size_t i = 0;
    for (; i + 8 <= size; i += 8) {
        uint64_t w = pattern_word(h, i >> 3), got;
        memcpy(&got, p + i, 8);
        if (got != w)
            break;
    }
    /* The tail, or the word that differs: find the byte. */
    for (; i < size; i++) {
        uint64_t w = pattern_word(h, i >> 3);
        if (p[i] != (unsigned char)(w >> ((i & 7) * 8)))
            return i;
    }
    return (size_t)-1;
}

/* ---- resident memory ----------------------------------------------------------------- */

static inline size_t resident_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long total = 0, resident = 0;
    if (!f)
        return 0;
    if (fscanf(f, "%lu %lu", &total, &resident) != 2)
        resident = 0;
    fclose(f);
    return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

/* ---- a set of pointers (open addressing, linear probing, backward-shift deletion) ---- */

struct ptrset {
    uintptr_t *slot; /* 0 = empty */
    size_t mask;
    size_t count;
};

static inline void ptrset_init(struct ptrset *s, size_t max_items)
{
    size_t n = 16;
    while (n < max_items * 2)
        n *= 2;
    s->slot = calloc(n, sizeof(uintptr_t));
    if (!s->slot) {
        perror("calloc");
        exit(1);
    }
    s->mask = n - 1;
    s->count = 0;
}

static inline void ptrset_free(struct ptrset *s)
{
    free(s->slot);
    s->slot = NULL;
}

static inline size_t ptrset_hash(const struct ptrset *s, uintptr_t p)
{
    return (size_t)(splitmix64(p) & s->mask);
}

/* Inserts p; returns 0 if it was already there (a duplicate), 1 otherwise. */
static inline int ptrset_insert(struct ptrset *s, const void *ptr)
{
    uintptr_t p = (uintptr_t)ptr;
    size_t i = ptrset_hash(s, p);
    while (s->slot[i]) {
        if (s->slot[i] == p)
            return 0;
        i = (i + 1) & s->mask;
    }
    if ((s->count + 1) * 4 > (s->mask + 1) * 3) {
        fprintf(stderr, "ptrset full\n");
        exit(1);
    }
    s->slot[i] = p;
    s->count++;
    return 1;
}

/* Removes p; returns 0 if it was not there. */
static inline int ptrset_remove(struct ptrset *s, const void *ptr)
{
    uintptr_t p = (uintptr_t)ptr;
    size_t i = ptrset_hash(s, p);
    while (s->slot[i] != p) {
        if (!s->slot[i])
            return 0;
        i = (i + 1) & s->mask;
    }
    s->slot[i] = 0;
    s->count--;
    /* Backward shift: move later entries of the run into the hole when their home allows. */
    size_t hole = i;
    for (size_t j = (i + 1) & s->mask; s->slot[j]; j = (j + 1) & s->mask) {
        size_t home = ptrset_hash(s, s->slot[j]);
        /* j's entry may move to hole iff home is not in (hole, j] cyclically */
        int in_range = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!in_range) {
            s->slot[hole] = s->slot[j];
            s->slot[j] = 0;
            hole = j;
        }
    }
    return 1;
}

static inline int ptrset_contains(const struct ptrset *s, const void *ptr)
{
    uintptr_t p = (uintptr_t)ptr;
    for (size_t i = ptrset_hash(s, p); s->slot[i]; i = (i + 1) & s->mask)
        if (s->slot[i] == p)
            return 1;
    return 0;
}

/* Threads of this process now: entries of /proc/self/task, or -1 where it cannot be read
 * (opendir allocates: under the preload library, a call into uslab). */
static inline int task_count(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* Writes text to root/rel, making its directories (a fake /proc or cgroup tree for a test
 * whose root is a temporary directory). Exits with a message on failure. */
static inline void test_put_file(const char *root, const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *s = strchr(path + strlen(root) + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = '\0';
        if (mkdir(path, 0700) != 0 && errno != EEXIST) {
            fprintf(stderr, "mkdir %s: %s\n", path, strerror(errno));
            exit(1);
        }
        *s = '/';
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cannot write %s: %s\n", path, strerror(errno));
        exit(1);
    }
    fputs(text, f);
    fclose(f);
}

/* ---- a write that must fault ----------------------------------------------------------- */

/* Writing one byte at addr kills a child with SIGSEGV (a guard page). */
static inline int write_faults(void *addr)
{
    pid_t pid = fork();
    if (pid < 0)
        abort();
    if (pid == 0) {
        *(volatile unsigned char *)addr = 1;
        _exit(0);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid)
        abort();
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV;
}

#endif
