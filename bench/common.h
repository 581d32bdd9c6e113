/* SPDX-License-Identifier: MIT */
/*
 * common.h - helpers shared by the benchmark programs (header only, all static inline).
 *
 *  - a seeded PRNG (splitmix64 to seed, xoshiro256** to draw) and Beta sampling from two
 *    Gamma draws (Marsaglia-Tsang), so no benchmark needs GSL;
 *  - clock_gettime / rdtsc timers for timing whole phases;
 *  - the allocator probe: every benchmark prints "allocator=<name>" for the malloc that
 *    actually serves it (found with dlsym + dladdr), and the runner refuses a run whose
 *    probe does not name the allocator it preloaded;
 *  - a tiny "--key value" option parser and key=value result printing.
 */
#ifndef USLAB_BENCH_COMMON_H
#define USLAB_BENCH_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define BENCH_HAVE_RDTSC 1
#else
#define BENCH_HAVE_RDTSC 0
#endif

#define BENCH_CACHE_LINE 64

/* ---- PRNG ------------------------------------------------------------------------- */

typedef struct {
    uint64_t s[4];
} bench_rng;

static inline uint64_t bench_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline void bench_rng_seed(bench_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = bench_splitmix64(&seed);
}

static inline uint64_t bench_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/* xoshiro256** */
static inline uint64_t bench_rng_next(bench_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = bench_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = bench_rotl(s[3], 45);
    return result;
}

/* Uniform in [0, 1). */
static inline double bench_uniform(bench_rng *r)
{
    return (double)(bench_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* Uniform integer in [0, n). */
static inline uint64_t bench_below(bench_rng *r, uint64_t n)
{
    return (uint64_t)(bench_uniform(r) * (double)n);
}

/* Standard normal, Marsaglia polar method. */
static inline double bench_normal(bench_rng *r)
{
    double u, v, s;
    do {
        u = 2.0 * bench_uniform(r) - 1.0;
        v = 2.0 * bench_uniform(r) - 1.0;
        s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    return u * sqrt(-2.0 * log(s) / s);
}

/* Gamma(a, 1), Marsaglia and Tsang (2000); for a < 1 the boost Gamma(a+1) * U^(1/a). */
static inline double bench_gamma(bench_rng *r, double a)
{
    if (a < 1.0) {
        double u = bench_uniform(r);
        return bench_gamma(r, a + 1.0) * pow(u > 0 ? u : 1e-300, 1.0 / a);
    }
    double d = a - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x, v;
        do {
            x = bench_normal(r);
            v = 1.0 + c * x;
        } while (v <= 0.0);
        v = v * v * v;
        double u = bench_uniform(r);
        if (u < 1.0 - 0.0331 * x * x * x * x)
            return d * v;
        if (u > 0 && log(u) < 0.5 * x * x + d * (1.0 - v + log(v)))
            return d * v;
    }
}

/* Beta(a, b) = X / (X + Y) with X ~ Gamma(a), Y ~ Gamma(b). */
static inline double bench_beta(bench_rng *r, double a, double b)
{
    double x = bench_gamma(r, a), y = bench_gamma(r, b);
    return x / (x + y);
}

/* ---- timers ------------------------------------------------------------------------ */

static inline uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t bench_ticks(void)
{
#if BENCH_HAVE_RDTSC
    return __rdtsc();
#else
    return 0;
#endif
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n) (sorts v). */
static inline double bench_median(double *v, size_t n)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static inline long bench_maxrss_kb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* Current resident set in KiB, from /proc/self/statm (no allocation: read() into a stack
 * buffer). */
static inline long bench_rss_kb(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;
    if (!f)
        return -1;
    if (fscanf(f, "%ld %ld", &size, &res) != 2)
        res = -1;
    fclose(f);
    return res < 0 ? -1 : res * 4;
}

/* Touch every cache line of a block (and its last byte), so the benchmark pays for the
 * memory the allocator hands out, as a real program would. */
static inline void bench_touch(void *p, size_t n, unsigned char v)
{
    unsigned char *c = (unsigned char *)p;
    for (size_t i = 0; i < n; i += BENCH_CACHE_LINE)
        c[i] = v;
    if (n)
        c[n - 1] = v;
}

/* The pages of a block, one byte each: its first and last bytes, and the byte at the middle
 * of every page in between (page offset 2048), wherever the allocator put the block. Writing
 * p[0], p[4096], ... instead writes the same cache lines again, page after page and block
 * after block, only where the allocator aligns its blocks to pages: with the 1-6 MiB blocks
 * of `large mixed`, that alone made tcmalloc's time 0.73x that of glibc's heap, whose blocks
 * start at any 16 bytes of a page. The middle, not the page's start: the first line of a
 * page shares its cache set with every page-aligned structure (a buffer of 4-24 MiB written
 * at page starts took 10% longer than at a page offset of 704). docs/benchmarks.md,
 * session 44. */
#define BENCH_PAGE      ((uintptr_t)4096)
#define BENCH_PAGE_MARK ((uintptr_t)2048)
/* Offset in c of the first page middle after c[0]. */
static inline size_t bench_first_mark(const unsigned char *c)
{
    uintptr_t in = (uintptr_t)c % BENCH_PAGE;
    return (size_t)(in < BENCH_PAGE_MARK ? BENCH_PAGE_MARK - in
                                         : BENCH_PAGE + BENCH_PAGE_MARK - in);
}
static inline void bench_write_pages(void *p, size_t n, unsigned char v)
{
    unsigned char *c = (unsigned char *)p;
    if (!n)
        return;
    c[0] = v;
    for (size_t o = bench_first_mark(c); o < n; o += BENCH_PAGE)
        c[o] = v;
    c[n - 1] = v;
}
/* The same bytes read: their sum (calloc's memory must read as zero). */
static inline unsigned bench_read_pages(const void *p, size_t n)
{
    const unsigned char *c = (const unsigned char *)p;
    if (!n)
        return 0;
    unsigned sum = c[0];
    for (size_t o = bench_first_mark(c); o < n; o += BENCH_PAGE)
        sum += c[o];
    return sum + c[n - 1];
}

/* Keep the compiler from dropping a malloc/free pair. */
static inline void bench_escape(void *p)
{
    __asm__ volatile("" : : "g"(p) : "memory");
}

/* ---- allocator probe ---------------------------------------------------------------- */

/* The name of the allocator whose malloc this process uses: the shared object that
 * defines the first "malloc" in the global scope, cross-checked by the allocator's own
 * entry points. */
static inline const char *bench_allocator_name(const char **path_out)
{
    void *m = dlsym(RTLD_DEFAULT, "malloc");
    Dl_info info;
    const char *path = "?";
    if (m && dladdr(m, &info) && info.dli_fname)
        path = info.dli_fname;
    if (path_out)
        *path_out = path;
    if (strstr(path, "uslab") && dlsym(RTLD_DEFAULT, "uslab_malloc") == m)
        return "uslab";
    if (strstr(path, "mimalloc") && dlsym(RTLD_DEFAULT, "mi_malloc"))
        return "mimalloc";
    if (strstr(path, "jemalloc") && dlsym(RTLD_DEFAULT, "mallctl"))
        return "jemalloc";
    if (strstr(path, "tcmalloc") && dlsym(RTLD_DEFAULT, "tc_malloc"))
        return "tcmalloc";
    if (strstr(path, "snmalloc"))
        return "snmalloc";
    if (strstr(path, "libbench-glibc") && dlsym(RTLD_DEFAULT, "bench_glibc_malloc"))
        return "glibc"; /* glibc's malloc over a program's own allocator (glibc_malloc.c) */
    if (strstr(path, "/libc.so") && !dlsym(RTLD_DEFAULT, "mi_malloc") &&
        !dlsym(RTLD_DEFAULT, "tc_malloc") && !dlsym(RTLD_DEFAULT, "mallctl"))
        return "glibc";
    return "unknown";
}

static inline void bench_print_allocator(void)
{
    const char *path;
    const char *name = bench_allocator_name(&path);
    printf("allocator=%s\nallocator_path=%s\n", name, path);
}

/* ---- options ------------------------------------------------------------------------ */

/* Options are "--name value" pairs; bench_opt_* return the value or the default. */
static inline const char *bench_opt_str(int argc, char **argv, const char *name, const char *def)
{
    for (int i = 1; i + 1 < argc; i++)
        if (argv[i][0] == '-' && argv[i][1] == '-' && strcmp(argv[i] + 2, name) == 0)
            return argv[i + 1];
    return def;
}

static inline double bench_opt_double(int argc, char **argv, const char *name, double def)
{
    const char *s = bench_opt_str(argc, argv, name, NULL);
    return s ? strtod(s, NULL) : def;
}

static inline long bench_opt_long(int argc, char **argv, const char *name, long def)
{
    const char *s = bench_opt_str(argc, argv, name, NULL);
    return s ? (long)strtod(s, NULL) : def;
}

static inline void *bench_xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", n);
        exit(2);
    }
    return p;
}

#endif
