/* SPDX-License-Identifier: MIT */
/*
 * leak_dtor_main [exit|return] - links libleak_dtor_lib.so (DT_NEEDED), which keeps blocks
 * until its destructor frees them; leaks one block for real (leak_for_real) and frees
 * another from an atexit handler; leaves by exit(0) or by returning from main. Built twice:
 * with the malloc of the preload library (the lib's blocks are malloc's, 48 and 2,000,000
 * bytes), and with -DUSE_CACHE linked to libuslab.a (the lib's blocks are objects of the
 * program's cache "dtor-cache", allocated and freed through the program's functions).
 * No stdio: its buffer would be one more block at exit. Checked by leak_dtor_check.py.
 */
#include <stdlib.h>
#include <string.h>
#ifdef USE_CACHE
#include <uslab.h>
#endif

void leak_dtor_keep(void *(*a)(size_t), void (*f)(void *));

static void *at_exit_block;
static void free_at_exit(void)
{
    free(at_exit_block);
}

#ifdef USE_CACHE
static uslab_cache_t *cache;
static void *cache_alloc(size_t size)
{
    (void)size;
    return uslab_cache_alloc(cache);
}
static void cache_free(void *p)
{
    uslab_cache_free(cache, p);
}
#endif

static void *volatile sink;

/* The one real leak: 300 bytes (an object of the cache with USE_CACHE). */
__attribute__((noinline)) static void leak_for_real(void)
{
#ifdef USE_CACHE
    sink = uslab_cache_alloc(cache);
#else
    sink = malloc(300);
#endif
    if (sink)
        memset(sink, 'r', 48);
}

int main(int argc, char **argv)
{
#ifdef USE_CACHE
    cache = uslab_cache_create("dtor-cache", 48, 0, NULL, NULL, NULL, NULL, 0);
    if (!cache)
        return 2;
    leak_dtor_keep(cache_alloc, cache_free);
#else
    leak_dtor_keep(NULL, NULL);
#endif
    at_exit_block = malloc(64);
    atexit(free_at_exit);
    leak_for_real();
    if (argc > 1 && strcmp(argv[1], "exit") == 0)
        exit(0);
    return 0;
}
