/* SPDX-License-Identifier: MIT */
/*
 * override.c - the C++ operator new/delete family for libuslab-preload (docs/design.md §8),
 * written in C under their Itanium-ABI names so the preload library needs no C++ runtime.
 * The malloc family itself is exported from malloc.c. Also mlockall, which must not lock
 * (nor, without CAP_IPC_LOCK, count) uslab's 4 GiB unit-tag table (design §2), and
 * malloc_trim, which gives back uslab's free memory as well as glibc's, and mallopt, which
 * keeps uslab from overriding a threshold the program sets for glibc (design §8).
 *
 * A throwing operator new that cannot allocate calls the installed new_handler and retries,
 * as the standard asks; with no handler it throws std::bad_alloc through libstdc++'s
 * std::__throw_bad_alloc. Both functions are looked up when an allocation fails, not bound
 * when uslab loads: the C++ runtime may arrive later, with a module that a C program
 * dlopens (as Python loads an extension), and then often outside the global scope.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <malloc.h> /* the M_* parameters of mallopt */

void *usi_malloc_for_new(size_t size);
void usi_free_for_delete(void *p);
void *usi_aligned_for_new(size_t align, size_t size);

typedef void (*new_handler_fn)(void);
typedef new_handler_fn (*get_new_handler_fn)(void);
typedef void (*throw_bad_alloc_fn)(void);

#define STDCXX_SONAME "libstdc++.so.6"

/*
 * The C++ runtime's function `name`, or NULL if there is none: from the global scope, as a
 * link-time reference would bind it (a program linked with libstdc++, a module loaded
 * RTLD_GLOBAL), else from libstdc++ wherever it was loaded (a module loaded RTLD_LOCAL
 * brings it, outside the global scope).
 *
 * Only on the failure path, with no lock of uslab's held (the allocation has returned):
 * dlsym and dlopen take the dynamic linker's lock, which is recursive, so this is safe also
 * in a constructor that dlopen runs, and they may call malloc (an error string), which is
 * uslab's small-size path, never operator new. Nothing is cached: libstdc++ may be loaded
 * after a failure found none, or unloaded with the module that brought it.
 */
static void *cxx_runtime_symbol(const char *name)
{
    void *f = dlsym(RTLD_DEFAULT, name);
    if (!f) {
        void *h = dlopen(STDCXX_SONAME, RTLD_LAZY | RTLD_NOLOAD); /* only if loaded */
        if (h) {
            f = dlsym(h, name);
            dlclose(h); /* drops only this reference: the C++ code calling us holds its own */
        }
    }
    (void)dlerror(); /* leave no error of these lookups for the program's dlerror() */
    return f;
}

/* Throws std::bad_alloc through the C++ runtime; without one (a C program calling the
 * operators), a fatal report: for an alignment that is not a power of two when bad_align is
 * not 0, else for memory. */
static USI_NORETURN void throw_bad_alloc(size_t size, size_t bad_align)
{
    throw_bad_alloc_fn fn =
        (throw_bad_alloc_fn)(uintptr_t)cxx_runtime_symbol("_ZSt17__throw_bad_allocv");
    if (fn)
        fn();
    if (bad_align)
        usi_report_fatal("operator new(%zu, align_val_t(%zu)): the alignment is not a power of two",
                         size, bad_align);
    usi_report_fatal("operator new(%zu): out of memory", size);
}

/* Returns a block or NULL after the new_handler loop; throws if `nothrow` is false. */
static USI_NOINLINE void *new_failed(size_t align, size_t size, int nothrow)
{
    get_new_handler_fn get_handler =
        (get_new_handler_fn)(uintptr_t)cxx_runtime_symbol("_ZSt15get_new_handlerv");
    for (;;) {
        new_handler_fn h = get_handler ? get_handler() : NULL;
        if (!h) {
            if (nothrow)
                return NULL;
            throw_bad_alloc(size, 0);
        }
        h();
        void *p = align ? usi_aligned_for_new(align, size) : usi_malloc_for_new(size);
        if (p)
            return p;
    }
}

static inline void *new_impl(size_t size, int nothrow)
{
    void *p = usi_malloc_for_new(size);
    return USI_LIKELY(p != NULL) ? p : new_failed(0, size, nothrow);
}

/* An alignment that is not a power of two (0 included): libstdc++'s aligned operator new
 * throws std::bad_alloc at once, without the new_handler (its nothrow forms return NULL);
 * uslab used to round it up and return a block. */
static USI_NOINLINE void *new_bad_alignment(size_t align, size_t size, int nothrow)
{
    if (nothrow)
        return NULL;
    throw_bad_alloc(size, align);
}

static inline void *new_aligned_impl(size_t size, size_t align, int nothrow)
{
    if (USI_UNLIKELY(align == 0 || (align & (align - 1)) != 0))
        return new_bad_alignment(align, size, nothrow);
    void *p = usi_aligned_for_new(align, size);
    return USI_LIKELY(p != NULL) ? p : new_failed(align, size, nothrow);
}

/* The operators are declared by <new>, a C++ header; C sees no prototypes for them. */
#pragma GCC diagnostic ignored "-Wmissing-prototypes"
#define EXPORT __attribute__((visibility("default")))

/* operator new / new[] (size_t), nothrow, aligned, aligned nothrow */
EXPORT void *_Znwm(size_t n)
{
    return new_impl(n, 0);
}
EXPORT void *_Znam(size_t n)
{
    return new_impl(n, 0);
}
EXPORT void *_ZnwmRKSt9nothrow_t(size_t n, const void *t)
{
    (void)t;
    return new_impl(n, 1);
}
EXPORT void *_ZnamRKSt9nothrow_t(size_t n, const void *t)
{
    (void)t;
    return new_impl(n, 1);
}
EXPORT void *_ZnwmSt11align_val_t(size_t n, size_t a)
{
    return new_aligned_impl(n, a, 0);
}
EXPORT void *_ZnamSt11align_val_t(size_t n, size_t a)
{
    return new_aligned_impl(n, a, 0);
}
EXPORT void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const void *t)
{
    (void)t;
    return new_aligned_impl(n, a, 1);
}
EXPORT void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const void *t)
{
    (void)t;
    return new_aligned_impl(n, a, 1);
}

/* operator delete / delete[]: plain, sized, nothrow, aligned, sized aligned, aligned nothrow */
EXPORT void _ZdlPv(void *p)
{
    usi_free_for_delete(p);
}
EXPORT void _ZdaPv(void *p)
{
    usi_free_for_delete(p);
}
EXPORT void _ZdlPvm(void *p, size_t n)
{
    (void)n;
    usi_free_for_delete(p);
}
EXPORT void _ZdaPvm(void *p, size_t n)
{
    (void)n;
    usi_free_for_delete(p);
}
EXPORT void _ZdlPvRKSt9nothrow_t(void *p, const void *t)
{
    (void)t;
    usi_free_for_delete(p);
}
EXPORT void _ZdaPvRKSt9nothrow_t(void *p, const void *t)
{
    (void)t;
    usi_free_for_delete(p);
}
EXPORT void _ZdlPvSt11align_val_t(void *p, size_t a)
{
    (void)a;
    usi_free_for_delete(p);
}
EXPORT void _ZdaPvSt11align_val_t(void *p, size_t a)
{
    (void)a;
    usi_free_for_delete(p);
}
EXPORT void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t a)
{
    (void)n, (void)a;
    usi_free_for_delete(p);
}
EXPORT void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t a)
{
    (void)n, (void)a;
    usi_free_for_delete(p);
}
EXPORT void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, const void *t)
{
    (void)a, (void)t;
    usi_free_for_delete(p);
}
EXPORT void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, const void *t)
{
    (void)a, (void)t;
    usi_free_for_delete(p);
}

/* mlockall: the tag table goes first where that is safe (usi_pages_before_mlockall); no
 * new one is mapped while MCL_FUTURE is in force (usi_pages_try_tags). */
__attribute__((visibility("default"))) int mlockall(int flags)
{
    usi_pages_before_mlockall(flags);
    return usi_os_mlockall(flags);
}

/* setrlimit and prlimit (and their 64 names, the same on x86-64): the system call glibc
 * makes, then, when the process's own RLIMIT_AS changed, uslab's address-space budget
 * follows, and the tag table goes where it no longer fits (usi_pages_address_limit_changed,
 * design §2). The limits are taken as glibc's struct rlimit, two 64-bit fields: declared
 * here without <sys/resource.h>, whose prototypes name an enum. */
struct usi_rlimit {
    uint64_t cur, max;
};
#define USI_RLIMIT_AS     9
#define USI_RLIM_INFINITY (~(uint64_t)0)

static int limit_set(int pid, int resource, const struct usi_rlimit *new_limit,
                     struct usi_rlimit *old_limit)
{
    int r = usi_os_prlimit(pid, resource, new_limit, old_limit);
    if (r == 0 && new_limit && resource == USI_RLIMIT_AS &&
        (pid == 0 || pid == (int)usi_os_getpid())) {
        int saved = errno;
        usi_pages_address_limit_changed(
            new_limit->cur == USI_RLIM_INFINITY ? SIZE_MAX : (size_t)new_limit->cur,
            !usi_purge_process_threaded());
        errno = saved;
    }
    return r;
}

EXPORT int setrlimit(int resource, const struct usi_rlimit *rl)
{
    return limit_set(0, resource, rl, NULL);
}
EXPORT int setrlimit64(int resource, const struct usi_rlimit *rl)
{
    return limit_set(0, resource, rl, NULL);
}
EXPORT int prlimit(int pid, int resource, const struct usi_rlimit *new_limit,
                   struct usi_rlimit *old_limit)
{
    return limit_set(pid, resource, new_limit, old_limit);
}
EXPORT int prlimit64(int pid, int resource, const struct usi_rlimit *new_limit,
                     struct usi_rlimit *old_limit)
{
    return limit_set(pid, resource, new_limit, old_limit);
}

/* malloc_trim(pad), as glibc's: gives free memory back to the system and returns 1 if any
 * went back, else 0. Here also the malloc classes' cached blocks: the calling thread's
 * magazines and the depots go back to their slabs and every empty slab is released (no
 * object cache of the program's is touched: its destructors never run here); then glibc's
 * own trim, with pad, for the blocks above the slab range. A program that frees a burst
 * and calls malloc_trim gets its memory back at once, with or without a purger thread. */
__attribute__((visibility("default"))) int malloc_trim(size_t pad)
{
    int released = 0;
    if (__atomic_load_n(&usi_initialized, __ATOMIC_ACQUIRE) > 0)
        released = usi_reclaim_classes() > 0;
    return usi_purge_trim_glibc(pad) || released;
}

/* mallopt(param, value), glibc's, for the blocks above the slab range. uslab raises glibc's
 * mmap and trim thresholds once a program churns large blocks (design §8); a program that
 * sets one of those itself (or its top pad, or the most blocks it mmaps) keeps its own
 * setting: uslab tunes nothing after that call, and one of its tunings in flight on another
 * thread ends before the program's call is made. */
__attribute__((visibility("default"))) int mallopt(int param, int value)
{
    if (param == M_MMAP_THRESHOLD || param == M_TRIM_THRESHOLD || param == M_TOP_PAD ||
        param == M_MMAP_MAX)
        usi_purge_large_user_tunes();
    return usi_sys_mallopt(param, value);
}
