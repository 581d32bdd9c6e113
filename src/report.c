/* SPDX-License-Identifier: MIT */
/*
 * report.c - error messages. They are formatted into a stack buffer and written with one
 * write(2), so a report works with a corrupted heap and from inside the allocator.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>

static void report_vwrite(const char *fmt, va_list ap)
{
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "uslab: ");
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    if (m < 0)
        m = 0;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof buf - 2)
        len = sizeof buf - 2;
    buf[len++] = '\n';
    usi_os_write_err(buf, len);
}

void usi_report_fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    report_vwrite(fmt, ap);
    va_end(ap);
    abort();
}

void usi_report_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    report_vwrite(fmt, ap);
    va_end(ap);
}

int usi_report_verbose;

void usi_report_note(const char *fmt, ...)
{
    if (!__atomic_load_n(&usi_report_verbose, __ATOMIC_RELAXED))
        return;
    va_list ap;
    va_start(ap, fmt);
    report_vwrite(fmt, ap);
    va_end(ap);
}

void usi_report_assert(const char *expr, const char *file, int line)
{
    usi_report_fatal("assertion failed: %s (%s:%d)", expr, file, line);
}
