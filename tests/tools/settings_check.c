/* SPDX-License-Identifier: MIT */
/*
 * settings_check USLAB - the tables of src/settings.c and what is made of them:
 *  - every row is complete and consistent (defaults parse to the numeric default and lie in
 *    the range, names unique, help on one line), the letter bits are the library's
 *    USI_DEBUG_* bits, USLAB_MAX_SLAB_SIZE's minimum is USI_SMALL_MAX;
 *  - usi_settings_parse_size and usi_settings_parse_debug on the cases the library and the
 *    tool must agree on (fz, ",malloc-*", "", "-", unknown letters);
 *  - usi_settings_parse_stats (USLAB_STATS, USLAB_LEAKS): 0, 1 and json only;
 *  - `USLAB --help` shows every letter of the table (as its "  X  help" line) and every
 *    setting with its default; `USLAB settings` every setting;
 *  - the library (PRELOAD, the preload library) gives exactly one `uslab:` warning for an
 *    invalid value of USLAB_LEAKS, USLAB_STATS, USLAB_DEBUG_CONTINUE and USLAB_DEBUG (a glob
 *    with a bracket), naming the setting, the value and the default it keeps, as for the
 *    other settings; none for the documented values. `USLAB run --debug` refuses the glob.
 * Compiled with src/settings.c, as the tool is.
 */
#include "base.h"
#include "check.h"
#include "settings.h"
#include "uslab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

/* The output of the shell command cmd; its exit status in *status. */
static char *run_shell(const char *cmd, int *status)
{
    FILE *p = popen(cmd, "r");
    CHECK(p, "popen %s", cmd);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    CHECK(buf, "malloc");
    for (size_t got; (got = fread(buf + n, 1, cap - 1 - n, p)) > 0;) {
        n += got;
        if (n + 1 == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            CHECK(buf, "realloc");
        }
    }
    buf[n] = '\0';
    *status = pclose(p);
    return buf;
}

static char *run_capture(const char *uslab, const char *args)
{
    char cmd[4096];
    int status;
    snprintf(cmd, sizeof cmd, "'%s' %s", uslab, args);
    char *out = run_shell(cmd, &status);
    CHECK(status == 0, "%s failed", cmd);
    return out;
}

static void check_tables(void)
{
    for (size_t i = 0; i < USI_SETTING_COUNT; i++) {
        const struct usi_setting *s = &usi_settings_table[i];
        CHECK(s->name && !strncmp(s->name, "USLAB_", 6), "row %zu: name", i);
        CHECK(s->def_text && s->def_text[0], "%s: no default text", s->name);
        CHECK(s->help && s->help[0] && !strchr(s->help, '\n'), "%s: help", s->name);
        for (size_t j = 0; j < i; j++)
            CHECK(strcmp(s->name, usi_settings_table[j].name) != 0, "%s twice", s->name);
        if (s->kind == USI_SETTING_KIND_SIZE || s->kind == USI_SETTING_KIND_NUMBER ||
            s->kind == USI_SETTING_KIND_BOOL) {
            size_t v;
            CHECK(usi_settings_parse_size(s->def_text, &v) == 0 && v == s->def,
                  "%s: default text %s is not %zu", s->name, s->def_text, s->def);
            CHECK(s->min <= s->def && s->def <= s->max, "%s: default out of range", s->name);
        }
        if (s->kind == USI_SETTING_KIND_BOOL)
            CHECK(s->min == 0 && s->max == 1, "%s: a boolean is 0 or 1", s->name);
    }
    CHECK(usi_settings_table[USI_SETTING_MAX_SLAB_SIZE].min == USI_SMALL_MAX, "min slab size");
    CHECK(!strcmp(usi_settings_table[USI_SETTING_DEBUG].name, "USLAB_DEBUG"), "DEBUG row");

    static const struct {
        char letter;
        unsigned bit;
    } lib[] = {{'F', USI_DEBUG_F},
               {'Z', USI_DEBUG_Z},
               {'P', USI_DEBUG_P},
               {'U', USI_DEBUG_U},
               {'T', USI_DEBUG_T}};
    CHECK(usi_settings_nletters == sizeof lib / sizeof lib[0], "%zu letters, library has %zu",
          usi_settings_nletters, sizeof lib / sizeof lib[0]);
    for (size_t i = 0; i < sizeof lib / sizeof lib[0]; i++)
        CHECK(usi_settings_letter_of(lib[i].bit) == lib[i].letter, "bit %#x is not %c", lib[i].bit,
              lib[i].letter);
    for (size_t i = 0; i < usi_settings_nletters; i++) {
        const struct usi_setting_letter *l = &usi_settings_letters[i];
        CHECK(l->letter >= 'A' && l->letter <= 'Z', "letter %c upper case", l->letter);
        CHECK(l->help && l->help[0], "letter %c: help", l->letter);
    }
}

static void check_size_parser(void)
{
    static const struct {
        const char *s;
        int ok;
        size_t v;
    } cases[] = {
        {"0", 1, 0},
        {"123", 1, 123},
        {"64K", 1, 64 << 10},
        {"1m", 1, 1 << 20},
        {"2G", 1, (size_t)2 << 30},
        {"18446744073709551615", 1, (size_t)-1},
        {"18446744073709551616", 0, 0},
        {"17179869184G", 0, 0},
        {"", 0, 0},
        {"K", 0, 0},
        {"-1", 0, 0},
        {" 1", 0, 0},
        {"1T", 1, (size_t)1 << 40},
        {"64t", 1, (size_t)64 << 40},
        {"16777216T", 0, 0},
        {"1KB", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t v = 777;
        int rc = usi_settings_parse_size(cases[i].s, &v);
        CHECK(rc == (cases[i].ok ? 0 : -1), "parse_size(\"%s\") = %d", cases[i].s, rc);
        CHECK(cases[i].ok ? v == cases[i].v : v == 777, "parse_size(\"%s\") gave %zu", cases[i].s,
              v);
    }
}

static void check_debug_parser(void)
{
    const unsigned fzpu = USI_DEBUG_F | USI_DEBUG_Z | USI_DEBUG_P | USI_DEBUG_U;
    static const char *const no_globs = "(none)";
    const struct {
        const char *v;
        int rc;
        unsigned letters;
        const char *globs; /* no_globs: NULL */
        char bad;
    } cases[] = {
        {"fz", 0, USI_DEBUG_F | USI_DEBUG_Z, no_globs, 0},
        {"FZ", 0, USI_DEBUG_F | USI_DEBUG_Z, no_globs, 0},
        {",malloc-*", 0, fzpu, "malloc-*", 0},
        {"", 0, fzpu, no_globs, 0},
        {"-", 0, 0, no_globs, 0},
        {"-,conn*", 0, 0, "conn*", 0},
        {"f-Z", 0, USI_DEBUG_F | USI_DEBUG_Z, no_globs, 0},
        {"FZ,", 0, USI_DEBUG_F | USI_DEBUG_Z, "", 0},
        {"Tu,a,,b", 0, USI_DEBUG_T | USI_DEBUG_U, "a,,b", 0},
        {"FZPUT", 0, fzpu | USI_DEBUG_T, no_globs, 0},
        {"FX", -1, USI_DEBUG_F, no_globs, 'X'},
        {"qZx,malloc-64", -1, USI_DEBUG_Z, "malloc-64", 'q'},
        {"F Z", -1, USI_DEBUG_F | USI_DEBUG_Z, no_globs, ' '},
        {"F,[", -2, 0, no_globs, '['},
        {"FZ,malloc-*,c[0-9]", -2, 0, no_globs, '['},
        {",a]", -2, 0, no_globs, ']'},
        {"X,[", -2, 0, no_globs, '['},
        {"F,malloc-?4,*", 0, USI_DEBUG_F, "malloc-?4,*", 0},
        /* other tools' switches (issue 39): on is the default letters, off is none */
        {"1", 0, fzpu, no_globs, 0},
        {"yes", 0, fzpu, no_globs, 0},
        {"ON", 0, fzpu, no_globs, 0},
        {"True,malloc-*", 0, fzpu, "malloc-*", 0},
        {"0", 0, 0, no_globs, 0},
        {"no", 0, 0, no_globs, 0},
        {"Off,conn*", 0, 0, "conn*", 0},
        {"false", 0, 0, no_globs, 0},
        {"yess", -1, 0, no_globs, 'y'},
        {"10", -1, 0, no_globs, '1'},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned letters = 12345;
        const char *globs = "x";
        char bad = 0;
        int rc = usi_settings_parse_debug(cases[i].v, &letters, &globs, &bad);
        CHECK(rc == cases[i].rc, "parse_debug(\"%s\") = %d", cases[i].v, rc);
        CHECK(letters == cases[i].letters, "parse_debug(\"%s\"): letters %#x, want %#x", cases[i].v,
              letters, cases[i].letters);
        if (cases[i].globs == no_globs)
            CHECK(globs == NULL, "parse_debug(\"%s\"): globs \"%s\"", cases[i].v, globs);
        else
            CHECK(globs && !strcmp(globs, cases[i].globs), "parse_debug(\"%s\"): globs \"%s\"",
                  cases[i].v, globs ? globs : "(null)");
        if (rc)
            CHECK(bad == cases[i].bad, "parse_debug(\"%s\"): bad '%c'", cases[i].v, bad);
    }
    unsigned letters = 1;
    const char *globs = "x";
    char bad = 0;
    CHECK(usi_settings_parse_debug(NULL, &letters, &globs, &bad) == 0 && letters == 0 && !globs,
          "unset");
}

static void check_stats_parser(void)
{
    static const struct {
        const char *v;
        int rc;
        size_t format;
    } cases[] = {
        {"0", 0, USI_STATS_OFF},
        {"1", 0, USI_STATS_TEXT},
        {"json", 0, USI_STATS_JSON},
        {"", -1, 0},
        {"2", -1, 0},
        {"yes", -1, 0},
        {"JSON", -1, 0},
        {"1 ", -1, 0},
        {"table", -1, 0},
        {"01", -1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t f = 777;
        int rc = usi_settings_parse_stats(cases[i].v, &f);
        CHECK(rc == cases[i].rc, "parse_stats(\"%s\") = %d", cases[i].v, rc);
        CHECK(rc ? f == 777 : f == cases[i].format, "parse_stats(\"%s\") gave %zu", cases[i].v, f);
    }
}

/* Lines of text that start with "uslab:". */
static int uslab_lines(const char *text)
{
    int n = 0;
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        n += strncmp(l, "uslab:", 6) == 0;
    return n;
}

static void check_library_warnings(const char *uslab, const char *preload)
{
    static const struct {
        const char *name, *value, *want; /* want: in the warning; NULL: no warning */
    } cases[] = {
        {"USLAB_LEAKS", "2", "(expected `1`, `json` or `0`); using the default, 0"},
        {"USLAB_LEAKS", "yes", "(expected `1`, `json` or `0`); using the default, 0"},
        {"USLAB_STATS", "yes", "(expected `1`, `json` or `0`); using the default, unset"},
        {"USLAB_STATS", "2", "(expected `1`, `json` or `0`); using the default, unset"},
        {"USLAB_DEBUG_CONTINUE", "yes", "(expected 0 or 1); using the default, 0"},
        {"USLAB_DEBUG", "F,[", "(a glob has '[': globs have only `*` and `?`); using the default"},
        {"USLAB_DEBUG", "F,malloc-[0-9]*", "(a glob has '['"},
        {"USLAB_DEBUG", "FZ,a]", "(a glob has ']'"},
        {"USLAB_PURGER", "sometimes", "(expected `inline` or `thread`); using the default"},
        {"USLAB_RESERVE", "65T", "(expected a size from 64M to 64T); using the default, 256G"},
        {"USLAB_RESERVE", "1T", NULL},
        {"USLAB_DEBUG", "1", NULL},
        {"USLAB_DEBUG", "off", NULL},
        {"USLAB_PURGE_DELAY", "1.5", "(expected a whole number from 0 to 1073741824)"},
        {"USLAB_EMPTY_SLABS", "2000", "(expected a whole number from 0 to 1024)"},
        {"USLAB_LEAKS", "1", NULL},
        {"USLAB_LEAKS", "json", NULL},
        {"USLAB_LEAKS", "0", NULL},
        {"USLAB_STATS", "1", NULL},
        {"USLAB_STATS", "json", NULL},
        {"USLAB_STATS", "0", NULL},
        {"USLAB_DEBUG_CONTINUE", "1", NULL},
        {"USLAB_DEBUG_CONTINUE", "0", NULL},
        {"USLAB_DEBUG", "F,malloc-*,conn?", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cmd[4096];
        int status;
        snprintf(cmd, sizeof cmd, "env %s='%s' LD_PRELOAD='%s' /bin/sh -c : 2>&1", cases[i].name,
                 cases[i].value, preload);
        char *out = run_shell(cmd, &status);
        CHECK(status == 0, "%s: exit status %d", cmd, status);
        char named[256];
        snprintf(named, sizeof named, "uslab: ignoring %s=%s ", cases[i].name, cases[i].value);
        char *at = strstr(out, named);
        if (cases[i].want) {
            CHECK(at && strstr(at, cases[i].want), "%s=%s: no warning \"%s...%s\" in:\n%s",
                  cases[i].name, cases[i].value, named, cases[i].want, out);
            CHECK(uslab_lines(out) == 1, "%s=%s: %d uslab: lines, want one:\n%s", cases[i].name,
                  cases[i].value, uslab_lines(out), out);
        } else {
            CHECK(!strstr(out, "ignoring") && !strstr(out, "unknown"), "%s=%s warned:\n%s",
                  cases[i].name, cases[i].value, out);
        }
        free(out);
    }
    /* The tool refuses what the library ignores. */
    char cmd[4096];
    int status;
    snprintf(cmd, sizeof cmd, "'%s' run --debug='F,[' -- /bin/true 2>&1", uslab);
    char *out = run_shell(cmd, &status);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 2 && strstr(out, "a glob has '['"),
          "uslab run --debug=F,[: status %d:\n%s", status, out);
    free(out);
}

static void check_help(const char *uslab)
{
    char *help = run_capture(uslab, "--help");
    for (size_t i = 0; i < usi_settings_nletters; i++) {
        char line[16];
        snprintf(line, sizeof line, "\n        %c  ", usi_settings_letters[i].letter);
        CHECK(strstr(help, line), "--help has no line for letter %c",
              usi_settings_letters[i].letter);
    }
    for (size_t i = 0; i < USI_SETTING_COUNT; i++) {
        const struct usi_setting *s = &usi_settings_table[i];
        char line[128], def[128];
        snprintf(line, sizeof line, "\n  %s ", s->name);
        snprintf(def, sizeof def, "default: %s", s->def_text);
        char *at = strstr(help, line);
        CHECK(at, "--help does not list %s", s->name);
        char *next = strstr(at + 1, "\n  U"); /* the next variable's line */
        char *found = strstr(at, def);
        CHECK(found && (!next || found < next), "--help: no '%s' for %s", def, s->name);
    }
    free(help);

    char *text = run_capture(uslab, "settings");
    for (size_t i = 0; i < USI_SETTING_COUNT; i++)
        CHECK(strstr(text, usi_settings_table[i].name), "settings: no %s",
              usi_settings_table[i].name);
    free(text);
}

int main(int argc, char **argv)
{
    CHECK(argc == 3, "usage: settings_check path/to/uslab path/to/libuslab-preload.so");
    check_tables();
    check_size_parser();
    check_debug_parser();
    check_stats_parser();
    check_help(argv[1]);
    check_library_warnings(argv[1], argv[2]);
    TEST_DONE();
}
