/* SPDX-License-Identifier: MIT */
/*
 * preload_probe.c - a plain C program (not linked against uslab) for the preload tests.
 *
 *   preload_probe uslab    must run under LD_PRELOAD=libuslab-preload.so: proves that small
 *                          allocations, also those made inside libc, are served by slabs
 *   preload_probe glibc    must run without it: the same probes see glibc's allocator, so
 *                          the probes can tell the two apart
 *   preload_probe threads  8 threads passing blocks to each other; prints a checksum
 *   preload_probe fork     forks while other threads allocate; children allocate and free
 *
 * Exit status 0 on success; a failed check prints the reason and exits 1.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "preload_probe: " __VA_ARGS__);                                            \
        fprintf(stderr, "\n");                                                                     \
        exit(1);                                                                                   \
    } while (0)

/* The [heap] (brk) range of this process, from /proc/self/maps. */
static int heap_range(uintptr_t *lo, uintptr_t *hi)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        FAIL("cannot open /proc/self/maps");
    char line[512];
    int found = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "[heap]")) {
            unsigned long a, b;
            if (sscanf(line, "%lx-%lx", &a, &b) == 2) {
                *lo = a;
                *hi = b;
                found = 1;
            }
        }
    fclose(f);
    return found;
}

enum { NBLK = 1000 };

static int probe(int expect_uslab)
{
    size_t (*uslab_usable)(void *) =
        (size_t(*)(void *))dlsym(RTLD_DEFAULT, "uslab_malloc_usable_size");
    if (expect_uslab && !uslab_usable)
        FAIL("uslab_malloc_usable_size not found: libuslab-preload.so is not loaded");
    if (!expect_uslab && uslab_usable)
        FAIL("uslab_malloc_usable_size found without LD_PRELOAD");

    static void *blk[NBLK];
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < NBLK; i++) {
        blk[i] = malloc(20);
        if (!blk[i])
            FAIL("malloc(20) failed");
        memset(blk[i], i & 0xff, 20);
        uintptr_t a = (uintptr_t)blk[i];
        lo = a < lo ? a : lo;
        hi = a > hi ? a : hi;
        size_t u = malloc_usable_size(blk[i]);
        /* uslab: class 32; glibc: a 32-byte chunk holds 24 bytes */
        if (u != (expect_uslab ? 32u : 24u))
            FAIL("malloc_usable_size(malloc(20)) = %zu under %s", u,
                 expect_uslab ? "uslab" : "glibc");
        if (uslab_usable && uslab_usable(blk[i]) != u)
            FAIL("uslab_malloc_usable_size disagrees with malloc_usable_size");
    }
    uintptr_t hlo = 0, hhi = 0;
    int have_heap = heap_range(&hlo, &hhi); /* after the allocations: the heap has grown */
    size_t in_heap = 0;
    for (int i = 0; i < NBLK; i++) {
        uintptr_t a = (uintptr_t)blk[i];
        if (have_heap && a >= hlo && a < hhi)
            in_heap++;
        for (int j = 0; j < 20; j++)
            if (((unsigned char *)blk[i])[j] != (i & 0xff))
                FAIL("block %d corrupted", i);
    }
    if (expect_uslab) {
        /* 1000 objects of 32 bytes: one or two 64 KiB slabs, none in glibc's brk heap */
        if (in_heap)
            FAIL("%zu of %d small blocks lie in glibc's [heap]", in_heap, NBLK);
        if (hi - lo >= ((uintptr_t)1 << 20))
            FAIL("small blocks spread over %#lx bytes, not one slab range",
                 (unsigned long)(hi - lo));
    } else if (have_heap && in_heap != NBLK) {
        FAIL("only %zu of %d glibc blocks lie in [heap]", in_heap, NBLK);
    }
    /* Allocations made inside libc go to the same allocator. */
    char *dup = strdup("a string duplicated by libc itself");
    size_t du = malloc_usable_size(dup);
    if (expect_uslab && (du != 48 || !uslab_usable || uslab_usable(dup) != 48))
        FAIL("strdup block: usable %zu, expected uslab's class 48", du);
    if (!expect_uslab && du != 40)
        FAIL("strdup block: usable %zu, expected glibc's 40", du);
    free(dup);
    /* A large block goes to glibc in both cases and is still handled by free/usable size. */
    char *big = malloc(100000);
    if (!big || malloc_usable_size(big) < 100000)
        FAIL("malloc(100000)");
    memset(big, 1, 100000);
    free(big);
    for (int i = 0; i < NBLK; i++)
        free(blk[i]);
    printf("%s: 1000 small blocks within %#lx bytes, usable size %zu\n",
           expect_uslab ? "uslab" : "glibc", (unsigned long)(hi - lo),
           expect_uslab ? (size_t)32 : (size_t)24);
    return 0;
}

/* ---- threads ------------------------------------------------------------------------------ */

enum { NTHREADS = 8, ROUNDS = 200000, QUEUE = 64 };

struct msg {
    unsigned char *p;
    size_t size;
    unsigned char tag;
};

static struct {
    pthread_mutex_t lock;
    struct msg q[QUEUE];
    int n;
} box = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void check_msg(const struct msg *m)
{
    for (size_t i = 0; i < m->size; i++)
        if (m->p[i] != m->tag)
            FAIL("block %p of %zu bytes corrupted at %zu", (void *)m->p, m->size, i);
}

static void *thread_main(void *arg)
{
    uint32_t r = 2654435761u * (uint32_t)(uintptr_t)(arg) + 1;
    uint64_t *sum = malloc(sizeof *sum);
    *sum = 0;
    struct msg local[32] = {{0}};
    for (int i = 0; i < ROUNDS; i++) {
        r = r * 1664525u + 1013904223u;
        struct msg *m = &local[(r >> 8) % 32];
        if (m->p) {
            check_msg(m);
            *sum += m->size * m->tag;
            if ((r >> 20) % 4 == 0) { /* hand it to another thread */
                pthread_mutex_lock(&box.lock);
                if (box.n < QUEUE) {
                    box.q[box.n++] = *m;
                    m->p = NULL;
                }
                pthread_mutex_unlock(&box.lock);
            }
            if (m->p) {
                free(m->p);
                m->p = NULL;
            }
        } else if ((r >> 20) % 4 == 1) {
            pthread_mutex_lock(&box.lock);
            if (box.n)
                *m = box.q[--box.n];
            pthread_mutex_unlock(&box.lock);
            if (m->p) {
                check_msg(m);
                m->p = realloc(m->p, m->size + 100);
                if (!m->p)
                    FAIL("realloc");
                check_msg(m); /* the old contents moved along */
                m->size += 100;
                memset(m->p, m->tag, m->size);
            }
        } else {
            m->size = (r >> 12) % 8 == 0 ? 1000 + (r >> 4) % 60000 : (r >> 4) % 300;
            m->tag = (unsigned char)(1 + (r >> 16) % 255);
            m->p = (r >> 24) % 8 == 0 ? calloc(1, m->size) : malloc(m->size);
            if (!m->p)
                FAIL("malloc");
            memset(m->p, m->tag, m->size);
        }
    }
    for (int i = 0; i < 32; i++)
        if (local[i].p) {
            check_msg(&local[i]);
            free(local[i].p);
        }
    return sum;
}

static int threads(void)
{
    pthread_t th[NTHREADS];
    for (uintptr_t i = 0; i < NTHREADS; i++)
        if (pthread_create(&th[i], NULL, thread_main, (void *)i))
            FAIL("pthread_create");
    int ok = 1;
    for (int i = 0; i < NTHREADS; i++) {
        void *ret;
        pthread_join(th[i], &ret);
        ok &= ret != NULL;
        free(ret);
    }
    for (int i = 0; i < box.n; i++) {
        check_msg(&box.q[i]);
        free(box.q[i].p);
    }
    /* Sums depend on scheduling (hand-offs); print only what is deterministic. */
    printf("threads %d rounds %d ok %d\n", NTHREADS, ROUNDS, ok);
    return 0;
}

/* ---- fork ------------------------------------------------------------------------------- */

static volatile int stop_bg;

static void *background(void *arg)
{
    (void)arg;
    void *keep[64] = {0};
    unsigned i = 0;
    while (!stop_bg) {
        unsigned k = i++ % 64;
        free(keep[k]);
        keep[k] = malloc(1 + (i * 37) % 5000);
        if (!keep[k])
            FAIL("malloc in background thread");
    }
    for (int k = 0; k < 64; k++)
        free(keep[k]);
    return NULL;
}

static int child_work(int n)
{
    void *v[500];
    for (int i = 0; i < 500; i++) {
        size_t s = (size_t)(1 + (i * 131 + n) % (i % 10 == 0 ? 70000 : 700));
        v[i] = malloc(s);
        if (!v[i])
            return 2;
        memset(v[i], i & 0xff, s);
    }
    for (int i = 0; i < 500; i++) {
        if (((unsigned char *)v[i])[0] != (i & 0xff))
            return 3;
        free(v[i]);
    }
    /* A thread in the child too. */
    pthread_t t;
    stop_bg = 0;
    if (pthread_create(&t, NULL, background, NULL))
        return 4;
    usleep(1000);
    stop_bg = 1;
    pthread_join(t, NULL);
    return 0;
}

static int forks(void)
{
    enum { BG = 3, CHILDREN = 40 };
    pthread_t bg[BG];
    for (int i = 0; i < BG; i++)
        if (pthread_create(&bg[i], NULL, background, NULL))
            FAIL("pthread_create");
    int bad = 0;
    for (int n = 0; n < CHILDREN; n++) {
        void *before = malloc(100);
        pid_t pid = fork();
        if (pid < 0)
            FAIL("fork");
        if (pid == 0) {
            free(before); /* the parent's block, inherited */
            _exit(child_work(n));
        }
        free(before);
        int st;
        if (waitpid(pid, &st, 0) != pid)
            FAIL("waitpid");
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "child %d: status %#x\n", n, st);
            bad++;
        }
    }
    stop_bg = 1;
    for (int i = 0; i < BG; i++)
        pthread_join(bg[i], NULL);
    if (bad)
        FAIL("%d of %d children failed", bad, CHILDREN);
    printf("forked %d children while %d threads allocated: all exited 0\n", CHILDREN, BG);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "uslab"))
        return probe(1);
    if (!strcmp(mode, "glibc"))
        return probe(0);
    if (!strcmp(mode, "threads"))
        return threads();
    if (!strcmp(mode, "fork"))
        return forks();
    FAIL("usage: preload_probe uslab|glibc|threads|fork");
}
