/* SPDX-License-Identifier: MIT */
/*
 * profile_shim.c - libuslab-profile.so, which `uslab profile` preloads after
 * libuslab-preload.so (docs/design.md §8). The preload library writes a program's request
 * counts (USLAB_PROFILE) from a destructor at exit; this shim writes them where a process
 * leaves or changes without one: _exit, _Exit, quick_exit, syscall(SYS_exit_group), the
 * exec family, daemon (whose parent leaves by glibc's own _exit), and a seccomp filter
 * installed through prctl or syscall (after it, the file's openat may kill). Each wrapper
 * calls uslab_profile_write, then the next definition of the function (dlsym(RTLD_NEXT)),
 * never the system call itself: an interposer loaded after the shim still sees the call.
 * The default libraries define none of these (issue 37): only a profiling run has them.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <linux/seccomp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "uslab.h"

#define EXPORT __attribute__((visibility("default")))

/* The preload library's, found at the first use (NULL without it: nothing to write). */
static void write_profile(void)
{
    static void (*write_fn)(void);
    static int looked;
    if (!__atomic_load_n(&looked, __ATOMIC_ACQUIRE)) {
        int e = errno;
        write_fn = (void (*)(void))(uintptr_t)dlsym(RTLD_DEFAULT, "uslab_profile_write");
        errno = e;
        __atomic_store_n(&looked, 1, __ATOMIC_RELEASE);
    }
    if (write_fn)
        write_fn();
}

/* The next definition of name, or NULL with errno ENOSYS. */
static void *next(const char *name)
{
    int e = errno;
    void *f = dlsym(RTLD_NEXT, name);
    errno = f ? e : ENOSYS;
    return f;
}

EXPORT void _exit(int status)
{
    write_profile();
    void (*f)(int) = (void (*)(int))(uintptr_t)next("_exit");
    if (f)
        f(status);
    abort(); /* unreachable: glibc's _exit does not return */
}

EXPORT void _Exit(int status)
{
    _exit(status);
}

static void at_quick_exit_handler(void)
{
    write_profile();
}

__attribute__((constructor)) static void shim_init(void)
{
    at_quick_exit(at_quick_exit_handler);
}

EXPORT long syscall(long n, ...)
{
    va_list ap;
    va_start(ap, n);
    long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
    long d = va_arg(ap, long), e = va_arg(ap, long), f = va_arg(ap, long);
    va_end(ap);
    if (n == SYS_exit_group || n == SYS_execve || n == SYS_execveat ||
        (n == SYS_seccomp && (a == SECCOMP_SET_MODE_STRICT || a == SECCOMP_SET_MODE_FILTER)) ||
        (n == SYS_prctl && a == PR_SET_SECCOMP))
        write_profile();
    long (*real)(long, ...) = (long (*)(long, ...))(uintptr_t)next("syscall");
    return real ? real(n, a, b, c, d, e, f) : -1;
}

EXPORT int prctl(int option, ...)
{
    va_list ap;
    va_start(ap, option);
    unsigned long b = va_arg(ap, unsigned long), c = va_arg(ap, unsigned long);
    unsigned long d = va_arg(ap, unsigned long), e = va_arg(ap, unsigned long);
    va_end(ap);
    if (option == PR_SET_SECCOMP)
        write_profile();
    int (*real)(int, ...) = (int (*)(int, ...))(uintptr_t)next("prctl");
    return real ? real(option, b, c, d, e) : -1;
}

EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
    write_profile(); /* a failed exec writes again later: the file is replaced, not added to */
    int (*f)(const char *, char *const[], char *const[]) =
        (int (*)(const char *, char *const[], char *const[]))(uintptr_t)next("execve");
    return f ? f(path, argv, envp) : -1;
}

EXPORT int execv(const char *path, char *const argv[])
{
    write_profile();
    int (*f)(const char *, char *const[]) =
        (int (*)(const char *, char *const[]))(uintptr_t)next("execv");
    return f ? f(path, argv) : -1;
}

EXPORT int execvp(const char *file, char *const argv[])
{
    write_profile();
    int (*f)(const char *, char *const[]) =
        (int (*)(const char *, char *const[]))(uintptr_t)next("execvp");
    return f ? f(file, argv) : -1;
}

EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
    write_profile();
    int (*f)(const char *, char *const[], char *const[]) =
        (int (*)(const char *, char *const[], char *const[]))(uintptr_t)next("execvpe");
    return f ? f(file, argv, envp) : -1;
}

EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
    write_profile();
    int (*f)(int, char *const[], char *const[]) =
        (int (*)(int, char *const[], char *const[]))(uintptr_t)next("fexecve");
    return f ? f(fd, argv, envp) : -1;
}

/* execl, execlp and execle gather their arguments and call the exec functions inside libc,
 * past the shim: they are gathered here and passed to the wrappers above. */
#define GATHER_MAX 1024
static int gather(const char *arg0, va_list ap, char **argv, char *const **envp)
{
    int n = 0;
    argv[n++] = (char *)arg0;
    for (char *a = arg0 ? va_arg(ap, char *) : NULL; a && n < GATHER_MAX - 1;
         a = va_arg(ap, char *))
        argv[n++] = a;
    argv[n] = NULL;
    if (envp)
        *envp = va_arg(ap, char *const *);
    return n < GATHER_MAX - 1 ? 0 : -1;
}

EXPORT int execl(const char *path, const char *arg0, ...)
{
    char *argv[GATHER_MAX];
    va_list ap;
    va_start(ap, arg0);
    int r = gather(arg0, ap, argv, NULL);
    va_end(ap);
    if (r != 0) {
        errno = E2BIG;
        return -1;
    }
    return execv(path, argv);
}

EXPORT int execlp(const char *file, const char *arg0, ...)
{
    char *argv[GATHER_MAX];
    va_list ap;
    va_start(ap, arg0);
    int r = gather(arg0, ap, argv, NULL);
    va_end(ap);
    if (r != 0) {
        errno = E2BIG;
        return -1;
    }
    return execvp(file, argv);
}

EXPORT int execle(const char *path, const char *arg0, ...)
{
    char *argv[GATHER_MAX];
    char *const *envp;
    va_list ap;
    va_start(ap, arg0);
    int r = gather(arg0, ap, argv, &envp);
    va_end(ap);
    if (r != 0) {
        errno = E2BIG;
        return -1;
    }
    return execve(path, argv, envp);
}

EXPORT int daemon(int nochdir, int noclose)
{
    /* The parent leaves by glibc's own _exit: its counts first. The daemon goes on with the
     * same counters and writes them all when it ends (the parent, their owner, is gone). */
    write_profile();
    int (*f)(int, int) = (int (*)(int, int))(uintptr_t)next("daemon");
    pid_t parent = getpid();
    int r = f ? f(nochdir, noclose) : -1;
    /* In the daemon: its parent leaves at once, but a busy machine may run the daemon to
     * its end first, and the owner still there, the daemon would not write (it failed one
     * run in five under load). Wait for the parent to be gone. */
    while (r == 0 && getppid() == parent)
        usleep(1000);
    return r;
}
