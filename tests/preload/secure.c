/* SPDX-License-Identifier: MIT */
/*
 * secure.c - a set-user-ID program linked with libuslab-preload.so reads no USLAB_* setting
 * when another user runs it (secure execution, AT_SECURE; docs/design.md §11), as glibc's
 * malloc reads none of its tunables there. Root only (77 otherwise): the test copies this
 * program into a fresh directory, makes the copy set-user-ID root, and runs it as nobody
 * (65534) with USLAB_PROFILE naming a directory only root may write, USLAB_STATS=1 and
 * USLAB_LEAKS=1. The copy checks that it runs in secure execution, allocates, leaks and
 * exits 0; the test requires that it printed nothing on stderr and that no file appeared
 * in the private directory. Before, the profile was written there as root (a file of the
 * caller's naming in root's directory) and the statistics and leak reports printed.
 * Prints "secure ok".
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void *volatile sink;

static int child_mode(void)
{
    if (getauxval(AT_SECURE) == 0) {
        fprintf(stderr, "not in secure execution\n");
        return 3;
    }
    void *held[2000];
    for (int i = 0; i < 2000; i++)
        held[i] = malloc(16 + (size_t)i * 7);
    for (int i = 0; i < 1000; i++)
        free(held[i]);
    sink = held[1500]; /* the rest leak */
    return 0;
}

static int copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0700);
    if (in < 0 || out < 0)
        return -1;
    char buf[65536];
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, (size_t)n) != n)
            return -1;
    close(in);
    return close(out);
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return d ? n : -1;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "child") == 0)
        return child_mode();
    if (geteuid() != 0) {
        printf("not root: skipped\n");
        return 77;
    }
    char dir[] = "/tmp/uslab-secure-XXXXXX", prog[64], private_dir[64], profile[96];
    if (!mkdtemp(dir) || chmod(dir, 0755) != 0) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(prog, sizeof prog, "%s/prog", dir);
    snprintf(private_dir, sizeof private_dir, "%s/private", dir);
    snprintf(profile, sizeof profile, "USLAB_PROFILE=%s/profile", private_dir);
    if (copy_file("/proc/self/exe", prog) != 0 || chmod(prog, 04755) != 0 ||
        mkdir(private_dir, 0700) != 0) {
        perror("setting up");
        return 1;
    }
    int err[2];
    if (pipe(err) != 0)
        return 1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(err[1], 2);
        close(err[0]);
        if (setgroups(0, NULL) != 0 || setresgid(65534, 65534, 65534) != 0 ||
            setresuid(65534, 65534, 65534) != 0)
            _exit(76);
        char *env[] = {profile, "USLAB_STATS=1", "USLAB_LEAKS=1", "USLAB_LIVE=always", NULL};
        execle(prog, prog, "child", (char *)NULL, env);
        _exit(75);
    }
    close(err[1]);
    char out[4096];
    size_t got = 0;
    ssize_t n;
    while ((n = read(err[0], out + got, sizeof out - 1 - got)) > 0)
        got += (size_t)n;
    out[got] = '\0';
    int st;
    waitpid(pid, &st, 0);
    int files = count_entries(private_dir);
    unlink(prog);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    if (WIFEXITED(st) && (WEXITSTATUS(st) == 76 || WEXITSTATUS(st) == 75)) {
        printf("cannot run the copy as nobody here (%d): skipped\n", WEXITSTATUS(st));
        return 77;
    }
    int ok = 1;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "the set-user-ID copy failed (status %#x)\n", st);
        ok = 0;
    }
    if (got) {
        fprintf(stderr, "the set-user-ID copy printed on stderr:\n%s\n", out);
        ok = 0;
    }
    if (files != 0) {
        fprintf(stderr, "%d file(s) written into the root-only directory\n", files);
        ok = 0;
    }
    if (!ok)
        return 1;
    printf("secure ok\n");
    return 0;
}
