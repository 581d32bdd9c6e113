/* SPDX-License-Identifier: MIT */
/*
 * atfork_program.c - fork, vfork, posix_spawn and system() under the preloaded allocator,
 * with a library whose fork handlers allocate (issue 15; atfork_lib.c).
 *
 * Linked against one build of atfork_lib.c (a DT_NEEDED dependency whose constructor
 * registered its handlers before the process's first malloc):
 *   atfork_program fork           forks from the main thread and from several threads at
 *                                 once while others allocate; every child allocates (also
 *                                 the block its library's child handler allocated) and
 *                                 exits 0, and the library's handlers ran once per fork
 *   atfork_program dlopen MODULE  the same with a dlopened library (handlers registered
 *                                 after uslab's) that allocates in all three handlers;
 *                                 then dlclose it (its handlers go) and fork again
 *   atfork_program spawn          vfork + exec, posix_spawn and system() while threads
 *                                 allocate; each child's exit status comes back
 *
 * A deadlock in a handler would hang: alarm() turns that into a failure before ctest's own
 * timeout, and kills the program's process group (its own), so that no deadlocked child is
 * left behind. Exit status 0 on success; a failed check prints why and exits 1.
 */
#define _GNU_SOURCE
#include "atfork_lib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "atfork_program: " __VA_ARGS__);                                           \
        fprintf(stderr, "\n");                                                                     \
        exit(1);                                                                                   \
    } while (0)

struct lib {
    int (*registered)(void);
    unsigned long (*prepared)(void);
    unsigned long (*parented)(void);
    int (*in_child)(void);
    void *(*child_block)(void);
    int (*shape)(void);
};

static const struct lib linked = {atfork_lib_registered,  atfork_lib_prepared,
                                  atfork_lib_parented,    atfork_lib_in_child,
                                  atfork_lib_child_block, atfork_lib_shape};

/* ---- threads that allocate all the time ------------------------------------------------ */

static int stop_bg;

static void *background(void *arg)
{
    unsigned i = (unsigned)(size_t)arg;
    void *keep[64] = {0};
    while (!__atomic_load_n(&stop_bg, __ATOMIC_RELAXED)) {
        unsigned k = i++ % 64;
        free(keep[k]);
        keep[k] = malloc(1 + (i * 37) % 5000);
        if (!keep[k])
            FAIL("malloc in a background thread");
    }
    for (int k = 0; k < 64; k++)
        free(keep[k]);
    return NULL;
}

enum { BG = 3 };
static pthread_t bg[BG];

static void start_background(void)
{
    __atomic_store_n(&stop_bg, 0, __ATOMIC_RELAXED);
    for (int i = 0; i < BG; i++)
        if (pthread_create(&bg[i], NULL, background, (void *)(size_t)(i * 1000)))
            FAIL("pthread_create");
}

static void stop_background(void)
{
    __atomic_store_n(&stop_bg, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < BG; i++)
        pthread_join(bg[i], NULL);
}

/* ---- fork -------------------------------------------------------------------------------- */

static void *child_thread(void *arg)
{
    (void)arg;
    for (int i = 0; i < 1000; i++)
        free(malloc(16 + (size_t)i % 900));
    return NULL;
}

/* What a child does: the library's child handler ran (and its block is usable), malloc
 * works, also from a new thread. Returns the exit status. */
static int child_work(const struct lib *l, const struct lib *more)
{
    const struct lib *libs[2] = {l, more};
    for (int k = 0; k < 2; k++) {
        if (!libs[k])
            continue;
        if (!libs[k]->in_child())
            return 10 + k;
        unsigned char *b = libs[k]->child_block();
        if (libs[k]->shape() != 1) {
            if (!b || b[0] != 0x5a || b[99] != 0x5a)
                return 12 + k;
            free(b);
        }
    }
    void *v[300];
    for (int i = 0; i < 300; i++) {
        size_t s = (size_t)(1 + (i * 131) % (i % 10 == 0 ? 70000 : 700));
        v[i] = malloc(s);
        if (!v[i])
            return 2;
        memset(v[i], i & 0xff, s);
    }
    for (int i = 0; i < 300; i++) {
        if (((unsigned char *)v[i])[0] != (i & 0xff))
            return 3;
        free(v[i]);
    }
    pthread_t t;
    if (pthread_create(&t, NULL, child_thread, NULL) || pthread_join(t, NULL))
        return 4;
    return 0;
}

static const struct lib *cur_lib, *cur_more;

/* One fork; returns 0 if the child exited 0. */
static int fork_once(void)
{
    void *before = malloc(100);
    pid_t pid = fork();
    if (pid < 0)
        FAIL("fork");
    if (pid == 0) {
        free(before); /* the parent's block, inherited */
        _exit(child_work(cur_lib, cur_more));
    }
    free(before);
    int st;
    if (waitpid(pid, &st, 0) != pid)
        FAIL("waitpid");
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "atfork_program: child status %#x\n", st);
        return 1;
    }
    return 0;
}

enum { MAIN_FORKS = 20, FORKERS = 4, FORKS_EACH = 8 };

static void *forker(void *arg)
{
    int *bad = arg;
    for (int n = 0; n < FORKS_EACH; n++)
        if (fork_once())
            __atomic_fetch_add(bad, 1, __ATOMIC_RELAXED);
    return NULL;
}

/* MAIN_FORKS forks from the main thread, then FORKERS threads forking at once, while the
 * background threads allocate. Returns the number of forks. */
static unsigned long fork_round(void)
{
    int bad = 0;
    start_background();
    for (int n = 0; n < MAIN_FORKS; n++)
        bad += fork_once();
    pthread_t f[FORKERS];
    for (int i = 0; i < FORKERS; i++)
        if (pthread_create(&f[i], NULL, forker, &bad))
            FAIL("pthread_create");
    for (int i = 0; i < FORKERS; i++)
        pthread_join(f[i], NULL);
    stop_background();
    if (bad)
        FAIL("%d children failed", bad);
    return MAIN_FORKS + FORKERS * FORKS_EACH;
}

static void check_counts(const struct lib *l, const char *what, unsigned long forks)
{
    if (l->prepared() != forks || l->parented() != forks)
        FAIL("%s: %lu forks, but prepare ran %lu times and parent %lu times", what, forks,
             l->prepared(), l->parented());
    if (l->in_child())
        FAIL("%s: the child handler ran in the parent", what);
}

static int forks(void)
{
    if (linked.registered() != 0)
        FAIL("the library's pthread_atfork failed (%d)", linked.registered());
    cur_lib = &linked;
    unsigned long n = fork_round();
    check_counts(&linked, "linked library", n);
    printf("shape %d: %lu forks, children exited 0, handlers ran once per fork\n", linked.shape(),
           n);
    return 0;
}

static int dlopened(const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        FAIL("dlopen %s: %s", path, dlerror());
    struct lib m = {
        (int (*)(void))dlsym(h, "atfork_lib_registered"),
        (unsigned long (*)(void))dlsym(h, "atfork_lib_prepared"),
        (unsigned long (*)(void))dlsym(h, "atfork_lib_parented"),
        (int (*)(void))dlsym(h, "atfork_lib_in_child"),
        (void *(*)(void))dlsym(h, "atfork_lib_child_block"),
        (int (*)(void))dlsym(h, "atfork_lib_shape"),
    };
    if (!m.registered || !m.prepared || !m.parented || !m.in_child || !m.child_block || !m.shape)
        FAIL("%s: missing a symbol", path);
    if (m.registered() != 0)
        FAIL("the module's pthread_atfork failed (%d)", m.registered());
    cur_lib = &linked;
    cur_more = &m;
    unsigned long n = fork_round();
    check_counts(&m, "dlopened module", n);
    check_counts(&linked, "linked library", n);
    /* dlclose removes the module's handlers (by its DSO handle), nobody else's. */
    if (dlclose(h))
        FAIL("dlclose: %s", dlerror());
    cur_more = NULL;
    unsigned long n2 = fork_round();
    check_counts(&linked, "linked library after dlclose", n + n2);
    printf("dlopened module: %lu forks, then dlclose and %lu more: children exited 0\n", n, n2);
    return 0;
}

/* ---- vfork, posix_spawn, system --------------------------------------------------------- */

static void expect_status(const char *what, int st, int code)
{
    if (!WIFEXITED(st) || WEXITSTATUS(st) != code)
        FAIL("%s: status %#x, expected exit %d", what, st, code);
}

static int spawns(void)
{
    enum { ROUNDS = 20 };
    start_background();
    for (int n = 0; n < ROUNDS; n++) {
        /* vfork: the child shares the parent's memory and may only exec or _exit. */
        char *argv_sh[] = {"sh", "-c", "exit 7", NULL};
        pid_t pid = vfork();
        if (pid < 0)
            FAIL("vfork");
        if (pid == 0) {
            execve("/bin/sh", argv_sh, environ);
            _exit(127);
        }
        int st;
        if (waitpid(pid, &st, 0) != pid)
            FAIL("waitpid (vfork)");
        expect_status("vfork + exec", st, 7);

        char *argv_spawn[] = {"sh", "-c", "exit 5", NULL};
        if (posix_spawn(&pid, "/bin/sh", NULL, NULL, argv_spawn, environ) != 0)
            FAIL("posix_spawn");
        if (waitpid(pid, &st, 0) != pid)
            FAIL("waitpid (posix_spawn)");
        expect_status("posix_spawn", st, 5);

        expect_status("system", system("exit 3"), 3);
    }
    stop_background();
    printf("%d rounds of vfork, posix_spawn and system() while %d threads allocated\n", ROUNDS, BG);
    return 0;
}

static void hung(int sig)
{
    (void)sig;
    static const char msg[] = "atfork_program: still running after 60 s: a deadlock?\n";
    if (write(2, msg, sizeof msg - 1) < 0) {
    }
    kill(0, SIGKILL); /* this process group: the program and its children */
}

int main(int argc, char **argv)
{
    /* A deadlock fails the test instead of hanging it, and takes its children along. */
    if (setpgid(0, 0) != 0)
        FAIL("setpgid");
    signal(SIGALRM, hung);
    alarm(60);
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "fork"))
        return forks();
    if (!strcmp(mode, "dlopen") && argc > 2)
        return dlopened(argv[2]);
    if (!strcmp(mode, "spawn"))
        return spawns();
    FAIL("usage: atfork_program fork|dlopen MODULE|spawn");
}
