/* SPDX-License-Identifier: MIT */
/*
 * override.c - the C++ operator new/delete family for libuslab-preload (docs/design.md §8),
 * written in C under their Itanium-ABI names so the preload library needs no C++ runtime.
 * The malloc family itself is exported from malloc.c. Also malloc_trim, which gives back
 * uslab's free memory as well as glibc's, and mallopt, which keeps uslab from overriding a
 * threshold the program sets for glibc (design §8).
 *
 * A throwing operator new that cannot allocate calls the installed new_handler and retries,
 * as the standard asks; with no handler it throws std::bad_alloc through libstdc++'s
 * std::__throw_bad_alloc. Both functions are looked up when an allocation fails, not bound
 * when uslab loads: the C++ runtime may arrive later, with a module that a C program
 * dlopens (as Python loads an extension), and then often outside the global scope.
 */
#define _GNU_SOURCE
#include "base.h"
#include "init.h"
#include "os.h"
#include "purge.h"
#include "reclaim.h"
#include "report.h"

#include <dlfcn.h>
#include <errno.h>
#include <malloc.h> /* the M_* parameters of mallopt */

void *usi_malloc_for_new(size_t size);
void *usi_malloc_or_for_new(size_t size, void *(*failed)(size_t));
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
    /* First the loaded objects' symbol tables, lock-free: dlsym waits for the dynamic
     * linker's lock, which a thread in dlopen holds while it runs the new object's
     * constructors; one that waits for a lock this thread holds around a failing `new`
     * deadlocked (session 18's audit; libstdc++'s own operator new takes no such lock).
     * Only libstdc++ defines these names, and every loaded object of the base namespace is
     * in that list, also one a module brought with RTLD_LOCAL. dlsym remains for what the
     * walk cannot read. */
    void *f = NULL;
    if (usi_os_defined_after(&name, &f, 1) == 0)
        return f;
    f = dlsym(RTLD_DEFAULT, name);
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

/* ---- a program's own operators --------------------------------------------------------
 *
 * C++ lets a program replace any of these functions; the standard defines the others'
 * defaults in terms of the ones it replaces (new[] calls new, the nothrow forms call the
 * throwing ones and catch, every delete form calls operator delete(void*), the aligned ones
 * likewise), and libstdc++ implements them so. A program that replaces only the basic pair
 * (a size header, counters, an arena) got its own `new T` but uslab's sized delete, new[],
 * nothrow new: blocks that did not pair up, aborts, and a freed neighbour in a magazine
 * twice (session 18's audit). So the first call of any of uslab's operators looks whether
 * an object before the preload library (the executable, an earlier preload) defines one of
 * them: if so, each of uslab's forwards to the next definition, libstdc++'s, which reaches
 * the program's replacements through the global scope, and uslab's malloc and free under
 * them. Memory only, no lock (usi_os_defined_before/after). */
enum cxx_op {
    OP_NEW,
    OP_NEW_ARRAY,
    OP_NEW_NOTHROW,
    OP_NEW_ARRAY_NOTHROW,
    OP_NEW_AL,
    OP_NEW_ARRAY_AL,
    OP_NEW_AL_NOTHROW,
    OP_NEW_ARRAY_AL_NOTHROW,
    OP_DEL,
    OP_DEL_ARRAY,
    OP_DEL_SIZED,
    OP_DEL_ARRAY_SIZED,
    OP_DEL_NOTHROW,
    OP_DEL_ARRAY_NOTHROW,
    OP_DEL_AL,
    OP_DEL_ARRAY_AL,
    OP_DEL_SIZED_AL,
    OP_DEL_ARRAY_SIZED_AL,
    OP_DEL_AL_NOTHROW,
    OP_DEL_ARRAY_AL_NOTHROW,
    OP_COUNT
};
static const char *const op_names[OP_COUNT] = {"_Znwm",
                                               "_Znam",
                                               "_ZnwmRKSt9nothrow_t",
                                               "_ZnamRKSt9nothrow_t",
                                               "_ZnwmSt11align_val_t",
                                               "_ZnamSt11align_val_t",
                                               "_ZnwmSt11align_val_tRKSt9nothrow_t",
                                               "_ZnamSt11align_val_tRKSt9nothrow_t",
                                               "_ZdlPv",
                                               "_ZdaPv",
                                               "_ZdlPvm",
                                               "_ZdaPvm",
                                               "_ZdlPvRKSt9nothrow_t",
                                               "_ZdaPvRKSt9nothrow_t",
                                               "_ZdlPvSt11align_val_t",
                                               "_ZdaPvSt11align_val_t",
                                               "_ZdlPvmSt11align_val_t",
                                               "_ZdaPvmSt11align_val_t",
                                               "_ZdlPvSt11align_val_tRKSt9nothrow_t",
                                               "_ZdaPvSt11align_val_tRKSt9nothrow_t"};

enum { CXX_UNDECIDED, CXX_OWN, CXX_FORWARD };
static int cxx_mode;             /* CXX_*: set once by the first call (racing callers agree) */
static void *cxx_next[OP_COUNT]; /* libstdc++'s definitions, under CXX_FORWARD */

static USI_NOINLINE int cxx_decide(void)
{
    int replaced = 0;
    for (int i = 0; i < OP_COUNT && !replaced; i++)
        replaced = usi_os_defined_before(op_names[i]) == 1;
    int mode = CXX_OWN;
    if (replaced) {
        void *found[OP_COUNT];
        if (usi_os_defined_after(op_names, found, OP_COUNT) == 0) {
            for (int i = 0; i < OP_COUNT; i++)
                __atomic_store_n(&cxx_next[i], found[i], __ATOMIC_RELAXED);
            mode = CXX_FORWARD;
        } else {
            usi_report_warn("the program defines its own operator new or delete, but the C++ "
                            "runtime's other forms were not found: uslab's serve them");
        }
    }
    __atomic_store_n(&cxx_mode, mode, __ATOMIC_RELEASE);
    return mode;
}

/* The next definition of form `op` when the program replaced some form, else NULL; called
 * only while the mode is not CXX_OWN (FWD below: one compare on the operators' path). */
static USI_NOINLINE void *cxx_forward(enum cxx_op op)
{
    int mode = __atomic_load_n(&cxx_mode, __ATOMIC_ACQUIRE);
    if (mode == CXX_UNDECIDED)
        mode = cxx_decide();
    return mode == CXX_FORWARD ? __atomic_load_n(&cxx_next[op], __ATOMIC_RELAXED) : NULL;
}

typedef void *(*new_fn)(size_t);
typedef void *(*new_nothrow_fn)(size_t, const void *);
typedef void *(*new_al_fn)(size_t, size_t);
typedef void *(*new_al_nothrow_fn)(size_t, size_t, const void *);
typedef void (*del_fn)(void *);
typedef void (*del_sized_fn)(void *, size_t);
typedef void (*del_nothrow_fn)(void *, const void *);
typedef void (*del_sized_al_fn)(void *, size_t, size_t);
typedef void (*del_al_nothrow_fn)(void *, size_t, const void *);

/* libstdc++'s nothrow form, for a nothrow new whose allocation failed with a new_handler
 * installed: it calls the throwing form (uslab's) inside a try block, so a handler that
 * throws std::bad_alloc, as the standard allows, makes it return NULL; C cannot catch, and
 * the exception ended the program in std::terminate (session 18's audit). Found after this
 * library only: the first definition in the global scope is uslab's own. */
static void *nothrow_by_runtime(size_t align, size_t size)
{
    const char *name = align ? op_names[OP_NEW_AL_NOTHROW] : op_names[OP_NEW_NOTHROW];
    void *f = NULL;
    if (usi_os_defined_after(&name, &f, 1) != 0) {
        f = dlsym(RTLD_NEXT, name);
        (void)dlerror();
    }
    static const char nothrow_tag = 0; /* std::nothrow_t is empty: only its address passes */
    if (!f)
        return NULL;
    return align ? ((new_al_nothrow_fn)(uintptr_t)f)(size, align, &nothrow_tag)
                 : ((new_nothrow_fn)(uintptr_t)f)(size, &nothrow_tag);
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
        if (nothrow)
            return nothrow_by_runtime(align, size);
        h();
        void *p = align ? usi_aligned_for_new(align, size) : usi_malloc_for_new(size);
        if (p)
            return p;
    }
}

static void *new_failed_throwing(size_t size)
{
    return new_failed(0, size, 0);
}

static void *new_failed_nothrow(size_t size)
{
    return new_failed(0, size, 1);
}

/* malloc's own path, which calls new_failed's loop where it finds no memory. */
static inline void *new_impl(size_t size, int nothrow)
{
    return usi_malloc_or_for_new(size, nothrow ? new_failed_nothrow : new_failed_throwing);
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

/* Each form: one compare of the mode, then uslab's own path; else a call of its own
 * (cxx_forward and the next definition, or uslab's path if there is none), so that the
 * operators themselves keep no frame and end in a tail call. */
/* A plain read: an int stored once (cxx_decide), and the compare takes it from memory. */
#define OWN_MODE() USI_LIKELY(cxx_mode == CXX_OWN)

static USI_NOINLINE void *new_slow(enum cxx_op op, size_t n, int nothrow)
{
    void *next = cxx_forward(op);
    return next ? ((new_fn)(uintptr_t)next)(n) : new_impl(n, nothrow);
}
static USI_NOINLINE void *new_nothrow_slow(enum cxx_op op, size_t n, const void *t)
{
    void *next = cxx_forward(op);
    return next ? ((new_nothrow_fn)(uintptr_t)next)(n, t) : new_impl(n, 1);
}
static USI_NOINLINE void *new_al_slow(enum cxx_op op, size_t n, size_t a)
{
    void *next = cxx_forward(op);
    return next ? ((new_al_fn)(uintptr_t)next)(n, a) : new_aligned_impl(n, a, 0);
}
static USI_NOINLINE void *new_al_nothrow_slow(enum cxx_op op, size_t n, size_t a, const void *t)
{
    void *next = cxx_forward(op);
    return next ? ((new_al_nothrow_fn)(uintptr_t)next)(n, a, t) : new_aligned_impl(n, a, 1);
}
static USI_NOINLINE void del_slow(enum cxx_op op, void *p)
{
    void *next = cxx_forward(op);
    if (next)
        ((del_fn)(uintptr_t)next)(p);
    else
        usi_free_for_delete(p);
}
/* (p, size) and (p, alignment): the same registers */
static USI_NOINLINE void del_word_slow(enum cxx_op op, void *p, size_t w)
{
    void *next = cxx_forward(op);
    if (next)
        ((del_sized_fn)(uintptr_t)next)(p, w);
    else
        usi_free_for_delete(p);
}
static USI_NOINLINE void del_nothrow_slow(enum cxx_op op, void *p, const void *t)
{
    void *next = cxx_forward(op);
    if (next)
        ((del_nothrow_fn)(uintptr_t)next)(p, t);
    else
        usi_free_for_delete(p);
}
static USI_NOINLINE void del_sized_al_slow(enum cxx_op op, void *p, size_t n, size_t a)
{
    void *next = cxx_forward(op);
    if (next)
        ((del_sized_al_fn)(uintptr_t)next)(p, n, a);
    else
        usi_free_for_delete(p);
}
static USI_NOINLINE void del_al_nothrow_slow(enum cxx_op op, void *p, size_t a, const void *t)
{
    void *next = cxx_forward(op);
    if (next)
        ((del_al_nothrow_fn)(uintptr_t)next)(p, a, t);
    else
        usi_free_for_delete(p);
}

/* operator new / new[] (size_t), nothrow, aligned, aligned nothrow */
EXPORT void *_Znwm(size_t n)
{
    return OWN_MODE() ? new_impl(n, 0) : new_slow(OP_NEW, n, 0);
}
EXPORT void *_Znam(size_t n)
{
    return OWN_MODE() ? new_impl(n, 0) : new_slow(OP_NEW_ARRAY, n, 0);
}
EXPORT void *_ZnwmRKSt9nothrow_t(size_t n, const void *t)
{
    return OWN_MODE() ? new_impl(n, 1) : new_nothrow_slow(OP_NEW_NOTHROW, n, t);
}
EXPORT void *_ZnamRKSt9nothrow_t(size_t n, const void *t)
{
    return OWN_MODE() ? new_impl(n, 1) : new_nothrow_slow(OP_NEW_ARRAY_NOTHROW, n, t);
}
EXPORT void *_ZnwmSt11align_val_t(size_t n, size_t a)
{
    return OWN_MODE() ? new_aligned_impl(n, a, 0) : new_al_slow(OP_NEW_AL, n, a);
}
EXPORT void *_ZnamSt11align_val_t(size_t n, size_t a)
{
    return OWN_MODE() ? new_aligned_impl(n, a, 0) : new_al_slow(OP_NEW_ARRAY_AL, n, a);
}
EXPORT void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const void *t)
{
    return OWN_MODE() ? new_aligned_impl(n, a, 1) : new_al_nothrow_slow(OP_NEW_AL_NOTHROW, n, a, t);
}
EXPORT void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const void *t)
{
    return OWN_MODE() ? new_aligned_impl(n, a, 1)
                      : new_al_nothrow_slow(OP_NEW_ARRAY_AL_NOTHROW, n, a, t);
}

/* operator delete / delete[]: plain, sized, nothrow, aligned, sized aligned, aligned nothrow */
EXPORT void _ZdlPv(void *p)
{
    OWN_MODE() ? usi_free_for_delete(p) : del_slow(OP_DEL, p);
}
EXPORT void _ZdaPv(void *p)
{
    OWN_MODE() ? usi_free_for_delete(p) : del_slow(OP_DEL_ARRAY, p);
}
EXPORT void _ZdlPvm(void *p, size_t n)
{
    OWN_MODE() ? usi_free_for_delete(p) : del_word_slow(OP_DEL_SIZED, p, n);
}
EXPORT void _ZdaPvm(void *p, size_t n)
{
    OWN_MODE() ? usi_free_for_delete(p) : del_word_slow(OP_DEL_ARRAY_SIZED, p, n);
}
EXPORT void _ZdlPvRKSt9nothrow_t(void *p, const void *t)
{
    OWN_MODE() ? usi_free_for_delete(p) : del_nothrow_slow(OP_DEL_NOTHROW, p, t);
}
EXPORT void _ZdaPvRKSt9nothrow_t(void *p, const void *t)
{
    OWN_MODE() ? usi_free_for_delete(p) : del_nothrow_slow(OP_DEL_ARRAY_NOTHROW, p, t);
}
EXPORT void _ZdlPvSt11align_val_t(void *p, size_t a)
{
    OWN_MODE() ? usi_free_for_delete(p) : del_word_slow(OP_DEL_AL, p, a);
}
EXPORT void _ZdaPvSt11align_val_t(void *p, size_t a)
{
    OWN_MODE() ? usi_free_for_delete(p) : del_word_slow(OP_DEL_ARRAY_AL, p, a);
}
EXPORT void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t a)
{
    OWN_MODE() ? usi_free_for_delete(p) : del_sized_al_slow(OP_DEL_SIZED_AL, p, n, a);
}
EXPORT void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t a)
{
    OWN_MODE() ? usi_free_for_delete(p) : del_sized_al_slow(OP_DEL_ARRAY_SIZED_AL, p, n, a);
}
EXPORT void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, const void *t)
{
    OWN_MODE() ? usi_free_for_delete(p) : del_al_nothrow_slow(OP_DEL_AL_NOTHROW, p, a, t);
}
EXPORT void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, const void *t)
{
    OWN_MODE() ? usi_free_for_delete(p) : del_al_nothrow_slow(OP_DEL_ARRAY_AL_NOTHROW, p, a, t);
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
