/* SPDX-License-Identifier: MIT */
/*
 * test_cache_api.c - every rule of the object-cache API and its constructed-state contract
 * (include/uslab.h): constructor and destructor call counts across alloc/free/reap/destroy,
 * the cached constructed state, all alignments, bulk all-or-nothing, constructor failure,
 * argument errors, the reclaim callback (in a child process with a small reservation),
 * reaping, NULL frees, and distinct objects across many caches.
 */
#define _GNU_SOURCE
#include "check.h"
#include "testutil.h"
#include "uslab.h"

#include <errno.h>
#include <spawn.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CTOR_MAGIC 0xc0115ca7edull

/* Per-cache bookkeeping passed as the callbacks' arg. */
struct counts {
    size_t size;
    long ctor, dtor;  /* calls that succeeded / destructor calls */
    long ctor_calls;  /* every constructor call, failed ones included */
    long fail_after;  /* constructor fails once ctor_calls exceeds this (-1: never) */
    int fail_errno;   /* errno a failing constructor sets (0: leave it) */
    long bad_dtor;    /* destructor saw an object not in constructed state */
    long double_ctor; /* constructor saw an object already constructed and not destructed */
};

/* Constructed state: word 0 = CTOR_MAGIC ^ address; word 1 = a user field, 0 when fresh.
 * The destructor checks word 0 and poisons it. */
static int test_ctor(void *obj, void *arg)
{
    struct counts *k = arg;
    k->ctor_calls++;
    if (k->fail_after >= 0 && k->ctor_calls > k->fail_after) {
        if (k->fail_errno)
            errno = k->fail_errno;
        return -1;
    }
    uint64_t *w = obj;
    if (w[0] == (CTOR_MAGIC ^ (uintptr_t)obj))
        k->double_ctor++;
    w[0] = CTOR_MAGIC ^ (uintptr_t)obj;
    w[1] = 0;
    k->ctor++;
    return 0;
}

static void test_dtor(void *obj, void *arg)
{
    struct counts *k = arg;
    uint64_t *w = obj;
    if (w[0] != (CTOR_MAGIC ^ (uintptr_t)obj))
        k->bad_dtor++;
    w[0] = 0xdeadbeefdeadbeefull;
    k->dtor++;
}

static void counts_init(struct counts *k, size_t size)
{
    memset(k, 0, sizeof *k);
    k->size = size;
    k->fail_after = -1;
}

static int is_constructed(const void *obj)
{
    return ((const uint64_t *)obj)[0] == (CTOR_MAGIC ^ (uintptr_t)obj);
}

/* ---- constructor / destructor counts ------------------------------------------------- */

static void test_ctor_dtor_counts(void)
{
    enum { N = 1000 };
    static void *objs[N], *again[N];
    struct counts k;
    counts_init(&k, 64);
    uslab_cache_t *c = uslab_cache_create("counts", 64, 0, test_ctor, test_dtor, NULL, &k, 0);
    CHECK(c, "create");
    for (int i = 0; i < N; i++) {
        objs[i] = uslab_cache_alloc(c);
        CHECK(objs[i], "alloc %d", i);
        CHECK(is_constructed(objs[i]), "fresh object %d is constructed", i);
        CHECK(((uint64_t *)objs[i])[1] == 0, "fresh object has the constructor's state");
        ((uint64_t *)objs[i])[1] = 1000 + (uint64_t)i; /* state the user leaves */
        pattern_fill((uint64_t *)objs[i] + 2, 48, (uint64_t)i);
    }
    CHECK(k.ctor == N, "ctor ran %ld times for %d objects", k.ctor, N);
    CHECK(k.dtor == 0, "no dtor while objects are live (%ld)", k.dtor);
    for (int i = 0; i < N; i++)
        CHECK(pattern_check((uint64_t *)objs[i] + 2, 48, (uint64_t)i) == (size_t)-1, "contents");
    for (int i = 0; i < N; i++)
        uslab_cache_free(c, objs[i]);
    CHECK(k.dtor == 0, "free keeps objects constructed (dtor ran %ld times)", k.dtor);
    /* Reallocate: every object comes from the cache, constructed, with the user's state. */
    struct ptrset set;
    ptrset_init(&set, N);
    for (int i = 0; i < N; i++)
        ptrset_insert(&set, objs[i]);
    for (int i = 0; i < N; i++) {
        again[i] = uslab_cache_alloc(c);
        CHECK(again[i], "realloc %d", i);
        CHECK(ptrset_remove(&set, again[i]), "reallocated object %p was not cached", again[i]);
        CHECK(is_constructed(again[i]), "cached object constructed");
        uint64_t v = ((uint64_t *)again[i])[1];
        CHECK(v >= 1000 && v < 1000 + N && objs[v - 1000] == again[i],
              "cached object keeps the state its last user left (%llu)", (unsigned long long)v);
        CHECK(pattern_check((uint64_t *)again[i] + 2, 48, v - 1000) == (size_t)-1,
              "cached object keeps its contents");
    }
    ptrset_free(&set);
    CHECK(k.ctor == N, "no constructor for cached objects (ctor %ld)", k.ctor);
    for (int i = 0; i < N; i++)
        uslab_cache_free(c, again[i]);
    /* Reap: every cached object is destructed. */
    size_t bytes = uslab_cache_reap(c);
    CHECK(k.dtor == N, "reap destructs every cached object (dtor %ld)", k.dtor);
    CHECK(bytes > 0, "reap gives back the slabs");
    CHECK(uslab_cache_reap(c) == 0, "a second reap has nothing to give");
    CHECK(k.dtor == N, "second reap runs no destructor");
    /* New allocations construct again. */
    for (int i = 0; i < N / 2; i++) {
        objs[i] = uslab_cache_alloc(c);
        CHECK(objs[i] && is_constructed(objs[i]) && ((uint64_t *)objs[i])[1] == 0,
              "object after reap is freshly constructed");
    }
    CHECK(k.ctor == N + N / 2, "ctor after reap: %ld", k.ctor);
    for (int i = 0; i < N / 2; i++)
        uslab_cache_free(c, objs[i]);
    uslab_cache_destroy(c);
    CHECK(k.ctor == k.dtor, "after destroy ctor %ld == dtor %ld", k.ctor, k.dtor);
    CHECK(k.bad_dtor == 0 && k.double_ctor == 0, "dtor saw %ld unconstructed, ctor %ld twice",
          k.bad_dtor, k.double_ctor);
}

/* Many alloc/free/reap cycles with random counts: the invariant ctor - dtor = objects that
 * are live or cached, and no object is constructed twice or destructed unconstructed. */
static void test_ctor_dtor_cycles(unsigned flags, size_t size)
{
    enum { MAXLIVE = 3000 };
    static void *live[MAXLIVE];
    size_t nlive = 0;
    struct counts k;
    counts_init(&k, size);
    uslab_cache_t *c = uslab_cache_create("cycles", size, 0, test_ctor, test_dtor, NULL, &k, flags);
    CHECK(c, "create");
    struct rng r = {flags * 1000 + size};
    for (int round = 0; round < 40; round++) {
        size_t target = rng_below(&r, MAXLIVE);
        while (nlive < target) {
            void *p = uslab_cache_alloc(c);
            CHECK(p && is_constructed(p), "alloc constructed");
            live[nlive++] = p;
        }
        while (nlive > target / 2) {
            size_t i = rng_below(&r, nlive);
            uslab_cache_free(c, live[i]);
            live[i] = live[--nlive];
        }
        if (flags & USLAB_CACHE_NOMAGAZINE)
            CHECK(k.ctor - k.dtor == (long)nlive,
                  "NOMAGAZINE: every free destructs (ctor %ld dtor %ld live %zu)", k.ctor, k.dtor,
                  nlive);
        else
            CHECK(k.ctor - k.dtor >= (long)nlive, "ctor %ld - dtor %ld < live %zu", k.ctor, k.dtor,
                  nlive);
        if (round % 5 == 4) {
            uslab_cache_reap(c);
            CHECK(k.ctor - k.dtor == (long)nlive,
                  "after reap only live objects are constructed (ctor %ld dtor %ld live %zu)",
                  k.ctor, k.dtor, nlive);
        }
    }
    while (nlive)
        uslab_cache_free(c, live[--nlive]);
    uslab_cache_destroy(c);
    CHECK(k.ctor == k.dtor, "after destroy ctor %ld == dtor %ld", k.ctor, k.dtor);
    CHECK(k.bad_dtor == 0 && k.double_ctor == 0, "dtor saw %ld unconstructed, ctor %ld twice",
          k.bad_dtor, k.double_ctor);
}

/* A cache keeps every object freed to it constructed, however big (26 MB of 64 KiB objects
 * here, where a fixed 1 MiB depot destructed most of them): reaped, they are destructed. */
static void test_depot_keeps(void)
{
    enum { N = 400 };
    static void *objs[N];
    struct counts k;
    counts_init(&k, 65536);
    uslab_cache_t *c = uslab_cache_create("big", 65536, 0, test_ctor, test_dtor, NULL, &k, 0);
    CHECK(c, "create");
    for (int i = 0; i < N; i++) {
        objs[i] = uslab_cache_alloc(c);
        CHECK(objs[i] && is_constructed(objs[i]), "alloc");
    }
    for (int i = 0; i < N; i++)
        uslab_cache_free(c, objs[i]);
    CHECK(k.dtor == 0 && k.ctor == N, "freed: %ld destructed of %ld", k.dtor, k.ctor);
    for (int i = 0; i < N; i++) {
        objs[i] = uslab_cache_alloc(c);
        CHECK(objs[i] && is_constructed(objs[i]), "alloc");
    }
    CHECK(k.ctor == N, "allocated again: %ld constructor calls for %d objects", k.ctor, N);
    for (int i = 0; i < N; i++)
        uslab_cache_free(c, objs[i]);
    uslab_cache_reap(c);
    CHECK(k.dtor == N, "reaped: %ld of %d destructed", k.dtor, N);
    uslab_cache_destroy(c);
    CHECK(k.ctor == k.dtor && k.bad_dtor == 0 && k.double_ctor == 0, "balanced");
}

/* Free then allocate at once: the same object comes back in the state the user left. */
static void test_state_kept(void)
{
    struct counts k;
    counts_init(&k, 200);
    uslab_cache_t *c = uslab_cache_create("state", 200, 0, test_ctor, test_dtor, NULL, &k, 0);
    CHECK(c, "create");
    for (uint64_t i = 0; i < 500; i++) {
        uint64_t *p = uslab_cache_alloc(c);
        CHECK(p && is_constructed(p), "alloc");
        CHECK(i == 0 || p[1] == i - 1, "state of the previous user kept: %llu",
              (unsigned long long)p[1]);
        p[1] = i;
        pattern_fill(p + 2, 200 - 16, i);
        uslab_cache_free(c, p);
        uint64_t *q = uslab_cache_alloc(c);
        CHECK(q == p, "LIFO reuse of the cached object");
        CHECK(pattern_check(q + 2, 200 - 16, i) == (size_t)-1, "contents kept while cached");
        uslab_cache_free(c, q);
    }
    CHECK(k.ctor == 1, "one object constructed once (%ld)", k.ctor);
    uslab_cache_destroy(c);
    CHECK(k.dtor == 1, "and destructed once at destroy (%ld)", k.dtor);
}

/* ---- alignments and sizes ------------------------------------------------------------ */

static void test_alignments(void)
{
    static const size_t sizes[] = {1,     2,     3,     7,      8,      9,      15,     16,   17,
                                   24,    31,    33,    48,     63,     64,     65,     100,  127,
                                   128,   129,   255,   256,    257,    511,    512,    1000, 1024,
                                   1500,  2048,  3000,  4095,   4096,   4097,   5000,   8192, 10000,
                                   32768, 65535, 65536, 100000, 262144, 500000, 1 << 20};
    uint64_t id = 0;
    for (size_t align = 0; align <= 4096; align = align ? align * 2 : 1) {
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            size_t size = sizes[s];
            uslab_cache_t *c = uslab_cache_create("align", size, align, NULL, NULL, NULL, NULL,
                                                  (s & 1) ? USLAB_CACHE_NOMAGAZINE : 0);
            CHECK(c, "create size %zu align %zu", size, align);
            CHECK(uslab_cache_object_size(c) == size, "object size");
            size_t want = align < 8 ? 8 : align;
            if (align == 0 && size >= 16)
                want = 16;
            size_t n = (size_t)8 << 20 >> (size > 4096 ? 63 - __builtin_clzl(size) : 12);
            if (n > 200)
                n = 200;
            if (n < 3)
                n = 3;
            void *objs[200];
            struct ptrset set;
            ptrset_init(&set, 2 * n);
            uint64_t first = id;
            for (size_t i = 0; i < n; i++) {
                if (i == n / 2) { /* half by bulk */
                    size_t m = n - i;
                    CHECK(uslab_cache_alloc_bulk(c, m, objs + i) == m, "bulk");
                } else if (i < n / 2) {
                    objs[i] = uslab_cache_alloc(c);
                }
                CHECK(objs[i], "alloc size %zu align %zu", size, align);
                CHECK((uintptr_t)objs[i] % want == 0, "object %p of size %zu not aligned to %zu",
                      objs[i], size, want);
                CHECK(ptrset_insert(&set, objs[i]), "object handed out twice");
                pattern_fill(objs[i], size, id++);
            }
            for (size_t i = 0; i < n; i++)
                CHECK(pattern_check(objs[i], size, first + i) == (size_t)-1,
                      "contents of object %zu (size %zu align %zu)", i, size, align);
            uslab_cache_free_bulk(c, n / 2, objs);
            for (size_t i = n / 2; i < n; i++)
                uslab_cache_free(c, objs[i]);
            ptrset_free(&set);
            uslab_cache_destroy(c);
        }
    }
}

/* ---- bulk ---------------------------------------------------------------------------- */

static void test_bulk(void)
{
    enum { N = 5000 };
    static void *objs[N];
    /* Plain bulk: distinct, aligned, writable. */
    uslab_cache_t *c = uslab_cache_create("bulk", 48, 16, NULL, NULL, NULL, NULL, 0);
    CHECK(c, "create");
    CHECK(uslab_cache_alloc_bulk(c, 0, objs) == 0, "bulk of 0");
    for (int round = 0; round < 3; round++) {
        CHECK(uslab_cache_alloc_bulk(c, N, objs) == N, "bulk alloc");
        struct ptrset set;
        ptrset_init(&set, N);
        for (int i = 0; i < N; i++) {
            CHECK(objs[i] && (uintptr_t)objs[i] % 16 == 0, "aligned");
            CHECK(ptrset_insert(&set, objs[i]), "distinct");
            pattern_fill(objs[i], 48, (uint64_t)i + 7);
        }
        ptrset_free(&set);
        for (int i = 0; i < N; i++)
            CHECK(pattern_check(objs[i], 48, (uint64_t)i + 7) == (size_t)-1, "contents");
        uslab_cache_free_bulk(c, N, objs);
    }
    uslab_cache_destroy(c);

    /* With a constructor that fails after some calls: all or nothing. */
    static const size_t fail_at[] = {0, 1, 17, 64, 65, 200, 1900};
    for (size_t f = 0; f < sizeof fail_at / sizeof fail_at[0]; f++) {
        for (int warm = 0; warm < 2; warm++) {
            struct counts k;
            counts_init(&k, 96);
            c = uslab_cache_create("bulk-fail", 96, 0, test_ctor, test_dtor, NULL, &k, 0);
            CHECK(c, "create");
            long cached = 0;
            if (warm) {
                /* Some constructed objects cached in the thread's magazines first. */
                CHECK(uslab_cache_alloc_bulk(c, 30, objs) == 30, "warm-up");
                for (int i = 0; i < 30; i++)
                    ((uint64_t *)objs[i])[1] = 77;
                uslab_cache_free_bulk(c, 30, objs);
                cached = 30;
            }
            k.fail_after = k.ctor_calls + (long)fail_at[f];
            k.fail_errno = ENOSPC;
            errno = 0;
            size_t got = uslab_cache_alloc_bulk(c, 2000, objs);
            CHECK(got == 0, "bulk with a failing constructor returned %zu", got);
            CHECK(errno == ENOSPC, "bulk failure errno %d, the constructor set ENOSPC", errno);
            CHECK(k.ctor - k.dtor == cached,
                  "objects constructed before the failure destructed (ctor %ld dtor %ld)", k.ctor,
                  k.dtor);
            /* The cached objects are still there, in their state. */
            k.fail_after = -1;
            if (warm) {
                CHECK(uslab_cache_alloc_bulk(c, 30, objs) == 30, "bulk");
                long kept = 0;
                for (int i = 0; i < 30; i++) {
                    CHECK(is_constructed(objs[i]), "constructed");
                    kept += ((uint64_t *)objs[i])[1] == 77;
                }
                CHECK(kept == 30, "the cached objects came back after the failure (%ld)", kept);
                uslab_cache_free_bulk(c, 30, objs);
            }
            /* A successful bulk constructs each object once. */
            long before = k.ctor;
            CHECK(uslab_cache_alloc_bulk(c, 500, objs) == 500, "bulk");
            CHECK(k.ctor - before == 500 - cached, "bulk constructed %ld", k.ctor - before);
            for (int i = 0; i < 500; i++)
                CHECK(is_constructed(objs[i]), "bulk objects constructed");
            uslab_cache_free_bulk(c, 500, objs);
            uslab_cache_destroy(c); /* aborts if the failed bulk leaked an object */
            CHECK(k.ctor == k.dtor && k.bad_dtor == 0 && k.double_ctor == 0, "balanced");
        }
    }
    /* NOMAGAZINE bulk failure. */
    struct counts k;
    counts_init(&k, 32);
    k.fail_after = 10;
    c = uslab_cache_create("bulk-nomag", 32, 0, test_ctor, test_dtor, NULL, &k,
                           USLAB_CACHE_NOMAGAZINE);
    CHECK(c, "create");
    CHECK(uslab_cache_alloc_bulk(c, 100, objs) == 0 && errno == ENOMEM,
          "constructor failing without errno: ENOMEM");
    CHECK(k.ctor == 10 && k.dtor == 10, "ctor %ld dtor %ld", k.ctor, k.dtor);
    uslab_cache_destroy(c);
}

/* ---- constructor failure ------------------------------------------------------------- */

static void test_ctor_failure(void)
{
    for (unsigned flags = 0; flags <= USLAB_CACHE_NOMAGAZINE; flags += USLAB_CACHE_NOMAGAZINE) {
        struct counts k;
        counts_init(&k, 128);
        uslab_cache_t *c =
            uslab_cache_create("ctor-fail", 128, 0, test_ctor, test_dtor, NULL, &k, flags);
        CHECK(c, "create");
        k.fail_after = 0;
        k.fail_errno = EDOM;
        errno = 0;
        CHECK(uslab_cache_alloc(c) == NULL, "failing ctor fails the allocation");
        CHECK(errno == EDOM, "errno %d, the constructor set EDOM", errno);
        k.fail_errno = 0;
        errno = 0;
        CHECK(uslab_cache_alloc(c) == NULL, "failing ctor fails the allocation");
        CHECK(errno == ENOMEM, "errno %d, the constructor left 0: ENOMEM", errno);
        errno = EBADF; /* a stale errno from elsewhere must not leak into the result */
        CHECK(uslab_cache_alloc(c) == NULL && errno == ENOMEM, "stale errno replaced: %d", errno);
        CHECK(k.dtor == 0, "a failed object is not destructed");
        /* Construction works again; the failed objects went back to their slabs. */
        k.fail_after = -1;
        void *objs[100];
        for (int i = 0; i < 100; i++) {
            objs[i] = uslab_cache_alloc(c);
            CHECK(objs[i] && is_constructed(objs[i]), "alloc after failures");
            pattern_fill((uint64_t *)objs[i] + 2, 128 - 16, (uint64_t)i);
        }
        /* Fail in the middle of a run. */
        k.fail_after = k.ctor_calls + 3;
        k.fail_errno = EPERM;
        int failed = 0;
        void *more[10];
        for (int i = 0; i < 10; i++) {
            more[i] = uslab_cache_alloc(c);
            if (!more[i]) {
                CHECK(errno == EPERM, "errno %d", errno);
                failed++;
            }
        }
        CHECK(failed == 7, "7 of 10 allocations failed, %d did", failed);
        for (int i = 0; i < 100; i++) {
            CHECK(pattern_check((uint64_t *)objs[i] + 2, 128 - 16, (uint64_t)i) == (size_t)-1,
                  "contents");
            uslab_cache_free(c, objs[i]);
        }
        for (int i = 0; i < 10; i++)
            uslab_cache_free(c, more[i]); /* NULL for the failed ones: ignored */
        uslab_cache_destroy(c);
        CHECK(k.ctor == k.dtor && k.bad_dtor == 0 && k.double_ctor == 0, "balanced: %ld %ld",
              k.ctor, k.dtor);
    }
}

/* ---- arguments ----------------------------------------------------------------------- */

static void test_create_errors(void)
{
    static const struct {
        size_t size, align;
        unsigned flags;
    } bad[] = {
        {0, 0, 0},
        {0, 8, 0},
        {(1 << 20) + 1, 0, 0},
        {(size_t)-1, 0, 0},
        {64, 3, 0},
        {64, 12, 0},
        {64, 24, 0},
        {64, 8192, 0},
        {64, (size_t)1 << 40, 0},
        {64, 4097, 0},
        {64, 0, 0x100},
        {64, 0, 0x4},
        {64, 0, 0x80000000u},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        errno = 0;
        uslab_cache_t *c = uslab_cache_create("bad", bad[i].size, bad[i].align, NULL, NULL, NULL,
                                              NULL, bad[i].flags);
        CHECK(c == NULL, "case %zu: create(size %zu, align %zu, flags %#x) succeeded", i,
              bad[i].size, bad[i].align, bad[i].flags);
        CHECK(errno == EINVAL, "case %zu: errno %d, expected EINVAL", i, errno);
    }
    /* Boundaries that are valid. */
    static const struct {
        size_t size, align;
    } good[] = {{1, 1}, {1, 2}, {3, 4}, {1 << 20, 0}, {1 << 20, 4096}, {1, 4096}, {4096, 4096}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        uslab_cache_t *c = uslab_cache_create(NULL, good[i].size, good[i].align, NULL, NULL, NULL,
                                              NULL, USLAB_CACHE_NOMAGAZINE | USLAB_CACHE_NOCOLOUR);
        CHECK(c, "valid create(size %zu, align %zu) failed: errno %d", good[i].size, good[i].align,
              errno);
        CHECK(uslab_cache_name(c) != NULL, "a NULL name still gives a name");
        void *p = uslab_cache_alloc(c);
        CHECK(p && (uintptr_t)p % 8 == 0 && (uintptr_t)p % (good[i].align ? good[i].align : 8) == 0,
              "aligned");
        memset(p, 0x3c, good[i].size);
        uslab_cache_free(c, p);
        uslab_cache_destroy(c);
    }
    /* The name is copied, at most 31 bytes kept. */
    char name[64];
    strcpy(name, "a-cache-name-that-is-much-longer-than-thirty-one-bytes");
    uslab_cache_t *c = uslab_cache_create(name, 16, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(c, "create");
    memset(name, 'x', 10);
    CHECK(strncmp(uslab_cache_name(c), "a-cache-name-that-is-much-longe", 31) == 0 &&
              strlen(uslab_cache_name(c)) == 31,
          "name copied and cut to 31 bytes: '%s'", uslab_cache_name(c));
    CHECK(uslab_cache_object_size(c) == 16, "object size");
    uslab_cache_destroy(c);
}

/* ---- reclaim (child process with a 1 GiB reservation) -------------------------------- */

#define RECLAIM_SIZE (256 * 1024)
#define RECLAIM_MAX  8192

static struct {
    uslab_cache_t *a;
    void *aobj[RECLAIM_MAX];
    size_t na;
    int mode; /* 0: do nothing; 1: free 64 objects of A (several slabs) and reap A */
    long calls;
    uslab_cache_t *c;
    void *cobj[RECLAIM_MAX];
    size_t nc;
    long ccalls;
} rc;

static void mark(void *p, uint64_t id)
{
    pattern_fill(p, 64, id);
    pattern_fill((char *)p + RECLAIM_SIZE - 64, 64, ~id);
}

static void verify(const void *p, uint64_t id)
{
    CHECK(pattern_check(p, 64, id) == (size_t)-1 &&
              pattern_check((const char *)p + RECLAIM_SIZE - 64, 64, ~id) == (size_t)-1,
          "contents of object %llu", (unsigned long long)id);
}

static void reclaim_b(void *arg)
{
    CHECK(arg == &rc, "reclaim arg");
    rc.calls++;
    if (rc.mode == 1) {
        for (int i = 0; i < 64 && rc.na; i++) {
            rc.na--;
            verify(rc.aobj[rc.na], rc.na);
            uslab_cache_free(rc.a, rc.aobj[rc.na]);
        }
        uslab_cache_reap(rc.a);
    }
}

/* C has no magazines: its reclaim callback frees one of C's own objects, which goes
 * straight back to its slab, so the retry succeeds. */
static void reclaim_c(void *arg)
{
    CHECK(arg == &rc, "reclaim arg");
    rc.ccalls++;
    if (rc.nc) {
        size_t i = rc.ccalls % rc.nc;
        verify(rc.cobj[i], 100000 + (uint64_t)i);
        uslab_cache_free(rc.c, rc.cobj[i]);
        rc.cobj[i] = rc.cobj[--rc.nc];
        if (i < rc.nc)
            mark(rc.cobj[i], 100000 + (uint64_t)i);
    }
}

static int reclaim_child(void)
{
    rc.a = uslab_cache_create("fill-a", RECLAIM_SIZE, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(rc.a, "create a");
    for (;;) {
        CHECK(rc.na < RECLAIM_MAX, "a 1 GiB reservation holds fewer than %d objects", RECLAIM_MAX);
        errno = 0;
        void *p = uslab_cache_alloc(rc.a);
        if (!p) {
            CHECK(errno == ENOMEM, "errno %d when the reservation is full", errno);
            break;
        }
        mark(p, rc.na);
        rc.aobj[rc.na++] = p;
    }
    printf("reclaim child: %zu objects of %d bytes before the reservation ran out\n", rc.na,
           RECLAIM_SIZE);
    CHECK(rc.na * RECLAIM_SIZE >= ((size_t)1 << 30) / 2, "at least half the reservation used");
    /* Nothing is left anywhere: a bulk allocation fails as well. */
    void *extra = NULL;
    CHECK(uslab_cache_alloc_bulk(rc.a, 1, &extra) == 0,
          "uslab_cache_alloc returned NULL although an object was still available");
    CHECK(uslab_cache_alloc(rc.a) == NULL, "still full");

    /* B cannot grow: its reclaim callback runs; when it frees nothing, B fails. */
    uslab_cache_t *b = uslab_cache_create("fill-b", RECLAIM_SIZE, 0, NULL, NULL, reclaim_b, &rc, 0);
    CHECK(b, "create b");
    errno = 0;
    CHECK(uslab_cache_alloc(b) == NULL, "b cannot grow");
    CHECK(errno == ENOMEM, "errno %d", errno);
    CHECK(rc.calls >= 1, "the reclaim callback ran when the cache could not grow");
    /* Now the callback frees objects of A and reaps A: the retry succeeds. */
    rc.mode = 1;
    long before = rc.calls;
    size_t na_before = rc.na;
    void *pb = uslab_cache_alloc(b);
    CHECK(pb, "after reclaim b can grow (calls %ld)", rc.calls);
    CHECK(rc.calls == before + 1, "reclaim ran once (%ld)", rc.calls - before);
    CHECK(rc.na < na_before, "the callback freed objects");
    mark(pb, 999999);
    /* B's further allocations use the slab it got, without calling reclaim. */
    rc.mode = 0;
    void *pb2 = uslab_cache_alloc(b);
    if (pb2) {
        mark(pb2, 999998);
        verify(pb2, 999998);
        uslab_cache_free(b, pb2);
    }
    verify(pb, 999999);
    uslab_cache_free(b, pb);
    uslab_cache_destroy(b);

    /* Everything of A back; then C fills the reservation and keeps going by reclaiming
     * its own objects. */
    while (rc.na) {
        rc.na--;
        verify(rc.aobj[rc.na], rc.na);
        uslab_cache_free(rc.a, rc.aobj[rc.na]);
    }
    uslab_cache_destroy(rc.a);
    rc.c = uslab_cache_create("fill-c", RECLAIM_SIZE, 0, NULL, NULL, reclaim_c, &rc,
                              USLAB_CACHE_NOMAGAZINE);
    CHECK(rc.c, "create c");
    for (int i = 0; i < 6000; i++) {
        void *p = uslab_cache_alloc(rc.c);
        CHECK(p, "C allocation %d failed although its reclaim callback frees (calls %ld)", i,
              rc.ccalls);
        CHECK(rc.nc < RECLAIM_MAX, "too many");
        rc.cobj[rc.nc] = p;
        mark(p, 100000 + (uint64_t)rc.nc);
        rc.nc++;
    }
    CHECK(rc.ccalls > 0, "C's reclaim callback ran");
    printf("reclaim child: C reclaimed %ld times, %zu live\n", rc.ccalls, rc.nc);
    while (rc.nc) {
        rc.nc--;
        verify(rc.cobj[rc.nc], 100000 + (uint64_t)rc.nc);
        uslab_cache_free(rc.c, rc.cobj[rc.nc]);
    }
    uslab_cache_destroy(rc.c);
    TEST_DONE();
}

/* posix_spawn, not fork: the child needs none of our state, and fork runs uslab's atfork
 * handlers, which take every cache lock (more than ThreadSanitizer can track). */
extern char **environ;

static void test_reclaim(void)
{
    fflush(stdout);
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 2, sizeof *env);
    CHECK(env, "calloc");
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "USLAB_RESERVE=", 14) != 0)
            env[m++] = environ[i];
    env[m++] = "USLAB_RESERVE=1G";
    env[m] = NULL;
    char *args[] = {"test_cache_api", "reclaim-child", NULL};
    pid_t pid;
    int err = posix_spawn(&pid, "/proc/self/exe", NULL, NULL, args, env);
    CHECK(err == 0, "posix_spawn: %s", strerror(err));
    int status;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "reclaim child failed (status %#x)",
          status);
    free(env);
}

/* ---- reaping ------------------------------------------------------------------------- */

static void test_reap(void)
{
    enum { N = 3000 };
    static void *objs[N];
    struct counts k;
    counts_init(&k, 256);
    uslab_cache_t *c = uslab_cache_create("reap", 256, 0, test_ctor, test_dtor, NULL, &k, 0);
    CHECK(c, "create");
    for (int i = 0; i < N; i++) {
        objs[i] = uslab_cache_alloc(c);
        CHECK(objs[i], "alloc");
    }
    /* Reaping with everything live gives nothing and destructs nothing. */
    CHECK(uslab_cache_reap(c) == 0, "nothing to reap");
    CHECK(k.dtor == 0, "no destructor for live objects");
    for (int i = 0; i < N; i++)
        uslab_cache_free(c, objs[i]);
    size_t bytes = uslab_reap();
    CHECK(bytes > 0, "uslab_reap gives back the cache's slabs");
    CHECK(k.dtor == N, "uslab_reap destructs every cached object of the calling thread (%ld)",
          k.dtor);
    CHECK(uslab_reap() == 0 || 1, "second uslab_reap");
    /* Half live: reap gives back only what is free. */
    for (int i = 0; i < N; i++)
        objs[i] = uslab_cache_alloc(c);
    for (int i = 0; i < N; i += 2)
        uslab_cache_free(c, objs[i]);
    uslab_cache_reap(c);
    CHECK(k.ctor - k.dtor == N / 2, "only live objects stay constructed");
    for (int i = 1; i < N; i += 2)
        CHECK(is_constructed(objs[i]), "live objects untouched by reap");
    for (int i = 1; i < N; i += 2)
        uslab_cache_free(c, objs[i]);
    /* Malloc blocks are reaped too. */
    void *m[1000];
    for (int i = 0; i < 1000; i++) {
        m[i] = uslab_malloc(700);
        CHECK(m[i], "malloc");
        memset(m[i], 1, 700);
    }
    for (int i = 0; i < 1000; i++)
        uslab_free(m[i]);
    CHECK(uslab_reap() > 0, "uslab_reap gives back malloc's slabs");
    uslab_cache_destroy(c);
    CHECK(k.ctor == k.dtor, "balanced");
}

/* ---- NULL and misc ------------------------------------------------------------------- */

static void test_null(void)
{
    for (unsigned flags = 0; flags <= USLAB_CACHE_NOMAGAZINE; flags += USLAB_CACHE_NOMAGAZINE) {
        struct counts k;
        counts_init(&k, 32);
        uslab_cache_t *c = uslab_cache_create("null", 32, 0, test_ctor, test_dtor, NULL, &k, flags);
        CHECK(c, "create");
        uslab_cache_free(c, NULL);
        void *objs[3] = {NULL, NULL, NULL};
        uslab_cache_free_bulk(c, 3, objs);
        uslab_cache_free_bulk(c, 0, NULL);
        CHECK(k.dtor == 0, "NULL free runs no destructor");
        uslab_cache_destroy(c); /* would abort if a NULL had been counted as an object */
    }
    uslab_cache_destroy(NULL);
}

/* Objects of many caches at once: all distinct, none overlapping. */
static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

static void test_many_caches(void)
{
    enum { NC = 60, PER = 150 };
    static uslab_cache_t *caches[NC];
    static uintptr_t all[NC * PER][2]; /* address, size */
    static void *objs[NC][PER];
    struct rng r = {99};
    size_t n = 0;
    for (int i = 0; i < NC; i++) {
        size_t size = 1 + rng_below(&r, i < 40 ? 512 : 9000);
        size_t align = (size_t)1 << rng_below(&r, 13);
        caches[i] = uslab_cache_create("many", size, align, NULL, NULL, NULL, NULL,
                                       (unsigned)rng_below(&r, 4));
        CHECK(caches[i], "create %d", i);
    }
    struct ptrset set;
    ptrset_init(&set, NC * PER);
    for (int j = 0; j < PER; j++)
        for (int i = 0; i < NC; i++) {
            size_t size = uslab_cache_object_size(caches[i]);
            void *p = uslab_cache_alloc(caches[i]);
            CHECK(p, "alloc");
            CHECK(ptrset_insert(&set, p), "object %p handed out twice", p);
            pattern_fill(p, size, (uint64_t)(i * PER + j));
            objs[i][j] = p;
            all[n][0] = (uintptr_t)p;
            all[n][1] = size;
            n++;
        }
    qsort(all, n, sizeof all[0], cmp_ptr);
    for (size_t i = 0; i + 1 < n; i++)
        CHECK(all[i][0] + all[i][1] <= all[i + 1][0], "objects overlap");
    for (int i = 0; i < NC; i++)
        for (int j = 0; j < PER; j++)
            CHECK(pattern_check(objs[i][j], uslab_cache_object_size(caches[i]),
                                (uint64_t)(i * PER + j)) == (size_t)-1,
                  "contents of cache %d object %d", i, j);
    for (int i = 0; i < NC; i++) {
        uslab_cache_free_bulk(caches[i], PER, objs[i]);
        uslab_cache_destroy(caches[i]);
    }
    ptrset_free(&set);
}

/* A constructor may allocate (from another cache); a destructor may free. */
static uslab_cache_t *helper_cache;
static long helper_live;

static int ctor_alloc(void *obj, void *arg)
{
    (void)arg;
    void *h = uslab_cache_alloc(helper_cache);
    if (!h)
        return -1;
    memset(h, 0x42, 40);
    *(void **)obj = h;
    helper_live++;
    return 0;
}

static void dtor_free(void *obj, void *arg)
{
    (void)arg;
    unsigned char *h = *(void **)obj;
    CHECK(h[0] == 0x42 && h[39] == 0x42, "helper object intact");
    uslab_cache_free(helper_cache, h);
    helper_live--;
}

static void test_callbacks_allocate(void)
{
    helper_cache = uslab_cache_create("helper", 40, 0, NULL, NULL, NULL, NULL, 0);
    uslab_cache_t *c = uslab_cache_create("outer", 64, 0, ctor_alloc, dtor_free, NULL, NULL, 0);
    CHECK(helper_cache && c, "create");
    void *objs[500];
    for (int round = 0; round < 3; round++) {
        CHECK(uslab_cache_alloc_bulk(c, 250, objs) == 250, "bulk");
        for (int i = 250; i < 500; i++)
            CHECK((objs[i] = uslab_cache_alloc(c)) != NULL, "alloc");
        uslab_cache_free_bulk(c, 500, objs);
        uslab_cache_reap(c);
        CHECK(helper_live == 0, "every destructor freed its helper (%ld left)", helper_live);
    }
    uslab_cache_destroy(c);
    uslab_cache_destroy(helper_cache); /* aborts if a helper object leaked */
}

/* Callbacks may allocate and free objects of their own cache (uslab.h): each node's
 * constructor takes a spare node of the same cache (the spare itself takes none), and its
 * destructor frees the spare. Reap and destroy run the destructors, which free the spares
 * into the cache again: both must go on until those are back too (the audit of session 13:
 * destroy reported "1 live objects" and aborted, reap kept the spare cached). */
static uslab_cache_t *node_cache;
static int node_depth;
static long nodes_constructed, nodes_destructed;

static int node_ctor(void *obj, void *arg)
{
    (void)arg;
    void **spare = obj;
    *spare = NULL;
    if (node_depth == 0) {
        node_depth++;
        *spare = uslab_cache_alloc(node_cache);
        node_depth--;
        if (!*spare)
            return -1;
    }
    nodes_constructed++;
    return 0;
}

static void node_dtor(void *obj, void *arg)
{
    (void)arg;
    void **spare = obj;
    nodes_destructed++;
    if (*spare)
        uslab_cache_free(node_cache, *spare);
}

static void test_dtor_frees_own(int reap_first, unsigned flags)
{
    node_cache = uslab_cache_create("node", 16, 0, node_ctor, node_dtor, NULL, NULL, flags);
    CHECK(node_cache != NULL, "create");
    void *objs[100];
    for (int i = 0; i < 100; i++)
        CHECK((objs[i] = uslab_cache_alloc(node_cache)) != NULL, "alloc");
    for (int i = 0; i < 100; i++)
        uslab_cache_free(node_cache, objs[i]);
    if (reap_first) {
        uslab_cache_reap(node_cache);
        struct uslab_cache_stats st;
        uslab_cache_stats(node_cache, &st);
        CHECK(st.active_objects == 0 && st.cached_objects == 0 && st.slabs == 0,
              "after reap: %zu active, %zu cached, %zu slabs", st.active_objects, st.cached_objects,
              st.slabs);
    }
    uslab_cache_destroy(node_cache); /* aborted: "destroyed with 1 live objects" */
    CHECK(nodes_constructed == nodes_destructed, "%ld constructed, %ld destructed",
          nodes_constructed, nodes_destructed);
    nodes_constructed = nodes_destructed = 0;
}

/* A destructor that allocates a scratch object of its own cache and frees it (uslab.h
 * allows callbacks to use their own cache): destroy runs it on every object it flushes.
 * Each call made a new object that went into the thread's magazine, flushed in the next
 * round, whose destructor made another: destroy found one live object and aborted (session
 * 16's audit; it worked without magazines). Now a cache being destroyed keeps nothing in
 * magazines. Also with objects spread over many rounds of reaps. */
static uslab_cache_t *scratch_cache;
static int scratch_depth;
static long scratch_constructed, scratch_destructed;

static int scratch_ctor(void *obj, void *arg)
{
    (void)obj, (void)arg;
    scratch_constructed++;
    return 0;
}

static void scratch_dtor(void *obj, void *arg)
{
    (void)obj, (void)arg;
    scratch_destructed++;
    if (scratch_depth)
        return;
    scratch_depth++;
    void *q = uslab_cache_alloc(scratch_cache);
    CHECK(q != NULL, "the destructor's scratch object");
    memset(q, 0x5c, 64);
    uslab_cache_free(scratch_cache, q);
    scratch_depth--;
}

static void test_dtor_allocates_own(int reap_first, unsigned flags)
{
    scratch_cache =
        uslab_cache_create("scratch", 64, 0, scratch_ctor, scratch_dtor, NULL, NULL, flags);
    CHECK(scratch_cache != NULL, "create");
    void *objs[300];
    for (int i = 0; i < 300; i++)
        CHECK((objs[i] = uslab_cache_alloc(scratch_cache)) != NULL, "alloc");
    for (int i = 0; i < 300; i++)
        uslab_cache_free(scratch_cache, objs[i]);
    if (reap_first)
        uslab_cache_reap(scratch_cache);
    uslab_cache_destroy(scratch_cache); /* aborted: "destroyed with 1 live objects" */
    CHECK(scratch_constructed == scratch_destructed, "%ld constructed, %ld destructed",
          scratch_constructed, scratch_destructed);
    scratch_constructed = scratch_destructed = 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "reclaim-child") == 0)
        return reclaim_child();
    test_create_errors();
    test_ctor_dtor_counts();
    test_ctor_dtor_cycles(0, 64);
    test_ctor_dtor_cycles(USLAB_CACHE_NOMAGAZINE, 64);
    test_ctor_dtor_cycles(0, 3000);
    test_ctor_dtor_cycles(USLAB_CACHE_NOCOLOUR, 16);
    test_depot_keeps();
    test_state_kept();
    test_alignments();
    test_bulk();
    test_ctor_failure();
    test_reap();
    test_null();
    test_many_caches();
    test_callbacks_allocate();
    test_dtor_frees_own(0, 0);
    test_dtor_frees_own(1, 0);
    test_dtor_frees_own(0, USLAB_CACHE_NOMAGAZINE);
    test_dtor_allocates_own(0, 0);
    test_dtor_allocates_own(1, 0);
    test_dtor_allocates_own(0, USLAB_CACHE_NOMAGAZINE);
    test_reclaim();
    TEST_DONE();
}
