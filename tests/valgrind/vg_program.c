/* SPDX-License-Identifier: MIT */
/*
 * vg_program.c - run under valgrind's memcheck against a USLAB_VALGRIND build: "clean" uses
 * the malloc family and an object cache correctly (memcheck must find no error and no leak
 * of uslab's blocks); the other cases make one mistake each that memcheck must report in
 * uslab's objects, which it cannot see without the client requests.
 */
#include "uslab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct conn {
    int fd;
    char name[28];
};

static int conn_ctor(void *obj, void *arg)
{
    (void)arg;
    struct conn *c = obj;
    c->fd = -1;
    strcpy(c->name, "idle");
    return 0;
}

static void conn_dtor(void *obj, void *arg)
{
    (void)arg;
    struct conn *c = obj;
    if (c->fd != -1) /* reads the constructed state: must be defined */
        abort();
}

static void (*volatile poke)(char *, size_t) = NULL;
static void poke_impl(char *p, size_t i)
{
    p[i] = 1;
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "clean";
    poke = poke_impl;
    uslab_cache_t *cache =
        uslab_cache_create("conn", sizeof(struct conn), 0, conn_ctor, conn_dtor, NULL, NULL, 0);
    if (strcmp(what, "clean") == 0) {
        void *blocks[300];
        for (int i = 0; i < 300; i++) {
            blocks[i] = uslab_malloc((size_t)(i % 700) + 1);
            memset(blocks[i], i, (size_t)(i % 700) + 1);
        }
        for (int i = 0; i < 300; i += 2)
            blocks[i] = uslab_realloc(blocks[i], (size_t)(i % 700) + 100);
        char *z = uslab_calloc(10, 10);
        for (int i = 0; i < 100; i++)
            if (z[i]) /* calloc'ed: defined */
                return 3;
        uslab_free(z);
        for (int i = 0; i < 300; i++)
            uslab_free(blocks[i]);
        struct conn *c[50];
        for (int r = 0; r < 3; r++) {
            for (int i = 0; i < 50; i++) {
                c[i] = uslab_cache_alloc(cache);
                if (c[i]->fd != -1) /* constructed state is defined, also when reused */
                    return 4;
            }
            for (int i = 0; i < 50; i++)
                uslab_cache_free(cache, c[i]);
        }
        void *bulk[20];
        if (uslab_cache_alloc_bulk(cache, 20, bulk) != 20)
            return 5;
        uslab_cache_free_bulk(cache, 20, bulk);
        uslab_cache_destroy(cache);
        printf("clean\n");
        return 0;
    }
    if (strcmp(what, "use_after_free") == 0) {
        char *p = uslab_malloc(40);
        uslab_free(p);
        poke(p, 3); /* memcheck: Invalid write */
    } else if (strcmp(what, "cache_use_after_free") == 0) {
        struct conn *c = uslab_cache_alloc(cache);
        uslab_cache_free(cache, c);
        poke((char *)c, 0);
    } else if (strcmp(what, "uninitialised") == 0) {
        char *p = uslab_malloc(40);
        if (p[5] == 42) /* memcheck: conditional jump on an uninitialised value */
            printf("42\n");
        uslab_free(p);
    } else if (strcmp(what, "leak") == 0) {
        char *p = uslab_malloc(40); /* memcheck: definitely lost (48 bytes: its class) */
        memset(p, 0, 40);
        p = NULL;
    }
    return 0;
}
