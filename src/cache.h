/* SPDX-License-Identifier: MIT */
/*
 * cache.h - the object-cache API layer (rank 18, cache.c; docs/design.md §1): what the
 * layers above need of uslab_cache_* (the public functions are in uslab.h).
 */
#ifndef USLAB_CACHE_H
#define USLAB_CACHE_H

#include "descriptor.h"

#pragma GCC visibility push(hidden)

/* Whether c is a cache that uslab_cache_create made and uslab_cache_destroy has not
 * destroyed (a NULL or freed descriptor is never read); the check reports and aborts,
 * naming `call`, where it is not. */
int usi_cache_is_live(const struct uslab_cache *c);
void usi_cache_check_live(const struct uslab_cache *c, const char *call);

#pragma GCC visibility pop

#endif
