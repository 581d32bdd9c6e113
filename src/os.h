/* SPDX-License-Identifier: MIT */
/*
 * os.h - the os layer (rank 1, os_linux.c; docs/design.md §1): the only code that calls
 * the kernel, reads environ, or calls the system allocator; and the lock wrappers, which
 * count the locks a thread holds in the os layer's usi_lock_depth (design §6).
 */
#ifndef USLAB_OS_H
#define USLAB_OS_H

#include "base.h"
#include "uslab.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#pragma GCC visibility push(hidden)

/* Every uslab lock is taken with usi_lock and released with usi_unlock. They count the
 * locks the thread holds (usi_lock_depth, in os_linux.c), so that every user callback can
 * assert it runs with none held (design §6), and so that a signal handler's malloc or
 * free that interrupted its thread inside uslab with a lock held runs no inline pass or
 * live update there (usi_purge_poll): those take locks the thread may hold. */
extern __thread unsigned usi_lock_depth __attribute__((tls_model("initial-exec")));
#ifdef USLAB_ASSERTS
/* Test builds: the locks this thread has taken (uslab_locks_taken), and a function called
 * as each lock has been taken (held 1) or released (0). That one is an empty weak function,
 * which a test linked with the static library replaces by defining its own: a test that
 * forks, or raises a signal, while the thread is inside uslab with its state half changed.
 * Not a function pointer: glibc removed __malloc_hook, a writable one, as an attack target. */
extern __thread unsigned long usi_locks_taken __attribute__((tls_model("initial-exec")));
void usi_test_lock_hook(const void *lock, int held);
#define USI_LOCK_HOOK(m, held) usi_test_lock_hook(m, held)
#define USI_LOCK_DEPTH_ADD(n)  (usi_lock_depth += (unsigned)(n), usi_locks_taken += (n) > 0)
#else
#define USI_LOCK_HOOK(m, held) ((void)0)
#define USI_LOCK_DEPTH_ADD(n)  (usi_lock_depth += (unsigned)(n))
#endif

/* The waits and wakes of a contended usi_mutex (futex system calls). */
void usi_lock_wait(usi_mutex *m);
void usi_lock_wake(usi_mutex *m);

/* A lock that a fork child's thread does not hold, or a new one. */
static inline void usi_mutex_init(usi_mutex *m)
{
#if USI_TSAN
    pthread_mutex_init(m, NULL);
#else
    __atomic_store_n(&m->word, 0, __ATOMIC_RELAXED);
#endif
}

/* Inline where it is free: an uncontended lock and unlock are a compare-and-swap, an exchange
 * and 6 more instructions, where pthread_mutex_lock and _unlock took 57 through the PLT
 * (design §6). */
static inline void usi_lock(usi_mutex *m)
{
#if USI_TSAN
    pthread_mutex_lock(m);
#else
    int free_word = 0;
    if (USI_UNLIKELY(!__atomic_compare_exchange_n(&m->word, &free_word, 1, 0, __ATOMIC_ACQUIRE,
                                                  __ATOMIC_RELAXED)))
        usi_lock_wait(m);
#endif
    USI_LOCK_DEPTH_ADD(1);
    USI_LOCK_HOOK(m, 1);
}

static inline int usi_trylock(usi_mutex *m)
{
#if USI_TSAN
    if (pthread_mutex_trylock(m) != 0)
        return -1;
#else
    int free_word = 0;
    if (!__atomic_compare_exchange_n(&m->word, &free_word, 1, 0, __ATOMIC_ACQUIRE,
                                     __ATOMIC_RELAXED))
        return -1;
#endif
    USI_LOCK_DEPTH_ADD(1);
    USI_LOCK_HOOK(m, 1);
    return 0;
}

static inline void usi_unlock(usi_mutex *m)
{
    USI_LOCK_DEPTH_ADD(-1);
#if USI_TSAN
    pthread_mutex_unlock(m);
#else
    if (USI_UNLIKELY(__atomic_exchange_n(&m->word, 0, __ATOMIC_RELEASE) == 2))
        usi_lock_wake(m); /* a thread may wait */
#endif
    USI_LOCK_HOOK(m, 0);
}

/* RLIMIT_AS's soft limit in bytes, SIZE_MAX when there is none. */
size_t usi_os_address_limit(void);
/* The start of a free hole of *size bytes aligned to align (a power of two), found by
 * mapping it and unmapping it at once: nothing stays mapped, so the caller maps what it
 * needs of it (usi_os_reserve_at, usi_os_map_at), which fails where another thread mapped
 * something there meanwhile. *size may shrink, never below min; NULL: none (ENOMEM). */
void *usi_os_find_hole(size_t *size, size_t align, size_t min);
/* PROT_NONE at exactly addr, never over an existing mapping; 0 or -1. */
int usi_os_reserve_at(void *addr, size_t size);
int usi_os_commit(void *addr, size_t size); /* make reserved memory read/write */
int usi_os_purge(void *addr, size_t size);  /* give pages back; 0, or -1: see below */
/* Advises transparent huge pages for [addr, addr + size) (MADV_HUGEPAGE), or against them
 * (`huge` 0: MADV_NOHUGEPAGE). Advice only: errno is kept, a failure changes nothing. */
void usi_os_huge_pages(void *addr, size_t size, int huge);
/* Makes [addr, addr + size) present for writing in one call (MADV_POPULATE_WRITE, Linux
 * 5.14), where writing it would fault a page at a time. Advice only: errno is kept, a
 * failure changes nothing (the pages fault as they are written); after EINVAL, EPERM or
 * ENOSYS (an older kernel, a filter on the advice) it stops asking. */
void usi_os_populate(void *addr, size_t size);
void *usi_os_map(size_t size); /* fresh zeroed read/write memory */
void usi_os_unmap(void *addr, size_t size);
/* usi_os_purge (MADV_DONTNEED) returns 0, and the pages read as zero; or -1 (e.g. EINVAL:
 * the range is locked by mlock or mlockall), and the contents may be unchanged, in part or
 * whole. The pages layer then falls back on the functions below (design §2). */
/* Puts a fresh private read/write mapping (zero pages, no memory) over [addr, addr + size)
 * with MAP_FIXED: 0, or -1 with the old mapping unchanged or, on kernels that unmap before
 * they fail, the range unmapped: a hole another mapping of the process may take. */
int usi_os_replace(void *addr, size_t size);
/* Maps zero pages read/write at addr only if nothing is mapped anywhere in the range
 * (MAP_FIXED_NOREPLACE): 0, or -1 and nothing changed. */
int usi_os_map_at(void *addr, size_t size);
/* 1 if every page of the range is mapped (mincore; no side effect), else 0. */
int usi_os_is_mapped(const void *addr, size_t size);
/* 1 if the process locks its new mappings (mlockall(MCL_FUTURE) in force: MADV_DONTNEED
 * fails on a fresh page), else 0. errno may change. */
int usi_os_locks_future(void);
/* Makes read/write memory a guard page, where any access faults, `how`: by guard markers
 * (USI_GUARD_MARKERS: MADV_GUARD_INSTALL, Linux 6.13; an older kernel, or a range mlockall
 * locked, refuses them with EINVAL) or PROT_NONE (USI_GUARD_PROT). 0, or -1 with nothing
 * changed. */
#define USI_GUARD_MARKERS 0
#define USI_GUARD_PROT    1
int usi_os_guard(void *addr, size_t size, int how);
/* Read/write again memory usi_os_guard made a guard page `how` (or that was never one). 0,
 * or -1. */
int usi_os_unguard(void *addr, size_t size, int how);
/* Fresh zeroed read/write memory of size bytes (page multiple) with a PROT_NONE guard page
 * on each side, so that no linear overflow of a neighbouring mapping reaches it; NULL. */
void *usi_os_map_guarded(size_t size);
void usi_os_unmap_guarded(void *addr, size_t size);
/* A 64-bit value derived from the kernel's per-exec random bytes (AT_RANDOM), mixed so it
 * reveals nothing of what glibc derives from them (stack and pointer guards); each call
 * gives another. No system call, no allocation. */
uint64_t usi_os_random64(void);
const char *usi_os_getenv(const char *name);   /* no allocation, no interposable call */
int usi_os_env_has_prefix(const char *prefix); /* a variable whose name starts so: 1 */
/* The next "NAME=VALUE" of the environment from index *pos on whose name starts with
 * prefix (advancing *pos past it), or NULL; none under secure execution (setuid). */
const char *usi_os_env_next(const char *prefix, size_t *pos);
/* 1 when the parent process started with the environment entry `entry` ("NAME=VALUE")
 * and uslab in its LD_PRELOAD: it warned about that setting already, so that a pipeline
 * or a build warns once, not in every process (reads /proc/PPID/environ; 0 when it
 * cannot). */
int usi_os_parent_had(const char *entry);
/* 1 for a USLAB_ name this build reads outside the settings table (USLAB_FAULTS in test
 * builds with fault injection). */
int usi_os_private_setting(const char *name, size_t len);
void usi_os_write_err(const char *buf, size_t len); /* to stderr, or USLAB_LOG's file */
/* Reads USLAB_LOG (initialisation); exit_report: a report at exit was asked for, and
 * without USLAB_LOG a copy of stderr is kept for it (os_linux.c). */
void usi_os_log_setup(int exit_report);
/* Where the statistics at exit are written: stderr, or USLAB_LOG's file as a stream
 * buffered in buf (no allocation while it is written); closed by the second call. */
FILE *usi_os_report_file(char *buf, size_t len);
void usi_os_report_file_close(FILE *f);

/* Reads up to len bytes of a regular file (open, read, close: no allocation); returns how
 * many, or -1 with errno: EINVAL when path is not a regular file (a FIFO, a directory, a
 * device), which is not read and never waited for. A file longer than len gives len. */
long usi_os_read_file(const char *path, char *buf, size_t len);
/* Writes buf into a new file tmp (mode 0600; O_EXCL, not following a symbolic link), then
 * renames it to path, replacing what was there: a reader sees the old file or the new one
 * whole, and two writers each leave a whole file. 0, or -1 with errno and no tmp left
 * (EFBIG, nothing written, when len is above RLIMIT_FSIZE). Raw system calls only, no
 * allocation: safe in a signal handler. */
int usi_os_write_file(const char *path, const char *tmp, const char *buf, size_t len);
/* Files, for the symboliser (reports only; no allocation, no lock, so they may run in a
 * signal handler) and pressure.c's line reader: open read-only (O_CLOEXEC, and O_NONBLOCK so
 * that a FIFO never waits; fd or -1), read (bytes read, 0 at the end, -1; EINTR retried),
 * close. usi_os_map_file maps a whole regular file read-only and private and fills *file
 * with its size and identity (its device and inode); NULL if it
 * is empty, not a regular file, or cannot be mapped. usi_os_unmap_file takes the address and
 * file->size back. */
struct usi_os_file {
    size_t size;
    uint64_t inode;
    unsigned device_major, device_minor;
};
int usi_os_open_ro(const char *path);
long usi_os_read(int fd, void *buf, size_t len);
/* The target of symbolic link path into buf, NUL-terminated (cut to len - 1): 1, or 0. */
int usi_os_readlink(const char *path, char *buf, size_t len);
void usi_os_close(int fd);
const void *usi_os_map_file(int fd, struct usi_os_file *file);
void usi_os_unmap_file(const void *addr, size_t size);
/* Shared anonymous memory (fork children write into the same pages), zeroed; NULL. */
void *usi_os_map_shared(size_t size);
int usi_os_getpid(void);
/* Whether process pid has ended: kill(pid, 0) answers ESRCH, or it is a zombie. */
int usi_os_process_gone(int pid);
uint64_t usi_os_now_ms(void); /* monotonic, coarse; may be small on a freshly booted machine */
void usi_os_sleep_ms(size_t ms);
/* usi_trylock, tried again every millisecond for up to `ms` of them: 0 (taken) or -1 (still
 * busy). For reports that must never wait on a lock (a signal handler may have interrupted
 * its holder, this very thread) but should not give up at once on a lock that another
 * thread holds for a moment. */
static inline int usi_trylock_for(usi_mutex *m, unsigned ms)
{
    for (unsigned i = 0;; i++) {
        if (usi_trylock(m) == 0)
            return 0;
        if (i == ms)
            return -1;
        usi_os_sleep_ms(1);
    }
}
/* Sleeps while *word is val, at most ms milliseconds (0: no limit), until a
 * usi_os_futex_wake of n waiters on it; a signal may end it sooner. Both keep errno. */
void usi_os_futex_wait(int *word, int val, unsigned ms);
void usi_os_futex_wake(int *word, int n);
/* The calling thread's kernel id, asked once a thread and again in a fork child (a child
 * made without the fork handlers, by a raw clone, keeps its parent's); 0 under strict
 * seccomp mode for a thread that never asked before. */
uint32_t usi_os_gettid(void);
/* After fork, in the child: the thread holds no uslab lock any more. */
void usi_os_postfork_child(void);
/* Before fork takes uslab's locks: glibc's stdio list lock (design §7); after, in the
 * parent, its release. */
void usi_os_prefork(void);
void usi_os_postfork_parent(void);
/* glibc's __libc_single_threaded: no other thread was ever started. */
int usi_os_single_threaded(void);
/* Whether the calling thread runs where glibc itself blocked every signal, its SIGCANCEL
 * (32) too, which a program's sigprocmask or pthread_sigmask never blocks: a thread's
 * exit after its thread-specific data destructors, which frees its DTV under glibc's
 * stack-cache lock (design §3). One system call. */
int usi_os_in_glibc_section(void);
/* Whether the calling thread seems to run on an alternate signal stack (a handler
 * installed with SA_ONSTACK): its stack pointer is more than 16 MiB from where the thread
 * first asked (the thread cache's creation asks), with no system call. Work that a slow
 * path may do but need not (the purger's start, an inline pass) is put off there, to a
 * slow path on a thread's own stack: such stacks may be a few KiB, enough for glibc's
 * malloc and free, not for that work (design §12). */
int usi_os_on_signal_stack(void);
/* The calling thread's seccomp mode: 0 none, 1 strict, 2 a filter, -1 when it cannot be
 * told (taken as a filter by callers). prctl(PR_GET_SECCOMP) first, which a sandbox that
 * refuses files allows more often than openat; /proc/thread-self/status where prctl
 * cannot tell. Once not 0, the answer is kept without asking again (a filter is never
 * removed). */
int usi_os_seccomp_mode(void);
/* Strict seccomp mode (read, write, exit and sigreturn only; the kernel kills for anything
 * else) was found by usi_os_seccomp_mode: from then on uslab makes no optional system call
 * (design §12): no unit-tag table, no purge, no trim; the functions below that make them
 * fail or do nothing, and their callers check it first where failing would try another
 * call. Never read on a fast path. */
extern int usi_os_strict;
static inline int usi_os_quiet(void)
{
    return __atomic_load_n(&usi_os_strict, __ATOMIC_RELAXED) != 0;
}
/* System call n with up to six arguments, as libc's syscall() answers (-1 and errno on
 * failure), made by the instruction itself where USI_HAVE_RAW_SYSCALL: uslab's own
 * internal calls (the symboliser's reads of /proc, the page map's probes) meet no
 * interposer that might allocate. */
#if defined(__x86_64__) || defined(__aarch64__)
#define USI_HAVE_RAW_SYSCALL 1
#else
#define USI_HAVE_RAW_SYSCALL 0
#endif
long usi_os_syscall(long n, long a, long b, long c, long d, long e, long f);
/* Registers fork handlers with the C library: returns 0 or an errno value. The preload
 * library defines __register_atfork itself (init.c, design §7); this reaches glibc's, which
 * usi_os_find_atfork looks up (dlsym(RTLD_NEXT), once: 0, or ENOSYS if there is none); call
 * that first, after initialisation (dlsym may allocate) and with no uslab lock held (dlsym
 * takes the dynamic linker's lock). libuslab uses pthread_atfork, under its own handle
 * (`dso` is unused), and finds nothing. */
int usi_os_find_atfork(void);
int usi_os_register_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void),
                           void *dso);
/* From a destructor at exit: runs fn after every destructor of every library (fns in the
 * order given), for the exit reports (design §9). 0, or -1: not possible (this copy of uslab
 * may be unloaded first, or exit handlers are over), and the caller runs fn itself. */
int usi_os_after_destructors(void (*fn)(void));
/* At exit, from a report: the process ends with status once the reports registered with
 * usi_os_after_destructors have run (at once when not run from there), stdio flushed. */
void usi_os_exit_after_reports(int status);
/* From a function usi_os_after_destructors runs, in a process with no other thread: frees
 * what glibc and libstdc++ keep for the process's life (stdio buffers, the thread stack
 * cache, the C++ emergency exception pool) as valgrind does before its leak scan
 * (__libc_freeres, __gnu_cxx::__freeres), calling before(arg) first (no other thread runs
 * then either); 1 if it did, 0 where it may not. */
int usi_os_runtime_freeres(void (*before)(void *), void *arg);
/* uslab's own threads (the purger) count themselves here, +1 as one starts running, -1 as
 * it returns, for usi_os_runtime_freeres's test of "no other thread". */
void usi_os_helper_thread(int delta);
#ifdef USLAB_FAULT_INJECTION
/* Test builds only (design §2): makes the os layer's mmap, mprotect, madvise and munmap
 * fail at random. spec: "rate[,seed[,calls]]" as USLAB_FAULTS, or NULL: no more faults.
 * Returns 0, or -1 (EINVAL) for a bad spec. Exported for the tests, not in uslab.h. */
USLAB_API int uslab_faults_set(const char *spec);
/* Failures injected so far into the calls of these letters ("mrpauhg"). */
USLAB_API unsigned long uslab_faults_injected(const char *calls);
#endif
#ifdef USLAB_ASSERTS
/* Test builds: the locks the calling thread has taken so far (usi_lock, usi_trylock).
 * Exported for the tests, not in uslab.h. */
USLAB_API unsigned long uslab_locks_taken(void);
#endif

/* The system allocator, for sizes uslab does not serve: glibc's __libc_* entry points in
 * the preload library (which exports malloc itself), the process's malloc otherwise. */
void *usi_sys_malloc(size_t size);
void *usi_sys_calloc(size_t n, size_t size);
void *usi_sys_realloc(void *p, size_t size);
void *usi_sys_memalign(size_t align, size_t size);
void usi_sys_free(void *p);
size_t usi_sys_usable_size(const void *p);
/* Functions in the symbol tables of the objects the dynamic linker loaded before this
 * library (the executable, a library preloaded earlier) or after it, in its order (default
 * versions; a reference in a non-PIE executable, whose address dlsym would give, is not a
 * definition). Memory only: no lock, no allocation, so no wait for another thread's dlopen.
 * usi_os_defined_before: whether one before defines `name`: 1 yes, 0 no, -1 cannot tell.
 * usi_os_defined_after: found[i] is the first definition of names[i] after this library
 * (what dlsym(RTLD_NEXT) finds), or NULL where it cannot tell; returns how many are NULL. */
int usi_os_defined_before(const char *name);
int usi_os_defined_after(const char *const *names, void **found, int n);
/* Preload library: whether glibc may be tuned for its role as the allocator of large
 * blocks only (0: the user tuned it, or not the preload library). usi_sys_tune sets glibc's
 * mmap threshold (not where 0) and its trim threshold, and returns 1 if it did (errno
 * untouched; 0 outside the preload library). usi_sys_mmapped_chunk: the size of glibc's
 * chunk of block p if glibc mmapped it, else 0 (0 outside the preload library);
 * usi_sys_mmapped_chunk_for: the size of the chunk glibc would mmap for a request of
 * `size` bytes. usi_sys_mallopt is glibc's own mallopt (the preload library exports its
 * own). */
int usi_sys_may_tune_for_large(void);
int usi_sys_tune(size_t mmap_threshold, size_t trim_threshold);
size_t usi_sys_mmapped_chunk(const void *p);
size_t usi_sys_mmapped_chunk_for(size_t size);
int usi_sys_mallopt(int param, int value);
/* glibc's own malloc_trim(pad) (the preload library exports its own malloc_trim, so this
 * one is found with dlsym(RTLD_NEXT) at its first use: call it with no uslab lock held);
 * its result, or 0 where there is none (libuslab: the program's allocator is its own). */
int usi_sys_trim_pad(size_t pad);
/* glibc's own mallinfo2() into *out (found like malloc_trim's); -1 and zeros where there is
 * none. */
struct mallinfo2;
int usi_sys_mallinfo2(struct mallinfo2 *out);

#pragma GCC visibility pop

#endif
