/* SPDX-License-Identifier: MIT */
/*
 * spawn - runs one benchmark process for bench/run.py and reports its peak RSS and wall
 * time and page faults: spawn <report file> <LD_PRELOAD value or "-"> <program> [args...]
 *
 * Why a launcher: a child's ru_maxrss counts the memory of the process it was forked from
 * (Python's ~20-60 MB here). This launcher is small, so the RSS of the program it forks is
 * the program's own. It writes "maxrss_kb=... wall_ns=... faults=... status=..." to the
 * report file (faults: minor and major page faults of the program and the children it
 * waited for, a count that does not depend on how busy the machine is); the program's
 * stdout and stderr pass through untouched.
 */
#define _GNU_SOURCE
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* A counter of the child's page-fault traps, its children's included, from its exec on;
 * -1 where the kernel refuses one. */
static int count_traps(pid_t child)
{
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_PAGE_FAULTS;
    a.disabled = 1;
    a.enable_on_exec = 1;
    a.inherit = 1;
    return (int)syscall(SYS_perf_event_open, &a, child, -1, -1, PERF_FLAG_FD_CLOEXEC);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: spawn <report> <preload|-> <program> [args...]\n");
        return 2;
    }
    int go[2]; /* the child execs once its counter is set */
    if (pipe(go) != 0) {
        perror("pipe");
        return 2;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 2;
    }
    if (pid == 0) {
        char c;
        close(go[1]);
        if (read(go[0], &c, 1) < 0)
            _exit(127);
        close(go[0]);
        if (argv[2][0] != '-' || argv[2][1] != 0)
            setenv("LD_PRELOAD", argv[2], 1);
        else
            unsetenv("LD_PRELOAD");
        execvp(argv[3], argv + 3);
        perror("execvp");
        _exit(127);
    }
    int traps = count_traps(pid);
    close(go[0]);
    close(go[1]); /* the child's read returns */
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0) {
        perror("wait4");
        return 2;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    FILE *f = fopen(argv[1], "w");
    if (!f) {
        perror(argv[1]);
        return 2;
    }
    long long ns = (long long)(t1.tv_sec - t0.tv_sec) * 1000000000ll + (t1.tv_nsec - t0.tv_nsec);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    fprintf(f, "maxrss_kb=%ld\nwall_ns=%lld\nfaults=%ld\nstatus=%d\n", ru.ru_maxrss, ns,
            ru.ru_minflt + ru.ru_majflt, code);
    long long n;
    if (traps >= 0 && read(traps, &n, sizeof n) == (ssize_t)sizeof n)
        fprintf(f, "traps=%lld\n", n);
    fclose(f);
    return code;
}
