/* SPDX-License-Identifier: MIT */
/*
 * sizeclass.h - the size-class layer (rank 5, sizeclass.c; docs/design.md §1): the malloc
 * size-class tables (design §8) and the storage of the classes' caches.
 */
#ifndef USLAB_SIZECLASS_H
#define USLAB_SIZECLASS_H

#include "base.h"
#include "descriptor.h"

#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

#define USI_NCLASSES USI_RESERVED_IDS /* ids 1..USI_NCLASSES are the malloc classes */

/* (size + 7) >> 3 -> class id, for sizes up to USI_SMALL_MAX. */
extern uint8_t usi_class_small[USI_SMALL_MAX / 8 + 1];
_Static_assert(USI_NCLASSES <= UINT8_MAX, "usi_class_small holds class ids in 8 bits");
extern unsigned usi_nclasses;
/* Computes the classes from usi_options.max_slab_size (which it rounds down to the largest
 * class); returns their number. */
unsigned usi_sizeclass_init(void);
/* (size + 127) >> 7 -> class id, for sizes above USI_SMALL_MAX up to the largest class;
 * classes above 1024 are multiples of 128, so one entry per 128 bytes is exact. */
extern uint8_t usi_class_large[]; /* USI_CLASSES_MAX_SIZE / 128 + 1 entries */
/* Class id for a size above USI_SMALL_MAX and <= max slab size. */
static inline unsigned usi_sizeclass_of_large(size_t size)
{
    return usi_class_large[(size + 127) >> 7];
}
/* id -> the class's size (its stride); 0 above usi_nclasses. */
extern size_t usi_class_size[];
/* Class id whose objects are aligned to `align` and hold `size`, or 0 if none. */
unsigned usi_sizeclass_aligned(size_t size, size_t align);
/* Writes "malloc-<size>" for class id into name[32]. */
void usi_sizeclass_name(unsigned id, char name[32]);
/* The caches of the classes, index = class id: NULL until init.c set the class up at its
 * first allocation (usi_class_setup, which publishes the descriptor with a release store),
 * then its descriptor, an object of the descriptor cache. Descriptors taken as the classes
 * are first used lie side by side: a static array of them (96 of 536 bytes) made a
 * process's start touch 6 pages for 9 classes (docs/benchmarks.md, session 59). */
extern struct uslab_cache *usi_class_caches[USI_NCLASSES + 1];

#pragma GCC visibility pop

#endif
