/* SPDX-License-Identifier: MIT */
/*
 * init.c - one-time initialisation and fork handling (docs/design.md §7).
 *
 * Initialisation may be reached from the first malloc of the process, before any
 * constructor of ours ran, from any thread. It only maps memory and fills static tables:
 * it never allocates and never calls a function a preloaded library could interpose on
 * the way to malloc. pthread_atfork is registered once, after uslab is usable, because
 * glibc may allocate while registering.
 */
#include "internal.h"

#include <errno.h>

int usi_initialized;
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static int init_failed;

void usi_depot_init(void);
void usi_cache_internal_init(void);
void usi_tcache_adopt_orphans(void);

/* Lock order (design §6): cache table, tcache registry, each tcache, each cache by id,
 * pages. Taking them all in that order before fork leaves no lock held mid-update. */
static void prefork(void)
{
    usi_caches_prefork_table();
    usi_tcache_prefork();
    usi_caches_prefork();
    usi_pages_prefork();
}

static void postfork_parent(void)
{
    usi_pages_postfork_parent();
    usi_caches_postfork(0);
    usi_tcache_postfork(0);
}

static void postfork_child(void)
{
    usi_pages_postfork_child();
    usi_caches_postfork(1);
    usi_tcache_postfork(1);
    usi_purge_postfork_child();
    usi_tcache_adopt_orphans();
}

int usi_init_slow(void)
{
    pthread_mutex_lock(&init_lock);
    if (usi_initialized || init_failed) {
        pthread_mutex_unlock(&init_lock);
        if (init_failed) {
            errno = ENOMEM;
            return -1;
        }
        return 0;
    }
    usi_options_read();
    usi_debug_read_options();
    if (usi_pages_init() != 0) {
        init_failed = 1;
        pthread_mutex_unlock(&init_lock);
        usi_report_warn("cannot reserve address space; slabs disabled");
        errno = ENOMEM;
        return -1;
    }
    usi_sizeclass_init(); /* malloc classes take the first ids */
    usi_cache_internal_init();
    usi_depot_init();
    usi_tcache_init();
    __atomic_store_n(&usi_initialized, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&init_lock);
    pthread_atfork(prefork, postfork_parent, postfork_child);
    usi_debug_after_init();
    return 0;
}

/* Initialise when the library is loaded, so that the class tags exist before a pointer from
 * another allocator can reach free (the tags stay valid, all 0, if this fails). */
__attribute__((constructor)) static void usi_init_at_load(void)
{
    usi_ensure_init();
}
