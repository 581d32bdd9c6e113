/* SPDX-License-Identifier: MIT */
/*
 * test_report_format.c - uslab's own message formatter (report.c, usi_report_format), which
 * replaced vsnprintf in reports so that a report fits on a small signal stack (session
 * 16): for every conversion it knows, the same text as glibc's snprintf; truncation at the
 * buffer's end with a NUL; and a conversion it does not know ends the formatting with the
 * rest of the format as it is, reading no argument for it. And a report's line (session
 * 17): written whole from the shared static line, or in pieces from a small stack buffer
 * while that line is taken (a report inside a report), with the same text either way.
 */
#include "check.h"
#include "report.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int cases;

#define SAME(...)                                                                                  \
    do {                                                                                           \
        char mine[256], libc[256];                                                                 \
        size_t n = usi_report_format(mine, sizeof mine, __VA_ARGS__);                              \
        int m = snprintf(libc, sizeof libc, __VA_ARGS__);                                          \
        CHECK(strcmp(mine, libc) == 0 && n == (size_t)m,                                           \
              "format %s: \"%s\" (%zu), snprintf \"%s\"", #__VA_ARGS__, mine, n, libc);            \
        cases++;                                                                                   \
    } while (0)

int main(void)
{
    int x = 0;
    SAME("plain text");
    SAME("%%");
    SAME("%s and %s", "one", "two");
    SAME("[%.*s]", 3, "abcdef");
    SAME("[%.*s]", 10, "abc");
    SAME("[%10s][%-10s]", "right", "left");
    SAME("%c%c%c", 'u', 's', 'l');
    SAME("%p", (void *)&x);
    SAME("%p", (void *)0x1234);
    SAME("%p", (void *)NULL);
    SAME("%d %d %d", 0, -1, INT_MIN);
    SAME("%i %d", INT_MAX, 42);
    SAME("%u %u", 0u, UINT_MAX);
    SAME("%x %#x %#x", 255u, 255u, 0u);
    SAME("%ld %lu %lx", LONG_MIN, ULONG_MAX, 0xdeadbeefUL);
    SAME("%lld %llu", LLONG_MIN, ULLONG_MAX);
    SAME("%zu %zx", (size_t)SIZE_MAX, (size_t)4096);
    SAME("%jd %ju", INTMAX_MIN, UINTMAX_MAX);
    SAME("[%5u][%-5u][%05u]", 42u, 42u, 42u);
    SAME("[%05d][%5d][%-5d]", -42, -42, -42);
    SAME("%hu %hhu", (unsigned short)65535, (unsigned char)255);
    SAME("object%+ld object%+ld [% d] [% d] [%+5d]", 16L, -8L, 3, -3, 7);
    SAME("[%#10x][%-#10x][%#010x][%010x]", 255u, 255u, 255u, 255u);
    SAME("[%+05d][%-+5d][% 05d][%-5d]", 42, 42, 42, -42);
    SAME("[%20p][%-20p][%20p]", (void *)0xabc, (void *)0xabc, (void *)NULL);
    SAME("[%020zu][%-3zu]", (size_t)123, (size_t)123456);
    SAME("%s(%p): %s (the %s block is already free)", "free", (void *)0x7f0000001000, "double free",
         "malloc-64");

    /* Truncation: at most cap - 1 characters, then the NUL. */
    char small[8];
    size_t n = usi_report_format(small, sizeof small, "%s", "0123456789");
    CHECK(n == 7 && strcmp(small, "0123456") == 0, "truncated to \"%s\" (%zu)", small, n);
    n = usi_report_format(small, 1, "%d", 12345);
    CHECK(n == 0 && small[0] == '\0', "cap 1: \"%s\" (%zu)", small, n);

    /* A conversion it does not know: the rest of the format, no argument read. */
    char out[64];
    const char *fmt = "a=%d b=%f c=%d";
    n = usi_report_format(out, sizeof out, fmt, 1, 2.0, 3);
    CHECK(strcmp(out, "a=1 b=%f c=%d") == 0, "unknown conversion: \"%s\"", out);

    /* A report's line, whole and in pieces: what reaches stderr is the same. */
    char name[] = "/tmp/uslab-report-XXXXXX";
    int fd = mkstemp(name);
    CHECK(fd >= 0, "mkstemp");
    unlink(name);
    int saved = dup(2);
    CHECK(saved >= 0 && dup2(fd, 2) == 2, "redirect stderr");
    char longtext[301];
    for (int i = 0; i < 300; i++)
        longtext[i] = (char)('a' + i % 26);
    longtext[300] = '\0';
    usi_report_warn("whole %s %zu %p", longtext, (size_t)300, (void *)0x1000);
    CHECK(usi_report_line_taken == 0, "the line is given back after a report");
    usi_report_line_taken = 1; /* as inside another report */
    usi_report_warn("whole %s %zu %p", longtext, (size_t)300, (void *)0x1000);
    usi_report_line_taken = 0;
    dup2(saved, 2);
    close(saved);
    char expect[512], got[1200];
    int len = snprintf(expect, sizeof expect, "uslab: whole %s %zu %p\n", longtext, (size_t)300,
                       (void *)0x1000);
    ssize_t r = pread(fd, got, sizeof got, 0);
    close(fd);
    CHECK(r == 2 * len && memcmp(got, expect, (size_t)len) == 0 &&
              memcmp(got + len, expect, (size_t)len) == 0,
          "stderr had %zd bytes, expected twice %d: \"%.*s\"", r, len, (int)(r > 0 ? r : 0), got);

    printf("%d formats as snprintf's\n", cases);
    TEST_DONE();
}
