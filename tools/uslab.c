/* SPDX-License-Identifier: MIT */
/*
 * uslab - command-line front end of the uslab allocator.
 *
 *   uslab run [options] -- program [args...]   run a program under libuslab-preload.so
 *   uslab profile [-o FILE] [options] -- program [args...]
 *                                              fit size classes to a program (issue 13)
 *   uslab where [--preload=PATH]               print the preload library it would use
 *   uslab settings [--markdown]                print the table of USLAB_* settings
 *   uslab --help | help | --version
 *
 * `uslab run` sets LD_PRELOAD (the library first, then any LD_PRELOAD already set) and the
 * USLAB_* variables the options ask for, then execs the program (execvp): the exit status
 * and signals are the program's own. Usage errors exit 2, a program that cannot be
 * executed 127.
 *
 * The settings and the debug letters come from the library's own tables (src/settings.c,
 * compiled in): --help and `uslab settings` print them, --debug is checked by the library's
 * parser, and README.md's settings table is `uslab settings --markdown` (tests/tools).
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "classes.h"
#include "settings.h"

#ifndef USLAB_TOOL_VERSION
#define USLAB_TOOL_VERSION "0.1.0"
#endif
#ifndef USLAB_INSTALL_LIBDIR
#define USLAB_INSTALL_LIBDIR "lib"
#endif

#define PRELOAD_NAME "libuslab-preload.so"
#define EXIT_USAGE   2
#define EXIT_NOEXEC  127

static const char usage_text[] =
    "usage: uslab run [--debug=LETTERS[,GLOB...]] [--stats[=table|json]] [--leaks[=json]]\n"
    "                 [--continue] [--classes=FILE] [--preload=PATH] [--env NAME=VALUE ...]\n"
    "                 -- program [args...]\n"
    "       uslab profile [-o FILE] [--max-classes=N] [--max-size=BYTES] [--preload=PATH]\n"
    "                 -- program [args...]\n"
    "       uslab where [--preload=PATH]\n"
    "       uslab settings [--markdown]\n"
    "       uslab --help | help | --version\n";

/* --help is these texts with the generated parts between them (print_help). */
static const char help_intro[] =
    "uslab - run programs under uslab, a user-space slab allocator\n"
    "\n"
    "USAGE\n"
    "  uslab run [options] -- program [args...]\n"
    "      Run program with LD_PRELOAD set to libuslab-preload.so (put in front of any\n"
    "      LD_PRELOAD already set) and the USLAB_* variables the options ask for, then exec\n"
    "      it: the exit status and signals are the program's own. The program is looked\n"
    "      up in PATH. The '--' before the program is required.\n"
    "  uslab profile [-o FILE] [--max-classes=N] [--max-size=BYTES] [--preload=PATH]\n"
    "                -- program [args...]\n"
    "      Run program under the preload library with USLAB_PROFILE set, so that every\n"
    "      malloc-family request is counted by size (in the program and in the programs it\n"
    "      runs), then write to FILE (default uslab-classes.txt) the table of at most N\n"
    "      size classes (default 72, as many as the default table; at most 96) up to BYTES\n"
    "      (default 32768) that wastes the fewest bytes on that program's requests, and\n"
    "      print the waste of the default and of the fitted table. Use the file with\n"
    "      uslab run --classes=FILE or USLAB_CLASSES=FILE. Exits with the program's status\n"
    "      if it failed (the file is written all the same), else 0.\n"
    "  uslab where [--preload=PATH]\n"
    "      Print the path of the preload library uslab run would use.\n"
    "  uslab settings [--markdown]\n"
    "      Print the USLAB_* variables the allocator reads (as below), or with --markdown\n"
    "      as the table in README.md.\n"
    "  uslab --help, uslab help, uslab run --help\n"
    "      Print this text.\n"
    "  uslab --version\n"
    "      Print the version.\n"
    "\n"
    "OPTIONS OF uslab run\n"
    "  --debug=LETTERS[,GLOB...]\n"
    "      Set USLAB_DEBUG to the value as given. LETTERS are any of, in either case:\n";

/* After the letters; %s: the letters an empty list means. */
static const char help_debug_fmt[] =
    "No LETTERS (--debug= or --debug=,GLOB) means %s, as in Linux's slub_debug; '-' is "
    "accepted and ignored, so --debug=- alone turns debugging off. Optional comma-separated "
    "GLOBs select the caches to debug by name (malloc size classes are named malloc-<size>, "
    "e.g. malloc-64); without globs every cache is debugged. Quote globs for the shell:";

static const char help_options[] =
    "        uslab run --debug=FZ,'malloc-*' -- ./prog\n"
    "  --stats, --stats=table\n"
    "      Set USLAB_STATS=1: print a slabinfo-style statistics table at exit.\n"
    "  --stats=json\n"
    "      Set USLAB_STATS=json: print the statistics as JSON at exit.\n"
    "  --leaks\n"
    "      Set USLAB_LEAKS=1: report blocks still allocated at exit, grouped by\n"
    "      allocation stack, largest first.\n"
    "  --leaks=json\n"
    "      Set USLAB_LEAKS=json: the same report as JSON, for tools.\n"
    "  --continue\n"
    "      Set USLAB_DEBUG_CONTINUE=1: after a BUG report, continue instead of aborting.\n"
    "  --classes=FILE\n"
    "      Set USLAB_CLASSES=FILE: use the size classes of FILE (from uslab profile).\n"
    "  --preload=PATH\n"
    "      Use PATH as the preload library (see PRELOAD LIBRARY below).\n"
    "  --env NAME=VALUE, --env=NAME=VALUE\n"
    "      Set any USLAB_* variable (NAME must start with USLAB_), e.g.\n"
    "        --env USLAB_PURGE_DELAY=0. May be repeated.\n"
    "  --help\n"
    "      Print this text.\n"
    "  Options are applied in the order given: a later one setting the same variable wins.\n"
    "  Variables not set by an option keep their value from uslab's own environment.\n"
    "\n"
    "ENVIRONMENT READ BY THE ALLOCATOR (once, at the first allocation; sizes accept K, M, G)\n";

static const char help_tail[] =
    "\n"
    "ENVIRONMENT READ BY THIS TOOL\n"
    "  USLAB_PRELOAD_LIB     path of the preload library (default: found as below)\n"
    "  LD_PRELOAD            kept, after the uslab library\n"
    "  PATH                  where the program is looked up\n"
    "\n"
    "PRELOAD LIBRARY\n"
    "  The first of: --preload=PATH; $USLAB_PRELOAD_LIB; " PRELOAD_NAME " in the\n"
    "  directory of the uslab executable; in its parent directory (a build tree's\n"
    "  tools/); <dir>/../" USLAB_INSTALL_LIBDIR "/" PRELOAD_NAME " and <dir>/../lib/" PRELOAD_NAME
    " (an\n"
    "  installed bin/uslab). The executable's directory comes from /proc/self/exe.\n"
    "\n"
    "EXIT STATUS\n"
    "  uslab run exits with the program's status (it replaces itself with the program);\n"
    "  2 on a usage error, 127 if the program cannot be executed, 1 if no preload library\n"
    "  is found. uslab where exits 0 if it found the library, else 1.\n"
    "\n"
    "EXAMPLES\n"
    "  uslab run --stats -- python3 script.py\n"
    "  uslab run --debug=FZP,'conn*' --continue -- ./server --port 8080\n"
    "  uslab run --leaks --env USLAB_MAX_SLAB_SIZE=8K -- ./prog\n";

#define HELP_WIDTH 90

/*
 * Prints text word by word, wrapped at HELP_WIDTH, with the markdown backquotes of the
 * tables' help texts left out. The first line starts with label, padded to indent columns
 * (a label too long for that gets a line of its own); the others with indent spaces.
 */
static void print_wrapped(FILE *f, const char *label, int indent, const char *text)
{
    int col = fprintf(f, "%s", label);
    if (col >= indent) {
        fputc('\n', f);
        col = 0;
    }
    int line_start = 1;
    for (const char *p = text; *p;) {
        while (*p == ' ')
            p++;
        size_t n = strcspn(p, " ");
        if (n == 0)
            break;
        size_t shown = 0;
        for (size_t i = 0; i < n; i++)
            shown += p[i] != '`';
        if (!line_start && col + 1 + (int)shown > HELP_WIDTH) {
            fputc('\n', f);
            col = 0;
            line_start = 1;
        }
        if (line_start) {
            col += fprintf(f, "%*s", indent - col, "");
            line_start = 0;
        } else {
            fputc(' ', f);
            col++;
        }
        for (size_t i = 0; i < n; i++)
            if (p[i] != '`')
                fputc(p[i], f);
        col += (int)shown;
        p += n;
    }
    fputc('\n', f);
}

/* The letters of the table (all, or those an empty letter list means) as a string. */
static const char *letter_list(int only_default)
{
    static char buf[2][64];
    char *out = buf[only_default != 0];
    size_t k = 0;
    for (size_t i = 0; i < usi_settings_nletters && k + 1 < sizeof buf[0]; i++)
        if (!only_default || usi_settings_letters[i].in_default)
            out[k++] = usi_settings_letters[i].letter;
    out[k] = '\0';
    return out;
}

/* Each setting: its name and help, then what it accepts and its default. */
static void print_settings_text(FILE *f)
{
    for (size_t i = 0; i < USI_SETTING_COUNT; i++) {
        const struct usi_setting *s = &usi_settings_table[i];
        char values[256], text[512], label[64];
        usi_settings_values(s, values, sizeof values);
        snprintf(label, sizeof label, "  %s", s->name);
        print_wrapped(f, label, 24, s->help);
        snprintf(text, sizeof text, "values: %s; default: %s", values, s->def_text);
        print_wrapped(f, "", 24, text);
    }
}

/* Markdown text with '|' escaped, so that it stays in its table cell. */
static void put_cell(FILE *f, const char *text)
{
    for (const char *p = text; *p; p++) {
        if (*p == '|')
            fputc('\\', f);
        fputc(*p, f);
    }
}

/* The settings as README.md's table (tests/tools checks that they are the same). */
static void print_settings_markdown(FILE *f)
{
    fputs("| variable | default | values | meaning |\n", f);
    fputs("| --- | --- | --- | --- |\n", f);
    for (size_t i = 0; i < USI_SETTING_COUNT; i++) {
        const struct usi_setting *s = &usi_settings_table[i];
        char values[256];
        usi_settings_values(s, values, sizeof values);
        fprintf(f, "| `%s` | ", s->name);
        put_cell(f, s->def_text);
        fputs(" | ", f);
        put_cell(f, values);
        fputs(" | ", f);
        put_cell(f, s->help);
        fputs(" |\n", f);
    }
}

static void print_help(FILE *f)
{
    fputs(help_intro, f);
    for (size_t i = 0; i < usi_settings_nletters; i++) {
        char label[16];
        snprintf(label, sizeof label, "        %c", usi_settings_letters[i].letter);
        print_wrapped(f, label, 11, usi_settings_letters[i].help);
    }
    char text[1024];
    snprintf(text, sizeof text, help_debug_fmt, letter_list(1));
    print_wrapped(f, "", 6, text);
    fputs(help_options, f);
    print_settings_text(f);
    fputs(help_tail, f);
}

__attribute__((noreturn, format(printf, 1, 2))) static void usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("uslab: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fputs(usage_text, stderr);
    fputs("Try 'uslab --help' for more information.\n", stderr);
    exit(EXIT_USAGE);
}

static void set_env(const char *name, const char *value)
{
    if (setenv(name, value, 1) != 0) {
        fprintf(stderr, "uslab: cannot set %s: %s\n", name, strerror(errno));
        exit(1);
    }
}

/* NAME=VALUE with NAME = USLAB_[A-Z0-9_]+ */
static void apply_env_setting(const char *setting)
{
    const char *eq = strchr(setting, '=');
    if (!eq)
        usage_error("--env wants NAME=VALUE, got '%s'", setting);
    size_t n = (size_t)(eq - setting);
    if (n <= 6 || strncmp(setting, "USLAB_", 6) != 0)
        usage_error("--env: only USLAB_* variables may be set, got '%s'", setting);
    for (size_t i = 0; i < n; i++) {
        char c = setting[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
            usage_error("--env: invalid variable name in '%s'", setting);
    }
    char name[256];
    if (n >= sizeof name)
        usage_error("--env: variable name too long in '%s'", setting);
    memcpy(name, setting, n);
    name[n] = '\0';
    set_env(name, eq + 1);
}

static int is_readable_file(const char *path)
{
    return access(path, R_OK) == 0;
}

/* Try <dir>/<rel>; on success store its canonical path in out. */
static int try_candidate(const char *dir, const char *rel, char out[PATH_MAX])
{
    char buf[PATH_MAX];
    int len = snprintf(buf, sizeof buf, "%s/%s", dir, rel);
    if (len < 0 || (size_t)len >= sizeof buf || !is_readable_file(buf))
        return 0;
    return realpath(buf, out) != NULL;
}

/*
 * The preload library: explicit (from --preload) if given, else $USLAB_PRELOAD_LIB,
 * else searched relative to the executable. Returns 1 and the absolute path in out, or 0
 * with a message on stderr.
 */
static int find_preload(const char *explicit_path, char out[PATH_MAX])
{
    const char *given = explicit_path;
    const char *source = "--preload";
    if (!given || !*given) {
        given = getenv("USLAB_PRELOAD_LIB");
        source = "USLAB_PRELOAD_LIB";
    }
    if (given && *given) {
        if (!is_readable_file(given) || !realpath(given, out)) {
            fprintf(stderr, "uslab: preload library %s (from %s): %s\n", given, source,
                    strerror(errno));
            return 0;
        }
        return 1;
    }

    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) {
        fprintf(stderr, "uslab: cannot read /proc/self/exe: %s\n", strerror(errno));
        return 0;
    }
    exe[len] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) {
        fprintf(stderr, "uslab: odd executable path %s\n", exe);
        return 0;
    }
    *slash = '\0';
    const char *dir = exe[0] ? exe : "/";

    static const char *const candidates[] = {
        PRELOAD_NAME,
        "../" PRELOAD_NAME,
        "../" USLAB_INSTALL_LIBDIR "/" PRELOAD_NAME,
        "../lib/" PRELOAD_NAME,
    };
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++)
        if (try_candidate(dir, candidates[i], out))
            return 1;
    fprintf(stderr,
            "uslab: cannot find %s next to %s/uslab, in its parent directory or in "
            "../%s; use --preload=PATH or USLAB_PRELOAD_LIB\n",
            PRELOAD_NAME, dir, USLAB_INSTALL_LIBDIR);
    return 0;
}

/* Puts lib in front of any LD_PRELOAD already set. */
static void set_ld_preload(const char *lib)
{
    if (strpbrk(lib, " :\t")) {
        fprintf(stderr,
                "uslab: preload library path '%s' contains a space or colon, which "
                "LD_PRELOAD cannot express\n",
                lib);
        exit(1);
    }
    const char *old = getenv("LD_PRELOAD");
    if (!old || !*old) {
        set_env("LD_PRELOAD", lib);
        return;
    }
    size_t n = strlen(lib) + 1 + strlen(old) + 1;
    char *value = malloc(n);
    if (!value) {
        fputs("uslab: out of memory\n", stderr);
        exit(1);
    }
    snprintf(value, n, "%s:%s", lib, old);
    set_env("LD_PRELOAD", value);
    free(value);
}

/* Value of "--name=value" or "--name value" (advancing *i); NULL if arg is not --name. */
static const char *option_value(int argc, char **argv, int *i, const char *name)
{
    const char *arg = argv[*i];
    size_t n = strlen(name);
    if (strncmp(arg, name, n) != 0)
        return NULL;
    if (arg[n] == '=')
        return arg + n + 1;
    if (arg[n] != '\0')
        return NULL;
    if (*i + 1 >= argc)
        usage_error("option %s needs a value", name);
    return argv[++*i];
}

static int cmd_where(int argc, char **argv)
{
    const char *preload = NULL;
    for (int i = 0; i < argc; i++) {
        const char *v;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            print_help(stdout);
            return 0;
        } else if ((v = option_value(argc, argv, &i, "--preload"))) {
            preload = v;
        } else {
            usage_error("where: unexpected argument '%s'", argv[i]);
        }
    }
    char lib[PATH_MAX];
    if (!find_preload(preload, lib))
        return 1;
    puts(lib);
    return 0;
}

static int cmd_settings(int argc, char **argv)
{
    int markdown = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--markdown")) {
            markdown = 1;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            print_help(stdout);
            return 0;
        } else {
            usage_error("settings: unexpected argument '%s'", argv[i]);
        }
    }
    if (markdown)
        print_settings_markdown(stdout);
    else
        print_settings_text(stdout);
    return 0;
}

static int cmd_run(int argc, char **argv)
{
    const char *preload = NULL;
    int i;
    for (i = 0; i < argc; i++) {
        const char *arg = argv[i];
        const char *v;
        if (!strcmp(arg, "--"))
            break;
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            print_help(stdout);
            exit(0);
        } else if ((v = option_value(argc, argv, &i, "--debug"))) {
            /* Accepted exactly when the library takes it without a warning. */
            unsigned letters;
            const char *globs;
            char bad = 0;
            if (usi_settings_parse_debug(v, &letters, &globs, &bad) != 0)
                usage_error("--debug: unknown letter '%c' in '%s' (want letters of %s in "
                            "either case, or none, then optional ,GLOBs)",
                            bad, v, letter_list(0));
            set_env("USLAB_DEBUG", v);
        } else if (!strcmp(arg, "--stats") || !strcmp(arg, "--stats=table")) {
            set_env("USLAB_STATS", "1");
        } else if (!strcmp(arg, "--stats=json")) {
            set_env("USLAB_STATS", "json");
        } else if (!strncmp(arg, "--stats=", 8)) {
            usage_error("--stats: unknown format '%s' (want table or json)", arg + 8);
        } else if (!strcmp(arg, "--leaks")) {
            set_env("USLAB_LEAKS", "1");
        } else if (!strcmp(arg, "--leaks=json")) {
            set_env("USLAB_LEAKS", "json");
        } else if (!strncmp(arg, "--leaks=", 8)) {
            usage_error("--leaks: unknown format '%s' (want json)", arg + 8);
        } else if (!strcmp(arg, "--continue")) {
            set_env("USLAB_DEBUG_CONTINUE", "1");
        } else if ((v = option_value(argc, argv, &i, "--classes"))) {
            if (!*v)
                usage_error("--classes needs a file");
            set_env("USLAB_CLASSES", v);
        } else if ((v = option_value(argc, argv, &i, "--preload"))) {
            if (!*v)
                usage_error("--preload needs a path");
            preload = v;
        } else if ((v = option_value(argc, argv, &i, "--env"))) {
            apply_env_setting(v);
        } else if (arg[0] == '-') {
            usage_error("run: unknown option '%s'", arg);
        } else {
            usage_error("run: expected '--' before the program, got '%s'", arg);
        }
    }
    if (i >= argc)
        usage_error("run: missing '--' before the program");
    char **prog = argv + i + 1;
    if (!prog[0] || !prog[0][0])
        usage_error("run: no program after '--'");

    char lib[PATH_MAX];
    if (!find_preload(preload, lib))
        return 1;
    set_ld_preload(lib);

    execvp(prog[0], prog);
    fprintf(stderr, "uslab: cannot execute %s: %s\n", prog[0], strerror(errno));
    return EXIT_NOEXEC;
}

/* ---- uslab profile ------------------------------------------------------------------------ */

/* Reads every <dir>/profile.<pid> into *p (and removes it); how many files, or -1. */
static int read_profiles(const char *dir, struct size_profile *p)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int files = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "profile.", 8) != 0)
            continue;
        char path[PATH_MAX + 256];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        static char text[1 << 20];
        size_t len = fread(text, 1, sizeof text, f);
        fclose(f);
        const char *why = len == sizeof text ? "too long" : profile_parse(text, len, p);
        if (why)
            fprintf(stderr, "uslab profile: %s: %s; left out\n", path, why);
        else
            files++;
        unlink(path);
    }
    closedir(d);
    return files;
}

static int write_classes(const char *file, const size_t *sizes, unsigned n, char **prog,
                         uint64_t requests, double waste_default, double waste_fit)
{
    FILE *f = fopen(file, "w");
    if (!f) {
        fprintf(stderr, "uslab profile: cannot write %s: %s\n", file, strerror(errno));
        return -1;
    }
    fprintf(f, "%s\n# written by uslab profile for:", USI_CLASSES_HEADER);
    for (char **a = prog; *a; a++)
        fprintf(f, " %s", *a);
    fprintf(f, "\n# %llu requests in range; bytes wasted per request: default %.2f, these %.2f\n",
            (unsigned long long)requests, requests ? waste_default / (double)requests : 0.0,
            requests ? waste_fit / (double)requests : 0.0);
    for (unsigned i = 0; i < n; i++)
        fprintf(f, "%zu%s", sizes[i], i + 1 == n || i % 8 == 7 ? "\n" : " ");
    if (fclose(f) != 0) {
        fprintf(stderr, "uslab profile: cannot write %s: %s\n", file, strerror(errno));
        return -1;
    }
    return 0;
}

static int cmd_profile(int argc, char **argv)
{
    const char *preload = NULL, *out = "uslab-classes.txt";
    size_t max_size = 32768;
    unsigned max_classes = 0;
    int i;
    for (i = 0; i < argc; i++) {
        const char *arg = argv[i];
        const char *v;
        if (!strcmp(arg, "--"))
            break;
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            print_help(stdout);
            exit(0);
        } else if ((v = option_value(argc, argv, &i, "-o")) ||
                   (v = option_value(argc, argv, &i, "--output"))) {
            if (!*v)
                usage_error("profile: -o needs a file");
            out = v;
        } else if ((v = option_value(argc, argv, &i, "--max-classes"))) {
            char *end;
            unsigned long n = strtoul(v, &end, 10);
            if (*end || n < 1 || n > USI_CLASSES_MAX)
                usage_error("--max-classes: want a number from 1 to %d, got '%s'", USI_CLASSES_MAX,
                            v);
            max_classes = (unsigned)n;
        } else if ((v = option_value(argc, argv, &i, "--max-size"))) {
            if (usi_settings_parse_size(v, &max_size) != 0 || max_size < 1024 ||
                max_size > USI_CLASSES_MAX_SIZE || (max_size & (max_size - 1)) != 0)
                usage_error("--max-size: want a power of two from 1024 to 65536, got '%s'", v);
        } else if ((v = option_value(argc, argv, &i, "--preload"))) {
            preload = v;
        } else if (arg[0] == '-') {
            usage_error("profile: unknown option '%s'", arg);
        } else {
            usage_error("profile: expected '--' before the program, got '%s'", arg);
        }
    }
    if (i >= argc || !argv[i + 1] || !argv[i + 1][0])
        usage_error("profile: missing '--' and a program");
    char **prog = argv + i + 1;
    size_t defaults[USI_CLASSES_MAX];
    unsigned ndefault = usi_classes_default(max_size, defaults);
    if (!max_classes)
        max_classes = ndefault;

    char lib[PATH_MAX];
    if (!find_preload(preload, lib))
        return 1;
    const char *tmp = getenv("TMPDIR");
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/uslab-profile.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "uslab profile: cannot make a directory %s: %s\n", dir, strerror(errno));
        return 1;
    }
    char prefix[PATH_MAX + 16];
    snprintf(prefix, sizeof prefix, "%s/profile", dir);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "uslab profile: fork: %s\n", strerror(errno));
        rmdir(dir);
        return 1;
    }
    if (pid == 0) {
        set_ld_preload(lib);
        set_env("USLAB_PROFILE", prefix);
        execvp(prog[0], prog);
        fprintf(stderr, "uslab: cannot execute %s: %s\n", prog[0], strerror(errno));
        _exit(EXIT_NOEXEC);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            fprintf(stderr, "uslab profile: waitpid: %s\n", strerror(errno));
            return 1;
        }
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    static struct size_profile prof;
    int files = read_profiles(dir, &prof);
    rmdir(dir);
    uint64_t requests = profile_requests(&prof, max_size);
    if (files <= 0 || requests == 0) {
        fprintf(stderr, "uslab profile: %s made no request in the slab range (%d profiles)\n",
                prog[0], files < 0 ? 0 : files);
        return code ? code : 1;
    }
    size_t fitted[USI_CLASSES_MAX];
    unsigned n = classes_fit(&prof, max_size, max_classes, fitted);
    if (n == 0) {
        fprintf(stderr, "uslab profile: %u classes cannot hold the powers of two up to %zu\n",
                max_classes, max_size);
        return EXIT_USAGE;
    }
    double wd = profile_waste(&prof, defaults, ndefault), wf = profile_waste(&prof, fitted, n);
    if (write_classes(out, fitted, n, prog, requests, wd, wf) != 0)
        return 1;
    printf("uslab profile: %llu requests up to %zu bytes, %llu above (from %d process%s)\n",
           (unsigned long long)requests, max_size, (unsigned long long)prof.above, files,
           files == 1 ? "" : "es");
    printf("  default classes (%u): %.2f bytes wasted per request\n", ndefault,
           wd / (double)requests);
    printf("  fitted classes  (%u): %.2f bytes wasted per request\n", n, wf / (double)requests);
    printf("  written to %s (use: uslab run --classes=%s -- ...)\n", out, out);
    if (code)
        fprintf(stderr, "uslab profile: %s exited with status %d\n", prog[0], code);
    return code;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        usage_error("missing command");
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        print_help(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("uslab %s\n", USLAB_TOOL_VERSION);
        return 0;
    }
    if (!strcmp(cmd, "run"))
        return cmd_run(argc - 2, argv + 2);
    if (!strcmp(cmd, "where"))
        return cmd_where(argc - 2, argv + 2);
    if (!strcmp(cmd, "profile"))
        return cmd_profile(argc - 2, argv + 2);
    if (!strcmp(cmd, "settings"))
        return cmd_settings(argc - 2, argv + 2);
    usage_error("unknown command '%s'", cmd);
    return EXIT_USAGE;
}
