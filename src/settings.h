/* SPDX-License-Identifier: MIT */
/*
 * settings.h - the one table of the USLAB_* settings and the one table of USLAB_DEBUG
 * letters (docs/design.md §11), with their parsers.
 *
 * Self-contained: settings.c needs only the C library's string functions, calls no other
 * uslab function and never allocates, so the library (options.c, debug.c) and the `uslab`
 * tool (tools/uslab.c, which compiles settings.c in) share it. README.md's settings table
 * is the output of `uslab settings --markdown`, checked by tests/tools.
 */
#ifndef USLAB_SETTINGS_H
#define USLAB_SETTINGS_H

#include <stddef.h>
#include <stdint.h>

/* Hidden in the library (as every header's declarations); harmless in the tool. */
#pragma GCC visibility push(hidden)

/* The debug letters: X(letter, bit, in the empty list's default, help). The one place a
 * letter is defined: its USI_DEBUG_<letter> bit (used by debug.c), the parser, `uslab
 * --help`, the README check and the statistics' Flg column all come from this list. */
#define USI_SETTINGS_DEBUG_LETTERS(X)                                                              \
    X(F, 0x01u, 1,                                                                                 \
      "sanity checks: double free, invalid or interior pointer, free to the wrong cache, "         \
      "object state, slab consistency")                                                            \
    X(Z, 0x02u, 1,                                                                                 \
      "red zones before and after each object, checked on free and on allocation (a malloc "       \
      "block's right red zone starts at the size asked for, which malloc_usable_size then "        \
      "reports)")                                                                                  \
    X(P, 0x04u, 1, "poisoning of free and new objects, checked on allocation (writes after free)") \
    X(U, 0x08u, 1,                                                                                 \
      "user tracking: allocation and free stacks, thread and time per object, and the leak "       \
      "report of USLAB_LEAKS=1 at exit")                                                           \
    X(T, 0x10u, 0, "a TRACE line on stderr for every allocation and free")

#define USI_SETTINGS_LETTER_BIT(l, bit, dflt, help) USI_DEBUG_##l = bit,
enum usi_debug_letter_bits { USI_SETTINGS_DEBUG_LETTERS(USI_SETTINGS_LETTER_BIT) };
#undef USI_SETTINGS_LETTER_BIT

/* Defaults of the settings options.c keeps in struct usi_options: its static initialiser
 * and the table both use these. */
#define USI_SETTINGS_MAX_SLAB_SIZE_DEFAULT ((size_t)256 << 10)
#define USI_SETTINGS_MAX_SLAB_SIZE_MIN     ((size_t)1024) /* == USI_SMALL_MAX */
#define USI_SETTINGS_RESERVE_DEFAULT       ((size_t)256 << 30)
#define USI_SETTINGS_EMPTY_SLABS_DEFAULT   ((size_t)1)
#define USI_SETTINGS_PURGE_DELAY_DEFAULT   ((size_t)1000)
#define USI_SETTINGS_TCACHE_MAX_DEFAULT    ((size_t)64 << 20)

/* USLAB_PURGER's words, in order: usi_options.purger holds the index (design §3). */
enum usi_purger_mode {
    USI_PURGER_INLINE, /* no thread: memory goes back on slow paths and thread exits */
    USI_PURGER_THREAD, /* a background thread too, started at the first kick */
};

/* USLAB_RETURN's words, in order: usi_options.return_policy holds the index (design §3). */
enum usi_return_policy {
    USI_RETURN_DELAY,    /* idle memory back after USLAB_PURGE_DELAY */
    USI_RETURN_PRESSURE, /* at once under memory pressure, else after 10 delays */
    USI_RETURN_BOTH,     /* at once under memory pressure, else after the delay */
};

/* USLAB_STATS's and USLAB_LEAKS's values (usi_settings_parse_stats). */
enum usi_stats_format {
    USI_STATS_OFF,  /* 0 */
    USI_STATS_TEXT, /* 1: a table, or the leak report as text */
    USI_STATS_JSON, /* json */
};

/* Row indices of usi_settings_table[], in table order. */
enum usi_setting_id {
    USI_SETTING_MAX_SLAB_SIZE,
    USI_SETTING_RESERVE,
    USI_SETTING_EMPTY_SLABS,
    USI_SETTING_PURGE_DELAY,
    USI_SETTING_PURGER,
    USI_SETTING_RETURN,
    USI_SETTING_PRESSURE_SOURCE,
    USI_SETTING_TCACHE_MAX,
    USI_SETTING_HUGE_PAGES,
    USI_SETTING_CLASSES,
    USI_SETTING_PROFILE,
    USI_SETTING_DEBUG,
    USI_SETTING_DEBUG_CONTINUE,
    USI_SETTING_LEAKS,
    USI_SETTING_LEAKS_EXITCODE,
    USI_SETTING_LOG,
    USI_SETTING_STATS,
    USI_SETTING_COUNT
};

enum usi_setting_kind {
    USI_SETTING_KIND_SIZE,   /* bytes: a number with an optional K, M, G or T suffix (powers of
                              * 1024) */
    USI_SETTING_KIND_NUMBER, /* a count or milliseconds: parsed as a size (K, M, G accepted too) */
    USI_SETTING_KIND_BOOL,   /* 0 or 1 */
    USI_SETTING_KIND_DEBUG,  /* LETTERS[,GLOB...]: usi_settings_parse_debug */
    USI_SETTING_KIND_STATS,  /* 1 (table), json, or 0 */
    USI_SETTING_KIND_PATH,   /* a file name */
    USI_SETTING_KIND_CHOICE, /* exactly one word of `words`: usi_settings_parse_choice */
};

struct usi_setting {
    const char *name;           /* "USLAB_RESERVE" */
    enum usi_setting_kind kind; /* how the value is written */
    size_t def;                 /* default of SIZE, NUMBER and BOOL; 0 for the others */
    const char *def_text;       /* the default as shown: "256G", "unset" */
    size_t min, max;            /* accepted values of SIZE, NUMBER and BOOL */
    const char *help;           /* one line; `code` in backquotes (markdown) */
    const char *const *words;   /* CHOICE: the accepted words, NULL-terminated; word i
                                 * is value i */
};

struct usi_setting_letter {
    char letter;      /* upper case; parsing is case-insensitive */
    unsigned bit;     /* USI_DEBUG_<letter> */
    int in_default;   /* 1: part of what an empty letter list means (FZPU, as slub_debug) */
    const char *help; /* one line */
};

extern const struct usi_setting usi_settings_table[USI_SETTING_COUNT];
extern const struct usi_setting_letter usi_settings_letters[];
extern const size_t usi_settings_nletters;

/* Parses "123", "64K", "1m", "2G"; returns 0 and stores the value, or -1 if malformed or
 * too large for a size_t. */
int usi_settings_parse_size(const char *s, size_t *out);

/*
 * Parses a USLAB_DEBUG value LETTERS[,GLOB...]:
 *  - LETTERS (up to the first ',') are letters of usi_settings_letters, in either case;
 *    '-' is accepted and ignored, so "-" alone (or "-,GLOB") selects no letter: debugging
 *    off, as slub_debug's '-';
 *  - empty LETTERS ("" or ",GLOB...") mean the letters marked in_default (FZPU), as
 *    slub_debug does;
 *  - *globs is what follows the first ',' (may be empty: every cache), or NULL without a
 *    ','. A glob has `*` and `?` only: a '[' or ']' in one (a bracket class, unsupported)
 *    makes the whole value invalid.
 * Stores the letters' bits in *letters and returns 0. An unknown letter is skipped (the
 * others still count), the first one is stored in *bad_letter and the result is -1. A glob
 * with a bracket gives -2, the bracket in *bad_letter, no letters and no globs: the value
 * is ignored (dropping only that glob could select more caches, or all of them).
 * value NULL (unset) gives no letters and no globs.
 */
int usi_settings_parse_debug(const char *value, unsigned *letters, const char **globs,
                             char *bad_letter);

/* Parses a STATS setting's value (USLAB_STATS, USLAB_LEAKS): "0", "1" or "json", exactly.
 * Stores an enum usi_stats_format in *format and returns 0, or returns -1. */
int usi_settings_parse_stats(const char *value, size_t *format);

/* Parses a CHOICE setting's value: one word of s->words. Stores its index in *index and
 * returns 0, or returns -1. */
int usi_settings_parse_choice(const struct usi_setting *s, const char *value, size_t *index);

/*
 * Size-class tables (docs/design.md §8, issue 13). A table is a list of block sizes, in
 * increasing order, that the malloc classes use instead of the default ones. A file of
 * USLAB_CLASSES holds one as text:
 *
 *     uslab-classes 1
 *     # comments, and blank lines, anywhere after the header
 *     16 32 48 64 ...        (sizes separated by blanks or newlines)
 *
 * The rules the allocator needs (usi_classes_check): at most USI_CLASSES_MAX sizes, strictly
 * increasing; up to 1024 bytes multiples of 16 (16-byte alignment, the small lookup table),
 * above it multiples of 128 (the large lookup table has one entry per 128 bytes); every
 * power of two from 16 up to the largest size (aligned allocations use them); the largest
 * from 1024 to 1 MiB.
 */
#define USI_CLASSES_MAX 96
/* Classes above this are medium: each block in a span of its own, the power of two at or
 * above its size (usi_cache_medium, design §8). */
#define USI_MEDIUM           ((size_t)32768)
#define USI_CLASSES_MAX_SIZE ((size_t)1 << 20)
/* Request sizes `uslab profile` counts one by one (tools/classes.c); above, in one count. */
#define USI_PROFILE_MAX_SIZE ((size_t)65536)
#define USI_CLASSES_HEADER   "uslab-classes 1"
/* The default table for a largest class of max_size: 16 to 128 in steps of 16, then 8
 * classes per doubling up to USI_MEDIUM (a request wastes less than 1/8 of its block above
 * 128 bytes; and 4480), then 2 (less than 1/2). Returns the count: 83 up to 1 MiB. */
unsigned usi_classes_default(size_t max_size, size_t *sizes);
/* NULL if the table is usable, else why not (a constant string). */
const char *usi_classes_check(const size_t *sizes, unsigned n);
/* Parses a file's text (len bytes, need not be NUL-terminated) into sizes[USI_CLASSES_MAX];
 * returns NULL and the count in *n, or why it is refused, with where (where_len bytes)
 * naming the line and the word or size refused ("line 4, \"abc\"", "line 3, 32"), the power
 * of two missing ("64"), or empty. Checks the table too. */
const char *usi_classes_parse(const char *text, size_t len, size_t *sizes, unsigned *n, char *where,
                              size_t where_len);

/* The letter for a bit, or 0. */
char usi_settings_letter_of(unsigned bit);
/* The setting named name[0..len) (*exact = 1), else the one whose name is nearly that
 * (a typo: one or two edits; or the name with a unit added, _MS) with *exact = 0, else NULL. */
const struct usi_setting *usi_settings_lookup(const char *name, size_t len, int *exact);

/*
 * Text helpers for `uslab --help` and `uslab settings`; each writes a NUL-terminated
 * string (truncated to fit len > 0) and returns the length it wanted.
 *  values: what a setting accepts, e.g. "1024..65536", "0 or 1" (`code` in backquotes),
 *  sizes as 123, or with the largest of K, M, G dividing it exactly when >= 1M.
 */
size_t usi_settings_values(const struct usi_setting *s, char *buf, size_t len);

#pragma GCC visibility pop

#endif
