/* SPDX-License-Identifier: MIT */
/*
 * foreign_libc.c - a library that exports glibc's __libc_malloc, __libc_calloc,
 * __libc_realloc, __libc_memalign and __libc_free as mimalloc does, loaded after the preload
 * library (foreign_libc_check.c). Nothing but uslab's system allocator would call them;
 * uslab must call glibc's own (design §8), so each says so on stderr and aborts.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void called(const char *name)
{
    static const char what[] = "foreign_libc: uslab called this library's ";
    if (write(2, what, sizeof what - 1) < 0 || write(2, name, strlen(name)) < 0 ||
        write(2, "\n", 1) < 0)
        abort();
    abort();
}

void *__libc_malloc(size_t size);
void *__libc_calloc(size_t n, size_t size);
void *__libc_realloc(void *p, size_t size);
void *__libc_memalign(size_t align, size_t size);
void __libc_free(void *p);

void *__libc_malloc(size_t size)
{
    (void)size;
    called("__libc_malloc");
    return NULL;
}

void *__libc_calloc(size_t n, size_t size)
{
    (void)n, (void)size;
    called("__libc_calloc");
    return NULL;
}

void *__libc_realloc(void *p, size_t size)
{
    (void)p, (void)size;
    called("__libc_realloc");
    return NULL;
}

void *__libc_memalign(size_t align, size_t size)
{
    (void)align, (void)size;
    called("__libc_memalign");
    return NULL;
}

void __libc_free(void *p)
{
    (void)p;
    called("__libc_free");
}
