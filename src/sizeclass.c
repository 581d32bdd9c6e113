/* SPDX-License-Identifier: MIT */
/*
 * sizeclass.c - the malloc size-class tables (docs/design.md §8). Each class is an object
 * cache with no constructor, as kmalloc is built on kmem_cache: init.c sets the caches up
 * in usi_class_caches[], malloc.c uses them. This file is pure arithmetic on tables.
 *
 * Classes: 16, 32, 48, ..., 128 (steps of 16), then 8 classes per doubling up to the
 * largest slab size (USLAB_MAX_SLAB_SIZE). Above 128 bytes a request wastes less than 1/8
 * of its block. Every class is a multiple of 16, so every block is 16-byte aligned, as
 * glibc guarantees on 64-bit systems (max_align_t; glibc's tst-mallocalign1 checks it);
 * power-of-two classes are aligned to their size (up to a page), which serves aligned allocations.
 * Class ids equal cache ids: 1..usi_nclasses.
 */
#include "internal.h"

uint8_t usi_class_small[USI_SMALL_MAX / 8 + 1];
struct uslab_cache usi_class_caches[USI_NCLASSES + 1];
unsigned usi_nclasses;
static size_t class_size[USI_NCLASSES + 1];

/* Class id of a size in (128, 65536]: 8 small classes, then 8 per doubling. */
static unsigned class_index_above_128(size_t size)
{
    unsigned lg = 63u - (unsigned)__builtin_clzl(size - 1); /* 2^lg < size <= 2^(lg+1) */
    size_t step = (size_t)1 << (lg - 3);
    unsigned j = (unsigned)((size - ((size_t)1 << lg) + step - 1) / step); /* 1..8 */
    return 8 + (lg - 7) * 8 + j;
}

unsigned usi_sizeclass_init(void)
{
    static const size_t small[] = {16, 32, 48, 64, 80, 96, 112, 128};
    unsigned n = 0;
    for (unsigned i = 0; i < sizeof small / sizeof small[0]; i++)
        class_size[++n] = small[i];
    for (size_t base = 128; base < usi_options.max_slab_size; base *= 2)
        for (unsigned j = 1; j <= 8 && n < USI_NCLASSES; j++) {
            size_t s = base + j * (base / 8);
            if (s > usi_options.max_slab_size)
                break;
            class_size[++n] = s;
        }
    usi_nclasses = n;
    /* A setting between two classes: sizes above the largest class go to glibc. */
    usi_options.max_slab_size = class_size[n];
    for (size_t i = 0; i <= USI_SMALL_MAX / 8; i++) {
        size_t size = i * 8;
        unsigned id;
        if (size <= 128)
            id = size <= 16 ? 1 : (unsigned)((size + 15) / 16);
        else
            id = class_index_above_128(size);
        USI_ASSERT(id <= n && class_size[id] >= size);
        usi_class_small[i] = (uint8_t)id;
    }
    return n;
}

void usi_sizeclass_name(unsigned id, char name[32])
{
    /* "malloc-<size>" without snprintf's locale machinery */
    unsigned len = 0;
    for (const char *pre = "malloc-"; *pre;)
        name[len++] = *pre++;
    char digits[24];
    unsigned d = 0;
    for (size_t v = class_size[id]; v; v /= 10)
        digits[d++] = (char)('0' + v % 10);
    while (d)
        name[len++] = digits[--d];
    name[len] = '\0';
}

unsigned usi_sizeclass_of_large(size_t size)
{
    return class_index_above_128(size);
}

size_t usi_sizeclass_size(unsigned id)
{
    return class_size[id];
}

unsigned usi_sizeclass_aligned(size_t size, size_t align)
{
    size_t s = size > align ? size : align;
    if (s > usi_options.max_slab_size)
        return 0;
    size_t p = 16;
    while (p < s)
        p *= 2;
    if (p > usi_options.max_slab_size)
        return 0;
    return p <= USI_SMALL_MAX ? usi_class_small[(p + 7) >> 3] : class_index_above_128(p);
}
