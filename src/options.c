/* SPDX-License-Identifier: MIT */
/*
 * options.c - the USLAB_* settings (docs/design.md §9), read once from the environment at
 * initialisation, without allocating. Each accepts a number with an optional K, M or G
 * suffix (powers of 1024).
 */
#include "internal.h"

struct usi_options usi_options = {
    .reserve_bytes = (size_t)256 << 30,
    .max_slab_size = 32768,
    .empty_reserve = 1,
    .depot_bytes = (size_t)1 << 20,
    .purge_delay_ms = 1000,
    .tcache_max = (size_t)64 << 20,
};

/* Parses "123", "64K", "1m", "2G"; returns 0 and stores the value, or -1 if malformed. */
static int parse_size(const char *s, size_t *out)
{
    size_t v = 0;
    if (*s < '0' || *s > '9')
        return -1;
    while (*s >= '0' && *s <= '9') {
        size_t d = (size_t)(*s++ - '0');
        if (v > ((size_t)-1 - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    unsigned shift = 0;
    switch (*s) {
    case 'k':
    case 'K':
        shift = 10;
        s++;
        break;
    case 'm':
    case 'M':
        shift = 20;
        s++;
        break;
    case 'g':
    case 'G':
        shift = 30;
        s++;
        break;
    default:
        break;
    }
    if (*s != '\0' || (shift && v > ((size_t)-1 >> shift)))
        return -1;
    *out = v << shift;
    return 0;
}

static void read_size(const char *name, size_t *dst, size_t min, size_t max)
{
    const char *s = usi_os_getenv(name);
    size_t v;
    if (!s)
        return;
    if (parse_size(s, &v) != 0 || v < min || v > max) {
        usi_report_warn("ignoring %s=%s (expected a size from %zu to %zu)", name, s, min, max);
        return;
    }
    *dst = v;
}

void usi_options_read(void)
{
    read_size("USLAB_RESERVE", &usi_options.reserve_bytes, (size_t)1 << 30, (size_t)1 << 46);
    read_size("USLAB_MAX_SLAB_SIZE", &usi_options.max_slab_size, USI_SMALL_MAX, 65536);
    read_size("USLAB_EMPTY_SLABS", &usi_options.empty_reserve, 0, 1024);
    read_size("USLAB_DEPOT_BYTES", &usi_options.depot_bytes, 0, (size_t)1 << 40);
    read_size("USLAB_PURGE_DELAY", &usi_options.purge_delay_ms, 0, (size_t)1 << 30);
    read_size("USLAB_TCACHE_MAX", &usi_options.tcache_max, 0, (size_t)1 << 40);
    read_size("USLAB_MAGAZINE_GROWTH", &usi_options.mag_growth, 0, 1);
}
