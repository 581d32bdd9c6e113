/* SPDX-License-Identifier: MIT */
/*
 * init.c - one-time initialisation and fork handling (docs/design.md §7).
 *
 * Initialisation may be reached from the first malloc of the process, before any
 * constructor of ours ran, from any thread. It only maps memory and fills static tables:
 * it never allocates and never calls a function a preloaded library could interpose on
 * the way to malloc. The fork handlers are registered once, after uslab is usable, because
 * glibc may allocate while registering. The preload library interposes glibc's
 * __register_atfork so that its handlers are the first registered, whoever registers first.
 *
 * This file sits above the thread cache and below the public APIs (cache.c, malloc.c):
 * it assembles the layers below, sets up every cache descriptor (usi_init_cache) and holds
 * the fork handlers, which take every lock in the order of design §6.
 */
#include "init.h"
#include "base.h"
#include "debug.h"
#include "depot.h"
#include "descriptor.h"
#include "live.h"
#include "objects.h"
#include "options.h"
#include "os.h"
#include "pages.h"
#include "purge.h"
#include "reclaim.h"
#include "registry.h"
#include "report.h"
#include "settings.h"
#include "sizeclass.h"
#include "slab.h"
#include "tcache.h"
#include "uslab.h"

#include <errno.h>
#include <string.h>

/* 0: not yet; 1: ready; -1: stepped aside (no room for slabs): every call goes to the
 * system allocator without a lock, errno untouched. Written under init_lock, once. */
int usi_initialized;
static usi_mutex init_lock = USI_MUTEX_INIT;

struct uslab_cache usi_descriptor_cache;

int usi_init_cache(struct uslab_cache *c, const char *name, size_t size, size_t align,
                   uslab_ctor_fn ctor, uslab_dtor_fn dtor, uslab_reclaim_fn reclaim, void *arg,
                   unsigned flags, unsigned lo, unsigned hi)
{
    usi_objects_init_cache(c, name, size, align, ctor, dtor, reclaim, arg, flags);
    usi_depot_init_cache(c);
    if (usi_registry_add(c, lo, hi) != 0)
        return -1;
    usi_tcache_init_cache(c);
    return 0;
}

/* Set when this thread is in usi_class_setup: a signal handler that interrupted it there
 * must not wait for init_lock, which its own thread may hold. */
static __thread int tls_class_setup __attribute__((tls_model("initial-exec")));

/* The malloc classes own ids 1..n; each is set up at its first allocation, not here: a
 * process uses a few of them, and each set-up costs about 700 instructions and touches its
 * descriptor (design §7, "Start-up cost"). The descriptor is an object of the descriptor
 * cache, published in usi_class_caches[id] once it is whole. Each class's slabs carry its
 * pair offset as their unit tag, which is how free() finds the pair without a lookup
 * (design §8). */
int usi_class_setup(unsigned id)
{
    USI_ASSERT(id >= 1 && id <= usi_nclasses);
    if (tls_class_setup)
        return -1;
    tls_class_setup = 1;
    usi_lock(&init_lock);
    int ret = 0;
    if (!usi_class_caches[id]) {
        int saved = errno;
        struct uslab_cache *c = usi_objects_alloc(&usi_descriptor_cache);
        if (!c) {          /* no room for a descriptor: the system allocator serves (design §8) */
            errno = saved; /* malloc's fallback keeps errno */
            ret = -1;
            goto out;
        }
        memset(c, 0, sizeof *c);
        size_t s = usi_class_size[id];
        /* A medium block has a span of its own, the power of two at or above its size and
         * aligned to it (its stride): the lattice check holds, and aligned requests use the
         * power-of-two classes (design §8). */
        size_t align = (s & (s - 1)) == 0 ? (s < USI_PAGE_SIZE ? s : USI_PAGE_SIZE) : 16;
        if (s > USI_MEDIUM)
            for (align = USI_MEDIUM; align < s;)
                align *= 2;
        char name[32];
        usi_sizeclass_name(id, name);
        if (usi_init_cache(c, name, s, align, NULL, NULL, NULL, NULL,
                           USI_CACHE_KEEP_ERRNO | USI_CACHE_LATTICE, id, id) != 0)
            usi_report_fatal("size class %u: its cache id is taken", id);
        c->unit_tag = (uint16_t)c->pair_offset;
        if (!c->debug)
            usi_slab_share_spans(c); /* the classes of one span size share their spans */
        USI_ASSERT(c->pair_offset == id * sizeof(struct usi_magpair)); /* malloc.c's pop */
        __atomic_store_n(&usi_class_caches[id], c, __ATOMIC_RELEASE);
    }
out:
    usi_unlock(&init_lock);
    tls_class_setup = 0;
    return ret;
}

/* Lock order (design §6): cache registry, tcache registry, each tcache, each cache by id,
 * pages. Taking them all in that order before fork leaves no lock held mid-update. */
/*
 * A process with a single thread needs no lock taken across fork: nobody else can hold
 * one. Skipping them is what lets such a process fork from a signal handler that
 * interrupted uslab while it held a lock (glibc's tst-mallocfork2, tst-mallocfork; glibc's
 * malloc does the same). Nested forks (a handler forking during fork) are one thread's,
 * so the choice is kept per depth in thread-local bits.
 */
static __thread unsigned fork_depth __attribute__((tls_model("initial-exec")));
static __thread unsigned fork_skipped __attribute__((tls_model("initial-exec")));

static void prefork(void)
{
    unsigned bit = 1u << (fork_depth++ & 31);
    if (usi_os_single_threaded()) {
        fork_skipped |= bit;
        return;
    }
    fork_skipped &= ~bit;
    usi_os_prefork();
    usi_lock(&init_lock); /* no class is half set up in the child */
    usi_debug_prefork();
    usi_registry_prefork();
    usi_tcache_prefork();
    usi_registry_prefork_caches();
    usi_slab_prefork();
    usi_pages_prefork();
}

/* Whether the prefork at this depth took the locks; pops the depth. */
static int fork_took_locks(void)
{
    unsigned bit = 1u << (--fork_depth & 31);
    return !(fork_skipped & bit);
}

static void postfork_parent(void)
{
    if (!fork_took_locks())
        return;
    usi_pages_postfork(0);
    usi_slab_postfork(0);
    usi_registry_postfork(0);
    usi_tcache_postfork(0);
    usi_debug_postfork(0);
    usi_unlock(&init_lock);
    usi_os_postfork_parent();
}

static void depot_postfork_one(struct uslab_cache *c, void *arg)
{
    (void)arg;
    usi_depot_postfork_child(c);
}

static void postfork_child(void)
{
    if (!fork_took_locks())
        return; /* one thread: nothing held, nobody orphaned, no purger thread */
    usi_os_postfork_child();
    usi_mutex_init(&init_lock);
    usi_pages_postfork(1);
    usi_slab_postfork(1);
    usi_registry_postfork(1);
    usi_tcache_postfork(1);
    usi_debug_postfork(1);
    usi_purge_postfork_child();
    usi_slab_postfork_child();
    usi_registry_read_each(depot_postfork_one, NULL);
    usi_tcache_adopt_orphans();
}

/*
 * uslab's fork handlers must be the first in glibc's list: prepare handlers run in reverse
 * order of registration, child and parent handlers in order, so the first registered takes
 * uslab's locks after every other prepare handler ran (which may allocate) and releases
 * them before every other child or parent handler runs (design §7). Registered once, with
 * no uslab lock held (registration may allocate), and with no owner (dso NULL): dlclose
 * and the exit-time __cxa_finalize remove handlers by their owner, and uslab's stay.
 */
static int fork_handlers_registered;
static usi_mutex fork_handlers_lock = USI_MUTEX_INIT;

static void register_fork_handlers(void)
{
    if (__atomic_load_n(&fork_handlers_registered, __ATOMIC_ACQUIRE))
        return;
    /* Not under the lock: a thread in dlopen holds the dynamic linker's lock that dlsym
     * takes, and may come here from a constructor that registers handlers. */
    int err = usi_os_find_atfork();
    usi_lock(&fork_handlers_lock);
    if (!fork_handlers_registered) {
        if (!err)
            err = usi_os_register_atfork(prefork, postfork_parent, postfork_child, NULL);
        if (err)
            usi_report_fatal("cannot register the fork handlers (error %d)", err);
        __atomic_store_n(&fork_handlers_registered, 1, __ATOMIC_RELEASE);
    }
    usi_unlock(&fork_handlers_lock);
}

#ifdef USLAB_PRELOAD
/*
 * glibc's pthread_atfork is a small function of libc_nonshared.a, linked into each program
 * and library that calls it, which calls __register_atfork (exported by libc.so.6) through
 * the PLT with the caller's DSO handle. Defined here, in the preload library, it sees every
 * registration: from the program, from a DT_NEEDED library's constructor that runs before
 * uslab's own constructor and before any malloc, from a library dlopened later. Whatever
 * comes first, uslab initialises (as its first malloc would) and registers its handlers
 * before passing the registration on, so theirs come after uslab's in glibc's list.
 * If uslab stepped aside (no reservation), it holds no lock and needs no handler.
 */
__attribute__((visibility("default"))) int
__register_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void), void *dso);
int __register_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void), void *dso)
{
    if (usi_ensure_init() == 0)
        register_fork_handlers();
    return usi_os_register_atfork(prepare, parent, child, dso);
}
#endif

int usi_init_slow(void)
{
    int state = __atomic_load_n(&usi_initialized, __ATOMIC_ACQUIRE);
    if (state != 0)
        return state > 0 ? 0 : -1; /* stepped aside: no lock, errno untouched */
    int saved = errno;
    usi_lock(&init_lock);
    if ((state = usi_initialized) != 0) {
        usi_unlock(&init_lock);
        return state > 0 ? 0 : -1;
    }
    /* Without a USLAB_ variable nothing is debugged: debug.c's code is not even run (it is
     * laid out with the seldom-run code, design §7). */
    if (usi_options_read()) {
        usi_os_log_setup(usi_options.stats != USI_STATS_OFF ||
                         usi_options.leaks != USI_STATS_OFF); /* before any report */
        usi_debug_read_options();
    }
    /* Notes only when asked for: a guest does not write to its host's stderr. */
    __atomic_store_n(&usi_report_verbose, usi_debug_enabled || usi_os_getenv("USLAB_STATS"),
                     __ATOMIC_RELAXED);
    if (usi_pages_init() != 0) {
        __atomic_store_n(&usi_initialized, -1, __ATOMIC_RELEASE);
        usi_unlock(&init_lock);
        errno = saved;
        usi_report_note("no room for the slab reservation (RLIMIT_AS?); slabs disabled, "
                        "every call goes to the system allocator");
        return -1;
    }
    usi_free_secret = (uintptr_t)usi_os_random64() | 1; /* keys first (docs/security.md) */
    usi_objects_set_key(usi_os_random64());
    usi_sizeclass_init(); /* the classes' sizes; each is set up at its first allocation */
    if (usi_init_cache(&usi_descriptor_cache, "uslab-cache", sizeof(struct uslab_cache), 64, NULL,
                       NULL, NULL, NULL, USLAB_CACHE_NOMAGAZINE | USI_CACHE_INTERNAL,
                       USI_RESERVED_IDS + 1, USI_MAX_IDS - 1) != 0)
        usi_report_fatal("no cache id for the descriptor cache");
    usi_depot_init();
    usi_tcache_init();
    usi_purge_set_pass(usi_reclaim_pass);
    usi_live_init_map();
    __atomic_store_n(&usi_initialized, 1, __ATOMIC_RELEASE);
    usi_unlock(&init_lock);
    register_fork_handlers();
    /* The system allocator sets itself up on its first call (glibc 2.36: a getrandom for
     * its tcache key). Without uslab that is the program's first malloc; so it is here,
     * not the first large block, which may come after the program entered a sandbox that
     * refuses getrandom (design §3). A malloc, not a mallopt that sets glibc up without its
     * heap: glibc's first malloc makes its own cache, and so its heap, with brk, and a program
     * that watches its break after its start would see it move at its first large block
     * (glibc's tst-interpose-nothread failed so). */
    usi_sys_free(usi_sys_malloc(1));
    usi_purge_track_large(usi_options.purge_delay_ms != 0 && usi_sys_may_tune_for_large());
    errno = saved;
    return 0;
}

/* USLAB_STATS=1|json: the statistics of every cache at exit (design §10). Here, and not in
 * stats.c, so that a program linked with libuslab.a has it whatever it calls (the linker
 * takes from the archive only the objects a program refers to; stats.o with its destructor
 * was left out, and the table never printed: session 16's audit). exit() may run in a
 * signal handler that interrupted this thread in malloc or free, holding a cache lock or
 * the registry's: nothing waits for a lock, what could not be locked is named as not
 * scanned. */
static void stats_report(void)
{
    static char buf[8192] USI_COLD_ZEROED;
    FILE *f = usi_os_report_file(buf, sizeof buf); /* stderr, or USLAB_LOG's file */
    usi_live_print_all(f,
                       usi_options.stats == USI_STATS_JSON ? USLAB_STATS_JSON : USLAB_STATS_TABLE,
                       1, usi_initialized < 0);
    usi_os_report_file_close(f);
}

/* After every library's destructor when possible, as the leak report (design §9). */
__attribute__((destructor)) static void stats_at_exit(void)
{
    if (usi_initialized == 0 || usi_options.stats == USI_STATS_OFF) /* read by options.c */
        return;
    if (usi_os_after_destructors(stats_report) != 0)
        stats_report();
}

/* Initialise when the library is loaded, so that the unit tags exist before a pointer from
 * another allocator can reach free (the tags stay valid, all 0, if this fails). */
__attribute__((constructor)) static void usi_init_at_load(void)
{
    usi_ensure_init();
}
