/* SPDX-License-Identifier: MIT */
/*
 * large_cases.c - blocks uslab takes from the system allocator, under debugging or leak
 * reports (issue 16): they are tracked, so leak reports list them and a pointer that is
 * neither a slab block nor one of them is reported. A plain program run under LD_PRELOAD;
 * the reports name its functions from its symbol table and line information (symbols.c):
 * it is built with -g in every build, and the lines a report must show are marked
 * "SITE:<name>" for the tests.
 *
 *   leaks          leaks 2,000,000 bytes in leak_big_block and 100 in leak_small_block
 *   one_site       leaks 40, 100, 1000 and 2,000,000 bytes from one malloc call in
 *                  leak_one_site: three slab classes and the system allocator, one site
 *   foreign        free() of a 16-aligned address in a static array, from foreign_free_site
 *   usable         malloc_usable_size() of the same
 *   realloc_foreign    realloc() of a 64-aligned address in the same array, never
 *                      allocated, from foreign_realloc_site
 *   realloc_foreign_16 the same with an address that is 16- but not 32-aligned
 *   double_free    frees a 3,000,000-byte block twice
 *   realloc_after  realloc() of a freed 3,000,000-byte block
 *   ok             large blocks made, grown, shrunk and freed in four threads and a fork
 *                  child: nothing is reported, nothing leaks
 *   exit_in_handler    a loop mallocs and frees 48- and 2,000,000-byte blocks; a SIGALRM
 *                      handler (every millisecond) calls exit(0) once it interrupted the
 *                      loop inside malloc or free, so the reports at exit (the leak
 *                      report, USLAB_STATS) run while the interrupted call may hold a
 *                      cache lock or the large table's
 *   leaks_sandboxed    as leaks, after a seccomp filter (installed with prctl) that kills
 *                      for open and openat and allows everything else: the leak report at
 *                      exit must come out, with bare addresses (the symboliser's opens
 *                      of /proc/self/maps killed the process with SIGSYS before)
 */
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

size_t malloc_usable_size(void *p);
void leak_big_block(void);
void leak_small_block(void);
void leak_one_site(void);
void foreign_free_site(void);
void foreign_realloc_site(size_t offset);
void *volatile sink;
static char arena[4096] __attribute__((aligned(64)));

__attribute__((noinline)) void leak_big_block(void)
{
    char *p = malloc(2000000); /* SITE:leak_big */
    memset(p, 1, 2000000);
    sink = p;
}

__attribute__((noinline)) void leak_small_block(void)
{
    char *p = malloc(100); /* SITE:leak_small */
    memset(p, 2, 100);
    sink = p;
}

__attribute__((noinline)) void leak_one_site(void)
{
    static const size_t sizes[] = {40, 100, 1000, 2000000};
    for (int i = 0; i < 4; i++) {
        char *p = malloc(sizes[i]); /* SITE:one_site */
        memset(p, 3, sizes[i]);
        sink = p;
    }
}

__attribute__((noinline)) void foreign_free_site(void)
{
    char *volatile p = arena + 64;
    free(p);
}

__attribute__((noinline)) void foreign_realloc_site(size_t offset)
{
    char *volatile p = arena + offset;
    sink = realloc(p, 200);
}

static volatile sig_atomic_t in_allocator;

static void exit_if_inside(int sig)
{
    (void)sig;
    if (in_allocator)
        exit(0); /* not async-signal-safe: what the test is about */
}

static void exit_in_handler(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = exit_if_inside;
    sigaction(SIGALRM, &sa, NULL);
    for (int i = 0; i < 1000; i++) /* initialised and warm: the signal lands in the loop */
        free(malloc(i & 1 ? 2000000 : 48));
    struct itimerval every_ms = {{0, 1000}, {0, 1000}};
    setitimer(ITIMER_REAL, &every_ms, NULL);
    for (unsigned i = 0;; i++) {
        size_t n = i & 1 ? 2000000 : 48;
        in_allocator = 1;
        void *p = malloc(n);
        in_allocator = 0;
        sink = p;
        in_allocator = 1;
        free(p);
        in_allocator = 0;
    }
}

static void *churn(void *arg)
{
    unsigned seed = (unsigned)(size_t)arg;
    void *held[16] = {0};
    for (int i = 0; i < 4000; i++) {
        int k = (int)(rand_r(&seed) % 16);
        size_t n = 40000 + rand_r(&seed) % 200000;
        switch (rand_r(&seed) % 4) {
        case 0:
            free(held[k]);
            held[k] = malloc(n);
            break;
        case 1:
            held[k] = realloc(held[k], n);
            break;
        case 2:
            if (held[k] && malloc_usable_size(held[k]) < 40000)
                return (void *)1;
            break;
        default:
            free(held[k]);
            held[k] = calloc(1, n);
        }
        if (held[k])
            memset(held[k], i, 64);
    }
    for (int k = 0; k < 16; k++)
        free(held[k]);
    return NULL;
}

/* A filter that kills the process for open and openat; anything else is allowed. */
static void forbid_open(void)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_openat, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
#ifdef SYS_open
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_open, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
#endif
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {(unsigned short)(sizeof f / sizeof f[0]), f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        perror("seccomp");
        exit(3);
    }
}

int main(int argc, char **argv)
{
    const char *c = argc > 1 ? argv[1] : "";
    if (strcmp(c, "leaks") == 0 || strcmp(c, "leaks_sandboxed") == 0) {
        if (strcmp(c, "leaks_sandboxed") == 0)
            forbid_open();
        leak_big_block();
        leak_small_block();
        for (int i = 0; i < 50; i++) /* freed properly: not reported */
            free(malloc(70000 + (size_t)i));
    } else if (strcmp(c, "one_site") == 0) {
        leak_one_site();
    } else if (strcmp(c, "foreign") == 0) {
        foreign_free_site();
    } else if (strcmp(c, "realloc_foreign") == 0) {
        foreign_realloc_site(256);
    } else if (strcmp(c, "realloc_foreign_16") == 0) {
        foreign_realloc_site(272);
    } else if (strcmp(c, "usable") == 0) {
        printf("%zu\n", malloc_usable_size(arena + 128));
    } else if (strcmp(c, "interior") == 0) { /* 64 bytes into a block of glibc's */
        char *volatile p = malloc(2000000);
        free(p + 64);
    } else if (strcmp(c, "double_free") == 0) {
        void *volatile p = malloc(3000000);
        free(p);
        free(p);
    } else if (strcmp(c, "realloc_after") == 0) {
        void *volatile p = malloc(3000000);
        free(p);
        sink = realloc(p, 60000);
    } else if (strcmp(c, "exit_in_handler") == 0) {
        exit_in_handler();
    } else if (strcmp(c, "ok") == 0) {
        pthread_t t[4];
        for (int i = 0; i < 4; i++)
            pthread_create(&t[i], NULL, churn, (void *)(size_t)(i + 1));
        pid_t pid = fork();
        if (pid == 0)
            _exit(churn((void *)99) != NULL);
        for (int i = 0; i < 4; i++) {
            void *r;
            pthread_join(t[i], &r);
            if (r)
                return 1;
        }
        int status;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            return 1;
    } else {
        fprintf(stderr, "large_cases: unknown case '%s'\n", c);
        return 2;
    }
    printf("done\n");
    return 0;
}
