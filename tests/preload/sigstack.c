/* SPDX-License-Identifier: MIT */
/*
 * sigstack.c - malloc and free in a signal handler that runs on a small alternate stack
 * need no more stack under uslab than under glibc (docs/design.md §12). The program, run
 * with LD_PRELOAD=libuslab-preload.so, tries stacks of 4 KiB to 12 KiB for both: each try
 * is this program run again (`try SIZE`), with and without LD_PRELOAD. A try warms up in
 * main (fewer than 1024 frees, so the handler's frees are the ones that map the unit-tag
 * table), then raises a signal 2000 times whose handler allocates and frees 64 blocks of
 * 1 to 32,572 bytes on a SIZE-byte stack with a guard page below it. Every size glibc
 * survives, uslab must survive too. Before the preload library was linked with -z now,
 * uslab's first call of madvise there went through the dynamic linker's lazy resolver,
 * which saves the vector registers on the stack: it needed more than 6 KiB where glibc
 * needed less than 4.
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

static volatile sig_atomic_t bad;

static void handler(int sig)
{
    (void)sig;
    void *p[64];
    for (int i = 0; i < 64; i++) {
        p[i] = malloc(1 + (size_t)i * 517);
        if (!p[i])
            bad = 1;
        else
            memset(p[i], 1, 8);
    }
    for (int i = 0; i < 64; i++)
        free(p[i]);
}

static int try_size(size_t size)
{
    char *m = mmap(NULL, size + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || mprotect(m, 4096, PROT_NONE) != 0)
        return 2;
    stack_t ss = {.ss_sp = m + 4096, .ss_size = size, .ss_flags = 0};
    if (sigaltstack(&ss, NULL) != 0)
        return 3; /* below the kernel's minimum */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sa.sa_flags = SA_ONSTACK;
    sigaction(SIGUSR1, &sa, NULL);
    for (int i = 0; i < 1000; i++)
        free(malloc((size_t)i * 33 + 1));
    for (int r = 0; r < 2000; r++)
        raise(SIGUSR1);
    return bad ? 4 : 0;
}

/* This program run again on a stack of `size` bytes, with LD_PRELOAD (uslab) or without
 * (glibc): 1 if it survived. */
static int survives(const char *self, size_t size, int glibc)
{
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(1);
    }
    if (pid == 0) {
        if (glibc)
            unsetenv("LD_PRELOAD");
        char arg[32];
        snprintf(arg, sizeof arg, "%zu", size);
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, 2); /* a crash's message, if the shell printed one */
        execl(self, self, "try", arg, (char *)NULL);
        _exit(127);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid)
        return 0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "try") == 0)
        return try_size(strtoul(argv[2], NULL, 10));
    const char *pre = getenv("LD_PRELOAD");
    if (!pre || !strstr(pre, "uslab")) {
        fprintf(stderr, "sigstack: run with LD_PRELOAD=libuslab-preload.so\n");
        return 1;
    }
    int failed = 0, both = 0;
    for (size_t size = 4096; size <= 12288; size += 1024) {
        int g = survives("/proc/self/exe", size, 1), u = survives("/proc/self/exe", size, 0);
        printf("signal stack of %5zu bytes: glibc %s, uslab %s\n", size, g ? "ok" : "overflows",
               u ? "ok" : "overflows");
        if (g && !u)
            failed = 1;
        both += g && u;
    }
    if (failed) {
        printf("FAIL: uslab needs more signal stack than glibc\n");
        return 1;
    }
    if (!both) {
        printf("FAIL: no size worked for both: the test tested nothing\n");
        return 1;
    }
    printf("ok\n");
    return 0;
}
