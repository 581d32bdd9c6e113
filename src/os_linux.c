/* SPDX-License-Identifier: MIT */
/*
 * os_linux.c - the os layer (docs/design.md §1): the only file that calls mmap, mprotect,
 * madvise or munmap, opens files (read-only, for the symboliser), reads the environment or
 * the clock, or calls the system allocator (and knows glibc's chunk header) or registers
 * fork handlers. Nothing here allocates (but the system allocator, and dlsym once
 * initialisation is over) or calls a function that a preloaded library could interpose on
 * the way to malloc. Files, stderr and sleeps go through OS_SYSCALL, never libc's open,
 * read, write, close or nanosleep: those are cancellation points, and a thread cancelled
 * inside uslab would leave its locks held (a pthread_cancel'ed thread in malloc).
 */
#define _GNU_SOURCE
#include "base.h"
#include "os.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/single_threaded.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* ---- system calls ----------------------------------------------------------------------- */

/* Every system call of this file that is not a plain libc call goes through usi_os_syscall:
 * by the instruction itself where it is known, so that uslab's own internal calls never
 * meet a syscall() or prctl() that a preloaded library put in front of libc's (which may
 * allocate); elsewhere by libc's syscall(). */
#if USI_HAVE_RAW_SYSCALL
static long raw_syscall(long n, long a, long b, long c, long d, long e, long f)
{
#if defined(__x86_64__)
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
#elif defined(__aarch64__)
    register long x8 __asm__("x8") = n;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    register long x4 __asm__("x4") = e;
    register long x5 __asm__("x5") = f;
    __asm__ volatile("svc 0"
                     : "+r"(x0)
                     : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
                     : "memory");
    return x0;
#endif
}
#endif

long usi_os_syscall(long n, long a, long b, long c, long d, long e, long f)
{
#if USI_HAVE_RAW_SYSCALL
    long r = raw_syscall(n, a, b, c, d, e, f);
    if ((unsigned long)r > -4096UL) {
        errno = (int)-r;
        return -1;
    }
    return r;
#else
    return syscall(n, a, b, c, d, e, f);
#endif
}

/* OS_SYSCALL(n, args...): usi_os_syscall with up to six arguments, the rest 0. */
#define OS_SYSCALL(...) os_syscall_pad(__VA_ARGS__, 0, 0, 0, 0, 0, 0)
#define os_syscall_pad(n, a, b, c, d, e, f, ...)                                                   \
    usi_os_syscall((n), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f))

/*
 * No transparent huge pages in uslab's own mappings (the range of slabs, its side arrays,
 * spans mapped again) but where the pages layer asks for them (USLAB_HUGE_PAGES=1: its
 * chunks of dense spans, design §2): a slab keeps only the pages its objects were handed out on,
 * many classes each have a span of their own, and the purger gives idle spans back 64 KiB at a
 * time. Where THP is "always", khugepaged makes any 2 MiB block with one page in it wholly resident
 * (max_ptes_none 511), which undoes both: a small program's slabs took 2.4 MB resident, then 6.3 MB
 * once collapsed (design §2). Advice only: a failure changes nothing else. The real madvise, never
 * an injected failure (tests' fault sequences stay those of the calls that matter), and not under
 * strict seccomp mode, where it would kill.
 */
void usi_os_huge_pages(void *addr, size_t size, int huge)
{
#if defined(MADV_NOHUGEPAGE) && defined(MADV_HUGEPAGE)
    if (!usi_os_quiet()) {
        int saved = errno;
        (void)madvise(addr, size, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
        errno = saved;
    }
#else
    (void)addr;
    (void)size;
    (void)huge;
#endif
}

static void no_huge_pages(void *addr, size_t len)
{
    usi_os_huge_pages(addr, len, 0);
}

int usi_os_private_setting(const char *name, size_t len)
{
#ifdef USLAB_FAULT_INJECTION
    return len == 12 && memcmp(name, "USLAB_FAULTS", 12) == 0;
#else
    (void)name;
    (void)len;
    return 0;
#endif
}

#ifdef USLAB_FAULT_INJECTION
/* ---- fault injection (test builds only; docs/design.md §2) ----------------------------- */

/*
 * USLAB_FAULTS=rate[,seed[,calls]], read at the first call that could fail, or the same
 * string given to uslab_faults_set at run time, makes the kernel calls of this file fail
 * at random: the call is not made, and it returns failure with errno set as the kernel
 * would. `rate` is a fraction from 0 to 1 (up to 9 decimals), `seed` a decimal number
 * (default 1), `calls` letters of the calls that may fail (default "mrpau"):
 *   m  mmap of new memory (reservation, side arrays, thread caches, usi_os_map_at)
 *   r  mmap with MAP_FIXED over memory in use (usi_os_replace)
 *   p  mprotect    a  madvise    u  munmap
 *   h  an injected MAP_FIXED failure first unmaps the range, as some kernels do
 *   g  an injected madvise failure is EAGAIN (a kernel shortage, transient), not EINVAL
 * The n-th decision of the process fails when the top half of splitmix64(seed + n) is
 * below rate * 2^32: deterministic for a seed and an order of calls. One atomic counter,
 * no lock and no allocation, so it works from inside malloc and in a fork child.
 */
static const char fault_letters[] = "mrpauhg"; /* letter i is bit i of the mask */
#define FAULT_MMAP     0x01u
#define FAULT_REPLACE  0x02u
#define FAULT_MPROTECT 0x04u
#define FAULT_MADVISE  0x08u
#define FAULT_MUNMAP   0x10u
#define FAULT_HOLE     0x20u
#define FAULT_AGAIN    0x40u
#define FAULT_DEFAULT  0x1fu

static struct {
    uint64_t config; /* threshold << 8 | mask: one word, so a change is seen whole */
    uint64_t seed;
    uint64_t decided;          /* decisions made: n of the next one */
    unsigned long injected[7]; /* failures injected, per letter */
    int env_read;              /* USLAB_FAULTS read (or overridden) */
} faults;

static int fault_parse(const char *s, uint64_t *config, uint64_t *seed)
{
    uint64_t whole = 0, frac = 0, scale = 1;
    int digits = 0;
    for (; *s >= '0' && *s <= '9'; s++, digits++)
        whole = whole > 1 ? 2 : whole * 10 + (uint64_t)(*s - '0');
    if (*s == '.')
        for (s++; *s >= '0' && *s <= '9'; s++, digits++)
            if (scale < 1000000000u) {
                frac = frac * 10 + (uint64_t)(*s - '0');
                scale *= 10;
            }
    if (!digits || whole > 1 || (whole == 1 && frac))
        return -1;
    uint64_t threshold = whole ? (uint64_t)1 << 32 : (frac << 32) / scale;
    *seed = 1;
    unsigned mask = FAULT_DEFAULT;
    if (*s == ',') {
        s++;
        if (*s < '0' || *s > '9')
            return -1;
        for (*seed = 0; *s >= '0' && *s <= '9'; s++)
            *seed = *seed * 10 + (uint64_t)(*s - '0');
    }
    if (*s == ',') {
        mask = 0;
        for (s++; *s && *s != ','; s++) {
            const char *l = strchr(fault_letters, *s);
            if (!l)
                return -1;
            mask |= 1u << (l - fault_letters);
        }
    }
    if (*s)
        return -1;
    *config = threshold << 8 | mask;
    return 0;
}

static void fault_configure(uint64_t config, uint64_t seed)
{
    __atomic_store_n(&faults.config, 0, __ATOMIC_RELEASE); /* no decision with a mixed seed */
    __atomic_store_n(&faults.seed, seed, __ATOMIC_RELAXED);
    __atomic_store_n(&faults.decided, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&faults.env_read, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&faults.config, config, __ATOMIC_RELEASE);
}

int uslab_faults_set(const char *spec)
{
    uint64_t config = 0, seed = 1;
    if (spec && fault_parse(spec, &config, &seed) != 0) {
        errno = EINVAL;
        return -1;
    }
    fault_configure(config, seed);
    return 0;
}

unsigned long uslab_faults_injected(const char *calls)
{
    unsigned long n = 0;
    for (const char *c = calls; c && *c; c++) {
        const char *l = strchr(fault_letters, *c);
        if (l)
            n += __atomic_load_n(&faults.injected[l - fault_letters], __ATOMIC_RELAXED);
    }
    return n;
}

/* Whether this call of the kind `bit` fails (errno then set to err). */
static int fault(unsigned bit, int err)
{
    if (!__atomic_load_n(&faults.env_read, __ATOMIC_ACQUIRE)) {
        int expected = 0;
        if (__atomic_compare_exchange_n(&faults.env_read, &expected, 1, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
            const char *v = usi_os_getenv("USLAB_FAULTS");
            uint64_t config = 0, seed = 1;
            if (v && fault_parse(v, &config, &seed) == 0)
                fault_configure(config, seed);
            else if (v) {
                static const char msg[] = "uslab: USLAB_FAULTS: expected rate[,seed[,calls]]\n";
                usi_os_write_err(msg, sizeof msg - 1);
            }
        }
    }
    uint64_t config = __atomic_load_n(&faults.config, __ATOMIC_ACQUIRE);
    if (!(config & bit))
        return 0;
    uint64_t n = __atomic_fetch_add(&faults.decided, 1, __ATOMIC_RELAXED);
    uint64_t x =
        usi_mix64(__atomic_load_n(&faults.seed, __ATOMIC_RELAXED) + n * 0x9e3779b97f4a7c15ull);
    if ((x >> 32) >= (config >> 8))
        return 0;
    __atomic_fetch_add(&faults.injected[__builtin_ctz(bit)], 1, __ATOMIC_RELAXED);
    errno = err;
    return 1;
}

static void *faulty_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    if (fault(flags & MAP_FIXED ? FAULT_REPLACE : FAULT_MMAP, ENOMEM)) {
        if ((flags & MAP_FIXED) &&
            (__atomic_load_n(&faults.config, __ATOMIC_RELAXED) & FAULT_HOLE)) {
            __atomic_fetch_add(&faults.injected[__builtin_ctz(FAULT_HOLE)], 1, __ATOMIC_RELAXED);
            munmap(addr, len);
        }
        return MAP_FAILED;
    }
    return mmap(addr, len, prot, flags, fd, off);
}

static int faulty_mprotect(void *addr, size_t len, int prot)
{
    return fault(FAULT_MPROTECT, ENOMEM) ? -1 : mprotect(addr, len, prot);
}

static int faulty_madvise(void *addr, size_t len, int advice)
{
    int again = (__atomic_load_n(&faults.config, __ATOMIC_RELAXED) & FAULT_AGAIN) != 0;
    return fault(FAULT_MADVISE, again ? EAGAIN : EINVAL) ? -1 : madvise(addr, len, advice);
}

static int faulty_munmap(void *addr, size_t len)
{
    return fault(FAULT_MUNMAP, ENOMEM) ? -1 : munmap(addr, len);
}

/* Every kernel call below goes through the functions above. */
#define mmap     faulty_mmap
#define mprotect faulty_mprotect
#define madvise  faulty_madvise
#define munmap   faulty_munmap
#endif /* USLAB_FAULT_INJECTION */

size_t usi_os_address_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return SIZE_MAX;
    return (size_t)rl.rlim_cur;
}

void *usi_os_find_hole(size_t *size, size_t align, size_t min)
{
    /* The kernel places a PROT_NONE mapping of the size (no commit charge), which is
     * unmapped whole at once: no split, where trimming a reservation to its pieces split it
     * at every cut (about 5 us a cut here). Halve the request on failure (valgrind's smaller
     * address space, other mappings), down to min. */
    for (size_t want = *size & ~(align - 1); want >= min && want;
         want = (want / 2) & ~(align - 1)) {
        size_t len = want + align;
        char *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED)
            continue;
        munmap(p, len);
        *size = want;
        return (void *)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1));
    }
    errno = ENOMEM;
    return NULL;
}

int usi_os_reserve_at(void *addr, size_t size)
{
    /* MAP_FIXED_NOREPLACE (Linux 4.17): fails with EEXIST where anything is mapped. An
     * older kernel ignores the flag and may map elsewhere: that counts as failure. */
    void *p = mmap(addr, size, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    if (p != addr) {
        munmap(p, size);
        return -1;
    }
    no_huge_pages(p, size);
    return 0;
}

int usi_os_commit(void *addr, size_t size)
{
    return mprotect(addr, size, PROT_READ | PROT_WRITE);
}

int usi_os_purge(void *addr, size_t size)
{
    /* MADV_DONTNEED, not MADV_FREE: resident memory drops at once, as users measure it. It
     * fails (EINVAL) on pages locked by mlock or mlockall, which keep their contents. */
    if (usi_os_quiet()) {
        errno = EPERM;
        return -1;
    }
    return madvise(addr, size, MADV_DONTNEED);
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
static int populate_refused;

void usi_os_populate(void *addr, size_t size)
{
    if (usi_os_quiet() || __atomic_load_n(&populate_refused, __ATOMIC_RELAXED))
        return;
    int e = errno;
    if (madvise(addr, size, MADV_POPULATE_WRITE) != 0 &&
        (errno == EINVAL || errno == EPERM || errno == ENOSYS))
        __atomic_store_n(&populate_refused, 1, __ATOMIC_RELAXED);
    errno = e;
}

int usi_os_replace(void *addr, size_t size)
{
    if (usi_os_quiet()) {
        errno = EPERM;
        return -1;
    }
    void *p = mmap(addr, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    if (p != addr)
        return -1;
    no_huge_pages(p, size);
    return 0;
}

int usi_os_map_at(void *addr, size_t size)
{
    void *p = mmap(addr, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == addr) {
        no_huge_pages(p, size);
        return 0;
    }
    if (p != MAP_FAILED) /* a kernel before 4.17 took the address as a mere hint */
        munmap(p, size);
    return -1;
}

int usi_os_is_mapped(const void *addr, size_t size)
{
    /* mincore fails with ENOMEM when part of the range is unmapped; the residency bits are
     * not needed, only the answer, so the range is asked about in small steps. */
    unsigned char vec[64];
    const size_t step = sizeof vec * USI_PAGE_SIZE;
    for (size_t off = 0; off < size; off += step) {
        size_t n = size - off < step ? size - off : step;
        int tries = 0;
        while (mincore((char *)addr + off, n, vec) != 0) {
            if (errno != EAGAIN || ++tries == 100)
                return 0;
        }
    }
    return 1;
}

int usi_os_locks_future(void)
{
    /* Under mlockall(MCL_FUTURE) (with or without MCL_ONFAULT) a new mapping is locked, and
     * MADV_DONTNEED fails on locked pages (EINVAL). Only memory system calls, as sandboxes
     * allow. A failed probe says yes: the caller tries again later. Under strict mode, no
     * probe: yes. */
    if (usi_os_quiet())
        return 1;
    void *p = mmap(NULL, USI_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return 1;
    int locked = madvise(p, USI_PAGE_SIZE, MADV_DONTNEED) != 0;
    munmap(p, USI_PAGE_SIZE);
    return locked;
}

/* Guard markers (Linux 6.13): the page tables say "no access" and the mapping stays whole,
 * under the mmap lock taken only to read. Older headers do not name the advice. */
#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#define MADV_GUARD_REMOVE  103
#endif

int usi_os_guard(void *addr, size_t size, int how)
{
    if (how == USI_GUARD_MARKERS)
        return madvise(addr, size, MADV_GUARD_INSTALL);
    return mprotect(addr, size, PROT_NONE);
}

int usi_os_unguard(void *addr, size_t size, int how)
{
    if (how == USI_GUARD_MARKERS)
        return madvise(addr, size, MADV_GUARD_REMOVE);
    return mprotect(addr, size, PROT_READ | PROT_WRITE);
}

void *usi_os_map_guarded(size_t size)
{
    size_t total = size + 2 * USI_PAGE_SIZE;
    char *p = mmap(NULL, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        errno = ENOMEM;
        return NULL;
    }
    if (mprotect(p + USI_PAGE_SIZE, size, PROT_READ | PROT_WRITE) != 0) {
        munmap(p, total);
        errno = ENOMEM;
        return NULL;
    }
    return p + USI_PAGE_SIZE;
}

void usi_os_unmap_guarded(void *addr, size_t size)
{
    if (addr)
        munmap((char *)addr - USI_PAGE_SIZE, size + 2 * USI_PAGE_SIZE);
}

uint64_t usi_os_random64(void)
{
    /* AT_RANDOM: 16 bytes the kernel puts on the stack of every exec. glibc takes its stack
     * and pointer guards from them, so they are never used as they are: each value is two
     * one-way-ish mixes of both words, the address of this library (ASLR) and a counter. */
    static uint64_t calls;
    uint64_t r[2] = {0, 0};
    const void *at = (const void *)getauxval(AT_RANDOM);
    if (at)
        memcpy(r, at, sizeof r);
    uint64_t n = __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
    uint64_t a = usi_mix64(r[0] ^ usi_mix64(n * 0x9e3779b97f4a7c15ull));
    uint64_t b = usi_mix64(r[1] + usi_mix64((uint64_t)(uintptr_t)&calls ^ n));
    return usi_mix64(a ^ (b << 1 | b >> 63)) ^ b;
}

void *usi_os_map(size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) {
        errno = ENOMEM;
        return NULL;
    }
    return p;
}

void usi_os_unmap(void *addr, size_t size)
{
    if (addr && size)
        munmap(addr, size);
}

/* Secure execution (a set-user-ID or set-group-ID program, or one with file capabilities,
 * run by another user: AT_SECURE) reads no USLAB_* setting, as glibc's malloc reads none of
 * its tunables there: the user who sets the environment is not the one whose rights the
 * process has. USLAB_PROFILE made such a program write a file into any directory it could
 * write (root's), USLAB_LEAKS and USLAB_STATS printed its addresses, USLAB_CLASSES and
 * USLAB_PRESSURE_SOURCE opened files with its rights. */
static int secure_execution(void)
{
    return getauxval(AT_SECURE) != 0;
}

/* The dynamic linker's pointer to the process's initial stack: argc, argv[], NULL, envp[]
 * (glibc exports it for its own threads and loader; weak: another libc may not). */
extern void *__libc_stack_end __attribute__((weak));

/*
 * The environment. Before libc's own initialiser has run, `environ` is still NULL: a
 * .preinit_array function of the program runs before every library's initialiser, and an
 * allocation there initialised uslab without any USLAB_* setting, silently, for good
 * (session 16's audit: USLAB_DEBUG, USLAB_STATS lost). The initial stack holds the same
 * environment then, where the kernel put it. That moment ends before this library's own
 * initialisers run (libc, a library it needs, is initialised first; a static program sets
 * environ before its .preinit_array): from then on environ is the answer, NULL included
 * (clearenv), and the stack is never read.
 */
static int env_libc_ready;

__attribute__((constructor)) static void env_after_libc(void)
{
    __atomic_store_n(&env_libc_ready, 1, __ATOMIC_RELAXED);
}

static char **env(void)
{
    char **e = environ;
    if (e || __atomic_load_n(&env_libc_ready, __ATOMIC_RELAXED) || !&__libc_stack_end ||
        !__libc_stack_end)
        return e;
    const long *sp = __libc_stack_end;
    long argc = sp[0];
    if (argc < 0 || argc > (1L << 24) || sp[1 + argc] != 0)
        return NULL; /* not the layout the kernel made */
    return (char **)(uintptr_t)(sp + 1 + argc + 1);
}

int usi_os_env_has_prefix(const char *prefix)
{
    char **envp = env();
    if (!envp)
        return 0;
    for (char **e = envp; *e; e++) {
        const char *v = *e, *k = prefix;
        while (*k && *v == *k) {
            v++;
            k++;
        }
        if (*k == '\0')
            return 1;
    }
    return 0;
}

const char *usi_os_env_next(const char *prefix, size_t *pos)
{
    char **envp = env();
    if (!envp || secure_execution())
        return NULL;
    for (const char *v; (v = envp[*pos]) != NULL;) {
        ++*pos;
        const char *k = prefix;
        while (*k && *v == *k) {
            v++;
            k++;
        }
        if (*k == '\0')
            return envp[*pos - 1];
    }
    return NULL;
}

const char *usi_os_getenv(const char *name)
{
    char **envp = env();
    if (!envp || (strncmp(name, "USLAB_", 6) == 0 && secure_execution()))
        return NULL;
    /* Compared here, byte by byte: start-up reads some 30 settings, and a call to strncmp
     * for every variable of the envpment and every setting was a fifth of it. */
    for (char **e = envp; *e; e++) {
        const char *v = *e, *k = name;
        while (*k && *v == *k) {
            v++;
            k++;
        }
        if (*k == '\0' && *v == '=')
            return v + 1;
    }
    return NULL;
}

/* Streams the parent's initial environment (NUL-separated entries) through two matchers:
 * one entry equal to `entry`, and an LD_PRELOAD entry naming uslab. */
int usi_os_parent_had(const char *entry)
{
    char path[48], buf[512]; /* small: initialisation may run on a signal stack */
    int e = errno;
    /* Under an inherited seccomp filter, no optional openat: the warning is given. */
    if (usi_os_seccomp_mode() != 0) {
        errno = e;
        return 0;
    }
    snprintf(path, sizeof path, "/proc/%ld/environ", OS_SYSCALL(SYS_getppid));
    long fd = usi_os_open_ro(path);
    if (fd < 0) {
        errno = e;
        return 0;
    }
    static const char preload[] = "LD_PRELOAD=", lib[] = "uslab";
    size_t len = strlen(entry), at = 0, lib_at = 0;
    int same = 1, in_preload = 1, found = 0, preloaded = 0;
    for (long n; !(found && preloaded) && (n = OS_SYSCALL(SYS_read, fd, buf, sizeof buf)) > 0;)
        for (long i = 0; i < n; i++, at++) {
            char ch = buf[i];
            if (ch == '\0') { /* an entry ends */
                found |= same && at == len;
                same = in_preload = 1;
                at = (size_t)-1;
                lib_at = 0;
                continue;
            }
            same = same && at < len && entry[at] == ch;
            if (at < sizeof preload - 1) {
                in_preload = in_preload && preload[at] == ch;
            } else if (in_preload) { /* "uslab": no letter repeats, so a miss restarts */
                lib_at = ch == lib[lib_at] ? lib_at + 1 : ch == lib[0];
                if (lib_at == sizeof lib - 1)
                    preloaded = 1;
            }
        }
    OS_SYSCALL(SYS_close, fd);
    errno = e;
    return found && preloaded;
}

/*
 * USLAB_LOG=PATH (issue 39): reports, statistics and leak tables go to PATH instead of
 * stderr, which many programs close before they exit (ls, sort, cat, grep: their reports
 * were lost). %p in PATH is the process id, so a fork child writes its own file; %% is a
 * %. The file is opened (appended to, created 0644) at the process's first report, not
 * before: no report, no file. It cannot be opened: stderr, and a line there saying why.
 */
static int log_fd = -1, log_pid;               /* log_fd: the open log of process log_pid */
static char log_pattern[4096] USI_COLD_ZEROED; /* USLAB_LOG as read at initialisation: at exit the
                                                * environment may be gone (__libc_freeres) */

/*
 * Without USLAB_LOG, where a report at exit was asked for (USLAB_STATS, USLAB_LEAKS): a
 * copy of stderr as the process started, for a program that closes its own before it
 * exits (`uslab run --stats -- ls` printed nothing). Close-on-exec, at 100 or above, and
 * used only while fd 2 is closed, and only while it is still the file it was made from:
 * a program that closed it and opened another file at that number gets no report in
 * that file. Invariant: err_copy < 0, or err_dev and err_ino are those of the file it was
 * made from.
 */
#define ERR_COPY_MIN 100
static int err_copy = -1;
static dev_t err_dev;
static ino_t err_ino;

static int same_file(int fd, dev_t dev, ino_t ino)
{
    struct stat st;
    return fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

void usi_os_log_setup(int exit_report)
{
    const char *v = usi_os_getenv("USLAB_LOG");
    size_t n = v ? strlen(v) : 0;
    if (n >= sizeof log_pattern)
        n = 0; /* too long to be a path: stderr */
    memcpy(log_pattern, v ? v : "", n);
    log_pattern[n] = '\0';
    struct stat st;
    if (n || !exit_report || err_copy >= 0 || fstat(2, &st) != 0)
        return;
    int e = errno;
    long fd = OS_SYSCALL(SYS_fcntl, 2, F_DUPFD_CLOEXEC, ERR_COPY_MIN);
    if (fd >= 0) {
        err_dev = st.st_dev;
        err_ino = st.st_ino;
        err_copy = (int)fd;
    }
    errno = e;
}

/* stderr, or while fd 2 is closed the copy of it made at initialisation (above). */
static int err_fd(void)
{
    if (err_copy < 0)
        return 2;
    int e = errno;
    int fd = OS_SYSCALL(SYS_fcntl, 2, F_GETFD) < 0 && same_file(err_copy, err_dev, err_ino)
                 ? err_copy
                 : 2;
    errno = e;
    return fd;
}

static int report_fd(void)
{
    const char *pattern = log_pattern;
    if (!*pattern)
        return err_fd();
    int pid = (int)OS_SYSCALL(SYS_getpid);
    int fd = __atomic_load_n(&log_fd, __ATOMIC_ACQUIRE);
    if (fd >= 0 && __atomic_load_n(&log_pid, __ATOMIC_RELAXED) == pid)
        return fd;
    char path[4096];
    size_t n = 0;
    for (const char *p = pattern; *p && n + 24 < sizeof path; p++) {
        if (p[0] == '%' && p[1] == 'p') {
            char digits[16];
            int k = 0;
            for (unsigned v = (unsigned)pid; v || !k; v /= 10)
                digits[k++] = (char)('0' + v % 10);
            while (k)
                path[n++] = digits[--k];
            p++;
        } else {
            path[n++] = *p;
            p += p[0] == '%' && p[1] == '%';
        }
    }
    path[n] = '\0';
    long opened =
        OS_SYSCALL(SYS_openat, AT_FDCWD, path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (opened < 0) {
        static const char msg[] = "uslab: USLAB_LOG: cannot open the log file; reports go to "
                                  "stderr\n";
        int err = err_fd();
        OS_SYSCALL(SYS_write, err, msg, sizeof msg - 1);
        return err;
    }
    /* A fork child's inherited log is its parent's file: not closed (the parent's stays
     * open in the parent), only replaced. Two threads opening at once: one fd is kept. */
    if (!__atomic_compare_exchange_n(&log_fd, &fd, (int)opened, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        OS_SYSCALL(SYS_close, opened);
        return fd;
    }
    __atomic_store_n(&log_pid, pid, __ATOMIC_RELAXED);
    return (int)opened;
}

FILE *usi_os_report_file(char *buf, size_t len)
{
    int fd = report_fd();
    if (fd == 2)
        return stderr;
    /* not fd 2, closed where err_fd gave another */
    int copy = (int)OS_SYSCALL(SYS_fcntl, fd, F_DUPFD_CLOEXEC, 3);
    FILE *f = copy >= 0 ? fdopen(copy, "a") : NULL;
    if (!f) {
        if (copy >= 0)
            close(copy);
        return stderr;
    }
    setvbuf(f, buf, _IOFBF, len); /* no allocation while it is written */
    return f;
}

void usi_os_report_file_close(FILE *f)
{
    if (f != stderr)
        fclose(f);
}

void usi_os_write_err(const char *buf, size_t len)
{
    int fd = report_fd();
    while (len > 0) {
        long w = OS_SYSCALL(SYS_write, fd, buf, len);
        if (w <= 0) {
            if (w < 0 && errno == EINTR)
                continue;
            return;
        }
        buf += w;
        len -= (size_t)w;
    }
}

long usi_os_read_file(const char *path, char *buf, size_t len)
{
    /* O_NONBLOCK (usi_os_open_ro): opening a FIFO for reading waits for a writer, and
     * USLAB_CLASSES or USLAB_PRESSURE_SOURCE may name one (start-up hung for good). It
     * changes nothing for the regular files read here; the kernel's files under /proc and
     * cgroupfs are regular files too. */
    long fd = usi_os_open_ro(path);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat((int)fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        OS_SYSCALL(SYS_close, fd);
        errno = EINVAL;
        return -1;
    }
    size_t got = 0;
    while (got < len) {
        long r = OS_SYSCALL(SYS_read, fd, buf + got, len - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            OS_SYSCALL(SYS_close, fd);
            errno = e;
            return -1;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    OS_SYSCALL(SYS_close, fd);
    return (long)got;
}

/* The soft limit on `resource` (prlimit64 by the instruction, errno kept): RLIM_INFINITY
 * when unlimited, 0 when it cannot be read. */
static rlim_t soft_limit(int resource)
{
    struct rlimit r;
    int e = errno;
    long rc = OS_SYSCALL(SYS_prlimit64, 0, resource, NULL, &r);
    errno = e;
    return rc == 0 ? r.rlim_cur : 0;
}

int usi_os_write_file(const char *path, const char *tmp, const char *buf, size_t len)
{
    if (usi_os_quiet()) {
        errno = EPERM;
        return -1;
    }
    /* Beyond RLIMIT_FSIZE the kernel sends SIGXFSZ, which kills the process: no file. */
    rlim_t fsize = soft_limit(RLIMIT_FSIZE);
    if (fsize != RLIM_INFINITY && fsize < len) {
        errno = EFBIG;
        return -1;
    }
    long fd;
    do
        fd = OS_SYSCALL(SYS_openat, AT_FDCWD, tmp,
                        O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return -1;
    int e = 0;
    while (len > 0 && !e) {
        long w = OS_SYSCALL(SYS_write, fd, buf, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            e = w < 0 ? errno : EIO;
            break;
        }
        buf += w;
        len -= (size_t)w;
    }
    if (OS_SYSCALL(SYS_close, fd) != 0 && !e && errno != EINTR)
        e = errno;
    if (!e && OS_SYSCALL(SYS_renameat, AT_FDCWD, tmp, AT_FDCWD, path) != 0)
        e = errno;
    if (e) {
        OS_SYSCALL(SYS_unlink, tmp);
        errno = e;
        return -1;
    }
    return 0;
}

/* The symboliser's open, read and close are made as system calls: a preloaded library
 * that wraps them (fakeroot, tracers) might allocate, and a report may hold a cache lock.
 * fstat stays glibc's, whose struct stat is the same on every architecture. O_NONBLOCK, as
 * in usi_os_read_file: a mapped file replaced by a FIFO at its path must not stop a report
 * (usi_os_map_file then refuses it); the /proc files pressure.c reads ignore the flag. */
int usi_os_open_ro(const char *path)
{
    if (usi_os_quiet()) {
        errno = EPERM;
        return -1;
    }
    long fd;
    do
        fd = OS_SYSCALL(SYS_openat, AT_FDCWD, path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    while (fd < 0 && errno == EINTR);
    return (int)fd;
}

long usi_os_read(int fd, void *buf, size_t len)
{
    long r;
    do
        r = OS_SYSCALL(SYS_read, fd, buf, len);
    while (r < 0 && errno == EINTR);
    return r;
}

int usi_os_readlink(const char *path, char *buf, size_t len)
{
    long n = len && !usi_os_quiet() ? OS_SYSCALL(SYS_readlinkat, AT_FDCWD, path, buf, len - 1) : -1;
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    return 1;
}

void usi_os_close(int fd)
{
    if (fd >= 0)
        OS_SYSCALL(SYS_close, fd);
}

const void *usi_os_map_file(int fd, struct usi_os_file *file)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
        (uint64_t)st.st_size > (uint64_t)SIZE_MAX)
        return NULL;
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED)
        return NULL;
    file->size = (size_t)st.st_size;
    file->device_major = major(st.st_dev);
    file->device_minor = minor(st.st_dev);
    file->inode = (uint64_t)st.st_ino;
    return p;
}

void usi_os_unmap_file(const void *addr, size_t size)
{
    if (addr && size)
        munmap((void *)(uintptr_t)addr, size);
}

void *usi_os_map_shared(size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

int usi_os_getpid(void)
{
    return (int)getpid();
}

int usi_os_process_gone(int pid)
{
    int e = errno;
    int gone = OS_SYSCALL(SYS_kill, (long)pid, 0L) != 0 && errno == ESRCH;
    errno = e;
    if (gone)
        return 1;
    /* A zombie has ended too: kill still finds it until its parent reaps it, which a busy
     * machine may delay past the end of the process asking (a daemon, whose parent left). */
    char path[32] = "/proc/", digits[12], buf[256];
    int n = 0, at = 6;
    for (unsigned v = (unsigned)pid; n == 0 || v; v /= 10) /* no snprintf: signal-safe */
        digits[n++] = (char)('0' + v % 10);
    while (n)
        path[at++] = digits[--n];
    memcpy(path + at, "/stat", 6);
    long len = usi_os_read_file(path, buf, sizeof buf - 1);
    if (len <= 0)
        return 0;
    buf[len] = '\0';
    const char *state = strrchr(buf, ')'); /* "pid (comm) S ...": comm may hold ')' */
    return state && state[1] == ' ' && (state[2] == 'Z' || state[2] == 'X');
}

uint64_t usi_os_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void usi_os_futex_wait(int *word, int val, unsigned ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    int e = errno; /* EAGAIN, EINTR, ETIMEDOUT: the caller looks at the word again */
    OS_SYSCALL(SYS_futex, word, FUTEX_WAIT_PRIVATE, val, ms ? &ts : NULL, NULL, 0);
    errno = e;
}

void usi_os_futex_wake(int *word, int n)
{
    int e = errno;
    OS_SYSCALL(SYS_futex, word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
    errno = e;
}

void usi_os_sleep_ms(size_t ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (OS_SYSCALL(SYS_clock_nanosleep, CLOCK_MONOTONIC, 0, &ts, &ts) != 0 && errno == EINTR)
        ;
}

/* The calling thread's id, asked once a thread and again in a fork child
 * (usi_os_postfork_child): the debug letter U records it at every allocation and free, where
 * a system call each time was a third of U's cost. Under strict seccomp mode gettid kills:
 * a thread that never asked before gets 0. */
static __thread uint32_t tls_tid __attribute__((tls_model("initial-exec")));

uint32_t usi_os_gettid(void)
{
    uint32_t tid = tls_tid;
    if (tid || usi_os_quiet())
        return tid;
    tid = (uint32_t)gettid();
    tls_tid = tid;
    return tid;
}

__thread unsigned usi_lock_depth __attribute__((tls_model("initial-exec")));

#ifdef USLAB_ASSERTS
__thread unsigned long usi_locks_taken __attribute__((tls_model("initial-exec")));
__attribute__((weak)) void usi_test_lock_hook(const void *lock, int held)
{
    (void)lock;
    (void)held;
}
unsigned long uslab_locks_taken(void)
{
    return usi_locks_taken;
}
#endif

#if !USI_TSAN
void usi_lock_wait(usi_mutex *m)
{
    /* 2 before each sleep: the holder's unlock then wakes one waiter, which marks it 2 again
     * (a waiter may still sleep behind it). A signal or a spurious wake just tries again. */
    while (__atomic_exchange_n(&m->word, 2, __ATOMIC_ACQUIRE) != 0)
        usi_os_futex_wait(&m->word, 2, 0);
}

void usi_lock_wake(usi_mutex *m)
{
    usi_os_futex_wake(&m->word, 1);
}
#endif

/* glibc's stdio list lock (exported by libc.so.6, recursive). A thread in fflush(NULL)
 * holds it while it waits for a FILE lock, whose holder may be in malloc: glibc's fork
 * therefore takes malloc's locks after the list lock. uslab's locks are taken in a fork
 * handler, which runs before fork takes the list lock, so the handler takes it first
 * (glibc's tst-malloc-fork-deadlock). fork unlocks it once in the parent and resets it in
 * the child; the parent handler drops the handler's own hold. */
extern void _IO_list_lock(void);
extern void _IO_list_unlock(void);

void usi_os_prefork(void)
{
    _IO_list_lock();
}

void usi_os_postfork_parent(void)
{
    _IO_list_unlock();
}

int usi_os_single_threaded(void)
{
    return __libc_single_threaded != 0;
}

/* A filter, once installed, stays for the life of the process (and its children): an
 * answer other than "none" is kept, so it is asked for at most until then. */
static int seccomp_filtered;

int usi_os_strict;

/* The calling thread's "Seccomp:" field of /proc/thread-self/status (0 none, 1 strict, 2
 * filter), or -1 when it cannot be read. Read in small chunks, by a state machine that
 * matches "\nSeccomp:" across them: no large buffer on a slow path's stack. */
static USI_NOINLINE int status_seccomp(void)
{
    static const char key[] = "\nSeccomp:";
    long fd;
    do /* the flags the dynamic linker opens libraries with: a filter must allow them */
        fd = OS_SYSCALL(SYS_openat, AT_FDCWD, "/proc/thread-self/status", O_RDONLY | O_CLOEXEC);
    while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return -1;
    char buf[256];
    size_t matched = 0;
    int mode = -1, in_value = 0, done = 0;
    long n;
    while (!done && (n = OS_SYSCALL(SYS_read, fd, buf, sizeof buf)) != 0) {
        if (n < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        for (long i = 0; i < n && !done; i++) {
            char ch = buf[i];
            if (in_value) {
                if (ch >= '0' && ch <= '9')
                    mode = ch - '0';
                done = ch != ' ' && ch != '\t';
            } else if (ch == key[matched]) {
                in_value = ++matched == sizeof key - 1;
            } else {
                matched = ch == key[0];
            }
        }
    }
    OS_SYSCALL(SYS_close, fd);
    return mode;
}

int usi_os_seccomp_mode(void)
{
    int known = __atomic_load_n(&seccomp_filtered, __ATOMIC_RELAXED);
    if (known)
        return known;
    int e = errno;
    /* Asked only by optional work (debug reports' symbols, the profile's file): prctl
     * first, which a sandbox that refuses files allows more often than it allows openat;
     * /proc where prctl cannot tell. A filter that kills for prctl kills that work. */
    int mode = (int)OS_SYSCALL(SYS_prctl, PR_GET_SECCOMP);
    if (mode < 0)
        mode = status_seccomp();
    errno = e;
    if (mode != 0)
        __atomic_store_n(&seccomp_filtered, mode, __ATOMIC_RELAXED);
    if (mode == 1)
        __atomic_store_n(&usi_os_strict, 1, __ATOMIC_RELAXED);
    return mode;
}

int usi_os_in_glibc_section(void)
{
    /* Not under a seccomp filter known to be in force: one that allows only memory calls
     * kills for rt_sigprocmask, which glibc's malloc never makes. No purger starts there
     * anyway; a thread exiting there may keep a thread cache (design §12). */
    if (__atomic_load_n(&seccomp_filtered, __ATOMIC_RELAXED) || usi_os_quiet())
        return 0;
    /* Nor in a process that never had a second thread (glibc never sets the flag back):
     * no thread of it has exited, and its main thread's first call (under a filter
     * inherited across exec, say) makes no system call glibc's malloc would not. */
    if (usi_os_single_threaded())
        return 0;
    uint64_t mask = 0;
    if (OS_SYSCALL(SYS_rt_sigprocmask, SIG_BLOCK, 0, &mask, sizeof mask) != 0)
        return 0;
    return (int)((mask >> (32 - 1)) & 1); /* signal 32: bit 31 */
}

/* The stack pointer of this thread's first question: its own stack. */
static __thread uintptr_t tls_stack_anchor __attribute__((tls_model("initial-exec")));
#define OWN_STACK_SPAN ((uintptr_t)16 << 20)

int usi_os_on_signal_stack(void)
{
    /* No system call (sigaltstack would be one more than glibc's malloc makes, and a
     * memory-only seccomp filter kills for it): a handler's alternate stack is memory of
     * its own, far from the thread's stack, where the thread's first question was asked.
     * Farther than 16 MiB from there counts as another stack (a thread's stack is 8 MiB by
     * default); a deeper recursion than that only puts the work off. */
    uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
    if (!tls_stack_anchor) {
        tls_stack_anchor = sp;
        return 0;
    }
    uintptr_t d = sp > tls_stack_anchor ? sp - tls_stack_anchor : tls_stack_anchor - sp;
    return d > OWN_STACK_SPAN;
}

void usi_os_postfork_child(void)
{
    usi_lock_depth = 0; /* the locks held across fork were re-initialised, not released */
    tls_tid = 0;        /* the child's thread has an id of its own */
}

#ifdef USLAB_PRELOAD
/* glibc's __register_atfork, behind the preload library's own (design §7). Looked up by
 * name, not bound by a versioned reference: the dynamic linker would bind that to the
 * preload library's unversioned definition, which comes first in the global scope. */
typedef int (*register_atfork_fn)(void (*)(void), void (*)(void), void (*)(void), void *);
static register_atfork_fn real_register_atfork;

int usi_os_find_atfork(void)
{
    if (__atomic_load_n(&real_register_atfork, __ATOMIC_ACQUIRE))
        return 0;
    /* dlsym takes the dynamic linker's lock. glibc 2.34 and later allocate in it only for
     * an error message, older ones once per thread: that goes to malloc, which is ready by
     * now (uslab's, or glibc's where uslab stepped aside). */
    register_atfork_fn f = (register_atfork_fn)(uintptr_t)dlsym(RTLD_NEXT, "__register_atfork");
    if (!f)
        return ENOSYS;
    __atomic_store_n(&real_register_atfork, f, __ATOMIC_RELEASE);
    return 0;
}

int usi_os_register_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void),
                           void *dso)
{
    int err = usi_os_find_atfork();
    if (err)
        return err;
    return __atomic_load_n(&real_register_atfork, __ATOMIC_ACQUIRE)(prepare, parent, child, dso);
}
#else
int usi_os_find_atfork(void)
{
    return 0;
}

int usi_os_register_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void),
                           void *dso)
{
    (void)dso;
    return pthread_atfork(prepare, parent, child);
}
#endif

/* ---- reports after every destructor ------------------------------------------------- */

/*
 * The exit reports (the leak report, USLAB_STATS) must see what every library's destructor
 * freed. Destructors run in _dl_fini, which exit() calls as its last exit handler, and
 * uslab's library is not finalised last: the preload library is loaded first and nothing
 * depends on it, so it is finalised right after the program, before the program's
 * libraries; so is libuslab.so before a library listed after it. A handler registered from
 * a destructor (through __cxa_atexit, with no owner, as glibc lets an exit handler register
 * more) runs after _dl_fini returns: after every destructor, before stdio is flushed and the
 * process ends. It must still be mapped then: true of the shared libraries (both linked
 * -z nodelete: dlclose never unloads them, their destructors run at exit only) and of the
 * static archive linked into the program; not of the archive inside a library that may be
 * dlclosed, whose reports run at once, as before.
 */
extern int __cxa_atexit(void (*fn)(void *), void *arg, void *dso);

#define LAST_MAX 4u
static void (*last_fns[LAST_MAX])(void);
static unsigned last_n; /* destructors run in the one thread that exits: no race */
static int last_registered;

static int in_last;     /* run_last is running: every destructor has run */
static int exit_status; /* usi_os_exit_after_reports's, + 1; 0: none */

/* stdio flushed (what the program printed), then the process ends with status. */
static USI_NORETURN void exit_flushed(int status)
{
    fflush(NULL);
    for (;;)
        OS_SYSCALL(SYS_exit_group, status);
}

static void run_last(void *arg)
{
    (void)arg;
    in_last = 1;
    for (unsigned i = 0; i < last_n; i++)
        last_fns[i]();
    if (exit_status)
        exit_flushed(exit_status - 1);
}

void usi_os_exit_after_reports(int status)
{
    if (in_last)
        exit_status = status + 1; /* after the other reports of run_last */
    else
        exit_flushed(status);
}

/* The process's tasks (threads), from /proc/self/stat's 20th field; -1 if unreadable. */
static long task_count(void)
{
    char buf[1024];
    long len = usi_os_read_file("/proc/self/stat", buf, sizeof buf - 1);
    if (len <= 0)
        return -1;
    buf[len] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold spaces and parentheses */
    if (!p)
        return -1;
    for (int field = 2; field < 20 && *p; p++) /* p at ')': field 2 ends there */
        if (*p == ' ')
            field++;
    long n_tasks = 0;
    for (; *p >= '0' && *p <= '9'; p++)
        n_tasks = n_tasks * 10 + (*p - '0');
    return n_tasks > 0 ? n_tasks : -1;
}

#ifndef USLAB_SHARED
/* Whether addr is in the program's own file (its PT_LOAD segments, from the auxiliary
 * vector: no lock, no allocation); 0 when that cannot be told (no PT_PHDR). */
static int in_program(const void *addr)
{
    const ElfW(Phdr) *ph = (const ElfW(Phdr) *)getauxval(AT_PHDR);
    size_t n = getauxval(AT_PHNUM);
    uintptr_t bias = 0, a = (uintptr_t)addr;
    int found = 0;
    for (size_t i = 0; ph && i < n; i++)
        if (ph[i].p_type == PT_PHDR) {
            bias = (uintptr_t)ph - ph[i].p_vaddr;
            found = 1;
        }
    for (size_t i = 0; found && i < n; i++)
        if (ph[i].p_type == PT_LOAD && a - (bias + ph[i].p_vaddr) < ph[i].p_memsz)
            return 1;
    return 0;
}
#endif

int usi_os_after_destructors(void (*fn)(void))
{
#ifndef USLAB_SHARED
    if (!in_program((const void *)run_last))
        return -1;
#endif
    if (last_n == LAST_MAX)
        return -1;
    if (!last_registered) {
        if (__cxa_atexit(run_last, NULL, NULL) != 0) /* exit handlers done: too late */
            return -1;
        last_registered = 1;
    }
    last_fns[last_n++] = fn;
    return 0;
}

/* ---- symbols of the loaded objects ---------------------------------------------------- */

/* The GNU hash of a symbol name (its tables' hash function). */
static uint32_t gnu_hash_of(const char *name)
{
    uint32_t h = 5381;
    for (const unsigned char *c = (const unsigned char *)name; *c; c++)
        h = h * 33 + *c;
    return h;
}

/* The defined, default-version function `name` (whose hash is h) of an object's GNU hash
 * table, or NULL. The table's Bloom filter turns most absent names away in a few loads. */
static const ElfW(Sym) * gnu_hash_lookup(const uint32_t *gh, const ElfW(Sym) * symtab,
                                         const char *strtab, const ElfW(Half) * versym,
                                         const char *name, uint32_t h)
{
    uint32_t nbuckets = gh[0], symoffset = gh[1], bloom_words = gh[2], bloom_shift = gh[3];
    if (nbuckets == 0 || bloom_words == 0)
        return NULL;
    const ElfW(Addr) *bloom = (const ElfW(Addr) *)(gh + 4);
    const unsigned bits = sizeof(ElfW(Addr)) * 8;
    ElfW(Addr) word = bloom[(h / bits) % bloom_words];
    ElfW(Addr) mask =
        ((ElfW(Addr))1 << (h % bits)) | ((ElfW(Addr))1 << ((h >> bloom_shift) % bits));
    if ((word & mask) != mask)
        return NULL;
    const uint32_t *buckets = (const uint32_t *)(bloom + bloom_words);
    const uint32_t *chain = buckets + nbuckets;
    uint32_t i = buckets[h % nbuckets];
    if (i < symoffset)
        return NULL;
    for (;; i++) {
        uint32_t ch = chain[i - symoffset];
        const ElfW(Sym) *s = &symtab[i];
        if ((ch | 1) == (h | 1) && strcmp(strtab + s->st_name, name) == 0 &&
            s->st_shndx != SHN_UNDEF && (s->st_info & 0xf) == STT_FUNC &&
            (!versym || !(versym[i] & 0x8000)))
            return s;
        if (ch & 1)
            return NULL;
    }
}

/* An object's dynamic symbol tables, from its dynamic section: memory only, no lock, no
 * allocation. */
struct obj_syms {
    uintptr_t base;
    const ElfW(Sym) * symtab;
    const char *strtab;
    const uint32_t *gnu_hash;
    const ElfW(Half) * versym;
};

/* 0, or -1 when m has no GNU hash table (or no dynamic section). */
static int obj_syms_of(const struct link_map *m, struct obj_syms *o)
{
    if (!m->l_ld)
        return -1;
    /* The dynamic linker has made most of these pointers absolute (not in a read-only
     * dynamic section, such as the vDSO's): an offset is below the load address. */
    uintptr_t base = (uintptr_t)m->l_addr, symtab = 0, strtab = 0, gnu_hash = 0, versym = 0;
    for (const ElfW(Dyn) *d = m->l_ld; d->d_tag != DT_NULL; d++) {
        uintptr_t v = (uintptr_t)d->d_un.d_ptr;
        v = v < base ? v + base : v;
        if (d->d_tag == DT_SYMTAB)
            symtab = v;
        else if (d->d_tag == DT_STRTAB)
            strtab = v;
        else if (d->d_tag == DT_GNU_HASH)
            gnu_hash = v;
        else if (d->d_tag == DT_VERSYM)
            versym = v;
    }
    if (!symtab || !strtab || !gnu_hash)
        return -1;
    *o = (struct obj_syms){base, (const ElfW(Sym) *)symtab, (const char *)strtab,
                           (const uint32_t *)gnu_hash, (const ElfW(Half) *)versym};
    return 0;
}

static const ElfW(Sym) * obj_lookup(const struct obj_syms *o, const char *name)
{
    return gnu_hash_lookup(o->gnu_hash, o->symtab, o->strtab, o->versym, name, gnu_hash_of(name));
}

/* This object's own dynamic section: the dynamic linker's list names each object by its
 * (link_map.l_ld), so this library finds itself there without dladdr or a lock. Weak: a
 * static executable has none. */
extern ElfW(Dyn) _DYNAMIC[] __attribute__((weak, visibility("hidden")));

/* This object's entry in the dynamic linker's list of the base namespace, or NULL. The
 * objects up to it and the one after it (libc.so.6 comes before anything a later dlopen
 * adds) were loaded at start and do not change; a concurrent dlopen only appends. */
static const struct link_map *self_map(void)
{
    if (!_DYNAMIC)
        return NULL;
    for (const struct link_map *m = _r_debug.r_map; m; m = m->l_next)
        if (m->l_ld == _DYNAMIC)
            return m;
    return NULL;
}

int usi_os_defined_before(const char *name)
{
    const struct link_map *self = self_map();
    if (!self)
        return -1;
    for (const struct link_map *m = _r_debug.r_map; m != self; m = m->l_next) {
        struct obj_syms o;
        if (obj_syms_of(m, &o) == 0 && obj_lookup(&o, name))
            return 1;
    }
    return 0;
}

int usi_os_defined_after(const char *const *names, void **found, int n)
{
    enum { MAX_NAMES = 32 };
    const struct link_map *self = self_map();
    if (!self || n > MAX_NAMES)
        return n;
    uint32_t hashes[MAX_NAMES];
    for (int i = 0; i < n; i++) {
        hashes[i] = gnu_hash_of(names[i]);
        found[i] = NULL;
    }
    int left = n;
    for (const struct link_map *m = self->l_next; m && left; m = m->l_next) {
        struct obj_syms o;
        if (obj_syms_of(m, &o) != 0)
            break; /* a table this lookup cannot read: leave the rest to dlsym */
        for (int i = 0; i < n; i++) {
            const ElfW(Sym) *s = found[i] ? NULL
                                          : gnu_hash_lookup(o.gnu_hash, o.symtab, o.strtab,
                                                            o.versym, names[i], hashes[i]);
            if (s) {
                found[i] = (void *)(o.base + (uintptr_t)s->st_value);
                left--;
            }
        }
    }
    return left;
}

static int helper_threads; /* usi_os_helper_thread */

void usi_os_helper_thread(int delta)
{
    __atomic_add_fetch(&helper_threads, delta, __ATOMIC_RELAXED);
}

extern void __libc_freeres(void);

int usi_os_runtime_freeres(void (*before)(void *), void *arg)
{
    /* No system call under a seccomp filter (a sandbox may kill for the open of /proc). */
    if (!in_last || usi_os_quiet() || usi_os_seccomp_mode() != 0)
        return 0;
    /* Alone, or with uslab's own purger thread, which uses none of what is freed (a fork
     * child inherits the count, not the thread: alone then). */
    long tasks = task_count();
    if (tasks != 1 && tasks != 1 + __atomic_load_n(&helper_threads, __ATOMIC_RELAXED))
        return 0;
    before(arg);
    __libc_freeres();
    /* libstdc++'s, wherever it is in the list (before libuslab.so, or after the preload
     * library): memory only, no dlsym. */
    static const char name[] = "_ZN9__gnu_cxx9__freeresEv";
    for (const struct link_map *m = _r_debug.r_map; m; m = m->l_next) {
        struct obj_syms o;
        const ElfW(Sym) *sym = obj_syms_of(m, &o) == 0 ? obj_lookup(&o, name) : NULL;
        if (sym) {
            ((void (*)(void))(o.base + (uintptr_t)sym->st_value))();
            break;
        }
    }
    return 1;
}

/* ---- the system allocator ------------------------------------------------------------ */

#ifdef USLAB_PRELOAD
/* The preload library exports malloc itself: glibc's own entry points, no dlsym. */
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);
extern int __libc_mallopt(int, int);
#include <malloc.h> /* mallopt, malloc_trim */

/* Bound by name, the __libc_* functions are the first definitions in the global scope,
 * which need not be glibc's: mimalloc exports them too, and loaded after the preload
 * library (LD_PRELOAD=uslab:mimalloc, or a program linked with it) it got uslab's large
 * blocks, whose size uslab reads from glibc's chunk header (usi_sys_usable_size): realloc
 * copied the wrong length and the next free aborted. So they are looked up in libc.so.6's
 * own dynamic symbol table (its GNU hash table), from the dynamic linker's list of
 * objects: memory only, no lock, no allocation, no dlsym (design §8). The names as bound
 * stay where that fails. Every thread that finds `sys_state` 0 does the same lookup and
 * stores the same pointers, so a race is harmless. */
struct sys_fns {
    void *(*malloc)(size_t);
    void *(*calloc)(size_t, size_t);
    void *(*realloc)(void *, size_t);
    void *(*memalign)(size_t, size_t);
    void (*free)(void *);
    int (*mallopt)(int, int);
};
static struct sys_fns sys_fns;
static int sys_state; /* 0: not looked up yet; 1: sys_fns set */

static const char *file_base_name(const char *path)
{
    const char *b = path;
    for (const char *s = path; *s; s++)
        if (*s == '/')
            b = s + 1;
    return b;
}

/* glibc's own allocator functions, from libc.so.6 in the dynamic linker's list; 0 if all
 * six were found. */
static int find_glibc_fns(struct sys_fns *out)
{
    static const char *const names[6] = {"__libc_malloc",   "__libc_calloc", "__libc_realloc",
                                         "__libc_memalign", "__libc_free",   "__libc_mallopt"};
    const struct link_map *m = _r_debug.r_map;
    while (m && !(m->l_name && strcmp(file_base_name(m->l_name), "libc.so.6") == 0))
        m = m->l_next;
    struct obj_syms o;
    if (!m || obj_syms_of(m, &o) != 0)
        return -1;
    void *found[6];
    for (int i = 0; i < 6; i++) {
        const ElfW(Sym) *s = obj_lookup(&o, names[i]);
        if (!s)
            return -1;
        found[i] = (void *)(o.base + (uintptr_t)s->st_value);
    }
    out->malloc = (void *(*)(size_t))(uintptr_t)found[0];
    out->calloc = (void *(*)(size_t, size_t))(uintptr_t)found[1];
    out->realloc = (void *(*)(void *, size_t))(uintptr_t)found[2];
    out->memalign = (void *(*)(size_t, size_t))(uintptr_t)found[3];
    out->free = (void (*)(void *))(uintptr_t)found[4];
    out->mallopt = (int (*)(int, int))(uintptr_t)found[5];
    return 0;
}

/* A function of glibc's own, kept in *once after its first lookup: from libc.so.6's table
 * (memory only), else by dlsym; NULL if neither has it. For the few that are looked up at
 * their first use (malloc_trim, mallinfo2): dlsym waits for the dynamic linker's lock, which
 * a thread in dlopen holds while it runs constructors, and a program's first malloc_trim
 * deadlocked against one that waited for a lock the caller held (session 18's audit). */
static void *glibc_symbol(const char *name, void **once)
{
    void *f = __atomic_load_n(once, __ATOMIC_ACQUIRE);
    if (f)
        return f;
    const struct link_map *m = _r_debug.r_map;
    while (m && !(m->l_name && strcmp(file_base_name(m->l_name), "libc.so.6") == 0))
        m = m->l_next;
    struct obj_syms o;
    const ElfW(Sym) *s = m && obj_syms_of(m, &o) == 0 ? obj_lookup(&o, name) : NULL;
    if (s) {
        f = (void *)(o.base + (uintptr_t)s->st_value);
    } else {
        f = dlsym(RTLD_NEXT, name);
        (void)dlerror(); /* leave no error of this lookup for the program's dlerror() */
    }
    if (f)
        __atomic_store_n(once, f, __ATOMIC_RELEASE);
    return f;
}

static const struct sys_fns *glibc_fns(void)
{
    if (USI_LIKELY(__atomic_load_n(&sys_state, __ATOMIC_ACQUIRE)))
        return &sys_fns;
    struct sys_fns f;
    if (find_glibc_fns(&f) != 0)
        f = (struct sys_fns){__libc_malloc,   __libc_calloc, __libc_realloc,
                             __libc_memalign, __libc_free,   __libc_mallopt};
    __atomic_store_n(&sys_fns.malloc, f.malloc, __ATOMIC_RELAXED);
    __atomic_store_n(&sys_fns.calloc, f.calloc, __ATOMIC_RELAXED);
    __atomic_store_n(&sys_fns.realloc, f.realloc, __ATOMIC_RELAXED);
    __atomic_store_n(&sys_fns.memalign, f.memalign, __ATOMIC_RELAXED);
    __atomic_store_n(&sys_fns.free, f.free, __ATOMIC_RELAXED);
    __atomic_store_n(&sys_fns.mallopt, f.mallopt, __ATOMIC_RELAXED);
    __atomic_store_n(&sys_state, 1, __ATOMIC_RELEASE);
    return &sys_fns;
}
#define SYS(name) glibc_fns()->name
#else
/* libuslab exports only uslab_* names: its system allocator is the process's malloc
 * (glibc's, or a sanitizer's, whose interceptors then see every block). */
#include <malloc.h>
#include <stdlib.h>
#define SYS(name) name
#endif

void *usi_sys_malloc(size_t size)
{
    return SYS(malloc)(size);
}
void *usi_sys_calloc(size_t n, size_t size)
{
    return SYS(calloc)(n, size);
}
void *usi_sys_realloc(void *p, size_t size)
{
    return SYS(realloc)(p, size);
}
void *usi_sys_memalign(size_t align, size_t size)
{
    return SYS(memalign)(align, size);
}
void usi_sys_free(void *p)
{
    SYS(free)(p);
}

size_t usi_sys_usable_size(const void *p)
{
#ifdef USLAB_PRELOAD
    /* glibc's chunk header precedes the block: a size field with flag bits; mmapped
     * chunks carry two words of overhead, others one. */
    size_t head = ((const size_t *)p)[-1];
    size_t chunk = head & ~(size_t)7;
    return (head & 2) ? chunk - 2 * sizeof(size_t) : chunk - sizeof(size_t);
#else
    return malloc_usable_size((void *)p);
#endif
}

/* The preload library leaves glibc's malloc only the blocks above the slab range. With
 * glibc's defaults (trim at 128 KiB of free top, mmap from 128 KiB with a threshold that
 * adapts), a heap of large blocks only is trimmed and faulted back all the time (issue 12:
 * 2.4x mimalloc on mstress, 5.6x on bench/'s `large`). Raised thresholds keep it; uslab's
 * purger gives it back with malloc_trim once the large blocks have been idle for the purge
 * delay (purge.c, which tunes only a program that churns large blocks). Not when the user
 * set one of the thresholds uslab sets (GLIBC_TUNABLES' mmap_threshold, trim_threshold,
 * top_pad or mmap_max, or their MALLOC_*_ variables: theirs wins); glibc's other tunables
 * (hugetlb, tcache_count, arena_max, ...) leave it on. Nor in libuslab, whose system
 * allocator is also the program's. */
int usi_sys_may_tune_for_large(void)
{
#ifdef USLAB_PRELOAD
    static const char *const thresholds[] = {
        "mmap_threshold=", "trim_threshold=", "top_pad=", "mmap_max="};
    const char *t = usi_os_getenv("GLIBC_TUNABLES");
    for (const char *p = t; p && (p = strstr(p, "glibc.malloc.")) != NULL;) {
        p += sizeof "glibc.malloc." - 1;
        for (size_t i = 0; i < sizeof thresholds / sizeof thresholds[0]; i++)
            if (strncmp(p, thresholds[i], strlen(thresholds[i])) == 0)
                return 0;
    }
    return !(usi_os_getenv("MALLOC_TRIM_THRESHOLD_") || usi_os_getenv("MALLOC_MMAP_THRESHOLD_") ||
             usi_os_getenv("MALLOC_TOP_PAD_") || usi_os_getenv("MALLOC_MMAP_MAX_"));
#else
    return 0;
#endif
}

int usi_sys_tune(size_t mmap_threshold, size_t trim_threshold)
{
#ifdef USLAB_PRELOAD
    int e = errno;
    /* With a raise, no top pad: glibc's calloc of a block carved from the top clears the
     * pad it left there, which it cannot tell from freed memory (design §12). */
    int ok = (!mmap_threshold || (usi_sys_mallopt(M_MMAP_THRESHOLD, (int)mmap_threshold) &&
                                  usi_sys_mallopt(M_TOP_PAD, 0))) &&
             usi_sys_mallopt(M_TRIM_THRESHOLD, (int)trim_threshold);
    errno = e;
    return ok;
#else
    (void)mmap_threshold;
    (void)trim_threshold;
    return 0;
#endif
}

size_t usi_sys_mmapped_chunk(const void *p)
{
#ifdef USLAB_PRELOAD
    size_t head = ((const size_t *)p)[-1]; /* glibc's chunk header: IS_MMAPPED is bit 1 */
    return (head & 2) ? head & ~(size_t)7 : 0;
#else
    (void)p;
    return 0;
#endif
}

size_t usi_sys_mmapped_chunk_for(size_t size)
{
    /* glibc's request2size (a header word, 16-byte multiples), then its mmapped chunk:
     * another word, whole pages; beyond any threshold where that would overflow. */
    if (size > ((size_t)1 << 48))
        return SIZE_MAX;
    size_t nb = size + 8 + 15 < 32 ? 32 : (size + 8 + 15) & ~(size_t)15;
    return (nb + 8 + 4095) & ~(size_t)4095;
}

int usi_sys_mallopt(int param, int value)
{
    return SYS(mallopt)(param, value);
}

int usi_sys_trim_pad(size_t pad)
{
#ifdef USLAB_PRELOAD
    typedef int (*trim_fn)(size_t);
    static void *glibc_trim; /* glibc's: the preload library's malloc_trim is its own */
    int e = errno;
    trim_fn f = (trim_fn)(uintptr_t)glibc_symbol("malloc_trim", &glibc_trim);
    int r = f ? f(pad) : 0;
    errno = e;
    return r;
#else
    (void)pad;
    return 0;
#endif
}

int usi_sys_mallinfo2(struct mallinfo2 *out)
{
    memset(out, 0, sizeof *out);
#ifdef USLAB_PRELOAD
    typedef struct mallinfo2 (*info_fn)(void);
    static void *glibc_info; /* glibc's: the preload library's mallinfo2 is its own */
    int e = errno;
    info_fn f = (info_fn)(uintptr_t)glibc_symbol("mallinfo2", &glibc_info);
    if (f)
        *out = f();
    errno = e;
    return f ? 0 : -1;
#else
    return -1;
#endif
}
