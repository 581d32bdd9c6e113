/* SPDX-License-Identifier: MIT */
/*
 * classes.c - size-class tables fitted to a profile (classes.h): the dynamic programme
 * behind `uslab profile`.
 *
 * The allowed class sizes (the candidates) are the multiples of 16 up to 1024 and of 128
 * above, up to the largest class; the powers of two among them are kept in every table
 * (aligned allocations use them), and so is the largest. A class c serves the requests
 * above the class below it and up to c, each wasting c minus its size. With prefix sums
 * over the granules, the waste of one class over a range of candidates is O(1), and the
 * best table of k classes ending at candidate j is the best of k - 1 classes ending at
 * some i < j plus one class at j, where no kept size lies strictly between i and j:
 * O(max_classes * candidates^2) steps, about 15 million at the largest.
 */
#include "classes.h"

#include <stdlib.h>
#include <string.h>

const char *profile_parse(const char *text, size_t len, struct size_profile *p)
{
    static const char header[] = "uslab-profile 1\n";
    if (len < sizeof header - 1 || memcmp(text, header, sizeof header - 1) != 0)
        return "not a uslab profile (the first line is not \"uslab-profile 1\")";
    size_t i = sizeof header - 1;
    while (i < len) {
        int above = 0;
        uint64_t size = 0, count = 0;
        if (len - i >= 6 && memcmp(text + i, "above ", 6) == 0) {
            above = 1;
            i += 6;
        } else {
            if (text[i] < '0' || text[i] > '9')
                return "a line does not start with a size";
            while (i < len && text[i] >= '0' && text[i] <= '9')
                size = size * 10 + (uint64_t)(text[i++] - '0');
            if (i == len || text[i++] != ' ')
                return "a size is not followed by a count";
        }
        if (i == len || text[i] < '0' || text[i] > '9')
            return "a line has no count";
        while (i < len && text[i] >= '0' && text[i] <= '9')
            count = count * 10 + (uint64_t)(text[i++] - '0');
        if (i == len || text[i++] != '\n')
            return "a line does not end after its count";
        if (above)
            p->above += count;
        else if (size % 8 != 0 || size / 8 >= PROFILE_GRANULES)
            return "a size is not a granule of 8 bytes up to 65536";
        else
            p->count[size / 8] += count;
    }
    return NULL;
}

uint64_t profile_requests(const struct size_profile *p, size_t max_size)
{
    uint64_t n = 0;
    for (size_t g = 0; g * 8 <= max_size && g < PROFILE_GRANULES; g++)
        n += p->count[g];
    return n;
}

double profile_waste(const struct size_profile *p, const size_t *sizes, unsigned n)
{
    double waste = 0;
    unsigned k = 0;
    for (size_t g = 0; g < PROFILE_GRANULES && n; g++) {
        size_t size = g * 8;
        while (k < n && sizes[k] < size)
            k++;
        if (k == n)
            break;
        waste += (double)p->count[g] * (double)(sizes[k] - size);
    }
    return waste;
}

static int is_power_of_two(size_t s)
{
    return (s & (s - 1)) == 0;
}

unsigned classes_fit(const struct size_profile *p, size_t max_size, unsigned max_classes,
                     size_t *sizes)
{
    if (max_classes > USI_CLASSES_MAX)
        max_classes = USI_CLASSES_MAX;
    if (max_size < 1024 || max_size > USI_PROFILE_MAX_SIZE || max_size % 128 != 0)
        return 0;
    /* Candidates, and which must be kept. */
    size_t cand[USI_PROFILE_MAX_SIZE / 128 + 64];
    unsigned m = 0, kept = 0;
    for (size_t s = 16; s <= max_size; s += s < 1024 ? 16 : 128)
        cand[m++] = s;
    for (unsigned j = 0; j < m; j++)
        kept += is_power_of_two(cand[j]) || j == m - 1;
    if (kept > max_classes)
        return 0;
    /* Prefix sums by granule: requests and their bytes up to size 8g. */
    size_t ng = max_size / 8 + 1;
    double *reqs = calloc(ng + 1, sizeof *reqs), *bytes = calloc(ng + 1, sizeof *bytes);
    /* best[k][j]: least waste of k + 1 classes covering sizes up to cand[j], the last at j;
     * from[k][j]: the class before it (-1: none). */
    double *best = malloc((size_t)max_classes * m * sizeof *best);
    int *from = malloc((size_t)max_classes * m * sizeof *from);
    if (!reqs || !bytes || !best || !from) {
        free(reqs);
        free(bytes);
        free(best);
        free(from);
        return 0;
    }
    for (size_t g = 0; g < ng; g++) {
        reqs[g + 1] = reqs[g] + (double)p->count[g];
        bytes[g + 1] = bytes[g] + (double)p->count[g] * (double)(g * 8);
    }
    /* Waste of one class at cand[j] serving sizes in (lo, cand[j]], lo = cand[i] or 0. */
#define UPTO(s) ((s) / 8 + 1) /* prefix index just past granule s / 8 */
#define COST(lo, c)                                                                                \
    ((double)(c) * (reqs[UPTO(c)] - ((lo) ? reqs[UPTO(lo)] : 0)) -                                 \
     (bytes[UPTO(c)] - ((lo) ? bytes[UPTO(lo)] : 0)))
    const double inf = 1e300;
    for (unsigned k = 0; k < max_classes; k++)
        for (unsigned j = 0; j < m; j++) {
            double b = inf;
            int f = -1;
            if (k == 0) {
                /* The first class: no kept size below it. */
                int ok = 1;
                for (unsigned i = 0; i < j && ok; i++)
                    ok = !is_power_of_two(cand[i]);
                if (ok)
                    b = COST(0, cand[j]);
            } else {
                /* Walk i down from j - 1; stop after the first kept size (none may be
                 * skipped). */
                for (int i = (int)j - 1; i >= 0; i--) {
                    double prev = best[(size_t)(k - 1) * m + (size_t)i];
                    if (prev < inf) {
                        double v = prev + COST(cand[i], cand[j]);
                        if (v < b) {
                            b = v;
                            f = i;
                        }
                    }
                    if (is_power_of_two(cand[i]))
                        break;
                }
            }
            best[(size_t)k * m + j] = b;
            from[(size_t)k * m + j] = f;
        }
#undef COST
#undef UPTO
    /* The best count of classes that ends at the largest size (fewer is never worse in
     * waste terms only when it ties: take the least waste, then the fewest classes). */
    unsigned bk = 0;
    for (unsigned k = 1; k < max_classes; k++)
        if (best[(size_t)k * m + m - 1] < best[(size_t)bk * m + m - 1])
            bk = k;
    unsigned n = bk + 1;
    int j = (int)m - 1;
    for (int k = (int)bk; k >= 0; k--) {
        sizes[k] = cand[j];
        j = from[(size_t)k * m + (size_t)j];
    }
    free(reqs);
    free(bytes);
    free(best);
    free(from);
    return usi_classes_check(sizes, n) == NULL ? n : 0;
}
