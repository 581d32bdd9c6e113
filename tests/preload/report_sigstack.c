/* SPDX-License-Identifier: MIT */
/*
 * report_sigstack.c - a double free or an interior free made in a signal handler on an
 * alternate stack is reported (its `uslab:` line reaches stderr) with little more stack than
 * the handler needs to write a line and abort at all (design §12, session 17).
 *
 * For each case the smallest alternate stack on which the line is written is found by
 * bisection, a forked child per try, with a PROT_NONE page right below the stack. The floor
 * is a handler that writes a fixed line with write(2) and calls abort(): the kernel's signal
 * frame (which depends on the CPU's vector state) and abort's own needs. uslab's reports may
 * take at most MARGIN bytes more. With a 1 KiB line buffer on the stack (before session 17)
 * they took 1,664 and 1,728 more on the machine this was written on; now 576 and 704
 * (glibc's own double-free message: 384). The program is linked with -z now, so that no
 * lazy binding runs in the handler.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MARGIN 1024

/* DOUBLE_FREE: free only stores the key; the double free is reported at the malloc that
 * would hand the block out again. */
enum { FLOOR, DOUBLE_FREE, INTERIOR_FREE };
static const char *const names[] = {"write and abort", "double free (at the malloc)",
                                    "interior free"};
static const char *const expect[] = {"uslab: floor", "lost its free key", "invalid pointer"};

static int scenario;
static void *volatile victim; /* volatile: the compiler may not see the double free */
static char *volatile inner;

static void handler(int sig)
{
    (void)sig;
    if (scenario == FLOOR) {
        static const char line[] = "uslab: floor\n";
        if (write(2, line, sizeof line - 1) < 0)
            _exit(3);
        abort();
    }
    if (scenario == DOUBLE_FREE) {
        free(victim);
        free(victim);
        inner = malloc(32);
        inner = malloc(32);
    } else {
        char *block = malloc(64);
        inner = block + 16;
        free(inner);
    }
    _exit(2); /* not reported */
}

/* 1 if the child's line was written with an alternate stack of `size` bytes. */
static int reported(size_t size)
{
    char path[] = "/tmp/uslab-report-sigstack-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) {
        perror("mkstemp");
        exit(1);
    }
    unlink(path);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(1);
    }
    if (pid == 0) {
        dup2(fd, 2);
        size_t page = 4096, len = (size + page - 1) / page * page + page;
        char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED || mprotect(m, page, PROT_NONE) != 0)
            _exit(4);
        stack_t ss = {.ss_sp = m + page, .ss_size = size, .ss_flags = 0};
        if (sigaltstack(&ss, NULL) != 0)
            _exit(7); /* below the kernel's minimum: too small */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = handler;
        sa.sa_flags = SA_ONSTACK;
        sigaction(SIGUSR1, &sa, NULL);
        void *warm = malloc(64); /* the classes' magazines exist before the handler */
        free(warm);
        victim = malloc(32);
        raise(SIGUSR1);
        _exit(6);
    }
    int status;
    waitpid(pid, &status, 0);
    char text[512];
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    close(fd);
    text[n > 0 ? n : 0] = '\0';
    if (WIFEXITED(status) && WEXITSTATUS(status) == 7)
        return 0;
    if (WIFEXITED(status) && WEXITSTATUS(status) >= 3) {
        fprintf(stderr, "report_sigstack: the child could not set up (status %d)\n",
                WEXITSTATUS(status));
        exit(1);
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 2) {
        fprintf(stderr, "report_sigstack: %s was not reported: %s\n", names[scenario], text);
        exit(1);
    }
    return strstr(text, expect[scenario]) != NULL;
}

static size_t needed(int which)
{
    scenario = which;
    size_t lo = 1024, hi = 65536;
    if (!reported(hi)) {
        fprintf(stderr, "report_sigstack: %s: no line even with %zu bytes\n", names[which], hi);
        exit(1);
    }
    while (hi - lo > 16) {
        size_t mid = (lo + hi) / 2 / 16 * 16;
        if (reported(mid))
            hi = mid;
        else
            lo = mid;
    }
    return hi;
}

int main(void)
{
    size_t floor = needed(FLOOR);
    printf("%s: %zu bytes\n", names[FLOOR], floor);
    int bad = 0;
    for (int which = DOUBLE_FREE; which <= INTERIOR_FREE; which++) {
        size_t n = needed(which);
        printf("%s: %zu bytes (%+ld over the floor)\n", names[which], n, (long)n - (long)floor);
        if (n > floor + MARGIN) {
            fprintf(stderr, "report_sigstack: the %s report needs %zu bytes, over %zu + %d\n",
                    names[which], n, floor, MARGIN);
            bad = 1;
        }
    }
    if (bad)
        return 1;
    printf("report_sigstack ok\n");
    return 0;
}
