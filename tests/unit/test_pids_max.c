/* SPDX-License-Identifier: MIT */
/*
 * test_pids_max.c - no purger thread under a cgroup v2 pids limit below 4096 (design §3):
 * a program near its pids.max would find one thread fewer than under glibc. As
 * test_pressure_source does, usi_pressure_reset makes pressure.c look for
 * /proc/self/cgroup, /proc/self/mountinfo and the group's directories under a directory
 * this test fills, standing for "/".
 *
 *  - usi_pressure_pids_max: the lowest pids.max of the group and its ancestors up to the
 *    mount ("max" is none); none at all, no group directory, or no cgroup line: -1; a
 *    hybrid host (cgroup2 at /sys/fs/cgroup/unified); no mountinfo (/sys/fs/cgroup);
 *    a cgroup v1 pids hierarchy (this machine's kind: "8:pids:/a/b", a `cgroup` mount with
 *    the `pids` option, groups with cgroup.procs), alone, joined with another controller,
 *    without mountinfo (/sys/fs/cgroup/pids), beside a v2 limit (the lower wins), and a
 *    v1 mount of another controller only (-1); it read no v1 limit before;
 *  - the rule, in fork children (it is read once per process): two threads use uslab and
 *    free a burst; with pids.max 20 on the group's parent no purger thread starts (the
 *    process keeps its two threads), with "max" everywhere it does (three); with a v1
 *    pids.max of 20 none starts either (it did before: three).
 */
#define _GNU_SOURCE
#include "check.h"
#include "internal.h"
#include "testutil.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char root[64] = "pids-root-XXXXXX";

static void put(const char *rel, const char *text)
{
    test_put_file(root, rel, text);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void clear_root(void)
{
    nftw(root, remove_one, 16, FTW_DEPTH | FTW_PHYS);
    CHECK(mkdir(root, 0700) == 0, "mkdir %s: %s", root, strerror(errno));
}

#define MOUNT     "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
#define UNIFIED   "31 25 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
#define V1_PIDS   "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
#define V1_JOINED "32 31 0:29 / /sys/fs/cgroup/cpu,pids rw,relatime - cgroup cgroup rw,cpu,pids\n"
#define V1_MEMORY "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"

/* pids.max of groups /a/b and /a under mount dir `at` (relative), as given (NULL: no file). */
static void put_max(const char *at, const char *b_max, const char *a_max)
{
    char rel[256];
    if (b_max) {
        snprintf(rel, sizeof rel, "%s/a/b/pids.max", at);
        put(rel, b_max);
    }
    if (a_max) {
        snprintf(rel, sizeof rel, "%s/a/pids.max", at);
        put(rel, a_max);
    }
}

/* A group /a/b under mount dir `at` (relative), with pids.max of b and a as given (NULL: no
 * file). */
static void group(const char *at, const char *b_max, const char *a_max)
{
    char rel[256];
    put("proc/self/cgroup", "4:pids:/\n0::/a/b\n");
    snprintf(rel, sizeof rel, "%s/a/b/cgroup.controllers", at);
    put(rel, "cpu memory pids\n");
    snprintf(rel, sizeof rel, "%s/a/cgroup.controllers", at);
    put(rel, "cpu memory pids\n");
    put_max(at, b_max, a_max);
}

/* A cgroup v1 group /a/b of the hierarchy mounted at `at`, on the line `line` of
 * /proc/self/cgroup, with pids.max of b and a as given (NULL: no file). */
static void group_v1(const char *at, const char *line, const char *b_max, const char *a_max)
{
    char rel[256];
    put("proc/self/cgroup", line);
    snprintf(rel, sizeof rel, "%s/a/b/cgroup.procs", at);
    put(rel, "1\n");
    snprintf(rel, sizeof rel, "%s/a/cgroup.procs", at);
    put(rel, "");
    put_max(at, b_max, a_max);
}

static long long pids_max(void)
{
    usi_pressure_reset(root);
    long long v = usi_pressure_pids_max();
    usi_pressure_reset(NULL);
    return v;
}

static void case_reader(void)
{
    clear_root();
    put("proc/self/mountinfo", MOUNT);
    group("sys/fs/cgroup", "max\n", "20\n");
    CHECK(pids_max() == 20, "parent's pids.max 20: %lld", pids_max());
    group("sys/fs/cgroup", "100\n", "max\n");
    CHECK(pids_max() == 100, "own pids.max 100: %lld", pids_max());
    group("sys/fs/cgroup", "5000\n", "300\n");
    CHECK(pids_max() == 300, "the lower of 5000 and 300: %lld", pids_max());
    clear_root();
    put("proc/self/mountinfo", MOUNT);
    group("sys/fs/cgroup", "max\n", "max\n");
    CHECK(pids_max() == -1, "max everywhere: %lld", pids_max());
    clear_root();
    put("proc/self/mountinfo", MOUNT);
    group("sys/fs/cgroup", NULL, NULL);
    CHECK(pids_max() == -1, "no pids.max: %lld", pids_max());
    clear_root();
    put("proc/self/mountinfo", MOUNT);
    put("proc/self/cgroup", "0::/a/b\n"); /* no directory */
    CHECK(pids_max() == -1, "no group directory: %lld", pids_max());
    clear_root();
    put("proc/self/mountinfo", MOUNT);
    group("sys/fs/cgroup", "20\n", NULL);
    put("proc/self/cgroup", "4:pids:/a/b\n"); /* v1 only */
    CHECK(pids_max() == -1, "no 0:: line: %lld", pids_max());
    clear_root();
    put("proc/self/mountinfo", UNIFIED);
    group("sys/fs/cgroup/unified", "max\n", "64\n");
    CHECK(pids_max() == 64, "hybrid host: %lld", pids_max());
    clear_root(); /* no mountinfo: /sys/fs/cgroup */
    group("sys/fs/cgroup", "33\n", NULL);
    CHECK(pids_max() == 33, "no mountinfo: %lld", pids_max());
    clear_root();
    CHECK(pids_max() == -1, "nothing: %lld", pids_max());
    /* cgroup v1 */
    clear_root();
    put("proc/self/mountinfo", V1_MEMORY V1_PIDS);
    group_v1("sys/fs/cgroup/pids", "9:name=systemd:/\n8:pids:/a/b\n0::/\n", "max\n", "20\n");
    CHECK(pids_max() == 20, "v1: parent's pids.max 20: %lld", pids_max());
    group_v1("sys/fs/cgroup/pids", "8:pids:/a/b\n", "100\n", "max\n");
    CHECK(pids_max() == 100, "v1: own pids.max 100: %lld", pids_max());
    clear_root();
    put("proc/self/mountinfo", V1_JOINED);
    group_v1("sys/fs/cgroup/cpu,pids", "3:cpu,pids:/a/b\n", "40\n", NULL);
    CHECK(pids_max() == 40, "v1 joined with cpu: %lld", pids_max());
    clear_root(); /* no mountinfo: /sys/fs/cgroup/pids */
    group_v1("sys/fs/cgroup/pids", "8:pids:/a/b\n", "33\n", NULL);
    CHECK(pids_max() == 33, "v1, no mountinfo: %lld", pids_max());
    clear_root();
    put("proc/self/mountinfo", V1_MEMORY);
    group_v1("sys/fs/cgroup/memory", "4:memory:/a/b\n", "20\n", NULL);
    CHECK(pids_max() == -1, "v1 memory only: %lld", pids_max());
    clear_root(); /* both: the lower */
    put("proc/self/mountinfo", MOUNT V1_PIDS);
    group_v1("sys/fs/cgroup/pids", "8:pids:/a/b\n0::/a/b\n", "50\n", NULL);
    put("sys/fs/cgroup/a/b/cgroup.controllers", "pids\n");
    put("sys/fs/cgroup/a/b/pids.max", "300\n");
    CHECK(pids_max() == 50, "v1 50 and v2 300: %lld", pids_max());
    put("sys/fs/cgroup/a/b/pids.max", "30\n");
    CHECK(pids_max() == 30, "v1 50 and v2 30: %lld", pids_max());
}

static void *parked(void *arg)
{
    void *volatile p = uslab_malloc(64);
    uslab_free(p);
    for (;;)
        pause();
    return arg;
}

/* In a fork child: the fake root, a second thread that uses uslab, a burst freed; returns
 * the threads the child has after a while (0 when the child failed). */
static int threads_with(const char *a_max, int v1)
{
    clear_root();
    if (v1) {
        put("proc/self/mountinfo", V1_PIDS);
        group_v1("sys/fs/cgroup/pids", "8:pids:/a/b\n0::/\n", "max\n", a_max);
    } else {
        put("proc/self/mountinfo", MOUNT);
        group("sys/fs/cgroup", "max\n", a_max);
    }
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        usi_pressure_reset(root);
        pthread_t t;
        if (pthread_create(&t, NULL, parked, NULL) != 0)
            _exit(100);
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
        enum { N = 8192 };
        static void *p[N];
        for (int i = 0; i < N; i++)
            p[i] = uslab_malloc(512);
        for (int i = 0; i < N; i++)
            uslab_free(p[i]);
        ts.tv_nsec = 300 * 1000000L;
        nanosleep(&ts, NULL);
        _exit(task_count());
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) < 100, "child failed (%#x)", status);
    return WEXITSTATUS(status);
}

int main(void)
{
    CHECK(mkdtemp(root) != NULL, "mkdtemp: %s", strerror(errno));
    case_reader();
    int limited = threads_with("20\n", 0), free_ = threads_with("max\n", 0);
    int limited_v1 = threads_with("20\n", 1);
    printf("threads: pids.max 20 %d, max %d, v1 pids.max 20 %d\n", limited, free_, limited_v1);
    CHECK(limited == 2, "pids.max 20: %d threads (the purger started)", limited);
    CHECK(free_ == 3, "no pids limit: %d threads (no purger)", free_);
    CHECK(limited_v1 == 2, "v1 pids.max 20: %d threads (the purger started)", limited_v1);
    nftw(root, remove_one, 16, FTW_DEPTH | FTW_PHYS);
    TEST_DONE();
}
