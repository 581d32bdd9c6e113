/* SPDX-License-Identifier: MIT */
/*
 * leak_static_program.c - leaks on purpose from a program linked with the static library,
 * where uslab's code is in the program's own file: the leak report's stack (USLAB_LEAKS=1)
 * must start at the program's function that called uslab (docs/design.md §9), whichever
 * entry it called, and at the constructor that allocated inside uslab_cache_alloc, followed by
 * the program's caller of that (uslab's frames between are left out too):
 *
 *   cache   leak_from_cache leaks an object of the cache "leaky"
 *   malloc  leak_from_malloc leaks a uslab_malloc block of 1,000 bytes
 *   ctor    the cache "nested"'s constructor, construct_nested, leaks an object of "inner"
 */
#include "uslab.h"

#include <stdio.h>
#include <string.h>

void *volatile sink;
static uslab_cache_t *inner;

__attribute__((noinline)) static int construct_nested(void *obj, void *arg)
{
    (void)arg;
    sink = uslab_cache_alloc(inner);
    memcpy(obj, (void *const *)&sink, sizeof sink);
    return 0;
}

__attribute__((noinline)) static void leak_from_cache(void)
{
    uslab_cache_t *c = uslab_cache_create("leaky", 4000, 0, NULL, NULL, NULL, NULL, 0);
    sink = uslab_cache_alloc(c);
}

__attribute__((noinline)) static void leak_from_malloc(void)
{
    sink = uslab_malloc(1000);
}

__attribute__((noinline)) static void allocate_nested(void)
{
    inner = uslab_cache_create("inner", 48, 0, NULL, NULL, NULL, NULL, 0);
    uslab_cache_t *c = uslab_cache_create("nested", 64, 0, construct_nested, NULL, NULL, NULL, 0);
    uslab_cache_free(c, uslab_cache_alloc(c)); /* the inner object stays: a leak */
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "";
    if (!strcmp(what, "cache"))
        leak_from_cache();
    else if (!strcmp(what, "malloc"))
        leak_from_malloc();
    else if (!strcmp(what, "ctor"))
        allocate_nested();
    else
        return 2;
    printf("done\n");
    return 0;
}
