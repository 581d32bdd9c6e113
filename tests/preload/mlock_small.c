/* SPDX-License-Identifier: MIT */
/*
 * mlock_small.c - a small plain C program (not linked against uslab) that locks its memory
 * the way daemons and real-time programs do (issue 15, docs/design.md §2): it sets the
 * usual 8 MiB RLIMIT_MEMLOCK, gives up CAP_IPC_LOCK (tests run as root), and calls
 * mlockall(MCL_CURRENT | MCL_FUTURE), which the kernel refuses when the process's whole
 * address space (every mapping, PROT_NONE included) exceeds the limit. glibc's malloc
 * passes; uslab must too, and then keep working under MCL_FUTURE, where every new mapping
 * counts against the same 8 MiB.
 *
 *   mlock_small EARLY    EARLY malloc/free pairs before mlockall, then 200,000 mixed malloc,
 *                        calloc, realloc, aligned_alloc and free calls with at most 1500
 *                        live blocks, every block's contents checked. Prints VmSize/VmLck/VmRSS
 *                        before and after. Under uslab, small blocks must still come from its
 *                        slabs at the end.
 *   mlock_small EARLY cap  the same, keeping CAP_IPC_LOCK (exit 77, skipped, without it):
 *                        the address space must stay small, and under uslab the locked memory
 *                        (VmLck, after mlockall and after the churn) must be at most what the
 *                        same program locks with glibc's malloc plus ALLOWANCE_KB below. The
 *                        glibc figures come from this program run again without LD_PRELOAD.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <linux/capability.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/*
 * What uslab may lock beyond glibc for this program (docs/design.md §2, "What uslab still
 * adds, locked"): its library, zeroed tables (the 512 KiB cache-id table) and libgcc's
 * unwinder, and the side arrays' pages: under 1 MiB; and its reservation, which mlockall
 * counts whole (the PROT_NONE part included) and which is at most twice what the slabs use:
 * here a slab of 64 KiB or more for each of the about 40 classes the churn uses, plus the
 * live blocks, about 3 MiB, so at most 7 MiB. glibc's heap, which the same blocks would
 * otherwise grow, is not subtracted. A reservation twice as large as the one measured, or an
 * early reservation of many MiB, exceeds it.
 */
#define ALLOWANCE_KB (8L * 1024)

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "mlock_small: " __VA_ARGS__);                                              \
        fputc('\n', stderr);                                                                       \
        exit(1);                                                                                   \
    } while (0)

/* kB of a /proc/self/status field. */
static long status_kb(const char *field)
{
    char buf[8192];
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *s = strstr(buf, field);
    return s ? strtol(s + strlen(field) + 1, NULL, 10) : -1;
}

static void show(const char *when)
{
    printf("%s: VmSize %ld kB, VmLck %ld kB, VmRSS %ld kB\n", when, status_kb("VmSize"),
           status_kb("VmLck"), status_kb("VmRSS"));
}

static int has_ipc_lock(void)
{
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    return syscall(SYS_capget, &h, d) == 0 && (d[0].effective & (1u << CAP_IPC_LOCK));
}

/* The kB of `field` on the line of text that starts with `when` (as show() prints it). */
static long shown_kb(const char *text, const char *when, const char *field)
{
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(l, when, strlen(when)) != 0 || l[strlen(when)] != ':')
            continue;
        const char *end = strchr(l, '\n'), *f = strstr(l, field);
        if (f && (!end || f < end))
            return strtol(f + strlen(field) + 1, NULL, 10);
    }
    return -1;
}

/* Runs this program again with the same arguments and without LD_PRELOAD (glibc's
 * malloc), and returns its VmLck after mlockall (*at_lock) and after the churn. */
static long glibc_vmlck(char **argv, long *at_lock)
{
    int fd[2];
    if (pipe(fd) != 0)
        FAIL("pipe: %s", strerror(errno));
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        FAIL("fork: %s", strerror(errno));
    if (pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        unsetenv("LD_PRELOAD");
        execl("/proc/self/exe", argv[0], argv[1], argv[2], (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    static char out[4096];
    size_t n = 0;
    for (ssize_t r; n < sizeof out - 1 && (r = read(fd[0], out + n, sizeof out - 1 - n)) > 0;)
        n += (size_t)r;
    out[n] = 0;
    close(fd[0]);
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        FAIL("the glibc run of this program failed (status %#x):\n%s", status, out);
    printf("glibc run:\n%s", out);
    *at_lock = shown_kb(out, "after mlockall", "VmLck");
    long churn = shown_kb(out, "after churn", "VmLck");
    if (*at_lock < 0 || churn < 0)
        FAIL("no VmLck in the glibc run's output:\n%s", out);
    return churn;
}

static void drop_ipc_lock(void)
{
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    if (syscall(SYS_capget, &h, d) != 0)
        FAIL("capget: %s", strerror(errno));
    uint32_t bit = 1u << CAP_IPC_LOCK;
    d[0].effective &= ~bit;
    d[0].permitted &= ~bit;
    d[0].inheritable &= ~bit;
    if (syscall(SYS_capset, &h, d) != 0)
        FAIL("capset: %s", strerror(errno));
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

#define LIVE 1500
static unsigned char *blk[LIVE];
static size_t len[LIVE];

static void fill(size_t i)
{
    memset(blk[i], (int)(i * 7 + len[i]) & 0xff, len[i]);
}

static void check(size_t i)
{
    unsigned char want = (unsigned char)((i * 7 + len[i]) & 0xff);
    for (size_t k = 0; k < len[i]; k++)
        if (blk[i][k] != want)
            FAIL("block %zu (%zu bytes) changed at byte %zu", i, len[i], k);
}

int main(int argc, char **argv)
{
    long early = argc > 1 ? atol(argv[1]) : 0;
    int keep_cap = argc > 2 && strcmp(argv[2], "cap") == 0;
    if (keep_cap && !has_ipc_lock()) {
        printf("skipped: no CAP_IPC_LOCK in the effective set\n");
        return 77;
    }
    for (long i = 0; i < early; i++) {
        void *volatile p = malloc((size_t)(i % 200) + 1);
        free(p);
    }
    show("before mlockall");
    if (!keep_cap) {
        struct rlimit rl = {8 << 20, 8 << 20};
        if (setrlimit(RLIMIT_MEMLOCK, &rl) != 0)
            FAIL("setrlimit: %s", strerror(errno));
        drop_ipc_lock();
    }
    if (mlockall(MCL_CURRENT | MCL_FUTURE) != 0)
        FAIL("mlockall(MCL_CURRENT | MCL_FUTURE) under an 8 MiB RLIMIT_MEMLOCK: %s (VmSize %ld "
             "kB)",
             strerror(errno), status_kb("VmSize"));
    show("after mlockall");
    long locked_at_lock = status_kb("VmLck");
    for (long n = 0; n < 200000; n++) {
        size_t i = next() % LIVE;
        if (blk[i]) {
            check(i);
            if (n % 5 == 0) { /* grow or shrink in place or moved; the old prefix stays */
                size_t nl = (size_t)(next() % 1024) + 1;
                unsigned char *q = realloc(blk[i], nl);
                if (!q)
                    FAIL("realloc(%zu) failed: %s", nl, strerror(errno));
                for (size_t k = 0; k < (nl < len[i] ? nl : len[i]); k++)
                    if (q[k] != (unsigned char)((i * 7 + len[i]) & 0xff))
                        FAIL("realloc lost byte %zu", k);
                blk[i] = q;
                len[i] = nl;
                fill(i);
                continue;
            }
            free(blk[i]);
            blk[i] = NULL;
            continue;
        }
        len[i] = (size_t)(next() % (n % 3 ? 256 : 2048)) + 1;
        switch (n % 4) {
        case 0:
            blk[i] = calloc(1, len[i]);
            if (blk[i])
                for (size_t k = 0; k < len[i]; k++)
                    if (blk[i][k])
                        FAIL("calloc(1, %zu) not zero at %zu", len[i], k);
            break;
        case 1:
            blk[i] = aligned_alloc(64, len[i]);
            if (blk[i] && ((uintptr_t)blk[i] & 63))
                FAIL("aligned_alloc(64) gave %p", (void *)blk[i]);
            break;
        default:
            blk[i] = malloc(len[i]);
        }
        if (!blk[i])
            FAIL("allocation of %zu bytes failed after mlockall: %s", len[i], strerror(errno));
        fill(i);
    }
    for (size_t i = 0; i < LIVE; i++)
        if (blk[i]) {
            check(i);
            free(blk[i]);
        }
    show("after churn");
    long locked = status_kb("VmLck");
    if (keep_cap && status_kb("VmSize") > 256 * 1024)
        FAIL("VmSize %ld kB after the churn under MCL_FUTURE: a 4 GiB table was mapped and locked",
             status_kb("VmSize"));
    if (keep_cap && dlsym(RTLD_DEFAULT, "uslab_malloc_usable_size")) {
        long glibc_at_lock, glibc = glibc_vmlck(argv, &glibc_at_lock);
        printf("VmLck over glibc's: %ld kB after mlockall, %ld kB after the churn (allowed: "
               "%ld kB)\n",
               locked_at_lock - glibc_at_lock, locked - glibc, ALLOWANCE_KB);
        if (locked_at_lock > glibc_at_lock + ALLOWANCE_KB)
            FAIL("VmLck %ld kB after mlockall, glibc's %ld kB: more than %ld kB over",
                 locked_at_lock, glibc_at_lock, ALLOWANCE_KB);
        if (locked > glibc + ALLOWANCE_KB)
            FAIL("VmLck %ld kB after the churn, glibc's %ld kB: more than %ld kB over", locked,
                 glibc, ALLOWANCE_KB);
    }
    /* uslab kept serving from its slabs (a 20-byte block is in the 32-byte class; glibc's
     * chunk holds 24), rather than stepping aside. */
    if (dlsym(RTLD_DEFAULT, "uslab_malloc_usable_size")) {
        void *small[100];
        for (int i = 0; i < 100; i++)
            if (!(small[i] = malloc(20)) || malloc_usable_size(small[i]) != 32)
                FAIL("malloc(20) after mlockall is not from uslab's slabs");
        for (int i = 0; i < 100; i++)
            free(small[i]);
        printf("small blocks from uslab's slabs\n");
    }
    printf("ok\n");
    return 0;
}
