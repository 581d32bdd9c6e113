/* SPDX-License-Identifier: MIT */
/*
 * classes_check - the size-class table functions: the default table, the rules of
 * usi_classes_check, the file parser (src/settings.c), and the fit of `uslab profile`
 * (tools/classes.c), checked against an exhaustive search on a small case.
 */
#include "check.h"
#include "classes.h"

#include <stdint.h>
#include <string.h>

static char where[64];

static const char *parse(const char *text, size_t *sizes, unsigned *n)
{
    return usi_classes_parse(text, strlen(text), sizes, n, where, sizeof where);
}

static void test_default(void)
{
    size_t s[USI_CLASSES_MAX];
    unsigned n = usi_classes_default(32768, s);
    CHECK(n == 73, "73 default classes, got %u", n);
    CHECK(s[0] == 16 && s[7] == 128 && s[8] == 144 && s[15] == 256 && s[n - 1] == 32768,
          "default sizes");
    CHECK(s[47] == 4096 && s[48] == 4480 && s[49] == 4608, "4480 between 4096 and 4608");
    CHECK(usi_classes_check(s, n) == NULL, "the default table passes its own rules");
    for (size_t max = 1024; max <= 65536; max *= 2) {
        n = usi_classes_default(max, s);
        CHECK(usi_classes_check(s, n) == NULL && s[n - 1] == max, "default up to %zu", max);
    }
}

static void test_rules(void)
{
    size_t s[USI_CLASSES_MAX + 8];
    unsigned n;
    CHECK(parse("uslab-classes 1\n16 32 64 128 256 512 1024\n", s, &n) == NULL && n == 7,
          "minimal table");
    CHECK(parse("uslab-classes 1\r\n# a comment\n\n16\t32 64 128 # end\n256 512 1024", s, &n) ==
              NULL,
          "comments, CR, tabs, no final newline");
    static const struct {
        const char *text, *why;
    } bad[] = {
        {"", "first line"},
        {"uslab-classes 10\n16 32 64 128 256 512 1024\n", "first line"},
        {"uslab-classes 1 x\n16 32 64 128 256 512 1024\n", "first line"},
        {"uslab-classes 1\n", "no sizes"},
        {"uslab-classes 1\n16 32 64 128 256 512 1000 1024\n", "multiple of 16"},
        {"uslab-classes 1\n8 16 32 64 128 256 512 1024\n", "multiple of 16"},
        {"uslab-classes 1\n0 16 32 64 128 256 512 1024\n", "a size is 0"},
        {"uslab-classes 1\n16 32 64 0 128 256 512 1024\n", "a size is 0"},
        {"uslab-classes 1\n16 32 64 128 256 512 1024 1088 2048\n", "multiple of 128"},
        {"uslab-classes 1\n16 32 64 128 256 1024\n", "power of two"},
        {"uslab-classes 1\n32 64 128 256 512 1024\n", "power of two"},
        {"uslab-classes 1\n16 32 64 64 128 256 512 1024\n", "increasing"},
        {"uslab-classes 1\n16 32 64 128 256 512\n", "largest"},
        {"uslab-classes 1\n16 32 64 128 256 512 1024 131072\n", "largest"},
        {"uslab-classes 1\n16 32 64 128 256 512 1024 99999999999999999999\n", "too large"},
        {"uslab-classes 1\n16 32 64 128 -256 512 1024\n", "not a size"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *why = parse(bad[i].text, s, &n);
        CHECK(why && strstr(why, bad[i].why), "case %zu: %s, want \"%s\"", i,
              why ? why : "(accepted)", bad[i].why);
    }
    char many[2048] = "uslab-classes 1\n";
    for (int i = 1; i <= 97; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many), "%d ", 16 * i);
    const char *why = parse(many, s, &n);
    CHECK(why && strstr(why, "more than 96"), "97 sizes: %s", why ? why : "(accepted)");
}

/* A profile of `count` requests at each size given. */
static void profile_of(struct size_profile *p, const size_t *sizes, size_t n, uint64_t count)
{
    memset(p, 0, sizeof *p);
    for (size_t i = 0; i < n; i++)
        p->count[(sizes[i] + 7) / 8] += count;
}

static void test_fit_exact(void)
{
    static struct size_profile p;
    static const size_t asked[] = {24, 40, 100, 600, 2100, 5000};
    profile_of(&p, asked, 6, 100);
    size_t s[USI_CLASSES_MAX];
    unsigned n = classes_fit(&p, 32768, 73, s);
    CHECK(n > 0 && usi_classes_check(s, n) == NULL, "a valid table");
    /* Each size's class: the nearest allowed one above it. */
    static const size_t want[] = {32, 48, 112, 608, 2176, 5120};
    for (size_t i = 0; i < 6; i++) {
        unsigned k = 0;
        while (s[k] < asked[i])
            k++;
        CHECK(s[k] == want[i], "%zu -> %zu, want %zu", asked[i], s[k], want[i]);
    }
    size_t d[USI_CLASSES_MAX];
    unsigned nd = usi_classes_default(32768, d);
    CHECK(profile_waste(&p, s, n) < profile_waste(&p, d, nd), "fitted wastes less");
    CHECK(classes_fit(&p, 32768, 11, s) == 0, "11 classes cannot hold 12 powers of two");
    CHECK(classes_fit(&p, 32768, 12, s) == 12, "12: the powers of two alone");
}

/* Exhaustive: up to 1024 bytes, 9 classes = the 7 powers of two and 2 free choices. */
static void test_fit_optimal(void)
{
    static struct size_profile p;
    uint64_t x = 12345;
    for (int round = 0; round < 20; round++) {
        memset(&p, 0, sizeof p);
        for (int i = 0; i < 30; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            p.count[1 + (x >> 33) % 128] += 1 + (x >> 20) % 1000;
        }
        size_t s[USI_CLASSES_MAX];
        unsigned n = classes_fit(&p, 1024, 9, s);
        CHECK(n >= 7 && n <= 9, "fit of round %d: %u classes", round, n);
        double got = profile_waste(&p, s, n), best = 1e300;
        for (size_t a = 16; a <= 1024; a += 16)
            for (size_t b = a; b <= 1024; b += 16) {
                size_t t[9];
                unsigned k = 0;
                for (size_t q = 16; q <= 1024; q += 16)
                    if ((q & (q - 1)) == 0 || q == a || q == b)
                        t[k++] = q;
                double w = profile_waste(&p, t, k);
                best = w < best ? w : best;
            }
        CHECK(got <= best + 1e-6, "round %d: fitted waste %.0f, best %.0f", round, got, best);
    }
}

int main(void)
{
    test_default();
    test_rules();
    test_fit_exact();
    test_fit_optimal();
    TEST_DONE();
}
