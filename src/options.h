/* SPDX-License-Identifier: MIT */
/*
 * options.h - the options layer (rank 4, options.c; docs/design.md §1): the USLAB_*
 * settings, read once at initialisation into usi_options (design §11).
 */
#ifndef USLAB_OPTIONS_H
#define USLAB_OPTIONS_H

#include <stddef.h>

#pragma GCC visibility push(hidden)

struct usi_options {
    size_t reserve_bytes;  /* USLAB_RESERVE: address space reserved for slabs */
    size_t max_slab_size;  /* USLAB_MAX_SLAB_SIZE: largest malloc size served by slabs */
    size_t empty_reserve;  /* USLAB_EMPTY_SLABS: empty slabs a cache keeps unpurged */
    size_t purge_delay_ms; /* USLAB_PURGE_DELAY: idle time before empty slabs are purged */
    size_t purger;         /* USLAB_PURGER: enum usi_purger_mode (settings.h) */
    size_t return_policy;  /* USLAB_RETURN: enum usi_return_policy (settings.h) */
    size_t tcache_max;     /* USLAB_TCACHE_MAX: bound on bytes cached by all threads */
    size_t huge_pages;     /* USLAB_HUGE_PAGES: chunks of huge pages for dense spans (pages.c) */
    size_t profile;        /* USLAB_PROFILE is set: malloc records request sizes (malloc.c) */
    size_t stats;          /* USLAB_STATS: enum usi_stats_format (settings.h; stats.c) */
    size_t leaks;          /* USLAB_LEAKS: enum usi_stats_format (debug.c) */
    size_t leaks_exitcode; /* USLAB_LEAKS_EXITCODE: exit status when leaks are found */
    size_t debug_continue; /* USLAB_DEBUG_CONTINUE: continue after a BUG report (debug.c) */
};
extern struct usi_options usi_options;
int usi_options_read(void); /* 1 if some USLAB_ variable is set */

#pragma GCC visibility pop

#endif
