/* SPDX-License-Identifier: MIT */
/*
 * malloc.c - the malloc family on size-class caches (docs/design.md §8).
 *
 * Sizes up to the largest slab class are objects of the class caches, and so are aligned
 * blocks whose size and alignment fit a power-of-two class; larger ones go to the system
 * allocator (the thesis' hybrid design; the os layer's usi_sys_*: in the preload library
 * glibc's own __libc_* entry points, looked up in libc.so.6 itself, no dlsym). free,
 * realloc and malloc_usable_size tell the two apart with the page map. Semantics follow
 * glibc where the C standard leaves room: malloc(0) returns a unique pointer, realloc(p, 0)
 * frees p and returns NULL, errno is set on every failure.
 *
 * Built twice: into libuslab (uslab_* names only) and, with USLAB_PRELOAD, into
 * libuslab-preload, where the standard names are aliases of the same functions.
 */
#define _GNU_SOURCE
#include "base.h"
#include "debug.h"
#include "descriptor.h"
#include "init.h"
#include "live.h"
#include "objects.h"
#include "options.h"
#include "os.h"
#include "pages.h"
#include "purge.h"
#include "registry.h"
#include "report.h"
#include "settings.h"
#include "sizeclass.h"
#include "slab.h"
#include "tcache.h"
#include "uslab.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static inline int is_class_id(uintptr_t id)
{
    return id - 1 < USI_NCLASSES; /* ids 1..USI_NCLASSES belong to malloc classes */
}

/* USLAB_DEBUG's report of a bad call: its text first, then the report with stacks (§9).
 * A function of its own, so that no report's frame without USLAB_DEBUG holds the text. */
static USI_COLD USI_NORETURN void debug_bug(const char *cache, const char *fmt, ...)
{
    char what[200];
    va_list ap;
    va_start(ap, fmt);
    usi_report_vformat(what, sizeof what, fmt, ap);
    va_end(ap);
    usi_debug_bug(cache, what);
}

/* Reports p when it is neither a live uslab block nor plausibly glibc's. */
static USI_COLD void check_other(const void *p, uintptr_t e, const char *fn)
{
    int in_range = usi_pages_in_range(p);
    if (usi_debug_enabled && (e || ((uintptr_t)p & 15) || in_range)) {
        if (e)
            debug_bug("malloc", "Invalid pointer: %s(%p): object of cache %s", fn, p,
                      usi_caches[e & USI_ID_MASK] ? usi_caches[e & USI_ID_MASK]->name : "?");
        debug_bug("malloc", "Invalid pointer: %s(%p): %s", fn, p,
                  in_range ? "inside uslab's range, but not in a live slab (a block freed "
                             "before its slab went back to the system, or never allocated)"
                           : "not allocated by uslab");
    }
    if (e) {
        struct uslab_cache *c = usi_caches[e & USI_ID_MASK];
        usi_report_fatal("%s(%p): the object belongs to cache %s; free it with uslab_cache_free",
                         fn, p, c ? c->name : "(destroyed)");
    }
    if (in_range)
        usi_report_fatal("%s(%p): invalid pointer (inside uslab's range, but not in a live slab)",
                         fn, p);
    if ((uintptr_t)p & 15)
        usi_report_fatal("%s(%p): invalid pointer (not from uslab, and misaligned for glibc)", fn,
                         p);
}

/* ---- blocks of the system allocator while debugging (issue 16) ------------------------- */

/* With debugging or leak reports on (after a successful initialisation), every block taken
 * from the system allocator is recorded by debug.c with its allocation stack: leak reports
 * list it, and free, realloc and malloc_usable_size tell it from a pointer nobody handed
 * out. With debugging off this is one predictable branch on slow paths only. */
static inline int tracking_large(void)
{
    return USI_UNLIKELY(usi_debug_enabled) && usi_initialized > 0;
}

/* The system allocator's blocks handed out and freed here (usi_large_counts, live.c):
 * `blocks` more of them (-1, 0 for a block resized, 1) and `bytes` more of their usable
 * sizes. A block glibc handed out before uslab started may be freed here uncounted:
 * readers clamp. */
static void large_account(int blocks, uint64_t bytes)
{
    if (blocks)
        __atomic_add_fetch(&usi_large_counts[0], (uint64_t)(int64_t)blocks, __ATOMIC_RELAXED);
    uint64_t now = __atomic_add_fetch(&usi_large_counts[1], bytes, __ATOMIC_RELAXED);
    uint64_t peak = __atomic_load_n(&usi_large_counts[2], __ATOMIC_RELAXED);
    while ((int64_t)bytes > 0 && now < ((uint64_t)1 << 62) && now > peak &&
           !__atomic_compare_exchange_n(&usi_large_counts[2], &peak, now, 1, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
        ;
}

static void large_count(void *p, int sign)
{
    uint64_t n = usi_sys_usable_size(p);
    large_account(sign, sign > 0 ? n : -n);
}

static void *sys_tracked(void *p, size_t size)
{
    if (p)
        large_count(p, 1);
    if (tracking_large() && p)
        usi_debug_large_alloc(p, size);
    return p;
}

/* A pointer outside uslab's slabs given to fn: a live tracked block is fine (its size is
 * returned; with `release` it is now freed); anything else is a BUG report with the
 * caller's stack. */
static size_t check_large(const void *p, const char *fn, int release)
{
    size_t size = 0;
    int r = usi_debug_large_release(p, release, &size);
    if (r == 2)
        return usi_sys_usable_size(p); /* unchecked (a signal handler, or the table missed one) */
    if (r > 0)
        return size;
    char what[200];
    const void *start;
    if (r < 0)
        snprintf(what, sizeof what,
                 "%s: %s(%p) of a block of %zu bytes from the system allocator, already freed",
                 release && strcmp(fn, "free") == 0 ? "Double free" : "Use after free", fn, p,
                 size);
    else if ((start = usi_debug_large_containing(p, &size)) != NULL)
        snprintf(what, sizeof what,
                 "Invalid pointer: %s(%p): %zu bytes into the block of %zu bytes at %p from the "
                 "system allocator",
                 fn, p, (size_t)((const char *)p - (const char *)start), size, start);
    else
        snprintf(what, sizeof what,
                 "Invalid pointer: %s(%p): not allocated by malloc (neither a slab block nor a "
                 "block uslab took from the system allocator)",
                 fn, p);
    usi_debug_bug("malloc", what);
}

#ifdef USLAB_VALGRIND
/* Marks a block allocated for memcheck if it is a slab block (glibc's are tracked by
 * valgrind's own malloc). */
static void vg_handout(void *p)
{
    uintptr_t e = usi_pagemap_lookup(p);
    if (is_class_id(e & USI_ID_MASK))
        USI_VG_HANDOUT(usi_class_caches[e & USI_ID_MASK], p);
}
#define USI_VG_HANDOUT_BLOCK(p) vg_handout(p)
#else
#define USI_VG_HANDOUT_BLOCK(p) ((void)0)
#endif

/* ---- the free() checks (design §8, docs/security.md) ----------------------------------- */

/*
 * free's check, and the two at every handout (docs/security.md §2):
 *  - free: start of a block. A malloc class's objects lie where the low 32 bits of the
 *    address are a multiple of the stride (slab.c lays them out so), and for a 32-bit n,
 *    stride divides n iff n * M mod 2^64 < M with M = ceil(2^64 / stride) (Lemire, Kaser &
 *    Kurz 2019): one multiply and one compare, M from the thread's pair (0 where there is
 *    none, which sends everything else to the slow path). Then free stores the key (the
 *    pair's copy of usi_free_secret) into the block's second word, and reads nothing of the
 *    block: a block freed cold costs a store, not a wait for its line (docs/benchmarks.md).
 *  - handout: every block popped from a magazine must carry the key (free and the slab
 *    layer's takes write it, so a block freed twice has lost it at its second handout, the
 *    first one having cleared it) and must not carry the slab's free mark in its first word
 *    (USI_SLAB_FREE_MARK: a block freed again after it went back to its slab). A block that
 *    fails either goes to `refused`, which reports it or, for a mark that was the program's
 *    data, hands it out after the exact check.
 * Invariant: a block in a magazine of a malloc class holds the key in its second word.
 */
typedef uintptr_t usi_word __attribute__((may_alias));

static inline int on_lattice(const void *p, uint64_t lattice, uint64_t bound)
{
    return (uint64_t)(uint32_t)(uintptr_t)p * lattice < bound;
}

static inline uintptr_t *key_of(void *p)
{
    return (usi_word *)p + 1;
}

/* Whether block p, just popped, may be handed out (above). Its key word is xored with the
 * key: cleared if it held it (one instruction for the compare and the clear); `refused`
 * undoes the xor where it was made, the mark being absent. */
static inline int handout_ok(void *p, uintptr_t key)
{
    usi_word *w = p;
    if (USI_UNLIKELY(w[0] == USI_SLAB_FREE_MARK))
        return 0;
#if defined(__x86_64__) && !USI_TSAN
    int cleared; /* the compilers load, xor and store in three instructions */
    __asm__("xorq %2, %0" : "+m"(w[1]), "=@ccz"(cleared) : "r"(key));
    return cleared;
#else
    return (w[1] ^= key) == 0;
#endif
}

static void *refused(void *p) __attribute__((returns_nonnull));

/* ---- USLAB_PROFILE: the sizes a program asks for (issue 13) ------------------------------ */

/*
 * With USLAB_PROFILE=PATH every malloc takes the slow path (tcache.c leaves the size table
 * empty) and counts its size here, by 8-byte granule up to the largest possible class, the
 * rest in one bucket. The counters are in a shared mapping made at the first request, so a
 * fork child adds to its parent's. The process that made them (the owner) writes them to
 * PATH.<pid>.<image> ("uslab-profile 1", then "<size> <count>" lines, size the granule's
 * upper end, "above" for the rest), which `uslab profile` reads. Counts go to 2^64: no
 * sampling.
 *
 * When: at a normal exit (the destructor below) and whenever uslab_profile_write is called:
 * `uslab profile`'s shim (tools/profile_shim.c) calls it where the process leaves without
 * running destructors (_exit, _Exit, syscall(SYS_exit_group), quick_exit) or replaces its
 * program (the exec family). The
 * counters are not reset by a write: each write replaces the image's file with all the
 * counts so far, so an exec that fails and a later exit write the same file twice and
 * count nothing twice. `image` is a random tag drawn with the mapping: a program that the
 * exec starts makes its own mapping under the same pid, and its file does not replace the
 * one written before the exec. A daemon's child writes the counts when it ends, its parent
 * (the owner, which left by glibc's own _exit) being gone.
 *
 * The write may run in a signal handler (_exit is async-signal-safe) or race another
 * writer of the same process: no uslab allocation, no lock, no stdio; the text is made in
 * fresh pages and goes to a temporary file renamed over the image's file, so every
 * writer leaves a whole file.
 */
#define PROFILE_BUCKETS (USI_PROFILE_MAX_SIZE / 8 + 2)
struct usi_profile {
    int owner;      /* pid of the process that writes the file */
    uint64_t image; /* this program image's tag, in the file's name */
    uint64_t temps; /* temporary files made so far: their names */
    uint64_t count[PROFILE_BUCKETS];
};
static struct usi_profile *profile;

static void profile_record(size_t size)
{
    struct usi_profile *pr = __atomic_load_n(&profile, __ATOMIC_ACQUIRE);
    if (!pr) {
        struct usi_profile *fresh = usi_os_map_shared(sizeof *pr);
        if (!fresh)
            return;
        fresh->owner = usi_os_getpid();
        fresh->image = usi_os_random64();
        if (!__atomic_compare_exchange_n(&profile, &pr, fresh, 0, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE))
            usi_os_unmap(fresh, sizeof *fresh); /* another thread's won: pr is it */
        else
            pr = fresh;
    }
    size_t b = size <= USI_PROFILE_MAX_SIZE ? (size + 7) >> 3 : PROFILE_BUCKETS - 1;
    __atomic_fetch_add(&pr->count[b], 1, __ATOMIC_RELAXED);
}

/* The text of the profile file, a piece at a time (no stdio: signal handlers). */
static char *put_str(char *p, const char *s)
{
    while (*s)
        *p++ = *s++;
    return p;
}

static char *put_dec(char *p, uint64_t v)
{
    char digits[20];
    int n = 0;
    do
        digits[n++] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    while (n)
        *p++ = digits[--n];
    return p;
}

static char *put_hex(char *p, uint64_t v)
{
    for (int shift = 60; shift >= 0; shift -= 4)
        *p++ = "0123456789abcdef"[(v >> shift) & 15];
    return p;
}

/* path, sep, pid, ".", image in hex */
static char *put_name(char *p, const char *path, const char *sep, uint64_t pid, uint64_t image)
{
    p = put_dec(put_str(put_str(p, path), sep), pid);
    return put_hex(put_str(p, "."), image);
}

/* A line is at most "65536 " and 20 digits and a newline; "above" is shorter. */
#define PROFILE_LINE_MAX 28
#define PROFILE_PATH_MAX 4096

/* USLAB_PROFILE: writes the request counts to their file now, if this process made them or
 * their maker is gone (a fork child's go to its parent's file); the file of this program
 * image is replaced with all the counts so far, so calling it again counts nothing twice.
 * At exit, and through uslab_profile_write (the profile shim: exits that run no destructor,
 * exec); async-signal-safe, no lock, errno kept. Used in this file only; declared here for
 * -Wmissing-prototypes. */
void usi_profile_write(void);
void usi_profile_write(void)
{
    struct usi_profile *pr = __atomic_load_n(&profile, __ATOMIC_ACQUIRE);
    if (!pr || usi_os_quiet())
        return; /* none, or strict seccomp mode (getpid kills) */
    const char *path = usi_os_getenv(usi_settings_table[USI_SETTING_PROFILE].name);
    if (!path || !*path)
        return;
    /* Under a seccomp filter the openat and rename below (and the owner's /proc file) may
     * kill the process: the counts stay as written when the filter came (the profile
     * shim), or unwritten if inherited. */
    if (usi_os_seccomp_mode() > 0)
        return;
    /* A fork child's counts are its owner's to write; once the owner is gone (a daemon's
     * parent, which leaves by glibc's own _exit), whoever is left writes them all. */
    int owner = __atomic_load_n(&pr->owner, __ATOMIC_RELAXED);
    if (owner != usi_os_getpid() && !usi_os_process_gone(owner))
        return;
    int saved = errno;
    size_t plen = strlen(path);
    size_t textcap = (size_t)PROFILE_BUCKETS * PROFILE_LINE_MAX + 64;
    size_t cap = (textcap + 2 * PROFILE_PATH_MAX + 4095) & ~(size_t)4095;
    char *text = plen + 80 <= PROFILE_PATH_MAX ? usi_os_map(cap) : NULL;
    if (!text) {
        usi_report_warn("USLAB_PROFILE=%s: cannot write the profile", path);
        errno = saved;
        return;
    }
    /* PATH.<pid>.<image>, and PATH-tmp.<pid>.<image>.<n> beside it (no "PATH." prefix:
     * `uslab profile` reads only whole files) */
    char *file = text + textcap, *tmp = file + PROFILE_PATH_MAX;
    uint64_t pid = (uint64_t)(unsigned)pr->owner;
    *put_name(file, path, ".", pid, pr->image) = '\0';
    char *p = put_str(put_name(tmp, path, "-tmp.", pid, pr->image), ".");
    *put_dec(p, __atomic_fetch_add(&pr->temps, 1, __ATOMIC_RELAXED)) = '\0';
    p = put_str(text, "uslab-profile 1\n");
    for (size_t b = 0; b + 1 < PROFILE_BUCKETS; b++) {
        uint64_t n = __atomic_load_n(&pr->count[b], __ATOMIC_RELAXED);
        if (n)
            p = put_str(put_dec(put_str(put_dec(p, b * 8), " "), n), "\n");
    }
    uint64_t above = __atomic_load_n(&pr->count[PROFILE_BUCKETS - 1], __ATOMIC_RELAXED);
    p = put_str(put_dec(put_str(p, "above "), above), "\n");
    if (usi_os_write_file(file, tmp, text, (size_t)(p - text)) != 0)
        usi_report_warn("USLAB_PROFILE=%s: cannot write %s", path, file);
    usi_os_unmap(text, cap);
    errno = saved;
}

/* Tests the profile itself: the writer is not among the code every process runs
 * (src/hot.list). */
__attribute__((destructor)) static void profile_at_exit(void)
{
    if (__atomic_load_n(&profile, __ATOMIC_RELAXED))
        usi_profile_write();
}

void uslab_profile_write(void)
{
    usi_profile_write();
}

/* ---- malloc ------------------------------------------------------------------------- */

/* A class cache's block, or NULL when its slabs cannot grow; errno unchanged either way
 * (the class caches are USI_CACHE_KEEP_ERRNO; the caller falls back to the system
 * allocator, which sets it if it fails too). A class
 * whose slabs could not grow lately is skipped for a while (usi_objects_starved): the
 * fallback then costs no lock. The pair first, without the descriptor: a class's pair is
 * at its id's offset (usi_class_setup), and a class not set up yet has a blank pair in
 * every thread, on which the pop misses. */
static inline __attribute__((always_inline)) void *class_alloc(unsigned id, size_t size, int *zero)
{
    struct usi_tcache *tc = usi_tls;
    uintptr_t offset = (uintptr_t)id * sizeof(struct usi_magpair);
    void *p = offset < tc->pairs_bytes ? usi_pair_pop(usi_tcache_pair(tc, offset)) : NULL;
    if (USI_UNLIKELY(p == NULL)) {
        struct uslab_cache *c = usi_class_cache(id); /* set up at its first allocation */
        if (USI_UNLIKELY(!c || usi_objects_starved(c)))
            return NULL;
        /* errno untouched: USI_CACHE_KEEP_ERRNO */
        p = zero ? usi_tcache_alloc_zeroed_slow(c, zero) : usi_tcache_alloc_slow(c);
        if (USI_UNLIKELY(p == NULL))
            return NULL;
        /* A debug class has no free keys (its frees are checked exactly) and no magazines,
         * so its blocks come this way only: P's poison of a new block stays whole (the
         * clear below zeroed its second word, where a list node keeps `prev`; session 18's
         * audit). */
        if (USI_UNLIKELY(c->debug)) {
            USI_VG_HANDOUT(usi_class_caches[id], p);
            usi_debug_asked(c, p, size); /* Z: the class beyond `size` is red zone */
            return p;
        }
    }
    USI_VG_DEFINED(p, 2 * sizeof(uintptr_t)); /* memcheck: a free block is no-access */
    if (USI_UNLIKELY(!handout_ok(p, usi_free_secret)))
        p = refused(p);
    USI_VG_HANDOUT(usi_class_caches[id], p);
    return p;
}

/* A block above the slab range, about to be glibc's (design §8). */
static inline void large_allocated(size_t size)
{
    if (USI_UNLIKELY(usi_purge_large_allocated(size)))
        usi_tcache_join(); /* its exit trims its arena (design §8) */
}

static void *large_malloc(size_t size)
{
    large_allocated(size);
    return sys_tracked(usi_sys_malloc(size), size);
}

/* malloc's slow path, and calloc's: *zero (if not NULL, 0 on entry) is set where the block
 * reads as zero (a slab block never written: usi_tcache_alloc_zeroed_slow). */
static inline __attribute__((always_inline)) void *alloc_slow(size_t size, int *zero)
{
    if (usi_ensure_init() != 0)
        return usi_sys_malloc(size);
    if (USI_UNLIKELY(usi_options.profile))
        profile_record(size);
    if (size > usi_options.max_slab_size)
        return large_malloc(size);
    unsigned id =
        size <= USI_SMALL_MAX ? usi_class_small[(size + 7) >> 3] : usi_sizeclass_of_large(size);
    void *p = class_alloc(id, size, zero);
    /* slabs full: glibc's */
    return USI_LIKELY(p != NULL) ? p : sys_tracked(usi_sys_malloc(size), size);
}

static USI_NOINLINE void *malloc_slow(size_t size)
{
    return alloc_slow(size, NULL);
}

/* malloc_slow for usi_malloc_or: `failed`'s block where it finds none. */
static USI_NOINLINE void *malloc_or_slow(size_t size, void *(*failed)(size_t))
{
    void *p = malloc_slow(size);
    return USI_LIKELY(p != NULL) ? p : failed(size);
}

static inline struct usi_magpair *pair_at(struct usi_tcache *tc, unsigned offset)
{
    return (struct usi_magpair *)(void *)((char *)tc->pairs + offset);
}

/* The block popped from the loaded magazine of mp and checked (handout_ok), or NULL when
 * that magazine is empty: the fast path of malloc and calloc. */
static inline __attribute__((always_inline)) void *pop_checked(struct usi_magpair *mp)
{
#ifdef USLAB_VALGRIND
    void *p = usi_pair_pop(mp);
    if (!p)
        return NULL;
    USI_VG_DEFINED(p, 2 * sizeof(uintptr_t));
    if (USI_UNLIKELY(!handout_ok(p, mp->free_secret)))
        p = refused(p);
    USI_VG_HANDOUT_BLOCK(p);
    return p;
#else
    void **t = mp->top;
    if (USI_UNLIKELY(t == mp->base))
        return NULL;
    mp->top = --t;
    void *p = *t;
    if (USI_LIKELY(handout_ok(p, mp->free_secret)))
        return p;
    return refused(p);
#endif
}

/* The fast path: one table load, the thread pointer, pop the loaded magazine, check the
 * block and clear its key (handout_ok); else the slow path, then `failed` where that finds no
 * memory (if not NULL: usi_malloc_or). Its functions are aligned to a cache line, as free is:
 * where the linker happens to put them otherwise moves their time by about 10% between builds
 * (fastpath_bench, session 10: malloc across two lines after unrelated code grew). */
static inline __attribute__((always_inline)) void *malloc_fast(size_t size, void *(*failed)(size_t))
{
    if (USI_LIKELY(size <= USI_SMALL_MAX)) {
        void *p = pop_checked(pair_at(usi_tls, usi_tcache_size_offsets[size]));
        if (USI_LIKELY(p != NULL))
            return p;
    } else if (size <= USI_CLASSES_MAX_SIZE) {
        void *p = pop_checked(pair_at(usi_tls, usi_tcache_large_offsets[(size + 127) >> 7]));
        if (USI_LIKELY(p != NULL))
            return p;
    }
    return failed ? malloc_or_slow(size, failed) : malloc_slow(size);
}

static __attribute__((aligned(64))) void *usi_malloc(size_t size)
{
    return malloc_fast(size, NULL);
}

#ifdef USLAB_PRELOAD
/* C++'s operator new (override.c): malloc, with `failed` called where it returns NULL (the
 * new_handler's loop, the throw). The operator jumps here, with no frame of its own: 28
 * instructions a `new` of a small block when it called malloc and tested its result, 23 now
 * (tests/fastpath; a C++ program allocates every node and string this way). */
static __attribute__((aligned(64))) void *usi_malloc_or(size_t size, void *(*failed)(size_t))
{
    return malloc_fast(size, failed);
}
#endif

/* ---- free ---------------------------------------------------------------------------- */

/* The reports of free's exact checks. Without USLAB_DEBUG a report is formatted straight
 * into its line (report.c), with no buffer of its own on the stack: a handler on an
 * alternate stack that frees twice gets its `uslab:` line with 576 bytes of stack more than
 * it needs to write a line and abort (glibc's message: 384; session 17, design §12,
 * `preload_report_sigstack`). USLAB_DEBUG's report formats its text first (debug_bug). */
#define BAD_BLOCK_AT "%s(%p): invalid pointer: %zu bytes into the %s block at %p"
#define BAD_BLOCK_IN "%s(%p): invalid pointer: inside a %s slab, not the start of a block"
#define DOUBLE_FREE  "%s(%p): %s (the %s block is already free)"
#define KEY_GONE     "malloc(): double free or write after free: the %s block at %p lost its free key"
#define FREED_IN_SLAB                                                                              \
    "malloc(): double free: the %s block at %p was freed again after it went back to its slab"

/* An interior or stray pointer into a malloc slab: never enters a magazine. */
static USI_COLD USI_NORETURN void bad_block(const struct uslab_cache *c, const void *p,
                                            const void *block, const char *fn)
{
    size_t into = (size_t)((const char *)p - (const char *)block);
    if (usi_debug_enabled) {
        if (block)
            debug_bug(c->name, BAD_BLOCK_AT, fn, p, into, c->name, block);
        debug_bug(c->name, BAD_BLOCK_IN, fn, p, c->name);
    }
    if (block)
        usi_report_fatal(BAD_BLOCK_AT, fn, p, into, c->name, block);
    usi_report_fatal(BAD_BLOCK_IN, fn, p, c->name);
}

/* fn: "free" (a double free) or "realloc" (of a block already freed). */
static USI_COLD USI_NORETURN void double_free(const struct uslab_cache *c, const void *p,
                                              const char *fn)
{
    const char *what = fn[0] == 'f' ? "double free" : "use after free";
    if (usi_debug_enabled)
        debug_bug(c->name, DOUBLE_FREE, fn, p, what, c->name);
    usi_report_fatal(DOUBLE_FREE ". USLAB_DEBUG=FU,%s shows where it was allocated and freed", fn,
                     p, what, c->name, c->name);
}

/* The exact checks of a malloc block p of class c (page-map entry e) given to fn (free or
 * realloc): the start of a block, then, when the key is there, whether it is free already.
 * Debug classes have no magazines: the slab layer checks their frees exactly, and their
 * words belong to red zones and poison. */
static void check_live(struct uslab_cache *c, uintptr_t e, void *p, const char *fn)
{
    const void *block;
    if (c->debug)
        return;
    if (USI_UNLIKELY(usi_slab_index_of(c, e, p, &block) == UINT32_MAX))
        bad_block(c, p, block, fn);
    USI_VG_DEFINED(key_of(p), sizeof(uintptr_t));
    if (USI_UNLIKELY(*key_of(p) == usi_free_secret) && usi_tcache_block_is_free(c, e, p))
        double_free(c, p, fn);
}

/* free's checks that the fast path did not take (check_live), then the key is written. */
static void check_block(struct uslab_cache *c, uintptr_t e, void *p)
{
    check_live(c, e, p, "free");
    if (!c->debug)
        *key_of(p) = usi_free_secret;
}

/* `tag`: the unit tag usi_free read (0: it did not take the block back from memcheck). */
static USI_NOINLINE void free_slow(void *p, unsigned tag)
{
    if (!p) /* first: some programs free NULL often (lua: 400,000 times in `tables.lua`) */
        return;
    uintptr_t e = usi_pagemap_lookup(p);
    if (USI_LIKELY(is_class_id(e & USI_ID_MASK))) {
        /* The fast path missed: a full magazine, the key, or a pointer off the lattice. */
        struct uslab_cache *c = usi_class_caches[e & USI_ID_MASK];
        check_block(c, e, p);
#ifdef USLAB_VALGRIND
        if (tag == 0) /* usi_free took it back only when it had a tag */
            USI_VG_TAKEBACK(p);
#else
        (void)tag;
#endif
        usi_tcache_free(c, p);
        return;
    }
    check_other(p, e, "free");
    if (tracking_large())
        check_large(p, "free", 1);
    usi_purge_large_freeing(p);
    large_count(p, -1);
    usi_sys_free(p);
    usi_purge_large_freed();
}

/* The fast path's check passed (p starts a block of the tag's class) but the loaded
 * magazine of its pair mp is full: the key, then the thread cache's slow path.
 * free_slow's lookup and check_live would only repeat that check (a shedding pair, whose
 * magazine of 4 fills every fourth free, spent 130 instructions a time on them: lua). */
#ifndef USLAB_VALGRIND
static USI_NOINLINE void free_full(void *p, const struct usi_magpair *mp)
{
    *key_of(p) = usi_free_secret;
    usi_tcache_free_slow(usi_class_caches[mp - usi_tls->pairs], p);
}
#endif

/* The fast path: the unit tag of p's 64 KiB unit names its pair (pair 0, which never holds
 * a magazine, for anything that is not a malloc block); check that p starts a block, push
 * it onto the loaded magazine, store the key. Nothing of the block is read: a double free
 * is caught where the block would be handed out again (handout_ok). */
static __attribute__((aligned(64))) void usi_free(void *p)
{
#ifdef USLAB_VALGRIND
    free_slow(p, 0); /* memcheck build: the checks read the block before it is taken back */
#else
    unsigned tag = usi_unit_tag(p);
    struct usi_magpair *mp = pair_at(usi_tls, tag);
    if (USI_LIKELY(on_lattice(p, mp->lattice, mp->lattice_bound))) {
        void **t = mp->top;
        if (USI_LIKELY(t != mp->limit)) {
            /* The key before the push: a signal handler that interrupts this free, or a
             * fork child that adopts the magazine, may pop p (preload_atfork_prepare). */
            *key_of(p) = mp->free_secret;
            __atomic_signal_fence(__ATOMIC_RELEASE);
            *t = p;
            mp->top = t + 1;
            return;
        }
        free_full(p, mp); /* the pair, not the tag: one register less to keep */
        return;
    }
    free_slow(p, tag);
#endif
}

/* A block popped from a magazine of a malloc class that handout_ok refused: reported,
 * unless its first word held the slab's free mark by the program's chance and the exact
 * check finds no other free copy of it (then it is handed out, its key cleared). */
static USI_COLD void *refused(void *p)
{
    uintptr_t e = usi_pagemap_lookup(p);
    struct uslab_cache *c = usi_class_caches[e & USI_ID_MASK];
    usi_word *w = p;
    if (w[0] != USI_SLAB_FREE_MARK)
        w[1] ^= usi_free_secret; /* handout_ok's xor undone */
    if (w[1] != usi_free_secret) {
        if (usi_debug_enabled)
            debug_bug(c->name, KEY_GONE, c->name, p);
        usi_report_fatal(KEY_GONE ". USLAB_DEBUG=FU,%s shows where it was allocated and freed",
                         c->name, p, c->name);
    }
    const void *block;
    if (usi_slab_index_of(c, e, p, &block) == UINT32_MAX)
        bad_block(c, p, block, "free"); /* a free of a lattice point past the last block */
    if (usi_tcache_block_is_free(c, e, p)) {
        if (usi_debug_enabled)
            debug_bug(c->name, FREED_IN_SLAB, c->name, p);
        usi_report_fatal(FREED_IN_SLAB ". USLAB_DEBUG=FU,%s shows where it was allocated and "
                                       "freed",
                         c->name, p, c->name);
    }
    *key_of(p) = 0;
    return p;
}

/* ---- the rest of the family ------------------------------------------------------------ */

/* Whether p, a block of malloc class c, may be given to realloc or malloc_usable_size (fn):
 * the checks free makes (an interior pointer, a block already free), and for a debug class
 * the slab's exact map (debug classes have no keys: realloc of a freed block kept it in
 * place and handed it out, before session 17's audit). Returns 0 when p is a live block;
 * else reports, and returns 1 only under USLAB_DEBUG_CONTINUE. */
static int check_in_use(struct uslab_cache *c, uintptr_t e, void *p, const char *fn)
{
    if (USI_UNLIKELY(c->debug))
        return usi_objects_debug_check_live(c, p, fn);
#ifdef USLAB_VALGRIND
    /* memcheck build: a live block's second word is undefined to memcheck until the program
     * writes it, so the key is not read here; a freed block is no-access to memcheck, which
     * reports the copy from it or the program's next use of it. Off the lattice,
     * check_live reports before it reads the key. */
    if (USI_UNLIKELY(!on_lattice(p, c->lattice, c->lattice)))
        check_live(c, e, p, fn);
#else
    if (USI_UNLIKELY(!on_lattice(p, c->lattice, c->lattice) || *key_of(p) == usi_free_secret))
        check_live(c, e, p, fn); /* what free's fast path leaves to free_slow */
#endif
    return 0;
}

/* malloc_usable_size but for a live block of a malloc class without debugging, which the
 * fast path below answers: NULL, glibc's blocks, debug classes, and a block the fast
 * path's check did not pass, checked here as free checks it. */
static USI_NOINLINE size_t usable_size_slow(void *p)
{
    if (!p)
        return 0;
    uintptr_t e = usi_pagemap_lookup(p);
    if (is_class_id(e & USI_ID_MASK)) {
        struct uslab_cache *c = usi_class_caches[e & USI_ID_MASK];
        if (check_in_use(c, e, p, "malloc_usable_size"))
            return 0;
        /* Under USLAB_DEBUG=Z the size asked for: the rest of the class is red zone. */
        return USI_UNLIKELY(c->debug) ? usi_debug_usable_size(c, p) : c->size;
    }
    check_other(p, e, "malloc_usable_size");
    if (tracking_large())
        check_large(p, "malloc_usable_size", 0);
    return usi_sys_usable_size(p);
}

/* The fast path: free's check that p starts a block of its unit tag's class (a blank pair,
 * a debug class's and pair 0 have no lattice: the slow path), and the key that a freed
 * block holds absent; the size from the class table, at the pair's offset divided by the
 * pair's size. Redis asks it of every block it allocates and frees (4.2M times in the
 * `redis` row): 36 -> 22 instructions (tests/fastpath). Nothing is written. */
static size_t usi_malloc_usable_size(void *p)
{
#ifndef USLAB_VALGRIND /* memcheck build: the key of a live block is undefined to memcheck */
    unsigned tag = usi_unit_tag(p);
    const struct usi_magpair *mp = pair_at(usi_tls, tag);
    if (USI_LIKELY(on_lattice(p, mp->lattice, mp->lattice_bound) &&
                   *key_of(p) != mp->free_secret)) {
        /* only a malloc class has a lattice (slab.c): the offset names one of them */
        return usi_class_size[tag / sizeof(struct usi_magpair)];
    }
#endif
    return usable_size_slow(p);
}

/* Zeroes a class block of `size` bytes (a multiple of 16) and returns it. Below 64 bytes
 * with 16-byte stores of its own: glibc's AVX-512 memset writes such a size with one masked
 * 64-byte store, and the next handout's read of the block beside it waits for that store to
 * reach the cache (docs/benchmarks.md, session 37). */
static inline void *clear_block(void *p, size_t size)
{
    typedef uint64_t usi_v16 __attribute__((vector_size(16), may_alias));
    usi_v16 *q = p; /* aligned: every class is a multiple of 16 (usi_classes_check) */
    if (size >= 64)
        return memset(p, 0, size);
    q[0] = (usi_v16){0, 0}; /* the classes below 64 bytes: 16, 32 and 48 */
    if (size > 16)
        q[1] = (usi_v16){0, 0};
    if (size > 32)
        q[2] = (usi_v16){0, 0};
    return p;
}

/* calloc of `total` bytes (n * size) but for a block popped from a magazine. */
static USI_NOINLINE void *calloc_slow(size_t n, size_t size, size_t total)
{
    if (total > usi_options.max_slab_size) {
        if (USI_UNLIKELY(usi_options.profile))
            profile_record(total);
        large_allocated(total);
        return sys_tracked(usi_sys_calloc(n, size), total);
    }
    int zero = 0;
    void *p = alloc_slow(total, &zero);
    if (!p)
        return NULL;
    if (zero) { /* a block never written reads as zero already (memcheck: defined) */
        USI_VG_DEFINED(p, usi_class_size[usi_pagemap_lookup(p) & USI_ID_MASK]);
        return p;
    }
    /* The whole block, as glibc's calloc clears its whole chunk: a program may use what
     * malloc_usable_size reports beyond the request (the audit of session 13: a block of a
     * freed one's class kept its old bytes there). */
    uintptr_t id = usi_pagemap_lookup(p) & USI_ID_MASK;
    if (!is_class_id(id))
        return memset(p, 0, usi_sys_usable_size(p));
    if (USI_UNLIKELY(usi_class_caches[id]->debug))
        return memset(p, 0, total); /* Z's red zone after it stays (usi_debug_asked) */
    return clear_block(p, usi_class_size[id]);
}

/* malloc's pop, and the class's whole block cleared: a block from a magazine is of a class
 * without debugging (design §9); the rest goes to calloc_slow (sizes up to 1 KiB are within
 * every USLAB_MAX_SLAB_SIZE). */
static void *usi_calloc(size_t n, size_t size)
{
    size_t total;
    if (USI_UNLIKELY(__builtin_mul_overflow(n, size, &total))) {
        errno = ENOMEM;
        return NULL;
    }
    if (USI_LIKELY(total <= USI_SMALL_MAX)) {
        void *p = pop_checked(pair_at(usi_tls, usi_tcache_size_offsets[total]));
        if (USI_LIKELY(p != NULL))
            return clear_block(p, usi_class_size[usi_class_small[(total + 7) >> 3]]);
    }
    return calloc_slow(n, size, total);
}

/* A slab block that realloc grows past this goes to glibc, whose realloc grows it in place
 * or by mremap from then on, where each class step here would copy the whole block (design
 * §8). Up to 32 KiB, a buffer grown by half from 16 bytes to 64 KiB with a small malloc
 * between steps (`large regrow`) took 1.6x glibc's time, nearly all of it in the copies of
 * its 8 to 32 KiB steps; up to 8 KiB, 0.6x. Only a page split the heap: redis's list nodes
 * (8 KiB, grown 100 bytes at a time) went to glibc, whose memory they left once freed serves
 * no slab, and redis's peak RSS rose from 34.8 to 41.5 MB (`large nodes`, docs/benchmarks.md,
 * "realloc's growth past 8 KiB"). Below it, growth asks for half as much again
 * (grown_size), so that the next step of a growing buffer is in place. */
#define REALLOC_GROW_MAX ((size_t)8 << 10)

static size_t grown_size(size_t size)
{
    size_t most =
        usi_options.max_slab_size < REALLOC_GROW_MAX ? usi_options.max_slab_size : REALLOC_GROW_MAX;
    size_t room = size + size / 2;
    return room <= most ? room : most > size ? most : size;
}

static void *usi_realloc(void *p, size_t size)
{
    if (!p)
        return usi_malloc(size);
    if (size == 0) {
        usi_free(p);
        return NULL;
    }
    uintptr_t e = usi_pagemap_lookup(p);
    uintptr_t id = e & USI_ID_MASK;
    if (!is_class_id(id)) {
        check_other(p, e, "realloc");
        if (USI_UNLIKELY(usi_options.profile))
            profile_record(size); /* counted as the malloc it would be */
        void *q;
        if (!tracking_large()) {
            uint64_t had = usi_sys_usable_size(p);
            q = usi_sys_realloc(p, size); /* a glibc block stays with glibc */
            if (q)                        /* one block still: one count moves, not four */
                large_account(0, usi_sys_usable_size(q) - had);
        } else {
            /* Released before glibc frees it, so that no other thread can be given the
             * address while it is still recorded as live; recorded again if it fails. */
            size_t had = check_large(p, "realloc", 1);
            large_count(p, -1);
            q = usi_sys_realloc(p, size);
            sys_tracked(q ? q : p, q ? size : had);
        }
        if (q) /* glibc may have freed the old block, or the tail of a shrunk one */
            usi_purge_large_resized();
        return q;
    }
    /* Before the block is kept or copied: an interior pointer was handed back as it was,
     * or copied past its block's end (a crash at a slab's end), and a freed block was
     * copied from; free's report came later, naming free (the audit of session 13). */
    struct uslab_cache *c = usi_class_caches[id];
    if (USI_UNLIKELY(check_in_use(c, e, p, "realloc")))
        return usi_malloc(size); /* reported, and continuing: the bad pointer is left alone */
    size_t have = c->size;
    if (size <= have) {
        /* In place unless the block would be less than half used. */
        if (size > have / 2 || have <= 16) {
            if (USI_UNLIKELY(usi_options.profile))
                profile_record(size); /* a request, even if the block stays */
            if (USI_UNLIKELY(c->debug))
                usi_debug_asked(c, p, size); /* Z: the new size's red zone */
            return p;
        }
    }
    /* A block that grows past 8 KiB goes to glibc (REALLOC_GROW_MAX). */
    void *q;
    if (size <= have)
        q = usi_malloc(size);
    else if (size > REALLOC_GROW_MAX)
        q = large_malloc(size);
    else
        q = usi_malloc(grown_size(size));
    if (!q)
        return NULL;
    if (USI_UNLIKELY(usi_debug_enabled)) { /* Z: the room is red zone; U: the leak's size */
        uintptr_t qid = usi_pagemap_lookup(q) & USI_ID_MASK;
        if (is_class_id(qid) && usi_class_caches[qid]->debug)
            usi_debug_asked(usi_class_caches[qid], q, size);
    }
    memcpy(q, p, size < have ? size : have);
    usi_free(p);
    return q;
}

static void *usi_reallocarray(void *p, size_t n, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    return usi_realloc(p, total);
}

/* aligned_impl's slow path: the class of usi_sizeclass_aligned, else glibc's memalign. */
static USI_NOINLINE void *aligned_slow(size_t align, size_t size)
{
    if (usi_ensure_init() == 0) {
        if (USI_UNLIKELY(usi_options.profile))
            profile_record(size > align ? size : align);
        unsigned id = usi_sizeclass_aligned(size, align);
        void *p = id ? class_alloc(id, size, NULL) : NULL;
        if (p)
            return p;
    }
    return sys_tracked(usi_sys_memalign(align, size), size);
}

/* Blocks aligned to a power of two `align`. A power-of-two class's blocks are aligned to
 * its size (the lattice, design §3), so up to 1 KiB the class of the power of two that holds
 * max(size, align) is malloc's fast path, as usi_sizeclass_aligned would choose it:
 * posix_memalign(64, 64) 94 -> 45 instructions, aligned_alloc(32, 64) 101 -> 40 (with
 * memalign's rounding by a bit scan; session 80). */
static void *aligned_impl(size_t align, size_t size)
{
    if (align <= 16)
        return usi_malloc(size < align ? align : size);
    size_t s = size > align ? size : align; /* at least 32 */
    if (s <= USI_SMALL_MAX) {
        size_t pow2 = (size_t)2 << (63 - __builtin_clzll(s - 1));
        void *p = pop_checked(pair_at(usi_tls, usi_tcache_size_offsets[pow2]));
        if (USI_LIKELY(p != NULL))
            return p;
    }
    return aligned_slow(align, size);
}

static int usi_posix_memalign(void **out, size_t align, size_t size)
{
    if (align < sizeof(void *) || (align & (align - 1)) != 0)
        return EINVAL;
    void *p = aligned_impl(align, size);
    if (!p)
        return ENOMEM; /* errno is ENOMEM too, as glibc leaves it (tst-malloc-thread-fail) */
    *out = p;
    return 0;
}

static void *usi_memalign(size_t align, size_t size)
{
    /* glibc: a non-power-of-two alignment is rounded up to the next power of two; above
     * 2^63 there is none (EINVAL); 2^63 itself fails on the size (ENOMEM). */
    if (align > ((size_t)1 << (sizeof(size_t) * 8 - 1))) {
        errno = EINVAL;
        return NULL;
    }
    size_t a = align <= 1 ? 1 : (size_t)2 << (63 - __builtin_clzll(align - 1));
    return aligned_impl(a, size);
}

/* glibc 2.36's aligned_alloc is memalign: an alignment that is 0 or not a power of two is
 * rounded up, not refused (C11 leaves it undefined, C17 lets it fail; design §8). */
static void *usi_aligned_alloc(size_t align, size_t size)
{
    return usi_memalign(align, size);
}

static void *usi_valloc(size_t size)
{
    return aligned_impl(USI_PAGE_SIZE, size);
}

static void *usi_pvalloc(size_t size)
{
    size_t rounded;
    if (__builtin_add_overflow(size, USI_PAGE_SIZE - 1, &rounded)) {
        errno = ENOMEM;
        return NULL;
    }
    rounded &= ~(size_t)(USI_PAGE_SIZE - 1);
    return aligned_impl(USI_PAGE_SIZE, rounded ? rounded : USI_PAGE_SIZE);
}

/* ---- exported names ------------------------------------------------------------------ */

#define USI_ALIAS(name) __attribute__((alias(#name), visibility("default")))

void *uslab_malloc(size_t size) USI_ALIAS(usi_malloc);
void uslab_free(void *p) USI_ALIAS(usi_free);
void *uslab_calloc(size_t n, size_t size) USI_ALIAS(usi_calloc);
void *uslab_realloc(void *p, size_t size) USI_ALIAS(usi_realloc);
void *uslab_reallocarray(void *p, size_t n, size_t size) USI_ALIAS(usi_reallocarray);
void *uslab_aligned_alloc(size_t align, size_t size) USI_ALIAS(usi_aligned_alloc);
int uslab_posix_memalign(void **out, size_t align, size_t size) USI_ALIAS(usi_posix_memalign);
void *uslab_memalign(size_t align, size_t size) USI_ALIAS(usi_memalign);
void *uslab_valloc(size_t size) USI_ALIAS(usi_valloc);
void *uslab_pvalloc(size_t size) USI_ALIAS(usi_pvalloc);
size_t uslab_malloc_usable_size(void *p) USI_ALIAS(usi_malloc_usable_size);

#ifdef USLAB_PRELOAD
void *malloc(size_t size) USI_ALIAS(usi_malloc);
void free(void *p) USI_ALIAS(usi_free);
void *calloc(size_t n, size_t size) USI_ALIAS(usi_calloc);
void *realloc(void *p, size_t size) USI_ALIAS(usi_realloc);
void *reallocarray(void *p, size_t n, size_t size) USI_ALIAS(usi_reallocarray);
void *aligned_alloc(size_t align, size_t size) USI_ALIAS(usi_aligned_alloc);
int posix_memalign(void **out, size_t align, size_t size) USI_ALIAS(usi_posix_memalign);
void *memalign(size_t align, size_t size) USI_ALIAS(usi_memalign);
void *valloc(size_t size) USI_ALIAS(usi_valloc);
void *pvalloc(size_t size) USI_ALIAS(usi_pvalloc);
size_t malloc_usable_size(void *p) USI_ALIAS(usi_malloc_usable_size);
void cfree(void *p) USI_ALIAS(usi_free);

/* Used by the C++ operators in override.c without going through the PLT. */
void *usi_malloc_for_new(size_t size) __attribute__((alias("usi_malloc")));
void *usi_malloc_or_for_new(size_t size, void *(*failed)(size_t))
    __attribute__((alias("usi_malloc_or")));
void usi_free_for_delete(void *p) __attribute__((alias("usi_free")));
void *usi_aligned_for_new(size_t align, size_t size) __attribute__((alias("aligned_impl")));
#endif
