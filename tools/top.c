/* SPDX-License-Identifier: MIT */
/*
 * top.c - `uslab stats PID` and `uslab top PID` (docs/design.md §10.1): the statistics of a
 * running process, read from the live statistics page it keeps in /dev/shm (format in
 * src/live.h), once as the text uslab_stats_print prints (src/statsfmt.c), or as a
 * refreshing slabtop-style view.
 *
 * Only the user's own processes: the process's real and effective user ids must be the
 * caller's effective one, and the page must be a regular file the caller owns with no
 * permission for anyone else (it is made 0600). A page is trusted only while its process
 * lives, has the start time the page records and maps it; other pages of the user that
 * fail this (their process was killed, or called exec) are removed here, as the library
 * removes them when it makes a page.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "live.h"
#include "tool.h"

/* ---- processes --------------------------------------------------------------------------- */

/* What /proc says of a process. Invariant: comm is NUL-terminated (empty if unknown). */
struct proc_info {
    int pid;
    char comm[64];
    char state;     /* field 3 of stat: R, S, Z... */
    uint64_t start; /* field 22 of stat: clock ticks after boot */
};

/* Reads up to len - 1 bytes of a file, NUL-terminated; bytes read or -1 with errno. */
static long read_text(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t got = 0;
    while (got + 1 < len) {
        ssize_t r = read(fd, buf + got, len - 1 - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    int e = errno;
    close(fd);
    errno = e;
    buf[got] = '\0';
    return (long)got;
}

/* 0, or -1 when there is no such process (errno ENOENT) or /proc cannot tell. */
static int proc_read(int pid, struct proc_info *p)
{
    char path[64], text[2048];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    long n = read_text(path, text, sizeof text);
    memset(p, 0, sizeof *p);
    p->pid = pid;
    if (n < 0) {
        if (errno == ESRCH)
            errno = ENOENT;
        return -1;
    }
    if (usi_live_parse_stat(text, (size_t)n, &p->state, &p->start) != 0) {
        errno = EINVAL;
        return -1;
    }
    const char *open_paren = strchr(text, '('), *close_paren = strrchr(text, ')');
    if (open_paren && close_paren > open_paren) {
        size_t len = (size_t)(close_paren - open_paren - 1);
        if (len >= sizeof p->comm)
            len = sizeof p->comm - 1;
        memcpy(p->comm, open_paren + 1, len);
    }
    return 0;
}

static int proc_exited(const struct proc_info *p)
{
    return p->state == 'Z' || p->state == 'X';
}

/* The value after "<key>:" in /proc/<pid>/status as numbers (up to 4); how many, or -1. */
static int proc_status(int pid, const char *key, long *values, int max)
{
    char path[64], text[8192];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    if (read_text(path, text, sizeof text) < 0)
        return -1;
    size_t klen = strlen(key);
    for (char *line = text; line && *line;
         line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        if (!strncmp(line, key, klen) && line[klen] == ':') {
            int n = 0;
            char *p = line + klen + 1, *end;
            while (n < max) {
                long v = strtol(p, &end, 10);
                if (end == p)
                    break;
                values[n++] = v;
                p = end;
            }
            return n;
        }
    return -1;
}

/* Whether /proc/<pid>/maps has a line whose path contains `text` (with `whole`, whose
 * path is `text`): 1, 0, or -1 unreadable. */
static int proc_maps_mention(int pid, const char *text, int whole)
{
    char path[64], line[4096];
    snprintf(path, sizeof path, "/proc/%d/maps", pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    int found = 0;
    size_t tlen = strlen(text);
    while (!found && fgets(line, sizeof line, f)) {
        const char *at = strstr(line, text);
        found = at && (!whole || at[tlen] == '\n' || at[tlen] == '\0');
    }
    fclose(f);
    return found;
}

/* The value of a variable in the process's initial environment, into buf; NULL if unset
 * or unreadable. */
static const char *proc_getenv(int pid, const char *name, char *buf, size_t len)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/environ", pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return NULL;
    char entry[4096];
    size_t nlen = strlen(name), k = 0;
    const char *found = NULL;
    for (int ch; !found && (ch = getc(f)) != EOF;) {
        if (ch != '\0') {
            if (k + 1 < sizeof entry)
                entry[k++] = (char)ch;
            continue;
        }
        entry[k] = '\0';
        k = 0;
        if (!strncmp(entry, name, nlen) && entry[nlen] == '=') {
            size_t n = strlen(entry + nlen + 1);
            if (n >= len)
                n = len - 1; /* cut: the values looked for are short words */
            memcpy(buf, entry + nlen + 1, n);
            buf[n] = '\0';
            found = buf;
        }
    }
    fclose(f);
    return found;
}

/* ---- pages ------------------------------------------------------------------------------- */

/*
 * A page opened for reading. Invariants: map is the whole file, mapped read-only; header
 * and records are the last consistent copy (read_page), records holding header.ncaches
 * entries, at most capacity.
 */
struct page {
    struct proc_info proc;
    const struct usi_live_header *map;
    size_t bytes;
    uint32_t capacity;
    struct usi_live_header header;
    struct usi_live_cache *records;
};

/* Opens path if it is a regular file of ours that no one else may read or write; the
 * descriptor, or -1 with *why set (NULL when there is no such file). */
static int open_own(const char *path, struct stat *st, const char **why)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        *why = errno == ENOENT ? NULL : errno == ELOOP ? "it is a symbolic link" : strerror(errno);
        return -1;
    }
    *why = NULL;
    if (fstat(fd, st) != 0)
        *why = strerror(errno);
    else if (!S_ISREG(st->st_mode))
        *why = "it is not a regular file";
    else if (st->st_uid != geteuid())
        *why = "it belongs to another user";
    else if (st->st_mode & 077)
        *why = "others may read or write it (a page is made mode 0600)";
    if (*why) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Whether the page at path (of process pid) is stale: its process is gone or a zombie, or
 * it is a uslab page whose start time is not the process's or that the process does not
 * map (it called exec). A file that is not a page is stale only with its process gone. */
static int page_is_stale(const char *path, int pid)
{
    struct proc_info p;
    if (proc_read(pid, &p) != 0)
        return errno == ENOENT;
    if (proc_exited(&p))
        return 1;
    struct stat st;
    const char *why;
    int fd = open_own(path, &st, &why);
    if (fd < 0)
        return 0;
    struct usi_live_header h;
    ssize_t n = pread(fd, &h, sizeof h, 0);
    close(fd);
    if (n != (ssize_t)sizeof h || memcmp(h.magic, USI_LIVE_MAGIC, sizeof h.magic) != 0)
        return 0;
    return h.start_time != p.start || proc_maps_mention(pid, path, 1) == 0;
}

/* Removes the caller's stale pages from /dev/shm. */
static void sweep_stale_pages(void)
{
    DIR *d = opendir(USI_LIVE_DIR);
    if (!d)
        return;
    unsigned me = (unsigned)geteuid();
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        unsigned uid;
        int pid;
        if (!usi_live_parse_name(e->d_name, &uid, &pid) || uid != me)
            continue;
        char path[USI_LIVE_PATH_MAX];
        usi_live_path(path, uid, pid);
        struct stat st;
        const char *why;
        int fd = open_own(path, &st, &why);
        if (fd < 0)
            continue; /* not ours to remove */
        close(fd);
        if (page_is_stale(path, pid))
            unlink(path);
    }
    closedir(d);
}

/* Process pid's soft limit on a file's size (RLIMIT_FSIZE, from /proc/<pid>/limits): bytes,
 * or -1 when unlimited or unreadable. */
static long long proc_fsize_limit(int pid)
{
    char path[64], text[4096];
    snprintf(path, sizeof path, "/proc/%d/limits", pid);
    if (read_text(path, text, sizeof text) < 0)
        return -1;
    const char *line = strstr(text, "Max file size");
    if (!line)
        return -1;
    char *end;
    long long v = strtoll(line + strlen("Max file size"), &end, 10);
    return end == line + strlen("Max file size") ? -1 : v;
}

/* The size and free bytes of USI_LIVE_DIR, as the library reads them (usi_live_room): 0, or
 * -1. The process's /dev/shm is taken to be the caller's. */
static int shm_space(uint64_t *size, uint64_t *avail)
{
    struct statvfs v;
    if (statvfs(USI_LIVE_DIR, &v) != 0)
        return -1;
    *size = (uint64_t)v.f_blocks * v.f_frsize;
    *avail = (uint64_t)v.f_bavail * v.f_frsize;
    return 0;
}

/* Says on stderr why process p has no page we can read. */
static void explain_no_page(const struct proc_info *p)
{
    int libuslab = proc_maps_mention(p->pid, "libuslab", 0);
    if (libuslab == 0) {
        fprintf(stderr,
                "uslab: process %d (%s) does not use uslab: no libuslab is mapped into it and it "
                "has no live statistics page\n",
                p->pid, p->comm);
        return;
    }
    if (libuslab < 0) { /* another user's process, or one that is not dumpable */
        fprintf(stderr,
                "uslab: process %d (%s) has no live statistics page, and its memory map cannot "
                "be read here (%s) to tell whether it uses uslab\n",
                p->pid, p->comm, strerror(errno));
        return;
    }
    long seccomp = 0;
    char live[64];
    const char *setting = proc_getenv(p->pid, "USLAB_LIVE", live, sizeof live);
    proc_status(p->pid, "Seccomp", &seccomp, 1);
    uint64_t shm_size = 0, shm_free = 0;
    fprintf(stderr, "uslab: process %d (%s) uses uslab but has no live statistics page: ", p->pid,
            p->comm);
    if (setting && !strcmp(setting, "never"))
        fputs("it runs with USLAB_LIVE=never\n", stderr);
    else if (seccomp)
        fputs("it runs under a seccomp filter, where uslab makes none\n", stderr);
    else if (proc_fsize_limit(p->pid) >= 0 &&
             proc_fsize_limit(p->pid) < (long long)USI_LIVE_FILE_BYTES)
        fprintf(stderr,
                "its file size limit (ulimit -f, %lld bytes) is below the page's %u bytes\n",
                proc_fsize_limit(p->pid), (unsigned)USI_LIVE_FILE_BYTES);
    else if (shm_space(&shm_size, &shm_free) == 0 &&
             !usi_live_room(shm_size, shm_free, USI_LIVE_FILE_BYTES))
        fprintf(stderr,
                "%s has %llu KiB free of %llu KiB: uslab makes a page (%u KiB) only while at "
                "least half of it and %llu MiB stay free after it\n",
                USI_LIVE_DIR, (unsigned long long)(shm_free >> 10),
                (unsigned long long)(shm_size >> 10), (unsigned)(USI_LIVE_FILE_BYTES >> 10),
                (unsigned long long)(USI_LIVE_MIN_FREE >> 20));
    else if (!(setting && !strcmp(setting, "always")))
        fputs("USLAB_LIVE=auto (the default) makes one once the process has allocated for a "
              "second, on a slow path (an allocation that refills a magazine); try again, or "
              "run it with USLAB_LIVE=always (uslab run --live), which makes one at once\n",
              stderr);
    else
        fputs("it makes one on its next slow path (an allocation that refills a magazine) "
              "unless it could not (no /dev/shm, or no room in it); try again\n",
              stderr);
}

/* Opens the page of process pid: 0, or 1 with a message on stderr. */
static int page_open(int pid, struct page *pg)
{
    memset(pg, 0, sizeof *pg);
    sweep_stale_pages(); /* the user's, also the page of this pid if it is stale */
    if (proc_read(pid, &pg->proc) != 0) {
        if (errno == ENOENT)
            fprintf(stderr, "uslab: no process %d\n", pid);
        else
            fprintf(stderr, "uslab: cannot read /proc/%d/stat: %s\n", pid, strerror(errno));
        return 1;
    }
    if (proc_exited(&pg->proc)) {
        fprintf(stderr, "uslab: process %d (%s) has exited\n", pid, pg->proc.comm);
        return 1;
    }
    long uids[2] = {-1, -1};
    unsigned me = (unsigned)geteuid();
    if (proc_status(pid, "Uid", uids, 2) != 2) {
        fprintf(stderr, "uslab: cannot read the owner of process %d\n", pid);
        return 1;
    }
    if ((unsigned long)uids[0] != me || (unsigned long)uids[1] != me) {
        fprintf(stderr,
                "uslab: process %d (%s) belongs to user id %ld, not to you (%u): uslab reads "
                "only your own processes\n",
                pid, pg->proc.comm, (unsigned long)uids[1] != me ? uids[1] : uids[0], me);
        return 1;
    }
    char path[USI_LIVE_PATH_MAX];
    usi_live_path(path, me, pid);
    struct stat st;
    const char *why;
    int fd = open_own(path, &st, &why);
    if (fd < 0) {
        if (!why)
            explain_no_page(&pg->proc);
        else
            fprintf(stderr, "uslab: %s is not read: %s\n", path, why);
        return 1;
    }
    if ((size_t)st.st_size < sizeof(struct usi_live_header)) {
        close(fd);
        fprintf(stderr, "uslab: %s is not complete yet; try again\n", path);
        return 1;
    }
    pg->bytes = (size_t)st.st_size;
    void *map = mmap(NULL, pg->bytes, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) {
        fprintf(stderr, "uslab: cannot map %s: %s\n", path, strerror(errno));
        return 1;
    }
    pg->map = map;
    const struct usi_live_header *h = map;
    const char *bad = NULL;
    if (memcmp(h->magic, USI_LIVE_MAGIC, sizeof h->magic) != 0)
        bad = "it is not a uslab statistics page (or not complete yet; try again)";
    else if (h->version != USI_LIVE_VERSION)
        bad = "it was written by another version of uslab";
    else if (h->header_bytes != sizeof(struct usi_live_header) ||
             h->record_bytes != sizeof(struct usi_live_cache) ||
             h->header_bytes + (uint64_t)h->capacity * h->record_bytes > pg->bytes)
        bad = "its sizes do not fit the file";
    else if (h->pid != pid || h->start_time != pg->proc.start)
        bad = "it is a stale page of an earlier process with this pid";
    if (bad) {
        fprintf(stderr, "uslab: %s is not read: %s\n", path, bad);
        munmap(map, pg->bytes);
        pg->map = NULL;
        return 1;
    }
    pg->capacity = h->capacity;
    pg->records = calloc(pg->capacity ? pg->capacity : 1, sizeof *pg->records);
    if (!pg->records) {
        fputs("uslab: out of memory\n", stderr);
        return 1;
    }
    return 0;
}

static void page_close(struct page *pg)
{
    if (pg->map)
        munmap((void *)(uintptr_t)pg->map, pg->bytes);
    free(pg->records);
    memset(pg, 0, sizeof *pg);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Copies a consistent snapshot (the seqlock of live.h): 0, or -1 if the writer never let
 * go for two seconds. */
static int page_read(struct page *pg)
{
    const struct usi_live_header *h = pg->map;
    for (int tries = 0; tries < 2000; tries++) {
        uint64_t before = __atomic_load_n(&h->seq, __ATOMIC_ACQUIRE);
        if (before & 1) {
            sleep_ms(1);
            continue;
        }
        memcpy(&pg->header, h, sizeof pg->header);
        uint32_t n = pg->header.ncaches < pg->capacity ? pg->header.ncaches : pg->capacity;
        memcpy(pg->records, (const char *)h + sizeof *h, n * sizeof *pg->records);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&h->seq, __ATOMIC_RELAXED) == before) {
            pg->header.ncaches = n;
            for (uint32_t i = 0; i < n; i++)
                pg->records[i].name[sizeof pg->records[i].name - 1] = '\0';
            return 0;
        }
    }
    return -1;
}

static uint64_t monotonic_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Age of the snapshot in ms (0 if the clocks disagree). */
static uint64_t page_age_ms(const struct page *pg)
{
    uint64_t now = monotonic_ms();
    return now > pg->header.updated_ms ? now - pg->header.updated_ms : 0;
}

/* Whether the page's process still runs (not exited, not another process with its pid). */
static int page_process_alive(const struct page *pg)
{
    struct proc_info p;
    return proc_read(pg->proc.pid, &p) == 0 && !proc_exited(&p) && p.start == pg->proc.start;
}

static int parse_pid(const char *command, const char *arg)
{
    char *end;
    errno = 0;
    long v = strtol(arg, &end, 10);
    if (errno || end == arg || *end || v <= 0 || v > INT32_MAX)
        usage_error(command, "%s: not a process id: '%s'", command, arg);
    return (int)v;
}

/* ---- uslab stats PID --------------------------------------------------------------------- */

int cmd_stats(int argc, char **argv)
{
    int json = 0, pid = 0;
    for (int i = 0; i < argc; i++) {
        if (is_help_option(argv[i])) {
            print_command_help(stdout, "stats");
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (argv[i][0] == '-' || pid) {
            usage_error("stats", "stats: unexpected argument '%s'", argv[i]);
        } else {
            pid = parse_pid("stats", argv[i]);
        }
    }
    if (!pid)
        usage_error("stats", "stats: which process? (a PID)");
    struct page pg;
    if (page_open(pid, &pg) != 0)
        return 1;
    if (page_read(&pg) != 0) {
        fprintf(stderr, "uslab: the page of process %d never held still\n", pid);
        page_close(&pg);
        return 1;
    }
    if (json) {
        /* The process's figures, added to the "uslab" object (the name escaped). */
        char *text = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&text, &len);
        if (!m) {
            page_close(&pg);
            return 1;
        }
        fprintf(m, ",\"pid\":%d,\"command\":\"", pid);
        usi_statsfmt_json_string(m, pg.proc.comm);
        fprintf(m,
                "\",\"updated_ms_ago\":%" PRIu64 ",\"updates\":%" PRIu64
                ",\"caches_in_use\":%u,\"caches_shown\":%u",
                page_age_ms(&pg), pg.header.updates, pg.header.caches_in_use, pg.header.ncaches);
        fclose(m);
        usi_statsfmt_json(stdout, &pg.header, pg.records, pg.header.ncaches, text);
        free(text);
    } else {
        printf("process %d (%s), statistics of %.1f s ago (%" PRIu64 " updates)", pid, pg.proc.comm,
               (double)page_age_ms(&pg) / 1000.0, pg.header.updates);
        if (pg.header.caches_in_use > pg.header.ncaches)
            printf("; %u of %u caches in use shown", pg.header.ncaches, pg.header.caches_in_use);
        putchar('\n');
        usi_statsfmt_table(stdout, &pg.header, pg.records, pg.header.ncaches);
    }
    page_close(&pg);
    return fflush(stdout) == 0 ? 0 : 1;
}

/* ---- uslab top PID ----------------------------------------------------------------------- */

/* A row of the view: a record and its churn since the previous refresh. Invariant: churn
 * is 0 unless churn_known (the same cache, by id and name, was in the previous refresh,
 * with counters no larger). */
struct row {
    const struct usi_live_cache *c;
    uint64_t churn;
    int churn_known; /* the cache was in the previous refresh too */
};

static uint64_t cached_of(const struct usi_live_cache *c)
{
    return c->cached_thread + c->cached_depot;
}

static int cmp_u64(uint64_t a, uint64_t b)
{
    return a > b ? -1 : a < b; /* largest first */
}

static int by_objects(const struct row *a, const struct row *b)
{
    return cmp_u64(a->c->total_objects, b->c->total_objects);
}
static int by_active(const struct row *a, const struct row *b)
{
    return cmp_u64(a->c->active, b->c->active);
}
static int by_size(const struct row *a, const struct row *b)
{
    return cmp_u64(a->c->object_size, b->c->object_size);
}
static int by_slabs(const struct row *a, const struct row *b)
{
    return cmp_u64(a->c->slabs, b->c->slabs);
}
static int by_partial(const struct row *a, const struct row *b)
{
    return cmp_u64(a->c->partial, b->c->partial);
}
static int by_cached(const struct row *a, const struct row *b)
{
    return cmp_u64(cached_of(a->c), cached_of(b->c));
}
static int by_resident(const struct row *a, const struct row *b)
{
    return cmp_u64(a->c->resident_bytes, b->c->resident_bytes);
}
static int by_churn(const struct row *a, const struct row *b)
{
    return cmp_u64(a->churn, b->churn);
}
static int by_name(const struct row *a, const struct row *b)
{
    return strcmp(a->c->name, b->c->name);
}

/* The orders of the view: a key (for -s and at the keyboard), a name, a comparison.
 * Invariant: keys are distinct lower-case letters other than q. */
static const struct sort_key {
    char key;
    const char *name;
    int (*cmp)(const struct row *, const struct row *);
} sort_keys[] = {
    {'o', "objects", by_objects},
    {'a', "active", by_active},
    {'s', "object size", by_size},
    {'l', "slabs", by_slabs},
    {'p', "partial slabs", by_partial},
    {'m', "cached in magazines", by_cached},
    {'r', "resident", by_resident},
    {'c', "churn", by_churn},
    {'n', "name", by_name},
};
#define NSORT_KEYS  (sizeof sort_keys / sizeof sort_keys[0])
#define DEFAULT_KEY 'a'

void print_top_sort_keys(FILE *f)
{
    for (size_t i = 0; i < NSORT_KEYS; i++)
        fprintf(f, "%s`%c` %s%s", i ? ", " : "", sort_keys[i].key, sort_keys[i].name,
                sort_keys[i].key == DEFAULT_KEY ? " (the default)" : "");
    fputc('.', f);
}

static const struct sort_key *find_sort_key(int key)
{
    for (size_t i = 0; i < NSORT_KEYS; i++)
        if (sort_keys[i].key == tolower(key))
            return &sort_keys[i];
    return NULL;
}

static const struct sort_key *current_key;

static int row_cmp(const void *a, const void *b)
{
    const struct row *x = a, *y = b;
    int r = current_key->cmp(x, y);
    return r ? r : by_name(x, y); /* ties by name: a stable screen */
}

/* "123", "12.3K", "1.0M"... in buf. */
static const char *human(char *buf, size_t len, uint64_t v)
{
    static const char units[] = "KMGTP";
    if (v < 1024) {
        snprintf(buf, len, "%" PRIu64, v);
        return buf;
    }
    double x = (double)v;
    int u = -1;
    while (x >= 1024 && u < 4) {
        x /= 1024;
        u++;
    }
    snprintf(buf, len, "%.1f%c", x, units[u]);
    return buf;
}

static double percent(uint64_t a, uint64_t b)
{
    return b ? 100.0 * (double)a / (double)b : 0.0;
}

/* The terminal: its state before raw mode, restored on every way out. Invariant: raw only
 * while `saved` holds the settings to restore. */
static struct {
    int raw;         /* raw mode and the alternate screen are on */
    int interactive; /* stdin and stdout are a terminal */
    struct termios saved;
} term;

static volatile sig_atomic_t signal_quit, signal_resize, signal_stop;

static void on_signal(int sig)
{
    if (sig == SIGWINCH)
        signal_resize = 1;
    else if (sig == SIGTSTP)
        signal_stop = 1;
    else
        signal_quit = sig;
}

static void terminal_restore(void)
{
    if (!term.raw)
        return;
    term.raw = 0;
    /* Cursor shown, the alternate screen left: the shell's screen as it was. */
    fputs("\033[?25h\033[?1049l", stdout);
    fflush(stdout);
    tcsetattr(STDIN_FILENO, TCSAFLUSH, &term.saved);
}

static int terminal_raw(void)
{
    if (tcgetattr(STDIN_FILENO, &term.saved) != 0)
        return -1;
    struct termios raw = term.saved;
    /* No echo, no line editing; signals (^C, ^Z) still come from the keys. */
    raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
    raw.c_iflag &= ~(tcflag_t)(IXON | ICRNL);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) != 0)
        return -1;
    term.raw = 1;
    fputs("\033[?1049h\033[?25l", stdout); /* the alternate screen, no cursor */
    fflush(stdout);
    return 0;
}

static void terminal_size(int *rows, int *cols)
{
    struct winsize ws;
    *rows = 24;
    *cols = 80;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col) {
        *rows = ws.ws_row;
        *cols = ws.ws_col;
    }
}

/* One screen: lines cut at the width, at most `rows` lines (0: no limit). Invariant:
 * used <= rows when rows is not 0. */
struct screen {
    FILE *f;
    int rows, cols, used;
    int ansi; /* clear each line's rest (a refreshing screen) */
};

__attribute__((format(printf, 2, 3))) static void screen_line(struct screen *s, const char *fmt,
                                                              ...)
{
    if (s->rows && s->used >= s->rows)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (s->cols > 0 && (size_t)s->cols < sizeof line && strlen(line) > (size_t)s->cols)
        line[s->cols] = '\0';
    s->used++;
    /* No newline after the last line of a full screen: the terminal would scroll. */
    int last = s->rows && s->used == s->rows;
    fprintf(s->f, "%s%s%s", line, s->ansi ? "\033[K" : "", last && s->ansi ? "" : "\n");
}

/* The rows of the page's records, with churn against the previous refresh's records. */
static size_t build_rows(const struct page *pg, const struct usi_live_cache *prev, size_t nprev,
                         struct row *rows)
{
    size_t n = pg->header.ncaches;
    for (size_t i = 0; i < n; i++) {
        const struct usi_live_cache *c = &pg->records[i];
        rows[i] = (struct row){c, 0, 0};
        for (size_t j = 0; j < nprev; j++)
            if (prev[j].id == c->id && !strcmp(prev[j].name, c->name) &&
                prev[j].slab_takes <= c->slab_takes && prev[j].slab_puts <= c->slab_puts) {
                rows[i].churn = usi_live_churn(c, &prev[j]);
                rows[i].churn_known = 1;
                break;
            }
    }
    return n;
}

static void draw(struct screen *s, const struct page *pg, struct row *rows, size_t n, double delay,
                 int have_prev)
{
    uint64_t active = 0, total = 0, slabs = 0, empty = 0, active_bytes = 0, space = 0;
    uint64_t resident = 0, thread = 0, depot = 0, churn = 0, min = 0, max = 0, sum = 0;
    for (size_t i = 0; i < n; i++) {
        const struct usi_live_cache *c = rows[i].c;
        active += c->active;
        total += c->total_objects;
        slabs += c->slabs;
        empty += c->empty;
        active_bytes += c->active * c->object_size;
        space += c->slabs * c->slab_size;
        resident += c->resident_bytes;
        thread += c->cached_thread;
        depot += c->cached_depot;
        churn += rows[i].churn;
        min = i == 0 || c->object_size < min ? c->object_size : min;
        max = c->object_size > max ? c->object_size : max;
        sum += c->object_size;
    }
    char a[32], b[32], m[32];
    screen_line(s,
                "uslab top - pid %d (%s) - %u caches in use%s - updated %.1f s ago - every %.1f s",
                pg->proc.pid, pg->proc.comm, pg->header.caches_in_use,
                pg->header.caches_in_use > n ? " (not all shown)" : "",
                (double)page_age_ms(pg) / 1000.0, delay);
    screen_line(s, " Active / Total Objects (%% used)    : %" PRIu64 " / %" PRIu64 " (%.1f%%)",
                active, total, percent(active, total));
    screen_line(s, " Active / Total Slabs (%% used)      : %" PRIu64 " / %" PRIu64 " (%.1f%%)",
                slabs - empty, slabs, percent(slabs - empty, slabs));
    screen_line(s, " Active / Total Size (%% used)       : %s / %s (%.1f%%)",
                human(a, sizeof a, active_bytes), human(b, sizeof b, space),
                percent(active_bytes, space));
    screen_line(s, " Resident / Reserved                : %s / %s", human(a, sizeof a, resident),
                human(b, sizeof b, pg->header.reserved_bytes));
    screen_line(s,
                " Cached in magazines                : %" PRIu64 " (threads %" PRIu64
                ", depots %" PRIu64 ")",
                thread + depot, thread, depot);
    screen_line(s, " Minimum / Average / Maximum Object : %s / %s / %s", human(a, sizeof a, min),
                human(b, sizeof b, n ? sum / n : 0), human(m, sizeof m, max));
    if (have_prev)
        screen_line(s, " Churn since the last refresh       : %" PRIu64 " objects", churn);
    else
        screen_line(s, " Churn since the last refresh       : -");
    screen_line(s, " Sorted by %s; keys: o a s l p m r c n to sort, q to quit", current_key->name);
    screen_line(s, "%s", "");
    screen_line(s, "%9s %8s %4s %8s %6s %5s %7s %8s %8s  %s", "OBJS", "ACTIVE", "USE", "OBJ SIZE",
                "SLABS", "PART", "CACHED", "RESIDENT", "CHURN", "NAME");
    for (size_t i = 0; i < n; i++) {
        const struct usi_live_cache *c = rows[i].c;
        char res[32], ch[32], name[sizeof c->name];
        if (rows[i].churn_known)
            snprintf(ch, sizeof ch, "%" PRIu64, rows[i].churn);
        else
            snprintf(ch, sizeof ch, "-");
        screen_line(s,
                    "%9" PRIu64 " %8" PRIu64 " %3.0f%% %8" PRIu64 " %6" PRIu64 " %5" PRIu64
                    " %7" PRIu64 " %8s %8s  %s",
                    c->total_objects, c->active, percent(c->active, c->total_objects),
                    c->object_size, c->slabs, c->partial, cached_of(c),
                    human(res, sizeof res, c->resident_bytes), ch,
                    usi_statsfmt_name(c->name, name, sizeof name));
    }
}

/* Handles the keys read: 1 when q was pressed. */
static int handle_keys(void)
{
    char buf[32];
    ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
    if (n <= 0 || buf[0] == '\033')
        return 0; /* nothing, or an escape sequence (arrows...): ignored whole */
    for (ssize_t i = 0; i < n; i++) {
        if (buf[i] == 'q' || buf[i] == 'Q')
            return 1;
        const struct sort_key *k = find_sort_key((unsigned char)buf[i]);
        if (k)
            current_key = k;
    }
    return 0;
}

static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGWINCH, SIGTSTP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        if (sigs[i] != SIGTSTP || term.interactive)
            sigaction(sigs[i], &sa, NULL);
}

/* ^Z: the terminal as it was, stop; raw again when continued. */
static void stop_and_resume(void)
{
    signal_stop = 0;
    terminal_restore();
    signal(SIGTSTP, SIG_DFL);
    raise(SIGTSTP);
    install_signals();
    terminal_raw();
    signal_resize = 1; /* the whole screen again */
}

int cmd_top(int argc, char **argv)
{
    double delay = 1.0;
    long iterations = 0;
    int pid = 0;
    current_key = find_sort_key(DEFAULT_KEY);
    for (int i = 0; i < argc; i++) {
        const char *v;
        if (is_help_option(argv[i])) {
            print_command_help(stdout, "top");
            return 0;
        } else if ((v = option_value("top", argc, argv, &i, "-d")) ||
                   (v = option_value("top", argc, argv, &i, "--delay"))) {
            char *end;
            delay = strtod(v, &end);
            if (end == v || *end || !(delay >= 0.1 && delay <= 86400))
                usage_error("top", "top: -d wants seconds from 0.1 to 86400, got '%s'", v);
        } else if ((v = option_value("top", argc, argv, &i, "-s")) ||
                   (v = option_value("top", argc, argv, &i, "--sort"))) {
            const struct sort_key *k = strlen(v) == 1 ? find_sort_key((unsigned char)v[0]) : NULL;
            if (!k)
                usage_error("top", "top: -s wants one of the keys o a s l p m r c n, got '%s'", v);
            current_key = k;
        } else if ((v = option_value("top", argc, argv, &i, "-n")) ||
                   (v = option_value("top", argc, argv, &i, "--iterations"))) {
            char *end;
            iterations = strtol(v, &end, 10);
            if (end == v || *end || iterations < 1)
                usage_error("top", "top: -n wants a count from 1, got '%s'", v);
        } else if (argv[i][0] == '-' || pid) {
            usage_error("top", "top: unexpected argument '%s'", argv[i]);
        } else {
            pid = parse_pid("top", argv[i]);
        }
    }
    if (!pid)
        usage_error("top", "top: which process? (a PID)");
    struct page pg;
    if (page_open(pid, &pg) != 0)
        return 1;
    struct usi_live_cache *prev = calloc(pg.capacity ? pg.capacity : 1, sizeof *prev);
    struct row *rows = calloc(pg.capacity ? pg.capacity : 1, sizeof *rows);
    if (!prev || !rows) {
        fputs("uslab: out of memory\n", stderr);
        return 1;
    }
    size_t nprev = 0;
    int have_prev = 0;
    term.interactive = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    install_signals();
    atexit(terminal_restore);
    if (term.interactive && terminal_raw() != 0)
        term.interactive = 0;
    int status = 0, exited = 0, redraw = 1;
    uint64_t next_refresh = 0;
    for (long frame = 0;;) {
        if (signal_quit)
            break;
        if (signal_stop)
            stop_and_resume();
        uint64_t now = monotonic_ms();
        if (now >= next_refresh || redraw || signal_resize) {
            int refresh = now >= next_refresh;
            redraw = signal_resize = 0;
            if (refresh && !page_process_alive(&pg)) {
                exited = 1;
                break;
            }
            if (refresh) {
                memcpy(prev, pg.records, pg.header.ncaches * sizeof *prev);
                nprev = pg.header.ncaches;
                have_prev = frame > 0;
                if (page_read(&pg) != 0) {
                    terminal_restore();
                    fprintf(stderr, "uslab: the page of process %d never held still\n", pid);
                    status = 1;
                    break;
                }
                next_refresh = now + (uint64_t)(delay * 1000.0);
                frame++;
            }
            size_t n = build_rows(&pg, prev, have_prev ? nprev : 0, rows);
            qsort(rows, n, sizeof *rows, row_cmp);
            char *text = NULL;
            size_t len = 0;
            struct screen s = {open_memstream(&text, &len), 0, 0, 0, term.interactive};
            if (!s.f)
                break;
            if (term.interactive)
                terminal_size(&s.rows, &s.cols);
            draw(&s, &pg, rows, n, delay, have_prev);
            fclose(s.f);
            if (term.interactive)
                fputs("\033[H", stdout);
            fwrite(text, 1, len, stdout);
            fputs(term.interactive ? "\033[J" : "\n", stdout);
            fflush(stdout);
            free(text);
            if (iterations && frame >= iterations && refresh)
                break;
        }
        uint64_t wait = next_refresh > monotonic_ms() ? next_refresh - monotonic_ms() : 0;
        struct pollfd in = {STDIN_FILENO, POLLIN, 0};
        int r = poll(&in, term.interactive ? 1 : 0, (int)wait);
        if (r > 0 && (in.revents & POLLIN) && handle_keys())
            break;
        if (r > 0)
            redraw = 1; /* a key: at once, in the new order */
    }
    terminal_restore();
    if (exited)
        printf("uslab top: process %d (%s) has exited\n", pid, pg.proc.comm);
    free(prev);
    free(rows);
    page_close(&pg);
    if (signal_quit)
        return 128 + signal_quit;
    return status;
}
