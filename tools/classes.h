/* SPDX-License-Identifier: MIT */
/*
 * classes.h - size-class tables fitted to a profile of request sizes (`uslab profile`,
 * docs/design.md §8, issue 13). Pure functions, no I/O.
 */
#ifndef USLAB_TOOLS_CLASSES_H
#define USLAB_TOOLS_CLASSES_H

#include <stddef.h>
#include <stdint.h>

#include "settings.h"

/* A profile: requests counted by 8-byte granule (granule g holds sizes 8g - 7 .. 8g, 0 the
 * size 0) up to USI_PROFILE_MAX_SIZE, and the requests above it. */
#define PROFILE_GRANULES (USI_PROFILE_MAX_SIZE / 8 + 1)
struct size_profile {
    uint64_t count[PROFILE_GRANULES];
    uint64_t above;
};

/* Adds the text of a file written under USLAB_PROFILE ("uslab-profile 1", then "<size>
 * <count>" and "above <count>" lines) to *p; NULL, or why it is refused. */
const char *profile_parse(const char *text, size_t len, struct size_profile *p);

/* Requests of the profile up to max_size, and the bytes a table of classes would hand out
 * beyond the sizes asked for (each request charged at its granule's upper end). */
uint64_t profile_requests(const struct size_profile *p, size_t max_size);
double profile_waste(const struct size_profile *p, const size_t *sizes, unsigned n);

/*
 * The table of at most max_classes sizes that minimises the bytes handed out beyond the
 * sizes asked for, among the tables usi_classes_check accepts whose largest size is
 * max_size (a power of two or a multiple of 128 from 1024 to 65536): an exact dynamic
 * programme over the allowed sizes (multiples of 16 to 1024, of 128 above), with every
 * power of two kept. Returns the count (sizes[] holds USI_CLASSES_MAX), 0 if max_classes
 * cannot hold the powers of two.
 */
unsigned classes_fit(const struct size_profile *p, size_t max_size, unsigned max_classes,
                     size_t *sizes);

#endif
