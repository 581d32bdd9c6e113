/* SPDX-License-Identifier: MIT */
/*
 * bottom_up.c - the range of slabs grows under an address-space layout that places new
 * mappings bottom-up (design §2), run under `valgrind --tool=none`, whose layout is one,
 * with LD_PRELOAD=libuslab-preload.so. Before, the range kept its first 2 MiB at the
 * start of its hole, the program's next mapping landed right after it, and the slabs could
 * never grow: every small block beyond 2 MiB came from glibc's malloc.
 *
 * It makes mappings of its own between allocations (as a program's other libraries do),
 * allocates 20 MiB of 64-byte blocks, and reads the malloc-64 row of uslab_stats_print
 * (found with dlsym: the program is not linked against uslab): all of them must be
 * uslab's. Exit 0, 1 (not all of them), or 3 (not under the preload library).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define BLOCKS 327680 /* 20 MiB of 64-byte blocks */

int main(void)
{
    int (*stats_print)(FILE *, int) =
        (int (*)(FILE *, int))dlsym(RTLD_DEFAULT, "uslab_stats_print");
    if (!stats_print) {
        fprintf(stderr, "bottom_up: run under LD_PRELOAD=libuslab-preload.so\n");
        return 3;
    }
    void **blocks = malloc(BLOCKS * sizeof *blocks);
    if (!blocks)
        return 2;
    for (size_t i = 0; i < BLOCKS; i++) {
        if (i % 32768 == 0 && mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE,
                                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) == MAP_FAILED)
            return 2;
        blocks[i] = malloc(64);
        if (!blocks[i])
            return 2;
        memset(blocks[i], (int)(i & 0xff), 64);
    }
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f || stats_print(f, 0) != 0 || fclose(f) != 0)
        return 2;
    unsigned long objects = 0;
    for (char *line = text; line && *line;
         line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        if (strncmp(line, "malloc-64 ", 10) == 0)
            objects = strtoul(line + 10, NULL, 10);
    printf("bottom_up: %lu of %d blocks of 64 bytes are uslab's\n", objects, BLOCKS);
    return objects >= BLOCKS ? 0 : 1;
}
