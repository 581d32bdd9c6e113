/* SPDX-License-Identifier: MIT */
/*
 * options.c - the USLAB_* settings kept in struct usi_options (docs/design.md §11), read
 * once from the environment at initialisation, without allocating. Names, defaults and
 * ranges come from the table in settings.c; sizes and numbers accept a K, M or G suffix
 * (powers of 1024). USLAB_DEBUG is parsed by debug.c, the others here (USLAB_DEBUG_CONTINUE
 * and USLAB_LEAKS are used by debug.c, USLAB_STATS by stats.c). An invalid value gets one
 * warning, naming the setting, the value, what is accepted and the default kept.
 */
#include "options.h"
#include "base.h"
#include "os.h"
#include "report.h"
#include "settings.h"

#include <string.h>

#include <stdio.h>

_Static_assert(USI_SETTINGS_MAX_SLAB_SIZE_MIN == USI_SMALL_MAX,
               "USLAB_MAX_SLAB_SIZE's minimum is the largest small size");

struct usi_options usi_options = {
    .reserve_bytes = USI_SETTINGS_RESERVE_DEFAULT,
    .max_slab_size = USI_SETTINGS_MAX_SLAB_SIZE_DEFAULT,
    .empty_reserve = USI_SETTINGS_EMPTY_SLABS_DEFAULT,
    .purge_delay_ms = USI_SETTINGS_PURGE_DELAY_DEFAULT,
    .tcache_max = USI_SETTINGS_TCACHE_MAX_DEFAULT,
    .purger = USI_PURGER_INLINE,
    .return_policy = USI_RETURN_DELAY,
};

/* The field each setting read here goes to; NULL for the settings read elsewhere. */
static size_t *const option_field[USI_SETTING_COUNT] = {
    [USI_SETTING_MAX_SLAB_SIZE] = &usi_options.max_slab_size,
    [USI_SETTING_RESERVE] = &usi_options.reserve_bytes,
    [USI_SETTING_EMPTY_SLABS] = &usi_options.empty_reserve,
    [USI_SETTING_PURGE_DELAY] = &usi_options.purge_delay_ms,
    [USI_SETTING_PURGER] = &usi_options.purger,
    [USI_SETTING_RETURN] = &usi_options.return_policy,
    [USI_SETTING_TCACHE_MAX] = &usi_options.tcache_max,
    [USI_SETTING_HUGE_PAGES] = &usi_options.huge_pages,
    [USI_SETTING_PROFILE] = &usi_options.profile,
    [USI_SETTING_STATS] = &usi_options.stats,
    [USI_SETTING_LEAKS] = &usi_options.leaks,
    [USI_SETTING_LEAKS_EXITCODE] = &usi_options.leaks_exitcode,
    [USI_SETTING_DEBUG_CONTINUE] = &usi_options.debug_continue,
};

/* v in bytes as a setting takes it: with the largest of the suffixes K, M, G and T that
 * divides it exactly (67108864: "64M"). */
static void size_text(size_t v, char *buf, size_t len)
{
    static const char suffix[] = "KMGT";
    int k = -1;
    while (k < 3 && v && v % 1024 == 0) {
        v /= 1024;
        k++;
    }
    if (k < 0)
        snprintf(buf, len, "%zu", v);
    else
        snprintf(buf, len, "%zu%c", v, suffix[k]);
}

/* The one warning for an invalid value: the default is kept. value is usi_os_getenv's,
 * inside its "NAME=VALUE" entry. Not where the parent process warned already. */
static void invalid(const struct usi_setting *set, const char *value)
{
    if (usi_os_parent_had(value - strlen(set->name) - 1))
        return;
    char values[160], lo[32], hi[32];
    if (set->kind == USI_SETTING_KIND_SIZE) {
        size_text(set->min, lo, sizeof lo);
        size_text(set->max, hi, sizeof hi);
        snprintf(values, sizeof values, "a size from %s to %s", lo, hi);
    } else if (set->kind == USI_SETTING_KIND_NUMBER)
        snprintf(values, sizeof values, "a whole number from %zu to %zu", set->min, set->max);
    else
        usi_settings_values(set, values, sizeof values);
    usi_report_warn("ignoring %s=%s (expected %s); using the default, %s", set->name, value, values,
                    set->def_text);
}

int usi_options_read(void)
{
    /* One pass over the environment instead of one a setting where none is set. */
    if (!usi_os_env_has_prefix("USLAB_"))
        return 0;
    for (unsigned i = 0; i < USI_SETTING_COUNT; i++) {
        const struct usi_setting *set = &usi_settings_table[i];
        if (!option_field[i])
            continue;
        const char *s = usi_os_getenv(set->name);
        size_t v;
        if (!s)
            continue;
        if (set->kind == USI_SETTING_KIND_PATH) {
            *option_field[i] = *s != '\0'; /* the path itself is read where it is used */
            continue;
        }
        if (set->kind == USI_SETTING_KIND_CHOICE) {
            if (usi_settings_parse_choice(set, s, &v) == 0)
                *option_field[i] = v;
            else
                invalid(set, s);
            continue;
        }
        if (set->kind == USI_SETTING_KIND_STATS) {
            if (usi_settings_parse_stats(s, &v) == 0)
                *option_field[i] = v;
            else
                invalid(set, s);
            continue;
        }
        if (usi_settings_parse_size(s, &v) != 0 || v < set->min || v > set->max) {
            invalid(set, s);
            continue;
        }
        *option_field[i] = v;
    }
    /* Every other USLAB_ name is reported, once at initialisation: a typo, or a setting
     * guessed (USLAB_VERBOSE), would be ignored without a word; one nearly a setting's
     * names it. */
    size_t pos = 0;
    for (const char *e; (e = usi_os_env_next("USLAB_", &pos)) != NULL;) {
        size_t len = 0;
        while (e[len] && e[len] != '=')
            len++;
        int exact;
        const struct usi_setting *near = usi_settings_lookup(e, len, &exact);
        static const char tool_own[] = "USLAB_PRELOAD_LIB"; /* the uslab command's */
        if (exact || usi_os_private_setting(e, len) ||
            (len == sizeof tool_own - 1 && memcmp(e, tool_own, len) == 0) || usi_os_parent_had(e))
            continue;
        if (near)
            usi_report_warn("%.*s is not a setting of uslab (ignored); did you mean %s?", (int)len,
                            e, near->name);
        else
            usi_report_warn("%.*s is not a setting of uslab (ignored; `uslab settings` lists "
                            "them)",
                            (int)len, e);
    }
    return 1;
}
