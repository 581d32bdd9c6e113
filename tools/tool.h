/* SPDX-License-Identifier: MIT */
/*
 * tool.h - what the parts of the `uslab` command share: its usage errors and option
 * parsing (uslab.c), and the commands that read the statistics of a running process from
 * its memory (top.c: `uslab stats PID`, `uslab top PID`, docs/design.md §10.1).
 */
#ifndef USLAB_TOOLS_TOOL_H
#define USLAB_TOOLS_TOOL_H

#include <stdio.h>

#define EXIT_USAGE  2
#define EXIT_NOEXEC 127

/* "uslab: <message>", the usage lines of the command (NULL: of every command) and a hint
 * on stderr; exit 2. */
__attribute__((noreturn, format(printf, 2, 3))) void usage_error(const char *command,
                                                                 const char *fmt, ...);
/* The value of "--name=value" or "--name value" (advancing *i); NULL if argv[*i] is not
 * --name; a usage error of command if the value is missing. */
const char *option_value(const char *command, int argc, char **argv, int *i, const char *name);
/* Whether arg asks for help (--help, -h). */
int is_help_option(const char *arg);
/* `uslab <command> --help`: its part of the help (uslab.c). */
void print_command_help(FILE *f, const char *command);

/* top.c */
int cmd_stats(int argc, char **argv);
int cmd_top(int argc, char **argv);
/* The sort keys of `uslab top`, for its help: "`o` objects, `a` active (the default), ..."
 * (backquotes are left out of the text help). */
void print_top_sort_keys(FILE *f);

#endif
