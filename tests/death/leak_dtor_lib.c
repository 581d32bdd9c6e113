/* SPDX-License-Identifier: MIT */
/*
 * leak_dtor_lib.c - a library that keeps blocks until its destructor frees them, as a
 * library's cache of strings or its global tables do (libleak_dtor_lib.so, DT_NEEDED by
 * leak_dtor_main). They are no leaks: the exit reports must run after this destructor
 * (design §9), which says so on stderr, so that the checker sees the order.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KEPT 50

static void *(*alloc_fn)(size_t);
static void (*free_fn)(void *);
static void *kept[KEPT], *big;

/* The blocks' allocation site: no report may name it. */
__attribute__((noinline)) static void leak_dtor_fill(void)
{
    for (int i = 0; i < KEPT; i++) {
        kept[i] = alloc_fn(48);
        if (kept[i])
            memset(kept[i], 'k', 48);
    }
    big = alloc_fn == malloc ? malloc(2000000) : NULL; /* the system allocator's table too */
}

/* Keeps KEPT blocks from a (NULL: malloc), freed by f (NULL: free) in the destructor. */
void leak_dtor_keep(void *(*a)(size_t), void (*f)(void *));
void leak_dtor_keep(void *(*a)(size_t), void (*f)(void *))
{
    alloc_fn = a ? a : malloc;
    free_fn = f ? f : free;
    leak_dtor_fill();
}

__attribute__((destructor)) static void leak_dtor_release(void)
{
    static const char said[] = "leak_dtor_lib: blocks freed in its destructor\n";
    for (int i = 0; i < KEPT; i++)
        if (kept[i])
            free_fn(kept[i]);
    free(big);
    if (write(2, said, sizeof said - 1) < 0)
        _exit(3);
}
