/* SPDX-License-Identifier: MIT */
/*
 * rlimit_late.c - a program that lowers its own RLIMIT_AS after it has started allocating
 * still gets memory (design §2, "The address-space budget"; session 17's audit of CPython's
 * tests: a multiprocessing pool whose initialiser set a 1 GiB limit got MemoryError in
 * every worker). uslab then mapped a 4 GiB tag table once frees showed that a program used
 * slabs; under a limit lowered below that, every new mapping failed: a large malloc, a
 * thread's stack, a new slab. Since session 55 there is no such table: uslab's mappings
 * are its reservation and side arrays, which grow with use.
 * Modes (argv[1]):
 *  - `setrlimit`: the process, single-threaded, lowers its limit to 1 GiB;
 *  - `prlimit`: the same through prlimit(0, ...);
 *  - `forked`: a process with a live second thread forks; the child, its only thread,
 *    lowers its limit (glibc still calls it multi-threaded there).
 * After the limit: malloc(10 MiB), a thread, and 64 MiB of small blocks (new slabs), each
 * written and checked. Run under glibc alone too (`_glibc`).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define LIMIT ((rlim_t)1 << 30)

static long vmsize_mib(void)
{
    char line[256];
    long kb = -1;
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmSize:", 7) == 0)
            kb = atol(line + 7);
    if (f)
        fclose(f);
    return kb / 1024;
}

static void *worker(void *arg)
{
    char *p = malloc(1000);
    if (!p)
        return NULL;
    memset(p, 7, 1000);
    free(p);
    return arg;
}

static pthread_mutex_t hold = PTHREAD_MUTEX_INITIALIZER;

static void *waiter(void *arg)
{
    pthread_mutex_lock(&hold); /* alive until main releases it */
    pthread_mutex_unlock(&hold);
    return arg;
}

/* Everything a program asks for after lowering its limit: 0, or 1 with a message. */
static int after_limit(const char *how)
{
    long before = vmsize_mib();
    struct rlimit rl = {LIMIT, LIMIT};
    int r = strcmp(how, "setrlimit") == 0 ? setrlimit(RLIMIT_AS, &rl)
                                          : prlimit(0, RLIMIT_AS, &rl, NULL);
    if (r != 0) {
        perror(how);
        return 1;
    }
    printf("%s: VmSize %ld MiB before, %ld MiB after lowering the limit to 1 GiB\n", how, before,
           vmsize_mib());
    char *big = malloc(10 << 20);
    if (!big) {
        printf("rlimit_late: malloc(10 MiB) failed after the limit\n");
        return 1;
    }
    memset(big, 1, 10 << 20);
    free(big);
    pthread_t t;
    static int token;
    void *ret = NULL;
    if (pthread_create(&t, NULL, worker, &token) != 0 || pthread_join(t, &ret) != 0 ||
        ret != &token) {
        printf("rlimit_late: no thread after the limit\n");
        return 1;
    }
    static char *blocks[65536];
    for (int i = 0; i < 65536; i++) {
        blocks[i] = malloc(1024);
        if (!blocks[i]) {
            printf("rlimit_late: malloc(1024) number %d failed after the limit\n", i);
            return 1;
        }
        memset(blocks[i], i, 1024);
    }
    for (int i = 0; i < 65536; i++) {
        if (blocks[i][0] != (char)i || blocks[i][1023] != (char)i) {
            printf("rlimit_late: block %d changed\n", i);
            return 1;
        }
        free(blocks[i]);
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "setrlimit";
    /* Start-up: blocks of many classes allocated and freed before the limit. */
    static void *p[4096];
    for (int r = 0; r < 4; r++) {
        for (int i = 0; i < 4096; i++)
            p[i] = malloc(16 + (i % 200));
        for (int i = 0; i < 4096; i++)
            free(p[i]);
    }
    int failed;
    if (strcmp(mode, "forked") == 0) {
        pthread_t t;
        pthread_mutex_lock(&hold);
        if (pthread_create(&t, NULL, waiter, NULL) != 0)
            return 2;
        pid_t pid = fork();
        if (pid == 0) {
            int r = after_limit("prlimit");
            fflush(stdout);
            _exit(r);
        }
        int status;
        waitpid(pid, &status, 0);
        pthread_mutex_unlock(&hold);
        pthread_join(t, NULL);
        failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    } else if (strcmp(mode, "setrlimit") == 0 || strcmp(mode, "prlimit") == 0) {
        failed = after_limit(mode);
    } else {
        fprintf(stderr, "mode: setrlimit, prlimit or forked\n");
        return 2;
    }
    if (failed)
        return 1;
    printf("rlimit late ok\n");
    return 0;
}
