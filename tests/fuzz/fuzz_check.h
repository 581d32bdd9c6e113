/* SPDX-License-Identifier: MIT */
/*
 * fuzz_check.h - the fuzz targets' check: a violated condition prints where and why, then
 * aborts, which libFuzzer reports as a crash with the input that caused it.
 */
#ifndef USLAB_FUZZ_CHECK_H
#define USLAB_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define FCHECK(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #cond);                             \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#endif
