/* SPDX-License-Identifier: MIT */
/*
 * report.c - error messages. They are formatted into a stack buffer and written with one
 * write(2), so a report works with a corrupted heap and from inside the allocator.
 *
 * The formatter is uslab's own (usi_report_vformat), not vsnprintf: glibc's takes about
 * 2 KiB of stack for its work buffer and state, and a report of a double free made in a
 * signal handler on an alternate stack of 5 or 6 KiB overflowed it (SIGSEGV, no message,
 * where glibc's own message fits: session 16's audit). It knows the conversions uslab's
 * messages use: %% %c %s %.*s %p %d %i %u %x with the length modifiers hh h l ll z and j,
 * the flags - 0 # + and space, and a width. Anything else ends the formatting (no argument
 * is read for it) with the rest of the format copied as it is. Invariant: it never writes
 * past cap, and buf is NUL-terminated when cap > 0.
 *
 * A report is formatted into one static buffer (report_line), taken by an atomic flag, and
 * written with one write(2), so that its line is not mixed with another's; a report made
 * while the buffer is taken (another thread's, a signal handler's inside one, or a fork
 * child's of a report in flight) formats into a 128-byte stack buffer written as it fills.
 * No report keeps a line-sized buffer on the stack (session 17: a double free reported
 * from a handler on an alternate stack needed 4,616 bytes with a 1 KiB stack buffer).
 */
#include "report.h"
#include "base.h"
#include "os.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct sink {
    char *buf;
    size_t cap, len; /* len: characters held, at most cap - 1 */
    int flush;       /* written to standard error and emptied when full, not truncated */
};

static void put_char(struct sink *o, char ch)
{
    if (o->len + 1 >= o->cap && o->flush) {
        usi_os_write_err(o->buf, o->len);
        o->len = 0;
    }
    if (o->len + 1 < o->cap)
        o->buf[o->len++] = ch;
}

static void put_padded(struct sink *o, const char *s, size_t n, unsigned width, int left, char pad)
{
    size_t fill = width > n ? width - n : 0;
    if (!left)
        while (fill--)
            put_char(o, pad);
    for (size_t i = 0; i < n; i++)
        put_char(o, s[i]);
    if (left)
        while (fill--)
            put_char(o, ' ');
}

/* v in base (10 or 16), after the sign character `sign` if not 0, "0x" if prefix. */
static void put_number(struct sink *o, uintmax_t v, char sign, unsigned base, int prefix,
                       unsigned width, int left, int zero)
{
    char digits[3 * sizeof(uintmax_t)];
    char *end = digits + sizeof digits, *p = end;
    do {
        *--p = "0123456789abcdef"[v % base];
        v /= base;
    } while (v);
    size_t n = (size_t)(end - p), nhead = (sign != 0) + 2 * (prefix != 0);
    size_t fill = width > n + nhead ? width - n - nhead : 0;
    if (!left && !zero) /* spaces before the sign and prefix, zeros after them */
        for (; fill; fill--)
            put_char(o, ' ');
    if (sign)
        put_char(o, sign);
    if (prefix) {
        put_char(o, '0');
        put_char(o, 'x');
    }
    if (!left)
        for (; fill; fill--)
            put_char(o, '0');
    put_padded(o, p, n, 0, 0, ' ');
    for (; fill; fill--)
        put_char(o, ' ');
}

static size_t vformat(struct sink *o, const char *fmt, va_list ap);

size_t usi_report_vformat(char *buf, size_t cap, const char *fmt, va_list ap)
{
    struct sink o = {buf, cap, 0, 0};
    return vformat(&o, fmt, ap);
}

static size_t vformat(struct sink *o, const char *fmt, va_list ap)
{
    const char *f = fmt;
    while (*f) {
        if (*f != '%') {
            put_char(o, *f++);
            continue;
        }
        const char *start = f++;
        int left = 0, zero = 0, alt = 0;
        char plus = 0; /* '+' or ' ': the sign of a non-negative d or i */
        for (;; f++) {
            if (*f == '-')
                left = 1;
            else if (*f == '0')
                zero = 1;
            else if (*f == '#')
                alt = 1;
            else if (*f == '+' || (*f == ' ' && plus != '+'))
                plus = *f;
            else
                break;
        }
        unsigned width = 0;
        while (*f >= '0' && *f <= '9' && width < 1000)
            width = width * 10 + (unsigned)(*f++ - '0');
        int precision = -1;
        if (f[0] == '.' && f[1] == '*') {
            precision = va_arg(ap, int);
            f += 2;
        }
        int size = 0; /* 0 int, 1 long, 2 long long, 3 size_t, 4 intmax_t */
        if (f[0] == 'h')
            f += f[1] == 'h' ? 2 : 1; /* promoted to int anyway */
        else if (f[0] == 'l' && f[1] == 'l')
            size = 2, f += 2;
        else if (f[0] == 'l')
            size = 1, f++;
        else if (f[0] == 'z')
            size = 3, f++;
        else if (f[0] == 'j')
            size = 4, f++;
        char conv = *f;
        if (conv)
            f++;
        switch (conv) {
        case '%':
            put_char(o, '%');
            break;
        case 'c': {
            char ch = (char)va_arg(ap, int);
            put_padded(o, &ch, 1, width, left, ' ');
            break;
        }
        case 's': {
            const char *s = va_arg(ap, const char *);
            if (!s)
                s = "(null)";
            size_t n = 0;
            while (s[n] && (precision < 0 || n < (size_t)precision))
                n++;
            put_padded(o, s, n, width, left, ' ');
            break;
        }
        case 'p': {
            void *p = va_arg(ap, void *);
            if (p)
                put_number(o, (uintptr_t)p, 0, 16, 1, width, left, 0);
            else
                put_padded(o, "(nil)", 5, width, left, ' ');
            break;
        }
        case 'd':
        case 'i': {
            intmax_t v = size == 0   ? va_arg(ap, int)
                         : size == 1 ? va_arg(ap, long)
                         : size == 2 ? va_arg(ap, long long)
                         : size == 3 ? (intmax_t)va_arg(ap, ptrdiff_t)
                                     : va_arg(ap, intmax_t);
            uintmax_t mag = v < 0 ? (uintmax_t)0 - (uintmax_t)v : (uintmax_t)v;
            put_number(o, mag, v < 0 ? '-' : plus, 10, 0, width, left, zero);
            break;
        }
        case 'u':
        case 'x': {
            uintmax_t v = size == 0   ? va_arg(ap, unsigned)
                          : size == 1 ? va_arg(ap, unsigned long)
                          : size == 2 ? va_arg(ap, unsigned long long)
                          : size == 3 ? va_arg(ap, size_t)
                                      : va_arg(ap, uintmax_t);
            put_number(o, v, 0, conv == 'x' ? 16 : 10, conv == 'x' && alt && v, width, left, zero);
            break;
        }
        default: /* not one of uslab's: the rest as it is, no argument read */
            for (const char *r = start; *r; r++)
                put_char(o, *r);
            f = start + strlen(start);
            break;
        }
    }
    if (o->cap)
        o->buf[o->len] = '\0';
    return o->len;
}

size_t usi_report_format(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t n = usi_report_vformat(buf, cap, fmt, ap);
    va_end(ap);
    return n;
}

static char report_line[1024];
int usi_report_line_taken;

static const char report_head[] = "uslab: ";

/* A report while report_line is taken: written in pieces (a function of its own, so that
 * the usual report's frame does not hold the piece). */
static USI_NOINLINE void report_vwrite_pieces(const char *fmt, va_list ap)
{
    char piece[128];
    struct sink o = {piece, sizeof piece, 0, 1};
    for (const char *h = report_head; *h; h++)
        put_char(&o, *h);
    vformat(&o, fmt, ap);
    put_char(&o, '\n');
    usi_os_write_err(piece, o.len);
}

static void report_vwrite(const char *fmt, va_list ap)
{
    if (__atomic_exchange_n(&usi_report_line_taken, 1, __ATOMIC_ACQUIRE) != 0) {
        report_vwrite_pieces(fmt, ap);
        return;
    }
    struct sink o = {report_line, sizeof report_line - 1, 0, 0}; /* room for the \n */
    for (const char *h = report_head; *h; h++)
        put_char(&o, *h);
    size_t len = vformat(&o, fmt, ap);
    report_line[len++] = '\n';
    usi_os_write_err(report_line, len);
    __atomic_store_n(&usi_report_line_taken, 0, __ATOMIC_RELEASE);
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
