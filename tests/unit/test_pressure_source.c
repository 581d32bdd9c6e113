/* SPDX-License-Identifier: MIT */
/*
 * test_pressure_source.c - which memory-pressure source pressure.c chooses (design §3,
 * issue 13), without depending on the host: usi_pressure_reset makes the automatic choice
 * look for /proc/self/cgroup, /sys/fs/cgroup/<group>/memory.pressure and
 * /proc/pressure/memory under a directory this test fills, standing for "/". Each case
 * checks the source chosen (usi_pressure_source) and, where there is one, that
 * usi_pressure_now reads that source and no other: pressure when its `some total` grows by
 * 50 ms, none when only the other file grows. USLAB_RETURN is left at `delay`, so no pass
 * of the library's own reads pressure meanwhile.
 *
 *  - cgroup v2: the "0::/<group>" line names a directory with memory.pressure: it wins over
 *    /proc/pressure/memory;
 *  - the same with cgroup v1 lines before it (a hybrid host);
 *  - the cgroup directory has no memory.pressure (no PSI for cgroups), the "0::" line is
 *    missing (cgroup v1 only), its path is longer than a path can be, or memory.pressure is
 *    not in PSI format: /proc/pressure/memory;
 *  - nothing at all: no source, never pressure;
 *  - USLAB_PRESSURE_SOURCE wins over all of them: a directory, a PSI file, or neither (no
 *    source, with a warning).
 */
#define _GNU_SOURCE
#include "check.h"
#include "internal.h"

#include <errno.h>
#include <ftw.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[64] = "pressure-root-XXXXXX";

/* Writes text to root/rel, making its directories. */
static void put(const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *s = strchr(path + strlen(root) + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = '\0';
        CHECK(mkdir(path, 0700) == 0 || errno == EEXIST, "mkdir %s: %s", path, strerror(errno));
        *s = '/';
    }
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s: %s", path, strerror(errno));
    fputs(text, f);
    fclose(f);
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

    unsetenv("USLAB_PRESSURE_SOURCE");
    usi_pressure_reset(NULL);
    nftw(root, remove_one, 16, FTW_DEPTH | FTW_PHYS);
    TEST_DONE();
}
