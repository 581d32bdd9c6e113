/* SPDX-License-Identifier: MIT */
/*
 * top.c - `uslab stats PID` and `uslab top PID` (docs/design.md §10.1): the statistics of a
 * running process, read from outside, once as the text uslab_stats_print prints
 * (src/statsfmt.c), or as a refreshing slabtop-style view.
 *
 * The process does nothing for it: no file, no thread, no update. Its uslab exports one
 * object, `uslab_introspect` (struct usi_introspect, src/live.h), filled at the library's
 * initialisation with the addresses of its cache table, its list of thread caches and two
 * counters, and the offsets of the fields read here. The tool finds the object in the
 * symbol tables of the files the process maps (/proc/PID/maps, then each file's ELF
 * .dynsym or .symtab: the preload library, libuslab.so, or a program linked with
 * libuslab.a), and reads it, the caches and the threads' magazines with process_vm_readv:
 * figures of the moment, as the library's own snapshot (src/live.c, snap_counts and
 * snap_finish) makes them, into the records of live.h. The kernel lets a process read
 * another's memory as it lets a debugger attach (the same user and a dumpable process, or
 * root; Yama's ptrace_scope may ask more): a refusal is explained with its remedy.
 *
 * The reads race the process: the caches' counts are read without their locks, the threads'
 * magazines while their owners use them. A read that faults (a thread cache unmapped
 * meanwhile) skips its item, a cache whose id no longer matches its slot (being destroyed,
 * or reused) is left out, the walk of the thread caches is bounded, and the threads' part
 * is clamped as in the library, so that the counts add up.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
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

/* From the text of /proc/<pid>/stat: the state letter (field 3) and the start time (field
 * 22). The command name (field 2, in parentheses) may hold anything, so fields are counted
 * from its last ')'. 0, or -1 if malformed. */
static int parse_stat(const char *text, char *state, uint64_t *start)
{
    const char *p = strrchr(text, ')');
    if (!p || p[1] != ' ' || !p[2])
        return -1;
    *state = p[2];
    p += 2;
    for (unsigned field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p)
            return -1;
        p++;
    }
    if (*p < '0' || *p > '9')
        return -1;
    *start = strtoull(p, NULL, 10);
    return 0;
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
    if (parse_stat(text, &p->state, &p->start) != 0) {
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

/* The value after "<key>:" in /proc/<pid>/status as numbers (up to max); how many, or -1. */
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

/* Yama's ptrace_scope (0 to 3), or -1 when the kernel has no Yama. */
static int yama_scope(void)
{
    char text[32];
    if (read_text("/proc/sys/kernel/yama/ptrace_scope", text, sizeof text) <= 0)
        return -1;
    return atoi(text);
}

/* Why the kernel refused to let us read process p (its memory map or its memory), with what
 * to do, into buf: the rules of ptrace's access check (a process of our user, its real,
 * effective and saved ids all ours, that is dumpable; or CAP_SYS_PTRACE), then Yama's, which
 * restricts reading another's memory (not its memory map). */
static void explain_denied(const struct proc_info *p, char *buf, size_t len)
{
    long uids[3] = {-1, -1, -1}, gids[3] = {-1, -1, -1};
    unsigned me = (unsigned)geteuid(), my_gid = (unsigned)getegid();
    int nu = proc_status(p->pid, "Uid", uids, 3), ng = proc_status(p->pid, "Gid", gids, 3);
    int uid_other = 0, gid_other = 0;
    for (int i = 0; i < nu; i++)
        uid_other |= (unsigned long)uids[i] != me;
    for (int i = 0; i < ng; i++)
        gid_other |= (unsigned long)gids[i] != my_gid;
    long owner = nu > 1 && (unsigned long)uids[1] != me ? uids[1] : uids[0];
    int scope = yama_scope();
    int n = snprintf(buf, len, "cannot read the memory of process %d (%s): ", p->pid, p->comm);
    if (n < 0 || (size_t)n >= len)
        return;
    buf += n;
    len -= (size_t)n;
    if (scope >= 3)
        snprintf(buf, len,
                 "/proc/sys/kernel/yama/ptrace_scope is %d: no process may read another's "
                 "memory, not even as root, until the next boot",
                 scope);
    else if (me != 0 && uid_other)
        snprintf(buf, len, "it belongs to another user (uid %ld; you are %u): run uslab as root%s",
                 owner, me,
                 scope == 1   ? ", or as that user once /proc/sys/kernel/yama/ptrace_scope is "
                                "lowered from 1 to 0"
                 : scope == 2 ? ""
                              : ", or as that user");
    else if (me != 0 && gid_other)
        snprintf(buf, len, "its group ids are not yours (gid %ld; yours is %u): run uslab as root",
                 gids[0], my_gid);
    else if (me != 0 && scope == 1)
        snprintf(buf, len,
                 "/proc/sys/kernel/yama/ptrace_scope is 1: only an ancestor of a process (its "
                 "parent) may read its memory; run uslab as root, or lower the setting (sysctl "
                 "kernel.yama.ptrace_scope=0)");
    else if (me != 0 && scope == 2)
        snprintf(buf, len,
                 "/proc/sys/kernel/yama/ptrace_scope is 2: only root may read another "
                 "process's memory; run uslab as root");
    else if (me != 0)
        snprintf(buf, len,
                 "it is not dumpable (it changed its user or group ids, or called "
                 "prctl(PR_SET_DUMPABLE, 0)): only root may read its memory; run uslab as root");
    else
        snprintf(buf, len,
                 "refused even to root: uslab lacks CAP_SYS_PTRACE over it (a container that "
                 "drops it, or a process of an outer user namespace), or a security module "
                 "forbids it");
}

/* ---- reading the process's memory -------------------------------------------------------- */

/* One read of a batch: len (> 0) bytes at addr in the process into buf; ok once read whole. */
struct remote_item {
    uint64_t addr;
    void *buf;
    size_t len;
    int ok;
};

#define REMOTE_BATCH 256 /* items per system call (IOV_MAX is 1024) */

/* Reads items[0 .. n) of process pid, many per system call. The kernel stops a call at the
 * first item that faults (not mapped, or not wholly): that one is left with ok 0 and the
 * call goes on after it. 0; -1 with errno when the process cannot be read at all (EPERM,
 * ESRCH...). */
static int remote_read_items(int pid, struct remote_item *items, size_t n)
{
    struct iovec local[REMOTE_BATCH], remote[REMOTE_BATCH];
    size_t i = 0;
    while (i < n) {
        size_t k = n - i < REMOTE_BATCH ? n - i : REMOTE_BATCH;
        for (size_t j = 0; j < k; j++) {
            items[i + j].ok = 0;
            local[j] = (struct iovec){items[i + j].buf, items[i + j].len};
            remote[j] = (struct iovec){(void *)(uintptr_t)items[i + j].addr, items[i + j].len};
        }
        ssize_t got = process_vm_readv(pid, local, k, remote, k, 0);
        if (got < 0 && errno != EFAULT)
            return -1;
        /* The items read whole, in order; the first one not read whole is the one that
         * faulted (EFAULT with nothing read: the first). */
        size_t left = got < 0 ? 0 : (size_t)got, j = 0;
        for (; j < k && left >= items[i + j].len; j++) {
            left -= items[i + j].len;
            items[i + j].ok = 1;
        }
        i += j < k ? j + 1 : j;
    }
    return 0;
}

/* One read: 0, or -1 with errno (EFAULT: not mapped). */
static int remote_read(int pid, uint64_t addr, void *buf, size_t len)
{
    struct remote_item item = {addr, buf, len, 0};
    if (remote_read_items(pid, &item, 1) != 0)
        return -1;
    if (!item.ok) {
        errno = EFAULT;
        return -1;
    }
    return 0;
}

static uint64_t get64(const unsigned char *p, uint32_t offset)
{
    uint64_t v;
    memcpy(&v, p + offset, sizeof v);
    return v;
}

static uint32_t get32(const unsigned char *p, uint32_t offset)
{
    uint32_t v;
    memcpy(&v, p + offset, sizeof v);
    return v;
}

/* ---- finding uslab's map ----------------------------------------------------------------- */

/* A file mapped into the process (a line of /proc/PID/maps with a path). Invariant: path is
 * allocated; start-end is one of its mappings, the one at file offset 0 when has_base. */
struct mapped_file {
    char dev[16];
    unsigned long inode;
    uint64_t start, end;
    int has_base; /* base: where its offset 0 is mapped */
    uint64_t base;
    char *path;
};

/* The files mapped into process pid, into *files (allocated, *n of them): 0, or -1 with
 * errno (EACCES: not ours to read). */
static int read_maps(int pid, struct mapped_file **files, size_t *n)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/maps", pid);
    *files = NULL;
    *n = 0;
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    char *line = NULL;
    size_t cap = 0, room = 0;
    int err = 0;
    for (ssize_t len; (len = getline(&line, &cap, f)) > 0;) {
        uint64_t start, end, offset;
        char perms[8], dev[16];
        unsigned long inode;
        int at = 0;
        if (line[len - 1] == '\n')
            line[len - 1] = '\0';
        if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %15s %lu %n", &start, &end, perms,
                   &offset, dev, &inode, &at) < 6 ||
            at == 0 || line[at] != '/' || inode == 0)
            continue; /* anonymous memory, [heap], [vdso]... */
        const char *name = line + at;
        struct mapped_file *mf = NULL;
        for (size_t i = 0; i < *n && !mf; i++)
            if ((*files)[i].inode == inode && !strcmp((*files)[i].dev, dev) &&
                !strcmp((*files)[i].path, name))
                mf = &(*files)[i];
        if (!mf) {
            if (*n == room) {
                room = room ? 2 * room : 64;
                struct mapped_file *more = realloc(*files, room * sizeof *more);
                if (!more) {
                    err = ENOMEM;
                    break;
                }
                *files = more;
            }
            mf = &(*files)[(*n)++];
            memset(mf, 0, sizeof *mf);
            snprintf(mf->dev, sizeof mf->dev, "%s", dev);
            mf->inode = inode;
            mf->start = start;
            mf->end = end;
            mf->path = strdup(name);
            if (!mf->path) {
                (*n)--;
                err = ENOMEM;
                break;
            }
        }
        if (offset == 0 && !mf->has_base) {
            mf->has_base = 1;
            mf->base = start;
            mf->start = start;
            mf->end = end;
        }
    }
    if (!err && ferror(f))
        err = errno ? errno : EIO;
    free(line);
    fclose(f);
    if (err) {
        errno = err;
        return -1;
    }
    return 0;
}

static void free_maps(struct mapped_file *files, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(files[i].path);
    free(files);
}

/* Opens the file of a mapping of process pid as the process sees it: /proc/PID/map_files
 * (the very file mapped, even deleted or in another mount namespace; root only), else
 * through /proc/PID/root, else by its path. A descriptor, or -1. */
static int open_mapped(int pid, const struct mapped_file *mf)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, pid, mf->start, mf->end);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0)
        return fd;
    snprintf(path, sizeof path, "/proc/%d/root%s", pid, mf->path);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    return fd >= 0 ? fd : open(mf->path, O_RDONLY | O_CLOEXEC);
}

/* A symbol found in an ELF file: st_value and st_size, and what its load bias needs. */
struct elf_symbol {
    uint64_t value, size;
    int dyn;             /* ET_DYN (a shared object or a PIE): relocated by its load bias */
    uint64_t first_load; /* p_vaddr of its first PT_LOAD, page-aligned down */
};

static int in_file(uint64_t offset, uint64_t len, size_t bytes)
{
    return offset <= bytes && len <= bytes - offset;
}

/* Looks the object `name` up in the ELF file f (bytes long, mapped): .dynsym first (with
 * .dynstr), then .symtab (with .strtab). 1 found, 0 not (or not a 64-bit ELF file of this
 * machine's byte order). */
static int elf_lookup_in(const unsigned char *f, size_t bytes, const char *name,
                         struct elf_symbol *out)
{
    Elf64_Ehdr eh;
    if (bytes < sizeof eh)
        return 0;
    memcpy(&eh, f, sizeof eh);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const unsigned char data = ELFDATA2LSB;
#else
    const unsigned char data = ELFDATA2MSB;
#endif
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
        eh.e_ident[EI_DATA] != data || (eh.e_type != ET_EXEC && eh.e_type != ET_DYN) ||
        eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_phentsize != sizeof(Elf64_Phdr) ||
        !in_file(eh.e_shoff, (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr), bytes) ||
        !in_file(eh.e_phoff, (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr), bytes))
        return 0;
    int have_load = 0;
    for (unsigned i = 0; i < eh.e_phnum && !have_load; i++) {
        Elf64_Phdr ph;
        memcpy(&ph, f + eh.e_phoff + i * sizeof ph, sizeof ph);
        if (ph.p_type == PT_LOAD) {
            out->first_load = ph.p_vaddr & ~((uint64_t)sysconf(_SC_PAGESIZE) - 1);
            have_load = 1;
        }
    }
    if (!have_load)
        return 0;
    out->dyn = eh.e_type == ET_DYN;
    size_t len = strlen(name) + 1;
    for (int pass = 0; pass < 2; pass++) {
        uint32_t type = pass == 0 ? SHT_DYNSYM : SHT_SYMTAB;
        for (unsigned i = 0; i < eh.e_shnum; i++) {
            Elf64_Shdr sh, str;
            memcpy(&sh, f + eh.e_shoff + i * sizeof sh, sizeof sh);
            if (sh.sh_type != type || sh.sh_link >= eh.e_shnum)
                continue;
            memcpy(&str, f + eh.e_shoff + sh.sh_link * sizeof str, sizeof str);
            if (str.sh_type != SHT_STRTAB || !in_file(sh.sh_offset, sh.sh_size, bytes) ||
                !in_file(str.sh_offset, str.sh_size, bytes))
                continue;
            const unsigned char *names = f + str.sh_offset;
            for (uint64_t k = 1; k < sh.sh_size / sizeof(Elf64_Sym); k++) {
                Elf64_Sym sym;
                memcpy(&sym, f + sh.sh_offset + k * sizeof sym, sizeof sym);
                if (sym.st_name >= str.sh_size || str.sh_size - sym.st_name < len ||
                    memcmp(names + sym.st_name, name, len) != 0)
                    continue;
                if (sym.st_shndx == SHN_UNDEF || sym.st_shndx == SHN_ABS ||
                    ELF64_ST_TYPE(sym.st_info) != STT_OBJECT)
                    continue; /* a reference to it, not its definition */
                out->value = sym.st_value;
                out->size = sym.st_size;
                return 1;
            }
        }
    }
    return 0;
}

static int elf_lookup(int fd, const char *name, struct elf_symbol *out)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < (off_t)sizeof(Elf64_Ehdr))
        return 0;
    size_t bytes = (size_t)st.st_size;
    void *f = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (f == MAP_FAILED)
        return 0;
    int found = elf_lookup_in(f, bytes, name, out);
    munmap(f, bytes);
    return found;
}

/* ---- the process's caches ---------------------------------------------------------------- */

/* A growing buffer. Invariant: p has room for cap bytes (NULL when cap is 0). */
struct buf {
    void *p;
    size_t cap;
};

/* b with room for at least bytes; NULL when out of memory. */
static void *buf_want(struct buf *b, size_t bytes)
{
    if (bytes > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < bytes)
            cap *= 2;
        void *p = realloc(b->p, cap);
        if (!p)
            return NULL;
        b->p = p;
        b->cap = cap;
    }
    return b->p;
}

/* The thread caches walked at most (a list that a torn read made a cycle ends). */
#define TCACHE_WALK_MAX 1000000u
/* A definition of the symbol in more files than this: the rest are not looked at. */
#define MAX_CANDIDATES 16

/*
 * A process being read. Invariants once target_open succeeded: map is its uslab's map
 * (magic, version, size and offsets checked), at map_addr; after a snapshot, header and
 * records[0 .. header.ncaches) are its caches in use at updated_ms, in id order.
 */
struct target {
    struct proc_info proc;
    uint64_t map_addr;
    struct usi_introspect map;
    size_t tc_bytes; /* the part of a thread cache read before its pairs */
    uint64_t snapshots;
    struct usi_live_header header;
    struct usi_live_cache *records;
    /* Buffers of the snapshot: the cache table, the caches read, the ids they were read
     * for, per record the objects out of the slabs and those in threads' magazines, a
     * thread cache's head, its pairs, their magazines' rounds, the reads. */
    struct buf table, caches, ids, recs, out, thread_cached, tc, pairs, pending, rounds, items,
        items2, pair_rec, item2_src;
    int exited;     /* the process exited (or never was) */
    char why[1024]; /* what went wrong, for the caller to print after "uslab: " */
};

static void target_close(struct target *t)
{
    struct buf *all[] = {&t->table,         &t->caches, &t->ids,      &t->recs,     &t->out,
                         &t->thread_cached, &t->tc,     &t->pairs,    &t->pending,  &t->rounds,
                         &t->items,         &t->items2, &t->pair_rec, &t->item2_src};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]->p);
    memset(t, 0, sizeof *t);
}

/* t->why for a read of `what` that failed with errno; -1. */
static int read_failed(struct target *t, const char *what)
{
    if (errno == ESRCH) {
        t->exited = 1;
        snprintf(t->why, sizeof t->why, "process %d (%s) exited while it was read", t->proc.pid,
                 t->proc.comm);
    } else if (errno == EPERM || errno == EACCES) {
        explain_denied(&t->proc, t->why, sizeof t->why);
    } else {
        snprintf(t->why, sizeof t->why, "cannot read %s of process %d (%s): %s", what, t->proc.pid,
                 t->proc.comm, strerror(errno));
    }
    return -1;
}

static int out_of_memory(struct target *t)
{
    snprintf(t->why, sizeof t->why, "out of memory");
    return -1;
}

#define FITS(offset, width, total) ((uint64_t)(offset) + (width) <= (uint64_t)(total))

/* Whether the map's geometry is one this reader can use safely: every field it names lies
 * in the structure it is read from. NULL, or what is wrong. Sets *tc_bytes. */
static const char *map_check(const struct usi_introspect *m, size_t *tc_bytes)
{
    if (m->max_ids == 0 || m->max_ids > (1u << 24))
        return "the size of the cache table";
    if (m->page_size == 0 || (m->page_size & (m->page_size - 1)))
        return "the page size";
    if (m->cache_bytes == 0 || m->cache_bytes > (1u << 20))
        return "the size of a cache";
    const uint32_t wide[] = {m->c_id,
                             m->c_size,
                             m->c_stride,
                             m->c_slab_size,
                             m->c_slab_inuse,
                             m->c_depot_rounds,
                             m->c_touched,
                             m->c_slab_takes,
                             m->c_slab_puts,
                             m->c_depot_in,
                             m->c_depot_out,
                             m->c_slabs_created,
                             m->c_slabs_released,
                             m->c_slab_objects};
    for (size_t i = 0; i < sizeof wide / sizeof wide[0]; i++)
        if (!FITS(wide[i], 8, m->cache_bytes))
            return "the offsets of a cache's fields";
    if (!FITS(m->c_nobjs, 4, m->cache_bytes) || !FITS(m->c_mag_capacity, 4, m->cache_bytes) ||
        !FITS(m->c_debug, 4, m->cache_bytes) || !FITS(m->c_name, 32, m->cache_bytes) ||
        !FITS(m->c_lists + 2 * (uint64_t)m->list_bytes + m->list_count, 8, m->cache_bytes))
        return "the offsets of a cache's fields";
    if (m->pair_bytes == 0 || m->pair_bytes > (1u << 16) || !FITS(m->p_top, 8, m->pair_bytes) ||
        !FITS(m->p_base, 8, m->pair_bytes) || !FITS(m->p_prev, 8, m->pair_bytes) ||
        m->m_rounds > (1u << 20))
        return "the offsets of a magazine pair's fields";
    if (m->t_pair_pages_words == 0 || m->t_pair_pages_words > (1u << 16))
        return "the size of a thread cache's page bitmap";
    uint64_t need = (uint64_t)m->t_pair_pages + (uint64_t)m->t_pair_pages_words * 8;
    if (need < (uint64_t)m->t_next + 8)
        need = (uint64_t)m->t_next + 8;
    if (need < (uint64_t)m->t_npairs + 4)
        need = (uint64_t)m->t_npairs + 4;
    if (need > (1u << 22))
        return "the offsets of a thread cache's fields";
    *tc_bytes = (size_t)need;
    return NULL;
}

/* Where the process's uslab map is: each file it maps that defines USI_INTROSPECT_SYMBOL,
 * in cands (at most MAX_CANDIDATES): 0 and *n, or -1 with t->why. */
static int find_map(struct target *t, uint64_t *cands, char **paths, size_t *n)
{
    struct mapped_file *files;
    size_t nfiles;
    *n = 0;
    if (read_maps(t->proc.pid, &files, &nfiles) != 0) {
        if (errno == ENOENT || errno == ESRCH) {
            t->exited = 1;
            snprintf(t->why, sizeof t->why, "process %d (%s) has exited", t->proc.pid,
                     t->proc.comm);
        } else if (errno == EACCES || errno == EPERM) {
            explain_denied(&t->proc, t->why, sizeof t->why);
        } else {
            snprintf(t->why, sizeof t->why, "cannot read /proc/%d/maps: %s", t->proc.pid,
                     strerror(errno));
        }
        return -1;
    }
    for (size_t i = 0; i < nfiles && *n < MAX_CANDIDATES; i++) {
        const struct mapped_file *mf = &files[i];
        if (!mf->has_base)
            continue;
        int fd = open_mapped(t->proc.pid, mf);
        if (fd < 0)
            continue;
        struct elf_symbol s;
        if (elf_lookup(fd, USI_INTROSPECT_SYMBOL, &s) && s.size >= 8) {
            cands[*n] = s.dyn ? mf->base - s.first_load + s.value : s.value;
            paths[*n] = strdup(mf->path);
            (*n)++;
        }
        close(fd);
    }
    free_maps(files, nfiles);
    return 0;
}

/* Opens process pid for reading: finds its map and checks it. 0, or -1 with t->why. */
static int target_open(int pid, struct target *t)
{
    memset(t, 0, sizeof *t);
    if (proc_read(pid, &t->proc) != 0) {
        t->exited = errno == ENOENT;
        if (errno == ENOENT)
            snprintf(t->why, sizeof t->why, "no process %d", pid);
        else
            snprintf(t->why, sizeof t->why, "cannot read /proc/%d/stat: %s", pid, strerror(errno));
        return -1;
    }
    if (proc_exited(&t->proc)) {
        t->exited = 1;
        snprintf(t->why, sizeof t->why, "process %d (%s) has exited", pid, t->proc.comm);
        return -1;
    }
    uint64_t cands[MAX_CANDIDATES];
    char *paths[MAX_CANDIDATES];
    size_t n;
    if (find_map(t, cands, paths, &n) != 0)
        return -1;
    /* The one the process uses: a copy relocation leaves the library's own copy blank and
     * fills the program's; so the best of them, by magic, ready and version. */
    int best = -1, best_score = -1, rc = 0;
    const char *path = NULL;
    for (size_t i = 0; i < n && rc == 0; i++) {
        struct usi_introspect m;
        memset(&m, 0, sizeof m);
        if (remote_read(pid, cands[i], &m, sizeof m) != 0) {
            if (errno != EFAULT)
                rc = read_failed(t, "uslab's map");
            continue;
        }
        /* 0: not uslab's map; 1: blank (not filled yet); 2 and more: uslab's. */
        static const char blank[sizeof m.magic];
        int score = memcmp(m.magic, USI_INTROSPECT_MAGIC, sizeof m.magic) == 0
                        ? 2 + 2 * (m.ready == 1) + 4 * (m.version == USI_INTROSPECT_VERSION)
                        : memcmp(m.magic, blank, sizeof m.magic) == 0;
        if (score > best_score) {
            best = (int)i;
            best_score = score;
            t->map = m;
            t->map_addr = cands[i];
            path = paths[i];
        }
    }
    /* The file, for the messages below: its last 508 bytes where it is longer, so that every
     * message fits t->why whole (a Debug build's -Wformat-truncation checks it). */
    char where[512] = "";
    if (path) {
        size_t len = strlen(path), keep = sizeof where - 4;
        snprintf(where, sizeof where, "%s%s", len > keep ? "..." : "",
                 len > keep ? path + len - keep : path);
    }
    for (size_t i = 0; i < n; i++)
        free(paths[i]);
    if (rc != 0)
        return -1;
    const struct usi_introspect *m = &t->map;
    if (best < 0 && n > 0) {
        snprintf(t->why, sizeof t->why,
                 "process %d (%s): %s, which its files define, is not mapped where their symbol "
                 "tables put it",
                 pid, t->proc.comm, USI_INTROSPECT_SYMBOL);
        return -1;
    }
    if (best < 0) {
        snprintf(t->why, sizeof t->why,
                 "process %d (%s) does not use uslab: no file it maps defines %s (a program "
                 "linked with libuslab.a keeps it in its symbol table unless stripped)",
                 pid, t->proc.comm, USI_INTROSPECT_SYMBOL);
        return -1;
    }
    if (best_score == 0) {
        snprintf(t->why, sizeof t->why,
                 "process %d (%s): the object %s in %s is not uslab's map (no magic %s)", pid,
                 t->proc.comm, USI_INTROSPECT_SYMBOL, where, USI_INTROSPECT_MAGIC);
        return -1;
    }
    if (best_score == 1 || !m->ready) {
        /* Blank until the library's initialisation, at the process's first allocation. */
        snprintf(t->why, sizeof t->why,
                 "process %d (%s) has not used the allocator yet: uslab starts at its first "
                 "allocation (its map in %s is not filled); try again later",
                 pid, t->proc.comm, where);
        return -1;
    }
    if (m->version != USI_INTROSPECT_VERSION) {
        snprintf(t->why, sizeof t->why,
                 "process %d (%s) runs a uslab (%u.%u, %s) whose map is version %u; this uslab "
                 "command reads version %u: use the uslab command of the same build as the "
                 "process's library",
                 pid, t->proc.comm, m->lib_version >> 16, m->lib_version & 0xffff, where,
                 m->version, USI_INTROSPECT_VERSION);
        return -1;
    }
    const char *bad = m->bytes != sizeof *m ? "its size" : map_check(m, &t->tc_bytes);
    if (bad) {
        snprintf(t->why, sizeof t->why,
                 "process %d (%s): uslab's map in %s (version %u) is not one this uslab command "
                 "can read (%s): use the uslab command of the same build as the process's "
                 "library",
                 pid, t->proc.comm, where, m->version, bad);
        return -1;
    }
    if (!buf_want(&t->table, (size_t)m->max_ids * sizeof(uint64_t)) ||
        !buf_want(&t->tc, t->tc_bytes))
        return out_of_memory(t);
    return 0;
}

static uint64_t monotonic_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Adds the objects in the threads' magazines to t->thread_cached, per record (as the
 * library's count_cached: in every thread cache, the pair of each cache in use, on a page
 * its owner opened a pair on, when it has magazines: the loaded one's objects, top - base,
 * and the previous one's rounds). 0, or -1 with t->why. */
static int count_thread_caches(struct target *t, uint64_t tc, size_t nrec)
{
    const struct usi_introspect *m = &t->map;
    int pid = t->proc.pid;
    unsigned char *head = t->tc.p, *pairs = buf_want(&t->pairs, nrec * m->pair_bytes + 1);
    uint64_t *pending = buf_want(&t->pending, nrec * sizeof *pending + 1);
    uint32_t *rounds = buf_want(&t->rounds, nrec * sizeof *rounds + 1);
    struct remote_item *items = buf_want(&t->items, nrec * sizeof *items + 1),
                       *items2 = buf_want(&t->items2, nrec * sizeof *items2 + 1);
    size_t *pair_rec = buf_want(&t->pair_rec, nrec * sizeof *pair_rec + 1),
           *item2_src = buf_want(&t->item2_src, nrec * sizeof *item2_src + 1);
    uint64_t *thread_cached = t->thread_cached.p;
    if (!pairs || !pending || !rounds || !items || !items2 || !pair_rec || !item2_src)
        return out_of_memory(t);
    for (unsigned long walked = 0; tc && walked < TCACHE_WALK_MAX; walked++) {
        if (remote_read(pid, tc, head, t->tc_bytes) != 0) {
            if (errno == EFAULT)
                break; /* its thread exited meanwhile: where the list went on is not known */
            return read_failed(t, "a thread cache");
        }
        uint32_t npairs = get32(head, m->t_npairs);
        uint64_t next = get64(head, m->t_next);
        size_t k = 0;
        for (size_t r = 0; r < nrec; r++) {
            uint64_t id = t->records[r].id;
            if (id >= npairs)
                continue;
            uint64_t offset = m->t_pairs + id * m->pair_bytes, page = offset / m->page_size;
            if (page / 64 >= m->t_pair_pages_words ||
                !((get64(head, m->t_pair_pages + (uint32_t)(page / 64) * 8) >> (page % 64)) & 1))
                continue; /* a page of blank pairs: not read (nor made resident) */
            items[k] =
                (struct remote_item){tc + offset, pairs + k * m->pair_bytes, m->pair_bytes, 0};
            pair_rec[k++] = r;
        }
        if (remote_read_items(pid, items, k) != 0)
            return read_failed(t, "a thread's magazines");
        size_t k2 = 0;
        for (size_t i = 0; i < k; i++) {
            const unsigned char *pair = items[i].buf;
            uint64_t prev = get64(pair, m->p_prev);
            if (!items[i].ok || !prev)
                continue;
            uint64_t top = get64(pair, m->p_top), base = get64(pair, m->p_base);
            pending[i] = top >= base ? (top - base) / sizeof(void *) : 0;
            items2[k2] = (struct remote_item){prev + m->m_rounds, &rounds[k2], sizeof *rounds, 0};
            item2_src[k2++] = i;
        }
        if (remote_read_items(pid, items2, k2) != 0)
            return read_failed(t, "a thread's magazines");
        for (size_t j = 0; j < k2; j++)
            if (items2[j].ok)
                thread_cached[pair_rec[item2_src[j]]] += pending[item2_src[j]] + rounds[j];
        tc = next;
    }
    return 0;
}

/* Reads the statistics of every cache in use now, into t->header and t->records, as the
 * library's usi_live_snap_cache makes them (src/live.c: snap_counts, snap_finish): 0, or -1
 * with t->why (t->exited when the process is gone). */
static int target_snapshot(struct target *t)
{
    const struct usi_introspect *m = &t->map;
    int pid = t->proc.pid;
    /* The map again: it never changes, unless the process called exec meanwhile. */
    struct usi_introspect again;
    int rc = remote_read(pid, t->map_addr, &again, sizeof again);
    if (rc != 0 && errno != EFAULT)
        return read_failed(t, "uslab's map");
    if (rc != 0 || memcmp(&again, m, sizeof again) != 0) {
        snprintf(t->why, sizeof t->why,
                 "process %d (%s) no longer has the uslab map it had (it called exec?)", pid,
                 t->proc.comm);
        return -1;
    }
    uint64_t tcaches = 0, reserved = 0, tcache_bytes = 0, large[3] = {0, 0, 0};
    struct remote_item counters[] = {{m->tcaches, &tcaches, 8, 0},
                                     {m->reserved, &reserved, 8, 0},
                                     {m->tcache_bytes, &tcache_bytes, 8, 0},
                                     {m->large, large, sizeof large, 0}};
    if (remote_read_items(pid, counters, 4) != 0)
        return read_failed(t, "uslab's counters");
    /* The cache table, once, then every cache in it. */
    uint64_t *table = t->table.p;
    if (remote_read(pid, m->caches, table, (size_t)m->max_ids * sizeof *table) != 0)
        return read_failed(t, "the cache table");
    size_t n = 0;
    for (uint32_t id = 0; id < m->max_ids; id++)
        n += table[id] != 0;
    unsigned char *caches = buf_want(&t->caches, n * m->cache_bytes + 1);
    uint64_t *ids = buf_want(&t->ids, n * sizeof *ids + 1);
    struct remote_item *items = buf_want(&t->items, n * sizeof *items + 1);
    t->records = buf_want(&t->recs, n * sizeof *t->records + 1);
    uint64_t *out = buf_want(&t->out, n * sizeof *out + 1),
             *thread_cached = buf_want(&t->thread_cached, n * sizeof *thread_cached + 1);
    if (!caches || !ids || !items || !t->records || !out || !thread_cached)
        return out_of_memory(t);
    n = 0;
    for (uint32_t id = 0; id < m->max_ids; id++)
        if (table[id]) {
            items[n] =
                (struct remote_item){table[id], caches + n * m->cache_bytes, m->cache_bytes, 0};
            ids[n++] = id;
        }
    if (remote_read_items(pid, items, n) != 0)
        return read_failed(t, "the caches");
    size_t nrec = 0;
    for (size_t i = 0; i < n; i++) {
        const unsigned char *c = items[i].buf;
        /* Not read, or not the cache of its slot any more (destroyed, its id reused). */
        if (!items[i].ok || get64(c, m->c_id) != ids[i])
            continue;
        struct usi_live_cache *r = &t->records[nrec];
        memset(r, 0, sizeof *r);
        /* snap_counts */
        r->partial = get64(c, m->c_lists + 0 * m->list_bytes + m->list_count);
        r->full = get64(c, m->c_lists + 1 * m->list_bytes + m->list_count);
        r->empty = get64(c, m->c_lists + 2 * m->list_bytes + m->list_count);
        r->cached_depot = get64(c, m->c_depot_rounds);
        r->resident_bytes = get64(c, m->c_touched);
        r->slab_takes = get64(c, m->c_slab_takes);
        r->slab_puts = get64(c, m->c_slab_puts);
        r->depot_in = get64(c, m->c_depot_in);
        r->depot_out = get64(c, m->c_depot_out);
        r->slabs_created = get64(c, m->c_slabs_created);
        r->slabs_released = get64(c, m->c_slabs_released);
        out[nrec] = get64(c, m->c_slab_inuse);
        /* snap_finish, but the threads' part (below) */
        memcpy(r->name, c + m->c_name, sizeof r->name);
        r->name[sizeof r->name - 1] = '\0';
        r->id = ids[i];
        r->object_size = get64(c, m->c_size);
        r->stride = get64(c, m->c_stride);
        r->slab_size = get64(c, m->c_slab_size);
        r->objs_per_slab = get32(c, m->c_nobjs);
        r->slabs = r->partial + r->full + r->empty;
        r->total_objects = get64(c, m->c_slab_objects);
        r->magazine = get32(c, m->c_mag_capacity);
        r->debug = get32(c, m->c_debug);
        if (r->slabs != 0 || out[nrec] != 0) { /* in use */
            thread_cached[nrec] = 0;
            nrec++;
        }
    }
    if (count_thread_caches(t, tcaches, nrec) != 0)
        return -1;
    for (size_t i = 0; i < nrec; i++) {
        /* The threads' part, read while they go on: clamped to what is out of the slabs
         * and not in the depot, so that the counts add up (as snap_finish). */
        struct usi_live_cache *r = &t->records[i];
        uint64_t room = out[i] > r->cached_depot ? out[i] - r->cached_depot : 0;
        r->cached_thread = thread_cached[i] < room ? thread_cached[i] : room;
        r->active = room - r->cached_thread;
    }
    memset(&t->header, 0, sizeof t->header);
    t->header.pid = pid;
    t->header.lib_version = m->lib_version;
    t->header.ncaches = t->header.caches_in_use = (uint32_t)nrec;
    t->header.reserved_bytes = reserved;
    t->header.thread_cache_bytes = tcache_bytes;
    t->header.thread_cache_max = m->tcache_max;
    t->header.large_blocks = large[0];
    t->header.large_bytes = large[1];
    t->header.large_peak = large[2];
    char path[64], status[4096];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *sf = fopen(path, "r");
    if (sf) {
        size_t len = fread(status, 1, sizeof status - 1, sf);
        status[len] = '\0';
        fclose(sf);
        usi_statsfmt_rss(status, &t->header.rss_bytes, &t->header.rss_peak);
    }
    t->header.updated_ms = monotonic_ms();
    t->header.updates = ++t->snapshots;
    return 0;
}

/* Age of the snapshot in ms. */
static uint64_t snapshot_age_ms(const struct target *t)
{
    uint64_t now = monotonic_ms();
    return now > t->header.updated_ms ? now - t->header.updated_ms : 0;
}

/* Whether the process still runs (not exited, not another process with its pid). */
static int target_alive(const struct target *t)
{
    struct proc_info p;
    return proc_read(t->proc.pid, &p) == 0 && !proc_exited(&p) && p.start == t->proc.start;
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
    struct target t;
    if (target_open(pid, &t) != 0 || target_snapshot(&t) != 0) {
        fprintf(stderr, "uslab: %s\n", t.why);
        target_close(&t);
        return 1;
    }
    if (json) {
        /* The process's figures, added to the "uslab" object (the name escaped). */
        char *text = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&text, &len);
        if (!m) {
            target_close(&t);
            return 1;
        }
        fprintf(m, ",\"pid\":%d,\"command\":\"", pid);
        usi_statsfmt_json_string(m, t.proc.comm);
        fprintf(m,
                "\",\"updated_ms_ago\":%" PRIu64 ",\"updates\":%" PRIu64
                ",\"caches_in_use\":%u,\"caches_shown\":%u",
                snapshot_age_ms(&t), t.header.updates, t.header.caches_in_use, t.header.ncaches);
        fclose(m);
        usi_statsfmt_json(stdout, &t.header, t.records, t.header.ncaches, text);
        free(text);
    } else {
        printf("process %d (%s), statistics read from its memory now\n", pid, t.proc.comm);
        usi_statsfmt_table(stdout, &t.header, t.records, t.header.ncaches);
    }
    target_close(&t);
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

/* A count in at most 6 characters: as is below a million, else 1.2M, 3.4G. */
static const char *count6(char *buf, size_t len, uint64_t v)
{
    if (v < 1000000)
        snprintf(buf, len, "%" PRIu64, v);
    else if (v < 1000000000)
        snprintf(buf, len, "%.1fM", (double)v / 1e6);
    else
        snprintf(buf, len, "%.1fG", (double)v / 1e9);
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

/* The rows of the snapshot's records, with churn against the previous refresh's records. */
static size_t build_rows(const struct target *tg, const struct usi_live_cache *prev, size_t nprev,
                         struct row *rows)
{
    size_t n = tg->header.ncaches;
    for (size_t i = 0; i < n; i++) {
        const struct usi_live_cache *c = &tg->records[i];
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

static void draw(struct screen *s, const struct target *tg, struct row *rows, size_t n,
                 double delay, int have_prev)
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
    screen_line(s, "uslab top - pid %d (%s) - %u caches in use - every %.1f s", tg->proc.pid,
                tg->proc.comm, tg->header.caches_in_use, delay);
    screen_line(s, " Active / Total Objects (%% used)    : %" PRIu64 " / %" PRIu64 " (%.1f%%)",
                active, total, percent(active, total));
    screen_line(s, " Active / Total Slabs (%% used)      : %" PRIu64 " / %" PRIu64 " (%.1f%%)",
                slabs - empty, slabs, percent(slabs - empty, slabs));
    screen_line(s, " Active / Total Size (%% used)       : %s / %s (%.1f%%)",
                human(a, sizeof a, active_bytes), human(b, sizeof b, space),
                percent(active_bytes, space));
    screen_line(s, " Resident / Reserved                : %s / %s", human(a, sizeof a, resident),
                human(b, sizeof b, tg->header.reserved_bytes));
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
    /* The name first, as wide as the longest, so that 80 columns show whole names: the
     * numbers take 63 (counts in 6 characters, sizes as 1.5K). */
    int name_w = 4;
    for (size_t i = 0; i < n; i++) {
        char name[sizeof rows[i].c->name];
        int len = (int)strlen(usi_statsfmt_name(rows[i].c->name, name, sizeof name));
        name_w = len > name_w ? len : name_w;
    }
    if (s->cols > 0 && name_w > s->cols - 63)
        name_w = s->cols - 63 > 12 ? s->cols - 63 : 12;
    screen_line(s, "%-*s %6s %6s %4s %6s %6s %5s %6s %8s %6s", name_w, "NAME", "OBJS", "ACTIVE",
                "USE", "SIZE", "SLABS", "PART", "CACHED", "RESIDENT", "CHURN");
    for (size_t i = 0; i < n; i++) {
        const struct usi_live_cache *c = rows[i].c;
        char res[16], ch[16], size[16], objs[16], act[16], ns[16], part[16], cached[16];
        char name[sizeof c->name];
        if (rows[i].churn_known)
            count6(ch, sizeof ch, rows[i].churn);
        else
            snprintf(ch, sizeof ch, "-");
        screen_line(s, "%-*.*s %6s %6s %3.0f%% %6s %6s %5s %6s %8s %6s", name_w, name_w,
                    usi_statsfmt_name(c->name, name, sizeof name),
                    count6(objs, sizeof objs, c->total_objects), count6(act, sizeof act, c->active),
                    percent(c->active, c->total_objects), human(size, sizeof size, c->object_size),
                    count6(ns, sizeof ns, c->slabs), count6(part, sizeof part, c->partial),
                    count6(cached, sizeof cached, cached_of(c)),
                    human(res, sizeof res, c->resident_bytes), ch);
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
    struct target tg;
    if (target_open(pid, &tg) != 0) {
        fprintf(stderr, "uslab: %s\n", tg.why);
        target_close(&tg);
        return 1;
    }
    struct buf prev_buf = {0}, rows_buf = {0};
    struct usi_live_cache *prev = NULL;
    struct row *rows = NULL;
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
            if (refresh && !target_alive(&tg)) {
                exited = 1;
                break;
            }
            if (refresh) {
                nprev = tg.header.ncaches;
                prev = buf_want(&prev_buf, nprev * sizeof *prev + 1);
                if (!prev) {
                    snprintf(tg.why, sizeof tg.why, "out of memory");
                    status = 1;
                    break;
                }
                if (nprev)
                    memcpy(prev, tg.records, nprev * sizeof *prev);
                have_prev = frame > 0;
                if (target_snapshot(&tg) != 0) {
                    exited = tg.exited;
                    status = !exited;
                    break;
                }
                rows = buf_want(&rows_buf, tg.header.ncaches * sizeof *rows + 1);
                if (!rows) {
                    snprintf(tg.why, sizeof tg.why, "out of memory");
                    status = 1;
                    break;
                }
                next_refresh = now + (uint64_t)(delay * 1000.0);
                frame++;
            }
            size_t n = build_rows(&tg, prev, have_prev ? nprev : 0, rows);
            qsort(rows, n, sizeof *rows, row_cmp);
            char *text = NULL;
            size_t len = 0;
            struct screen s = {open_memstream(&text, &len), 0, 0, 0, term.interactive};
            if (!s.f)
                break;
            if (term.interactive)
                terminal_size(&s.rows, &s.cols);
            draw(&s, &tg, rows, n, delay, have_prev);
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
        printf("uslab top: process %d (%s) has exited\n", pid, tg.proc.comm);
    else if (status)
        fprintf(stderr, "uslab: %s\n", tg.why);
    free(prev_buf.p);
    free(rows_buf.p);
    target_close(&tg);
    if (signal_quit)
        return 128 + signal_quit;
    return status;
}
