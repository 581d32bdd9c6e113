/* SPDX-License-Identifier: MIT */
/*
 * os_linux.c - the os layer (docs/design.md §1): the only file that calls mmap, mprotect,
 * madvise or munmap, or reads the environment. Nothing here allocates or calls a function
 * that a preloaded library could interpose on the way to malloc.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
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

void usi_os_purge(void *addr, size_t size)
{
    /* MADV_DONTNEED, not MADV_FREE: resident memory drops at once, as users measure it. */
    madvise(addr, size, MADV_DONTNEED);
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
