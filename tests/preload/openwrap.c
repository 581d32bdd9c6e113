/* SPDX-License-Identifier: MIT */
/*
 * openwrap.c - a preloaded library that wraps open, openat and fopen, as fakeroot or a
 * tracer would, and prints "openwrap: PATH" on stderr for each call before passing it on
 * (cancel_check.c: uslab's own files must not reach it).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void say(const char *path)
{
    char line[512];
    int n = snprintf(line, sizeof line, "openwrap: %s\n", path);
    if (n > 0 && write(2, line, (size_t)n) < 0)
        return;
}

#define WRAP_OPEN(name)                                                                            \
    int name(const char *path, int flags, ...)                                                     \
    {                                                                                              \
        va_list ap;                                                                                \
        va_start(ap, flags);                                                                       \
        int mode = va_arg(ap, int);                                                                \
        va_end(ap);                                                                                \
        say(path);                                                                                 \
        int (*next)(const char *, int, ...) =                                                      \
            (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, #name);                              \
        return next(path, flags, mode);                                                            \
    }

WRAP_OPEN(open)
WRAP_OPEN(open64)

#define WRAP_OPENAT(name)                                                                          \
    int name(int dir, const char *path, int flags, ...)                                            \
    {                                                                                              \
        va_list ap;                                                                                \
        va_start(ap, flags);                                                                       \
        int mode = va_arg(ap, int);                                                                \
        va_end(ap);                                                                                \
        say(path);                                                                                 \
        int (*next)(int, const char *, int, ...) =                                                 \
            (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, #name);                         \
        return next(dir, path, flags, mode);                                                       \
    }

WRAP_OPENAT(openat)
WRAP_OPENAT(openat64)

FILE *fopen(const char *path, const char *mode)
{
    say(path);
    FILE *(*next)(const char *, const char *) =
        (FILE * (*)(const char *, const char *)) dlsym(RTLD_NEXT, "fopen");
    return next(path, mode);
}
