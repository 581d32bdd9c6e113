/* SPDX-License-Identifier: MIT */
/*
 * key_rounds - threads whose first malloc and free come in glibc's last round of
 * thread-specific data destructors (PTHREAD_DESTRUCTOR_ITERATIONS, 4): a key's destructor
 * sets the key again three times and allocates in its fourth call. A thread cache made
 * there would never be flushed (uslab's exit destructor, set with it, needs a fifth round),
 * so every such thread kept its cache's mappings for good (session 11's audit: 4,000
 * threads, 100 MB and 8,000 mappings). The start trampoline of the pthread_create and
 * thrd_create hooks marks the thread as leaving once its routine has returned, been left
 * by pthread_exit or thrd_exit, or been cancelled; it then makes no cache (design §7).
 *
 * Usage: key_rounds return|exit|cancel|c11|sigexit [threads]. Threads run one after the
 * other; the mappings counted after the first 50 and after all must not grow with the
 * threads. `sigexit` first makes 400 threads that a signal sent at once makes leave by
 * pthread_exit(42) in its handler, before their routine (glibc runs the handler as it
 * unblocks the new thread's signals): each must be joined with 42, and must not keep one of
 * the trampoline's 256 slots (the twelfth audit: afterwards no thread had the trampoline).
 * Built with -no-pie and KR_TAKE_ADDRESS as key_rounds_nopie, the program takes
 * pthread_create's address, so that dlsym would name the executable's stub (the audit's
 * kr_nopie: the hook was not seen as the first). Prints "key_rounds <mode> ok".
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <threads.h>

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "key_rounds: " __VA_ARGS__);                                               \
        fputc('\n', stderr);                                                                       \
        exit(1);                                                                                   \
    } while (0)

static pthread_key_t key;
static __thread int rounds;
static volatile size_t sink;

static void key_destructor(void *value)
{
    if (++rounds < 4) {
        pthread_setspecific(key, value); /* once more: glibc runs another round */
        return;
    }
    /* The fourth and last round: this thread's first calls into the allocator. */
    for (int i = 0; i < 8; i++) {
        char *p = malloc(48 + (size_t)i * 16);
        if (!p)
            FAIL("malloc in the last destructor round failed");
        memset(p, i, 48);
        sink += (size_t)p[7];
        free(p);
    }
}

enum mode { RETURN, EXIT, CANCEL, C11, SIGEXIT };
static enum mode mode;

static void *worker(void *arg)
{
    (void)arg;
    pthread_setspecific(key, &key); /* any non-null value: no allocation of ours */
    if (mode == EXIT)
        pthread_exit(NULL);
    if (mode == CANCEL)
        for (;;) {
            pthread_testcancel();
            sched_yield();
        }
    return NULL;
}

static int worker_c11(void *arg)
{
    (void)arg;
    pthread_setspecific(key, &key);
    return 7;
}

static void leave_in_handler(int sig)
{
    (void)sig;
    pthread_exit((void *)42);
}

static void *never_runs(void *arg)
{
    return arg; /* the signal came first; if not, the join below sees NULL */
}

/* Threads that leave in a signal handler before their routine runs. */
static void run_signal_exits(int n)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = leave_in_handler;
    if (sigaction(SIGUSR1, &sa, NULL) != 0)
        FAIL("sigaction");
    int left = 0;
    for (int i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, never_runs, NULL) != 0)
            FAIL("pthread_create");
        pthread_kill(t, SIGUSR1);
        void *ret = NULL;
        if (pthread_join(t, &ret) != 0)
            FAIL("pthread_join");
        left += ret == (void *)42;
    }
    printf("%d of %d threads left in their signal handler\n", left, n);
    if (left < n / 2) /* the signal may come after the routine has returned: rare */
        FAIL("only %d of %d threads left by pthread_exit in the handler", left, n);
}

#ifdef KR_TAKE_ADDRESS
/* Set in code: non-PIE code takes the address as an immediate, which makes the linker give
 * pthread_create a canonical address in the executable (its PLT stub). */
int (*volatile kr_create_address)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
#endif

static void run_one(void)
{
    if (mode == C11) {
        thrd_t t;
        int res = 0;
        if (thrd_create(&t, worker_c11, NULL) != thrd_success)
            FAIL("thrd_create");
        if (thrd_join(t, &res) != thrd_success || res != 7)
            FAIL("thrd_join: result %d, not 7", res);
        return;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) != 0)
        FAIL("pthread_create");
    if (mode == CANCEL && pthread_cancel(t) != 0)
        FAIL("pthread_cancel");
    void *ret = NULL;
    if (pthread_join(t, &ret) != 0)
        FAIL("pthread_join");
    if (mode == CANCEL && ret != PTHREAD_CANCELED)
        FAIL("the worker was not cancelled");
}

static int mapping_count(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        FAIL("cannot open /proc/self/maps");
    int n = 0;
    for (int ch; (ch = fgetc(f)) != EOF;)
        n += ch == '\n';
    fclose(f);
    return n;
}

int main(int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : "return";
    int threads = argc > 2 ? atoi(argv[2]) : 1000;
    if (strcmp(name, "return") == 0)
        mode = RETURN;
    else if (strcmp(name, "exit") == 0)
        mode = EXIT;
    else if (strcmp(name, "cancel") == 0)
        mode = CANCEL;
    else if (strcmp(name, "c11") == 0)
        mode = C11;
    else if (strcmp(name, "sigexit") == 0)
        mode = SIGEXIT;
    else
        FAIL("mode: return, exit, cancel, c11 or sigexit");
    if (threads < 100)
        FAIL("at least 100 threads");
    if (pthread_key_create(&key, key_destructor) != 0)
        FAIL("pthread_key_create");
#ifdef KR_TAKE_ADDRESS
    kr_create_address = pthread_create;
#endif
    if (mode == SIGEXIT) {
        run_signal_exits(400);
        mode = RETURN;
    }
    for (int i = 0; i < 50; i++)
        run_one();
    int early = mapping_count();
    for (int i = 50; i < threads; i++)
        run_one();
    int late = mapping_count();
    printf("key_rounds %s: %d threads; %d mappings after 50, %d after all\n", name, threads, early,
           late);
    /* A kept cache is at least one mapping (and a guard) per thread; slabs of new classes
     * and glibc's stack cache may add a few. */
    if (late - early > 40)
        FAIL("the threads kept their caches: %d mappings after 50 threads, %d after %d", early,
             late, threads);
    printf("key_rounds %s ok\n", name);
    return 0;
}
