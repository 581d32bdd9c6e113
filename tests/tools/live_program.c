/* SPDX-License-Identifier: MIT */
/*
 * live_program - a program whose heap changes in steps, for the tests of `uslab stats PID`
 * and `uslab top PID` (live_test.py, docs/design.md §10.1), which read its caches from
 * outside with process_vm_readv.
 *
 * It reads commands from stdin, one per line, carries each out and answers on stdout with
 * one line, "ok ...", flushed: the test knows when a step is done. Commands:
 *   thread               start a thread that only waits (the process then has threads)
 *   cache NAME SIZE      create an object cache (no constructor)
 *   alloc NAME N         allocate N objects of cache NAME (kept)
 *   free NAME N          free the N objects of NAME allocated last
 *   malloc SIZE N        malloc N blocks of SIZE bytes (kept)
 *   mfree SIZE N         free the N blocks of SIZE allocated last
 *   reap                 uslab_reap(): the calling thread's magazines and the depots back to
 *                        the slabs
 *   churn MS             malloc and free blocks of 48 to 96 bytes for MS milliseconds, and
 *                        keep one of each size, then "ok"
 *   mapversion N         write N into the version field of uslab's map, `uslab_introspect`
 *                        (a uint32 at offset 8, src/live.h), as a library of another layout
 *                        would have it
 *   exit                 exit(0) (destructors run)
 * Started, it answers "ok pid PID".
 *
 * Not linked to uslab: the uslab_* functions (and the map) are looked up with dlsym, so
 * the program runs under `uslab run` or LD_PRELOAD. Built with LIVE_LINKED, it calls them
 * directly and is linked with libuslab.a (a program linked with uslab; malloc is then
 * uslab_malloc, and the map is a symbol of the program, in .symtab only).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef LIVE_LINKED
#include "uslab.h"
#endif

typedef struct uslab_cache cache_t;

static void die(const char *what)
{
    fprintf(stderr, "live_program: %s\n", what);
    exit(1);
}

#ifdef LIVE_LINKED
static cache_t *cache_create(const char *name, size_t size)
{
    return uslab_cache_create(name, size, 0, NULL, NULL, NULL, NULL, 0);
}
#define cache_alloc uslab_cache_alloc
#define cache_free  uslab_cache_free
#define reap        uslab_reap
#define block_alloc uslab_malloc
#define block_free  uslab_free
static void bind_uslab(void) {}
/* Its type is the library's (src/live.h): only its address is taken here. */
extern struct usi_introspect uslab_introspect;
static void *map_address(void)
{
    return &uslab_introspect;
}
#else
static cache_t *(*create_fn)(const char *, size_t, size_t, void *, void *, void *, void *,
                             unsigned);
static void *(*cache_alloc)(cache_t *);
static void (*cache_free)(cache_t *, void *);
static size_t (*reap)(void);
#define block_alloc malloc
#define block_free  free

static cache_t *cache_create(const char *name, size_t size)
{
    return create_fn(name, size, 0, NULL, NULL, NULL, NULL, 0);
}

static void bind_uslab(void)
{
    *(void **)&create_fn = dlsym(RTLD_DEFAULT, "uslab_cache_create");
    *(void **)&cache_alloc = dlsym(RTLD_DEFAULT, "uslab_cache_alloc");
    *(void **)&cache_free = dlsym(RTLD_DEFAULT, "uslab_cache_free");
    *(void **)&reap = dlsym(RTLD_DEFAULT, "uslab_reap");
    if (!create_fn || !cache_alloc || !cache_free || !reap)
        die("uslab is not loaded (run it under uslab run or LD_PRELOAD)");
}

static void *map_address(void)
{
    return dlsym(RTLD_DEFAULT, "uslab_introspect");
}
#endif

/* A stack of pointers: the objects of a cache, or the blocks of a size. Invariant: n <= cap,
 * items[0 .. n) are live objects of `cache` (blocks of `size` bytes when cache is NULL). */
struct stack {
    char name[32];
    size_t size;
    cache_t *cache; /* NULL for malloc blocks */
    void **items;
    size_t n, cap;
};

static struct stack stacks[64];
static size_t nstacks;

static struct stack *find(const char *name, size_t size, int create)
{
    for (size_t i = 0; i < nstacks; i++)
        if (name ? !strcmp(stacks[i].name, name) : (!stacks[i].cache && stacks[i].size == size))
            return &stacks[i];
    if (!create || nstacks == sizeof stacks / sizeof stacks[0])
        return NULL;
    struct stack *s = &stacks[nstacks++];
    snprintf(s->name, sizeof s->name, "%s", name ? name : "malloc");
    s->size = size;
    return s;
}

static void push(struct stack *s, void *p)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 1024;
        s->items = realloc(s->items, s->cap * sizeof *s->items);
        if (!s->items)
            die("out of memory");
    }
    s->items[s->n++] = p;
}

static void *waiter(void *arg)
{
    for (;;)
        pause();
    return arg;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void reply(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void reply(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

int main(void)
{
    bind_uslab();
    reply("ok pid %d", (int)getpid());
    char line[256];
    while (fgets(line, sizeof line, stdin)) {
        char cmd[32] = "", name[32] = "";
        unsigned long a = 0, b = 0;
        int got = sscanf(line, "%31s %31s %lu", cmd, name, &b);
        if (got < 1)
            continue;
        if (!strcmp(cmd, "thread")) {
            pthread_t t;
            if (pthread_create(&t, NULL, waiter, NULL) != 0)
                die("pthread_create failed");
            reply("ok thread");
        } else if (!strcmp(cmd, "cache") && got == 3) {
            struct stack *s = find(name, 0, 1);
            if (!s || s->cache)
                die("cache: bad name");
            s->size = b;
            s->cache = cache_create(name, b);
            if (!s->cache)
                die("uslab_cache_create failed");
            reply("ok cache %s", name);
        } else if (!strcmp(cmd, "alloc") && got == 3) {
            struct stack *s = find(name, 0, 0);
            if (!s || !s->cache)
                die("alloc: no such cache");
            for (unsigned long i = 0; i < b; i++) {
                void *p = cache_alloc(s->cache);
                if (!p)
                    die("uslab_cache_alloc failed");
                memset(p, 0x5a, s->size);
                push(s, p);
            }
            reply("ok alloc %s %zu", name, s->n);
        } else if (!strcmp(cmd, "free") && got == 3) {
            struct stack *s = find(name, 0, 0);
            if (!s || !s->cache || s->n < b)
                die("free: not that many");
            for (unsigned long i = 0; i < b; i++)
                cache_free(s->cache, s->items[--s->n]);
            reply("ok free %s %zu", name, s->n);
        } else if ((!strcmp(cmd, "malloc") || !strcmp(cmd, "mfree")) && got == 3) {
            a = strtoul(name, NULL, 10);
            struct stack *s = find(NULL, a, 1);
            if (!s)
                die("too many stacks");
            if (!strcmp(cmd, "malloc")) {
                for (unsigned long i = 0; i < b; i++) {
                    void *p = block_alloc(a);
                    if (!p)
                        die("malloc failed");
                    memset(p, 0x33, a);
                    push(s, p);
                }
            } else {
                if (s->n < b)
                    die("mfree: not that many");
                for (unsigned long i = 0; i < b; i++)
                    block_free(s->items[--s->n]);
            }
            reply("ok %s %lu %zu", cmd, a, s->n);
        } else if (!strcmp(cmd, "reap")) {
            reap();
            reply("ok reap");
        } else if (!strcmp(cmd, "mapversion") && got >= 2) {
            unsigned char *map = map_address();
            if (!map)
                die("mapversion: no uslab_introspect");
            uint32_t version = (uint32_t)strtoul(name, NULL, 10);
            memcpy(map + 8, &version, sizeof version);
            reply("ok mapversion %u", (unsigned)version);
        } else if (!strcmp(cmd, "churn") && got >= 2) {
            uint64_t end = now_ms() + strtoul(name, NULL, 10);
            /* 768 blocks of each of 4 classes at once: more than a thread's two magazines
             * hold (256 each for these sizes, design §4), so magazines go through the depot
             * (churn the tool counts). */
            static void *p[3072];
            while (now_ms() < end) {
                for (int i = 0; i < 3072; i++)
                    p[i] = block_alloc(48 + (size_t)(i % 4) * 16);
                for (int i = 0; i < 3072; i++)
                    block_free(p[i]);
            }
            /* One block of each class stays: the caches stay in use. */
            static void *kept[4];
            for (int i = 0; i < 4; i++)
                if (!kept[i])
                    kept[i] = block_alloc(48 + (size_t)i * 16);
            reply("ok churn");
        } else if (!strcmp(cmd, "exit")) {
            reply("ok exit");
            exit(0);
        } else {
            die("unknown command");
        }
    }
    return 0;
}
