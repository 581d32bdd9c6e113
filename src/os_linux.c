/* SPDX-License-Identifier: MIT */
/*
 * os_linux.c - the os layer (docs/design.md §1): the only file that calls mmap, mprotect,
 * madvise or munmap, reads the environment or the clock, or calls the system allocator
 * (and knows glibc's chunk header). Nothing here allocates (but the system allocator) or
 * calls a function that a preloaded library could interpose on the way to malloc.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

void *usi_os_reserve(size_t *size, size_t align)
{
    /* Reserve with PROT_NONE: no commit charge, stray accesses fault. Shrink the request
     * on failure (RLIMIT_AS, valgrind's smaller address space). */
    for (size_t want = *size; want >= ((size_t)1 << 30); want /= 2) {
        size_t len = want + align;
        char *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED)
            continue;
        uintptr_t start = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
        size_t head = start - (uintptr_t)p;
        if (head)
            munmap(p, head);
        if (len - head > want)
            munmap((char *)start + want, len - head - want);
        *size = want;
        return (void *)start;
    }
    errno = ENOMEM;
    return NULL;
}

int usi_os_commit(void *addr, size_t size)
{
    return mprotect(addr, size, PROT_READ | PROT_WRITE);
}

int usi_os_purge(void *addr, size_t size)
{
    /* MADV_DONTNEED, not MADV_FREE: resident memory drops at once, as users measure it. It
     * fails (EINVAL) on pages locked by mlock or mlockall, which keep their contents. */
    return madvise(addr, size, MADV_DONTNEED);
}

int usi_os_replace(void *addr, size_t size)
{
    void *p = mmap(addr, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    return p == addr ? 0 : -1;
}

int usi_os_map_at(void *addr, size_t size)
{
    void *p = mmap(addr, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == addr)
        return 0;
    if (p != MAP_FAILED) /* a kernel before 4.17 took the address as a mere hint */
        munmap(p, size);
    return -1;
}

int usi_os_is_mapped(const void *addr, size_t size)
{
    /* mincore fails with ENOMEM when part of the range is unmapped; the residency bits are
     * not needed, only the answer, so the range is asked about in small steps. */
    unsigned char vec[64];
    const size_t step = sizeof vec * USI_PAGE_SIZE;
    for (size_t off = 0; off < size; off += step) {
        size_t n = size - off < step ? size - off : step;
        int tries = 0;
        while (mincore((char *)addr + off, n, vec) != 0) {
            if (errno != EAGAIN || ++tries == 100)
                return 0;
        }
    }
    return 1;
}

void *usi_os_map(size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) {
        errno = ENOMEM;
        return NULL;
    }
    return p;
}

void *usi_os_map_zero_ro(size_t size)
{
    /* Read-only private mappings carry no commit charge, even with strict overcommit; reads
     * of never-written pages see the shared zero page. */
    void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        errno = ENOMEM;
        return NULL;
    }
    return p;
}

void usi_os_unmap(void *addr, size_t size)
{
    if (addr)
        munmap(addr, size);
}

const char *usi_os_getenv(const char *name)
{
    size_t n = strlen(name);
    if (!environ)
        return NULL;
    for (char **e = environ; *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    return NULL;
}

void usi_os_write_err(const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t w = write(2, buf, len);
        if (w <= 0) {
            if (w < 0 && errno == EINTR)
                continue;
            return;
        }
        buf += w;
        len -= (size_t)w;
    }
}

uint64_t usi_os_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void usi_os_sleep_ms(size_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

uint32_t usi_os_gettid(void)
{
    return (uint32_t)gettid();
}

#ifdef USLAB_ASSERTS
__thread unsigned usi_lock_depth __attribute__((tls_model("initial-exec")));
#endif

void usi_os_postfork_child(void)
{
#ifdef USLAB_ASSERTS
    usi_lock_depth = 0; /* the locks held across fork were re-initialised, not released */
#endif
}

/* ---- the system allocator ------------------------------------------------------------ */

#ifdef USLAB_PRELOAD
/* The preload library exports malloc itself: glibc's own entry points, no dlsym. */
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);
#define SYS(name) __libc_##name
#else
/* libuslab exports only uslab_* names: its system allocator is the process's malloc
 * (glibc's, or a sanitizer's, whose interceptors then see every block). */
#include <malloc.h>
#include <stdlib.h>
#define SYS(name) name
#endif

void *usi_sys_malloc(size_t size)
{
    return SYS(malloc)(size);
}
void *usi_sys_calloc(size_t n, size_t size)
{
    return SYS(calloc)(n, size);
}
void *usi_sys_realloc(void *p, size_t size)
{
    return SYS(realloc)(p, size);
}
void *usi_sys_memalign(size_t align, size_t size)
{
    return SYS(memalign)(align, size);
}
void usi_sys_free(void *p)
{
    SYS(free)(p);
}

size_t usi_sys_usable_size(const void *p)
{
#ifdef USLAB_PRELOAD
    /* glibc's chunk header precedes the block: a size field with flag bits; mmapped
     * chunks carry two words of overhead, others one. */
    size_t head = ((const size_t *)p)[-1];
    size_t chunk = head & ~(size_t)7;
    return (head & 2) ? chunk - 2 * sizeof(size_t) : chunk - sizeof(size_t);
#else
    return malloc_usable_size((void *)p);
#endif
}
