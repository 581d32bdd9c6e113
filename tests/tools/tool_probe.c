/* SPDX-License-Identifier: MIT */
/*
 * tool_probe - what a program run by `uslab run` sees. Not linked to uslab.
 * Prints every USLAB_* variable and LD_PRELOAD as NAME=VALUE lines (sorted by name), then
 * "malloc=uslab" when uslab's allocator is loaded in the process (uslab_malloc resolves)
 * or "malloc=glibc". Exits with the status given as argv[1] (default 0), or raises the
 * signal named by "signal" (SIGTERM).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

static int by_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int main(int argc, char **argv)
{
    size_t n = 0;
    for (char **e = environ; *e; e++)
        n++;
    const char **vars = malloc((n + 1) * sizeof *vars);
    if (!vars)
        return 99;
    size_t k = 0;
    for (char **e = environ; *e; e++)
        if (!strncmp(*e, "USLAB_", 6) || !strncmp(*e, "LD_PRELOAD=", 11))
            vars[k++] = *e;
    qsort(vars, k, sizeof *vars, by_name);
    for (size_t i = 0; i < k; i++)
        printf("%s\n", vars[i]);
    free(vars);

    /* Allocate a little so the allocator is really used. */
    char *p = malloc(64);
    if (!p)
        return 98;
    snprintf(p, 64, "%s", dlsym(RTLD_DEFAULT, "uslab_malloc") ? "uslab" : "glibc");
    printf("malloc=%s\n", p);
    free(p);
    fflush(stdout);

    if (argc > 1 && !strcmp(argv[1], "signal"))
        raise(SIGTERM);
    return argc > 1 ? atoi(argv[1]) : 0;
}
