/* SPDX-License-Identifier: MIT */
/*
 * death_driver.c - runs `PROGRAM CASE` in a child and checks how it ended.
 *   death_driver PROGRAM CASE TEXT   the child must die by SIGABRT with TEXT on stderr
 *                                    (TEXT may be "A ... B": A, then B later on the line)
 *   death_driver PROGRAM CASE -      the child must exit 0
 * Prints the child's stderr, so a failing test shows what was (or was not) reported.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: death_driver PROGRAM CASE TEXT|-\n");
        return 2;
    }
    int fd[2];
    if (pipe(fd) != 0) {
        perror("pipe");
        return 2;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 2;
    }
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        close(fd[1]);
        /* No core files for the expected aborts. */
        execl(argv[1], argv[1], argv[2], (char *)NULL);
        perror("execl");
        _exit(127);
    }
    close(fd[1]);
    size_t cap = 1 << 16, len = 0;
    char *out = malloc(cap + 1);
    if (!out)
        return 2;
    for (;;) {
        ssize_t n = read(fd[0], out + len, cap - len);
        if (n <= 0)
            break;
        len += (size_t)n;
        if (len == cap)
            break;
    }
    out[len] = '\0';
    close(fd[0]);
    int status;
    if (waitpid(pid, &status, 0) != pid) {
        perror("waitpid");
        return 2;
    }
    fprintf(stderr, "--- stderr of %s %s ---\n%s--- end ---\n", argv[1], argv[2], out);
    if (strcmp(argv[3], "-") == 0) {
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
            printf("case %s exited 0 as expected\n", argv[2]);
            return 0;
        }
        fprintf(stderr, "FAIL: case %s should exit 0 (status %#x)\n", argv[2], status);
        return 1;
    }
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT) {
        if (WIFSIGNALED(status))
            fprintf(stderr, "FAIL: case %s died by signal %d, expected SIGABRT\n", argv[2],
                    WTERMSIG(status));
        else
            fprintf(stderr, "FAIL: case %s exited with %d, expected SIGABRT\n", argv[2],
                    WEXITSTATUS(status));
        return 1;
    }
    const char *found = strstr(out, argv[3]);
    const char *gap = strstr(argv[3], " ... ");
    if (gap) { /* A ... B: A, then B after it on the same line */
        char first[256];
        snprintf(first, sizeof first, "%.*s", (int)(gap - argv[3]), argv[3]);
        found = strstr(out, first);
        const char *end = found ? strchr(found, '\n') : NULL;
        const char *second = found ? strstr(found + strlen(first), gap + 5) : NULL;
        if (second && end && second > end)
            second = NULL;
        found = second;
    }
    if (!found) {
        fprintf(stderr, "FAIL: case %s aborted, but stderr lacks \"%s\"\n", argv[2], argv[3]);
        return 1;
    }
    /* A one-line report starts "uslab: "; a USLAB_DEBUG report has a "BUG <cache>: " line. */
    if (!strstr(out, "uslab: ") && strncmp(argv[3], "BUG ", 4) != 0) {
        fprintf(stderr, "FAIL: case %s: the report lacks the \"uslab: \" prefix\n", argv[2]);
        return 1;
    }
    printf("case %s aborted with \"%s\" as expected\n", argv[2], argv[3]);
    free(out);
    return 0;
}
