/* SPDX-License-Identifier: MIT */
/*
 * sigstack.c - malloc and free in a signal handler that runs on a small alternate stack
 * need no more stack under uslab than under glibc (docs/design.md §12). The program, run
 * with LD_PRELOAD=libuslab-preload.so, tries growing stacks for both: each try is this
 * program run again (`try SIZE`), with and without LD_PRELOAD. A try warms up in main with
 * 1,000 pairs, then raises a signal 2000 times whose handler allocates and frees 64 blocks
 * of 1 to 32,572 bytes on a SIZE-byte stack with a guard page below it. Every size glibc
 * survives, uslab must survive too. The sweep of each kind of try stops at the first size
 * both survive (a larger stack only adds room; up to 12 KiB before session 56, 48 runs and
 * 19 s here where every size passed for both). Before the preload library was linked
 * with -z now, uslab's first call of madvise there went through the dynamic linker's lazy
 * resolver, which saves the vector registers on the stack: it needed more than 6 KiB where
 * glibc needed less than 4.
 * The threaded tries (`try SIZE threads`, session 11's audit) start 200 threads one after
 * another; each makes its SIZE-byte alternate stack and signals itself, so its first calls
 * into the allocator are the handler's (blocks up to 44,100 bytes: glibc's too), and half
 * way the program sleeps 120 ms (1.2 s past the default delay until session 54: 26 s of the
 * test). Every try runs with USLAB_PURGE_DELAY=1, and the single-threaded ones free 2.5 MB
 * of blocks and sleep 5 ms before the first signal, so that an inline pass falls due on a
 * handler's slow path (the purger's start did too, when it was the default). uslab used to
 * do that work there and overflowed 4 and 5 KiB stacks on which glibc ran; now it puts it
 * off to a slow path on a thread's own stack (before session 54 no try made a pass due in a
 * handler: counted with a write in a scratch build; now 24 in a try). The threaded tries
 * start at 5 KiB: at 4 KiB a new thread's first slab of a class, made in the handler, still
 * overflows where glibc fits (design §12: the kernel's signal frame takes 2.9 KiB of it).
 * Sizes start where the kernel's frame leaves a handler at least 1 KiB: the frame depends on
 * the CPU's vector state (AT_MINSIGSTKSZ, 3,632 bytes on an AVX-512 machine with kernel
 * 6.18, where the frame took 3.2 KiB of a 4 KiB stack and left glibc's deepest malloc 24
 * bytes; session 45). From there the steps are 256 bytes up to 6 KiB, then 1 KiB.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t bad;
static size_t step = 517; /* block i of the handler has 1 + i * step bytes */
static size_t stack_size;

static void handler(int sig)
{
    (void)sig;
    void *p[64];
    for (int i = 0; i < 64; i++) {
        p[i] = malloc(1 + (size_t)i * step);
        if (!p[i])
            bad = 1;
        else
            memset(p[i], 1, 8);
    }
    for (int i = 0; i < 64; i++)
        free(p[i]);
}

/* A thread whose first allocator calls are its handler's, on its own small stack. */
static void *signalled_thread(void *arg)
{
    (void)arg;
    char *m =
        mmap(NULL, stack_size + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || mprotect(m, 4096, PROT_NONE) != 0) {
        bad = 1;
        return NULL;
    }
    stack_t ss = {.ss_sp = m + 4096, .ss_size = stack_size, .ss_flags = 0};
    if (sigaltstack(&ss, NULL) != 0) {
        bad = 1;
        return NULL;
    }
    pthread_kill(pthread_self(), SIGUSR1);
    stack_t off = {.ss_flags = SS_DISABLE};
    sigaltstack(&off, NULL);
    munmap(m, stack_size + 4096);
    return NULL;
}

static int try_threads(size_t size)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sa.sa_flags = SA_ONSTACK;
    sigaction(SIGUSR1, &sa, NULL);
    stack_size = size;
    step = 700;
    free(malloc(100));
    for (int i = 0; i < 200; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, signalled_thread, NULL) != 0)
            return 2;
        pthread_join(t, NULL);
        if (i == 100)
            usleep(120 * 1000);
    }
    return bad ? 4 : 0;
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
    /* 2.5 MB of empty slabs, whose pass falls due 1 ms later: in a handler's slow path,
     * the first after the sleep. */
    static void *idle[20000];
    for (int i = 0; i < 20000; i++)
        idle[i] = malloc(128);
    for (int i = 0; i < 20000; i++)
        free(idle[i]);
    usleep(5 * 1000);
    for (int r = 0; r < 2000; r++)
        raise(SIGUSR1);
    return bad ? 4 : 0;
}

/* This program run again on a stack of `size` bytes, with LD_PRELOAD (uslab) or without
 * (glibc): 1 if it survived. */
static int survives(const char *self, size_t size, int glibc, int threads)
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
            dup2(null, 2);                   /* a crash's message, if the shell printed one */
        setenv("USLAB_PURGE_DELAY", "1", 1); /* passes fall due within the tries */
        execl(self, self, "try", arg, threads ? "threads" : (char *)NULL, (char *)NULL);
        _exit(127);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid)
        return 0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "try") == 0)
        return argc == 4 ? try_threads(strtoul(argv[2], NULL, 10))
                         : try_size(strtoul(argv[2], NULL, 10));
    const char *pre = getenv("LD_PRELOAD");
    if (!pre || !strstr(pre, "uslab")) {
        fprintf(stderr, "sigstack: run with LD_PRELOAD=libuslab-preload.so\n");
        return 1;
    }
    /* The kernel's signal frame for this CPU (its minimum for an alternate stack), and the
     * first size that leaves a handler 1 KiB beyond it, in 256-byte steps. */
    size_t frame = (size_t)getauxval(AT_MINSIGSTKSZ);
    if (frame < 2048)
        frame = 2048; /* MINSIGSTKSZ, for a kernel that does not say */
    size_t first = (frame + 1024 + 255) & ~(size_t)255;
    printf("kernel's signal frame at most %zu bytes: sizes from %zu\n", frame, first);
    int failed = 0, both = 0;
    for (int threads = 0; threads <= 1; threads++)
        for (size_t size = threads && first < 5120 ? 5120 : first; size <= 12288;
             size += size < 6144 ? 256 : 1024) {
            int g = survives("/proc/self/exe", size, 1, threads),
                u = survives("/proc/self/exe", size, 0, threads);
            printf("signal stack of %5zu bytes%s: glibc %s, uslab %s\n", size,
                   threads ? ", new threads" : "", g ? "ok" : "overflows", u ? "ok" : "overflows");
            if (g && !u)
                failed = 1;
            if (g && u) {
                both++;
                break;
            }
        }
    if (failed) {
        printf("FAIL: uslab needs more signal stack than glibc\n");
        return 1;
    }
    if (both < 2) {
        printf("FAIL: no size worked for both in a kind of try: it tested nothing\n");
        return 1;
    }
    printf("ok\n");
    return 0;
}
