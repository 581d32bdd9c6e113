/* SPDX-License-Identifier: MIT */
/*
 * hooks.c - prctl and syscall as the program calls them, defined by the shared libraries
 * (libuslab.so and libuslab-preload.so, built with USLAB_HOOKS) so that uslab sees a
 * seccomp filter coming before the kernel installs it (docs/design.md §10.1).
 *
 * A filter installed after the live statistics page was made may refuse, or kill the
 * process for, the unlink that removes the page at exit; a Landlock domain may refuse it.
 * So the page goes first: a call that installs a filter (prctl(PR_SET_SECCOMP, ...),
 * syscall(SYS_seccomp, SECCOMP_SET_MODE_STRICT or SECCOMP_SET_MODE_FILTER, ...),
 * syscall(SYS_prctl, PR_SET_SECCOMP, ...)) or restricts the process with Landlock
 * (syscall(SYS_landlock_restrict_self, ...)) removes the page and turns the page off for
 * the process before it goes on; a seccomp filter is also made known to the os layer (no
 * purger thread from then on, no prctl asked). Every other call goes straight on, as
 * libc's would: the system call itself, made by the instruction, with -1 and errno on
 * failure.
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

/* What system call n with first argument a is about to do: SECCOMP, install a seccomp
 * filter (or strict mode, which refuses even more); LANDLOCK, restrict the process's file
 * access (an unlink at exit may be refused); else NONE. */
enum sandbox { NONE, SECCOMP, LANDLOCK };

static enum sandbox sandboxing(long n, unsigned long a)
{
    if (n == SYS_prctl)
        return a == PR_SET_SECCOMP ? SECCOMP : NONE;
    if (n == SYS_seccomp)
        return a == SECCOMP_SET_MODE_STRICT || a == SECCOMP_SET_MODE_FILTER ? SECCOMP : NONE;
#ifdef SYS_landlock_restrict_self
    if (n == SYS_landlock_restrict_self)
        return LANDLOCK;
#endif
    return NONE;
}

/* Before a call that sandboxes the process: the live page goes while it still can, and a
 * seccomp filter is known to the os layer. */
static void before_sandbox(enum sandbox kind)
{
    if (kind == SECCOMP)
        usi_os_note_filter();
    usi_live_before_sandbox();
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
    enum sandbox kind = sandboxing(n, (unsigned long)a);
    if (USI_UNLIKELY(kind != NONE))
        before_sandbox(kind);
    return usi_os_syscall(n, a, b, c, d, e, f);
}

EXPORT int prctl(int option, ...)
{
    va_list ap;
    va_start(ap, option);
    unsigned long b = va_arg(ap, unsigned long), c = va_arg(ap, unsigned long);
    unsigned long d = va_arg(ap, unsigned long), e = va_arg(ap, unsigned long);
    va_end(ap);
    if (USI_UNLIKELY(option == PR_SET_SECCOMP))
        before_sandbox(SECCOMP);
    return (int)usi_os_syscall(SYS_prctl, option, (long)b, (long)c, (long)d, (long)e, 0);
}

#endif
