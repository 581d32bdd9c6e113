/* SPDX-License-Identifier: MIT */
/*
 * symbols_lib.c - a library built twice, its static function named LEAK_SITE differently in
 * each build, for symbols_check.py's `replaced` check (docs/design.md §9): a library whose
 * file is replaced after it was loaded is not read for names (another build id), so the
 * report never names a function of the other build.
 */
#include <stdlib.h>
#include <string.h>

void *volatile library_sink;
void leak_from_library(void);

__attribute__((noinline)) static void LEAK_SITE(void)
{
    library_sink = malloc(3000); /* SITE:leak_lib */
    memset(library_sink, 3, 3000);
}

void leak_from_library(void)
{
    LEAK_SITE();
}
