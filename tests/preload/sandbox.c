/* SPDX-License-Identifier: MIT */
/*
 * sandbox.c - a guest allocator changes nothing a sandbox, a namespace or a way out of the
 * process can notice (issues 15 and 37, docs/design.md §3): it starts no thread where none
 * can live, makes no system call glibc's malloc would not, and leaves no file anywhere
 * (before issue 37 a live statistics page in /dev/shm, which each child mode below checked
 * was made and removed; now each checks that none ever appears). Run under
 * LD_PRELOAD=libuslab-preload.so (and without, as glibc's reference). Modes (argv[1]):
 *  - `seccomp`: a single-threaded program installs a filter that allows only memory system
 *    calls (OpenSSH's pre-auth sandbox: brk, mmap, mprotect, madvise, munmap, futex, the
 *    sleeps, and write and exit here), anything else kills it with SIGSYS; then it allocates
 *    and frees, idles past the purge delay and frees more;
 *  - `seccomp-advice`: a child works under a filter that checks madvise's advice as
 *    OpenSSH's pre-auth sandbox does (sandbox-seccomp-filter.c: MADV_NORMAL, FREE,
 *    DONTNEED, DONTFORK, DONTDUMP and WIPEONFORK pass, any other advice gets EINVAL), so
 *    that uslab's guard markers (MADV_GUARD_INSTALL and _REMOVE) and MADV_NOHUGEPAGE are
 *    refused: magazines made before the filter (guard markers) are freed under it, and
 *    the spans they leave are written as blocks; magazines made under it must have their
 *    guard pages all the same, made by PROT_NONE: the parent counts the child's anonymous
 *    PROT_NONE mappings of one or two pages in /proc/PID/maps (none under glibc alone,
 *    nor with markers).
 *  - `seccomp-threads`: the same in a program that has had a thread, with a filter that also
 *    allows prctl (how uslab asks for the seccomp mode) but still no clone;
 *  - `seccomp-new-thread`: a second thread, which has made no call of uslab's, installs the
 *    memory-only filter on itself alone (no prctl) and allocates and frees blocks up to 200
 *    KB: its first allocation asks the kernel nothing, as glibc's does not (before, its thread
 * cache's first call asked `rt_sigprocmask` whether glibc was tearing the thread down, and the
 *    filter killed it). It then parks; the main thread ends the program;
 *  - `unshare`: a single-threaded program allocates and frees, idles, frees more, then calls
 *    unshare(CLONE_NEWUSER), which the kernel refuses (EINVAL) to a process with threads;
 *  - `unshare-fork`: the same in the child of a program that has had threads and a purger.
 *  - `unshare-joined`: a program starts a thread; both allocate and free past the purge
 *    delay (the purger thread starts); the program joins its thread and calls
 *    unshare(CLONE_NEWUSER), which glibc's process (one thread) gets: so must uslab's.
 *  - `clone-userns`: as `unshare-joined` up to the join and the frees after it (the purger
 *    thread runs), then children that ran no fork handler, one made by glibc's clone() and
 *    one by syscall(SYS_clone), allocate and free (kicks) and call unshare(CLONE_NEWUSER),
 *    which their one thread gets: the parent's purger thread is not theirs to stop (the
 *    pause joined it for ever before); then a vfork child does the same without
 *    allocating, and the parent itself after it (its state untouched by the vfork child).
 *    Each child must exit 0 within 10 s.
 *  - `clone-vm`: a thread that never allocates is parked; the main thread allocates, then
 *    a clone() child that shares the memory (CLONE_VM, no CLONE_THREAD) and runs on the
 *    parked thread's TLS (CLONE_SETTLS: its own thread cache, a second user of uslab)
 *    allocates and frees past the purge delay and returns (glibc's clone() then makes the
 *    exit system call, which ends that task only): it must be reaped within 10 s, with
 *    its memory's contents right. A purger thread started in the child (before: the
 *    second user's kick started it there) kept the child alive for good, and the parent's
 *    waitpid hung.
 *  - `seccomp-tsync`: as `unshare-joined` up to the join and the frees after it (the purger
 *    thread runs), then a memory-only filter (no futex, no prctl) for every thread
 *    (SECCOMP_FILTER_FLAG_TSYNC, through syscall(SYS_seccomp)); then it frees and idles
 *    past the purge delay: the purger thread must be gone before the filter (it was
 *    killed by SIGSYS at its next futex).
 *  - `setns-joined`: as `unshare-joined` up to the join and the frees after it (the purger
 *    thread runs), then setns into its own mount namespace and its own time namespace,
 *    each named (CLONE_NEWNS, CLONE_NEWTIME) and unnamed (0), with frees between them
 *    (the purger may start again): the kernel refuses them to a process with threads
 *    (EINVAL, EUSERS), and glibc's process has one. 77 where setns is not allowed.
 *  - `late-prctl`, `late-syscall`: a child allocates past the purge delay (no file may
 *    appear meanwhile: checked), then installs a filter
 *    that allows only memory calls, write and exit (no prctl, no unlink, no getpid), by
 *    prctl(PR_SET_SECCOMP) or by syscall(SYS_seccomp), works and returns from main, so
 *    exit's destructors run under the filter. The parent checks that the child exited 0
 *    (not killed for a system call at exit) and that it left no file.
 *  - `late-vfork`: a child allocates past the purge delay, then a vfork child of it
 *    installs a filter that allows everything and leaves with _exit; no file is left.
 *  - `inherited`: a child installs a filter that kills for prctl (anything else allowed) and
 *    execs this program as `inherited-child`, which starts a thread and allocates past
 *    the purge delay: uslab must learn of the filter without prctl (no live page, no purger
 *    thread) and the child exit 0, not die of SIGSYS.
 *  - `nproc`: under a soft RLIMIT_NPROC of 1000 (set on purpose: a judge, a sandbox against
 *    fork bombs) a program with two threads that both allocate past the
 *    purge delay, still has two threads: no purger thread takes a slot of the limit.
 *  - `chroot`, `mount-ns`, `quick-exit`: a child allocates past the purge delay, then calls
 *    chroot into an empty directory, or unshare(CLONE_NEWNS) and mounts an empty tmpfs
 *    over /dev/shm, or leaves with _exit; in each case no file may be left after it ends
 *    (when uslab made a page there, the exit's unlink named another file, or did not run).
 *    77 where the child may not chroot or unshare.
 *  - `exit-group`, `quick-exit-c`, `daemon`, `exec`: the same, leaving by
 *    syscall(SYS_exit_group), by quick_exit, by daemon() (whose parent leaves by glibc's own
 *    _exit), or by execl of /bin/true (a new image runs no destructor of the old one).
 *  - `signal-setuid`: (root only, else 77) the same, while a signal handler every 200 µs
 *    changes the effective user id and back (the hooks run inside the page's code, with
 *    its lock held by the interrupted thread: they must not wait for it). The mount-ns
 *    child also allocates between its unshare and its mount.
 *  - `setuid`: (root only, else 77) a child allocates past the purge delay, calls
 *    setuid(65534), allocates as long again and exits: no file of either user may be left.
 *  - `landlock`: as late-*, but the child restricts itself with Landlock so that no file
 *    may be removed anywhere (landlock_restrict_self through syscall()); no file may be
 *    left after it exits. 77 where the kernel has no Landlock.
 *  - `fsize`: a child lowers RLIMIT_FSIZE to 50 KiB (`ulimit -f 50`), allocates past the
 *    purge delay and exits (a file grown beyond the limit raises SIGXFSZ, which kills: the
 *    live statistics page of 104 KiB did). The parent checks that the child exited 0 and
 *    left no file.
 *  - `vfork-exit`: as late-*, but a raw clone child of the child (syscall(SYS_clone), a copy
 *    of its memory, no fork handlers) leaves with exit(), which must leave its parent's page
 *    alone; then a vfork child fails to exec and leaves with exit() instead of _exit() (a
 *    common bug: it runs the destructors in its parent's memory, where they are marked done,
 *    so the parent's own exit runs none of them). No page may be left after the child ends.
 *  - `clone-exec`: threads allocate and two more call uslab_reap in a loop (found with
 *    dlsym; it rewrites the page under its lock at once), while the main thread starts 300
 *    raw clones (syscall(SYS_clone): no fork handlers run) that call execl at once; a
 *    child that has not ended within 2 s hangs (it waited for a lock a thread of its
 *    parent held at the clone).
 *  - `shm-space`: in a private mount namespace with a 2 MiB tmpfs on /dev/shm (a container's
 *    small /dev/shm), a program (this one, executed as `shm-space-child`) with a thread
 *    allocates past the purge delay and then takes all but 64 KiB of the room /dev/shm had
 *    at its start (posix_fallocate): no file may have been made and the fallocate must
 *    succeed, as under glibc. Then with a 64 MiB tmpfs, where no file may appear either.
 *    77 where the mount namespace or the mount is refused.
 * Prints "sandbox ok" and exits 0. 77 (skipped): this machine refuses user namespaces.
 */
#define _GNU_SOURCE
#include "testutil.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/futex.h>
#include <linux/landlock.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#endif

#define ALLOW(nr)                                                                                  \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

/* The memory-only filters' calls but madvise (and futex, prctl): memory, the sleeps,
 * write and the exits. */
#ifdef __NR_brk
#define ALLOW_BRK ALLOW(__NR_brk),
#else
#define ALLOW_BRK
#endif
#ifdef __NR_nanosleep
#define ALLOW_NANOSLEEP ALLOW(__NR_nanosleep),
#else
#define ALLOW_NANOSLEEP
#endif
#define MEMORY_CALLS                                                                               \
    ALLOW_BRK ALLOW(__NR_mmap), ALLOW(__NR_mprotect), ALLOW(__NR_munmap), ALLOW(__NR_mremap),      \
        ALLOW_NANOSLEEP ALLOW(__NR_clock_nanosleep), ALLOW(__NR_clock_gettime), ALLOW(__NR_write), \
        ALLOW(__NR_exit_group), ALLOW(__NR_exit)

static void die(const char *what)
{
    /* No stdio under the filter: write(2) only. */
    ssize_t r = write(2, what, strlen(what));
    (void)r;
    _exit(1);
}

/* The success line, by write(2): no stdio under a filter. */
static void say_ok(void)
{
    static const char ok[] = "sandbox ok\n";
    if (write(1, ok, sizeof ok - 1) < 0)
        die("write failed\n");
}

/* BY_TSYNC: syscall(SYS_seccomp) with SECCOMP_FILTER_FLAG_TSYNC (every thread), and no
 * futex allowed: a program that joined its threads needs none. */
enum install { BY_PRCTL, BY_SYSCALL, BY_TSYNC };

static void install_filter_by(int allow_prctl, enum install how)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        ALLOW(__NR_madvise),
        MEMORY_CALLS,
        ALLOW(how == BY_TSYNC ? __NR_mremap : __NR_futex),
        ALLOW(allow_prctl ? __NR_prctl : __NR_exit),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
    };
    struct sock_fprog prog = {(unsigned short)(sizeof f / sizeof f[0]), f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        die("PR_SET_NO_NEW_PRIVS failed\n");
    unsigned flags = how == BY_TSYNC ? SECCOMP_FILTER_FLAG_TSYNC : 0;
    if (how != BY_PRCTL ? syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog) != 0
                        : prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
        die("installing the filter failed\n");
}

static void install_filter(int allow_prctl)
{
    install_filter_by(allow_prctl, BY_PRCTL);
}

/* A filter that checks madvise's advice as OpenSSH's pre-auth sandbox does (the advice
 * values it lets through; EINVAL for the rest), else allows what install_filter_by does
 * without futex and prctl (the child has no thread). */
static void install_advice_filter(void)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        /* madvise: its advice (the next 14 instructions), else on */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_madvise, 0, 14),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
        ALLOW(MADV_NORMAL),
        ALLOW(MADV_FREE),
        ALLOW(MADV_DONTNEED),
        ALLOW(MADV_DONTFORK),
        ALLOW(MADV_DONTDUMP),
        ALLOW(MADV_WIPEONFORK),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EINVAL),
        MEMORY_CALLS,
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
    };
    struct sock_fprog prog = {(unsigned short)(sizeof f / sizeof f[0]), f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
        die("installing the filter failed\n");
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Blocks of many sizes (slab classes and the system allocator's), written and checked,
 * freed in an order that empties slabs; returns nonzero on a wrong byte. Two rounds: four
 * took 0.7 s under glibc alone (its blocks above 128 KiB are mmapped, faulted and unmapped
 * each time), 60% of these tests' time where each ran under glibc too. */
static int workload_of(unsigned seed, int system_blocks)
{
    enum { N = 20000 };
    static unsigned char *p[N];
    static size_t len[N];
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < N; i++) {
            seed = seed * 1103515245u + 12345u;
            len[i] = (seed >> 8) % (i % 50 == 0 ? 200000 : 2000) + 1;
            if (i % 5000 == 1 && system_blocks) /* glibc's, set up before the sandbox */
                len[i] = ((size_t)1 << 20) + seed % 4096;
            p[i] = malloc(len[i]);
            if (!p[i])
                return 1;
            memset(p[i], (int)(i & 0xff), len[i]);
        }
        for (int i = 0; i < N; i++) {
            if (p[i][0] != (unsigned char)(i & 0xff) || p[i][len[i] - 1] != p[i][0])
                return 1;
            free(p[i]);
        }
    }
    return 0;
}

static int workload(unsigned seed)
{
    return workload_of(seed, 1);
}

/* Idles past the purge delay, between frees. */
static int work_and_idle(void)
{
    if (workload(1))
        return 1;
    sleep_ms(250);
    return workload(2);
}

static void *nothing(void *arg)
{
    return arg;
}

static void one_thread(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, nothing, NULL) != 0 || pthread_join(t, NULL) != 0)
        die("pthread_create failed\n");
}

/* The single-threaded rule (design §3): no purger thread was started here, so the kernel
 * sees one task, whatever uslab's hooks would do for the unshare itself. */
static void expect_one_task(void)
{
    int n = task_count();
    if (n != 1) {
        char msg[128];
        snprintf(msg, sizeof msg, "%d threads before unshare: uslab started one\n", n);
        die(msg);
    }
}

static int try_unshare(void)
{
    if (unshare(CLONE_NEWUSER) == 0)
        return 0;
    if (errno == EINVAL) {
        fprintf(stderr, "unshare(CLONE_NEWUSER): EINVAL: the process has threads\n");
        return 1;
    }
    printf("unshare(CLONE_NEWUSER) refused here (%s): skipped\n", strerror(errno));
    return 77;
}

static void live_page_path(char *buf, size_t len, pid_t pid)
{
    snprintf(buf, len, "/dev/shm/uslab.%u.%d", (unsigned)geteuid(), (int)pid);
}

/* Slow paths for 400 ms, four times the tests' purge delay (USLAB_PURGE_DELAY=100): passes
 * fall due, and a purger thread would start where uslab allowed one. (1.3 s, the live
 * statistics page's start, until session 56: the sandbox tests took 140 s of CPU.) */
static void allocate_past_the_delay(void)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        if (workload(3))
            die("wrong contents\n");
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 400);
}

/* Waits for child pid: 0 when it exited 0 and left no page, 77 when it exited 77 (its
 * step refused here), else 1 with a message. */
static int child_clean(pid_t pid)
{
    int st;
    if (waitpid(pid, &st, 0) != pid)
        die("waitpid failed\n");
    if (WIFEXITED(st) && WEXITSTATUS(st) == 77)
        return 77;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "the child %s %d\n",
                WIFSIGNALED(st) ? "was killed by signal" : "exited with",
                WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
        return 1;
    }
    char path[64];
    live_page_path(path, sizeof path, pid);
    if (access(path, F_OK) == 0) {
        fprintf(stderr, "the child left its page %s behind\n", path);
        return 1;
    }
    return 0;
}

/* Every 200 µs, while the main thread allocates and frees (and the page is made and
 * written, USLAB_LIVE=always makes it again at once), a signal handler changes the
 * effective user id to nobody and back: the hooks run inside the page's code. */
static void setuid_handler(int sig)
{
    (void)sig;
    int e = errno;
    if (seteuid(65534) == 0 && seteuid(0) != 0)
        _exit(3);
    errno = e;
}

static void signal_setuid(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = setuid_handler;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 200}, {0, 200}};
    setitimer(ITIMER_REAL, &it, NULL);
    allocate_past_the_delay();
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
}

static volatile int worker_stop;

/* Its own blocks (workload's arrays are the main thread's), freed so that slabs empty. */
static void *allocating_worker(void *arg)
{
    static void *q[4096];
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        for (int i = 0; i < 4096; i++)
            if (!(q[i] = malloc((size_t)(i % 700) + 1)))
                die("malloc failed\n");
        for (int i = 0; i < 4096; i++)
            free(q[i]);
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 400);
    while (!worker_stop)
        sleep_ms(5);
    return arg;
}

/* The Threads: field of /proc/self/status, or -1. */
static int thread_count(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int n = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "Threads:", 8) == 0)
            n = atoi(line + 8);
    if (f)
        fclose(f);
    return n;
}

/* Waits up to 10 s for child pid: its exit status, or -1 (killed) when it hung or died. */
static int wait_child(pid_t pid, const char *what)
{
    int st;
    for (int ms = 0; ms < 10000; ms++) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) {
            if (WIFEXITED(st))
                return WEXITSTATUS(st);
            fprintf(stderr, "the %s child was killed by signal %d\n", what, WTERMSIG(st));
            return -1;
        }
        if (r != 0)
            die("waitpid failed\n");
        sleep_ms(1);
    }
    fprintf(stderr, "the %s child hung\n", what);
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

/* A child that ran no fork handler: slow paths (kicks of the purger, whose thread stayed
 * in the parent), then a new user namespace. 0, 1 (EINVAL) or 77 (refused here). */
static int clone_child(void *arg)
{
    (void)arg;
    if (workload(7))
        return 1;
    return try_unshare();
}

/* Starts a worker that allocates, frees past the purge delay, joins it and frees again:
 * the purger thread runs (under uslab) and the process has one thread of its own. */
static void joined_and_purging(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, allocating_worker, NULL) != 0)
        die("pthread_create failed\n");
    if (work_and_idle())
        die("wrong contents\n");
    worker_stop = 1;
    pthread_join(t, NULL);
    if (work_and_idle()) /* frees after the join: kicks for the purger */
        die("wrong contents\n");
}

/* A stack of CHILD_STACK bytes for a clone() child (it grows down from the end); stdio
 * flushed, so the child writes only its own lines. */
#define CHILD_STACK (1 << 20)
static char *child_stack(void)
{
    char *stack = malloc(CHILD_STACK);
    if (!stack)
        die("malloc failed\n");
    fflush(stdout);
    fflush(stderr);
    return stack;
}

static int clone_userns(void)
{
    joined_and_purging();
    char *stack = child_stack();
    pid_t pid = clone(clone_child, stack + CHILD_STACK, SIGCHLD, NULL);
    if (pid < 0)
        die("clone failed\n");
    int r = wait_child(pid, "clone()");
    if (r == 0) {
        pid = (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
        if (pid < 0)
            die("syscall(SYS_clone) failed\n");
        if (pid == 0)
            _exit(clone_child(NULL));
        r = wait_child(pid, "syscall(SYS_clone)");
    }
    if (r == 0) {
        pid = vfork();
        if (pid < 0)
            die("vfork failed\n");
        if (pid == 0) /* no allocation, no stdio: the parent's memory */
            _exit(unshare(CLONE_NEWUSER) == 0 ? 0 : errno == EINVAL ? 1 : 77);
        r = wait_child(pid, "vfork");
    }
    free(stack);
    if (r == 0)
        r = try_unshare(); /* and the parent's own, after the vfork child */
    if (r < 0)
        return 1;
    if (r == 0)
        printf("sandbox ok\n");
    return r;
}

/* clone-vm: the parked thread's thread pointer, for the child's CLONE_SETTLS. */
static void *parked_tp;
static pthread_mutex_t parked_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t parked_cond = PTHREAD_COND_INITIALIZER;

static void *parked_no_alloc(void *arg)
{
    pthread_mutex_lock(&parked_lock);
    parked_tp = __builtin_thread_pointer();
    pthread_cond_signal(&parked_cond);
    pthread_mutex_unlock(&parked_lock);
    for (;;)
        pause();
    return arg;
}

/* The clone-vm child: its own slow paths, a second user of uslab in the shared memory. */
static int vm_child(void *arg)
{
    (void)arg;
    return work_and_idle() ? 3 : 0;
}

static int clone_vm(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, parked_no_alloc, NULL) != 0)
        die("pthread_create failed\n");
    pthread_mutex_lock(&parked_lock);
    while (!parked_tp)
        pthread_cond_wait(&parked_cond, &parked_lock);
    pthread_mutex_unlock(&parked_lock);
    if (workload(5)) /* the main thread: the first user */
        die("wrong contents\n");
    char *stack = child_stack();
    pid_t pid = clone(vm_child, stack + CHILD_STACK,
                      CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SETTLS | SIGCHLD, NULL, NULL,
                      parked_tp, NULL);
    if (pid < 0)
        die("clone failed\n");
    int r = wait_child(pid, "clone(CLONE_VM)");
    free(stack);
    if (r != 0)
        return 1;
    if (workload(6)) /* and the parent's memory still works */
        die("wrong contents\n");
    printf("sandbox ok\n");
    return 0;
}

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x80
#endif

static int setns_joined(void)
{
    static const struct {
        const char *path;
        int nstype;
    } steps[] = {{"/proc/self/ns/mnt", CLONE_NEWNS},
                 {"/proc/self/ns/mnt", 0},
                 {"/proc/self/ns/time", CLONE_NEWTIME},
                 {"/proc/self/ns/time", 0}};
    joined_and_purging();
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        int fd = open(steps[i].path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT) /* no time namespaces in this kernel */
            continue;
        if (fd < 0)
            die("cannot open a namespace\n");
        int r = setns(fd, steps[i].nstype);
        int e = errno;
        close(fd);
        if (r != 0 && e == EPERM) {
            printf("setns refused here: skipped\n");
            return 77;
        }
        if (r != 0) {
            fprintf(stderr, "setns(%s, %#x): %s\n", steps[i].path, (unsigned)steps[i].nstype,
                    strerror(e));
            return 1;
        }
        if (work_and_idle()) /* kicks: the purger may start again */
            die("wrong contents\n");
    }
    printf("sandbox ok\n");
    return 0;
}

static int nproc_limit(void)
{
    struct rlimit rl = {1000, 1000};
    if (setrlimit(RLIMIT_NPROC, &rl) != 0)
        die("setrlimit failed\n");
    pthread_t t;
    if (pthread_create(&t, NULL, allocating_worker, NULL) != 0)
        die("pthread_create failed\n");
    allocate_past_the_delay();
    sleep_ms(300); /* a purger thread started on the last frees would be there now */
    int n = thread_count();
    worker_stop = 1;
    pthread_join(t, NULL);
    if (n != 2) {
        fprintf(stderr, "%d threads under RLIMIT_NPROC 1000, the program made 2\n", n);
        return 1;
    }
    printf("sandbox ok\n");
    return 0;
}

/* The step of a child mode after its slow paths past the purge delay: each
 * leaves by returning (exit, with destructors), or by the way out it tests; exits 77
 * where the step is refused here. dir: an empty directory (chroot). */
static void child_step(const char *mode, const char *dir)
{
    char path[64];
    live_page_path(path, sizeof path, getpid());
    if (strcmp(mode, "late-prctl") == 0 || strcmp(mode, "late-syscall") == 0) {
        install_filter_by(0, strcmp(mode, "late-prctl") == 0 ? BY_PRCTL : BY_SYSCALL);
    } else if (strcmp(mode, "late-vfork") == 0) {
        static struct sock_filter allow[] = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
        static struct sock_fprog prog = {1, allow};
        pid_t c = vfork();
        if (c < 0)
            die("vfork failed\n");
        if (c == 0) {
            if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
                prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
                _exit(1);
            _exit(0);
        }
        int st;
        if (waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            die("the vfork child failed\n");
    } else if (strcmp(mode, "vfork-exit") == 0) {
        fflush(stdout);
        long k = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
        if (k < 0)
            die("clone failed\n");
        if (k == 0)
            exit(0);
        int st;
        if (waitpid((pid_t)k, &st, 0) != k || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            die("the clone child failed\n");
        pid_t c = vfork();
        if (c < 0)
            die("vfork failed\n");
        if (c == 0) {
            execl("/nonexistent/uslab-test", "uslab-test", (char *)NULL);
            exit(127); /* the bug: exit, not _exit, in a vfork child */
        }
        if (waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 127)
            die("the vfork child did not exit 127\n");
    } else if (strcmp(mode, "landlock") == 0) {
        /* Removing a file is handled and allowed nowhere. */
        struct landlock_ruleset_attr attr = {.handled_access_fs = LANDLOCK_ACCESS_FS_REMOVE_FILE};
        long fd = syscall(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
        if (fd < 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
            syscall(SYS_landlock_restrict_self, fd, 0) != 0)
            die("landlock_restrict_self failed\n");
        close((int)fd);
    } else if (strcmp(mode, "chroot") == 0) {
        if (chroot(dir) != 0 || chdir("/") != 0)
            _exit(77);
    } else if (strcmp(mode, "mount-ns") == 0) {
        /* Private first: the new mount must not reach the host's /dev/shm. */
        if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
            _exit(77);
        /* Slow paths between the unshare and the mount: no page may be made again in the
         * /dev/shm the mount then hides. */
        if (workload(5))
            die("wrong contents\n");
        if (mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=64k") != 0)
            _exit(77);
    } else if (strcmp(mode, "setuid") == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0)
            _exit(77);
        allocate_past_the_delay(); /* as user nobody */
    } else if (strcmp(mode, "signal-setuid") == 0) {
        signal_setuid();
    } else if (strcmp(mode, "exec") == 0) {
        execl("/bin/true", "true", (char *)NULL);
        die("exec failed\n");
    } else if (strcmp(mode, "daemon") == 0) {
        /* The parent leaves by glibc's own _exit; the daemon leaves at once. */
        if (daemon(1, 1) != 0)
            die("daemon failed\n");
        _exit(0);
    }
    if (workload(4))
        die("wrong contents after the step\n");
    if (strcmp(mode, "quick-exit") == 0)
        _exit(0);
    if (strcmp(mode, "exit-group") == 0)
        syscall(SYS_exit_group, 0);
    if (strcmp(mode, "quick-exit-c") == 0)
        quick_exit(0);
}

/* The child modes: a child allocates past the purge delay, takes its step and leaves; the
 * parent checks that it exited 0 and left no file (of either user, for `setuid`). `inherited` execs
 * this program under a filter instead. 77: skipped here. */
static int in_child(const char *mode, const char *self)
{
    int root_only = strcmp(mode, "setuid") == 0 || strcmp(mode, "signal-setuid") == 0;
    if (root_only && geteuid() != 0) {
        printf("not root: skipped\n");
        return 77;
    }
    if (strcmp(mode, "landlock") == 0 &&
        syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) < 1) {
        printf("no Landlock here (%s): skipped\n", strerror(errno));
        return 77;
    }
    char dir[] = "/tmp/uslab-sandbox-XXXXXX";
    if (!mkdtemp(dir))
        die("mkdtemp failed\n");
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        die("fork failed\n");
    if (pid == 0) {
        if (strcmp(mode, "inherited") == 0) {
            struct sock_filter f[] = {
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
                BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_prctl, 0, 1),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
                BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
            };
            struct sock_fprog prog = {(unsigned short)(sizeof f / sizeof f[0]), f};
            if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
                prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
                die("installing the filter failed\n");
            execl(self, self, "inherited-child", (char *)NULL);
            die("exec failed\n");
        }
        int fsize = strcmp(mode, "fsize") == 0;
        struct rlimit rl = {50 << 10, 50 << 10};
        if (fsize && setrlimit(RLIMIT_FSIZE, &rl) != 0)
            die("setrlimit failed\n");
        allocate_past_the_delay();
        char path[64];
        live_page_path(path, sizeof path, getpid());
        if (access(path, F_OK) == 0)
            die("a file of uslab's in /dev/shm\n");
        child_step(mode, dir);
        exit(0);
    }
    int r = child_clean(pid);
    rmdir(dir);
    char path[64];
    snprintf(path, sizeof path, "/dev/shm/uslab.65534.%d", (int)pid);
    if (r == 0 && access(path, F_OK) == 0) {
        fprintf(stderr, "the child left its page %s behind\n", path);
        unlink(path);
        r = 1;
    }
    if (r == 77)
        printf("%s refused here: skipped\n", mode);
    else if (r == 0)
        printf("sandbox ok\n");
    return r;
}

static volatile int clone_stop;

/* uslab_reap over and over: under uslab it rewrites the live page with its lock held. */
static void *reaper(void *arg)
{
    size_t (*reap)(void) = (size_t(*)(void))(uintptr_t)arg;
    while (!clone_stop)
        reap();
    return NULL;
}

static void *churner(void *arg)
{
    static __thread void *slot[256];
    unsigned x = (unsigned)(uintptr_t)arg;
    while (!clone_stop) {
        x = x * 1103515245u + 12345u;
        unsigned k = (x >> 8) & 255;
        if (slot[k]) {
            free(slot[k]);
            slot[k] = NULL;
        } else {
            slot[k] = malloc(((x >> 20) & 4095) + 1);
        }
    }
    for (int k = 0; k < 256; k++)
        free(slot[k]);
    return NULL;
}

static int clone_exec(void)
{
    void *reap = dlsym(RTLD_DEFAULT, "uslab_reap");
    pthread_t t[4];
    int n = 0;
    for (int i = 0; i < 2; i++)
        if (pthread_create(&t[n++], NULL, churner, (void *)(uintptr_t)(i + 1)) != 0)
            die("pthread_create failed\n");
    for (int i = 0; reap && i < 2; i++)
        if (pthread_create(&t[n++], NULL, reaper, reap) != 0)
            die("pthread_create failed\n");
    allocate_past_the_delay();
    int hung = 0, rounds = 300;
    for (int r = 0; r < rounds && !hung; r++) {
        long pid = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
        if (pid < 0)
            die("clone failed\n");
        if (pid == 0) {
            execl("/bin/true", "true", (char *)NULL);
            _exit(127);
        }
        struct timespec t0, now;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int st;
        while (waitpid((pid_t)pid, &st, WNOHANG) != pid) {
            clock_gettime(CLOCK_MONOTONIC, &now);
            if (now.tv_sec - t0.tv_sec >= 2) {
                fprintf(stderr, "round %d: the clone child hangs before its exec\n", r);
                hung = 1;
                kill((pid_t)pid, SIGKILL);
                waitpid((pid_t)pid, &st, 0);
                break;
            }
            sleep_ms(1);
        }
        if (!hung && (!WIFEXITED(st) || WEXITSTATUS(st) != 0))
            die("the clone child failed\n");
    }
    clone_stop = 1;
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    if (hung)
        return 1;
    printf("sandbox ok\n");
    return 0;
}

/* In a new /dev/shm (the caller's mount namespace): a thread, slow paths past the purge
 * delay, then no file of uslab's may be there, and in the small one (page 0) all but 64 KiB
 * of the room /dev/shm had at the start must be the program's. */
static int shm_space_child(int page)
{
    struct statvfs v;
    if (statvfs("/dev/shm", &v) != 0)
        die("statvfs failed\n");
    off_t want = (off_t)(v.f_bavail * v.f_frsize) - (64 << 10);
    one_thread();
    allocate_past_the_delay();
    char path[64];
    live_page_path(path, sizeof path, getpid());
    if (access(path, F_OK) == 0) {
        fprintf(stderr, "a file of uslab's in a /dev/shm of %llu KiB\n",
                (unsigned long long)(v.f_blocks * v.f_frsize >> 10));
        return 1;
    }
    if (!page) {
        int fd = open("/dev/shm/uslab-test-segment", O_RDWR | O_CREAT | O_EXCL, 0600);
        int r = fd < 0 ? errno : posix_fallocate(fd, 0, want);
        unlink("/dev/shm/uslab-test-segment");
        if (r != 0) {
            fprintf(stderr, "posix_fallocate of %lld KiB: %s\n", (long long)want >> 10,
                    strerror(r));
            return 1;
        }
    }
    return 0;
}

static int shm_space(const char *self)
{
    static const char *const sizes[] = {"size=2m", "size=64m"};
    for (int i = 0; i < 2; i++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0)
            die("fork failed\n");
        if (pid == 0) {
            if (unshare(CLONE_NEWNS) != 0 ||
                mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
                mount("tmpfs", "/dev/shm", "tmpfs", 0, sizes[i]) != 0)
                _exit(77);
            execl(self, self, "shm-space-child", i ? "1" : "0", (char *)NULL);
            die("exec failed\n");
        }
        int st;
        if (waitpid(pid, &st, 0) != pid)
            die("waitpid failed\n");
        if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
            printf("a private mount of /dev/shm refused here: skipped\n");
            return 77;
        }
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            return 1;
    }
    printf("sandbox ok\n");
    return 0;
}

/* Blocks of 16 bytes enough to fill a thousand magazines, written, checked and freed: the
 * depot keeps them in magazines (new slabs of the magazine caches, with guard pages). */
/* n blocks of 16 bytes, all live, then freed: the frees fill about n / 256 magazines, which
 * stay in the depot (3.2 MB for 200,000: inside the headroom, nothing is shed). */
static int magazine_burst(int n)
{
    enum { MOST = 400000 };
    static uint64_t *volatile b[MOST];
    for (int i = 0; i < n && i < MOST; i++) {
        b[i] = malloc(16);
        if (!b[i])
            return 1;
        b[i][0] = b[i][1] = (uint64_t)i;
    }
    int bad = 0;
    for (int i = 0; i < n && i < MOST; i++) {
        bad |= b[i][0] != (uint64_t)i || b[i][1] != (uint64_t)i;
        free(b[i]);
    }
    return bad;
}

/* The anonymous PROT_NONE mappings of one or two pages in /proc/PID/maps: guard pages
 * made by mprotect (a slab's, or two slabs' side by side), or -1. */
static int small_inaccessible_mappings(pid_t pid)
{
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[8];
        int end = 0;
        if (sscanf(line, "%lx-%lx %7s %*s %*s %*s%n", &lo, &hi, perms, &end) != 3)
            continue;
        const char *rest = line + end;
        while (*rest == ' ')
            rest++;
        if (strcmp(perms, "---p") == 0 && (*rest == '\n' || *rest == '\0') &&
            hi - lo <= 2 * (unsigned long)sysconf(_SC_PAGESIZE))
            n++;
    }
    fclose(f);
    return n;
}

static int seccomp_advice(void)
{
    int fds[2];
    if (pipe(fds) != 0)
        die("pipe failed\n");
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        die("fork failed\n");
    if (pid == 0) {
        close(fds[0]);
        char result = 'y';
        if (magazine_burst(200000) != 0 || workload(3) != 0) /* guard markers, allowed */
            result = 'n';
        install_advice_filter();
        /* Past the purge delay the depot's idle magazines go back: their slabs' markers
         * cannot be taken off under the filter; the spans are then written as blocks. When
         * they go depends on the purge's timing (on a loaded machine they may all stay), so
         * the last burst is twice the first: its frees need more magazines than were ever
         * made before the filter, in slabs made under it, guarded by mprotect. */
        sleep_ms(250);
        if (work_and_idle() != 0 || magazine_burst(400000) != 0)
            result = 'n';
        if (write(fds[1], &result, 1) != 1)
            _exit(1);
        sleep_ms(10000); /* until the parent has read the maps */
        _exit(0);
    }
    close(fds[1]);
    char result = 0;
    if (read(fds[0], &result, 1) != 1 || result != 'y') {
        int st;
        waitpid(pid, &st, 0);
        fprintf(stderr, "the child failed (%s)\n",
                result == 'n'     ? "wrong contents"
                : WIFSIGNALED(st) ? strsignal(WTERMSIG(st))
                                  : "exit");
        return 1;
    }
    int guards = small_inaccessible_mappings(pid);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    int uslab = dlsym(RTLD_DEFAULT, "uslab_cache_create") != NULL;
    printf("%d guard mappings of PROT_NONE%s\n", guards, uslab ? "" : " (glibc alone)");
    if (guards < 0 || (uslab ? guards < 2 : guards != 0)) {
        fprintf(stderr, "want %s\n",
                uslab ? "guard pages made by mprotect under the filter" : "none");
        return 1;
    }
    printf("sandbox ok\n");
    return 0;
}

/* seccomp-new-thread: 1 once the filtered thread's work is right, 2 when it was wrong. */
static int new_thread_done;

static void *filtered_first_calls(void *arg)
{
    install_filter(0); /* this thread only: memory, the sleeps, futex, write, the exits */
    /* uslab's blocks only: glibc's arena of a thread opens /proc/sys/vm/overcommit_memory
     * the first time it shrinks (design §12, "Seccomp"). */
    __atomic_store_n(&new_thread_done, workload_of(3, 0) ? 2 : 1, __ATOMIC_RELEASE);
    for (;;) /* its exit would block signals (rt_sigprocmask), which the filter kills */
        syscall(SYS_futex, &new_thread_done, FUTEX_WAIT_PRIVATE, new_thread_done, NULL);
    return arg;
}

static int seccomp_new_thread(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, filtered_first_calls, NULL) != 0)
        die("pthread_create failed\n");
    int done;
    while ((done = __atomic_load_n(&new_thread_done, __ATOMIC_ACQUIRE)) == 0)
        sleep_ms(10);
    if (done != 1)
        die("wrong contents\n");
    say_ok();
    exit(0); /* the parked thread ends with the process */
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "seccomp-new-thread") == 0)
        return seccomp_new_thread();
    /* The test sets USLAB_PURGE_DELAY=100, so the idle time passes it. */
    if (strcmp(mode, "seccomp") == 0 || strcmp(mode, "seccomp-threads") == 0) {
        int threads = strcmp(mode, "seccomp-threads") == 0;
        if (threads)
            one_thread();
        /* A program's first malloc comes before it sandboxes itself (it sets up glibc's
         * malloc, which asks for getrandom); this one empties no slab, so starts nothing. */
        void *volatile first = malloc(16);
        free(first);
        install_filter(threads); /* before the first free: no thread may have started yet */
        if (work_and_idle())
            die("wrong contents\n");
        say_ok();
        return 0;
    }
    if (strcmp(mode, "unshare") == 0) {
        if (work_and_idle())
            die("wrong contents\n");
        expect_one_task();
        int r = try_unshare();
        if (r)
            return r;
        printf("sandbox ok\n");
        return 0;
    }
    if (strcmp(mode, "unshare-fork") == 0) {
        one_thread();
        if (work_and_idle()) /* the parent has threads: a purger thread may run */
            die("wrong contents\n");
        sleep_ms(300); /* the parent's memory goes back: the child's frees start afresh */
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0)
            die("fork failed\n");
        if (pid == 0) {
            if (work_and_idle())
                die("wrong contents in the child\n");
            expect_one_task();
            _exit(try_unshare());
        }
        int st;
        if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
            die("the child died\n");
        if (WEXITSTATUS(st))
            return WEXITSTATUS(st);
        printf("sandbox ok\n");
        return 0;
    }
    if (strcmp(mode, "unshare-joined") == 0) {
        joined_and_purging();
        int r = try_unshare();
        if (r)
            return r;
        if (workload(6)) /* and memory still works */
            die("wrong contents\n");
        printf("sandbox ok\n");
        return 0;
    }
    if (strcmp(mode, "nproc") == 0)
        return nproc_limit();
    if (strcmp(mode, "clone-userns") == 0)
        return clone_userns();
    if (strcmp(mode, "clone-vm") == 0)
        return clone_vm();
    if (strcmp(mode, "setns-joined") == 0)
        return setns_joined();
    if (strcmp(mode, "seccomp-tsync") == 0) {
        joined_and_purging();
        install_filter_by(0, BY_TSYNC);
        if (work_and_idle())
            die("wrong contents\n");
        say_ok();
        return 0;
    }
    if (strcmp(mode, "clone-exec") == 0)
        return clone_exec();
    if (strcmp(mode, "seccomp-advice") == 0)
        return seccomp_advice();
    if (strcmp(mode, "shm-space") == 0)
        return shm_space(argv[0]);
    if (strcmp(mode, "shm-space-child") == 0)
        return shm_space_child(argc > 2 && strcmp(argv[2], "1") == 0);
    if (strcmp(mode, "inherited-child") == 0) {
        one_thread();
        allocate_past_the_delay();
        return 0;
    }
    static const char *const child_modes[] = {
        "late-prctl", "late-syscall", "late-vfork",   "inherited",     "landlock", "fsize",
        "chroot",     "mount-ns",     "setuid",       "signal-setuid", "exec",     "daemon",
        "quick-exit", "exit-group",   "quick-exit-c", "vfork-exit"};
    for (size_t i = 0; i < sizeof child_modes / sizeof child_modes[0]; i++)
        if (strcmp(mode, child_modes[i]) == 0)
            return in_child(mode, argv[0]);
    fprintf(stderr,
            "usage: sandbox seccomp|seccomp-threads|seccomp-new-thread|unshare|unshare-fork|"
            "unshare-joined|clone-userns|clone-vm|seccomp-tsync|setns-joined|"
            "nproc|late-prctl|late-syscall|late-"
            "vfork|inherited|landlock|"
            "fsize|chroot|mount-ns|setuid|signal-setuid|exec|daemon|quick-exit|"
            "exit-group|quick-exit-c|vfork-exit|clone-exec|shm-space|seccomp-advice\n");
    return 2;
}
