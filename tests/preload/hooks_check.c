/* SPDX-License-Identifier: MIT */
/*
 * hooks_check.c - the shared libraries define prctl and syscall (src/hooks.c, docs/design.md
 * §10.1); a program must see libc's answers through them. Run under LD_PRELOAD of the
 * preload library, and without it (glibc's own functions, the reference). Checks return
 * values and errno of calls with 0 to 6 arguments, prctl set/get pairs, failures, chroot,
 * unshare and setns answers, the exec family's (arguments and environment), and a
 * seccomp probe that installs nothing (SECCOMP_GET_ACTION_AVAIL), which must leave the
 * process able to make system calls a filter would refuse. Prints "hooks ok".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "hooks_check: %s:%d: %s (errno %d)\n", __FILE__, __LINE__, #cond,      \
                    errno);                                                                        \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

int main(void)
{
    /* No argument, one, three, six. */
    CHECK(syscall(SYS_getpid) == getpid());
    CHECK(syscall(SYS_gettid) == gettid());
    errno = 0;
    CHECK(syscall(SYS_close, -1) == -1 && errno == EBADF);
    int fds[2];
    CHECK(pipe(fds) == 0);
    CHECK(syscall(SYS_write, fds[1], "abc", 3) == 3);
    char buf[8] = "";
    CHECK(syscall(SYS_read, fds[0], buf, sizeof buf) == 3 && memcmp(buf, "abc", 3) == 0);
    errno = 0;
    CHECK(syscall(SYS_read, fds[0], NULL, 0, 0, 0, 0) == 0 && errno == 0);
    close(fds[0]);
    close(fds[1]);
    long m =
        syscall(SYS_mmap, NULL, 8192L, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0L);
    CHECK(m != -1);
    if (m != -1) {
        ((volatile char *)m)[8191] = 1;
        CHECK(syscall(SYS_munmap, m, 8192L) == 0);
    }
    errno = 0;
    CHECK(syscall(SYS_mmap, NULL, 8192L, PROT_READ, MAP_PRIVATE, -1, 0L) == -1 && errno == EBADF);
    errno = 0;
    CHECK(syscall(-1L) == -1 && errno == ENOSYS);

    /* prctl: set and get, a value returned, a bad option. */
    char name[16] = "";
    CHECK(prctl(PR_SET_NAME, "hooks-test", 0, 0, 0) == 0);
    CHECK(prctl(PR_GET_NAME, name, 0, 0, 0) == 0 && strcmp(name, "hooks-test") == 0);
    CHECK(prctl(PR_SET_DUMPABLE, 1) == 0 && prctl(PR_GET_DUMPABLE) == 1);
    CHECK(prctl(PR_GET_SECCOMP) == 0);
    CHECK(syscall(SYS_prctl, PR_GET_SECCOMP) == 0);
    errno = 0;
    CHECK(prctl(-1, 0, 0, 0, 0) == -1 && errno == EINVAL);

    /* chroot, unshare and setns: the kernel's answers. */
    errno = 0;
    CHECK(chroot("/nonexistent/uslab-hooks") == -1 && (errno == ENOENT || errno == EPERM));
    CHECK(unshare(0) == 0);
    errno = 0;
    CHECK(setns(-1, 0) == -1 && errno == EBADF);
    errno = 0;
    CHECK(syscall(SYS_setns, -1, 0) == -1 && errno == EBADF);

    /* The exec family: failures keep errno; arguments and environment arrive whole. */
    errno = 0;
    CHECK(execl("/nonexistent/uslab-hooks", "x", (char *)NULL) == -1 && errno == ENOENT);
    errno = 0;
    CHECK(execvp("uslab-hooks-no-such-command", (char *[]){"x", NULL}) == -1 && errno == ENOENT);
    static const char *const script = "test \"$X\" = y && test \"$0\" = a && test \"$1\" = b";
    for (int how = 0; how < 4; how++) {
        pid_t pid = fork();
        if (pid == 0) {
            char *envp[] = {"X=y", "PATH=/usr/bin:/bin", NULL};
            char *argv[] = {"sh", "-c", (char *)script, "a", "b", NULL};
            if (how == 0)
                execle("/bin/sh", "sh", "-c", script, "a", "b", (char *)NULL, envp);
            else if (how == 1)
                execve("/bin/sh", argv, envp);
            else if (how == 2)
                execvpe("sh", argv, envp);
            else {
                setenv("X", "y", 1);
                execlp("sh", "sh", "-c", script, "a", "b", (char *)NULL);
            }
            _exit(126);
        }
        int st = -1;
        CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }

    /* A seccomp probe installs nothing: still no filter, and memory still works. */
    unsigned action = SECCOMP_RET_KILL_PROCESS;
    long r = syscall(SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action);
    CHECK(r == 0 || errno == EINVAL || errno == ENOSYS);
    CHECK(prctl(PR_GET_SECCOMP) == 0);
    for (int i = 0; i < 100000; i++) {
        char *volatile p = malloc((size_t)(i % 300) + 1);
        CHECK(p != NULL);
        free(p);
        if (failures)
            break;
    }
    if (failures)
        return 1;
    printf("hooks ok\n");
    return 0;
}
