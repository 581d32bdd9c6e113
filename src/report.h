/* SPDX-License-Identifier: MIT */
/*
 * report.h - the report layer (rank 3, report.c; docs/design.md §1): error messages that
 * never allocate, fatal errors, and the invariant checks USI_ASSERT, whose failures it
 * reports.
 */
#ifndef USLAB_REPORT_H
#define USLAB_REPORT_H

#include "base.h"
#include "os.h"

#include <stdarg.h>
#include <stddef.h>

#pragma GCC visibility push(hidden)

/* uslab's own snprintf for messages (report.c: the conversions it knows; no libc, little
 * stack): at most cap - 1 characters and a NUL into buf; returns how many were written. */
size_t usi_report_vformat(char *buf, size_t cap, const char *fmt, va_list ap);
size_t usi_report_format(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prints "uslab: <message>\n" to stderr and aborts. */
USI_NORETURN void usi_report_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Set (atomic) while a report is formatted into the one static line that it is written
 * from; a report that finds it set writes its line in pieces from a small stack buffer. */
extern int usi_report_line_taken;
/* Prints "uslab: <message>\n" to stderr: for misuse, and for what a USLAB_* setting asked
 * about (a bad value of that setting). */
void usi_report_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The same, only when usi_report_verbose is set: for what uslab copes with on its own and
 * the program need not hear about (slabs disabled, a span abandoned, no purger thread). A
 * guest writes nothing to its host's stderr unless asked (USLAB_DEBUG or USLAB_STATS). */
void usi_report_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
extern int usi_report_verbose; /* set at initialisation (init.c) */
/* A failed USI_ASSERT: "uslab: assertion failed: <expr> (file:line)", then abort. */
USI_NORETURN USI_COLD void usi_report_assert(const char *expr, const char *file, int line);

/* USI_ASSERT checks an invariant in builds with USLAB_ASSERTS (the default except in
 * Release builds; see CMakeLists.txt); it is never used on a fast path. */
/* USI_ASSERT_NO_LOCK: the thread holds no uslab lock (usi_lock_depth, os.h), as every user
 * callback must run (design §6). */
#ifdef USLAB_ASSERTS
#define USI_ASSERT(x)        ((x) ? (void)0 : usi_report_assert(#x, __FILE__, __LINE__))
#define USI_ASSERT_NO_LOCK() USI_ASSERT(usi_lock_depth == 0)
#else
#define USI_ASSERT(x)        ((void)0)
#define USI_ASSERT_NO_LOCK() ((void)0)
#endif

#pragma GCC visibility pop

#endif
