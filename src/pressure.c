/* SPDX-License-Identifier: MIT */
/*
 * pressure.c - is the system short of memory? (docs/design.md §3, issue 13): the kernel's
 * memory-pressure signals, read by the purger's passes when USLAB_RETURN asks for them.
 *
 * The source (chosen once, at the first reading):
 *  - USLAB_PRESSURE_SOURCE: a cgroup v2 directory, or a file in PSI format (tests point it
 *    at files they write; a user may point it at another cgroup);
 *  - else the process's own cgroup v2 directory, when it has a memory.pressure file in PSI
 *    format: its path (/proc/self/cgroup's "0::" line; already relative to the namespace's
 *    root in a cgroup namespace) is looked for under each cgroup2 mount of
 *    /proc/self/mountinfo in turn (/sys/fs/cgroup, /sys/fs/cgroup/unified on a hybrid
 *    host, ...): a mount shows the part of the hierarchy below its root field, so the path
 *    is made relative to that root, and a mount whose root does not hold it is passed
 *    over; the first mount whose directory has memory.pressure wins. When mountinfo cannot
 *    be read, /sys/fs/cgroup is taken as the mount of "/". A path with ".." (a group
 *    outside the cgroup namespace) has no directory;
 *  - else the system's PSI file, /proc/pressure/memory.
 * The choice opens, reads and closes files, nothing else. Lines too long for the reader's
 * buffer (4 KiB) are skipped, as are lines that do not parse.
 * (Tests may have the automatic choice look for those files under another directory than
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
 *
 * Only the purger's passes call this (a lock of their own is not needed: the purger thread
 * and inline passes never run two at a time, purge.c's `running` and its single thread),
 * with no uslab lock held; no allocation: fixed buffers.
 */
#include "os.h"
#include "purge.h"
#include "report.h"

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

/* Calls fn on each line of the file at path (without its newline, NUL-terminated, in a
 * buffer fn may modify) until fn returns nonzero. A line longer than the buffer is skipped
 * whole. Returns fn's nonzero result, 0 at the end, or -1 when the file cannot be opened
 * or read. Open, read and close only; the buffer (LINE_BUF bytes, static) is the caller's:
 * choose_source never runs twice at a time (see the top). */
#define LINE_BUF 4096
static int each_line(const char *path, int (*fn)(char *line, void *arg), void *arg, char *buf)
{
    int fd = usi_os_open_ro(path);
    if (fd < 0)
        return -1;
    size_t fill = 0;
    int result = 0, dropping = 0; /* dropping: the rest of a line too long for buf */
    for (;;) {
        long got = usi_os_read(fd, buf + fill, LINE_BUF - 1 - fill);
        if (got < 0) {
            result = -1;
            break;
        }
        if (got == 0) {
            if (fill && !dropping) {
                buf[fill] = '\0';
                result = fn(buf, arg);
            }
            break;
        }
        fill += (size_t)got;
        size_t line = 0;
        for (char *nl; !result && (nl = memchr(buf + line, '\n', fill - line));) {
            *nl = '\0';
            if (!dropping)
                result = fn(buf + line, arg);
            dropping = 0;
            line = (size_t)(nl + 1 - buf);
        }
        if (result)
            break;
        memmove(buf, buf + line, fill - line);
        fill -= line;
        if (fill == LINE_BUF - 1) {
            fill = 0;
            dropping = 1;
        }
    }
    usi_os_close(fd);
    return result;
}

/* The process's cgroup path: the "0::" line of /proc/self/cgroup (cgroup v2), or the line
 * of a cgroup v1 hierarchy that has `controller` ("4:pids:/a/b"; "3:cpu,cpuacct:/"). */
struct group {
    char path[sizeof src.path];
    int found;
    const char *controller; /* NULL: cgroup v2 */
};

/* Whether the comma-separated list (up to its end or `stop`) has the item `word`. */
static int list_has(const char *list, char stop, const char *word)
{
    size_t w = strlen(word);
    for (const char *p = list; *p && *p != stop;) {
        size_t n = 0;
        while (p[n] && p[n] != ',' && p[n] != stop)
            n++;
        if (n == w && strncmp(p, word, w) == 0)
            return 1;
        p += n;
        if (*p == ',')
            p++;
    }
    return 0;
}

/* each_line's fn for /proc/self/cgroup. The path is kept when it is absolute, fits and has
 * no ".." component (a cgroup outside the process's cgroup namespace: no directory of it
 * is visible). */
static int find_group(char *line, void *arg)
{
    struct group *g = arg;
    const char *path;
    if (!g->controller) {
        if (strncmp(line, "0::", 3) != 0)
            return 0;
        path = line + 3;
    } else {
        const char *list = strchr(line, ':'), *end = list ? strchr(list + 1, ':') : NULL;
        if (!end || !list_has(list + 1, ':', g->controller))
            return 0;
        path = end + 1;
    }
    size_t n = strlen(path);
    if (path[0] != '/' || n >= sizeof g->path)
        return 1;
    for (const char *p = path; (p = strstr(p, "/..")) != NULL; p += 3)
        if (p[3] == '\0' || p[3] == '/')
            return 1;
    memcpy(g->path, path, n + 1);
    g->found = 1;
    return 1;
}

/* file = the root, mount and rest (rest: the group's path below the mount's root, "" or
 * "/..."); returns the length of the root and mount part, or -1 when it does not fit. */
static long group_dir(char *file, size_t len, const char *mount, const char *rest)
{
    char dir[sizeof src.path];
    size_t m = strlen(mount), r = strcmp(rest, "/") == 0 ? 0 : strlen(rest);
    while (m > 0 && mount[m - 1] == '/')
        m--;
    if (m + r + 1 >= sizeof dir)
        return -1;
    memcpy(dir, mount, m);
    memcpy(dir + m, rest, r);
    dir[m + r] = '\0';
    if (m + r == 0)
        memcpy(dir, "/", 2);
    if (under_root(file, len, dir) < 0)
        return -1;
    return (long)(strlen(src.root) + m);
}

/* Takes mount/rest as the source when it has a memory.pressure in PSI format: 1, else 0. */
static int try_group_dir(const char *mount, const char *rest)
{
    char file[sizeof src.path];
    if (group_dir(file, sizeof file, mount, rest) < 0 ||
        psi_some_total(file, "memory.pressure") < 0)
        return 0;
    set_path(file, strlen(file));
    src.state = 1;
    return 1;
}

/* The next blank-separated field of a mountinfo line (NUL-terminated in place), NULL past
 * the end. */
static char *next_field(char **cursor)
{
    char *start = *cursor;
    if (!start)
        return NULL;
    char *end = strchr(start, ' ');
    if (end)
        *end++ = '\0';
    *cursor = end;
    return start;
}

/* Decodes mountinfo's octal escapes in place (\040 a blank, \011 a tab, \012 a newline,
 * \134 a backslash); 0, or -1 for an escaped NUL. A backslash without three octal digits
 * (at most \377) after it stays itself. */
static int unescape(char *s)
{
    char *out = s;
    for (const char *in = s; *in;) {
        if (in[0] == '\\' && in[1] >= '0' && in[1] <= '3' && in[2] >= '0' && in[2] <= '7' &&
            in[3] >= '0' && in[3] <= '7') {
            int c = (in[1] - '0') * 64 + (in[2] - '0') * 8 + (in[3] - '0');
            if (c == 0)
                return -1;
            *out++ = (char)c;
            in += 4;
        } else {
            *out++ = *in++;
        }
    }
    *out = '\0';
    return 0;
}

/* each_line's fn for /proc/self/mountinfo, arg the group's path:
 *   ID PARENT MAJ:MIN ROOT MOUNT-POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER-OPTIONS
 * A cgroup2 mount whose ROOT (the part of the hierarchy visible at MOUNT-POINT) holds the
 * group gives MOUNT-POINT + the group's path below ROOT; 1 when that is taken. Lines with
 * fields missing, another file system, or paths that are not absolute are passed over. */
struct mount_walk {
    const char *group;
    const char *controller; /* NULL: a cgroup2 mount; else a cgroup (v1) mount with it */
    int (*take)(const char *mount, const char *rest); /* 1: taken, the walk ends */
};

static int try_mount(char *line, void *arg)
{
    const struct mount_walk *walk = arg;
    const char *group = walk->group;
    char *cursor = line, *field[6], *fstype = NULL, *super = NULL;
    for (size_t i = 0; i < 6; i++)
        if ((field[i] = next_field(&cursor)) == NULL)
            return 0;
    for (char *opt; (opt = next_field(&cursor)) != NULL;)
        if (strcmp(opt, "-") == 0) {
            fstype = next_field(&cursor);
            if (next_field(&cursor)) /* the source */
                super = next_field(&cursor);
            break;
        }
    if (!walk->controller ? !fstype || strcmp(fstype, "cgroup2") != 0
                          : !fstype || strcmp(fstype, "cgroup") != 0 || !super ||
                                !list_has(super, '\0', walk->controller))
        return 0;
    char *root = field[3], *mount = field[4];
    if (unescape(root) < 0 || unescape(mount) < 0 || root[0] != '/' || mount[0] != '/')
        return 0;
    size_t r = strlen(root);
    while (r > 1 && root[r - 1] == '/')
        r--;
    if (r == 1)
        return walk->take(mount, group);
    if (strncmp(group, root, r) != 0 || (group[r] != '\0' && group[r] != '/'))
        return 0; /* the group is not visible under this mount */
    return walk->take(mount, group + r);
}

/* Calls take on the process's cgroup v2 group under each cgroup2 mount that shows it (or
 * /sys/fs/cgroup when mountinfo cannot be read) until it returns 1; returns that, else 0.
 * With a controller: its cgroup v1 group, under each cgroup mount of that controller (or
 * /sys/fs/cgroup/<controller>). */
static int each_group_mount(const char *controller,
                            int (*take)(const char *mount, const char *rest), char *buf)
{
    char file[sizeof src.path];
    struct group group = {.found = 0, .controller = controller};
    if (under_root(file, sizeof file, "/proc/self/cgroup") < 0 ||
        each_line(file, find_group, &group, buf) < 0 || !group.found)
        return 0;
    struct mount_walk walk = {group.path, controller, take};
    int found = under_root(file, sizeof file, "/proc/self/mountinfo") == 0
                    ? each_line(file, try_mount, &walk, buf)
                    : -1;
    if (found < 0 && !controller)
        found = take("/sys/fs/cgroup", group.path);
    if (found < 0 && controller) {
        char mount[64] = "/sys/fs/cgroup/";
        size_t m = strlen(mount), c = strlen(controller);
        if (m + c < sizeof mount) {
            memcpy(mount + m, controller, c + 1);
            found = take(mount, group.path);
        }
    }
    return found > 0;
}

static char line_buf[LINE_BUF] USI_COLD_ZEROED; /* choose_source's lines */

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
    /* The process's own cgroup v2 directory: under each cgroup2 mount of mountinfo that
     * shows it, or under /sys/fs/cgroup when mountinfo cannot be read. */
    if (each_group_mount(NULL, try_group_dir, line_buf) > 0)
        return;
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
