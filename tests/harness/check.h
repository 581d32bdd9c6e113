/* SPDX-License-Identifier: MIT */
/* check.h - a tiny test harness: CHECK aborts the test with file:line and a message. */
#ifndef USLAB_CHECK_H
#define USLAB_CHECK_H

#include <stdio.h>
#include <stdlib.h>

static unsigned long check_count;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        __atomic_fetch_add(&check_count, 1, __ATOMIC_RELAXED); /* threads */                       \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define TEST_DONE()                                                                                \
    do {                                                                                           \
        printf("%s: %lu checks passed\n", __FILE__, check_count);                                  \
        return 0;                                                                                  \
    } while (0)

#endif
