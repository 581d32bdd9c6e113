/* SPDX-License-Identifier: MIT */
/*
 * libbench-glibc.so: glibc's malloc for a program linked with another allocator.
 *
 * Debian's redis-server links jemalloc, so with no preload its "glibc" run would measure
 * jemalloc. bench/run.py preloads this library in the glibc column of such a program: the
 * malloc family, bound in the global scope before the program's own allocator, goes to
 * glibc's exported entry points (__libc_malloc and its kin). bench/probe names it glibc.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stddef.h>
#include <stdlib.h>

void *__libc_malloc(size_t n);
void __libc_free(void *p);
void *__libc_calloc(size_t n, size_t size);
void *__libc_realloc(void *p, size_t n);
void *__libc_memalign(size_t align, size_t n);
void *__libc_valloc(size_t n);
void *__libc_pvalloc(size_t n);

/* bench_allocator_name (common.h) looks for this symbol. */
extern const char bench_glibc_malloc[];
const char bench_glibc_malloc[] = "glibc";

void *malloc(size_t n)
{
    return __libc_malloc(n);
}

void free(void *p)
{
    __libc_free(p);
}

void *calloc(size_t n, size_t size)
{
    return __libc_calloc(n, size);
}

void *realloc(void *p, size_t n)
{
    return __libc_realloc(p, n);
}

void *memalign(size_t align, size_t n)
{
    return __libc_memalign(align, n);
}

void *aligned_alloc(size_t align, size_t n)
{
    return __libc_memalign(align, n);
}

void *valloc(size_t n)
{
    return __libc_valloc(n);
}

void *pvalloc(size_t n)
{
    return __libc_pvalloc(n);
}

int posix_memalign(void **out, size_t align, size_t n)
{
    if (align < sizeof(void *) || (align & (align - 1)) != 0)
        return EINVAL;
    void *p = __libc_memalign(align, n);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

/* glibc exports no __libc_ name for it: its own definition, looked up in libc itself (the
 * program's allocator comes first in the global scope). */
size_t malloc_usable_size(void *p)
{
    static size_t (*libc_usable)(void *);
    if (!libc_usable) {
        void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
        libc_usable = libc ? (size_t(*)(void *))dlsym(libc, "malloc_usable_size") : NULL;
        if (!libc_usable)
            return 0;
    }
    return libc_usable(p);
}
