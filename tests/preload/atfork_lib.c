/* SPDX-License-Identifier: MIT */
/*
 * atfork_lib.c - a library that registers fork handlers from its constructor and allocates
 * inside them (issue 15). Built three times, by ATFORK_SHAPE:
 *   1  mallocs and frees in the prepare handler            (libatfork_prepare.so, DT_NEEDED)
 *   2  mallocs in the child and in the parent handler      (libatfork_child.so, DT_NEEDED)
 *   3  all three                                           (atfork_module.so, dlopened)
 *
 * Linked as a DT_NEEDED dependency of atfork_program, its constructor runs before the
 * preloaded allocator's constructor, before anything in the process has called malloc: its
 * handlers are registered before the allocator's own. Prepare handlers run in reverse order
 * of registration, child and parent handlers in order, so an allocator whose handlers are
 * simply registered when it initialises takes its locks before this prepare handler runs
 * and releases them after this child handler ran: both allocations then wait for ever.
 */
#include "atfork_lib.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#ifndef ATFORK_SHAPE
#error "define ATFORK_SHAPE (1, 2 or 3)"
#endif

#define EXPORT __attribute__((visibility("default")))

static unsigned long prepared, parented;
static int in_child;        /* set by the child handler: never set in the parent */
static void *child_block;   /* allocated by the child handler, for the child to use */
static int registered = -1; /* pthread_atfork's answer; -2: it changed errno */

/* Allocates a few sizes (small, medium, one handed to the system allocator), writes them
 * and frees them; returns 0 if all went well. */
static int use_malloc(void)
{
    static const size_t sizes[] = {8, 24, 200, 3000, 70000, 300000};
    void *p[sizeof sizes / sizeof sizes[0]];
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        p[i] = malloc(sizes[i]);
        if (!p[i])
            return -1;
        memset(p[i], (int)i + 1, sizes[i]);
    }
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        free(p[i]);
    return 0;
}

static void prepare(void)
{
    if (ATFORK_SHAPE != 2 && use_malloc() != 0)
        abort();
    __atomic_fetch_add(&prepared, 1, __ATOMIC_RELAXED);
}

static void parent(void)
{
    if (ATFORK_SHAPE != 1 && use_malloc() != 0)
        abort();
    __atomic_fetch_add(&parented, 1, __ATOMIC_RELAXED);
}

static void child(void)
{
    if (ATFORK_SHAPE != 1) {
        if (use_malloc() != 0)
            abort();
        child_block = malloc(100);
        if (!child_block)
            abort();
        memset(child_block, 0x5a, 100);
    }
    in_child = 1;
}

__attribute__((constructor)) static void register_handlers(void)
{
    /* pthread_atfork leaves errno alone, also where it initialises the allocator. */
    errno = 4321;
    registered = pthread_atfork(prepare, parent, child);
    if (registered == 0 && errno != 4321)
        registered = -2;
}

/* For the program (atfork_lib.h). */
EXPORT int atfork_lib_registered(void)
{
    return registered;
}
EXPORT unsigned long atfork_lib_prepared(void)
{
    return __atomic_load_n(&prepared, __ATOMIC_RELAXED);
}
EXPORT unsigned long atfork_lib_parented(void)
{
    return __atomic_load_n(&parented, __ATOMIC_RELAXED);
}
EXPORT int atfork_lib_in_child(void)
{
    return in_child;
}
EXPORT void *atfork_lib_child_block(void)
{
    return child_block;
}
EXPORT int atfork_lib_shape(void)
{
    return ATFORK_SHAPE;
}
