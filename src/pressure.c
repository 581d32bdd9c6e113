/* SPDX-License-Identifier: MIT */
/*
 * pressure.c - is the system short of memory? (docs/design.md §3, issue 13): the kernel's
 * memory-pressure signals, read by the purger's passes when USLAB_RETURN asks for them.
 *
 * The source (chosen once, at the first reading):
 *  - USLAB_PRESSURE_SOURCE: a cgroup v2 directory, or a file in PSI format (tests point it
 *    at files they write; a user may point it at another cgroup);
 *  - else the process's own cgroup v2 directory (/proc/self/cgroup's "0::" line under
 *    /sys/fs/cgroup), when it has a memory.pressure file;
 *  - else the system's PSI file, /proc/pressure/memory.
 * (Tests may have the automatic choice look for those three under another directory than
 * "/": usi_pressure_reset.)
 * A directory gives three signals: its memory.pressure (PSI), its memory.events (the `high`,
 * `max` and `oom` counters: the kernel reclaimed or refused because of the group's limits)
 * and memory.current against memory.high. The system gets pressure = one of them since
 * the previous reading:
 *  - PSI's `some total` (microseconds in which some task stalled on memory) grew by at
 *    least USI_PSI_STALL_US;
 *  - an event counter grew;
 *  - memory.current is at least 7/8 of memory.high.
 * The first reading only takes the counters' levels. Files that cannot be read count as
 * no pressure; a source that cannot be read at all is dropped for good (one note).
 *
 * Only the purger's passes call this (a lock of their own is not needed: the purger thread
 * and inline passes never run two at a time, purge.c's `running` and its single thread),
 * with no uslab lock held; no allocation: fixed buffers.
 */
#include "internal.h"

#include <string.h>

#define USI_PSI_STALL_US 10000 /* 10 ms of stall between two readings */

static struct {
    int state;          /* 0 not chosen yet, 1 a directory, 2 a PSI file, -1 none */
    char path[256];     /* the directory or the file */
    uint64_t psi_total; /* last `some total=` */
    uint64_t events;    /* last sum of memory.events' high, max and oom */
    char root[128];     /* what the automatic choice takes as "/" (tests; else empty) */
} src;

/* The unsigned number after `key` in text (first occurrence at a line start or after a
 * blank), or -1 when there is none. */
static int64_t number_after(const char *text, const char *key)
{
    size_t klen = strlen(key);
    for (const char *p = text; (p = strstr(p, key)) != NULL; p += klen) {
        if (p != text && p[-1] != ' ' && p[-1] != '\n')
            continue;
        const char *q = p + klen;
        if (*q < '0' || *q > '9')
            continue;
        uint64_t v = 0;
        for (; *q >= '0' && *q <= '9'; q++)
            v = v * 10 + (uint64_t)(*q - '0');
        return (int64_t)(v > (uint64_t)INT64_MAX ? INT64_MAX : v);
    }
    return -1;
}

/* Reads a small text file into buf (NUL-terminated); returns its length or -1. */
static long read_text(const char *dir, const char *name, char *buf, size_t len)
{
    char path[320];
    size_t d = strlen(dir), n = name ? strlen(name) : 0;
    if (d + n + 2 > sizeof path)
        return -1;
    memcpy(path, dir, d);
    if (name) {
        path[d] = '/';
        memcpy(path + d + 1, name, n + 1);
    } else {
        path[d] = '\0';
    }
    long got = usi_os_read_file(path, buf, len - 1);
    if (got < 0)
        return -1;
    buf[got] = '\0';
    return got;
}

/* The PSI `some` line's total: -1 when it cannot be read. */
static int64_t psi_some_total(const char *dir, const char *name)
{
    char buf[256];
    if (read_text(dir, name, buf, sizeof buf) < 0 || strncmp(buf, "some ", 5) != 0)
        return -1;
    return number_after(buf, "total=");
}

static void set_path(const char *p, size_t len)
{
    if (len >= sizeof src.path)
        len = sizeof src.path - 1;
    memcpy(src.path, p, len);
    src.path[len] = '\0';
}

/* out = src.root followed by path; 0, or -1 when it does not fit. */
static int under_root(char *out, size_t len, const char *path)
{
    size_t r = strlen(src.root), plen = strlen(path);
    if (r + plen + 1 > len)
        return -1;
    memcpy(out, src.root, r);
    memcpy(out + r, path, plen);
    out[r + plen] = '\0';
    return 0;
}

static void choose_source(void)
{
    const char *env = usi_os_getenv("USLAB_PRESSURE_SOURCE");
    char buf[512], file[sizeof src.path];
    src.state = -1;
    if (env && *env) {
        set_path(env, strlen(env));
        if (psi_some_total(src.path, "memory.pressure") >= 0 ||
            read_text(src.path, "memory.events", buf, sizeof buf) >= 0)
            src.state = 1;
        else if (psi_some_total(src.path, NULL) >= 0)
            src.state = 2;
        else
            usi_report_warn("USLAB_PRESSURE_SOURCE=%s: neither a cgroup directory nor a "
                            "PSI file; no memory-pressure signal",
                            env);
        return;
    }
    /* The cgroup v2 line of /proc/self/cgroup: "0::/path". */
    if (under_root(file, sizeof file, "/proc/self/cgroup") == 0 &&
        read_text(file, NULL, buf, sizeof buf) > 0) {
        const char *line = strstr(buf, "0::");
        if (line && (line == buf || line[-1] == '\n')) {
            const char *rel = line + 3, *end = strchr(rel, '\n');
            size_t rlen = end ? (size_t)(end - rel) : strlen(rel);
            static const char root[] = "/sys/fs/cgroup";
            char dir[sizeof src.path];
            if (sizeof root - 1 + rlen < sizeof dir) {
                memcpy(dir, root, sizeof root - 1);
                memcpy(dir + sizeof root - 1, rel, rlen);
                dir[sizeof root - 1 + rlen] = '\0';
                if (under_root(file, sizeof file, dir) == 0 &&
                    psi_some_total(file, "memory.pressure") >= 0) {
                    set_path(file, strlen(file));
                    src.state = 1;
                    return;
                }
            }
        }
    }
    if (under_root(file, sizeof file, "/proc/pressure/memory") == 0 &&
        psi_some_total(file, NULL) >= 0) {
        set_path(file, strlen(file));
        src.state = 2;
        return;
    }
    usi_report_note("no memory-pressure signal (no PSI, no cgroup v2 memory.pressure)");
}

void usi_pressure_reset(const char *root)
{
    size_t n = root ? strlen(root) : 0;
    memset(&src, 0, sizeof src);
    if (n >= sizeof src.root)
        src.state = -1; /* too long: no source rather than a wrong one */
    else if (n)
        memcpy(src.root, root, n);
}

int usi_pressure_source(const char **path)
{
    if (src.state == 0)
        choose_source();
    if (path)
        *path = src.state > 0 ? src.path : NULL;
    return src.state;
}

/* memory.events' high + max + oom; -1 when unreadable. */
static int64_t cgroup_events(void)
{
    char buf[512];
    if (read_text(src.path, "memory.events", buf, sizeof buf) < 0)
        return -1;
    int64_t sum = 0;
    static const char *const keys[] = {"high ", "max ", "oom "};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        int64_t v = number_after(buf, keys[i]);
        if (v > 0)
            sum += v;
    }
    return sum;
}

/* memory.current >= 7/8 of memory.high (a number; "max" means no limit). */
static int cgroup_near_high(void)
{
    char buf[64];
    if (read_text(src.path, "memory.high", buf, sizeof buf) < 0 || buf[0] < '0' || buf[0] > '9')
        return 0;
    int64_t high = number_after(buf, "");
    if (read_text(src.path, "memory.current", buf, sizeof buf) < 0)
        return 0;
    int64_t current = number_after(buf, "");
    return high > 0 && current >= 0 && (uint64_t)current >= (uint64_t)high / 8 * 7;
}

int usi_pressure_now(void)
{
    if (usi_pressure_source(NULL) < 0)
        return 0;
    int pressure = 0;
    int64_t total = src.state == 1 ? psi_some_total(src.path, "memory.pressure")
                                   : psi_some_total(src.path, NULL);
    if (total >= 0) {
        if (src.psi_total && (uint64_t)total >= src.psi_total + USI_PSI_STALL_US)
            pressure = 1;
        if (!src.psi_total || pressure || (uint64_t)total < src.psi_total)
            src.psi_total = (uint64_t)total ? (uint64_t)total : 1;
    }
    if (src.state == 1) {
        int64_t events = cgroup_events();
        if (events >= 0) {
            if (src.events && (uint64_t)events + 1 > src.events)
                pressure = 1;
            src.events = (uint64_t)events + 1; /* +1: 0 means "not read yet" */
        }
        if (cgroup_near_high())
            pressure = 1;
    }
    return pressure;
}
