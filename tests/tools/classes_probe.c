/* SPDX-License-Identifier: MIT */
/*
 * classes_probe - a plain program (not linked to uslab) with known request sizes, for the
 * tests of `uslab profile` and USLAB_CLASSES (profile_test.sh).
 *   classes_probe work        30,000 requests of 40, 600 and 2100 bytes
 *   classes_probe fork        the same, then a fork child that asks for 4700 bytes 1000
 *                             times, then a program it starts (itself: size 9000)
 *   classes_probe size N      prints malloc_usable_size(malloc(N))
 *   classes_probe end HOW SIZE COUNT [PROGRAM ARGS...]
 *                             COUNT requests of SIZE bytes, then leaves by HOW: exit (a
 *                             return from main), _exit, _Exit, quick_exit, exit_group
 *                             (syscall), execv (of PROGRAM), execfail (an execv that fails,
 *                             COUNT more requests, then exit), daemon (COUNT more requests
 *                             in the daemon, which then exits), kill (SIGKILL itself),
 *                             seccomp (installs a filter that kills for openat and rename,
 *                             COUNT more requests, then exit)
 *   classes_probe realloc     a malloc of 4700 bytes and 999 reallocs it stays in
 */
#define _GNU_SOURCE
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <malloc.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
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

static void requests(size_t size, long count)
{
    for (long i = 0; i < count; i++)
        free(xmalloc(size));
}

/* A seccomp filter that kills the process for openat and the renames (what a profile's
 * write needs), as a sandbox that allows no file access would. */
static int no_files_filter(void)
{
#define KILL_FOR(nr)                                                                               \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1),                                               \
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS)
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        KILL_FOR(SYS_openat),
        KILL_FOR(SYS_rename),
        KILL_FOR(SYS_renameat),
        KILL_FOR(SYS_renameat2),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
#undef KILL_FOR
    struct sock_fprog prog = {(unsigned short)(sizeof f / sizeof f[0]), f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return -1;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

/* classes_probe end HOW SIZE COUNT [PROGRAM ARGS...] */
static int end(int argc, char **argv)
{
    const char *how = argv[2];
    size_t size = (size_t)atol(argv[3]);
    long count = atol(argv[4]);
    requests(size, count);
    if (strcmp(how, "exit") == 0)
        return 0;
    if (strcmp(how, "_exit") == 0)
        _exit(0);
    if (strcmp(how, "_Exit") == 0)
        _Exit(0);
    if (strcmp(how, "quick_exit") == 0)
        quick_exit(0);
    if (strcmp(how, "exit_group") == 0) {
        syscall(SYS_exit_group, 0);
        return 3;
    }
    if (strcmp(how, "execv") == 0 && argc > 5) {
        execv(argv[5], argv + 5);
        perror("classes_probe: execv");
        return 3;
    }
    if (strcmp(how, "execfail") == 0) {
        char *none[] = {"/nonexistent/classes_probe", NULL};
        if (execv(none[0], none) == 0)
            return 3;
        requests(size, count); /* after a failed exec: counted once, with the rest */
        return 0;
    }
    if (strcmp(how, "daemon") == 0) {
        if (daemon(1, 1) != 0) {
            perror("classes_probe: daemon");
            return 3;
        }
        requests(size, count); /* in the daemon, after its parent has left */
        return 0;
    }
    if (strcmp(how, "kill") == 0)
        raise(SIGKILL);
    if (strcmp(how, "seccomp") == 0) {
        if (no_files_filter() != 0) {
            perror("classes_probe: seccomp");
            return 3;
        }
        requests(size, count); /* under the filter: not written, but no death at exit */
        return 0;
    }
    fprintf(stderr, "classes_probe: end: unknown way '%s'\n", how);
    return 2;
}

int main(int argc, char **argv)
{
    if (argc >= 5 && strcmp(argv[1], "end") == 0)
        return end(argc, argv);
    if (argc == 3 && strcmp(argv[1], "size") == 0) {
        void *p = xmalloc((size_t)atol(argv[2]));
        printf("%zu\n", malloc_usable_size(p));
        free(p);
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "realloc") == 0) {
        /* 1000 requests for 4700 bytes: one malloc, then reallocs the block stays in */
        char *p = xmalloc(4700);
        for (int i = 0; i < 999; i++) {
            char *q = realloc(p, 4700);
            if (!q)
                return 1;
            p = q;
        }
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
    fprintf(stderr,
            "usage: classes_probe work | fork | size N | end HOW SIZE COUNT [PROGRAM...]\n");
    return 2;
}
