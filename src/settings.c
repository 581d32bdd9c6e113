/* SPDX-License-Identifier: MIT */
/*
 * settings.c - the table of USLAB_* settings and of debug letters, and their parsers
 * (settings.h). Shared by the library and the `uslab` tool: no other uslab function, no
 * allocation, no stdio.
 */
#include "settings.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static const char *const purger_words[] = {"inline", "thread", NULL};          /* usi_purger_mode */
static const char *const return_words[] = {"delay", "pressure", "both", NULL}; /* policy */

const struct usi_setting usi_settings_table[USI_SETTING_COUNT] = {
    [USI_SETTING_MAX_SLAB_SIZE] = {"USLAB_MAX_SLAB_SIZE", USI_SETTING_KIND_SIZE,
                                   USI_SETTINGS_MAX_SLAB_SIZE_DEFAULT, "256K",
                                   USI_SETTINGS_MAX_SLAB_SIZE_MIN, USI_CLASSES_MAX_SIZE,
                                   "largest malloc size served by slabs; larger sizes go to "
                                   "glibc's allocator. A value between two size classes means "
                                   "the class below it (3000: classes up to 2816); "
                                   "`USLAB_CLASSES`, when set, decides instead (with a warning "
                                   "if the two differ)",
                                   NULL},
    [USI_SETTING_RESERVE] = {"USLAB_RESERVE", USI_SETTING_KIND_SIZE, USI_SETTINGS_RESERVE_DEFAULT,
                             "256G", (size_t)64 << 20, (size_t)1 << 46,
                             "address space for slabs (reserved as it is used, never committed "
                             "ahead; uslab keeps to a quarter of RLIMIT_AS)",
                             NULL},
    [USI_SETTING_EMPTY_SLABS] = {"USLAB_EMPTY_SLABS", USI_SETTING_KIND_NUMBER,
                                 USI_SETTINGS_EMPTY_SLABS_DEFAULT, "1", 0, 1024,
                                 "empty slabs each cache keeps instead of returning them to the "
                                 "OS",
                                 NULL},
    [USI_SETTING_PURGE_DELAY] = {"USLAB_PURGE_DELAY", USI_SETTING_KIND_NUMBER,
                                 USI_SETTINGS_PURGE_DELAY_DEFAULT, "1000", 0, (size_t)1 << 30,
                                 "milliseconds an empty slab stays idle before it goes back to "
                                 "the OS (by the purger thread, or by the next slow path where "
                                 "there is none; 0: at once)",
                                 NULL},
    [USI_SETTING_PURGER] = {"USLAB_PURGER", USI_SETTING_KIND_CHOICE, USI_PURGER_INLINE, "inline", 0,
                            0,
                            "who gives idle memory back: `inline` (the allocator's own slow "
                            "paths and thread exits; no thread) or `thread` (a background "
                            "thread of uslab's that also does it while the program idles, so "
                            "that slabs a burst of frees empties wait for the delay too: a "
                            "burst allocated again within it faults nothing back; "
                            "docs/design.md §3)",
                            purger_words},
    [USI_SETTING_RETURN] = {"USLAB_RETURN", USI_SETTING_KIND_CHOICE, USI_RETURN_DELAY, "delay", 0,
                            0,
                            "when idle memory goes back: `delay` (after `USLAB_PURGE_DELAY`), "
                            "`pressure` (at once when the kernel reports memory pressure, else "
                            "after 10 delays) or `both` (at once under pressure, else after the "
                            "delay); docs/design.md §3",
                            return_words},
    [USI_SETTING_PRESSURE_SOURCE] = {"USLAB_PRESSURE_SOURCE", USI_SETTING_KIND_PATH, 0, "unset", 0,
                                     0,
                                     "where `USLAB_RETURN` reads memory pressure: a cgroup v2 "
                                     "directory (`memory.pressure`, `memory.events`, "
                                     "`memory.high`) or a file in PSI format; unset: the "
                                     "process's cgroup, else `/proc/pressure/memory`",
                                     NULL},
    [USI_SETTING_TCACHE_MAX] = {"USLAB_TCACHE_MAX", USI_SETTING_KIND_SIZE,
                                USI_SETTINGS_TCACHE_MAX_DEFAULT, "64M", 0, (size_t)1 << 40,
                                "bound on the bytes all threads together may cache in their "
                                "magazines",
                                NULL},
    [USI_SETTING_HUGE_PAGES] =
        {"USLAB_HUGE_PAGES", USI_SETTING_KIND_BOOL, 0, "0", 0, 1,
         "1: once 16 MiB of slabs are committed, the slabs of small classes and object caches "
         "come from 2 MiB transparent huge pages: a third to three quarters of the page faults "
         "of a large heap (lua, perl: 10% faster), 1-3 MiB more memory, and a fault may wait "
         "while the kernel finds a huge page (`docs/design.md` §2)",
         NULL},
    [USI_SETTING_CLASSES] = {"USLAB_CLASSES", USI_SETTING_KIND_PATH, 0, "unset", 0, 0,
                             "a file of size classes (`uslab profile` writes one) used instead "
                             "of the default ones; a file it cannot use is reported and the "
                             "default classes are used",
                             NULL},
    [USI_SETTING_PROFILE] = {"USLAB_PROFILE", USI_SETTING_KIND_PATH, 0, "unset", 0, 0,
                             "record the sizes of malloc-family requests into FILE.PID.IMAGE "
                             "at exit (`uslab profile` sets it, and preloads a shim that also "
                             "writes them at _exit, quick_exit and exec; every malloc takes the "
                             "slow path)",
                             NULL},
    [USI_SETTING_DEBUG] = {"USLAB_DEBUG", USI_SETTING_KIND_DEBUG, 0, "unset", 0, 0,
                           "debug checks (the letters of Linux's `slub_debug`) for the caches "
                           "whose names match a glob, e.g. `malloc-64`, `malloc-*`, `conn*` "
                           "(all caches without globs); `1`, `yes`, `on`, `true` or no "
                           "letters: the default letters; unset, `0`, `no`, `off`, `false`: "
                           "none, and caches not selected pay nothing",
                           NULL},
    [USI_SETTING_DEBUG_CONTINUE] = {"USLAB_DEBUG_CONTINUE", USI_SETTING_KIND_BOOL, 0, "0", 0, 1,
                                    "1: continue after a BUG report instead of aborting", NULL},
    [USI_SETTING_LEAKS] = {"USLAB_LEAKS", USI_SETTING_KIND_STATS, 0, "0", 0, 1,
                           "`1`: report the blocks still allocated at exit (slab blocks and "
                           "the system allocator's large ones), grouped by allocation stack, "
                           "largest first, after a summary line; `json`: the same as JSON. "
                           "Either turns on `U` tracking in every cache, whatever "
                           "`USLAB_DEBUG`'s globs select: no magazines, and a stack unwound "
                           "at every allocation (free stacks only where `USLAB_DEBUG` asks "
                           "for `U`; a tight malloc/free loop of 16-byte blocks runs 30 to "
                           "40 times slower)",
                           NULL},
    [USI_SETTING_LEAKS_EXITCODE] = {"USLAB_LEAKS_EXITCODE", USI_SETTING_KIND_NUMBER, 0, "0", 0, 255,
                                    "a process whose leak report (`USLAB_LEAKS`, or `U`) lists "
                                    "blocks exits with this status, as LeakSanitizer's "
                                    "`exitcode` (23), so that a leak fails a CI job; 0: the "
                                    "process's own status",
                                    NULL},
    [USI_SETTING_LOG] = {"USLAB_LOG", USI_SETTING_KIND_PATH, 0, "unset", 0, 0,
                         "a file for every report, the statistics and the leak table instead "
                         "of stderr; `%p` is "
                         "the process id, so that each process of a pipeline or a fork "
                         "writes its own; opened at the first report, appended to",
                         NULL},
    [USI_SETTING_STATS] = {"USLAB_STATS", USI_SETTING_KIND_STATS, 0, "unset", 0, 0,
                           "`1`: a `slabinfo`-style table of every cache on stderr at exit "
                           "(where the program closed its stderr, on the one it started "
                           "with: a copy kept at fd 100 or above); `json`: the same as JSON",
                           NULL},
};

#define LETTER_ROW(l, bit, dflt, help) {(#l)[0], bit, dflt, help},
const struct usi_setting_letter usi_settings_letters[] = {USI_SETTINGS_DEBUG_LETTERS(LETTER_ROW)};
#undef LETTER_ROW
const size_t usi_settings_nletters = sizeof usi_settings_letters / sizeof usi_settings_letters[0];

int usi_settings_parse_choice(const struct usi_setting *s, const char *value, size_t *index)
{
    for (size_t i = 0; s->words[i]; i++)
        if (strcmp(s->words[i], value) == 0) {
            *index = i;
            return 0;
        }
    return -1;
}

int usi_settings_parse_stats(const char *value, size_t *format)
{
    static const char *const words[] = {"0", "1", "json"}; /* enum usi_stats_format */
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strcmp(value, words[i]) == 0) {
            *format = i;
            return 0;
        }
    return -1;
}

/* ---- size-class tables ------------------------------------------------------------------ */

unsigned usi_classes_default(size_t max_size, size_t *sizes)
{
    unsigned n = 0;
    for (size_t s = 16; s <= 128 && s <= max_size; s += 16)
        sizes[n++] = s;
    for (size_t base = 128; base < max_size; base *= 2) {
        /* per doubling; 2 medium ones (design §8: with one, the pages a span's blocks wrote
         * reached all of its upper half, and the `medium` row faulted in 1.5x the pages) */
        unsigned per = base < USI_MEDIUM ? 8 : 2;
        for (unsigned j = 1; j <= per && n < USI_CLASSES_MAX; j++) {
            size_t s = base + j * (base / per);
            if (s > max_size)
                break;
            /* 4480 before 4608: a page and a header of up to 384 bytes (sqlite3's page
             * cache), in a stride, an odd multiple of 128, that starts its blocks in 32 of a
             * 32 KiB L1's 64 sets, where 4608's start in 8 (design §8). */
            if (base == 4096 && j == 1)
                sizes[n++] = s - 128;
            sizes[n++] = s;
        }
    }
    return n;
}

/* usi_classes_check, and in *at the index of the size refused (n where none is: no
 * sizes, too many) or, for a missing power of two, n + that power. */
static const char *classes_check_at(const size_t *sizes, unsigned n, size_t *at)
{
    *at = n;
    if (n == 0)
        return "no sizes";
    if (n > USI_CLASSES_MAX)
        return "more than 96 sizes";
    for (unsigned i = 0; i < n; i++) {
        size_t s = sizes[i];
        *at = i;
        if (s == 0)
            return "a size is 0 (the smallest class is 16)";
        if (i > 0 && s <= sizes[i - 1])
            return "sizes are not in increasing order";
        if (s < 16 || (s <= 1024 && s % 16 != 0))
            return "a size up to 1024 is not a multiple of 16";
        if (s > 1024 && s % 128 != 0)
            return "a size above 1024 is not a multiple of 128";
    }
    size_t largest = sizes[n - 1];
    *at = n - 1;
    if (largest < 1024 || largest > USI_CLASSES_MAX_SIZE)
        return "the largest size is not from 1024 to 1048576";
    unsigned k = 0;
    for (size_t p = 16; p <= largest; p *= 2) {
        while (k < n && sizes[k] < p)
            k++;
        *at = n + p;
        if (k == n || sizes[k] != p)
            return "a power of two from 16 to the largest size is missing";
    }
    *at = n;
    return NULL;
}

const char *usi_classes_check(const size_t *sizes, unsigned n)
{
    size_t at;
    return classes_check_at(sizes, n, &at);
}

const char *usi_classes_parse(const char *text, size_t len, size_t *sizes, unsigned *n, char *where,
                              size_t where_len)
{
    size_t hl = sizeof USI_CLASSES_HEADER - 1, i = hl;
    unsigned line = 1, lines[USI_CLASSES_MAX];
    *n = 0;
    snprintf(where, where_len, "line 1");
    if (len < hl || memcmp(text, USI_CLASSES_HEADER, hl) != 0 ||
        (len > hl && text[hl] != '\n' && text[hl] != '\r' && text[hl] != ' '))
        return "the first line is not \"" USI_CLASSES_HEADER "\"";
    while (i < len && text[i] != '\n') /* the rest of the header line */
        if (text[i++] != ' ' && text[i - 1] != '\r')
            return "the first line is not \"" USI_CLASSES_HEADER "\"";
    while (i < len) {
        char ch = text[i];
        if (ch == '#') {
            while (i < len && text[i] != '\n')
                i++;
        } else if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') {
            line += ch == '\n';
            i++;
        } else {
            size_t start = i, v = 0;
            while (i < len && text[i] >= '0' && text[i] <= '9' && v <= USI_CLASSES_MAX_SIZE)
                v = v * 10 + (size_t)(text[i++] - '0');
            size_t end = i;
            while (end < len && text[end] != ' ' && text[end] != '\t' && text[end] != '\n' &&
                   text[end] != '\r' && text[end] != '#')
                end++;
            int w = end - start > 24 ? 24 : (int)(end - start);
            snprintf(where, where_len, "line %u, \"%.*s%s\"", line, w, text + start,
                     end - start > 24 ? "..." : "");
            if (end != i && (i == start || text[i] < '0' || text[i] > '9'))
                return "a word that is not a size";
            if (end != i || v > USI_CLASSES_MAX_SIZE)
                return "a size is too large";
            if (*n == USI_CLASSES_MAX)
                return "more than 96 sizes";
            lines[*n] = line;
            sizes[(*n)++] = v;
        }
    }
    size_t at;
    const char *why = classes_check_at(sizes, *n, &at);
    if (!why)
        where[0] = '\0';
    else if (at < *n)
        snprintf(where, where_len, "line %u, %zu", lines[at], sizes[at]);
    else if (at > *n)
        snprintf(where, where_len, "%zu", at - *n);
    else
        where[0] = '\0';
    return why;
}

int usi_settings_parse_size(const char *s, size_t *out)
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
    case 't':
    case 'T':
        shift = 40;
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

/* The bit of letter c in either case, or 0. */
static unsigned letter_bit(char c)
{
    if (c >= 'a' && c <= 'z')
        c = (char)(c - 'a' + 'A');
    for (size_t i = 0; i < usi_settings_nletters; i++)
        if (usi_settings_letters[i].letter == c)
            return usi_settings_letters[i].bit;
    return 0;
}

/* Whether the n characters at w are one of words (NULL-terminated), in either case. */
static int word_in(const char *w, size_t n, const char *const *words)
{
    for (; *words; words++) {
        size_t i = 0;
        while (i < n && (*words)[i] && ((w[i] | 0x20) == (*words)[i] || w[i] == (*words)[i]))
            i++;
        if (i == n && (*words)[i] == '\0')
            return 1;
    }
    return 0;
}

int usi_settings_parse_debug(const char *value, unsigned *letters, const char **globs,
                             char *bad_letter)
{
    static const char *const on[] = {"1", "yes", "on", "true", NULL};
    static const char *const off[] = {"0", "no", "off", "false", NULL};
    int rc = 0;
    *letters = 0;
    *globs = NULL;
    if (!value)
        return 0;
    const char *p = value;
    size_t word = strcspn(value, ",");
    /* Other tools' switches (issue 39): on means the default letters, as an empty value */
    int is_on = word_in(value, word, on);
    if (is_on || word_in(value, word, off))
        p += word;
    for (; *p && *p != ','; p++) {
        unsigned bit = letter_bit(*p);
        if (bit) {
            *letters |= bit;
        } else if (*p != '-' && rc == 0) {
            *bad_letter = *p;
            rc = -1;
        }
    }
    if (p == value || is_on) /* "", ",glob" or "1": as slub_debug, everything but tracing */
        for (size_t i = 0; i < usi_settings_nletters; i++)
            if (usi_settings_letters[i].in_default)
                *letters |= usi_settings_letters[i].bit;
    if (*p == ',') {
        const char *bracket = strpbrk(p + 1, "[]");
        if (bracket) { /* globs have * and ? only: the value is not what it seems */
            *letters = 0;
            *bad_letter = *bracket;
            return -2;
        }
        *globs = p + 1;
    }
    return rc;
}

char usi_settings_letter_of(unsigned bit)
{
    for (size_t i = 0; i < usi_settings_nletters; i++)
        if (usi_settings_letters[i].bit == bit)
            return usi_settings_letters[i].letter;
    return 0;
}

/* A bounded string builder: keeps a NUL-terminated prefix, counts the whole length. */
struct out {
    char *buf;
    size_t len, used;
};

static void put(struct out *o, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++, o->used++)
        if (o->used + 1 < o->len)
            o->buf[o->used] = s[i];
    if (o->len)
        o->buf[o->used < o->len ? o->used : o->len - 1] = '\0';
}

static void puts_(struct out *o, const char *s)
{
    put(o, s, strlen(s));
}

static void put_size(struct out *o, size_t v)
{
    static const char suffix[] = "GMK";
    char tmp[32];
    size_t n = sizeof tmp;
    const char *sfx = "";
    if (v >= (size_t)1 << 20) {
        for (unsigned i = 0; i < 3; i++) {
            unsigned shift = 30 - 10 * i;
            if ((v & (((size_t)1 << shift) - 1)) == 0) {
                v >>= shift;
                sfx = &suffix[i];
                break;
            }
        }
    }
    do {
        tmp[--n] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    put(o, tmp + n, sizeof tmp - n);
    put(o, sfx, *sfx ? 1 : 0);
}

size_t usi_settings_values(const struct usi_setting *s, char *buf, size_t len)
{
    struct out o = {buf, len, 0};
    puts_(&o, ""); /* an empty string at least */
    switch (s->kind) {
    case USI_SETTING_KIND_SIZE:
    case USI_SETTING_KIND_NUMBER:
        put_size(&o, s->min);
        puts_(&o, "..");
        put_size(&o, s->max);
        break;
    case USI_SETTING_KIND_BOOL:
        puts_(&o, "0 or 1");
        break;
    case USI_SETTING_KIND_DEBUG:
        puts_(&o, "letters of `");
        for (size_t i = 0; i < usi_settings_nletters; i++)
            put(&o, &usi_settings_letters[i].letter, 1);
        puts_(&o, "` in either case (none means `");
        for (size_t i = 0; i < usi_settings_nletters; i++)
            if (usi_settings_letters[i].in_default)
                put(&o, &usi_settings_letters[i].letter, 1);
        puts_(&o, "`; `-` is ignored), then optional `,glob`s (with `*` and `?`)");
        break;
    case USI_SETTING_KIND_STATS:
        puts_(&o, "`1`, `json` or `0`");
        break;
    case USI_SETTING_KIND_PATH:
        puts_(&o, "a file name");
        break;
    case USI_SETTING_KIND_CHOICE:
        for (size_t i = 0; s->words[i]; i++) {
            puts_(&o, i ? (s->words[i + 1] ? ", `" : " or `") : "`");
            puts_(&o, s->words[i]);
            puts_(&o, "`");
        }
        break;
    }
    return o.used;
}

/* The edit distance of a[0..la) and b[0..lb) (optimal string alignment: an insertion, a
 * deletion, a replacement or a swap of neighbours each count 1); names longer than 40
 * count as far from every setting. */
static unsigned name_distance(const char *a, size_t la, const char *b, size_t lb)
{
    enum { MAXLEN = 40 };
    if (la > MAXLEN || lb > MAXLEN)
        return MAXLEN;
    unsigned rows[3][MAXLEN + 1];
    unsigned *two = rows[0], *one = rows[1], *cur = rows[2];
    for (size_t j = 0; j <= lb; j++)
        one[j] = (unsigned)j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = (unsigned)i;
        for (size_t j = 1; j <= lb; j++) {
            unsigned d = one[j - 1] + (a[i - 1] != b[j - 1]);
            if (one[j] + 1 < d)
                d = one[j] + 1;
            if (cur[j - 1] + 1 < d)
                d = cur[j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                two[j - 2] + 1 < d)
                d = two[j - 2] + 1;
            cur[j] = d;
        }
        unsigned *t = two;
        two = one;
        one = cur;
        cur = t;
    }
    return one[lb];
}

/* Whether w[0..len) is a unit a user may add to a setting's name (MS, BYTES, ...). */
static int unit_word(const char *w, size_t len)
{
    static const char *const units[] = {
        "MS",  "US", "NS", "S",   "SEC", "SECS", "SECONDS", "B",    "BYTES", "K",   "KB",
        "KIB", "M",  "MB", "MIB", "G",   "GB",   "GIB",     "SIZE", "COUNT", "NUM", "N"};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strlen(units[i]) == len && memcmp(units[i], w, len) == 0)
            return 1;
    return 0;
}

const struct usi_setting *usi_settings_lookup(const char *name, size_t len, int *exact)
{
    const struct usi_setting *near = NULL;
    unsigned best = ~0u;
    *exact = 0;
    for (unsigned i = 0; i < USI_SETTING_COUNT; i++) {
        const struct usi_setting *set = &usi_settings_table[i];
        size_t n = strlen(set->name);
        if (n == len && memcmp(set->name, name, len) == 0) {
            *exact = 1;
            return set;
        }
        /* A setting's name with a unit added (USLAB_PURGE_DELAY_MS), or a typo: within one
         * edit for short names (what follows USLAB_ up to 5 letters), two for longer ones.
         * Other words added (USLAB_STATS_FILE) may well be a program's own variable. */
        unsigned d = len > n && name[n] == '_' && memcmp(set->name, name, n) == 0 &&
                             unit_word(name + n + 1, len - n - 1)
                         ? 1
                         : name_distance(name, len, set->name, n);
        if (d <= (n - 6 <= 5 ? 1u : 2u) && d < best) {
            best = d;
            near = set;
        }
    }
    return near;
}
