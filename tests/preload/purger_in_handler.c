/* SPDX-License-Identifier: MIT */
/*
 * purger_in_handler.c - a signal handler's free that is the kick starting the purger thread
 * (design §3), run under LD_PRELOAD with USLAB_PURGER=thread, where the first free of a
 * large block is that kick.
 *
 * Before, the kick called pthread_create inside the handler. When the handler had
 * interrupted glibc's pthread_create or pthread_join while they held glibc's stack-cache
 * lock, that pthread_create waited for the lock for ever (all signals blocked: not even
 * SIGKILL's timer alarm reached it), in about 1 of 1000 runs of `stress`.
 *
 *  - `join` (deterministic): the main thread is inside pthread_join (the joined thread has
 *    seen it asleep there) when the signal comes; the handler frees a large block. No
 *    thread may start inside the handler (before: the purger started there); after the
 *    join, the main thread's own slow paths must start it (the start is put off, not lost).
 *  - `detached` (with USLAB_EMPTY_SLABS=0): detached threads that never allocate exit, one
 *    after another, each on a stack of this program's. glibc frees each one's DTV (allocated by
 * this thread's pthread_create) on the exiting thread while it holds the stack-cache lock, with
 * every signal blocked; that free empties the block's slab, the kick that starts the purger.
 * Before, the purger's pthread_create waited there for that lock for ever (the seventh audit's
 * batches of detached threads hung so, under the default settings); the thread must leave, and this
 * thread's own slow paths must start the purger afterwards.
 *  - `stress`: `children` processes, each looping pthread_create and pthread_join while a
 *    second thread sends the main thread the signal after a random delay. Every child must
 *    exit within 10 s (a stuck one, every signal blocked, is killed and counted).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "purger_in_handler: " __VA_ARGS__);                                        \
        fputc('\n', stderr);                                                                       \
        exit(1);                                                                                   \
    } while (0)

static pid_t main_tid;
static volatile sig_atomic_t fired, threads_before, threads_after;

/* The Threads: line of /proc/self/status, read with open and read only (usable in a
 * handler); -1 when it cannot be read. */
static int thread_count(void)
{
    static char buf[4096];
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    const char *t = strstr(buf, "\nThreads:");
    return t ? atoi(t + 9) : -1;
}

static void free_large(void)
{
    void *volatile p = malloc(4 << 20); /* above the slab classes: glibc's */
    if (p)
        ((char *)p)[0] = 1;
    free(p);
}

static void handler(int sig)
{
    (void)sig;
    int e = errno;
    threads_before = thread_count();
    free_large(); /* the process's first large free: the kick that may start the purger */
    threads_after = thread_count();
    fired = 1;
    errno = e;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Whether thread tid sleeps (state S in its stat file). */
static int asleep(pid_t tid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    const char *s = strrchr(buf, ')');
    return s && s[1] == ' ' && s[2] == 'S';
}

static volatile int joining;

/* Joined by the main thread: waits until the main thread sleeps inside pthread_join, sends
 * it the signal, and stays until the handler has run. */
static void *joined(void *arg)
{
    (void)arg;
    while (!joining)
        sleep_ms(1);
    for (int i = 0; i < 10000 && !asleep(main_tid); i++)
        sleep_ms(1);
    if (!asleep(main_tid))
        FAIL("the main thread never slept in pthread_join");
    syscall(SYS_tgkill, getpid(), main_tid, SIGUSR1);
    while (!fired)
        sleep_ms(1);
    return NULL;
}

static int run_join(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, joined, NULL) != 0)
        FAIL("pthread_create");
    joining = 1;
    if (pthread_join(t, NULL) != 0)
        FAIL("pthread_join");
    if (!fired)
        FAIL("the handler did not run");
    if (threads_before < 1 || threads_after < 1)
        FAIL("cannot read /proc/self/status");
    printf("in the handler: %d thread(s) before the kick, %d after\n", (int)threads_before,
           (int)threads_after);
    if (threads_after != threads_before)
        FAIL("a thread started inside the signal handler, during pthread_join");
    /* Put off, not lost: slow paths outside the handler start it (up to 20 s). */
    for (int i = 0; i < 2000; i++) {
        free_large();
        if (thread_count() > 1) {
            printf("the purger started after the join, from a slow path (%d ms)\n", i * 10);
            return 0;
        }
        sleep_ms(10);
    }
    FAIL("no purger thread 20 s after the join");
}

static void *nothing(void *arg)
{
    return arg;
}

/* Lines of /proc/self/maps: the process's mappings. */
static int mapping_count(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    int n = 0, c;
    if (!f)
        return -1;
    while ((c = fgetc(f)) != EOF)
        n += c == '\n';
    fclose(f);
    return n;
}

/* Detached threads on stacks of this program's, one after another, up to 300, each waited
 * for (10 s at most) until the process has as many threads as before it. Their mappings
 * must not stay: each left a thread cache (4 mappings) before. */
static int run_detached(void)
{
    int maps_early = 0;
    int before = thread_count();
    if (before < 1)
        FAIL("cannot read /proc/self/status");
    size_t size = (size_t)64 << 10;
    for (int k = 0; k < 300; k++) {
        /* Its own stack: glibc keeps a stack it made in its cache with its DTV, and frees
         * the DTV of a thread on the program's stack at once (or its cache's oldest once
         * the cache holds 40 MiB), under the same lock. Never reused: the thread may still
         * be on it after it left the count. */
        void *stack = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        pthread_attr_t a;
        pthread_t t;
        if (stack == MAP_FAILED || pthread_attr_init(&a) != 0 ||
            pthread_attr_setstack(&a, stack, size) != 0 ||
            pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED) != 0 ||
            pthread_create(&t, &a, nothing, NULL) != 0)
            FAIL("cannot start detached thread %d", k);
        pthread_attr_destroy(&a);
        /* The purger thread (USLAB_PURGER=thread) may have started meanwhile from this
         * thread's own slow paths, and then stays: one thread more is allowed; a purger
         * started inside the exiting thread kept it, and the count, above that. */
        const char *mode_env = getenv("USLAB_PURGER");
        int slack = mode_env && strcmp(mode_env, "thread") == 0;
        int n = 0;
        for (int i = 0; i < 1000 && (n = thread_count()) > before + slack; i++)
            sleep_ms(10);
        if (n > before + slack)
            FAIL("detached thread %d never finished its exit (%d threads, %d before): a purger "
                 "started inside it",
                 k, n, before);
        if (k == 19)
            maps_early = mapping_count(); /* the stacks add one each from here on */
    }
    int maps_late = mapping_count();
    printf("300 detached threads left; %d thread(s); %d mappings after 20 threads, %d after "
           "300\n",
           thread_count(), maps_early, maps_late);
    /* 280 more stacks (glibc's own records may add a few): not 4 more per thread. */
    if (maps_early < 1 || maps_late - maps_early > 280 + 100)
        FAIL("the exited threads kept mappings: %d after 20 threads, %d after 300", maps_early,
             maps_late);
    const char *purger = getenv("USLAB_PURGER");
    if (!purger || strcmp(purger, "thread") != 0)
        return 0; /* no thread to wait for (USLAB_PURGER=inline: the mappings only) */
    for (int i = 0; i < 2000; i++) {
        free_large();
        if (thread_count() > before) {
            printf("the purger started afterwards, from a slow path (%d ms)\n", i * 10);
            return 0;
        }
        sleep_ms(10);
    }
    FAIL("no purger thread 20 s after the detached threads left");
}

static void *killer(void *arg)
{
    struct timespec ts = {0, (long)(uintptr_t)arg * 1000};
    nanosleep(&ts, NULL);
    syscall(SYS_tgkill, getpid(), main_tid, SIGUSR1);
    return NULL;
}

static int run_stress(int children)
{
    int stuck = 0;
    for (int i = 0; i < children; i++) {
        pid_t c = fork();
        if (c < 0)
            FAIL("fork: %s", strerror(errno));
        if (c == 0) {
            main_tid = (pid_t)syscall(SYS_gettid);
            pthread_t k, t;
            unsigned seed = (unsigned)i * 2654435761u;
            long us = 100 + (long)(rand_r(&seed) % 3000);
            if (pthread_create(&k, NULL, killer, (void *)(uintptr_t)us) != 0)
                _exit(2);
            while (!fired) {
                if (pthread_create(&t, NULL, nothing, NULL) != 0 || pthread_join(t, NULL) != 0)
                    _exit(2);
            }
            pthread_join(k, NULL);
            _exit(0);
        }
        /* 10 s at most: a stuck child has every signal blocked, SIGKILL aside. */
        int st = 0, waited = 0;
        pid_t w;
        while ((w = waitpid(c, &st, WNOHANG)) == 0 && waited < 10000) {
            sleep_ms(1);
            waited++;
        }
        if (w == 0) {
            kill(c, SIGKILL);
            waitpid(c, &st, 0);
            stuck++;
        } else if (w != c) {
            FAIL("waitpid: %s", strerror(errno));
        } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            FAIL("child %d ended with status %#x", i, st);
    }
    printf("%d children, %d stuck\n", children, stuck);
    if (stuck)
        FAIL("%d of %d children never finished (a purger started inside a handler)", stuck,
             children);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "join";
    main_tid = (pid_t)syscall(SYS_gettid);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR1, &sa, NULL) != 0)
        FAIL("sigaction");
    int r;
    if (strcmp(mode, "join") == 0)
        r = run_join();
    else if (strcmp(mode, "detached") == 0)
        r = run_detached();
    else if (strcmp(mode, "stress") == 0)
        r = run_stress(argc > 2 ? atoi(argv[2]) : 300);
    else
        FAIL("mode: join, detached or stress");
    if (r == 0)
        printf("purger_in_handler %s ok\n", mode);
    return r;
}
