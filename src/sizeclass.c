/* SPDX-License-Identifier: MIT */
/*
 * sizeclass.c - the malloc size-class tables (docs/design.md §8). Each class is an object
 * cache with no constructor, as kmalloc is built on kmem_cache: init.c sets the caches up
 * and publishes them in usi_class_caches[], malloc.c uses them. This file is pure arithmetic on
 * tables.
 *
 * Classes: by default 16, 32, 48, ..., 128 (steps of 16), then 8 classes per doubling up to
 * 32 KiB (and 4480) and 2 above, up to the largest slab size (USLAB_MAX_SLAB_SIZE;
 * usi_classes_default in settings.c). From 128 bytes to 32 KiB a request wastes less than 1/8 of
 * its block. USLAB_CLASSES names a file with another table (`uslab profile` writes one for a
 * program, issue 13); a file that cannot be read or breaks the rules of usi_classes_check is
 * reported and the default is used. Every class is a multiple of 16, so every block is 16-byte
 * aligned, as glibc guarantees on 64-bit systems (max_align_t; glibc's tst-mallocalign1 checks it);
 * power-of-two classes, which every table has, are aligned to their size (up to a page), which
 * serves aligned allocations. Class ids equal cache ids: 1..usi_nclasses.
 */
#include "sizeclass.h"
#include "base.h"
#include "descriptor.h"
#include "options.h"
#include "os.h"
#include "report.h"
#include "settings.h"

#include <errno.h>
#include <string.h>

uint8_t usi_class_small[USI_SMALL_MAX / 8 + 1];
struct uslab_cache *usi_class_caches[USI_NCLASSES + 1];
unsigned usi_nclasses;
size_t usi_class_size[USI_NCLASSES + 1];
uint8_t usi_class_large[USI_CLASSES_MAX_SIZE / 128 + 1];
_Static_assert(USI_CLASSES_MAX == USI_NCLASSES, "a class table fills the reserved ids");

/* The table of USLAB_CLASSES into sizes[]: its count, or 0 (reported) to use the default. */
static unsigned load_file(const char *path, size_t *sizes)
{
    static char text[16384] USI_COLD_ZEROED; /* once, at initialisation, under the init lock */
    long len = usi_os_read_file(path, text, sizeof text);
    const char *why = NULL;
    char where[64] = "";
    unsigned n = 0;
    if (len < 0)
        why = errno == EINVAL ? "it is not a regular file" : "cannot open or read it";
    else if ((size_t)len == sizeof text)
        why = "it is longer than 16 KiB";
    else
        why = usi_classes_parse(text, (size_t)len, sizes, &n, where, sizeof where);
    if (!why)
        return n;
    /* Once a process tree: not where the parent process, with the same setting, did. */
    if (!usi_os_parent_had(path - sizeof "USLAB_CLASSES"))
        usi_report_warn("USLAB_CLASSES=%s: %s%s%s; using the default classes", path,
                        where[0] ? where : "", where[0] ? ": " : "", why);
    return 0;
}

/* table[i] for i in [from, to]: the smallest class that holds i * step bytes. The classes
 * ascend, so each takes the entries up to its size that no smaller one took: a memset a
 * class (every process does this at start: 12,000 instructions a value at a time). */
static void fill_ids(uint8_t *table, size_t step, size_t from, size_t to)
{
    size_t i = from;
    for (unsigned id = 1; id <= usi_nclasses && i <= to; id++) {
        size_t last = usi_class_size[id] / step < to ? usi_class_size[id] / step : to;
        if (last >= i) {
            memset(table + i, (int)id, last - i + 1);
            i = last + 1;
        }
    }
    USI_ASSERT(i > to); /* the largest class holds the largest size */
}

unsigned usi_sizeclass_init(void)
{
    size_t sizes[USI_CLASSES_MAX];
    const char *path = usi_os_getenv(usi_settings_table[USI_SETTING_CLASSES].name);
    unsigned n = path && *path ? load_file(path, sizes) : 0;
    const char *max = usi_os_getenv(usi_settings_table[USI_SETTING_MAX_SLAB_SIZE].name);
    if (n && max && sizes[n - 1] != usi_options.max_slab_size) /* the file's table wins */
        usi_report_warn("%s=%s ignored: %s=%s sets the classes, the largest %zu bytes",
                        usi_settings_table[USI_SETTING_MAX_SLAB_SIZE].name, max,
                        usi_settings_table[USI_SETTING_CLASSES].name, path, sizes[n - 1]);
    if (n == 0)
        n = usi_classes_default(usi_options.max_slab_size, sizes);
    USI_ASSERT(usi_classes_check(sizes, n) == NULL);
    for (unsigned id = 1; id <= n; id++)
        usi_class_size[id] = sizes[id - 1];
    usi_nclasses = n;
    /* The largest class ends the slab range: larger sizes go to glibc (a setting between
     * two default classes, or a file's own largest). */
    usi_options.max_slab_size = usi_class_size[n];
    fill_ids(usi_class_small, 8, 0, USI_SMALL_MAX / 8);
    fill_ids(usi_class_large, 128, USI_SMALL_MAX / 128 + 1, usi_options.max_slab_size / 128);
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
    for (size_t v = usi_class_size[id]; v; v /= 10)
        digits[d++] = (char)('0' + v % 10);
    while (d)
        name[len++] = digits[--d];
    name[len] = '\0';
}

unsigned usi_sizeclass_aligned(size_t size, size_t align)
{
    size_t s = size > align ? size : align;
    /* Power-of-two classes are aligned to their size up to a page, medium ones to their
     * size: above a page, a medium one. */
    if (align > USI_PAGE_SIZE && s <= USI_MEDIUM)
        s = USI_MEDIUM + 1;
    if (s > usi_options.max_slab_size)
        return 0;
    size_t p = 16;
    while (p < s)
        p *= 2;
    if (p > usi_options.max_slab_size)
        return 0;
    return p <= USI_SMALL_MAX ? usi_class_small[(p + 7) >> 3] : usi_class_large[p >> 7];
}
