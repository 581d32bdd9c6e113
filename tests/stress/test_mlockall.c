/* SPDX-License-Identifier: MIT */
/*
 * test_mlockall.c - uslab under mlockall(MCL_CURRENT | MCL_FUTURE) (issue 10). There
 * MADV_DONTNEED fails (EINVAL) on every span, so a freed span keeps its contents; a slab
 * made on it again used to trust its old header and bitmap (overlapping blocks, SIGSEGV in
 * usi_slab_take). Each round creates caches of three geometries, allocates from them and
 * from malloc, checks every block's contents, frees everything, destroys the caches and
 * reaps, so every span goes back to the pages layer and is reused by the next round, for
 * other sizes. Phase 1: the pages layer's MAP_FIXED replacement; phase 2: that fails too
 * (fault switch), the span is zeroed by hand; phase 3: no faults.
 *
 * mlockall needs CAP_IPC_LOCK or a large enough RLIMIT_MEMLOCK: the test raises the limit
 * if it may. Where mlockall still fails, the fault switch makes every madvise fail
 * instead, as mlockall would, so the same path runs and is checked to have run.
 *
 * Built twice: against libuslab (uslab_malloc) and, with PLAIN_MALLOC, against plain
 * malloc to run under LD_PRELOAD of libuslab-preload.
 */
#define _GNU_SOURCE
#include "check.h"
#include "faults.h"
#include "testutil.h"
#include "uslab.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#ifdef PLAIN_MALLOC
#define T_MALLOC(n)    malloc(n)
#define T_CALLOC(n, m) calloc(n, m)
#define T_FREE(p)      free(p)
#else
#define T_MALLOC(n)    uslab_malloc(n)
#define T_CALLOC(n, m) uslab_calloc(n, m)
#define T_FREE(p)      uslab_free(p)
#endif

#define MAGIC 0x6d6c6f636b616c6cull

static int ctor(void *obj, void *arg)
{
    (void)arg;
    uint64_t m = MAGIC;
    memcpy(obj, &m, sizeof m);
    return 0;
}

static int lock_everything(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
        struct rlimit inf = {RLIM_INFINITY, RLIM_INFINITY};
        if (setrlimit(RLIMIT_MEMLOCK, &inf) != 0) {
            rl.rlim_cur = rl.rlim_max; /* the soft limit up to the hard one, at least */
            setrlimit(RLIMIT_MEMLOCK, &rl);
        }
    }
    if (mlockall(MCL_CURRENT | MCL_FUTURE) != 0) {
        printf("mlockall: %s: the fault switch makes madvise fail instead\n", strerror(errno));
        return -1;
    }
    return 0;
}

static unsigned long locked_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmLck: %lu", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

enum { NCACHES = 3, NOBJS = 2500, NBLOCKS = 3000 };
static const size_t cache_size[NCACHES] = {24, 200, 5000};
static void *objs[NCACHES][NOBJS];
static void *blocks[NBLOCKS];
static size_t block_size[NBLOCKS];

static void churn(int rounds, uint64_t seed)
{
    struct rng r = {seed};
    for (int round = 0; round < rounds; round++) {
        uslab_cache_t *c[NCACHES];
        for (int k = 0; k < NCACHES; k++) {
            /* Geometries change between rounds: spans move between slab sizes. */
            size_t size = cache_size[(k + round) % NCACHES] + 8 * (size_t)round;
            c[k] = uslab_cache_create("mlock", size, 0, k ? ctor : NULL, NULL, NULL, NULL, 0);
            CHECK(c[k], "create %zu", size);
            for (int i = 0; i < NOBJS; i++) {
                objs[k][i] = uslab_cache_alloc(c[k]);
                CHECK(objs[k][i], "round %d cache %d alloc %d", round, k, i);
                uint64_t m;
                memcpy(&m, objs[k][i], sizeof m);
                CHECK(!k || m == MAGIC, "round %d: object %d not constructed", round, i);
                pattern_fill(objs[k][i], size, ((uint64_t)round << 32) | (uint64_t)(k << 16) | i);
            }
        }
        for (int i = 0; i < NBLOCKS; i++) {
            size_t n = (size_t)(rng_below(&r, 4) ? 1 + rng_below(&r, 512)
                                                 : 512 + rng_below(&r, 32 * 1024 - 512));
            int zeroed = rng_below(&r, 4) == 0;
            blocks[i] = zeroed ? T_CALLOC(1, n) : T_MALLOC(n);
            block_size[i] = n;
            CHECK(blocks[i], "round %d: malloc(%zu)", round, n);
            if (zeroed)
                for (size_t b = 0; b < n; b++)
                    CHECK(((unsigned char *)blocks[i])[b] == 0, "calloc(%zu) byte %zu", n, b);
            pattern_fill(blocks[i], n, ((uint64_t)round << 32) | 0x80000000u | (uint64_t)i);
        }
        for (int k = 0; k < NCACHES; k++) {
            size_t size = uslab_cache_object_size(c[k]);
            for (int i = 0; i < NOBJS; i++) {
                size_t bad = pattern_check(objs[k][i], size,
                                           ((uint64_t)round << 32) | (uint64_t)(k << 16) | i);
                CHECK(bad == (size_t)-1, "round %d cache %d object %d: byte %zu", round, k, i, bad);
                if (k)
                    ctor(objs[k][i], NULL); /* back in its constructed state */
                uslab_cache_free(c[k], objs[k][i]);
            }
            uslab_cache_destroy(c[k]);
        }
        for (int i = 0; i < NBLOCKS; i++) {
            size_t bad = pattern_check(blocks[i], block_size[i],
                                       ((uint64_t)round << 32) | 0x80000000u | (uint64_t)i);
            CHECK(bad == (size_t)-1, "round %d block %d (%zu bytes): byte %zu", round, i,
                  block_size[i], bad);
            T_FREE(blocks[i]);
        }
        uslab_reap(); /* every empty slab back to the pages layer, to be reused */
    }
}

int main(void)
{
    int locked = lock_everything() == 0;
    CHECK(uslab_faults_set(locked ? NULL : "1,1,a") == 0, "fault switch");
    if (locked) {
        CHECK(locked_kib() > 0, "mlockall succeeded, but VmLck is 0");
        printf("mlockall: %lu KiB locked\n", locked_kib());
    }
    /* Phase 1: purges fail, the pages layer replaces the spans. */
    churn(6, 1);
    /* Phase 2: the replacement fails as well; spans are zeroed by hand. */
    unsigned long replaced = uslab_faults_injected("r");
    CHECK(uslab_faults_set(locked ? "1,1,r" : "1,1,ar") == 0, "fault switch");
    churn(6, 2);
    CHECK(uslab_faults_injected("r") > replaced, "no MAP_FIXED replacement was made to fail");
    if (!locked)
        CHECK(uslab_faults_injected("a") > 0, "no madvise was made to fail");
    /* Phase 3: no faults (but still locked). */
    CHECK(uslab_faults_set(NULL) == 0, "faults off");
    churn(3, 3);
    TEST_DONE();
}
