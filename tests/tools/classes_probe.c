/* SPDX-License-Identifier: MIT */
/*
 * classes_probe - a plain program (not linked to uslab) with known request sizes, for the
 * tests of `uslab profile` and USLAB_CLASSES (profile_test.sh).
 *   classes_probe work        30,000 requests of 40, 600 and 2100 bytes
 *   classes_probe fork        the same, then a fork child that asks for 4700 bytes 1000
 *                             times, then a program it starts (itself: size 9000)
 *   classes_probe size N      prints malloc_usable_size(malloc(N))
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p) {
        fprintf(stderr, "classes_probe: malloc(%zu) failed\n", n);
        exit(1);
    }
    memset(p, 1, n);
    return p;
}

static void work(void)
{
    static void *keep[3000];
    static const size_t sizes[] = {40, 600, 2100};
    for (int r = 0; r < 10; r++) {
        for (int i = 0; i < 3000; i++)
            keep[i] = xmalloc(sizes[i % 3]);
        for (int i = 0; i < 3000; i++)
            free(keep[i]);
    }
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "size") == 0) {
        void *p = xmalloc((size_t)atol(argv[2]));
        printf("%zu\n", malloc_usable_size(p));
        free(p);
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "work") == 0) {
        work();
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "fork") == 0) {
        work();
        pid_t pid = fork();
        if (pid == 0) {
            for (int i = 0; i < 1000; i++)
                free(xmalloc(4700));
            _exit(0);
        }
        int status;
        if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0)
            return 1;
        pid = fork();
        if (pid == 0) {
            execl(argv[0], argv[0], "size", "9000", (char *)NULL);
            _exit(127);
        }
        if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0)
            return 1;
        return 0;
    }
    fprintf(stderr, "usage: classes_probe work | fork | size N\n");
    return 2;
}
