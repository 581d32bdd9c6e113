/* SPDX-License-Identifier: MIT */
/* preload_check.c - a plain program run with LD_PRELOAD=$<TARGET_FILE:uslab::preload>:
 * malloc must be uslab's (its uslab_malloc symbol resolves in the process). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    void *p = malloc(100);
    if (!p || !dlsym(RTLD_DEFAULT, "uslab_malloc")) {
        printf("preload: malloc is not uslab's\n");
        return 1;
    }
    free(p);
    printf("preload ok\n");
    return 0;
}
