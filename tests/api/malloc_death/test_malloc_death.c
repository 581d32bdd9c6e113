/* SPDX-License-Identifier: MIT */
/*
 * test_malloc_death.c - misuse of the malloc family aborts with a message (issue 3).
 *
 * Each case runs in a forked child whose stderr goes to a pipe; the parent checks that the
 * child died of SIGABRT and that stderr holds the expected text. A case that returns
 * normally, exits or dies of another signal fails the test.
 *
 * Usage: test_malloc_death [case-name]   (no argument: every case but the debug_ ones, or
 * under USLAB_DEBUG only those)
 */
#include "check.h"
#include "uslab.h"

#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Keeps the compiler from reasoning about where a pointer came from. */
static void *launder(void *p)
{
    __asm__ volatile("" : "+r"(p));
    return p;
}

static void free_stack_misaligned(void)
{
    char buf[64];
    memset(buf, 0, sizeof buf);
    uslab_free(launder(buf + 17));
}

static void free_stack_aligned(void)
{
    /* 16-byte aligned, not uslab's: goes to glibc, whose free checks the chunk header
     * (zero here) and aborts. */
    _Alignas(16) size_t buf[8];
    memset(buf, 0, sizeof buf);
    uslab_free(launder(&buf[4]));
}

static void free_heap_misaligned(void)
{
    char *p = uslab_malloc((size_t)4 << 20); /* glibc's: above the slab classes */
    uslab_free(launder(p + 3));
}

static void free_medium_interior(void)
{
    char *p = uslab_malloc(100000); /* a medium block, in a span of its own */
    uslab_free(launder(p + 3));
}

static void free_released_slab(void)
{
    /* The only block of its class: after free and reap its slab goes back to the pages
     * layer, so the pointer is inside uslab's range but in no live slab. */
    void *p = uslab_malloc(24000);
    uslab_free(p);
    uslab_reap();
    uslab_free(launder(p));
}

static void realloc_released_slab(void)
{
    void *p = uslab_malloc(24000);
    uslab_free(p);
    uslab_reap();
    (void)uslab_realloc(launder(p), 10);
}

static void usable_size_released_slab(void)
{
    void *p = uslab_malloc(24000);
    uslab_free(p);
    uslab_reap();
    (void)uslab_malloc_usable_size(launder(p));
}

static void free_interior(void)
{
    /* Inside a live slab but not the start of a block: free's start-of-block check (off
     * the class's lattice, design §8) reports it before it enters a magazine. */
    char *p = uslab_malloc(100);
    uslab_free(launder(p + 16));
    uslab_reap();
}

/* The lattice point past a slab's last block (design §3): the 4480-byte class has 64 KiB
 * spans, each holding the 13 or 14 blocks that fit after its phase. A free of the point
 * passes free's one-multiply check; its free mark makes the pop that would hand it out
 * refuse it. */
static void free_lattice_tail(void)
{
    for (int i = 0; i < 64; i++) {
        uintptr_t span = (uintptr_t)uslab_malloc(4480) & ~(uintptr_t)0xffff, end = span + 0x10000;
        uintptr_t q = span + (4480 - (uint32_t)span % 4480) % 4480; /* the first lattice point */
        while (q + 4480 <= end)
            q += 4480;
        if (q + 16 <= end) {
            uslab_free(launder((void *)q));
            for (int k = 0; k < 64; k++)
                (void)uslab_malloc(4480);
            return;
        }
    }
}

static void free_interior_realloc(void)
{
    char *p = uslab_malloc(100);
    (void)uslab_realloc(launder(p + 16), 50);
}

static void free_interior_odd(void)
{
    char *p = uslab_malloc(100);
    uslab_free(launder(p + 1));
    uslab_reap();
}

/* Both copies go back into the slab at the reap: the second finds its bit already free. */
static void double_free(void)
{
    void *p = uslab_malloc(64);
    uslab_free(p);
    uslab_free(launder(p));
    uslab_reap();
}

/* realloc and malloc_usable_size check a block as free does (session 17's contract audit:
 * malloc_usable_size took any pointer, and under USLAB_DEBUG realloc kept a freed block of
 * its class in place, so that the next malloc handed it out again). */
static void realloc_after_free(void)
{
    void *p = uslab_malloc(40);
    uslab_free(p);
    void *q = uslab_realloc(launder(p), 30); /* the same class: it would stay in place */
    (void)uslab_malloc(40);
    (void)q;
}

static void usable_size_interior(void)
{
    char *p = uslab_malloc(100);
    (void)uslab_malloc_usable_size(launder(p + 16));
}

static void usable_size_after_free(void)
{
    void *p = uslab_malloc(64);
    uslab_free(p);
    (void)uslab_malloc_usable_size(launder(p));
}

static uslab_cache_t *user_cache(void)
{
    uslab_cache_t *c = uslab_cache_create("death-user", 48, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(c, "cache_create");
    return c;
}

static void free_cache_object(void)
{
    uslab_cache_t *c = user_cache();
    uslab_free(launder(uslab_cache_alloc(c)));
}

static void realloc_cache_object(void)
{
    uslab_cache_t *c = user_cache();
    (void)uslab_realloc(launder(uslab_cache_alloc(c)), 100);
}

static void usable_size_cache_object(void)
{
    uslab_cache_t *c = user_cache();
    (void)uslab_malloc_usable_size(launder(uslab_cache_alloc(c)));
}

static void free_cache_object_nomag(void)
{
    uslab_cache_t *c =
        uslab_cache_create("death-nomag", 48, 0, NULL, NULL, NULL, NULL, USLAB_CACHE_NOMAGAZINE);
    CHECK(c, "cache_create");
    uslab_free(launder(uslab_cache_alloc(c)));
}

static void cache_free_malloc_block(void)
{
    /* The other way round: a malloc block given to a user cache. */
    uslab_cache_t *c = user_cache();
    uslab_cache_free(c, launder(uslab_malloc(48)));
    uslab_cache_reap(c);
}

static const struct death_case {
    const char *name;
    void (*fn)(void);
    const char *expect, *expect2; /* substrings of stderr (expect2 may be NULL) */
} cases[] = {
    {"free_stack_misaligned", free_stack_misaligned, "uslab: free(0x",
     "not from uslab, and misaligned for glibc"},
    {"free_heap_misaligned", free_heap_misaligned, "uslab: free(0x",
     "not from uslab, and misaligned for glibc"},
    {"free_medium_interior", free_medium_interior, "uslab: free(0x",
     "invalid pointer: 3 bytes into"},
    {"free_stack_aligned", free_stack_aligned, "free(): invalid", NULL},
    {"free_released_slab", free_released_slab, "uslab: free(0x",
     "inside uslab's range, but not in a live slab"},
    {"realloc_released_slab", realloc_released_slab, "uslab: realloc(0x",
     "inside uslab's range, but not in a live slab"},
    {"usable_size_released_slab", usable_size_released_slab, "uslab: malloc_usable_size(0x",
     "inside uslab's range, but not in a live slab"},
    {"free_interior", free_interior, "uslab: free(0x", "16 bytes into the malloc-112 block at"},
    {"free_interior_odd", free_interior_odd, "uslab: free(0x",
     "1 bytes into the malloc-112 block at"},
    {"free_lattice_tail", free_lattice_tail, "uslab: free(0x",
     "inside a malloc-4480 slab, not the start of a block"},
    {"double_free", double_free, "uslab: double free of 0x", "in cache malloc-64 (object"},
    {"free_cache_object", free_cache_object, "uslab: free(0x", "belongs to cache death-user"},
    {"realloc_cache_object", realloc_cache_object, "uslab: realloc(0x",
     "belongs to cache death-user"},
    {"usable_size_cache_object", usable_size_cache_object, "uslab: malloc_usable_size(0x",
     "belongs to cache death-user"},
    {"free_cache_object_nomag", free_cache_object_nomag, "uslab: free(0x",
     "belongs to cache death-nomag"},
    {"cache_free_malloc_block", cache_free_malloc_block, "uslab: free of 0x",
     "but it belongs to cache malloc-48"},
    {"realloc_after_free", realloc_after_free, "uslab: realloc(0x",
     "use after free (the malloc-48 block is already free)"},
    {"usable_size_interior", usable_size_interior, "uslab: malloc_usable_size(0x",
     "16 bytes into the malloc-112 block at"},
    {"usable_size_after_free", usable_size_after_free, "uslab: malloc_usable_size(0x",
     "use after free (the malloc-64 block is already free)"},
    /* Run with USLAB_DEBUG=F (test death_malloc_debug): the debug classes' exact checks. */
    {"debug_realloc_after_free", realloc_after_free, "BUG malloc-48: Object already free",
     "Object already free: realloc(0x"},
    {"debug_realloc_interior", free_interior_realloc, "BUG malloc-112: Invalid pointer",
     "not the start of an object"},
    {"debug_usable_size_after_free", usable_size_after_free, "BUG malloc-64: Object already free",
     "Object already free: malloc_usable_size(0x"},
    {"debug_usable_size_interior", usable_size_interior, "BUG malloc-112: Invalid pointer",
     "not the start of an object"},
};

static void run_case(const struct death_case *dc)
{
    int fds[2];
    CHECK(pipe(fds) == 0, "pipe");
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        dc->fn();
        _exit(0); /* survived: the parent reports it */
    }
    close(fds[1]);
    char out[4096];
    size_t len = 0;
    ssize_t r;
    while ((r = read(fds[0], out + len, sizeof out - 1 - len)) > 0)
        len += (size_t)r;
    out[len] = '\0';
    close(fds[0]);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT,
          "case %s: expected SIGABRT, got %s %d; stderr: %s", dc->name,
          WIFSIGNALED(st) ? "signal" : "exit status",
          WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), out);
    CHECK(strstr(out, dc->expect), "case %s: stderr lacks \"%s\": %s", dc->name, dc->expect, out);
    CHECK(!dc->expect2 || strstr(out, dc->expect2), "case %s: stderr lacks \"%s\": %s", dc->name,
          dc->expect2, out);
    printf("%-28s aborted: %s", dc->name, out);
    if (len == 0 || out[len - 1] != '\n')
        printf("\n");
}

int main(int argc, char **argv)
{
    size_t ran = 0;
    /* With no case named: the debug_ cases under USLAB_DEBUG, the others without it. */
    int debug = getenv("USLAB_DEBUG") != NULL;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (argc < 2 ? (strncmp(cases[i].name, "debug_", 6) == 0) == debug
                     : !strcmp(argv[1], cases[i].name)) {
            run_case(&cases[i]);
            ran++;
        }
    CHECK(ran > 0, "no case named %s", argc > 1 ? argv[1] : "");
    TEST_DONE();
}
