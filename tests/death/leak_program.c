/* SPDX-License-Identifier: MIT */
/*
 * leak_program.c - leaks on purpose, for the leak report test: leaky_function allocates 10
 * blocks of 100 bytes (class malloc-112) and drops them; the report at exit (USLAB_LEAKS=1)
 * must group them under a stack that names leaky_function (from the symbol table, with its
 * file and line when the build has line information: symbols.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void leaky_function(int n);
void *volatile sink;

__attribute__((noinline)) void leaky_function(int n)
{
    for (int i = 0; i < n; i++) {
        char *p = malloc(100);
        memset(p, i, 100);
        sink = p; /* the last one stays reachable, the rest are lost: all are live */
    }
}

int main(void)
{
    leaky_function(10);
    for (int i = 0; i < 100; i++) /* freed properly: must not appear */
        free(malloc(100));
    printf("done\n");
    return 0;
}
