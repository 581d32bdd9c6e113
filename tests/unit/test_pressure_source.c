/* SPDX-License-Identifier: MIT */
/*
 * test_pressure_source.c - which memory-pressure source pressure.c chooses (design §3,
 * issue 13), without depending on the host: usi_pressure_reset makes the automatic choice
 * look for /proc/self/cgroup, /proc/self/mountinfo, the cgroup directories it names (or
 * /sys/fs/cgroup/<group>) and /proc/pressure/memory under a directory this test fills,
 * standing for "/". Each case checks the source chosen (usi_pressure_source) and, where
 * there is one, that usi_pressure_now reads that source and no other: pressure when its
 * `some total` grows by 50 ms, none when only the other file grows. USLAB_RETURN is left
 * at `delay`, so no pass of the library's own reads pressure meanwhile.
 *
 *  - cgroup v2: the "0::/<group>" line names a directory with memory.pressure: it wins over
 *    /proc/pressure/memory;
 *  - the same with cgroup v1 lines before it (a hybrid host);
 *  - the cgroup directory has no memory.pressure (no PSI for cgroups), the "0::" line is
 *    missing (cgroup v1 only), its path is longer than a path can be, or memory.pressure is
 *    not in PSI format: /proc/pressure/memory;
 *  - with no proc/self/mountinfo (unreadable), /sys/fs/cgroup stands for the cgroup2 mount
 *    (all the cases above); a /proc/self/cgroup of many lines is read to its "0::" line;
 *  - with a mountinfo, the group is looked for under its cgroup2 mounts: a hybrid host
 *    (/sys/fs/cgroup/unified); no cgroup2 mount (the system's file); mounts whose root
 *    (mount namespaces) does or does not hold the group, is only a prefix of its name, is
 *    the group itself; a cgroup namespace ("0::/"); a group outside it ("/../x", "/a/..":
 *    none); escaped paths (\040, \134, an escaped NUL, bad escapes); garbage lines, a line
 *    longer than the reader's buffer, a last line without newline, a relative "0::" path;
 *  - nothing at all: no source, never pressure;
 *  - USLAB_PRESSURE_SOURCE wins over all of them: a directory, a PSI file, or neither (no
 *    source, with a warning), a FIFO included (read without waiting for a writer).
 */
#define _GNU_SOURCE
#include "check.h"
#include "options.h"
#include "purge.h"
#include "settings.h"
#include "testutil.h"
#include "uslab.h"

#include <errno.h>
#include <ftw.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[64] = "pressure-root-XXXXXX";

#define G "/user.slice/app.scope" /* the process's cgroup in most cases */

/* Writes text to root/rel, making its directories. */
static void put(const char *rel, const char *text)
{
    test_put_file(root, rel, text);
}

static void psi(const char *rel, unsigned long total)
{
    char text[200];
    snprintf(text, sizeof text,
             "some avg10=0.00 avg60=0.00 avg300=0.00 total=%lu\n"
             "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
             total);
    put(rel, text);
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

/* The choice under root: its kind and, for a source, its path relative to root. */
static void expect_source(const char *what, int want, const char *want_rel)
{
    usi_pressure_reset(root);
    const char *path = NULL;
    int got = usi_pressure_source(&path);
    CHECK(got == want, "%s: source kind %d, want %d (%s)", what, got, want, path ? path : "none");
    if (want < 0) {
        CHECK(path == NULL, "%s: a path without a source", what);
        return;
    }
    char full[512];
    snprintf(full, sizeof full, "%s%s", root, want_rel);
    CHECK(path && strcmp(path, full) == 0, "%s: source %s, want %s", what, path ? path : "none",
          full);
}

/* The chosen source (rel, a PSI file) is what usi_pressure_now reads, and `other` is not. */
static void expect_reads(const char *what, const char *rel, const char *other)
{
    CHECK(usi_pressure_now() == 0, "%s: pressure at the first reading", what);
    CHECK(usi_pressure_now() == 0, "%s: pressure without growth", what);
    if (other) {
        psi(other, 1000 + 900000);
        CHECK(usi_pressure_now() == 0, "%s: %s grew, which is not the source", what, other);
    }
    psi(rel, 1000 + 50000);
    CHECK(usi_pressure_now() == 1, "%s: %s grew by 50 ms: no pressure", what, rel);
    CHECK(usi_pressure_now() == 0, "%s: pressure again without growth", what);
}

int main(void)
{
    uslab_free(uslab_malloc(16)); /* initialised: the options are read */
    CHECK(mkdtemp(root) != NULL, "mkdtemp: %s", strerror(errno));
    unsetenv("USLAB_PRESSURE_SOURCE");
    CHECK(usi_options.return_policy == USI_RETURN_DELAY, "USLAB_RETURN must be delay");

    /* cgroup v2: the process's own group. */
    put("proc/self/cgroup", "0::/user.slice/app.scope\n");
    psi("sys/fs/cgroup/user.slice/app.scope/memory.pressure", 1000);
    psi("proc/pressure/memory", 1000);
    expect_source("cgroup v2", 1, "/sys/fs/cgroup/user.slice/app.scope");
    expect_reads("cgroup v2", "sys/fs/cgroup/user.slice/app.scope/memory.pressure",
                 "proc/pressure/memory");

    /* Hybrid: v1 hierarchies listed first, the v2 line last. */
    put("proc/self/cgroup", "12:memory:/elsewhere\n1:name=systemd:/user.slice\n"
                            "0::/user.slice/app.scope\n");
    psi("sys/fs/cgroup/user.slice/app.scope/memory.pressure", 1000);
    psi("proc/pressure/memory", 1000);
    expect_source("hybrid", 1, "/sys/fs/cgroup/user.slice/app.scope");
    expect_reads("hybrid", "sys/fs/cgroup/user.slice/app.scope/memory.pressure",
                 "proc/pressure/memory");

    /* A memory.pressure that is not PSI: the system's file. */
    put("sys/fs/cgroup/user.slice/app.scope/memory.pressure", "nonsense\n");
    psi("proc/pressure/memory", 1000);
    expect_source("not PSI", 2, "/proc/pressure/memory");

    /* The group has no memory.pressure: the system's file. */
    clear_root();
    put("proc/self/cgroup", "0::/user.slice/app.scope\n");
    put("sys/fs/cgroup/user.slice/app.scope/memory.events", "low 0\nhigh 0\nmax 0\noom 0\n");
    psi("proc/pressure/memory", 1000);
    expect_source("no memory.pressure", 2, "/proc/pressure/memory");
    expect_reads("no memory.pressure", "proc/pressure/memory", NULL);

    /* cgroup v1 only: no "0::" line. */
    put("proc/self/cgroup", "4:memory:/user.slice\n1:name=systemd:/user.slice\n");
    psi("sys/fs/cgroup/memory.pressure", 1000); /* not named by any line */
    psi("proc/pressure/memory", 1000);
    expect_source("cgroup v1", 2, "/proc/pressure/memory");
    expect_reads("cgroup v1", "proc/pressure/memory", "sys/fs/cgroup/memory.pressure");

    /* A group path too long for a path: the system's file. */
    char line[400] = "0::/";
    memset(line + 4, 'a', 300);
    strcpy(line + 304, "\n");
    put("proc/self/cgroup", line);
    expect_source("long path", 2, "/proc/pressure/memory");

    /* The cases above have no proc/self/mountinfo: /sys/fs/cgroup stands for the mount of
     * "/". A /proc/self/cgroup longer than one small read (many v1 lines first) still
     * gives its "0::" line. */
    clear_root();
    char cgroup[2048] = "";
    for (int i = 12; i > 0; i--)
        snprintf(cgroup + strlen(cgroup), sizeof cgroup - strlen(cgroup),
                 "%d:controller%d:/user.slice/user-1000.slice/session-%d.scope/a/b/c\n", i, i, i);
    strcat(cgroup, "0::" G "\n");
    CHECK(strlen(cgroup) > 700, "the cgroup file is too short: %zu", strlen(cgroup));
    put("proc/self/cgroup", cgroup);
    psi("sys/fs/cgroup" G "/memory.pressure", 1000);
    psi("proc/pressure/memory", 1000);
    expect_source("long cgroup file", 1, "/sys/fs/cgroup" G);

    /* Hybrid (this project's CI host): v1 hierarchies under a tmpfs at /sys/fs/cgroup,
     * cgroup v2 at /sys/fs/cgroup/unified. A memory.pressure at /sys/fs/cgroup/<group> (a
     * v1 hierarchy's or the tmpfs's) is not the group's. */
    put("proc/self/cgroup", "4:memory:/process_api/7b8249bf\n1:name=systemd:/\n0::" G "\n");
    put("proc/self/mountinfo",
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
        "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
        "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
        "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:9 - "
        "cgroup2 cgroup2 rw,nsdelegate\n"
        "50 22 0:40 / /proc rw,nosuid - proc proc rw\n");
    psi("sys/fs/cgroup/unified" G "/memory.pressure", 1000);
    expect_source("hybrid mountinfo", 1, "/sys/fs/cgroup/unified" G);
    expect_reads("hybrid mountinfo", "sys/fs/cgroup/unified" G "/memory.pressure",
                 "sys/fs/cgroup" G "/memory.pressure");

    /* A mountinfo without cgroup2 (v1 only): the system's file, not /sys/fs/cgroup/<group>. */
    put("proc/self/mountinfo",
        "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
        "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n");
    psi("sys/fs/cgroup" G "/memory.pressure", 1000);
    psi("proc/pressure/memory", 1000);
    expect_source("no cgroup2 mount", 2, "/proc/pressure/memory");
    expect_reads("no cgroup2 mount", "proc/pressure/memory", "sys/fs/cgroup" G "/memory.pressure");

    /* Mount namespaces: a mount shows its root's part of the hierarchy. Passed over: a root
     * that does not hold the group, a root that is only a prefix of its name (/user), a
     * mount where the group's directory has no memory.pressure. Taken: /user.slice mounted
     * at /sys/fs/cgroup, so the group is /sys/fs/cgroup/app.scope. */
    clear_root();
    put("proc/self/cgroup", "0::" G "\n");
    put("proc/self/mountinfo",
        "60 1 0:38 /system.slice /mnt/system rw - cgroup2 cgroup2 rw\n"
        "61 1 0:38 /user /mnt/prefix rw - cgroup2 cgroup2 rw\n"
        "62 1 0:38 / /mnt/empty rw - cgroup2 cgroup2 rw\n"
        "63 1 0:38 /user.slice /sys/fs/cgroup rw,nosuid shared:4 master:2 - cgroup2 cgroup2 rw\n"
        "64 1 0:38 / /mnt/late rw - cgroup2 cgroup2 rw\n");
    psi("mnt/system/app.scope/memory.pressure", 1000);
    psi("mnt/prefix.slice/app.scope/memory.pressure", 1000);
    psi("mnt/prefix/.slice/app.scope/memory.pressure", 1000);
    put("mnt/empty" G "/memory.events", "high 0\n");
    psi("sys/fs/cgroup/app.scope/memory.pressure", 1000);
    psi("sys/fs/cgroup" G "/memory.pressure", 1000);
    psi("mnt/late" G "/memory.pressure", 1000);
    psi("proc/pressure/memory", 1000);
    expect_source("mount root", 1, "/sys/fs/cgroup/app.scope");
    expect_reads("mount root", "sys/fs/cgroup/app.scope/memory.pressure",
                 "sys/fs/cgroup" G "/memory.pressure");

    /* The mount's root is the group itself (a container's own cgroup bind-mounted), with a
     * trailing slash. */
    put("proc/self/mountinfo", "63 1 0:38 " G "/ /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
    psi("sys/fs/cgroup/memory.pressure", 1000);
    expect_source("mount root = group", 1, "/sys/fs/cgroup");

    /* A cgroup namespace: the process's path is already relative to its root ("0::/"), the
     * namespace's cgroup2 mount shows "/". */
    put("proc/self/cgroup", "0::/\n");
    put("proc/self/mountinfo", "63 1 0:38 / /sys/fs/cgroup/ rw - cgroup2 cgroup2 rw\n");
    expect_source("cgroup namespace", 1, "/sys/fs/cgroup");
    put("proc/self/mountinfo", "63 1 0:38 / / rw - cgroup2 cgroup2 rw\n");
    psi("memory.pressure", 1000);
    expect_source("cgroup namespace, mounted at /", 1, "/");

    /* A group outside the cgroup namespace ("0::/../sibling"): no directory of it shows,
     * not even the one .. would name. */
    put("proc/self/cgroup", "0::/../sibling\n");
    put("proc/self/mountinfo", "63 1 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n");
    psi("sys/fs/sibling/memory.pressure", 1000);
    expect_source("outside the namespace", 2, "/proc/pressure/memory");
    put("proc/self/cgroup", "0::/a/..\n");
    psi("sys/fs/cgroup/a/memory.pressure", 1000);
    expect_source("outside the namespace, ..", 2, "/proc/pressure/memory");

    /* Escaped paths: mountinfo writes a blank as \040 (a tab \011, a newline \012, a
     * backslash \134), in the root and in the mount point; /proc/self/cgroup does not
     * escape. An escaped NUL makes a line unusable; a backslash without three octal digits
     * is itself. */
    clear_root();
    put("proc/self/cgroup", "0::/user slice/app.scope\n");
    put("proc/self/mountinfo", "70 1 0:38 /\\000 /mnt/nul rw - cgroup2 cgroup2 rw\n"
                               "71 1 0:38 / /mnt/nul\\000x rw - cgroup2 cgroup2 rw\n"
                               "72 1 0:38 /user\\040slice /mnt/odd\\9\\04 rw - cgroup2 c rw\n"
                               "73 1 0:38 /user\\040slice /sys/fs/cgroup\\040v2\\134x rw - "
                               "cgroup2 cgroup2 rw\n");
    psi("mnt/nul/user slice/app.scope/memory.pressure", 1000);
    psi("mnt/nul/app.scope/memory.pressure", 1000);
    psi("sys/fs/cgroup v2\\x/app.scope/memory.pressure", 1000);
    psi("proc/pressure/memory", 1000);
    expect_source("escaped", 1, "/sys/fs/cgroup v2\\x/app.scope");
    expect_reads("escaped", "sys/fs/cgroup v2\\x/app.scope/memory.pressure",
                 "proc/pressure/memory");
    psi("mnt/odd\\9\\04/app.scope/memory.pressure", 1000);
    expect_source("bad escapes", 1, "/mnt/odd\\9\\04/app.scope");

    /* Garbage: empty and short lines, a missing separator or file system type, a relative
     * root or mount point, doubled blanks, a line far longer than the reader's buffer whose
     * tail would parse as a cgroup2 mount at /decoy, and the good line last without its
     * newline. Then a "0::" line that is not absolute. */
    clear_root();
    put("proc/self/cgroup", "garbage\n\n::\n0:\n0::" G "\n");
    static char mountinfo[20000];
    strcpy(mountinfo, "\n"
                      "garbage\n"
                      "1 2 3:4 / /decoy\n"
                      "1 2 3:4 / /decoy rw cgroup2 cgroup2 rw\n"
                      "1 2 3:4 / /decoy rw -\n"
                      "1 2 3:4 / /decoy rw - \n"
                      "1 2 3:4 relative /decoy rw - cgroup2 cgroup2 rw\n"
                      "1 2 3:4 / decoy rw - cgroup2 cgroup2 rw\n"
                      "1  2 3:4 / /decoy rw - cgroup2 cgroup2 rw\n"
                      "1 2 3:4 / /decoy rw -  cgroup2 cgroup2 rw\n"
                      "- - - - - - - cgroup2\n"
                      "long ");
    size_t at = strlen(mountinfo);
    memset(mountinfo + at, 'x', 12000);
    strcpy(mountinfo + at + 12000, " 2 3:4 / /decoy rw - cgroup2 cgroup2 rw\n"
                                   "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw");
    put("proc/self/mountinfo", mountinfo);
    psi("decoy" G "/memory.pressure", 1000);
    psi("sys/fs/cgroup/unified" G "/memory.pressure", 1000);
    psi("sys/fs/cgroup" G "/memory.pressure", 1000);
    psi("proc/pressure/memory", 1000);
    expect_source("garbage", 1, "/sys/fs/cgroup/unified" G);
    expect_reads("garbage", "sys/fs/cgroup/unified" G "/memory.pressure",
                 "decoy" G "/memory.pressure");
    put("proc/self/cgroup", "0::user.slice/app.scope\n");
    psi("sys/fs/cgroup/unifieduser.slice/app.scope/memory.pressure", 1000);
    psi("sys/fs/cgroupuser.slice/app.scope/memory.pressure", 1000);
    expect_source("relative group", 2, "/proc/pressure/memory");

    /* Nothing: no source, never pressure. */
    clear_root();
    expect_source("nothing", -1, NULL);
    psi("proc/pressure/memory", 1000 + 50000); /* too late: the choice is made */
    CHECK(usi_pressure_now() == 0 && usi_pressure_now() == 0, "pressure without a source");

    /* USLAB_PRESSURE_SOURCE wins: a directory, a PSI file, neither. */
    put("proc/self/cgroup", "0::/user.slice/app.scope\n");
    psi("sys/fs/cgroup/user.slice/app.scope/memory.pressure", 1000);
    psi("proc/pressure/memory", 1000);
    char env[256];
    snprintf(env, sizeof env, "%s/other", root);
    psi("other/memory.pressure", 1000);
    setenv("USLAB_PRESSURE_SOURCE", env, 1);
    expect_source("USLAB_PRESSURE_SOURCE directory", 1, "/other");
    expect_reads("USLAB_PRESSURE_SOURCE directory", "other/memory.pressure",
                 "sys/fs/cgroup/user.slice/app.scope/memory.pressure");
    snprintf(env, sizeof env, "%s/file.psi", root);
    psi("file.psi", 1000);
    setenv("USLAB_PRESSURE_SOURCE", env, 1);
    expect_source("USLAB_PRESSURE_SOURCE file", 2, "/file.psi");
    expect_reads("USLAB_PRESSURE_SOURCE file", "file.psi", "proc/pressure/memory");
    snprintf(env, sizeof env, "%s/missing", root);
    setenv("USLAB_PRESSURE_SOURCE", env, 1);
    expect_source("USLAB_PRESSURE_SOURCE missing", -1, NULL);
    /* A FIFO nobody writes is neither, and looking at it does not wait for a writer. */
    snprintf(env, sizeof env, "%s/fifo.psi", root);
    CHECK(mkfifo(env, 0600) == 0, "mkfifo %s: %s", env, strerror(errno));
    setenv("USLAB_PRESSURE_SOURCE", env, 1);
    expect_source("USLAB_PRESSURE_SOURCE FIFO", -1, NULL);

    unsetenv("USLAB_PRESSURE_SOURCE");
    usi_pressure_reset(NULL);
    nftw(root, remove_one, 16, FTW_DEPTH | FTW_PHYS);
    TEST_DONE();
}
