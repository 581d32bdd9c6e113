/* SPDX-License-Identifier: MIT */
/*
 * uslab - command-line front end of the uslab allocator: runs programs under the preload
 * library (run, profile), watches processes that run with it (stats, top) and prints what
 * it knows (where, settings, help, version).
 *
 * Every command, its synopsis, help and options are rows of one table, `commands` below:
 * `uslab --help`, `uslab COMMAND --help`, the usage lines of a usage error and `uslab help
 * --markdown` (docs/reference.md's command tables, compared by tests/tools) are all made from it,
 * so they cannot disagree. The settings and the debug letters come from the library's own
 * tables (src/settings.c, compiled in): --help and `uslab settings` print them, --debug is
 * checked by the library's parser, and docs/reference.md's settings table is `uslab settings
 * --markdown`.
 *
 * `uslab run` sets LD_PRELOAD (the library first, then any LD_PRELOAD already set) and the
 * USLAB_* variables the options ask for, then execs the program (execvp): the exit status
 * and signals are the program's own. Usage errors exit 2, a program that cannot be
 * executed 127.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "classes.h"
#include "settings.h"
#include "tool.h"

#ifndef USLAB_TOOL_VERSION
#define USLAB_TOOL_VERSION "0.1.0"
#endif
#ifndef USLAB_INSTALL_LIBDIR
#define USLAB_INSTALL_LIBDIR "lib"
#endif

#define PRELOAD_NAME "libuslab-preload.so"

/* ---- the table of commands -------------------------------------------------------------- */

/*
 * An option of a command. `help` is one paragraph, `code` in backquotes (markdown; the
 * text help leaves them out). `more`, if set, adds a generated part: in the text help the
 * lines printed after the paragraph, in markdown the rest of the table cell. Invariant:
 * spelling and help are set, but in the entry that ends a table (spelling NULL).
 */
struct tool_option {
    const char *spelling; /* as typed, alternatives separated by ", " */
    const char *help;
    void (*more)(FILE *f, int markdown);
};

/*
 * A command. Invariants: name is unique, and is what main() dispatches on (also `alias`);
 * synopsis is what follows "uslab <name>" in its usage line; options ends with an entry
 * whose spelling is NULL and lists every option the command's parser accepts.
 */
struct tool_command {
    const char *name;
    const char *alias; /* another spelling of the command (--version), or NULL */
    const char *synopsis;
    const char *help; /* one paragraph, `code` in backquotes */
    const struct tool_option *options;
    int (*main)(int argc, char **argv);
};

static int cmd_run(int argc, char **argv);
static int cmd_profile(int argc, char **argv);
static int cmd_where(int argc, char **argv);
static int cmd_settings(int argc, char **argv);
static int cmd_help(int argc, char **argv);
static int cmd_version(int argc, char **argv);
static void more_debug_letters(FILE *f, int markdown);
static void more_sort_keys(FILE *f, int markdown);

#define HELP_OPTION                                                                                \
    {                                                                                              \
        "--help, -h", "Print this command's help.", NULL                                           \
    }

static const struct tool_option run_options[] = {
    {"--debug[=LETTERS[,GLOB...]]",
     "Set `USLAB_DEBUG` to the value as given: debug LETTERS, then optional comma-separated "
     "GLOBs that select the caches to debug by name (malloc size classes are named "
     "`malloc-<size>`, e.g. `malloc-64`; without globs every cache is debugged). '-' is "
     "accepted and ignored, so `--debug=-` alone turns debugging off; `1`, `yes`, `on` and "
     "`true` mean the default letters, `0`, `no`, `off` and `false` none. `--debug` with no "
     "value (followed by `--` or another option) means the default letters. Quote globs for "
     "the shell: `uslab run --debug=FZ,'malloc-*' -- ./prog`.",
     more_debug_letters},
    {"--stats, --stats=table",
     "Set `USLAB_STATS=1`: print a slabinfo-style statistics table on stderr at exit.", NULL},
    {"--stats=json", "Set `USLAB_STATS=json`: print the statistics as JSON at exit.", NULL},
    {"--leaks",
     "Set `USLAB_LEAKS=1`: report blocks still allocated at exit, grouped by allocation stack, "
     "largest first.",
     NULL},
    {"--leaks=json", "Set `USLAB_LEAKS=json`: the same report as JSON, for tools.", NULL},
    {"--continue",
     "Set `USLAB_DEBUG_CONTINUE=1`: after a BUG report, continue instead of aborting.", NULL},
    {"--classes=FILE",
     "Set `USLAB_CLASSES=FILE`: use the size classes of FILE (from `uslab "
     "profile`).",
     NULL},
    {"--preload=PATH", "Use PATH as the preload library (see PRELOAD LIBRARY in `uslab --help`).",
     NULL},
    {"--env NAME=VALUE, --env=NAME=VALUE",
     "Set any `USLAB_*` variable (NAME must start with `USLAB_`), e.g. `--env "
     "USLAB_PURGE_DELAY=0`. May be repeated.",
     NULL},
    HELP_OPTION,
    {NULL, NULL, NULL},
};

static const struct tool_option profile_options[] = {
    {"-o FILE, --output=FILE", "Write the fitted table to FILE (default `uslab-classes.txt`).",
     NULL},
    {"--max-classes=N",
     "At most N size classes up to 32 KiB (default 73, as many as the default table has; at "
     "most 96 less the medium classes).",
     NULL},
    {"--max-size=BYTES",
     "The largest class: a power of two from 1024 to 1M (default 256K, as the library's). The "
     "classes up to 32 KiB are fitted; above, the medium classes are the default table's (2 "
     "per doubling). Larger requests go to glibc.",
     NULL},
    {"--preload=PATH", "Use PATH as the preload library.", NULL},
    HELP_OPTION,
    {NULL, NULL, NULL},
};

static const struct tool_option stats_options[] = {
    {"--json",
     "Print JSON: the object of `uslab_stats_print`'s JSON with the process's `pid`, "
     "`command`, `updated_ms_ago` (0: read now), `updates` (1) and `caches_in_use` added, and per "
     "cache the cumulative "
     "counts `slab_takes`, `slab_puts`, `depot_in` and `depot_out`.",
     NULL},
    HELP_OPTION,
    {NULL, NULL, NULL},
};

static const struct tool_option top_options[] = {
    {"-d SECONDS, --delay=SECONDS", "Refresh every SECONDS (default 1, at least 0.1).", NULL},
    {"-s KEY, --sort=KEY",
     "Order the caches by KEY, largest first (names A to Z):", more_sort_keys},
    {"-n COUNT, --iterations=COUNT", "Exit after COUNT refreshes (default: until q).", NULL},
    HELP_OPTION,
    {NULL, NULL, NULL},
};

static const struct tool_option where_options[] = {
    {"--preload=PATH", "Check PATH instead of searching.", NULL},
    HELP_OPTION,
    {NULL, NULL, NULL},
};

static const struct tool_option settings_options[] = {
    {"--markdown", "Print the table as in docs/reference.md.", NULL},
    HELP_OPTION,
    {NULL, NULL, NULL},
};

static const struct tool_option help_options[] = {
    {"--markdown", "Print the commands and their options as the tables in docs/reference.md.",
     NULL},
    HELP_OPTION,
    {NULL, NULL, NULL},
};

static const struct tool_option version_options[] = {
    HELP_OPTION,
    {NULL, NULL, NULL},
};

static const struct tool_command commands[] = {
    {"run", NULL, "[options] -- program [args...]",
     "Run program with `LD_PRELOAD` set to `libuslab-preload.so` (in front of any "
     "`LD_PRELOAD` already set) and the `USLAB_*` variables the options ask for, then exec it: "
     "the exit status and signals are the program's own. The program is looked up in PATH; "
     "the '--' before it is required. Options apply in the order given (a later one setting "
     "the same variable wins); variables no option sets keep their value from uslab's own "
     "environment.",
     run_options, cmd_run},
    {"profile", NULL, "[options] -- program [args...]",
     "Run program under the preload library with `USLAB_PROFILE` set, so that every "
     "malloc-family request is counted by size (in the program and in the programs it runs), "
     "then write the table of size classes that wastes the fewest bytes on those requests, and "
     "print the waste of the default and of the fitted table. Use the file with `uslab run "
     "--classes=FILE` or `USLAB_CLASSES=FILE`. Exits with the program's status if it failed "
     "(the file is written all the same), else 0.",
     profile_options, cmd_profile},
    {"stats", NULL, "PID [--json]",
     "Print once the statistics of every cache of process PID, a process running with uslab "
     "(preloaded, under `uslab run`, or linked with it): the table of `uslab_stats_print` "
     "(with Resident, the pages its slabs' objects have used), or JSON. They are read from the "
     "process's memory (process_vm_readv), current to the moment, also for a process that has "
     "been idle for hours: the process keeps no file and runs no code for it. Reading another "
     "process's memory needs what a debugger needs: a process of yours, or root (and "
     "`/proc/sys/kernel/yama/ptrace_scope` may ask for more). Exits 1 with a message when PID "
     "is no process, does not use uslab or has not allocated yet, cannot be read (with the "
     "reason and what to do), or runs a uslab of another build. The columns (also of "
     "USLAB_STATS): Name, the cache (malloc-SIZE: a malloc class); Objects, objects in use; "
     "Objsize, their size; Space, bytes of its slabs; Resident, bytes of its slabs that objects "
     "were ever handed out over (an estimate: more than is resident where objects use only "
     "some of their pages, as uslab's thread caches do); Slabs/Part/Cpu, slabs, partly used "
     "slabs, objects cached in threads' magazines; O/S, objects a slab holds; %Fr, free slots "
     "in its slabs; %Ef, share of its slabs' bytes that objects in use fill; Flg, USLAB_DEBUG "
     "letters. uslab's own caches (uslab-...) come after the program's. Under the table: the "
     "bytes in use in slabs and in blocks of the system allocator (those above the slab "
     "classes: count, bytes, peak), the bytes of slabs held, uslab's own, and the process's "
     "resident memory now and at its peak (VmRSS, VmHWM).",
     stats_options, cmd_stats},
    {"top", NULL, "PID [-d SECONDS] [-s KEY] [-n COUNT]",
     "Show the caches of process PID, a process running with uslab, in a refreshing "
     "slabtop-style view: objects, active objects, object size, slabs, partial slabs, objects "
     "cached in magazines, resident bytes, and churn: the objects that went through a cache's "
     "depot or slab layer since the last refresh (magazine hits count nothing). Keys: the "
     "letters of -s change the order, q quits. The terminal is restored on exit, also after "
     "SIGINT. When the process exits, top says so and exits. Each refresh reads the process's "
     "memory as `uslab stats` does (process_vm_readv), current to the moment, for a process of "
     "yours (or as root); without a terminal it prints each refresh as plain text.",
     top_options, cmd_top},
    {"where", NULL, "[--preload=PATH]",
     "Print the path of the preload library `uslab run` would use (see PRELOAD LIBRARY in "
     "`uslab --help`); exit 1 if there is none.",
     where_options, cmd_where},
    {"settings", NULL, "[--markdown]",
     "Print the `USLAB_*` variables the allocator reads, with what they accept and their "
     "defaults.",
     settings_options, cmd_settings},
    {"help", "--help", "[COMMAND] [--markdown]",
     "Print this help (also `uslab --help`, `uslab -h`), or one command's part of it (also "
     "`uslab COMMAND --help`).",
     help_options, cmd_help},
    {"version", "--version", "", "Print the version (also `uslab --version`).", version_options,
     cmd_version},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static const struct tool_command *find_command(const char *name)
{
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (!strcmp(commands[i].name, name) ||
            (commands[i].alias && !strcmp(commands[i].alias, name)))
            return &commands[i];
    return NULL;
}

/* ---- help text ---------------------------------------------------------------------------- */

#define HELP_WIDTH 90

/*
 * Prints text word by word, wrapped at HELP_WIDTH, with the markdown backquotes left out.
 * The first line starts with label, padded to indent columns (a label too long for that
 * gets a line of its own); the others with indent spaces.
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

/* --debug's letters, from the library's table. */
static void more_debug_letters(FILE *f, int markdown)
{
    if (markdown) {
        fprintf(f, " LETTERS, in either case (none means `%s`, as Linux's `slub_debug`):",
                letter_list(1));
        for (size_t i = 0; i < usi_settings_nletters; i++)
            fprintf(f, "%s `%c` %s", i ? ";" : "", usi_settings_letters[i].letter,
                    usi_settings_letters[i].help);
        fputc('.', f);
        return;
    }
    char text[256];
    snprintf(text, sizeof text,
             "LETTERS, in either case (none, as in --debug= or --debug=,GLOB, means %s, as "
             "Linux's slub_debug):",
             letter_list(1));
    print_wrapped(f, "", 6, text);
    for (size_t i = 0; i < usi_settings_nletters; i++) {
        char label[16];
        snprintf(label, sizeof label, "        %c", usi_settings_letters[i].letter);
        print_wrapped(f, label, 11, usi_settings_letters[i].help);
    }
}

static void more_sort_keys(FILE *f, int markdown)
{
    if (markdown) {
        fputc(' ', f);
        print_top_sort_keys(f);
        return;
    }
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    if (!m)
        return;
    print_top_sort_keys(m);
    fclose(m);
    print_wrapped(f, "", 6, text);
    free(text);
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

/* The settings as docs/reference.md's table (tests/tools checks that they are the same). */
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

/* "uslab NAME SYNOPSIS" into buf. */
static const char *command_line(const struct tool_command *c, char *buf, size_t len)
{
    snprintf(buf, len, "uslab %s%s%s", c->name, c->synopsis[0] ? " " : "", c->synopsis);
    return buf;
}

static void print_usage_lines(FILE *f, const struct tool_command *only)
{
    for (size_t i = 0; i < NCOMMANDS; i++) {
        const struct tool_command *c = &commands[i];
        if (only && c != only)
            continue;
        char line[256];
        fprintf(f, "%s%s\n", i == 0 || only ? "usage: " : "       ",
                command_line(c, line, sizeof line));
    }
}

static void print_command_text(FILE *f, const struct tool_command *c)
{
    char line[256];
    fprintf(f, "  %s\n", command_line(c, line, sizeof line));
    print_wrapped(f, "", 6, c->help);
}

static void print_options_text(FILE *f, const struct tool_command *c)
{
    if (!c->options[0].spelling)
        return;
    fprintf(f, "\nOPTIONS OF uslab %s\n", c->name);
    for (const struct tool_option *o = c->options; o->spelling; o++) {
        fprintf(f, "  %s\n", o->spelling);
        print_wrapped(f, "", 6, o->help);
        if (o->more)
            o->more(f, 0);
    }
}

static const char help_environment[] =
    "\n"
    "ENVIRONMENT READ BY THE ALLOCATOR (once, at the first allocation; sizes accept K, M, G)\n";

static const char help_tool_environment[] =
    "\n"
    "ENVIRONMENT READ BY THIS TOOL\n"
    "  USLAB_PRELOAD_LIB     path of the preload library (default: found as below)\n"
    "  LD_PRELOAD            kept, after the uslab library\n"
    "  PATH                  where the program is looked up\n"
    "\n"
    "PRELOAD LIBRARY\n"
    "  The first of: --preload=PATH; $USLAB_PRELOAD_LIB; " PRELOAD_NAME " in the\n"
    "  directory of the uslab executable; in its parent directory (a build tree's\n"
#ifdef USLAB_INSTALL_LIBDIR_IS_LIB
    "  tools/); <dir>/../lib/" PRELOAD_NAME " (an installed bin/uslab). The\n"
    "  executable's directory comes from /proc/self/exe.\n";
#else
    "  tools/); <dir>/../" USLAB_INSTALL_LIBDIR "/" PRELOAD_NAME " and <dir>/../lib/" PRELOAD_NAME
    " (an\n"
    "  installed bin/uslab). The executable's directory comes from /proc/self/exe.\n";
#endif

static const char help_tail[] =
    "\n"
    "EXIT STATUS\n"
    "  uslab run exits with the program's status (it replaces itself with the program);\n"
    "  2 on a usage error, 127 if the program cannot be executed, 1 if no preload library\n"
    "  is found. uslab where exits 0 if it found the library, else 1. uslab stats and\n"
    "  uslab top exit 1 when they cannot read the process, else 0.\n"
    "\n"
    "EXAMPLES\n"
    "  uslab run --stats -- python3 script.py\n"
    "  uslab run --debug=FZP,'conn*' --continue -- ./server --port 8080\n"
    "  uslab run --leaks --env USLAB_MAX_SLAB_SIZE=8K -- ./prog\n"
    "  uslab top -s r $(pidof server)\n"
    "  uslab stats --json 4242\n";

/* uslab --help: every command, every option, the settings and the rest. */
static void print_help(FILE *f)
{
    fputs("uslab - run programs under uslab, a user-space slab allocator, and watch them\n"
          "\nUSAGE\n",
          f);
    for (size_t i = 0; i < NCOMMANDS; i++) {
        char line[256];
        fprintf(f, "  %s\n", command_line(&commands[i], line, sizeof line));
    }
    fputs("\nCOMMANDS\n", f);
    for (size_t i = 0; i < NCOMMANDS; i++)
        print_command_text(f, &commands[i]);
    for (size_t i = 0; i < NCOMMANDS; i++)
        print_options_text(f, &commands[i]);
    fputs(help_environment, f);
    print_settings_text(f);
    fputs(help_tool_environment, f);
    fputs(help_tail, f);
}

void print_command_help(FILE *f, const char *name)
{
    const struct tool_command *c = find_command(name);
    if (!c) {
        print_help(f);
        return;
    }
    print_usage_lines(f, c);
    fputc('\n', f);
    print_command_text(f, c);
    print_options_text(f, c);
    if (c->main == cmd_run || c->main == cmd_profile) {
        fputs(help_environment, f);
        print_settings_text(f);
        fputs(help_tool_environment, f);
    }
}

/* The commands and their options as docs/reference.md's tables (tests/tools compares them). */
static void print_commands_markdown(FILE *f)
{
    fputs("| command | what it does |\n| --- | --- |\n", f);
    for (size_t i = 0; i < NCOMMANDS; i++) {
        char line[256];
        fprintf(f, "| `%s` | ", command_line(&commands[i], line, sizeof line));
        put_cell(f, commands[i].help);
        fputs(" |\n", f);
    }
    for (size_t i = 0; i < NCOMMANDS; i++) {
        const struct tool_command *c = &commands[i];
        if (!c->options[0].spelling)
            continue;
        fprintf(f, "\n| option of `uslab %s` | meaning |\n| --- | --- |\n", c->name);
        for (const struct tool_option *o = c->options; o->spelling; o++) {
            fputs("| ", f);
            /* Each spelling in backquotes: "`-d SECONDS`, `--delay=SECONDS`". */
            for (const char *p = o->spelling; *p;) {
                size_t n = strstr(p, ", ") ? (size_t)(strstr(p, ", ") - p) : strlen(p);
                fprintf(f, "`%.*s`", (int)n, p);
                p += n;
                if (*p) {
                    fputs(", ", f);
                    p += 2;
                }
            }
            fputs(" | ", f);
            put_cell(f, o->help);
            if (o->more)
                o->more(f, 1);
            fputs(" |\n", f);
        }
    }
}

int is_help_option(const char *arg)
{
    return !strcmp(arg, "--help") || !strcmp(arg, "-h");
}

void usage_error(const char *command, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("uslab: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    const struct tool_command *c = command ? find_command(command) : NULL;
    print_usage_lines(stderr, c);
    if (c)
        fprintf(stderr, "Try 'uslab %s --help' for more information.\n", c->name);
    else
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
        usage_error("run", "--env wants NAME=VALUE, got '%s'", setting);
    size_t n = (size_t)(eq - setting);
    if (n <= 6 || strncmp(setting, "USLAB_", 6) != 0)
        usage_error("run", "--env: only USLAB_* variables may be set, got '%s'", setting);
    for (size_t i = 0; i < n; i++) {
        char c = setting[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
            usage_error("run", "--env: invalid variable name in '%s'", setting);
    }
    char name[256];
    if (n >= sizeof name)
        usage_error("run", "--env: variable name too long in '%s'", setting);
    memcpy(name, setting, n);
    name[n] = '\0';
    set_env(name, eq + 1);
}

/* Whether path is a shared object that could be preloaded: a regular, readable ELF file of
 * type ET_DYN. Else 0 with errno set (EISDIR, ENOEXEC, or open's): before, a directory or
 * any readable file was taken, and `uslab run` ran the program without uslab, the dynamic
 * linker's one line aside, exiting 0 (session 16's audit). */
static int is_readable_file(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct stat st;
    unsigned char head[18];
    int ok = fstat(fd, &st) == 0;
    if (ok && S_ISDIR(st.st_mode)) {
        errno = EISDIR;
        ok = 0;
    } else if (ok && (!S_ISREG(st.st_mode) || read(fd, head, sizeof head) != (ssize_t)sizeof head ||
                      memcmp(head, "\177ELF", 4) != 0 || head[16] != 3 /* ET_DYN, little end */)) {
        errno = ENOEXEC;
        ok = 0;
    }
    int saved = errno;
    close(fd);
    errno = saved;
    return ok;
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
static int find_preload_path(const char *explicit_path, char out[PATH_MAX]);

/* find_preload_path, and a path LD_PRELOAD can hold: `uslab where` printed a path with a
 * space or colon that `uslab run` then refused (session 16's audit). */
static int find_preload(const char *explicit_path, char out[PATH_MAX])
{
    if (!find_preload_path(explicit_path, out))
        return 0;
    if (strpbrk(out, " :\t")) {
        fprintf(stderr,
                "uslab: preload library path '%s' contains a space or colon, which "
                "LD_PRELOAD cannot express\n",
                out);
        return 0;
    }
    return 1;
}

static int find_preload_path(const char *explicit_path, char out[PATH_MAX])
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

const char *option_value(const char *command, int argc, char **argv, int *i, const char *name)
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
        usage_error(command, "option %s needs a value", name);
    return argv[++*i];
}

static int cmd_where(int argc, char **argv)
{
    const char *preload = NULL;
    for (int i = 0; i < argc; i++) {
        const char *v;
        if (is_help_option(argv[i])) {
            print_command_help(stdout, "where");
            return 0;
        } else if ((v = option_value("where", argc, argv, &i, "--preload"))) {
            preload = v;
        } else {
            usage_error("where", "where: unexpected argument '%s'", argv[i]);
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
        } else if (is_help_option(argv[i])) {
            print_command_help(stdout, "settings");
            return 0;
        } else {
            usage_error("settings", "settings: unexpected argument '%s'", argv[i]);
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
        if (is_help_option(arg)) {
            print_command_help(stdout, "run");
            exit(0);
        } else if (!strcmp(arg, "--debug") && (i + 1 >= argc || !strncmp(argv[i + 1], "--", 2))) {
            set_env("USLAB_DEBUG", ""); /* no value (the next word is `--` or an option):
                                         * the default letters, as USLAB_DEBUG= */
        } else if ((v = option_value("run", argc, argv, &i, "--debug"))) {
            /* Accepted exactly when the library takes it without a warning. */
            unsigned letters;
            const char *globs;
            char bad = 0;
            int rc = usi_settings_parse_debug(v, &letters, &globs, &bad);
            if (rc == -1)
                usage_error("run",
                            "--debug: unknown letter '%c' in '%s' (want letters of %s in "
                            "either case, or none, then optional ,GLOBs)",
                            bad, v, letter_list(0));
            else if (rc != 0)
                usage_error("run", "--debug: a glob has '%c' in '%s' (globs have only * and ?)",
                            bad, v);
            set_env("USLAB_DEBUG", v);
        } else if (!strcmp(arg, "--stats") || !strcmp(arg, "--stats=table")) {
            set_env("USLAB_STATS", "1");
        } else if (!strcmp(arg, "--stats=json")) {
            set_env("USLAB_STATS", "json");
        } else if (!strncmp(arg, "--stats=", 8)) {
            usage_error("run", "--stats: unknown format '%s' (want table or json)", arg + 8);
        } else if (!strcmp(arg, "--leaks")) {
            set_env("USLAB_LEAKS", "1");
        } else if (!strcmp(arg, "--leaks=json")) {
            set_env("USLAB_LEAKS", "json");
        } else if (!strncmp(arg, "--leaks=", 8)) {
            usage_error("run", "--leaks: unknown format '%s' (want json)", arg + 8);
        } else if (!strcmp(arg, "--continue")) {
            set_env("USLAB_DEBUG_CONTINUE", "1");
        } else if ((v = option_value("run", argc, argv, &i, "--classes"))) {
            if (!*v)
                usage_error("run", "--classes needs a file");
            set_env("USLAB_CLASSES", v);
        } else if ((v = option_value("run", argc, argv, &i, "--preload"))) {
            if (!*v)
                usage_error("run", "--preload needs a path");
            preload = v;
        } else if ((v = option_value("run", argc, argv, &i, "--env"))) {
            apply_env_setting(v);
        } else if (arg[0] == '-') {
            usage_error("run", "run: unknown option '%s'", arg);
        } else {
            usage_error("run", "run: expected '--' before the program, got '%s'", arg);
        }
    }
    if (i >= argc)
        usage_error("run", "run: missing '--' before the program");
    char **prog = argv + i + 1;
    if (!prog[0] || !prog[0][0])
        usage_error("run", "run: no program after '--'");

    char lib[PATH_MAX];
    if (!find_preload(preload, lib))
        return 1;
    set_ld_preload(lib);

    execvp(prog[0], prog);
    fprintf(stderr, "uslab: cannot execute %s: %s\n", prog[0], strerror(errno));
    return EXIT_NOEXEC;
}

/* ---- uslab profile ------------------------------------------------------------------------ */

/* Reads every <dir>/profile.<pid>.<image> (one per program image) into *p; how many files,
 * or -1. Everything in dir is removed, also the temporary files of a writer that was
 * killed (profile-tmp.*). */
static int read_profiles(const char *dir, struct size_profile *p)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int files = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char path[PATH_MAX + 256];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (strncmp(e->d_name, "profile.", 8) != 0) {
            unlink(path);
            continue;
        }
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
    size_t max_size = USI_SETTINGS_MAX_SLAB_SIZE_DEFAULT;
    unsigned max_classes = 0;
    int i;
    for (i = 0; i < argc; i++) {
        const char *arg = argv[i];
        const char *v;
        if (!strcmp(arg, "--"))
            break;
        if (is_help_option(arg)) {
            print_command_help(stdout, "profile");
            exit(0);
        } else if ((v = option_value("profile", argc, argv, &i, "-o")) ||
                   (v = option_value("profile", argc, argv, &i, "--output"))) {
            if (!*v)
                usage_error("profile", "profile: -o needs a file");
            out = v;
        } else if ((v = option_value("profile", argc, argv, &i, "--max-classes"))) {
            char *end;
            unsigned long n = strtoul(v, &end, 10);
            if (*end || n < 1 || n > USI_CLASSES_MAX)
                usage_error("profile", "--max-classes: want a number from 1 to %d, got '%s'",
                            USI_CLASSES_MAX, v);
            max_classes = (unsigned)n;
        } else if ((v = option_value("profile", argc, argv, &i, "--max-size"))) {
            if (usi_settings_parse_size(v, &max_size) != 0 || max_size < 1024 ||
                max_size > USI_CLASSES_MAX_SIZE || (max_size & (max_size - 1)) != 0)
                usage_error("profile", "--max-size: want a power of two from 1024 to 1M, got '%s'",
                            v);
        } else if ((v = option_value("profile", argc, argv, &i, "--preload"))) {
            preload = v;
        } else if (arg[0] == '-') {
            usage_error("profile", "profile: unknown option '%s'", arg);
        } else {
            usage_error("profile", "profile: expected '--' before the program, got '%s'", arg);
        }
    }
    if (i >= argc || !argv[i + 1] || !argv[i + 1][0])
        usage_error("profile", "profile: missing '--' and a program");
    char **prog = argv + i + 1;
    /* Fitted up to 32 KiB; above, the default table's medium classes (the profile counts
     * sizes one by one only up to 64 KiB). */
    size_t fit_max = max_size < USI_MEDIUM ? max_size : USI_MEDIUM;
    size_t defaults[USI_CLASSES_MAX];
    unsigned ndefault = usi_classes_default(max_size, defaults), nmedium = 0;
    while (nmedium < ndefault && defaults[ndefault - 1 - nmedium] > USI_MEDIUM)
        nmedium++;
    if (!max_classes)
        max_classes = ndefault - nmedium;
    if (max_classes > USI_CLASSES_MAX - nmedium)
        usage_error("profile", "--max-classes: at most %u with %u medium classes up to %zu",
                    USI_CLASSES_MAX - nmedium, nmedium, max_size);

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
    /* The profile shim, beside the preload library: preloaded after it (its wrappers write
     * the counts before _exit, exec, daemon and a seccomp filter, design §8). */
    char shim[PATH_MAX];
    const char *slash = strrchr(lib, '/');
    int dirlen = slash ? (int)(slash - lib) : 1;
    snprintf(shim, sizeof shim, "%.*s/libuslab-profile.so", dirlen, slash ? lib : ".");
    int have_shim = access(shim, R_OK) == 0;
    if (!have_shim)
        fprintf(stderr,
                "uslab profile: %s not found: the requests of a process that leaves by _exit "
                "or exec are not counted\n",
                shim);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "uslab profile: fork: %s\n", strerror(errno));
        rmdir(dir);
        return 1;
    }
    if (pid == 0) {
        if (have_shim)
            set_ld_preload(shim);
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
    uint64_t requests = profile_requests(&prof, fit_max);
    uint64_t above = profile_requests(&prof, USI_PROFILE_MAX_SIZE) - requests + prof.above;
    if (files <= 0 && WIFSIGNALED(status)) {
        fprintf(stderr,
                "uslab profile: no profile was written: %s was killed by signal %d (%s) "
                "before it could write one\n",
                prog[0], WTERMSIG(status), strsignal(WTERMSIG(status)));
        return code;
    }
    if (files <= 0) {
        /* The preload library writes one at every exit it sees (exit, _exit, quick_exit,
         * exit_group, exec): none means no request at all, or an end it could not see. */
        fprintf(stderr,
                "uslab profile: no profile was written: %s made no malloc-family request "
                "under the preload library, or ended without an exit it could see (a direct "
                "system call, a static program, LD_PRELOAD removed)\n",
                prog[0]);
        return code ? code : 1;
    }
    if (requests == 0) {
        fprintf(stderr,
                "uslab profile: %s made no request of %zu bytes or less, the sizes a table fits "
                "(%d profile%s)\n",
                prog[0], fit_max, files, files == 1 ? "" : "s");
        return code ? code : 1;
    }
    size_t fitted[USI_CLASSES_MAX];
    unsigned n = classes_fit(&prof, fit_max, max_classes, fitted);
    if (n == 0) {
        fprintf(stderr, "uslab profile: %u classes cannot hold the powers of two up to %zu\n",
                max_classes, fit_max);
        return EXIT_USAGE;
    }
    for (unsigned k = ndefault - nmedium; k < ndefault; k++)
        fitted[n++] = defaults[k];
    double wd = profile_waste(&prof, defaults, ndefault), wf = profile_waste(&prof, fitted, n);
    if (write_classes(out, fitted, n, prog, requests, wd, wf) != 0)
        return 1;
    printf("uslab profile: %llu requests up to %zu bytes, %llu above (from %d process%s)\n",
           (unsigned long long)requests, fit_max, (unsigned long long)above, files,
           files == 1 ? "" : "es");
    printf("  default classes (%u): %.2f bytes wasted per request\n", ndefault,
           wd / (double)requests);
    printf("  fitted classes  (%u): %.2f bytes wasted per request\n", n, wf / (double)requests);
    printf("  written to %s (use: uslab run --classes=%s -- ...)\n", out, out);
    if (WIFSIGNALED(status)) /* a child process wrote the profile before (session 16) */
        fprintf(stderr, "uslab profile: %s was killed by signal %d (%s)\n", prog[0],
                WTERMSIG(status), strsignal(WTERMSIG(status)));
    else if (code)
        fprintf(stderr, "uslab profile: %s exited with status %d\n", prog[0], code);
    return code;
}

static int cmd_help(int argc, char **argv)
{
    int markdown = 0;
    const char *command = NULL;
    for (int i = 0; i < argc; i++) {
        if (is_help_option(argv[i]))
            command = "help";
        else if (!strcmp(argv[i], "--markdown"))
            markdown = 1;
        else if (argv[i][0] != '-' && !command && find_command(argv[i]))
            command = argv[i];
        else if (argv[i][0] != '-' && !command)
            usage_error("help", "help: unknown command '%s'", argv[i]);
        else
            usage_error("help", "help: unexpected argument '%s'", argv[i]);
    }
    if (markdown && command)
        usage_error("help", "help: --markdown prints every command");
    if (markdown)
        print_commands_markdown(stdout);
    else if (command)
        print_command_help(stdout, command);
    else
        print_help(stdout);
    return 0;
}

static int cmd_version(int argc, char **argv)
{
    for (int i = 0; i < argc; i++) {
        if (is_help_option(argv[i])) {
            print_command_help(stdout, "version");
            return 0;
        }
        usage_error("version", "version: unexpected argument '%s'", argv[i]);
    }
    printf("uslab %s\n", USLAB_TOOL_VERSION);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        usage_error(NULL, "missing command");
    if (!strcmp(argv[1], "-h"))
        return cmd_help(argc - 2, argv + 2);
    const struct tool_command *c = find_command(argv[1]);
    if (!c)
        usage_error(NULL, "unknown command '%s'", argv[1]);
    return c->main(argc - 2, argv + 2);
}
