/* SPDX-License-Identifier: MIT */
/*
 * hooks.c - prctl and syscall as the program calls them, defined by the shared libraries
 * (libuslab.so and libuslab-preload.so, built with USLAB_HOOKS) so that uslab sees a
 * seccomp filter coming before the kernel installs it (docs/design.md §10.1).
 *
 * A filter installed after the live statistics page was made may refuse, or kill the
 * process for, the unlink that removes the page at exit. So the page goes first: a call
 * that installs a filter (prctl(PR_SET_SECCOMP, ...), syscall(SYS_seccomp,
 * SECCOMP_SET_MODE_STRICT or SECCOMP_SET_MODE_FILTER, ...), syscall(SYS_prctl,
 * PR_SET_SECCOMP, ...)) removes the page and turns the page off for the process before it
 * goes on, and tells the os layer that a filter is in force (no purger thread from then
 * on, no prctl asked). Every other call goes straight on, as libc's would: the system call
 * itself, made by the instruction, with -1 and errno on failure.
 *
 * A filter installed by the instruction itself, not through libc (a program's own
 * assembly), is not seen: docs/design.md §12.
 */
#define _GNU_SOURCE
#include "internal.h"

#if USI_HOOKS

#include <linux/seccomp.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* Whether system call n with first argument a installs a seccomp filter (or strict mode,
 * which refuses even more). */
static int installs_filter(long n, unsigned long a)
{
    if (n == SYS_prctl)
        return a == PR_SET_SECCOMP;
    if (n == SYS_seccomp)
        return a == SECCOMP_SET_MODE_STRICT || a == SECCOMP_SET_MODE_FILTER;
    return 0;
}

/* As glibc's: six argument words are taken whatever the call (the kernel ignores those it
 * does not use; musl's syscall does the same). */
EXPORT long syscall(long n, ...)
{
    va_list ap;
    va_start(ap, n);
    long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
    long d = va_arg(ap, long), e = va_arg(ap, long), f = va_arg(ap, long);
    va_end(ap);
    if (USI_UNLIKELY(installs_filter(n, (unsigned long)a)))
        usi_live_before_filter();
    return usi_os_syscall(n, a, b, c, d, e, f);
}

EXPORT int prctl(int option, ...)
{
    va_list ap;
    va_start(ap, option);
    unsigned long b = va_arg(ap, unsigned long), c = va_arg(ap, unsigned long);
    unsigned long d = va_arg(ap, unsigned long), e = va_arg(ap, unsigned long);
    va_end(ap);
    if (USI_UNLIKELY(installs_filter(SYS_prctl, (unsigned long)option)))
        usi_live_before_filter();
    return (int)usi_os_syscall(SYS_prctl, option, (long)b, (long)c, (long)d, (long)e, 0);
}

#endif
