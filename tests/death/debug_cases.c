/* SPDX-License-Identifier: MIT */
/*
 * debug_cases.c - one misuse per case, run under LD_PRELOAD of libuslab-preload.so with
 * USLAB_DEBUG set (see CMakeLists.txt): each must produce the exact BUG line of its check
 * and abort. It uses plain malloc/free (and the cache API, resolved to the preloaded
 * library) like any real program.
 */
#include "uslab.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Kept out of the optimiser's reach: the misuse must really happen. */
static void *volatile keep;

/* Through a volatile function pointer: the compiler cannot see (or warn about) the bug. */
static void touch_impl(char *p, size_t i, char v)
{
    p[i] = v;
}
static void (*volatile touch)(char *, size_t, char) = touch_impl;

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "";
    if (strcmp(c, "redzone") == 0) { /* write one byte past the block's usable size */
        char *p = malloc(24);
        touch(p, 32, 'x'); /* malloc-32: bytes 0..31 are usable */
        free(p);
    } else if (strcmp(c, "use_after_free") == 0) { /* write into a freed block */
        char *p = malloc(64);
        free(p);
        touch(p, 10, 1);
        keep = malloc(64); /* another object (p is quarantined): p's poison is checked at exit */
    } else if (strcmp(c, "double_free") == 0) {
        char *p = malloc(48);
        free(p);
        free(p);
    } else if (strcmp(c, "interior") == 0) { /* a pointer into the middle of a block */
        char *p = malloc(64);
        free(p + 16);
    } else if (strcmp(c, "foreign") == 0) { /* a pointer no allocator handed out */
        char buf[64];
        free(buf + 3);
    } else if (strcmp(c, "wrong_cache") == 0) {
        uslab_cache_t *a = uslab_cache_create("cache-a", 40, 0, NULL, NULL, NULL, NULL, 0);
        uslab_cache_t *b = uslab_cache_create("cache-b", 40, 0, NULL, NULL, NULL, NULL, 0);
        void *o = uslab_cache_alloc(a);
        uslab_cache_free(b, o);
    } else if (strcmp(c, "continue") == 0) { /* USLAB_DEBUG_CONTINUE=1: report, go on */
        char *p = malloc(24);
        touch(p, 32, 'x');
        free(p); /* Redzone overwritten, reported, repaired */
        free(p); /* Object already free, reported, skipped */
        char *q = malloc(24);
        q[0] = 1;
        free(q);
        printf("continued\n");
        return 0;
    } else if (strcmp(c, "trace") == 0) { /* T: one line per operation */
        void *p = malloc(60);
        free(p);
        return 0;
    } else if (strcmp(c, "glob_miss") == 0) { /* the glob selects malloc-32 only */
        char *p = malloc(60);
        touch(p, 64, 'x'); /* malloc-64 is not debugged: nothing reported */
        free(p);
        printf("not checked\n");
        return 0;
    } else if (strcmp(c, "slack") == 0) { /* one byte past the size asked for, inside the
                                           * class (Z: the class beyond it is red zone) */
        char *p = malloc(24);
        touch(p, 24, 'x');
        free(p);
    } else if (strcmp(c, "slack_realloc") == 0) { /* realloc in place moves the red zone */
        char *p = malloc(40);
        p = realloc(p, 44); /* malloc-48 keeps it */
        for (size_t i = 0; i < 44; i++)
            touch(p, i, 'y'); /* all the user's */
        p = realloc(p, 36);
        touch(p, 36, 'x'); /* past the new size */
        free(p);
    } else if (strcmp(c, "slack_grown") == 0) { /* realloc's growth room is red zone too */
        char *p = malloc(40);
        p = realloc(p, 100); /* a class of 150 bytes or more: the room for the next growth */
        touch(p, 100, 'x');
        free(p);
    } else if (strcmp(c, "usable_asked") == 0) { /* Z: malloc_usable_size is the size asked */
        char *p = malloc(24);
        char *q = calloc(3, 7);
        for (size_t i = 0; i < 21; i++)
            if (q[i] != 0)
                return 1;
        printf("usable %zu %zu\n", malloc_usable_size(p), malloc_usable_size(q));
        p = realloc(p, 30);
        printf("usable %zu\n", malloc_usable_size(p));
        free(p);
        free(q);
        return 0;
    } else if (strcmp(c, "uaf_late") == 0) { /* a write long after the free: the object is
                                              * still quarantined, and checked as it leaves */
        char *p = malloc(40);
        free(p);
        static void *v[300];
        for (int i = 0; i < 300; i++)
            v[i] = malloc(40);
        touch(p, 0, 'L');
        for (int i = 0; i < 300; i++)
            free(v[i]);                         /* 256 of them push p out of the quarantine */
    } else if (strcmp(c, "uaf_at_exit") == 0) { /* quarantined to the end: checked at exit */
        char *p = malloc(40);
        free(p);
        touch(p, 8, 'E');
        return 0;
    } else if (strcmp(c, "overflow_never_freed") == 0) { /* a leaked block: checked at exit */
        char *p = malloc(24);
        touch(p, 24, 'x');
        keep = p;
        return 0;
    } else if (strcmp(c, "tail_overwritten") == 0) { /* an overflow through the red zone
                                                      * into the tracking record (U) */
        char *p = malloc(32);
        for (size_t i = 32; i < 232; i++)
            touch(p, i, 'A'); /* its depth read 0x41414141: the report walked off it */
        free(p);
    } else if (strcmp(c, "leak_overwritten") == 0) { /* the same block left live at exit */
        char *p = malloc(32);
        for (size_t i = 32; i < 232; i++)
            touch(p, i, 'A');
        keep = p;
        return 0;
    } else if (strcmp(c, "poison_new") == 0) { /* P: every byte of a new block is 0x5a */
        static const size_t sizes[] = {16, 24, 32, 48, 64, 100, 128, 256, 1000};
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            unsigned char *p = malloc(sizes[k]);
            for (size_t i = 0; i < sizes[k]; i++)
                if (p[i] != 0x5a) {
                    printf("malloc(%zu): byte %zu is 0x%02x, not poisoned\n", sizes[k], i, p[i]);
                    return 1;
                }
            free(p);
        }
        printf("poisoned whole\n");
        return 0;
    } else if (strcmp(c, "ok") == 0) { /* correct use: no report */
        for (int i = 0; i < 1000; i++) {
            char *p = malloc((size_t)i + 1);
            memset(p, 1, (size_t)i + 1);
            size_t grown = (size_t)i + 1 + (size_t)(i % 7); /* in place or moved */
            p = realloc(p, grown);
            memset(p, 2, grown);
            free(p);
        }
        return 0;
    }
    fprintf(stderr, "case %s did not abort\n", c);
    return 1;
}
