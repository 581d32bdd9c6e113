/* SPDX-License-Identifier: MIT */
/*
 * dlopen_wait.c - a process's first pthread_create, pthread_join and pthread_detach must not
 * wait for another thread's dlopen (docs/design.md §8). A thread made
 * with thrd_create dlopens dlopen_wait_mod, whose constructor signals "inside" and then
 * waits up to 20 s for the main thread to create, join and detach threads. glibc's own
 * functions do not take the dynamic linker's lock that dlopen holds while constructors run;
 * a hook that looks glibc's function up with dlsym at its first call does, and waited there
 * until the constructor gave up. Prints "dlopen_wait ok" when the constructor saw the
 * creations in time.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <threads.h>
#include <unistd.h>

static int to_module[2], from_module[2];
static const char *module_path;
static int module_result = -1;

static int opener(void *arg)
{
    (void)arg;
    void *h = dlopen(module_path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen_wait: dlopen: %s\n", dlerror());
        return 1;
    }
    int *ok = (int *)dlsym(h, "dlopen_wait_ctor_ok");
    module_result = ok ? *ok : -1;
    return 0;
}

static void *routine(void *arg)
{
    return arg;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: dlopen_wait MODULE\n");
        return 2;
    }
    module_path = argv[1];
    if (pipe(to_module) != 0 || pipe(from_module) != 0)
        return 2;
    char fds[64];
    snprintf(fds, sizeof fds, "%d,%d", from_module[1], to_module[0]);
    setenv("DLOPEN_WAIT_FDS", fds, 1);

    thrd_t t;
    if (thrd_create(&t, opener, NULL) != thrd_success)
        return 2;
    char c;
    if (read(from_module[0], &c, 1) != 1) /* the constructor runs, dlopen's lock held */
        return 2;
    /* The process's first calls of each: glibc's own take no loader lock. */
    pthread_t a, b;
    void *res = NULL;
    int r = pthread_create(&a, NULL, routine, &module_result);
    r |= pthread_join(a, &res);
    r |= pthread_create(&b, NULL, routine, NULL);
    r |= pthread_detach(b);
    if (r != 0 || res != &module_result) {
        fprintf(stderr, "dlopen_wait: create/join/detach failed\n");
        return 1;
    }
    if (write(to_module[1], "c", 1) != 1)
        return 2;
    int tr = -1;
    thrd_join(t, &tr);
    if (tr != 0 || module_result != 1) {
        fprintf(stderr, "dlopen_wait: the constructor gave up waiting (result %d)\n",
                module_result);
        return 1;
    }
    printf("dlopen_wait ok\n");
    return 0;
}
