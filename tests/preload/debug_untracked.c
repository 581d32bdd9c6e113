/* SPDX-License-Identifier: MIT */
/*
 * debug_untracked.c - under USLAB_DEBUG, a block that malloc took from glibc when the slabs
 * could not grow, and that the debug table of glibc's blocks could not record (no memory
 * for the table either), is freed without a report (design §9; session 16's audit). Before,
 * its free was reported as "Invalid pointer: ... not allocated by malloc" and aborted a
 * correct program near its RLIMIT_DATA. The shortage is made with the fault injection of
 * test builds (uslab_faults_set, found with dlsym: 77 where the library has none): every
 * mmap and mprotect of uslab's fails, so neither the slabs nor the table grow, while glibc's
 * own calls go through. Contents are checked before each free.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N     5000
#define BLOCK 40

int main(void)
{
    int (*faults_set)(const char *) =
        (int (*)(const char *))dlsym(RTLD_DEFAULT, "uslab_faults_set");
    if (!faults_set) {
        printf("no fault injection in this build: skipped\n");
        return 77;
    }
    unsigned char **v = malloc(N * sizeof *v);
    if (!v)
        return 1;
    if (faults_set("1,1,mp") != 0) {
        fprintf(stderr, "debug_untracked: uslab_faults_set refused the spec\n");
        return 1;
    }
    for (int i = 0; i < N; i++) {
        v[i] = malloc(BLOCK);
        if (!v[i]) {
            faults_set(NULL);
            fprintf(stderr, "debug_untracked: malloc %d failed\n", i);
            return 1;
        }
        memset(v[i], i & 0xff, BLOCK);
    }
    for (int i = N; i-- > 0;) {
        if (v[i][0] != (i & 0xff) || v[i][BLOCK - 1] != (i & 0xff)) {
            faults_set(NULL);
            fprintf(stderr, "debug_untracked: block %d changed\n", i);
            return 1;
        }
        free(v[i]);
    }
    faults_set(NULL);
    free(v);
    printf("debug untracked ok\n");
    return 0;
}
