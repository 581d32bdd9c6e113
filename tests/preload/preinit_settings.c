/* SPDX-License-Identifier: MIT */
/*
 * preinit_settings.c - USLAB_* settings hold when the process's first allocation comes
 * from a .preinit_array function (design §11; session 16's audit). Such a function runs
 * before every library's initialiser, libc's included, so `environ` is still NULL there;
 * uslab, initialised by that allocation, read no setting at all before, silently and for
 * good. The test runs with USLAB_STATS=1 and passes on the statistics table uslab prints at
 * exit (ctest's PASS_REGULAR_EXPRESSION); before, no table was printed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *(*volatile allocate)(size_t) = malloc;
static void *early;

static void preinit(int argc, char **argv, char **envp)
{
    (void)argc, (void)argv, (void)envp;
    early = allocate(100); /* uslab's initialisation */
}
__attribute__((section(".preinit_array"), used)) static void (*preinit_entry)(int, char **,
                                                                              char **) = preinit;

int main(void)
{
    if (!early) {
        fprintf(stderr, "preinit_settings: the .preinit_array function did not run\n");
        return 1;
    }
    memset(early, 1, 100);
    free(early);
    printf("preinit settings: main done\n");
    return 0;
}
