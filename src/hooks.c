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
 * prctl asked from then on), and the purger thread is stopped and joined first, never to
 * start again (the filter may apply to every thread, TSYNC, and refuse its futex). Every other call
 * goes straight on, as libc's would: the system call itself, made by the instruction, with -1 and
 * errno on failure.
 *
 * A new effective user id (setuid, seteuid, setreuid, setresuid) would make the sticky
 * /dev/shm refuse the exit's unlink: the page goes first and is made again as the new user.
 * A new root or mount namespace (chroot, pivot_root, unshare(CLONE_NEWNS), setns into a
 * mount namespace) may make the page's path name another file at exit: the page goes
 * first there too, for good. _exit, _Exit, syscall(SYS_exit_group), quick_exit (a
 * handler) and daemon's parent, which run no destructor, remove the page before they
 * leave.
 *
 * Under USLAB_PROFILE (`uslab profile`) the same points write the request counts, which
 * malloc.c otherwise writes only from a destructor: _exit, _Exit, exit_group and
 * quick_exit before they leave, and the exec family before the call (if it fails, the
 * counting goes on and a later write replaces that file: nothing is counted twice). A
 * daemon's child takes the counts over from its parent, whose exit writes nothing.
 *
 * A filter installed by the instruction itself, not through libc (a program's own
 * assembly), is not seen: docs/design.md §12.
 */
#define _GNU_SOURCE
#include "internal.h"

#if USI_HOOKS

#include <dlfcn.h>
#include <errno.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* What system call n with arguments a, b is about to do: SECCOMP, install a seccomp filter;
 * STRICT, enter strict mode (read, write, exit and sigreturn only: as SECCOMP, and uslab
 * makes no optional system call from then on, usi_os_quiet); LANDLOCK, restrict the process's file
 * access (an unlink at exit may be refused); MOVE, change the process's root or mount
 * namespace (the page's path may name another file afterwards, or a new /dev/shm be
 * mounted later: no page from then on); USER, change the effective user id (the page is
 * made again as the new user); EXEC, replace the program (a new user, maybe: as USER, and
 * the profile is written first); EXIT, leave the process (exit_group); else NONE. */
enum sandbox { NONE, SECCOMP, STRICT, LANDLOCK, MOVE, USER, EXEC, EXIT };

/* prctl(PR_SET_SECCOMP, mode, ...). */
static enum sandbox seccomp_kind(unsigned long mode)
{
    return mode == SECCOMP_MODE_STRICT ? STRICT : SECCOMP;
}

static enum sandbox sandboxing(long n, unsigned long a, unsigned long b)
{
    switch (n) {
    case SYS_prctl:
        return a == PR_SET_SECCOMP ? seccomp_kind(b) : NONE;
    case SYS_seccomp: /* the flags (b) change nothing here: TSYNC or not, the thread goes */
        return a == SECCOMP_SET_MODE_STRICT   ? STRICT
               : a == SECCOMP_SET_MODE_FILTER ? SECCOMP
                                              : NONE;
#ifdef SYS_landlock_restrict_self
    case SYS_landlock_restrict_self:
        return LANDLOCK;
#endif
    case SYS_chroot:
    case SYS_pivot_root:
        return MOVE;
    case SYS_unshare:
        return a & CLONE_NEWNS ? MOVE : NONE;
    case SYS_exit_group:
        return EXIT;
    case SYS_execve:
    case SYS_execveat:
        return EXEC;
    default:
        return NONE;
    }
}

/* setns(fd, nstype): a mount namespace, or one the caller does not name. */
static enum sandbox setns_kind(unsigned long nstype)
{
    return nstype == 0 || (nstype & CLONE_NEWNS) ? MOVE : NONE;
}

/* Before a call that sandboxes, moves or ends the process: the live page goes while it
 * still can (made again after a change of user), and a seccomp filter is known to the os
 * layer. Before an exit or an exec, which run no destructor of this program, its request
 * counts are written (USLAB_PROFILE); so they are before a filter, under which a later
 * write could be killed (and before a change of user, below). */
static void before_sandbox(enum sandbox kind)
{
    int seccomp = kind == SECCOMP || kind == STRICT;
    if (kind == EXIT || kind == EXEC || seccomp)
        usi_profile_write();
    if (kind == EXIT) {
        usi_live_quick_exit();
        return;
    }
    if (seccomp) {
        usi_os_note_filter(); /* no thread is started from here on */
        usi_purge_never();    /* nor does one run under it */
    }
    usi_live_before_sandbox(kind == USER || kind == EXEC);
    if (kind == STRICT)
        usi_os_note_strict(1); /* last: the calls above are made by now */
}

/* After the call: strict mode refused (already under a filter, no seccomp in the kernel)
 * leaves the process free to make its calls again. */
static long after_sandbox(enum sandbox kind, long r)
{
    if (kind == STRICT && r == -1) {
        int e = errno;
        usi_os_note_strict(0);
        errno = e;
    }
    return r;
}

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x80
#endif

/* Calls the kernel refuses to a process with threads: unshare(CLONE_NEWUSER) (EINVAL), and
 * setns into a user namespace (EINVAL), a mount namespace (EINVAL: the fs is shared with
 * the other threads) or a time namespace (EUSERS), or into an unnamed one (nstype 0: the
 * fd may be any of these). A program that has joined its own threads would still have the
 * purger: that is stopped and joined first, and may start again after the call.
 * unshare(CLONE_NEWNS) and unshare(CLONE_NEWTIME) work with threads (the first gives the
 * caller its own fs, the second is for children only). */
static int pauses_purger(long n, unsigned long a, unsigned long b)
{
    if (n == SYS_unshare)
        return (a & CLONE_NEWUSER) != 0;
    if (n == SYS_setns)
        return b == 0 || (b & (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWTIME));
    return 0;
}

static long user_ns_call(long n, long a, long b)
{
    int paused = usi_purge_pause();
    long r = usi_os_syscall(n, a, b, 0, 0, 0, 0);
    int e = errno;
    if (paused)
        usi_purge_resume();
    errno = e;
    return r;
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
    enum sandbox kind = n == SYS_setns ? setns_kind((unsigned long)b)
                                       : sandboxing(n, (unsigned long)a, (unsigned long)b);
    if (USI_UNLIKELY(kind != NONE))
        before_sandbox(kind);
    if (USI_UNLIKELY(pauses_purger(n, (unsigned long)a, (unsigned long)b)))
        return user_ns_call(n, a, b);
    if (USI_UNLIKELY(kind == STRICT))
        return after_sandbox(kind, usi_os_syscall(n, a, b, c, d, e, f));
    return usi_os_syscall(n, a, b, c, d, e, f);
}

EXPORT int prctl(int option, ...)
{
    va_list ap;
    va_start(ap, option);
    unsigned long b = va_arg(ap, unsigned long), c = va_arg(ap, unsigned long);
    unsigned long d = va_arg(ap, unsigned long), e = va_arg(ap, unsigned long);
    va_end(ap);
    if (USI_UNLIKELY(option == PR_SET_SECCOMP)) {
        enum sandbox kind = seccomp_kind(b);
        before_sandbox(kind);
        return (int)after_sandbox(
            kind, usi_os_syscall(SYS_prctl, option, (long)b, (long)c, (long)d, (long)e, 0));
    }
    return (int)usi_os_syscall(SYS_prctl, option, (long)b, (long)c, (long)d, (long)e, 0);
}

/* glibc's chroot, unshare and setns are the system calls themselves. */
EXPORT int chroot(const char *path)
{
    before_sandbox(MOVE);
    return (int)usi_os_syscall(SYS_chroot, (long)path, 0, 0, 0, 0, 0);
}

EXPORT int unshare(int flags)
{
    if (flags & CLONE_NEWNS)
        before_sandbox(MOVE);
    if (pauses_purger(SYS_unshare, (unsigned)flags, 0))
        return (int)user_ns_call(SYS_unshare, flags, 0);
    return (int)usi_os_syscall(SYS_unshare, flags, 0, 0, 0, 0, 0);
}

EXPORT int setns(int fd, int nstype)
{
    if (setns_kind((unsigned)nstype) != NONE)
        before_sandbox(MOVE);
    if (pauses_purger(SYS_setns, (unsigned)fd, (unsigned)nstype))
        return (int)user_ns_call(SYS_setns, fd, nstype);
    return (int)usi_os_syscall(SYS_setns, fd, nstype, 0, 0, 0, 0);
}

/* The set*uid family changes the user id the page's name and ownership are for: with a
 * new effective id, the sticky /dev/shm would refuse the exit's unlink. The page goes
 * first (as the old user) and is made again as the new one. glibc's own functions do the
 * change (they apply it to every thread): found with dlsym, past this library. */
typedef int (*set1_fn)(uid_t);
typedef int (*set2_fn)(uid_t, uid_t);
typedef int (*set3_fn)(uid_t, uid_t, uid_t);

/* The next definitions (glibc's, unless another library comes between) of the functions
 * hooked here, looked up when the library loads in the symbol tables of the objects after
 * it (usi_os_defined_after: memory only, no lock). Not with dlsym at the first call: that
 * takes the dynamic linker's lock, so a process's first pthread_create waited for another
 * thread's dlopen, and a constructor that waited for it deadlocked (session 12's audit;
 * glibc's own functions take no such lock); and a set*uid call may come in the child of
 * a multi-threaded fork (setuid is async-signal-safe), where the lock could be held by a
 * thread that is gone. dlsym only for a name that lookup cannot resolve. */
enum {
    NEXT_SETUID,
    NEXT_SETEUID,
    NEXT_SETREUID,
    NEXT_SETRESUID,
    NEXT_EXECVE,
    NEXT_EXECV,
    NEXT_EXECVP,
    NEXT_EXECVPE,
    NEXT_FEXECVE,
    NEXT_DAEMON,
    NEXT_PTHREAD_CREATE,
    NEXT_PTHREAD_JOIN,
    NEXT_PTHREAD_TRYJOIN,
    NEXT_PTHREAD_TIMEDJOIN,
    NEXT_PTHREAD_CLOCKJOIN,
    NEXT_PTHREAD_DETACH,
    NEXT_THRD_CREATE,
    NEXT_THRD_JOIN,
    NEXT_COUNT
};
static void *next_fns[NEXT_COUNT];
static const char *const next_names[NEXT_COUNT] = {"setuid",
                                                   "seteuid",
                                                   "setreuid",
                                                   "setresuid",
                                                   "execve",
                                                   "execv",
                                                   "execvp",
                                                   "execvpe",
                                                   "fexecve",
                                                   "daemon",
                                                   "pthread_create",
                                                   "pthread_join",
                                                   "pthread_tryjoin_np",
                                                   "pthread_timedjoin_np",
                                                   "pthread_clockjoin_np",
                                                   "pthread_detach",
                                                   "thrd_create",
                                                   "thrd_join"};

/* libc.so.6's own registration: at_quick_exit is a stub of libc_nonshared.a that the link
 * puts at the end of our text, a page no other start-up code touches (design §7). No owner
 * (dso NULL), as the fork handlers: the library is never unloaded. */
extern int __cxa_at_quick_exit(void (*fn)(void *), void *dso);

static void at_quick_exit_handler(void *unused)
{
    (void)unused;
    usi_profile_write();
    usi_live_quick_exit();
}

__attribute__((constructor)) static void hooks_resolve(void)
{
    /* The pthread family's at their first call (next_fn): most processes make no thread. */
    void *found[NEXT_PTHREAD_CREATE];
    usi_os_defined_after(next_names, found, NEXT_PTHREAD_CREATE);
    for (int i = 0; i < NEXT_PTHREAD_CREATE; i++)
        __atomic_store_n(&next_fns[i], found[i] ? found[i] : dlsym(RTLD_NEXT, next_names[i]),
                         __ATOMIC_RELEASE);
    /* The purger's pthread_create: the first definition in lookup order (a sanitizer's
     * interceptor must see its thread; else the hook below, which counts the depth). */
    usi_purge_set_thread_create(
        usi_os_defined_before("pthread_create") == 0
            ? pthread_create
            : (usi_thread_create_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "pthread_create"));
    /* quick_exit runs no destructor, and glibc's reaches its own _exit, not this one. */
    __cxa_at_quick_exit(at_quick_exit_handler, NULL);
}

static void *next_fn(int i)
{
    void *f = __atomic_load_n(&next_fns[i], __ATOMIC_ACQUIRE);
    if (!f) {
        int e = errno; /* a lookup leaves the program's errno as it was */
        usi_os_defined_after(&next_names[i], &f, 1);
        if (f || (f = dlsym(RTLD_NEXT, next_names[i])) != NULL)
            __atomic_store_n(&next_fns[i], f, __ATOMIC_RELEASE);
        errno = f ? e : ENOSYS;
    }
    return f;
}

static void before_euid(uid_t euid)
{
    if (euid != (uid_t)-1 && euid != geteuid()) {
        usi_profile_write(); /* the new user may not write where the old one could */
        before_sandbox(USER);
    }
}

EXPORT int setuid(uid_t uid)
{
    set1_fn f = (set1_fn)(uintptr_t)next_fn(NEXT_SETUID);
    before_euid(uid);
    return f ? f(uid) : -1;
}

EXPORT int seteuid(uid_t euid)
{
    set1_fn f = (set1_fn)(uintptr_t)next_fn(NEXT_SETEUID);
    before_euid(euid);
    return f ? f(euid) : -1;
}

EXPORT int setreuid(uid_t ruid, uid_t euid)
{
    set2_fn f = (set2_fn)(uintptr_t)next_fn(NEXT_SETREUID);
    before_euid(euid);
    return f ? f(ruid, euid) : -1;
}

EXPORT int setresuid(uid_t ruid, uid_t euid, uid_t suid)
{
    set3_fn f = (set3_fn)(uintptr_t)next_fn(NEXT_SETRESUID);
    before_euid(euid);
    return f ? f(ruid, euid, suid) : -1;
}

/* glibc's pthread_create, the pthread_join family and pthread_detach (and C11's
 * thrd_create and thrd_join, which reach them inside libc) hold its stack-cache
 * lock for a moment (a thread's stack taken from, or given back to, the cache), and
 * pthread_create waits for that lock. A signal handler that interrupts one of them and
 * whose malloc or free is the kick that would start the purger thread would call
 * pthread_create there and wait for ever (design §3). So each is bracketed: while this
 * thread is inside, its kicks leave the start to a later one (usi_purge_no_start).
 * The work is glibc's, found with dlsym past this library. A thread cancelled inside
 * pthread_join leaves with its count raised: it starts no purger on its way out. */
typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
typedef int (*join_fn)(pthread_t, void **);
typedef int (*timedjoin_fn)(pthread_t, void **, const struct timespec *);
typedef int (*clockjoin_fn)(pthread_t, void **, clockid_t, const struct timespec *);
typedef int (*detach_fn)(pthread_t);

/* A new thread starts in a trampoline that calls its start routine under a cleanup
 * handler: when the routine returns, or pthread_exit or a cancellation unwinds it, the
 * thread is marked as leaving (usi_tcache_thread_leaving), so that a first call into uslab
 * from its exit's destructors makes no thread cache. One made in glibc's last round of
 * thread-specific data destructors would never be flushed (design §4, "Thread exit").
 *
 * The routine and its argument reach the new thread in one of START_SLOTS static slots,
 * never in an allocation: a block freed by the new thread would make it a thread cache,
 * also where it never allocates. A slot is claimed by the creating thread (busy 0 -> 1)
 * and released by the new thread once it has read it, or by the creator if the creation
 * fails. With every slot busy (START_SLOTS threads created and not yet running), the
 * thread starts without the trampoline, as before: design §12. Invariant: a slot whose
 * busy is 0 is read by no thread. */
#define START_SLOTS 256
struct start_slot {
    int busy;    /* 1 from the claim until the new thread (or a failed create) frees it */
    int restore; /* 1: the thread started with every signal blocked; mask is
                  * the one it would have started with */
    void *(*start)(void *);   /* pthread_create's routine, or */
    int (*c11_start)(void *); /* thrd_create's */
    void *arg;
    sigset_t mask;
};
static struct start_slot start_slots[START_SLOTS];

/* Whether the program's calls reach this library's pthread_create (or thrd_create) first.
 * Another definition first in lookup order (a sanitizer's interceptor in the executable, a
 * tracer preloaded before uslab) calls ours as the real one and expects its own start
 * routine to run first in the new thread: ThreadSanitizer sets up the thread there, and
 * the trampoline's code before it crashed every threaded test of `make test-tsan`. So the
 * trampoline is used only where ours is the first: 1 yes, -1 no, 0 not asked yet. */
static int create_first[2];

static int hook_is_first(int which, const char *name)
{
    int v = __atomic_load_n(&create_first[which], __ATOMIC_ACQUIRE);
    if (!v) {
        /* Not dlsym(RTLD_DEFAULT): in a non-PIE executable that takes the function's
         * address, it answers with the executable's own stub (the audit's kr_nopie). */
        int e = errno;
        v = usi_os_defined_before(name) == 0 ? 1 : -1;
        errno = e;
        __atomic_store_n(&create_first[which], v, __ATOMIC_RELEASE);
    }
    return v > 0;
}

/* The lowest idle slot: slots are freed as their threads start, so a process touches only
 * as many of the slots' pages as it has threads being created at once. */
static struct start_slot *start_slot_claim(void)
{
    for (unsigned i = 0; i < START_SLOTS; i++) {
        struct start_slot *s = &start_slots[i];
        int idle = 0;
        if (!__atomic_load_n(&s->busy, __ATOMIC_RELAXED) &&
            __atomic_compare_exchange_n(&s->busy, &idle, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            return s;
    }
    return NULL;
}

static void start_slot_release(struct start_slot *s)
{
    __atomic_store_n(&s->busy, 0, __ATOMIC_RELEASE);
}

/* glibc unblocks the new thread's signals just before it calls the start routine: a signal
 * already pending runs its handler there, before the trampoline has read its slot, and a
 * handler that leaves the thread (pthread_exit, siglongjmp) kept the slot busy for good
 * (the twelfth audit: 400 such threads, and no later thread had the trampoline). So the
 * creator blocks every signal around glibc's call, which the thread inherits, and the
 * trampoline sets the creator's mask once the slot is free (under the cleanup handler: a
 * handler that leaves then still marks the thread). Not where the attributes carry a mask
 * of their own (pthread_attr_setsigmask_np), which glibc sets at the start instead: there
 * the window stays (design §12). Returns whether it blocked; *old is the mask to restore. */
static int start_block_signals(struct start_slot *s, const pthread_attr_t *attr, sigset_t *old)
{
    s->restore = 0;
#ifdef PTHREAD_ATTR_NO_SIGMASK_NP
    sigset_t own;
    if (attr && pthread_attr_getsigmask_np(attr, &own) == 0)
        return 0;
#else
    (void)attr;
#endif
    sigset_t all;
    sigfillset(&all);
    if (pthread_sigmask(SIG_BLOCK, &all, old) != 0)
        return 0;
    s->mask = *old;
    s->restore = 1;
    return 1;
}

static void start_left(void *unused)
{
    (void)unused;
    usi_tcache_thread_leaving();
}

static void *start_trampoline(void *p)
{
    struct start_slot *s = p;
    void *(*start)(void *) = s->start;
    void *arg = s->arg;
    int restore = s->restore;
    sigset_t mask = s->mask;
    start_slot_release(s);
    void *r;
    pthread_cleanup_push(start_left, NULL);
    if (restore)
        pthread_sigmask(SIG_SETMASK, &mask, NULL);
    r = start(arg);
    pthread_cleanup_pop(1);
    return r;
}

/* glibc runs a thread made by thrd_create as int (*)(void *) and keeps its int result. */
static int start_trampoline_c11(void *p)
{
    struct start_slot *s = p;
    int (*start)(void *) = s->c11_start;
    void *arg = s->arg;
    int restore = s->restore;
    sigset_t mask = s->mask;
    start_slot_release(s);
    int r;
    pthread_cleanup_push(start_left, NULL);
    if (restore)
        pthread_sigmask(SIG_SETMASK, &mask, NULL);
    r = start(arg);
    pthread_cleanup_pop(1);
    return r;
}

/* A creation through the trampoline, if it may use one: the slot (NULL: none, the routine
 * starts directly) and the creator's signal mask while glibc's call runs. */
struct start_call {
    struct start_slot *slot;
    int blocked;
    sigset_t old;
};

/* Before glibc's call: a slot when the hook is the first definition and one is idle, with
 * the routine, its argument and the blocked signals (start_block_signals). */
static void start_begin(struct start_call *call, int which, const char *name,
                        const pthread_attr_t *attr, void *(*start)(void *),
                        int (*c11_start)(void *), void *arg)
{
    call->blocked = 0;
    call->slot = hook_is_first(which, name) ? start_slot_claim() : NULL;
    if (call->slot) {
        call->slot->start = start;
        call->slot->c11_start = c11_start;
        call->slot->arg = arg;
        call->blocked = start_block_signals(call->slot, attr, &call->old);
    }
}

/* After it: the creator's mask back, and the slot freed if no thread will read it. */
static void start_end(struct start_call *call, int created)
{
    if (call->blocked)
        pthread_sigmask(SIG_SETMASK, &call->old, NULL);
    if (call->slot && !created)
        start_slot_release(call->slot);
}

EXPORT int pthread_create(pthread_t *restrict t, const pthread_attr_t *restrict attr,
                          void *(*start)(void *), void *restrict arg)
{
    create_fn f = (create_fn)(uintptr_t)next_fn(NEXT_PTHREAD_CREATE);
    if (!f)
        return ENOSYS;
    struct start_call call;
    start_begin(&call, 0, "pthread_create", attr, start, NULL, arg);
    usi_purge_thread_creating();
    usi_purge_no_start(1);
    int r = call.slot ? f(t, attr, start_trampoline, call.slot) : f(t, attr, start, arg);
    usi_purge_no_start(-1);
    start_end(&call, r == 0);
    return r;
}

static int join_with(int which, pthread_t t, void **ret)
{
    join_fn f = (join_fn)(uintptr_t)next_fn(which);
    if (!f)
        return ENOSYS;
    usi_purge_no_start(1);
    int r = f(t, ret);
    usi_purge_no_start(-1);
    return r;
}

EXPORT int pthread_join(pthread_t t, void **ret)
{
    return join_with(NEXT_PTHREAD_JOIN, t, ret);
}

EXPORT int pthread_tryjoin_np(pthread_t t, void **ret)
{
    return join_with(NEXT_PTHREAD_TRYJOIN, t, ret);
}

EXPORT int pthread_timedjoin_np(pthread_t t, void **ret, const struct timespec *abstime)
{
    timedjoin_fn f = (timedjoin_fn)(uintptr_t)next_fn(NEXT_PTHREAD_TIMEDJOIN);
    if (!f)
        return ENOSYS;
    usi_purge_no_start(1);
    int r = f(t, ret, abstime);
    usi_purge_no_start(-1);
    return r;
}

EXPORT int pthread_clockjoin_np(pthread_t t, void **ret, clockid_t clock,
                                const struct timespec *abstime)
{
    clockjoin_fn f = (clockjoin_fn)(uintptr_t)next_fn(NEXT_PTHREAD_CLOCKJOIN);
    if (!f)
        return ENOSYS;
    usi_purge_no_start(1);
    int r = f(t, ret, clock, abstime);
    usi_purge_no_start(-1);
    return r;
}

EXPORT int pthread_detach(pthread_t t)
{
    detach_fn f = (detach_fn)(uintptr_t)next_fn(NEXT_PTHREAD_DETACH);
    if (!f)
        return ENOSYS;
    usi_purge_no_start(1);
    int r = f(t);
    usi_purge_no_start(-1);
    return r;
}

/* C11's: glibc's call its pthread functions from inside libc, past these hooks. */
typedef int (*thrd_create_fn)(thrd_t *, thrd_start_t, void *);
typedef int (*thrd_join_fn)(thrd_t, int *);

EXPORT int thrd_create(thrd_t *t, thrd_start_t start, void *arg)
{
    thrd_create_fn f = (thrd_create_fn)(uintptr_t)next_fn(NEXT_THRD_CREATE);
    if (!f)
        return thrd_error;
    struct start_call call;
    start_begin(&call, 1, "thrd_create", NULL, NULL, start, arg);
    usi_purge_thread_creating();
    usi_purge_no_start(1);
    int r = call.slot ? f(t, start_trampoline_c11, call.slot) : f(t, start, arg);
    usi_purge_no_start(-1);
    start_end(&call, r == thrd_success);
    return r;
}

EXPORT int thrd_join(thrd_t t, int *res)
{
    thrd_join_fn f = (thrd_join_fn)(uintptr_t)next_fn(NEXT_THRD_JOIN);
    if (!f)
        return thrd_error;
    usi_purge_no_start(1);
    int r = f(t, res);
    usi_purge_no_start(-1);
    return r;
}

/* The exec family: the new image runs no destructor of this one, so the page goes first
 * (made again a second later if the call fails) and the profile is written. A vfork
 * child's exec leaves its parent's page and profile alone (both compare the pid). The work
 * is glibc's (PATH search, ENOEXEC scripts): execl, execlp and execle gather their
 * arguments and go through execv, execvp and execve. */
typedef int (*exec_fn)(const char *, char *const[], char *const[]);
typedef int (*execv_fn)(const char *, char *const[]);
typedef int (*fexec_fn)(int, char *const[], char *const[]);

static void before_exec(void)
{
    before_sandbox(EXEC);
}

EXPORT int execve(const char *path, char *const argv[], char *const envp[])
{
    exec_fn f = (exec_fn)(uintptr_t)next_fn(NEXT_EXECVE);
    before_exec();
    return f ? f(path, argv, envp) : -1;
}

EXPORT int execv(const char *path, char *const argv[])
{
    execv_fn f = (execv_fn)(uintptr_t)next_fn(NEXT_EXECV);
    before_exec();
    return f ? f(path, argv) : -1;
}

EXPORT int execvp(const char *file, char *const argv[])
{
    execv_fn f = (execv_fn)(uintptr_t)next_fn(NEXT_EXECVP);
    before_exec();
    return f ? f(file, argv) : -1;
}

EXPORT int execvpe(const char *file, char *const argv[], char *const envp[])
{
    exec_fn f = (exec_fn)(uintptr_t)next_fn(NEXT_EXECVPE);
    before_exec();
    return f ? f(file, argv, envp) : -1;
}

EXPORT int fexecve(int fd, char *const argv[], char *const envp[])
{
    fexec_fn f = (fexec_fn)(uintptr_t)next_fn(NEXT_FEXECVE);
    before_exec();
    return f ? f(fd, argv, envp) : -1;
}

EXPORT int execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags)
{
    before_exec();
    return (int)usi_os_syscall(SYS_execveat, dirfd, (long)path, (long)argv, (long)envp, flags, 0);
}

/* execl, execlp and execle: the arguments counted first, then gathered into an array of
 * exactly that size on the stack (as glibc's do), the environment of execle after them. */
static size_t count_args(const char *arg0, va_list ap)
{
    size_t n = 1;
    for (const char *a = arg0; a; a = va_arg(ap, const char *))
        n++;
    return n;
}

static void gather(const char *arg0, va_list ap, char **argv, char *const **envp)
{
    size_t n = 0;
    for (const char *a = arg0; a; a = va_arg(ap, const char *))
        argv[n++] = (char *)a;
    argv[n] = NULL;
    if (envp)
        *envp = va_arg(ap, char *const *);
}

#define EXECL(name, next_call, want_env)                                                           \
    EXPORT int name(const char *file, const char *arg, ...)                                        \
    {                                                                                              \
        va_list ap, count;                                                                         \
        va_start(ap, arg);                                                                         \
        va_copy(count, ap);                                                                        \
        size_t n = count_args(arg, count);                                                         \
        va_end(count);                                                                             \
        char **argv = __builtin_alloca(n * sizeof *argv);                                          \
        char *const *envp = NULL;                                                                  \
        gather(arg, ap, argv, want_env ? &envp : NULL);                                            \
        va_end(ap);                                                                                \
        (void)envp;                                                                                \
        return next_call;                                                                          \
    }

EXECL(execl, execv(file, argv), 0)
EXECL(execlp, execvp(file, argv), 0)
EXECL(execle, execve(file, argv, envp), 1)

/* daemon: its parent leaves by glibc's own _exit, not this one. The page goes first, and
 * the child (a fork child: usi_live_postfork_child) makes its own; the child takes over
 * the profile's counts (its parent's included), which its exit writes. */
EXPORT int daemon(int nochdir, int noclose)
{
    int (*f)(int, int) = (int (*)(int, int))(uintptr_t)next_fn(NEXT_DAEMON);
    if (!f)
        return -1;
    before_sandbox(USER);
    int parent = usi_os_getpid();
    int r = f(nochdir, noclose);
    if (r == 0)
        usi_profile_adopt(parent);
    return r;
}

/* _exit and _Exit leave without destructors: the profile is written and the page goes
 * here (a Python fork child's os._exit, a worker process's quick exit). Then the system
 * call, as glibc's. */
EXPORT void _exit(int status)
{
    usi_profile_write();
    usi_live_quick_exit();
    for (;;)
        usi_os_syscall(SYS_exit_group, status, 0, 0, 0, 0, 0);
}

EXPORT void _Exit(int status)
{
    _exit(status);
}

#endif
