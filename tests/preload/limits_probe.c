/* SPDX-License-Identifier: MIT */
/*
 * limits_probe.c - uslab under an address-space limit (RLIMIT_AS, `ulimit -v`), a plain C
 * program run with and without LD_PRELOAD=libuslab-preload.so (docs/design.md §2).
 *
 *   limits_probe MiB measure   sets RLIMIT_AS to MiB, re-executes itself under it, then:
 *     - small blocks work (from slabs, or from glibc when slabs are disabled), and a
 *       malloc that succeeds leaves errno as it was;
 *     - allocates 16 MiB blocks until malloc fails (with ENOMEM), and prints
 *       "large=<bytes> reserved=<bytes>|disabled|glibc".
 *   limits_probe MiB fork      sets the limit, re-executes, then forks 10 times while
 *                              threads call malloc; every child must malloc and exit 0
 *                              (a child blocked on a lock is killed by alarm: a failure).
 *
 * tests/preload/limits.sh compares the large-block room with and without uslab.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "limits_probe: " __VA_ARGS__);                                             \
        fprintf(stderr, "\n");                                                                     \
        exit(1);                                                                                   \
    } while (0)

#define BIG ((size_t)16 << 20)

/* "glibc" without uslab, "disabled" when uslab stepped aside, else its reservation. */
static void uslab_state(char *out, size_t len)
{
    int (*print)(FILE *, int) = (int (*)(FILE *, int))dlsym(RTLD_DEFAULT, "uslab_stats_print");
    if (!print) {
        snprintf(out, len, "glibc");
        return;
    }
    static char buf[1 << 16];
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    if (!f || print(f, 1 /* USLAB_STATS_JSON */) != 0)
        FAIL("uslab_stats_print failed");
    fclose(f);
    if (strstr(buf, "\"slabs_disabled\":true")) {
        snprintf(out, len, "disabled");
        return;
    }
    const char *r = strstr(buf, "\"reserved_bytes\":");
    if (!r)
        FAIL("no reserved_bytes in the statistics: %.200s", buf);
    snprintf(out, len, "%zu", (size_t)strtoull(r + 17, NULL, 10));
}

static void small_blocks(void)
{
    void *p[4000];
    for (int i = 0; i < 4000; i++) {
        errno = 4242;
        size_t n = 1 + (size_t)(i * 37) % 3000;
        p[i] = malloc(n);
        if (!p[i])
            FAIL("malloc(%zu) failed", n);
        if (errno != 4242)
            FAIL("malloc(%zu) succeeded but changed errno to %d", n, errno);
        memset(p[i], i & 0xff, n);
    }
    for (int i = 0; i < 4000; i++) {
        size_t n = 1 + (size_t)(i * 37) % 3000;
        for (size_t k = 0; k < n; k++)
            if (((unsigned char *)p[i])[k] != (unsigned char)(i & 0xff))
                FAIL("block %d changed", i);
        free(p[i]);
    }
}

static int measure(void)
{
    small_blocks();
    char state[64];
    uslab_state(state, sizeof state);
    static void *big[1 << 16];
    size_t n = 0;
    errno = 0;
    while (n < sizeof big / sizeof big[0] && (big[n] = malloc(BIG)) != NULL)
        n++;
    if (errno != ENOMEM)
        FAIL("malloc(16 MiB) failed with errno %d, not ENOMEM", errno);
    for (size_t i = 0; i < n; i++)
        free(big[i]);
    small_blocks(); /* still fine after the system allocator ran out */
    printf("large=%zu reserved=%s\n", n * BIG, state);
    return 0;
}

static volatile int stop;

static void *mallocer(void *arg)
{
    (void)arg;
    while (!stop) {
        void *p[16];
        for (int i = 0; i < 16; i++)
            p[i] = malloc(16 + (size_t)i * 100);
        for (int i = 0; i < 16; i++)
            free(p[i]);
    }
    return NULL;
}

static int forks(void)
{
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        if (pthread_create(&th[i], NULL, mallocer, NULL) != 0)
            FAIL("pthread_create: %s", strerror(errno));
    for (int f = 0; f < 10; f++) {
        pid_t pid = fork();
        if (pid < 0)
            FAIL("fork: %s", strerror(errno));
        if (pid == 0) {
            alarm(10);
            small_blocks();
            _exit(0);
        }
        int status;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            FAIL("fork %d: the child did not exit 0 (status %#x)", f, status);
    }
    stop = 1;
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    char state[64];
    uslab_state(state, sizeof state);
    printf("forks ok reserved=%s\n", state);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3)
        FAIL("usage: limits_probe MiB measure|fork");
    if (!getenv("LIMITS_PROBE_LIMITED")) {
        struct rlimit rl;
        rl.rlim_cur = rl.rlim_max = (rlim_t)strtoull(argv[1], NULL, 10) << 20;
        if (setrlimit(RLIMIT_AS, &rl) != 0)
            FAIL("setrlimit: %s", strerror(errno));
        setenv("LIMITS_PROBE_LIMITED", "1", 1);
        execv("/proc/self/exe", argv);
        FAIL("execv: %s", strerror(errno));
    }
    if (strcmp(argv[2], "measure") == 0)
        return measure();
    if (strcmp(argv[2], "fork") == 0)
        return forks();
    FAIL("unknown mode %s", argv[2]);
}
