/* SPDX-License-Identifier: MIT */
/*
 * internal.h - cross-file declarations of uslab, one section per file, in layer order
 * (docs/design.md §1): a file calls functions and uses data of the sections above its own
 * only. The order is checked on the object files by tools/check_layers.py (part of
 * `make test`). The cache descriptor near the top is shared data: each field names the
 * layer that owns it.
 *
 * Naming: public symbols are uslab_*, cross-file internal symbols usi_<module>_<verb>,
 * file-local helpers are static.
 */
#ifndef USLAB_INTERNAL_H
#define USLAB_INTERNAL_H

#include "settings.h"
#include "uslab.h"

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Everything declared here is internal to the library: hidden declarations let the
 * compiler address globals directly (rip-relative), not through the GOT. */
#pragma GCC visibility push(hidden)

#define USI_LIKELY(x)   __builtin_expect(!!(x), 1)
#define USI_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define USI_NOINLINE    __attribute__((noinline))
#define USI_COLD        __attribute__((cold, noinline))
#define USI_NORETURN    __attribute__((noreturn))

/* splitmix64's finaliser (Steele, Lea & Flood 2014): a bijective mix of 64 bits, for keys
 * derived from AT_RANDOM (os layer) and keyed hashes (objects.c). */
static inline uint64_t usi_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ------------------------------------------------------------------------------------ */
/* Compile-time geometry (docs/design.md §2)                                              */
/* ------------------------------------------------------------------------------------ */

/* The page map has one entry per unit of 64 KiB: the smallest slab. Slabs are 64 KiB << k
 * bytes (k < USI_SPAN_ORDERS) and aligned to their own size, so a slab covers whole units. */
#define USI_UNIT_SHIFT  16
#define USI_UNIT_SIZE   ((size_t)1 << USI_UNIT_SHIFT)
#define USI_SPAN_ORDERS 8 /* 64 KiB .. 8 MiB */
#define USI_PAGE_SIZE   4096u

/* A page-map entry is (slab address | cache id); 0 means "no live slab here". */
#define USI_ID_BITS 16
#define USI_ID_MASK ((uintptr_t)0xffff)
#define USI_MAX_IDS 65536 /* id 0 is never used, so a non-zero entry always has an id */
/* Ids 1..USI_RESERVED_IDS belong to the malloc front end's size classes; other caches get
 * ids above. Every thread cache, the static sentinel included, has pairs for all of them,
 * so a unit tag (a pair offset, §8) never indexes past a thread cache. */
#define USI_RESERVED_IDS 96

/* Largest object a user cache may hold; its slab holds at least one object. */
#define USI_CACHE_MAX_OBJECT ((size_t)1 << 20)

/* malloc sizes up to this are looked up in one table (docs/design.md §8). */
#define USI_SMALL_MAX 1024

/* Magazines hold at most this many object pointers (docs/design.md §4): a cache starts
 * at 64 or fewer and grows under depot contention (Bonwick & Adams §3.7). */
#define USI_MAG_MAX 256
/* Magazines up to this capacity come from the small magazine cache (design §4). */
#define USI_MAG_SMALL 64
/* Magazines up to this capacity come from the tiny magazine cache. */
#define USI_MAG_TINY 16
/* A thread's first magazine of a cache holds at most this many bytes of objects (and 2 to
 * USI_MAG_TINY objects); each magazine it makes or trades for after that may hold twice as
 * many as the last, up to the cache's capacity (slow start, design §4). */
#define USI_MAG_START_BYTES 1024
/* Depot lock acquisitions that had to wait before a cache's magazines grow (only with
 * USLAB_MAGAZINE_GROWTH=1). */
#define USI_DEPOT_CONTENTION 32

/* ------------------------------------------------------------------------------------ */
/* Assertions and locks (docs/design.md §6)                                              */
/* ------------------------------------------------------------------------------------ */

/* USI_ASSERT checks an invariant in builds with USLAB_ASSERTS (the default except in
 * Release builds; see CMakeLists.txt); it is never used on a fast path. */
#ifdef USLAB_ASSERTS
#define USI_ASSERT(x) ((x) ? (void)0 : usi_report_assert(#x, __FILE__, __LINE__))
#else
#define USI_ASSERT(x) ((void)0)
#endif

/* Every uslab lock is taken with usi_lock and released with usi_unlock. They count the
 * locks the thread holds (usi_lock_depth, in os_linux.c), so that every user callback can
 * assert it runs with none held (design §6), and so that a signal handler's malloc or
 * free that interrupted its thread inside uslab with a lock held runs no inline pass or
 * live update there (usi_purge_poll): those take locks the thread may hold. */
extern __thread unsigned usi_lock_depth __attribute__((tls_model("initial-exec")));
#define USI_LOCK_DEPTH_ADD(n) (usi_lock_depth += (unsigned)(n))
#ifdef USLAB_ASSERTS
#define USI_ASSERT_NO_LOCK() USI_ASSERT(usi_lock_depth == 0)
#else
#define USI_ASSERT_NO_LOCK() ((void)0)
#endif

static inline void usi_lock(pthread_mutex_t *m)
{
    pthread_mutex_lock(m);
    USI_LOCK_DEPTH_ADD(1);
}

static inline int usi_trylock(pthread_mutex_t *m)
{
    if (pthread_mutex_trylock(m) != 0)
        return -1;
    USI_LOCK_DEPTH_ADD(1);
    return 0;
}

static inline void usi_unlock(pthread_mutex_t *m)
{
    USI_LOCK_DEPTH_ADD(-1);
    pthread_mutex_unlock(m);
}

/* ------------------------------------------------------------------------------------ */
/* The cache descriptor, shared by the layers from the registry up; each field says which */
/* layer owns it                                                                          */
/* ------------------------------------------------------------------------------------ */

enum usi_slab_list { USI_SLAB_PARTIAL, USI_SLAB_FULL, USI_SLAB_EMPTY, USI_SLAB_NLISTS };

struct usi_slab;
struct usi_mag;

struct usi_slab_list_head {
    struct usi_slab *first;
    size_t count;
};

/*
 * An object cache. Fields above `lock` are constant after creation and read without a
 * lock (mag_capacity: see there). Fields below are protected by `lock`, under which only
 * the pages lock may be taken (docs/design.md §6).
 */
struct uslab_cache {
    char name[32];
    uintptr_t id;          /* index in usi_caches; low bits of page-map entries */
    uintptr_t pair_offset; /* id * sizeof(struct usi_magpair), or 0: no pair (tcache.c) */
    unsigned flags;
    uint16_t unit_tag;     /* tag of its slabs' units (pages.c): 0, or a malloc class's */
    size_t size;           /* what the user asked for */
    size_t align;          /* power of two, <= page size */
    size_t stride;         /* object size in the slab: size rounded up to align, >= 16 */
    uint64_t stride_recip; /* ceil(2^32 / stride): object index by multiplication (slab.c) */
    /* USI_CACHE_LATTICE caches (the malloc classes): ceil(2^64 / stride), the constant of
     * free()'s start-of-object check (design §8, docs/security.md); 0 for other caches. */
    uint64_t lattice;
    uslab_ctor_fn ctor;
    uslab_dtor_fn dtor;
    uslab_reclaim_fn reclaim;
    void *arg;
    uint64_t callbacks_check; /* keyed hash of ctor, dtor, reclaim, arg (objects.c) */
    /* slab geometry (usi_slab_geometry) */
    size_t slab_size;
    unsigned slab_order;
    uint32_t nobjs;        /* objects per slab */
    uint32_t first_offset; /* where objects start in the span: 0, or a guard page (internal) */
    uint32_t colour_max;   /* largest colour offset */
    uint32_t colour_step;
    unsigned debug;       /* USI_DEBUG_* letters enabled for this cache (debug.c) */
    uint32_t obj_offset;  /* user pointer = slot + obj_offset (a left red zone); 0 without */
    uint32_t tail_offset; /* debug caches: their per-object record at slot + tail_offset */
    /* Debug caches: a ring of freed objects kept out of their slabs for a while (slab.c,
     * design §9), so that a write after free is still poison when P checks it; under `lock`.
     * A quarantined object keeps its bitmap bit and its slab's inuse, not slab_inuse. */
    void **quarantine;
    uint32_t quarantine_cap, quarantine_head, quarantine_count;
    uint32_t mag_max;     /* largest magazine capacity this cache may grow to */
    size_t mag_max_bytes; /* mag_max * stride */
    size_t empty_reserve; /* empty slabs kept unpurged */

    /* Capacity of new magazines: 0 means no magazines (never changes then). It only grows,
     * under `lock` when the depot sees contention; read without the lock (relaxed) by the
     * slow paths that create magazines. */
    uint32_t mag_capacity;
    uint32_t depot_contended; /* waits for `lock` in depot exchanges since the last growth */
    uint32_t pins;            /* registry iterators working on the cache (registry lock) */
    uint32_t closing;         /* being destroyed: walks that run callbacks skip it (registry
                               * lock; set once, by usi_registry_close), and the thread
                               * caches' slow paths keep none of its objects (atomic) */
    /* objects.c: set when the slabs could not grow (no span: the reservation is full, or
     * the kernel refused), cleared when an object goes back to a slab. While set, malloc
     * sends up to this many slow paths straight to the system allocator before it tries
     * the slabs again (design §8). A hint: relaxed loads and stores, no lock. */
    uint32_t starved;
    /* The malloc classes: 1 (a release store) once usi_class_setup has set the descriptor
     * up, at the class's first allocation; every other field is zero before (design §7). */
    uint32_t class_ready;
    /* objects.c: an inline pass saw memory pressure but runs no user code; the reclaim
     * callback runs on the cache's next allocation slow path instead (design §3). Set by a
     * pass, taken by that slow path; relaxed, no lock. */
    uint32_t reclaim_wanted;
    /* depot.c: an inline pass found magazines to reap in a cache with a destructor but runs
     * no user code; the cache's next allocation slow path reaps them (design §4). Relaxed. */
    uint32_t reap_wanted;

    pthread_mutex_t lock;
    uint32_t colour_next;
    uint64_t random_state; /* USLAB_HARDEN=random: the order of fresh slabs (slab.c) */
    struct usi_slab_list_head lists[USI_SLAB_NLISTS];
    struct usi_mag *depot_full, *depot_empty;
    size_t depot_nfull, depot_nempty;
    /* The working set (Bonwick & Adams §3.6): the lowest counts since the last periodic
     * reap, and the lowest full count since the last surplus pass's reap. */
    size_t depot_min_full, depot_min_empty, depot_min_surplus;
    int depot_kicked;      /* a pass was asked for since the depot last had no full magazine */
    size_t depot_flushing; /* magazines taken out to flush, not yet back */
    /* Those of them whose objects are not back in their slabs yet (under `lock`, linked by
     * flight_next): a fork child puts their objects back (usi_depot_postfork_child). */
    struct usi_mag *in_flight;
    size_t slab_inuse; /* objects outside slabs: live + cached in magazines */
    int purge_pending; /* empty slabs beyond the reserve await the purger */
    size_t depot_rounds;
    size_t depot_surplus;    /* bytes of depot_rounds as counted in usi_slab_surplus_bytes
                              * (depot.c) */
    int depot_shedding;      /* full magazines go back to the slabs (depot.c; relaxed atomic) */
    uint64_t depot_demanded; /* shedding episodes when it last stopped (depot.c; atomic) */
    uint64_t depot_shed_ms;  /* when it last started shedding (depot.c; atomic) */
    uint64_t slabs_created, slabs_released;
    /* Cumulative counts for statistics (design §10), kept on slow paths only: objects taken
     * from and returned to the slabs (so slab_inuse = slab_takes - slab_puts), and objects in
     * full magazines given to the depot and handed out by it. Their growth between two
     * readings is the churn `uslab top` shows. */
    uint64_t slab_takes, slab_puts, depot_in, depot_out;
    /* Bytes of the pages of live slabs that objects have been in: per slab, the pages from
     * its first object's to its highest object handed out so far (below `bump`); the rest of
     * a slab was never touched. An estimate of resident memory (design §10). */
    size_t touched_bytes;
    /* Purge hysteresis (design §3, issue 12): empty slabs go once idle for the delay times
     * purge_mult (1 to USI_PURGE_MULT_MAX). A slab created within two such delays of the
     * cache's last purge (purged_ms) means the purge was faulted back: the multiplier
     * doubles; a purge with no such refault since the previous one halves it. */
    uint64_t purged_ms;
    uint32_t purge_mult;
    int refaulted;
};

/* ------------------------------------------------------------------------------------ */
/* os_linux.c (rank 1): the only code that calls the kernel, reads environ, or calls the*/
/* system allocator                                                                      */
/* ------------------------------------------------------------------------------------ */

/* RLIMIT_AS's soft limit in bytes, SIZE_MAX when there is none. */
size_t usi_os_address_limit(void);
/* PROT_NONE, aligned to align (a power of two); *size may shrink, never below min. */
void *usi_os_reserve(size_t *size, size_t align, size_t min);
/* PROT_NONE at exactly addr, never over an existing mapping; 0 or -1. */
int usi_os_reserve_at(void *addr, size_t size);
int usi_os_commit(void *addr, size_t size); /* make reserved memory read/write */
int usi_os_purge(void *addr, size_t size);  /* give pages back; 0, or -1: see below */
void *usi_os_map(size_t size);              /* fresh zeroed read/write memory */
void *usi_os_map_zero_ro(size_t size);      /* read-only zeros, no commit charge */
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
/* Makes read/write memory inaccessible again (PROT_NONE): a guard page. 0, or -1. */
int usi_os_guard(void *addr, size_t size);
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
void usi_os_log_setup(void);                        /* reads USLAB_LOG (initialisation) */
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
 * with its size and identity (the device and inode that /proc/self/maps shows); NULL if it
 * is empty, not a regular file, or cannot be mapped. usi_os_unmap_file takes the address and
 * file->size back. */
struct usi_os_file {
    size_t size;
    uint64_t inode;
    unsigned device_major, device_minor;
};
int usi_os_open_ro(const char *path);
long usi_os_read(int fd, void *buf, size_t len);
void usi_os_close(int fd);
const void *usi_os_map_file(int fd, struct usi_os_file *file);
void usi_os_unmap_file(const void *addr, size_t size);
/* Shared anonymous memory (fork children write into the same pages), zeroed; NULL. */
void *usi_os_map_shared(size_t size);
int usi_os_getpid(void);
/* Whether process pid no longer exists (kill(pid, 0) answers ESRCH). */
int usi_os_process_gone(int pid);
uint64_t usi_os_now_ms(void); /* monotonic, coarse; may be small on a freshly booted machine */
void usi_os_sleep_ms(size_t ms);
/* usi_trylock, tried again every millisecond for up to `ms` of them: 0 (taken) or -1 (still
 * busy). For reports that must never wait on a lock (a signal handler may have interrupted
 * its holder, this very thread) but should not give up at once on a lock that another
 * thread holds for a moment. */
static inline int usi_trylock_for(pthread_mutex_t *m, unsigned ms)
{
    for (unsigned i = 0;; i++) {
        if (usi_trylock(m) == 0)
            return 0;
        if (i == ms)
            return -1;
        usi_os_sleep_ms(1);
    }
}
/* *ts = CLOCK_REALTIME now plus ms: a deadline for pthread_cond_timedwait. */
void usi_os_realtime_after(uint64_t ms, struct timespec *ts);
uint32_t usi_os_gettid(void);
/* After fork, in the child: the thread holds no uslab lock any more. */
void usi_os_postfork_child(void);
/* Before fork takes uslab's locks: glibc's stdio list lock (design §7); after, in the
 * parent, its release. */
void usi_os_prefork(void);
void usi_os_postfork_parent(void);
/* glibc's __libc_single_threaded: no other thread was ever started. */
int usi_os_single_threaded(void);
/* Whether the process has one thread now: usi_os_single_threaded, else the kernel's count
 * of its tasks (a read of /proc/self/stat: off the hot paths). */
int usi_os_alone(void);
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
 * told (taken as a filter by callers). From /proc/thread-self/status, read with the calls
 * the dynamic linker made (an inherited filter allows them); prctl(PR_GET_SECCOMP) only
 * where /proc cannot tell. Once not 0, the answer is kept without asking again (a filter
 * is never removed). */
int usi_os_seccomp_mode(void);
/* What usi_os_seccomp_mode has learnt so far (an earlier question found a filter), without
 * asking: 0 when nothing is known. */
int usi_os_seccomp_known(void);
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
 * (__libc_freeres, __gnu_cxx::__freeres); 1 if it did, 0 where it may not. */
int usi_os_runtime_freeres(void);
/* uslab's own threads (the purger) count themselves here, +1 as one starts running, -1 as
 * it returns, for usi_os_runtime_freeres's test of "no other thread". */
void usi_os_helper_thread(int delta);
#ifdef USLAB_FAULT_INJECTION
/* Test builds only (design §2): makes the os layer's mmap, mprotect, madvise and munmap
 * fail at random. spec: "rate[,seed[,calls]]" as USLAB_FAULTS, or NULL: no more faults.
 * Returns 0, or -1 (EINVAL) for a bad spec. Exported for the tests, not in uslab.h. */
USLAB_API int uslab_faults_set(const char *spec);
/* Failures injected so far into the calls of these letters ("mrpauh"). */
USLAB_API unsigned long uslab_faults_injected(const char *calls);
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
 * blocks only (0: the user tuned it, or not the preload library); usi_sys_tune_for_large
 * raises its trim threshold and sets its mmap threshold, and returns 1 if it did;
 * usi_sys_tune_mmap sets the mmap threshold alone (both errno untouched).
 * usi_sys_mmapped_chunk: the size of glibc's chunk of block p if glibc mmapped it, else 0
 * (0 outside the preload library). usi_sys_mallopt is glibc's own mallopt (the preload
 * library exports its own). */
int usi_sys_may_tune_for_large(void);
int usi_sys_tune_for_large(size_t mmap_threshold);
int usi_sys_tune_mmap(size_t threshold);
size_t usi_sys_mmapped_chunk(const void *p);
/* glibc's trim threshold: 1 the raised one of usi_sys_tune_for_large, 0 glibc's default;
 * returns 1 if set (errno untouched). */
int usi_sys_tune_trim(int tuned);
int usi_sys_mallopt(int param, int value);
/* glibc's own malloc_trim(pad) (the preload library exports its own malloc_trim, so this
 * one is found with dlsym(RTLD_NEXT) at its first use: call it with no uslab lock held);
 * its result, or 0 where there is none (libuslab: the program's allocator is its own). */
int usi_sys_trim_pad(size_t pad);
/* glibc's own mallinfo2() into *out (found like malloc_trim's); -1 and zeros where there is
 * none. */
struct mallinfo2;
int usi_sys_mallinfo2(struct mallinfo2 *out);

/* ------------------------------------------------------------------------------------ */
/* report.c (rank 3): error messages that never allocate                                */
/* ------------------------------------------------------------------------------------ */

/* uslab's own snprintf for messages (report.c: the conversions it knows; no libc, little
 * stack): at most cap - 1 characters and a NUL into buf; returns how many were written. */
size_t usi_report_vformat(char *buf, size_t cap, const char *fmt, va_list ap);
size_t usi_report_format(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prints "uslab: <message>\n" to stderr and aborts. */
USI_NORETURN void usi_report_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Set (atomic) while a report is formatted into the one static line that it is written
 * from; a report that finds it set writes its line in pieces from a small stack buffer. */
extern int usi_report_line_taken;
/* Prints "uslab: <message>\n" to stderr: for misuse, and for what a USLAB_* setting asked
 * about (a bad value of that setting). */
void usi_report_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The same, only when usi_report_verbose is set: for what uslab copes with on its own and
 * the program need not hear about (slabs disabled, a span abandoned, no purger thread). A
 * guest writes nothing to its host's stderr unless asked (USLAB_DEBUG or USLAB_STATS). */
void usi_report_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
extern int usi_report_verbose; /* set at initialisation (init.c) */
/* A failed USI_ASSERT: "uslab: assertion failed: <expr> (file:line)", then abort. */
USI_NORETURN USI_COLD void usi_report_assert(const char *expr, const char *file, int line);

/* ------------------------------------------------------------------------------------ */
/* options.c (rank 4): USLAB_* settings, read once at initialisation (design §11)       */
/* ------------------------------------------------------------------------------------ */

struct usi_options {
    size_t reserve_bytes;  /* USLAB_RESERVE: address space reserved for slabs */
    size_t max_slab_size;  /* USLAB_MAX_SLAB_SIZE: largest malloc size served by slabs */
    size_t empty_reserve;  /* USLAB_EMPTY_SLABS: empty slabs a cache keeps unpurged */
    size_t purge_delay_ms; /* USLAB_PURGE_DELAY: idle time before empty slabs are purged */
    size_t purger;         /* USLAB_PURGER: enum usi_purger_mode (settings.h) */
    size_t return_policy;  /* USLAB_RETURN: enum usi_return_policy (settings.h) */
    size_t tcache_max;     /* USLAB_TCACHE_MAX: bound on bytes cached by all threads */
    size_t mag_growth;     /* USLAB_MAGAZINE_GROWTH: magazines grow under contention (0/1) */
    size_t harden;         /* USLAB_HARDEN: USI_HARDEN_* bits (settings.h) */
    size_t profile;        /* USLAB_PROFILE is set: malloc records request sizes (malloc.c) */
    size_t stats;          /* USLAB_STATS: enum usi_stats_format (settings.h; stats.c) */
    size_t leaks;          /* USLAB_LEAKS: enum usi_stats_format (debug.c) */
    size_t leaks_exitcode; /* USLAB_LEAKS_EXITCODE: exit status when leaks are found */
    size_t debug_continue; /* USLAB_DEBUG_CONTINUE: continue after a BUG report (debug.c) */
};
extern struct usi_options usi_options;
int usi_options_read(void); /* 1 if some USLAB_ variable is set */

/* ------------------------------------------------------------------------------------ */
/* sizeclass.c (rank 5): the malloc size-class tables (design §8)                       */
/* ------------------------------------------------------------------------------------ */

#define USI_NCLASSES USI_RESERVED_IDS /* ids 1..USI_NCLASSES are the malloc classes */

/* (size + 7) >> 3 -> class id, for sizes up to USI_SMALL_MAX. */
extern uint8_t usi_class_small[USI_SMALL_MAX / 8 + 1];
_Static_assert(USI_NCLASSES <= UINT8_MAX, "usi_class_small holds class ids in 8 bits");
extern unsigned usi_nclasses;
/* Computes the classes from usi_options.max_slab_size (which it rounds down to the largest
 * class); returns their number. */
unsigned usi_sizeclass_init(void);
/* Class id for a size above USI_SMALL_MAX and <= max slab size. */
unsigned usi_sizeclass_of_large(size_t size);
size_t usi_sizeclass_size(unsigned id);
/* Class id whose objects are aligned to `align` and hold `size`, or 0 if none. */
unsigned usi_sizeclass_aligned(size_t size, size_t align);
/* Writes "malloc-<size>" for class id into name[32]. */
void usi_sizeclass_name(unsigned id, char name[32]);
/* The caches of the classes (set up by init.c, used by malloc.c): index = class id. */
extern struct uslab_cache usi_class_caches[USI_NCLASSES + 1];

/* ------------------------------------------------------------------------------------ */
/* registry.c (rank 6): the cache table (id -> cache), pins, fork of cache locks        */
/* ------------------------------------------------------------------------------------ */

/* The table; read without the lock only by paths that hold a pin or a page-map entry of
 * the cache (a live slab keeps its cache registered). */
extern struct uslab_cache *usi_caches[USI_MAX_IDS];
/* Gives c the lowest free id in [lo, hi] and publishes it; -1 (ENOMEM) if none is free. */
int usi_registry_add(struct uslab_cache *c, unsigned lo, unsigned hi);
/* Marks c as being destroyed, so that no walk that runs callbacks (a purger pass,
 * uslab_reap) pins it from now on, then waits for those that do: destroy then flushes
 * every thread's magazines with no such walk freeing into its own meanwhile. */
void usi_registry_close(struct uslab_cache *c);
/* Unpublishes c, then waits until no iterator holds a pin on it. The caller then owns c. */
void usi_registry_remove(struct uslab_cache *c);
/* Whether c is the cache its id names (a relaxed read): not once it was destroyed, its
 * descriptor kept back for a while (cache.c) so that a late call on it is caught. */
static inline int usi_registry_names(const struct uslab_cache *c)
{
    return c->id < USI_MAX_IDS && __atomic_load_n(&usi_caches[c->id], __ATOMIC_RELAXED) == c;
}
/* Calls fn for every registered cache, in id order, with NO lock held during the call: the
 * cache is pinned (usi_registry_remove waits for it), so fn may run callbacks, take
 * application locks and call any uslab function but destroying that very cache. */
void usi_registry_for_each(void (*fn)(struct uslab_cache *c, void *arg), void *arg);
/* The same walk for fn that runs no callback and takes only cache locks and the thread
 * caches' registry lock: it may be made holding a lock outside the registry's order (the
 * live page's, design §6). */
void usi_registry_read_each(void (*fn)(struct uslab_cache *c, void *arg), void *arg);
/* A walk that never waits, for the reports at exit (the leak report, USLAB_STATS), which
 * may run in a signal handler that interrupted this thread holding any uslab lock (an exit
 * from the handler): the registry lock is tried (usi_trylock_for) and, if taken, held
 * across the whole walk instead of a pin per cache, so there is no unpin that could find
 * the lock busy. fn runs under the registry lock: no callback; the thread caches' lock and
 * the cache locks only tried. 0, or -1 (the lock was busy, nothing walked). */
int usi_registry_try_each(void (*fn)(struct uslab_cache *c, void *arg), void *arg, unsigned ms);
/* How many registered caches have a reclaim callback (a relaxed read, no lock): while any
 * does, the purger watches memory pressure under USLAB_RETURN=pressure|both (design §3). */
unsigned usi_registry_reclaimers(void);
/* The cache with this id, pinned, or NULL; release it with usi_registry_unpin. */
struct uslab_cache *usi_registry_pin(unsigned id);
void usi_registry_unpin(struct uslab_cache *c);
/* The registry lock then every cache lock in id order (fork), and back. */
void usi_registry_prefork(void);
void usi_registry_prefork_caches(void);
void usi_registry_postfork(int child);

/* ------------------------------------------------------------------------------------ */
/* symbols.c (rank 7): code addresses as function, file and line (docs/design.md §9)    */
/* ------------------------------------------------------------------------------------ */

/* Writes what pc is into buf (len bytes, always terminated, cut short if need be):
 * "function (file.c:line)" with DWARF line information, "function+0xoff (object)" with a
 * symbol table (.symtab, else .dynsym), "object+0xoff" (the address in the object's file)
 * without, or the bare address when no file holds it. Reads /proc/self/maps and the
 * object's file; never allocates (one anonymous mapping of scratch), takes no lock and
 * leaves errno alone: safe in a signal handler and under uslab's locks. For reports only:
 * it costs system calls and a scan of the object's line tables. */
void usi_symbols_describe(const void *pc, char *buf, size_t len);
/* An identity of the file mapped at pc (device and inode, mixed; never 0), or 0 if pc is
 * in no file's mapping or /proc/self/maps cannot be read. */
uint64_t usi_symbols_file_id(const void *pc);

/* ------------------------------------------------------------------------------------ */
/* debug.c (rank 8): USLAB_DEBUG checks, reports, leak report (docs/design.md §9)       */
/* ------------------------------------------------------------------------------------ */

/* The letters' bits USI_DEBUG_F, _Z, _P, _U, _T come from the letter table (settings.h). */
#define USI_CACHE_INTERNAL 0x8000u /* flag of uslab's own caches: never debugged */
/* Flag of the malloc classes: running out of slab memory leaves errno alone (malloc falls
 * back to the system allocator, and a successful malloc must not change errno). */
#define USI_CACHE_KEEP_ERRNO 0x4000u
/* Flag of the malloc classes: objects on the stride lattice, free()'s checks (§8). */
#define USI_CACHE_LATTICE 0x2000u

/* A malloc class of medium blocks (design §3, §8): one block a slab, aligned to its size;
 * small magazines (depot.c); no empty slab in reserve. */
static inline int usi_cache_medium(const struct uslab_cache *c)
{
    return (c->flags & USI_CACHE_LATTICE) && c->size > USI_MEDIUM;
}

/* Reads USLAB_DEBUG, USLAB_DEBUG_CONTINUE, USLAB_LEAKS (at initialisation). */
void usi_debug_read_options(void);
/* After initialisation, outside every lock: primes the unwinder, which may allocate. */
void usi_debug_after_init(void);
/* The debug letters for a cache of this name (0: none). */
unsigned usi_debug_flags_for(const char *name, unsigned cache_flags);
/* Lays out a debug cache's slot: red zones, link, state and tracking after the object;
 * sets obj_offset, tail_offset and stride. */
void usi_debug_layout(struct uslab_cache *c);
/* Around uslab's own use of the program's allocator on this thread (the purger thread's
 * creation): +1 before, -1 after; such blocks are left out of the leak report. */
void usi_debug_own_allocations(int delta);
/* Records the caller's stack for the hooks below; called before the cache lock is taken. */
void usi_debug_capture(void);
/* Slab-layer hooks for debug caches, under cache->lock. */
void usi_debug_on_alloc(struct uslab_cache *c, struct usi_slab *s, char *slot);
void usi_debug_on_free(struct uslab_cache *c, struct usi_slab *s, char *slot);
/* Whether the debug cache's object in `slot` was freed (its state word says so): a
 * quarantined object keeps its bitmap bit (slab.c). */
int usi_debug_is_free(const struct uslab_cache *c, const char *slot);
/* A quarantined object leaves the quarantine for its slab: its red zones and poison are
 * checked (under cache->lock). */
void usi_debug_on_release(struct uslab_cache *c, struct usi_slab *s, char *slot);
/* A malloc block of a debug class was handed out for `size` bytes (the caller owns it, no
 * lock): under Z the rest of its class, [size, c->size), becomes red zone, checked on free,
 * and usi_debug_usable_size says `size`. Also after a realloc kept the block in place. */
void usi_debug_asked(struct uslab_cache *c, void *obj, size_t size);
size_t usi_debug_usable_size(const struct uslab_cache *c, const void *obj);
/* Prints a report in the kernel's form ("BUG <cache>: <what>", object dump, tracks, slab)
 * and aborts unless USLAB_DEBUG_CONTINUE=1. */
void usi_debug_report(struct uslab_cache *c, struct usi_slab *s, const void *obj, const char *what);
/* A cache destroyed with live objects (no lock held): under U, up to 8 of them with their
 * allocation stacks; else a line that says which setting lists them. */
void usi_debug_report_live(struct uslab_cache *c);
extern int usi_debug_enabled; /* some cache may have debugging */
/* An invalid pointer, reported in BUG form when debugging is on: always aborts. */
USI_NORETURN void usi_debug_bug(const char *cache, const char *what);
/* Blocks of the system allocator, tracked while debugging (usi_debug_enabled): recorded
 * with the caller's stack (no uslab lock held); looked up by free, realloc and
 * malloc_usable_size: 1 and *size for a live block (marked freed if `release`), -1 and
 * *size for a freed one, 0 for an address never recorded, 2 (unchecked) when called from a
 * signal handler that interrupted this thread's own use of the table (it must not wait for
 * itself), or for an unknown address once a block went untracked (no memory for the table).
 * Leak reports list live ones. */
void usi_debug_large_alloc(const void *p, size_t size);
int usi_debug_large_release(const void *p, int release, size_t *size);
/* The live recorded block of the system allocator that holds p (for a report: a scan), or
 * NULL; *size its size. */
const void *usi_debug_large_containing(const void *p, size_t *size);
/* The tracking table's lock across fork (taken first, design §6). */
void usi_debug_prefork(void);
void usi_debug_postfork(int child);

/* Valgrind client requests (USLAB_VALGRIND builds only; docs/design.md §9): an object is
 * marked allocated when it leaves uslab (HANDOUT) and freed when it comes back (TAKEBACK),
 * so memcheck reports uses after free, double frees and leaks of uslab's objects; internal
 * accesses to a freed object (free-list link, constructor, destructor, debug checks) are
 * bracketed by the other three. Without USLAB_VALGRIND they compile to nothing. */
#ifdef USLAB_VALGRIND
#include <valgrind/memcheck.h>
#define USI_VG_HANDOUT(c, p)   VALGRIND_MALLOCLIKE_BLOCK((p), (c)->size, 0, (c)->ctor != NULL)
#define USI_VG_TAKEBACK(p)     VALGRIND_FREELIKE_BLOCK((p), 0)
#define USI_VG_UNDEFINED(p, n) VALGRIND_MAKE_MEM_UNDEFINED((p), (n))
#define USI_VG_DEFINED(p, n)   VALGRIND_MAKE_MEM_DEFINED((p), (n))
#define USI_VG_NOACCESS(p, n)  VALGRIND_MAKE_MEM_NOACCESS((p), (n))
#else
#define USI_VG_HANDOUT(c, p)   ((void)0)
#define USI_VG_TAKEBACK(p)     ((void)0)
#define USI_VG_UNDEFINED(p, n) ((void)0)
#define USI_VG_DEFINED(p, n)   ((void)0)
#define USI_VG_NOACCESS(p, n)  ((void)0)
#endif

/* ------------------------------------------------------------------------------------ */
/* pages.c (rank 9): address-space reservation, spans, page map, unit tags              */
/* ------------------------------------------------------------------------------------ */

/*
 * The page map: one word per 64 KiB unit of the reserved range [base, base + nunits*64K);
 * nunits grows with the reservation (design §2).
 * Written under the pages lock when a slab is created or released, read without a lock
 * (relaxed atomics): a pointer is ours iff it falls in the range and its entry is
 * non-zero. No value is ever read from the pages themselves.
 *
 * The unit tags: one uint16_t per 64 KiB unit of the whole 47-bit user address space (4 GiB
 * of address space, mapped read-only except over the reservation, so it costs no commit
 * charge and no memory where never written). The owner of a span chooses its tag (the
 * slab layer writes the cache's unit_tag; the malloc front end gives its classes their
 * pair offset, §8); 0 everywhere else. The index is masked with usi_unit_tag_mask (0 until
 * the table exists: then it reads a one-entry table), so any pointer, even a garbage one,
 * reads a valid tag without a range check.
 */
struct usi_pagemap {
    uintptr_t base; /* start of the reserved range, 8 MiB aligned */
    size_t nunits;  /* units reserved so far; 0 before initialisation */
    uintptr_t *map; /* nunits entries: (slab | cache id) or 0 */
    uint32_t *link; /* nunits entries: free-span list links (unit index + 1, 0 = end) */
    char *meta;     /* nunits records of USI_SLAB_META_BYTES: slab headers (slab.c) */
    uint64_t *bits; /* nunits * USI_SLAB_BITS_BYTES: slab allocation bitmaps (slab.c) */
};
extern struct usi_pagemap usi_pagemap;

/*
 * Slab metadata lives out of the spans (design §3, docs/security.md), so no linear overflow
 * of a user block reaches it: per 64 KiB unit, a header record and a bitmap of one bit per
 * 16 bytes. A slab of 2^k units uses the record of its first unit and the bitmaps of all
 * its units, which are contiguous. Both arrays are reserved PROT_NONE as far as the range
 * is and made read/write together with the spans they describe (the bump pointer's commit),
 * so they cost memory only where slabs are and are never touched by mlockall elsewhere.
 */
#define USI_SLAB_META_BYTES 128
#define USI_SLAB_BITS_BYTES 512 /* 4096 objects of 16 bytes per unit */
#define USI_MIN_STRIDE      16  /* the smallest object slot of any cache */
_Static_assert(USI_SLAB_BITS_BYTES * 8 * USI_MIN_STRIDE == USI_UNIT_SIZE,
               "a unit's bitmap has a bit for every slot of the smallest stride");

/* The header record of the slab (or free span) at span, and its bitmap. */
static inline void *usi_pages_meta(uintptr_t span)
{
    return usi_pagemap.meta + ((span - usi_pagemap.base) >> USI_UNIT_SHIFT) * USI_SLAB_META_BYTES;
}
static inline uint64_t *usi_pages_bits(uintptr_t span)
{
    return usi_pagemap.bits +
           ((span - usi_pagemap.base) >> USI_UNIT_SHIFT) * (USI_SLAB_BITS_BYTES / 8);
}

#define USI_ADDRESS_BITS 47
extern const uint16_t *usi_unit_tags; /* 2^(47-16) entries; see above */
extern uintptr_t usi_unit_tag_mask;

/* ThreadSanitizer does not see the ordering of the asm below: it gets the atomic path. */
#if defined(__SANITIZE_THREAD__)
#define USI_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define USI_TSAN 1
#endif
#endif
#ifndef USI_TSAN
#define USI_TSAN 0
#endif

static inline unsigned usi_unit_tag(const void *p)
{
    /* Both words change once, when the table is mapped (usi_pages_try_tags): the table
     * pointer first, then the mask. The mask is loaded first and the pointer after it: on
     * x86-64 an empty asm that takes the masked index as input orders the two loads at no
     * cost (loads are not reordered with loads); elsewhere an acquire load does. A reader
     * that sees the old mask (0) reads entry 0 of either table: 0. */
    uintptr_t idx = ((uintptr_t)p >> USI_UNIT_SHIFT) & usi_unit_tag_mask;
    const uint16_t *tags;
#if defined(__x86_64__) && !USI_TSAN
    __asm__("mov %1, %0" : "=r"(tags) : "m"(usi_unit_tags), "r"(idx));
#else
    idx = ((uintptr_t)p >> USI_UNIT_SHIFT) & __atomic_load_n(&usi_unit_tag_mask, __ATOMIC_ACQUIRE);
    tags = __atomic_load_n(&usi_unit_tags, __ATOMIC_RELAXED);
#endif
    return tags[idx];
}

/* Reserves the range within the address-space budget (RLIMIT_AS / 4); 0, or -1 when
 * there is no room for a useful reservation (slabs are then disabled). */
int usi_pages_init(void);
/* Whether the unit-tag table exists. Until it does, every free takes the slow path. */
int usi_pages_have_tags(void);
/* Maps the unit-tag table if RLIMIT_AS leaves room for it and the process does not lock
 * its future mappings (design §2); cold. */
void usi_pages_try_tags(void);
/* Before mlockall(flags): with MCL_CURRENT, in a process that never had a second thread,
 * unmaps the tag table (4 GiB that the kernel would count and make present); free then
 * takes the page-map path, as before the table existed (design §2). */
void usi_pages_before_mlockall(int flags);
/* The process's RLIMIT_AS is now `limit` bytes (SIZE_MAX: none), set by the program
 * (override.c's setrlimit and prlimit): the budget follows it, and where the tag table no
 * longer fits it (room for it twice in a quarter of the limit, as when it is mapped) and
 * no other thread can be reading it (`alone`: the caller's word, by the purger's rule), the
 * table is unmapped (design §2). */
void usi_pages_address_limit_changed(size_t limit, int alone);
/* A span of 64 KiB << order bytes, aligned to its size, read/write, reading as zero (fresh,
 * purged, or zeroed by hand where the purge failed: design §2). NULL (ENOMEM) when the
 * reservation is exhausted or the kernel refuses to commit more of it. */
void *usi_pages_alloc_span(unsigned order);
/* Purges the span and makes it available again, reading as zero; its page-map entries
 * must be clear. A span that can be neither purged, replaced nor zeroed is abandoned.
 * guard: bytes of guard page (PROT_NONE, usi_pages_guard) at each end, made read/write
 * again first, or 0. */
void usi_pages_free_span(void *span, unsigned order, size_t guard);
/* Bytes of spans abandoned so far (design §2). */
size_t usi_pages_abandoned_bytes(void);
/* A guard page inside a span of an internal cache (design §3): PROT_NONE. 0, or -1 with
 * nothing changed. usi_pages_free_span takes the guards off. */
int usi_pages_guard(void *addr, size_t size);
/* Sets the page-map entries and unit tags of every unit of the span. */
void usi_pages_set_owner(void *span, unsigned order, uintptr_t entry, uint16_t unit_tag);
void usi_pages_prefork(void);
void usi_pages_postfork(int child);
size_t usi_pages_reserved_bytes(void);
/* Whether p lies in uslab's reserved range, in a slab or not (a skip is not: design §2). */
int usi_pages_in_range(const void *p);
/* Where that count is, for the tool that reads it from outside (live.h's map). */
const size_t *usi_pages_reserved_address(void);

/* The page-map entry for p: (slab | id), or 0 for any pointer uslab did not hand out. */
static inline uintptr_t usi_pagemap_lookup(const void *p)
{
    uintptr_t idx = ((uintptr_t)p - usi_pagemap.base) >> USI_UNIT_SHIFT;
    if (USI_UNLIKELY(idx >= __atomic_load_n(&usi_pagemap.nunits, __ATOMIC_RELAXED)))
        return 0;
    return __atomic_load_n(&usi_pagemap.map[idx], __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------------------------ */
/* slab.c (rank 10): slabs of one object size                                           */
/* ------------------------------------------------------------------------------------ */

/*
 * A slab: a span of nobjs objects of cache->stride bytes, from span + first_offset + colour
 * on; its header (this record) and its bitmap are in the pages layer's side arrays, never
 * in the span (docs/security.md). Invariants (all under cache->lock; usi_slab_check tests
 * them, USI_ASSERT samples them):
 *  - inuse = number of objects outside the slab (in magazines or with the user);
 *  - objects with index >= bump have never been handed out (their pages may be untouched);
 *    under USLAB_HARDEN=random bump is nobjs from the start;
 *  - bit i of alloc_map is set iff object i is outside the slab (exact double-free check),
 *    so the bitmap's population count is inuse; bits past nobjs are clear. The bitmap is
 *    the free list too: no object in the slab holds anything of this layer's, so a write
 *    after free cannot steer it (docs/security.md §3);
 *  - every bitmap word below scan is full: taking starts at word scan;
 *  - list says which of the cache's lists holds the slab: EMPTY iff inuse == 0,
 *    FULL iff inuse == nobjs, PARTIAL otherwise. A slab moves only when that changes.
 *    USI_SLAB_NLISTS: detached, on its way back to the pages layer.
 *  - USI_CACHE_LATTICE caches: the low 32 bits of every object's address are a multiple
 *    of stride (colour is that phase), which free() checks without a lookup (§8).
 */
struct usi_slab {
    struct uslab_cache *cache;
    struct usi_slab *next, *prev;
    char *objs;          /* first object: span + cache->first_offset + colour */
    char *span;          /* the span (64 KiB << cache->slab_order, aligned to its size) */
    uint64_t *alloc_map; /* the span's bitmap in the side array */
    uint32_t inuse;
    uint32_t bump;
    uint32_t colour;
    uint32_t scan; /* bitmap word the next take looks at first */
    uint8_t list;
    uint64_t empty_since_ms; /* when inuse last became 0 (usi_os_now_ms) */
};
_Static_assert(sizeof(struct usi_slab) <= USI_SLAB_META_BYTES, "a slab header fits its record");

/* The slab of a non-zero page-map entry. */
static inline struct usi_slab *usi_slab_of_entry(uintptr_t entry)
{
    return (struct usi_slab *)usi_pages_meta(entry & ~USI_ID_MASK);
}

/* The per-process secret (AT_RANDOM) that seeds each cache's generator for
 * USLAB_HARDEN=random, set once by init.c before the first slab exists. */
extern uintptr_t usi_slab_seed;
/* The secret of free()'s double-free key (design §8, docs/security.md §2.2), set once by
 * init.c before the first slab exists, never 0: a freed malloc block holds
 * usi_free_key(block) in its second word. Random, so that no data a program keeps in a live
 * block (a list head pointing at itself) looks like it but by chance. */
extern uintptr_t usi_free_secret;
static inline uintptr_t usi_free_key(const void *block)
{
    return (uintptr_t)block ^ usi_free_secret;
}
/* Bytes of the empty slabs beyond their caches' reserves and of the objects in depots,
 * summed over every cache (relaxed atomic; the slab and depot layers
 * keep it under each cache's lock). A slab created while
 * it exceeds USI_SLAB_SURPLUS_MAX sets usi_slab_surplus_seen, which the objects layer
 * turns into a pass that releases them at once (design §3, "Across classes"). */
extern uint64_t usi_slab_surplus_bytes;
extern int usi_slab_surplus_seen;
#define USI_SLAB_SURPLUS_MAX ((uint64_t)16 << 20)
/* The headroom (design §3, "The headroom"): idle memory up to this much waits for a pass;
 * beyond it, an empty slab goes back in the put that emptied it, and a full magazine of a
 * cache without callbacks goes back to its slabs instead of the depot (depot.c). Not for a
 * cache whose purges were faulted back (purge_mult > 1): it keeps its memory for the
 * multiplied delay. */
#define USI_SLAB_HEADROOM ((uint64_t)8 << 20)
/* usi_slab_surplus_bytes is beyond the headroom, and c's purges were not faulted back. */
static inline int usi_slab_over_headroom(const struct uslab_cache *c)
{
    return __atomic_load_n(&c->purge_mult, __ATOMIC_RELAXED) == 1 &&
           __atomic_load_n(&usi_slab_surplus_bytes, __ATOMIC_RELAXED) > USI_SLAB_HEADROOM;
}

/* The pattern of c cycles (it allocates again what it just gave back): its purge
 * multiplier goes to its cap, as after a refault (design §3). No lock needed. */
void usi_slab_keep_memory(struct uslab_cache *c);
/* Slab geometry of a cache, fixed at creation. */
void usi_slab_geometry(struct uslab_cache *c);
/* Takes up to n raw (unconstructed) objects from the cache's slabs, growing if needed.
 * Returns how many it took; fewer than n only when no span could be had. Caller holds
 * cache->lock. */
size_t usi_slab_take(struct uslab_cache *c, size_t n, void **objs);
/* Returns raw objects to their slabs; checks each is a valid, allocated object of c and
 * reports misuse. Empty slabs beyond the reserve are unlinked onto *release, to be handed
 * to usi_slab_release after the lock is dropped. Caller holds cache->lock. */
void usi_slab_put(struct uslab_cache *c, size_t n, void *const *objs, struct usi_slab **release);
/* Unlinks every empty slab (keep = how many to keep) onto *release. Caller holds lock. */
size_t usi_slab_detach_empty(struct uslab_cache *c, size_t keep, struct usi_slab **release);
/* Unlinks empty slabs idle since before `before_ms`, keeping the `keep` most recent empty
 * slabs, onto *release; returns how many empty slabs remain beyond `keep`. Caller holds
 * the lock. */
size_t usi_slab_detach_idle(struct uslab_cache *c, size_t keep, uint64_t before_ms,
                            struct usi_slab **release);
/* Returns detached slabs of c to the pages layer; returns the bytes released. No lock
 * needed. */
size_t usi_slab_release(struct uslab_cache *c, struct usi_slab *list);
/* For free() of p, whose page-map entry e names a slab of c: the index of the object p
 * starts, or UINT32_MAX (an interior or stray pointer); *block is set to the start of the
 * object p falls in, or NULL. No lock: it reads constants of a live slab. */
uint32_t usi_slab_index_of(const struct uslab_cache *c, uintptr_t e, const void *p,
                           const void **block);
/* Whether object p of c (page-map entry e) is back in its slab (free). Caller holds the
 * cache lock. */
int usi_slab_holds(const struct uslab_cache *c, uintptr_t e, const void *p);
/* For realloc and malloc_usable_size of p in a debug cache c (no magazines: the slab's
 * map is exact): 0 when p is a live object; else reports it (usi_debug_report, which
 * returns only under USLAB_DEBUG_CONTINUE) and returns 1. Caller holds the cache lock. */
int usi_slab_debug_check_live(struct uslab_cache *c, const void *p, const char *fn);
/* Debug caches: every quarantined object back to its slab (under c->lock; emptied slabs as
 * usi_slab_put leaves them, `release` for those to release). */
void usi_slab_quarantine_drain(struct uslab_cache *c, struct usi_slab **release);
/* Checks every invariant of slab s of c (above); returns NULL, or what is broken. Caller
 * holds cache->lock. O(objects). Used by tests and by USLAB_DEBUG=F. */
const char *usi_slab_check(const struct uslab_cache *c, const struct usi_slab *s);
/* A free of p to cache c that the page map refuses (entry = its page-map entry): reports
 * "not allocated by uslab" or "belongs to cache X" and aborts. */
USI_COLD USI_NORETURN void usi_slab_bad_pointer(const struct uslab_cache *c, const void *p,
                                                uintptr_t entry);

/* ------------------------------------------------------------------------------------ */
/* purge.c (rank 11): the purger thread that gives idle memory back (design §3, §4)     */
/* ------------------------------------------------------------------------------------ */

/* How a pass runs (bits): */
#define USI_PASS_USER                                                                              \
    1u /* it may run user code: destructors, reclaim callbacks (purger                             \
        * thread); not inline, on a slow path of a thread that may hold                            \
        * its own locks */
#define USI_PASS_URGENT                                                                            \
    2u /* memory pressure: give back everything that is not in a                                   \
        * thread's own magazines, at once */
#define USI_PASS_SURPLUS                                                                           \
    4u /* new slabs while others are kept (usi_purge_surplus): the depots'                         \
        * magazines and every empty slab beyond the reserves, idle or not */
#define USI_PASS_STARVED                                                                           \
    8u /* a cache's slabs could not grow (usi_purge_starved): every empty                          \
        * slab, and the depots of caches without a destructor, at once */
#define USI_PASS_SHED                                                                              \
    32u /* the depots of caches without callbacks go back to their slabs                           \
         * (a thread's exit leaves one thread, usi_purge_thread_exit) */
#define USI_PASS_REAP                                                                              \
    16u /* half the idle time has passed since the last reap: the depots'                          \
         * working-set reap (design §4) runs */
/* The pass the purger runs each tick at now_ms: gives back what has been idle for idle_ms
 * (times each cache's purge multiplier); returns whether anything remains to be given back
 * later. Set once at
 * initialisation (init.c sets reclaim.c's usi_reclaim_pass). */
void usi_purge_set_pass(int (*pass)(uint64_t now_ms, uint64_t idle_ms, unsigned how));
/* Called without locks when a cache has empty slabs beyond its reserve: starts the purger
 * thread (once, where USLAB_PURGER allows it) or wakes it, or else schedules an inline
 * pass. Cheap when the thread is already awake. */
void usi_purge_kick(void);
/* New slabs are being made while other caches keep more than USI_SLAB_SURPLUS_MAX of empty
 * slabs: the next pass, due at once (the caller's slow path runs it inline), releases every
 * empty slab beyond the reserves, however recently emptied (design §3, "Across classes"). */
void usi_purge_surplus(void);
/* A cache's slabs could not grow (the reservation is full, or the kernel refused): runs a
 * pass at once, on this thread, that gives back every empty slab of every cache and the
 * depots' objects of caches without a destructor (no user code runs), so that the caller
 * can try again (design §3, "When the slabs cannot grow"). Nothing, and 0, when there is
 * nothing of the kind (usi_slab_surplus_bytes is 0), when another pass is running (maybe
 * this thread's own, whose destructor allocates), when this thread holds a uslab lock
 * (a signal handler), on a signal stack, or under strict seccomp mode; else 1. No lock
 * held by the caller. */
int usi_purge_starved(void);
/* A thread's exit, its magazines flushed (tcache.c; no lock held): if
 * usi_slab_surplus_bytes is beyond USI_SLAB_HEADROOM, the empty slabs beyond the reserves
 * go back, and when `last` (at most one thread with a cache is left) the depots of caches
 * without callbacks first; glibc's free memory if it freed large blocks; else a pass that
 * is due runs (design §3). */
void usi_purge_thread_exit(int last);
/* A cache with a reclaim callback was registered: under USLAB_RETURN=pressure|both, kicks
 * the purger, which from then on runs passes (and reads the pressure) every tick while such
 * a cache exists, pending or not (design §3). Nothing under `delay`. */
void usi_purge_watch(void);
void usi_purge_postfork_child(void);
/* The calling thread enters (+1) or leaves (-1) a section where its kicks never start the
 * purger thread (design §3): a magazine exchange (tcache.c: pthread_create's own mallocs
 * would nest into it). */
void usi_purge_no_start(int delta);
/* Large blocks (design §8): init.c says whether glibc may be tuned to keep their memory
 * (usi_sys_may_tune_for_large); the 6th large block held at once or the 64th large free
 * tunes it (usi_sys_tune_for_large: malloc.c reports each large malloc with
 * usi_purge_large_allocated, each free of a block of glibc's with usi_purge_large_freed),
 * and from then on each free of one restarts an idle clock, and a pass trims glibc once
 * they have been idle for the purge delay. usi_purge_large_user_tunes: the program is about to
 * set a threshold of glibc's with mallopt (override.c); uslab tunes nothing from then on,
 * and a tuning in flight ends first, so that the program's call wins. */
void usi_purge_track_large(int may_tune);
/* Before glibc frees block p: glibc's dynamic mmap threshold, which uslab's tuning turns
 * off in glibc, kept by uslab instead (purge.c). */
void usi_purge_large_freeing(const void *p);
void usi_purge_large_freed(void);
/* A large block of glibc's resized by glibc's realloc (moved, or shrunk in place): once
 * glibc is tuned, the idle trim is due as after a free, for the old block or its tail
 * (session 17's memory-return audit: 200 builders grown to 1 MB and shrunk to 100 bytes
 * kept 316 MB, glibc 35). Before tuning it counts for nothing. */
void usi_purge_large_resized(void);
/* A large malloc (malloc.c): counts towards the tuning, and makes the thread's arena
 * sentinel once glibc is tuned or trimmed (purge.c); returns 1 when it made one: malloc.c
 * then gives the thread a thread cache (usi_tcache_join), whose exit gives back what the
 * thread freed (usi_purge_thread_exit). */
int usi_purge_large_allocated(void);
void usi_purge_large_user_tunes(void);
/* glibc's free memory back (malloc_trim(pad)), its threads' arenas included where uslab
 * tuned glibc (the arenas' sentinels, purge.c); glibc's malloc_trim result. No lock held. */
int usi_purge_trim_glibc(size_t pad);
/* When an inline pass is due (monotonic ms), 0 when none is. */
extern uint64_t usi_purge_due_ms;
void usi_purge_poll_due(void);
/* Called by slow paths and thread exits with no uslab lock held: runs the inline pass once
 * it is due. One load when nothing is scheduled. Not in a signal handler that interrupted
 * its thread while it held a uslab lock: the work waits for a later slow path. */
static inline void usi_purge_poll(void)
{
    if (USI_UNLIKELY(usi_lock_depth != 0))
        return;
    if (USI_UNLIKELY(__atomic_load_n(&usi_purge_due_ms, __ATOMIC_RELAXED) != 0))
        usi_purge_poll_due();
}

/* pressure.c (rank 11, with the purger): 1 if the kernel reported memory pressure since
 * the previous call (PSI stall time, cgroup events, memory.high nearly reached; design
 * §3), else 0. The first call chooses the source. Called by passes only, without locks. */
int usi_pressure_now(void);
/* The source usi_pressure_now reads, chosen now if not yet: 1 a cgroup v2 directory, 2 a
 * PSI file (*path its name, if path), -1 none (*path NULL). */
int usi_pressure_source(const char **path);
/* Tests only, while no pass reads pressure (USLAB_RETURN=delay): forgets the source and its
 * readings; the next choice looks for /proc/self/cgroup, /proc/self/mountinfo, the cgroup
 * directories it names (or /sys/fs/cgroup/...) and /proc/pressure/memory under root (NULL
 * or "": under "/"). */
void usi_pressure_reset(const char *root);

/* ------------------------------------------------------------------------------------ */
/* objects.c (rank 12): objects between the slabs and the magazines: locking, the       */
/* reclaim retry, constructors and destructors (Bonwick 1994 §3)                          */
/* ------------------------------------------------------------------------------------ */

/* The key of the callbacks' check (docs/security.md); init.c sets it once, first. */
void usi_objects_set_key(uint64_t key);
/* Sets up the slab side of a cache descriptor (name, sizes, debug layout, callbacks, slab
 * geometry, lock); no id and no magazines yet. */
void usi_objects_init_cache(struct uslab_cache *c, const char *name, size_t size, size_t align,
                            uslab_ctor_fn ctor, uslab_dtor_fn dtor, uslab_reclaim_fn reclaim,
                            void *arg, unsigned flags);
/* One object from the slab layer, constructed; NULL + errno on failure. May run the
 * reclaim callback and the constructor: call it with no lock held and nothing half done. */
void *usi_objects_alloc(struct uslab_cache *c);
/* Calls c's reclaim callback (non-NULL; checked like every callback); no lock held. */
void usi_objects_call_reclaim(struct uslab_cache *c);
/* Under pressure, from a pass that may not run user code (inline): asks for c's reclaim
 * callback on its next allocation slow path (usi_objects_reclaim_wanted). */
void usi_objects_reclaim_later(struct uslab_cache *c);
void usi_objects_reclaim_now(struct uslab_cache *c);
/* Called by the allocation slow path, its pair whole and no lock held (where the reclaim
 * callback may run anyway, design §5): runs it once if a pass asked for it. One load. */
static inline void usi_objects_reclaim_wanted(struct uslab_cache *c)
{
    if (USI_UNLIKELY(__atomic_load_n(&c->reclaim_wanted, __ATOMIC_RELAXED)))
        usi_objects_reclaim_now(c);
}
/* n objects, constructed; all or nothing; returns n or 0 (errno set). `reclaim`: whether
 * the reclaim callback may run when slabs run out. Runs the constructor (if any). */
size_t usi_objects_fill(struct uslab_cache *c, size_t n, void **objs, int reclaim);
/* uslab_cache_alloc_bulk's rest: objs[held .. n) filled as by usi_objects_fill (reclaim
 * allowed), the caller's objs[0 .. held) (from its magazines) recorded with them as in
 * passage meanwhile (design §7). Returns n or 0 (errno set; objs[0 .. held) are still the
 * caller's). */
size_t usi_objects_fill_bulk(struct uslab_cache *c, size_t held, size_t n, void **objs);
/* How many malloc slow paths skip a starved cache (see uslab_cache.starved). */
#define USI_STARVED_SKIP 64
/* Whether c's slabs could not grow lately; counts the skip down (a racy hint). */
static inline int usi_objects_starved(struct uslab_cache *c)
{
    uint32_t s = __atomic_load_n(&c->starved, __ATOMIC_RELAXED);
    if (USI_LIKELY(s == 0))
        return 0;
    __atomic_store_n(&c->starved, s - 1, __ATOMIC_RELAXED);
    return 1;
}
/* Destructs n objects and returns them to their slabs. Runs the destructor (if any). */
void usi_objects_unfill(struct uslab_cache *c, size_t n, void *const *objs);
/* usi_objects_unfill, counting in *destructed the objects whose destructor returned, then
 * locked(c, arg) under the same hold of the cache lock that puts them back (the depot's
 * in-flight list). */
void usi_objects_unfill_then(struct uslab_cache *c, size_t n, void *const *objs,
                             uint32_t *destructed, void (*locked)(struct uslab_cache *, void *),
                             void *arg);
/* Whether this thread is inside a constructor, destructor or reclaim callback of c (at a
 * nesting depth of at most 8). */
int usi_objects_in_callback_of(const struct uslab_cache *c);
/* usi_slab_debug_check_live under the cache lock, with the caller's stack captured for the
 * report: for realloc and malloc_usable_size of a block of a debug class (§9). */
int usi_objects_debug_check_live(struct uslab_cache *c, const void *p, const char *fn);
/* Objects back to their slabs with no destructor: a fork child's share of the magazines
 * that other threads of its parent were flushing (their destructors ran there, or not). */
void usi_objects_put_back(struct uslab_cache *c, size_t n, void *const *objs);

/*
 * A thread's objects in passage (design §7, "Objects in passage at a fork"): objects taken
 * from their slabs and not yet handed out while the constructor (or the reclaim callback)
 * runs, or handed back and not yet in their slabs while the destructor runs. Outside both
 * slab and user, a fork child would count them as live for good (no thread of the child
 * holds them): the child puts them back raw. A thread has USI_LIMBO_SLOTS records: a
 * callback may allocate or free objects of other caches (or a signal handler may), which
 * takes the next free one; passages deeper than that keep none. Invariants: cache != NULL
 * iff the record is in use; the objects, all outside their slabs, are `one` where n == 1
 * (the caller's array may be on its stack), else objs[0 .. n). Written by its owner
 * only; set in the same hold of cache->lock as the take, cleared in the same hold as the put, so a
 * fork (which holds every cache lock) sees either both or neither.
 */
struct usi_limbo {
    struct uslab_cache *cache;
    void *const *objs;
    size_t n;
    void *one;
};
#define USI_LIMBO_SLOTS 4
/* Where the calling thread records its passages: USI_LIMBO_SLOTS records in its thread
 * cache (tcache.c sets it when the thread gets one, moves it when that grows), NULL when
 * it has none. */
void usi_objects_set_limbo(struct usi_limbo *slots);
/* In a fork child: puts an orphaned thread's objects in passage back in their slabs. */
void usi_objects_limbo_return(struct usi_limbo *slots);

/* ------------------------------------------------------------------------------------ */
/* depot.c (rank 13): magazines and the per-cache depot                                 */
/* ------------------------------------------------------------------------------------ */

/* A magazine: a stack of constructed objects; objs[0 .. rounds) are valid. */
struct usi_mag {
    struct usi_mag *next;        /* depot stack link */
    struct usi_mag *flight_next; /* the cache's in_flight list, while it is on it */
    uint32_t destructed;         /* in flight: objs[0 .. destructed) went through the destructor */
    uint32_t rounds;
    uint32_t capacity; /* 0 only for usi_mag_empty, the shared sentinel */
    uint32_t flusher;  /* in flight: the listing thread's number (depot.c), which a fork
                        * child's own thread keeps flushing itself */
    void *objs[];      /* capacity slots: magazines of up to 64 and of up to USI_MAG_MAX */
};
extern struct usi_mag usi_mag_empty;

void usi_depot_init(void); /* the internal caches magazines are made of */
/* Sets up the magazine side of a cache descriptor: capacity and growth limit. */
void usi_depot_init_cache(struct uslab_cache *c);
struct usi_mag *usi_mag_new(struct uslab_cache *c); /* empty magazine or NULL */
/* An empty magazine of cap slots (1 <= cap <= USI_MAG_MAX) for c, or NULL. */
struct usi_mag *usi_mag_new_cap(struct uslab_cache *c, uint32_t cap);
void usi_mag_delete(struct usi_mag *m);
/*
 * Depot exchanges, under cache->lock taken inside. None of them runs a callback. The depot
 * keeps every magazine given to it (the working-set reap bounds it), but beyond the
 * headroom a full one of a cache without callbacks is shed: its objects go back to their
 * slabs (design §4, "Shedding").
 */
struct usi_mag *usi_depot_get_full(struct uslab_cache *c, struct usi_mag *give_empty);
/* get_empty: one of the depot's empty magazines if it has at least cap slots (a smaller
 * one is replaced by a new one of cap slots if one can be made), else a new one of cap
 * slots; NULL if the depot has none and none can be made. */
struct usi_mag *usi_depot_get_empty(struct uslab_cache *c, struct usi_mag *give_full, uint32_t cap);
/* put: to the depot; shed first (below) if usi_depot_sheds. */
void usi_depot_put(struct uslab_cache *c, struct usi_mag *m);
/* Whether a full magazine of c is shed rather than kept (design §4, "Shedding"): c has no
 * constructor and no destructor and sheds already, or the idle memory is beyond its
 * headroom (usi_slab_over_headroom), when it starts to and its depot is drained. No lock
 * held. usi_depot_demand: an allocation slow path of c found no full magazine: it stops. */
int usi_depot_sheds(struct uslab_cache *c);
void usi_depot_demand(struct uslab_cache *c);
/* Puts m's objects back into their slabs; m stays the caller's, empty. Only for a cache
 * without a destructor, by a thread that holds its thread cache's lock (an exchange, a
 * flush). No uslab lock of c held. */
void usi_depot_shed(struct uslab_cache *c, struct usi_mag *m);
/* A full magazine its thread could trade for no empty one: counted as being flushed
 * (depot_flushing) and chained onto *over, for usi_depot_dispose, which returns its
 * objects to their slabs and keeps it in the depot, empty. */
void usi_depot_flush_later(struct uslab_cache *c, struct usi_mag *m, struct usi_mag **over);
/* Whether p, a block of c (page-map entry e), is in a full magazine of the depot or back
 * in its slab: part of free()'s double-free check. Takes the cache lock. */
int usi_depot_block_is_free(struct uslab_cache *c, uintptr_t e, const void *p);
/* Destructs a flush_later magazine's objects into their slabs (runs destructors: no lock
 * held) and keeps the empty magazine. Follows m->next: disposes a whole list. */
void usi_depot_dispose(struct uslab_cache *c, struct usi_mag *m);
/* Empties the depot: full magazines flushed to slabs, empty ones freed (runs destructors).
 * With wait_for_flushes, then waits until no flush of this cache's magazines is in flight
 * anywhere (cache destroy: their objects are not live, they are on their way back). */
void usi_depot_drain(struct uslab_cache *c, int wait_for_flushes);
/* Fork child: the objects of the magazines other threads were flushing at the fork go back
 * to their slabs without their destructors (those threads are not in the child), and the
 * magazines to the depot, empty. */
void usi_depot_postfork_child(struct uslab_cache *c);
/* Working-set reaping (Bonwick & Adams §3.6): the magazines the depot did not need since
 * the last call of the same kind (its minimum counts) are flushed and freed (runs
 * destructors). `surplus`: the surplus pass's reap, of full magazines only, on its own
 * watermark. Returns magazines reaped. */
size_t usi_depot_reap_unused(struct uslab_cache *c, int surplus);
/* An inline pass (no user code) over a cache with a destructor: its reap is left to the
 * cache's next allocation slow path, which calls usi_depot_reap_wanted (no lock held). */
void usi_depot_reap_later(struct uslab_cache *c);
void usi_depot_reap_wanted(struct uslab_cache *c);

/* ------------------------------------------------------------------------------------ */
/* tcache.c (rank 14): per-thread magazine pairs                                        */
/* ------------------------------------------------------------------------------------ */

/*
 * A thread's pair of magazines for one cache (Bonwick & Adams §3.2). The loaded magazine is
 * cached as three pointers into its objs[] array, so the fast paths need one load and one
 * compare: objs[0 .. top) hold objects, base = objs, limit = objs + capacity. The loaded
 * magazine's `rounds` field is stale while it is loaded; pair_unload writes it back.
 * A pair with no magazine points at usi_mag_empty (base == top == limit): both fast paths
 * miss on it. A blank pair (all zero, prev == NULL: never used by its thread) misses the
 * same way; its thread's slow path points it at usi_mag_empty first. Invariant: top - base <= limit
 * - base = capacity of the loaded magazine; only the owning thread changes a pair, except under the
 * thread cache's lock (below).
 */
struct usi_magpair {
    void **top;
    void **base;
    void **limit;
    struct usi_mag *prev;
    /* The cache's `lattice` (malloc classes: free()'s start-of-object check, §8), copied
     * when the thread first uses the pair; 0 elsewhere, and in blank pairs: free() then
     * takes the slow path. One cache line per pair. */
    uint64_t lattice;
    uint64_t lattice_bound; /* the same value: two fields, so that free() reads each once
                               as a memory operand (no register load: one instruction less) */
    /* Slow start (design §4): the capacity of the magazines the pair uses now, 0 before
     * its first. Only the owner's slow paths use it. */
    uint32_t mag_level;
    /* usi_free_secret where `lattice` is set, else 0: free()'s key is p ^ free_secret, read
     * from this line, which the fast path loads anyway (no line more than before). */
    uint64_t free_secret;
} __attribute__((aligned(64)));
_Static_assert(sizeof(struct usi_magpair) == 64, "a pair is one cache line");

static inline struct usi_mag *usi_pair_loaded(const struct usi_magpair *mp)
{
    return (struct usi_mag *)(void *)((char *)mp->base - offsetof(struct usi_mag, objs));
}

/* Words of usi_tcache.pair_pages: a bit for every page of the largest thread cache. */
#define USI_TCACHE_PAGE_WORDS ((USI_MAX_IDS * 64 / USI_PAGE_SIZE + 8 + 63) / 64)

/*
 * A thread's cache: pairs[id] belongs to the cache with that id. Pair 0 never holds a
 * magazine: a cache whose pair_offset is 0 (no magazines) and a free whose unit tag is 0
 * both fall to the slow path. The owning thread reads and writes its pairs without a lock
 * (the fast path). `lock` is taken by the owner when it changes its layout (grows) or
 * moves magazines out of a pair, and by other threads that must reach into it (cache
 * destroy, fork): those only touch pairs of a cache that the owner, by contract, is not
 * using. Invariant: npairs > USI_RESERVED_IDS, pairs_bytes = npairs * sizeof(pair).
 */
struct usi_tcache {
    pthread_mutex_t lock;
    struct usi_tcache *reg_next, *reg_prev; /* registry, under the tcache registry lock */
    size_t map_bytes;                       /* 0 for the static sentinel */
    size_t pairs_bytes;                     /* npairs * sizeof(struct usi_magpair) */
    uint32_t npairs;
    /* id of the pair a lockless (nested, signal handler) exchange of its owner is changing,
     * 0: none; a fork child leaves that pair alone (§7) */
    uint32_t exchanging;
    /* Odd while the owner changes a pair's magazines (base, limit, prev, a magazine's
     * rounds), even otherwise: a sequence count that lets another thread's free() read this
     * thread's pairs without a lock (usi_tcache_block_is_free, design §8). Its fast paths
     * move only `top`, and do not touch it. */
    uint32_t exchange_seq;
    /* size -> offset of the malloc class's pair from pairs[0], for sizes up to
     * USI_SMALL_MAX: a copy of usi_tcache_size_offsets, kept here so malloc's lookup needs
     * no other base address, indexed by the size itself (no rounding instruction). All 0
     * in the sentinel (pair 0, empty). */
    uint16_t class_offset[USI_SMALL_MAX + 1];
    /* A bit per page of this mapping (from its start) holding a pair the owner opened: set
     * by the owner's slow path (relaxed), read by statistics, which read other threads'
     * pairs only on those pages and so never make the others resident (blank pairs). */
    uint64_t pair_pages[USI_TCACHE_PAGE_WORDS];
    struct usi_limbo limbo[USI_LIMBO_SLOTS]; /* the owner's objects in passage (objects.c) */
    struct usi_magpair pairs[];
};
_Static_assert((USI_RESERVED_IDS + 1) * sizeof(struct usi_magpair) <= UINT16_MAX,
               "unit tags and class_offset[] hold pair offsets in 16 bits");

/* The calling thread's cache; a static sentinel whose magazines are all empty (capacity 0)
 * until the thread's first slow path. Every fast path therefore needs no NULL check. */
extern __thread struct usi_tcache *usi_tls __attribute__((tls_model("initial-exec")));

/* The template of class_offset[] for new thread caches (filled by usi_tcache_init). */
extern uint16_t usi_tcache_size_offsets[USI_SMALL_MAX + 1];
/* Creates the thread-exit key and the class_offset template from usi_class_small. */
void usi_tcache_init(void);
/* Gives a registered cache its pair (pair_offset) if it has magazines. */
void usi_tcache_init_cache(struct uslab_cache *c);
/* The slow paths of the fast paths below. They run callbacks (constructor, destructor,
 * reclaim) only as their last step, once the pair is consistent. */
void *usi_tcache_alloc_slow(struct uslab_cache *c);
void usi_tcache_free_slow(struct uslab_cache *c, void *p);
/* Takes up to n objects from the calling thread's magazines of c (bulk allocation);
 * returns how many. */
size_t usi_tcache_take_cached(struct uslab_cache *c, size_t n, void **objs);
/* Moves the calling thread's magazines of c to the depot. */
void usi_tcache_flush_own(struct uslab_cache *c);
/* Moves every thread's magazines of c to c's depot (cache destroy). */
void usi_tcache_flush_all(struct uslab_cache *c);
/* free()'s exact double-free check, after the key matched (design §8): whether p, a
 * block of c, is already free: in the calling thread's magazines of c, in c's depot or
 * back in its slab (e: p's page-map entry). Takes the cache lock. */
int usi_tcache_block_is_free(struct uslab_cache *c, uintptr_t e, const void *p);
/* Objects cached in every thread's magazines for cache c (racy, for statistics). */
size_t usi_tcache_cached_objects(const struct uslab_cache *c);
/* The same for a report that must never wait (statistics at exit, design §10): the lock of
 * the list of thread caches is tried for up to ms milliseconds (usi_trylock_for). 0 with
 * the count in *n, or -1: the lock was busy, nothing counted. */
int usi_tcache_try_cached_objects(const struct uslab_cache *c, unsigned ms, size_t *n);
/* Bytes that magazines held by threads may cache (capacity * stride, summed over every
 * magazine in any thread's pair), kept under usi_options.tcache_max: a hard bound whatever
 * the number of threads. Updated on slow paths only. */
extern size_t usi_tcache_bytes;
/* The head of the list of thread caches, for the tool that reads it from outside (live.h's
 * map). */
struct usi_tcache *const *usi_tcache_registry_address(void);
/* The calling thread gets a thread cache if it has none: a thread that only works with
 * large blocks, whose exit must be seen (usi_purge_thread_exit). */
void usi_tcache_join(void);
void usi_tcache_prefork(void);
void usi_tcache_postfork(int child);
/* In the child after fork, once every lock is usable: the magazines of threads that did
 * not survive go back to their depots. */
void usi_tcache_adopt_orphans(void);

static inline void *usi_pair_pop(struct usi_magpair *mp)
{
    void **t = mp->top;
    if (USI_UNLIKELY(t == mp->base))
        return NULL;
    mp->top = --t;
#ifdef USLAB_VALGRIND
    void *p = *t;
    *t = NULL; /* no stale pointer for memcheck's leak scan */
    return p;
#else
    return *t;
#endif
}

static inline int usi_pair_push(struct usi_magpair *mp, void *p)
{
    void **t = mp->top;
    if (USI_UNLIKELY(t == mp->limit))
        return 0;
    *t = p;
    mp->top = t + 1;
    return 1;
}

static inline struct usi_magpair *usi_tcache_pair(struct usi_tcache *tc, uintptr_t offset)
{
    return (struct usi_magpair *)(void *)((char *)tc->pairs + offset);
}

static inline void *usi_tcache_alloc(struct uslab_cache *c)
{
    struct usi_tcache *tc = usi_tls;
    if (USI_LIKELY(c->pair_offset < tc->pairs_bytes)) {
        void *p = usi_pair_pop(usi_tcache_pair(tc, c->pair_offset));
        if (USI_LIKELY(p != NULL))
            return p;
    }
    return usi_tcache_alloc_slow(c);
}

static inline void usi_tcache_free(struct uslab_cache *c, void *p)
{
    struct usi_tcache *tc = usi_tls;
    if (USI_LIKELY(c->pair_offset < tc->pairs_bytes) &&
        USI_LIKELY(usi_pair_push(usi_tcache_pair(tc, c->pair_offset), p)))
        return;
    usi_tcache_free_slow(c, p);
}

/* ------------------------------------------------------------------------------------ */
/* reclaim.c (rank 15): giving memory back: the purge pass, reaping                     */
/* ------------------------------------------------------------------------------------ */

/* One purger pass over every cache: reap unused depot magazines, purge idle empty slabs.
 * Returns whether anything remains to be given back later. */
int usi_reclaim_pass(uint64_t now_ms, uint64_t idle_ms, unsigned how);
#define USI_PURGE_MULT_MAX 16
/* The objects cached in the calling thread's magazines of c (every thread's: every_thread,
 * uslab_cache_destroy, which also waits for flushes in flight) and in its depot back to
 * their slabs, destructed; again while the destructors freed objects of c into them. */
void usi_reclaim_return(struct uslab_cache *c, int every_thread);
/* uslab_cache_reap: usi_reclaim_return of this thread's magazines, then every empty slab to
 * the system; returns the bytes released. */
size_t usi_reclaim_cache(struct uslab_cache *c);
/* uslab_reap: usi_reclaim_cache of every cache. */
size_t usi_reclaim_all(void);
/* malloc_trim (preload library): usi_reclaim_cache of the malloc classes only (no user
 * cache's destructor or reclaim callback runs); returns the bytes released. */
size_t usi_reclaim_classes(void);

/* ------------------------------------------------------------------------------------ */
/* live.c (rank 16): the live statistics page of a running process (design §10.1)     */
/* ------------------------------------------------------------------------------------ */

struct usi_live_cache; /* live.h */
/* malloc.c's counts of the system allocator's blocks: blocks, bytes, peak bytes (live.h's
 * struct usi_large_counts). */
extern uint64_t usi_large_counts[3];
/* A snapshot of c as the live page and uslab_stats_print show it: counts under c's lock,
 * the threads' magazines read without stopping them. Returns whether c is in use (has
 * slabs or objects out of them). */
int usi_live_snap_cache(const struct uslab_cache *c, struct usi_live_cache *r);
/* The same for a report that must never wait (USLAB_STATS at exit, design §10): each lock
 * is tried for up to ms milliseconds (usi_trylock_for). *threads: whether to count the
 * threads' magazines; set to 0 when their list's lock was busy (their objects then count
 * as active, and later calls skip the lock). 1 or 0 as above, or -1: c's lock was busy,
 * r holds nothing. */
int usi_live_try_snap_cache(const struct uslab_cache *c, struct usi_live_cache *r, unsigned ms,
                            int *threads);
/* Fills the map of live.h (`uslab_introspect`) once, at initialisation. */
void usi_live_init_map(void);
/* The statistics of every cache on f, as a table or JSON (USLAB_STATS_TABLE or _JSON):
 * uslab_stats_print's text; at exit (at_exit) no lock is waited for, and what could not be
 * locked is named as not scanned; with `disabled`, only that the slabs are disabled.
 * 0, or -1 without memory for the snapshots. */
int usi_live_print_all(FILE *f, int format, int at_exit, int disabled);

/* ------------------------------------------------------------------------------------ */
/* init.c (rank 17): one-time initialisation, cache set-up, fork handlers               */
/* ------------------------------------------------------------------------------------ */

extern int usi_initialized; /* 0: not yet, 1: ready, -1: slabs disabled (init.c) */
/* Initialises everything on first use; returns 0, or -1 when slabs are disabled (no room
 * for the reservation), leaving errno as it was: callers that fail set it. */
int usi_init_slow(void);
static inline int usi_ensure_init(void)
{
    if (USI_LIKELY(__atomic_load_n(&usi_initialized, __ATOMIC_ACQUIRE) > 0))
        return 0;
    return usi_init_slow();
}
/* Sets up and registers a cache descriptor: slab side, magazines, an id in [lo, hi], its
 * pair. Returns 0, or -1 with errno. */
int usi_init_cache(struct uslab_cache *c, const char *name, size_t size, size_t align,
                   uslab_ctor_fn ctor, uslab_dtor_fn dtor, uslab_reclaim_fn reclaim, void *arg,
                   unsigned flags, unsigned lo, unsigned hi);
/* The internal cache user caches' descriptors come from. */
extern struct uslab_cache usi_descriptor_cache;
/* Sets up malloc class `id` (1..usi_nclasses) at its first allocation (design §7): 0 when
 * it is ready, -1 when it cannot be now (a signal handler interrupted its own thread's
 * set-up of a class; the caller falls back to the system allocator). */
int usi_class_setup(unsigned id);
/* The descriptor of malloc class `id`, set up if it was not yet; NULL as above. */
static inline struct uslab_cache *usi_class_cache(unsigned id)
{
    struct uslab_cache *c = &usi_class_caches[id];
    if (USI_LIKELY(__atomic_load_n(&c->class_ready, __ATOMIC_ACQUIRE)) || usi_class_setup(id) == 0)
        return c;
    return NULL;
}

/* ------------------------------------------------------------------------------------ */
/* cache.c (rank 18): the object-cache API                                              */
/* ------------------------------------------------------------------------------------ */

/* Whether c is a cache that uslab_cache_create made and uslab_cache_destroy has not
 * destroyed (a NULL or freed descriptor is never read); the check reports and aborts,
 * naming `call`, where it is not. */
int usi_cache_is_live(const struct uslab_cache *c);
void usi_cache_check_live(const struct uslab_cache *c, const char *call);

/* ------------------------------------------------------------------------------------ */
/* malloc.c (rank 19): the malloc front end (design §8)                                */
/* ------------------------------------------------------------------------------------ */

/* USLAB_PROFILE: writes the request counts to their file now, if this process made them or
 * their maker is gone (a fork child's go to its parent's file); the file of this program
 * image is replaced with all the counts so far, so calling it again counts nothing twice.
 * At exit, and through uslab_profile_write (the profile shim: exits that run no destructor,
 * exec); async-signal-safe, no lock, errno kept. */
void usi_profile_write(void);

#pragma GCC visibility pop

#endif
