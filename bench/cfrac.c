/* SPDX-License-Identifier: MIT */
/*
 * cfrac - integer factoring by the continued fraction method (Morrison and Brillhart,
 * 1975), with its own small bignum arithmetic, written for this benchmark. Like the
 * classic cfrac program it is allocation-heavy: every bignum is a fresh heap object
 * (malloc'ed by each operation, freed when no longer needed).
 *
 * factor(n): trial division by primes below --trial (1000), a Miller-Rabin test, and for a
 * composite cofactor the continued fraction method:
 *   expand sqrt(kN) (k a Knuth-Schroeppel multiplier): P, Q, a and the convergent
 *   numerators A mod N satisfy A_{i-1}^2 = (-1)^i Q_i (mod N); Q_i that factor over the
 *   factor base (primes p with (kN/p) != -1) give relations, and those with one large
 *   prime left over are paired on that prime; Gaussian elimination over GF(2) finds
 *   subsets whose product is a square X^2 = Y^2 (mod N), and gcd(X - Y, N) splits N.
 *
 * Options: --n <decimal> (default the thesis' 4175764634412383261319054216609912102)
 *          --fb <factor base size, 0 = by size> --trial 1000 --pool 0|1
 *          --compare K : also factor K times with a private free-list pool instead of
 *                        malloc (alternating with K-1 more malloc runs) and report
 *                        alloc_share = (malloc time - pool time) / malloc time, from the
 *                        minimum of each: the share of the run spent in the allocator.
 * Output: factors=<a*b*...>, verified=1 when their product is n and each is a probable
 *         prime, time_s, mallocs, and with --compare: pool_time_s, alloc_share.
 */
#include "common.h"

#include <stdbool.h>

/* ---- bignum: little-endian 32-bit limbs, non-negative -------------------------------- */

typedef struct bn {
    int n;           /* limbs in use; 0 for zero */
    int cap;         /* limbs allocated */
    struct bn *link; /* free-list link in pool mode */
    uint32_t d[];
} bn;

static bool use_pool;
static unsigned long n_mallocs;
#define POOL_CLASSES 8
static bn *pool[POOL_CLASSES]; /* free lists by capacity class: 4 << c limbs */

static bn *bn_new(int cap)
{
    if (cap < 1)
        cap = 1;
    n_mallocs++;
    if (use_pool) {
        int c = 0;
        while ((4 << c) < cap)
            c++;
        if (c >= POOL_CLASSES) {
            fprintf(stderr, "number too large\n");
            exit(2);
        }
        cap = 4 << c;
        bn *b = pool[c];
        if (b) {
            pool[c] = b->link;
        } else {
            b = bench_xmalloc(sizeof(bn) + (size_t)cap * 4);
            b->cap = cap;
        }
        b->n = 0;
        return b;
    }
    bn *b = malloc(sizeof(bn) + (size_t)cap * 4);
    if (!b) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    b->n = 0;
    b->cap = cap;
    return b;
}

static void bn_free(bn *b)
{
    if (!b)
        return;
    if (use_pool) {
        int c = 0;
        while ((4 << c) < b->cap)
            c++;
        b->link = pool[c];
        pool[c] = b;
        return;
    }
    free(b);
}

static void pool_drain(void)
{
    for (int c = 0; c < POOL_CLASSES; c++)
        while (pool[c]) {
            bn *b = pool[c];
            pool[c] = b->link;
            free(b);
        }
}

static void bn_trim(bn *a)
{
    while (a->n > 0 && a->d[a->n - 1] == 0)
        a->n--;
}

static bn *bn_u64(uint64_t v)
{
    bn *r = bn_new(2);
    r->d[0] = (uint32_t)v;
    r->d[1] = (uint32_t)(v >> 32);
    r->n = 2;
    bn_trim(r);
    return r;
}

static bn *bn_copy(const bn *a)
{
    bn *r = bn_new(a->n);
    memcpy(r->d, a->d, (size_t)a->n * 4);
    r->n = a->n;
    return r;
}

static bool bn_is_zero(const bn *a)
{
    return a->n == 0;
}

static bool bn_is_u32(const bn *a, uint32_t v)
{
    return v == 0 ? a->n == 0 : (a->n == 1 && a->d[0] == v);
}

static int bn_cmp(const bn *a, const bn *b)
{
    if (a->n != b->n)
        return a->n < b->n ? -1 : 1;
    for (int i = a->n - 1; i >= 0; i--)
        if (a->d[i] != b->d[i])
            return a->d[i] < b->d[i] ? -1 : 1;
    return 0;
}

static bn *bn_add(const bn *a, const bn *b)
{
    if (a->n < b->n) {
        const bn *t = a;
        a = b;
        b = t;
    }
    bn *r = bn_new(a->n + 1);
    uint64_t c = 0;
    for (int i = 0; i < a->n; i++) {
        c += (uint64_t)a->d[i] + (i < b->n ? b->d[i] : 0);
        r->d[i] = (uint32_t)c;
        c >>= 32;
    }
    r->d[a->n] = (uint32_t)c;
    r->n = a->n + 1;
    bn_trim(r);
    return r;
}

/* a - b, a >= b */
static bn *bn_sub(const bn *a, const bn *b)
{
    bn *r = bn_new(a->n);
    int64_t br = 0;
    for (int i = 0; i < a->n; i++) {
        int64_t v = (int64_t)a->d[i] - (i < b->n ? b->d[i] : 0) - br;
        br = v < 0;
        r->d[i] = (uint32_t)(v + (br << 32));
    }
    r->n = a->n;
    bn_trim(r);
    return r;
}

static bn *bn_mul(const bn *a, const bn *b)
{
    bn *r = bn_new(a->n + b->n);
    memset(r->d, 0, (size_t)(a->n + b->n) * 4);
    for (int i = 0; i < a->n; i++) {
        uint64_t c = 0;
        for (int j = 0; j < b->n; j++) {
            c += (uint64_t)a->d[i] * b->d[j] + r->d[i + j];
            r->d[i + j] = (uint32_t)c;
            c >>= 32;
        }
        r->d[i + b->n] = (uint32_t)c;
    }
    r->n = a->n + b->n;
    bn_trim(r);
    return r;
}

static bn *bn_mul_u32(const bn *a, uint32_t m)
{
    bn *r = bn_new(a->n + 1);
    uint64_t c = 0;
    for (int i = 0; i < a->n; i++) {
        c += (uint64_t)a->d[i] * m;
        r->d[i] = (uint32_t)c;
        c >>= 32;
    }
    r->d[a->n] = (uint32_t)c;
    r->n = a->n + 1;
    bn_trim(r);
    return r;
}

static uint32_t bn_mod_u32(const bn *a, uint32_t m)
{
    uint64_t rem = 0;
    for (int i = a->n - 1; i >= 0; i--)
        rem = ((rem << 32) | a->d[i]) % m;
    return (uint32_t)rem;
}

/* Quotient a / m (fresh), remainder in *rem. */
static bn *bn_div_u32(const bn *a, uint32_t m, uint32_t *rem)
{
    bn *q = bn_new(a->n);
    uint64_t r = 0;
    for (int i = a->n - 1; i >= 0; i--) {
        uint64_t cur = (r << 32) | a->d[i];
        q->d[i] = (uint32_t)(cur / m);
        r = cur % m;
    }
    q->n = a->n;
    bn_trim(q);
    if (rem)
        *rem = (uint32_t)r;
    return q;
}

/* Knuth's algorithm D: q = a / b, r = a % b (both fresh; either pointer may be NULL). */
static void bn_divmod(const bn *a, const bn *b, bn **qo, bn **ro)
{
    if (b->n == 0) {
        fprintf(stderr, "division by zero\n");
        exit(2);
    }
    if (bn_cmp(a, b) < 0) {
        if (qo)
            *qo = bn_u64(0);
        if (ro)
            *ro = bn_copy(a);
        return;
    }
    if (b->n == 1) {
        uint32_t r;
        bn *q = bn_div_u32(a, b->d[0], &r);
        if (qo)
            *qo = q;
        else
            bn_free(q);
        if (ro)
            *ro = bn_u64(r);
        return;
    }
    int n = b->n, m = a->n - b->n;
    int s = __builtin_clz(b->d[n - 1]);
    /* Normalised copies: un has m + n + 1 limbs, vn has n. */
    bn *vn = bn_new(n), *un = bn_new(a->n + 1), *q = bn_new(m + 1);
    for (int i = n - 1; i > 0; i--)
        vn->d[i] = (b->d[i] << s) | (s ? (uint32_t)((uint64_t)b->d[i - 1] >> (32 - s)) : 0);
    vn->d[0] = b->d[0] << s;
    un->d[a->n] = s ? (uint32_t)((uint64_t)a->d[a->n - 1] >> (32 - s)) : 0;
    for (int i = a->n - 1; i > 0; i--)
        un->d[i] = (a->d[i] << s) | (s ? (uint32_t)((uint64_t)a->d[i - 1] >> (32 - s)) : 0);
    un->d[0] = a->d[0] << s;
    for (int j = m; j >= 0; j--) {
        uint64_t num = ((uint64_t)un->d[j + n] << 32) | un->d[j + n - 1];
        uint64_t qhat = num / vn->d[n - 1], rhat = num % vn->d[n - 1];
        while (qhat >= (1ull << 32) || qhat * vn->d[n - 2] > ((rhat << 32) | un->d[j + n - 2])) {
            qhat--;
            rhat += vn->d[n - 1];
            if (rhat >= (1ull << 32))
                break;
        }
        int64_t borrow = 0;
        uint64_t carry = 0;
        for (int i = 0; i < n; i++) {
            uint64_t p = qhat * vn->d[i] + carry;
            carry = p >> 32;
            int64_t t = (int64_t)un->d[i + j] - borrow - (int64_t)(uint32_t)p;
            un->d[i + j] = (uint32_t)t;
            borrow = t < 0;
        }
        int64_t t = (int64_t)un->d[j + n] - borrow - (int64_t)carry;
        un->d[j + n] = (uint32_t)t;
        if (t < 0) { /* qhat one too large: add back */
            qhat--;
            uint64_t c = 0;
            for (int i = 0; i < n; i++) {
                c += (uint64_t)un->d[i + j] + vn->d[i];
                un->d[i + j] = (uint32_t)c;
                c >>= 32;
            }
            un->d[j + n] += (uint32_t)c;
        }
        q->d[j] = (uint32_t)qhat;
    }
    q->n = m + 1;
    bn_trim(q);
    if (ro) {
        bn *r = bn_new(n);
        for (int i = 0; i < n; i++)
            r->d[i] = (un->d[i] >> s) | (s ? (uint32_t)((uint64_t)un->d[i + 1] << (32 - s)) : 0);
        r->n = n;
        bn_trim(r);
        *ro = r;
    }
    if (qo)
        *qo = q;
    else
        bn_free(q);
    bn_free(vn);
    bn_free(un);
}

static bn *bn_mod(const bn *a, const bn *m)
{
    bn *r;
    bn_divmod(a, m, NULL, &r);
    return r;
}

static bn *bn_mulmod(const bn *a, const bn *b, const bn *m)
{
    bn *p = bn_mul(a, b);
    bn *r = bn_mod(p, m);
    bn_free(p);
    return r;
}

static bn *bn_powmod(const bn *base, const bn *e, const bn *m)
{
    bn *r = bn_u64(1), *b = bn_mod(base, m);
    for (int i = 0; i < e->n; i++)
        for (int k = 0; k < 32; k++) {
            if (i == e->n - 1 && (e->d[i] >> k) == 0)
                break;
            if ((e->d[i] >> k) & 1) {
                bn *t = bn_mulmod(r, b, m);
                bn_free(r);
                r = t;
            }
            bn *t = bn_mulmod(b, b, m);
            bn_free(b);
            b = t;
        }
    bn_free(b);
    return r;
}

static bn *bn_gcd(const bn *a, const bn *b)
{
    bn *x = bn_copy(a), *y = bn_copy(b);
    while (!bn_is_zero(y)) {
        bn *r = bn_mod(x, y);
        bn_free(x);
        x = y;
        y = r;
    }
    bn_free(y);
    return x;
}

/* floor(sqrt(a)), Newton's method from above. */
static bn *bn_isqrt(const bn *a)
{
    if (a->n == 0)
        return bn_u64(0);
    int bits = 32 * a->n - __builtin_clz(a->d[a->n - 1]);
    bn *x = bn_new((bits + 1) / 2 / 32 + 2); /* 2^ceil(bits/2) >= sqrt(a) */
    int hb = (bits + 1) / 2;
    memset(x->d, 0, (size_t)x->cap * 4);
    x->d[hb / 32] = 1u << (hb % 32);
    x->n = hb / 32 + 1;
    for (;;) {
        bn *q;
        bn_divmod(a, x, &q, NULL);
        bn *s = bn_add(x, q);
        uint32_t rem;
        bn *y = bn_div_u32(s, 2, &rem);
        bn_free(q);
        bn_free(s);
        if (bn_cmp(y, x) >= 0) {
            bn_free(y);
            return x;
        }
        bn_free(x);
        x = y;
    }
}

static bn *bn_from_str(const char *s)
{
    bn *r = bn_u64(0);
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            continue;
        bn *t = bn_mul_u32(r, 10);
        bn *d = bn_u64((uint64_t)(*s - '0'));
        bn_free(r);
        r = bn_add(t, d);
        bn_free(t);
        bn_free(d);
    }
    return r;
}

static void bn_print(FILE *f, const bn *a)
{
    char buf[512];
    int k = (int)sizeof buf - 1;
    buf[k] = 0;
    bn *x = bn_copy(a);
    do {
        uint32_t rem;
        bn *q = bn_div_u32(x, 10, &rem);
        buf[--k] = (char)('0' + rem);
        bn_free(x);
        x = q;
    } while (!bn_is_zero(x) && k > 0);
    bn_free(x);
    fputs(buf + k, f);
}

/* ---- primes and primality ---------------------------------------------------------------- */

static uint32_t *primes;
static int nprimes;

static void sieve(uint32_t limit)
{
    char *c = calloc(limit + 1, 1);
    primes = bench_xmalloc((limit / 2 + 2) * sizeof *primes);
    for (uint32_t i = 2; i <= limit; i++) {
        if (c[i])
            continue;
        primes[nprimes++] = i;
        for (uint64_t j = (uint64_t)i * i; j <= limit; j += i)
            c[j] = 1;
    }
    free(c);
}

static bool bn_probable_prime(const bn *n)
{
    if (n->n == 0 || bn_is_u32(n, 1))
        return false;
    for (int i = 0; i < 12; i++) {
        if (bn_is_u32(n, primes[i]))
            return true;
        if (bn_mod_u32(n, primes[i]) == 0)
            return false;
    }
    bn *one = bn_u64(1), *nm1 = bn_sub(n, one), *d = bn_copy(nm1);
    int s = 0;
    while ((d->d[0] & 1) == 0) {
        uint32_t r;
        bn *t = bn_div_u32(d, 2, &r);
        bn_free(d);
        d = t;
        s++;
    }
    bool prime = true;
    for (int i = 0; i < 12 && prime; i++) {
        bn *a = bn_u64(primes[i]);
        bn *x = bn_powmod(a, d, n);
        bn_free(a);
        if (bn_is_u32(x, 1) || bn_cmp(x, nm1) == 0) {
            bn_free(x);
            continue;
        }
        bool ok = false;
        for (int r = 1; r < s; r++) {
            bn *y = bn_mulmod(x, x, n);
            bn_free(x);
            x = y;
            if (bn_cmp(x, nm1) == 0) {
                ok = true;
                break;
            }
        }
        bn_free(x);
        prime = ok;
    }
    bn_free(one);
    bn_free(nm1);
    bn_free(d);
    return prime;
}

/* Legendre symbol (a/p) for odd prime p, from a mod p. */
static int legendre(uint32_t a, uint32_t p)
{
    uint64_t r = 1, b = a % p, e = (p - 1) / 2;
    while (e) {
        if (e & 1)
            r = r * b % p;
        b = b * b % p;
        e >>= 1;
    }
    return r == 0 ? 0 : (r == 1 ? 1 : -1);
}

/* ---- the continued fraction method ---------------------------------------------------------- */

struct relation {
    bn *x;          /* product of the A's, mod N */
    bn *large;      /* product of large primes (each appears squared), or 1 */
    int nf;         /* factor base indices with odd/even exponents, sparse */
    int *idx, *exp; /* exponents of each factor-base element (0 = -1) */
};

struct partial {
    uint32_t prime;
    bn *a;
    int sign;
    int nf;
    int *idx, *exp;
};

static long fb_override;
static unsigned long cf_iterations;

/* Splits composite n; returns a proper factor or NULL. */
static bn *cfrac_split(const bn *n)
{
    int bits = 32 * n->n - __builtin_clz(n->d[n->n - 1]);
    int fbsize = (int)(fb_override > 0 ? fb_override : (bits < 60 ? 60 : bits * bits / 20));
    /* Knuth-Schroeppel multiplier. */
    static const uint32_t ks[] = {1,  2,  3,  5,  6,  7,  10, 11, 13, 14, 15, 17, 19, 21,
                                  22, 23, 26, 29, 30, 31, 33, 34, 35, 37, 38, 39, 41, 43};
    uint32_t k = 1;
    double best = -1e9;
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
        bn *kn = bn_mul_u32(n, ks[i]);
        uint32_t m8 = bn_mod_u32(kn, 8);
        double f = -0.5 * log(ks[i]);
        f += m8 == 1 ? 2 * log(2) : m8 == 5 ? log(2) : (m8 & 1) ? 0.5 * log(2) : 0;
        for (int j = 1; j < 200 && j < nprimes; j++) {
            uint32_t p = primes[j];
            int l = legendre(bn_mod_u32(kn, p), p);
            if (l == 0)
                f += log(p) / p;
            else if (l == 1)
                f += 2 * log(p) / (p - 1);
        }
        bn_free(kn);
        if (f > best) {
            best = f;
            k = ks[i];
        }
    }
    bn *kn = bn_mul_u32(n, k);
    /* Factor base: index 0 is -1, then 2 and odd primes with (kN/p) != -1. */
    uint32_t *fb = bench_xmalloc(((size_t)fbsize + 1) * sizeof *fb);
    int nfb = 1;
    fb[0] = 0;
    for (int j = 0; j < nprimes && nfb <= fbsize; j++) {
        uint32_t p = primes[j];
        if (p == 2 || legendre(bn_mod_u32(kn, p), p) != -1)
            fb[nfb++] = p;
    }
    uint64_t large_bound = (uint64_t)fb[nfb - 1] * 64;
    int want = nfb + 16;
    struct relation *rel = bench_xmalloc((size_t)want * sizeof *rel);
    int nrel = 0;
    size_t pcap = 1 << 16, pmask = pcap - 1;
    struct partial *parts = calloc(pcap, sizeof *parts);
    int *tidx = bench_xmalloc((size_t)nfb * sizeof *tidx), *texp = bench_xmalloc((size_t)nfb * 4);

    bn *m = bn_isqrt(kn);
    bn *P = bn_u64(0), *Q = bn_u64(1), *a = bn_copy(m);
    bn *Aprev = bn_u64(1), *A = bn_mod(m, n); /* A_{-1} = 1, A_0 = a_0 */
    bn *result = NULL;
    /* Q_0 = 1: relation A_{-1}^2 = Q_0 trivially; start at i = 1. */
    for (unsigned long i = 1; nrel < want; i++) {
        cf_iterations++;
        /* P_i = a_{i-1} Q_{i-1} - P_{i-1}; Q_i = (kN - P_i^2) / Q_{i-1} */
        bn *aq = bn_mul(a, Q);
        bn *Pn = bn_sub(aq, P);
        bn *P2 = bn_mul(Pn, Pn);
        bn *num = bn_sub(kn, P2);
        bn *Qn;
        bn_divmod(num, Q, &Qn, NULL);
        bn *mp = bn_add(m, Pn);
        bn *an;
        bn_divmod(mp, Qn, &an, NULL);
        bn_free(aq);
        bn_free(P2);
        bn_free(num);
        bn_free(mp);
        bn_free(P);
        bn_free(Q);
        bn_free(a);
        P = Pn;
        Q = Qn;
        a = an;
        /* Now A = A_{i-1}: A_{i-1}^2 = (-1)^i Q_i (mod N). Factor Q_i. */
        int sign = (int)(i & 1);
        int nf = 0;
        if (sign) {
            tidx[nf] = 0;
            texp[nf++] = 1;
        }
        bn *rest = bn_copy(Q);
        for (int j = 1; j < nfb && rest->n > 0 && !bn_is_u32(rest, 1); j++) {
            if (bn_mod_u32(rest, fb[j]) != 0)
                continue;
            int e = 0;
            uint32_t r = 0;
            do {
                bn *t = bn_div_u32(rest, fb[j], &r);
                bn_free(rest);
                rest = t;
                e++;
            } while (bn_mod_u32(rest, fb[j]) == 0);
            tidx[nf] = j;
            texp[nf++] = e;
        }
        uint64_t cof = rest->n <= 2 ? (uint64_t)(rest->n > 0 ? rest->d[0] : 0) |
                                          (rest->n > 1 ? (uint64_t)rest->d[1] << 32 : 0)
                                    : UINT64_MAX;
        bn_free(rest);
        if (cof == 1) {
            struct relation *r = &rel[nrel++];
            r->x = bn_copy(A);
            r->large = bn_u64(1);
            r->nf = nf;
            r->idx = bench_xmalloc((size_t)(nf ? nf : 1) * sizeof(int));
            r->exp = bench_xmalloc((size_t)(nf ? nf : 1) * sizeof(int));
            memcpy(r->idx, tidx, (size_t)nf * sizeof(int));
            memcpy(r->exp, texp, (size_t)nf * sizeof(int));
        } else if (cof < large_bound) {
            /* one large prime (cof < p_max^2 once the base is divided out) */
            size_t h = (size_t)(cof * 0x9e3779b97f4a7c15ull >> 40) & pmask;
            while (parts[h].prime && parts[h].prime != cof)
                h = (h + 1) & pmask;
            if (!parts[h].prime) {
                parts[h].prime = (uint32_t)cof;
                parts[h].a = bn_copy(A);
                parts[h].nf = nf;
                parts[h].idx = bench_xmalloc((size_t)(nf ? nf : 1) * sizeof(int));
                parts[h].exp = bench_xmalloc((size_t)(nf ? nf : 1) * sizeof(int));
                memcpy(parts[h].idx, tidx, (size_t)nf * sizeof(int));
                memcpy(parts[h].exp, texp, (size_t)nf * sizeof(int));
            } else {
                /* combine: exponents add (merge two sparse lists) */
                struct partial *p = &parts[h];
                struct relation *r = &rel[nrel++];
                r->x = bn_mulmod(p->a, A, n);
                r->large = bn_u64(cof);
                r->idx = bench_xmalloc((size_t)(p->nf + nf + 1) * sizeof(int));
                r->exp = bench_xmalloc((size_t)(p->nf + nf + 1) * sizeof(int));
                int x = 0, y = 0, z = 0;
                while (x < p->nf || y < nf) {
                    if (y >= nf || (x < p->nf && p->idx[x] < tidx[y])) {
                        r->idx[z] = p->idx[x];
                        r->exp[z++] = p->exp[x++];
                    } else if (x >= p->nf || tidx[y] < p->idx[x]) {
                        r->idx[z] = tidx[y];
                        r->exp[z++] = texp[y++];
                    } else {
                        r->idx[z] = tidx[y];
                        r->exp[z++] = texp[y++] + p->exp[x++];
                    }
                }
                r->nf = z;
            }
        }
        /* A_i = a_i A_{i-1} + A_{i-2} mod N */
        bn *t = bn_mul(a, A);
        bn *u = bn_add(t, Aprev);
        bn *An = bn_mod(u, n);
        bn_free(t);
        bn_free(u);
        bn_free(Aprev);
        Aprev = A;
        A = An;
        if (bn_is_u32(Q, 1) && i > 1 && (i & 1) == 0)
            break; /* period ended without enough relations */
    }

    /* Gaussian elimination over GF(2): rows = relations, with an identity part. */
    int words = (nfb + 63) / 64, hw = (nrel + 63) / 64;
    uint64_t *mat = calloc((size_t)nrel * (size_t)words, 8);
    uint64_t *hist = calloc((size_t)nrel * (size_t)hw, 8);
    for (int r = 0; r < nrel; r++) {
        for (int j = 0; j < rel[r].nf; j++)
            if (rel[r].exp[j] & 1)
                mat[(size_t)r * words + rel[r].idx[j] / 64] ^= 1ull << (rel[r].idx[j] % 64);
        hist[(size_t)r * hw + r / 64] |= 1ull << (r % 64);
    }
    int *used = calloc((size_t)nrel, sizeof(int));
    for (int col = 0; col < nfb; col++) {
        int piv = -1;
        for (int r = 0; r < nrel; r++)
            if (!used[r] && (mat[(size_t)r * words + col / 64] >> (col % 64) & 1)) {
                piv = r;
                break;
            }
        if (piv < 0)
            continue;
        used[piv] = 1;
        for (int r = 0; r < nrel; r++)
            if (r != piv && (mat[(size_t)r * words + col / 64] >> (col % 64) & 1)) {
                for (int w = 0; w < words; w++)
                    mat[(size_t)r * words + w] ^= mat[(size_t)piv * words + w];
                for (int w = 0; w < hw; w++)
                    hist[(size_t)r * hw + w] ^= hist[(size_t)piv * hw + w];
            }
    }
    long *expsum = bench_xmalloc((size_t)nfb * sizeof *expsum);
    for (int r = 0; r < nrel && !result; r++) {
        if (used[r])
            continue;
        bool zero = true;
        for (int w = 0; w < words; w++)
            zero &= mat[(size_t)r * words + w] == 0;
        if (!zero)
            continue;
        /* A dependency: X = prod x, Y = sqrt(prod (+-Q)) mod N */
        memset(expsum, 0, (size_t)nfb * sizeof *expsum);
        bn *X = bn_u64(1), *Y = bn_u64(1);
        for (int s = 0; s < nrel; s++) {
            if (!(hist[(size_t)r * hw + s / 64] >> (s % 64) & 1))
                continue;
            bn *t = bn_mulmod(X, rel[s].x, n);
            bn_free(X);
            X = t;
            t = bn_mulmod(Y, rel[s].large, n);
            bn_free(Y);
            Y = t;
            for (int j = 0; j < rel[s].nf; j++)
                expsum[rel[s].idx[j]] += rel[s].exp[j];
        }
        for (int j = 1; j < nfb; j++) {
            for (long e = 0; e < expsum[j] / 2; e++) {
                bn *t = bn_mul_u32(Y, fb[j]);
                bn *u = bn_mod(t, n);
                bn_free(t);
                bn_free(Y);
                Y = u;
            }
        }
        bn *d;
        if (bn_cmp(X, Y) >= 0)
            d = bn_sub(X, Y);
        else
            d = bn_sub(Y, X);
        bn *g = bn_gcd(d, n);
        if (!bn_is_u32(g, 1) && bn_cmp(g, n) != 0)
            result = g;
        else
            bn_free(g);
        bn_free(d);
        bn_free(X);
        bn_free(Y);
    }
    free(expsum);
    free(used);
    free(mat);
    free(hist);
    for (int r = 0; r < nrel; r++) {
        bn_free(rel[r].x);
        bn_free(rel[r].large);
        free(rel[r].idx);
        free(rel[r].exp);
    }
    for (size_t h = 0; h < pcap; h++)
        if (parts[h].prime) {
            bn_free(parts[h].a);
            free(parts[h].idx);
            free(parts[h].exp);
        }
    free(parts);
    free(rel);
    free(tidx);
    free(texp);
    free(fb);
    bn_free(m);
    bn_free(P);
    bn_free(Q);
    bn_free(a);
    bn_free(A);
    bn_free(Aprev);
    bn_free(kn);
    return result;
}

/* ---- driver ---------------------------------------------------------------------------------- */

#define MAX_FACTORS 64
static bn *factors[MAX_FACTORS];
static int nfactors;
static long trial_limit;

static void add_factor(bn *f)
{
    if (nfactors == MAX_FACTORS) {
        fprintf(stderr, "too many factors\n");
        exit(2);
    }
    factors[nfactors++] = f;
}

/* Factors n (consumed) into probable primes. */
static void factor_rest(bn *n)
{
    if (bn_is_u32(n, 1)) {
        bn_free(n);
        return;
    }
    if (bn_probable_prime(n)) {
        add_factor(n);
        return;
    }
    bn *r = bn_isqrt(n), *sq = bn_mul(r, r);
    if (bn_cmp(sq, n) == 0) {
        bn_free(sq);
        factor_rest(bn_copy(r));
        factor_rest(r);
        bn_free(n);
        return;
    }
    bn_free(sq);
    bn_free(r);
    bn *d = cfrac_split(n);
    if (!d) {
        fprintf(stderr, "cfrac failed to split a composite; keeping it\n");
        add_factor(n);
        return;
    }
    bn *q;
    bn_divmod(n, d, &q, NULL);
    bn_free(n);
    factor_rest(d);
    factor_rest(q);
}

static void factor(const bn *n0)
{
    bn *n = bn_copy(n0);
    for (int j = 0; j < nprimes && primes[j] < (uint32_t)trial_limit; j++) {
        for (;;) {
            uint32_t r;
            bn *q = bn_div_u32(n, primes[j], &r);
            if (r != 0 || bn_is_u32(n, primes[j]) || n->n == 0) {
                bn_free(q);
                break;
            }
            add_factor(bn_u64(primes[j]));
            bn_free(n);
            n = q;
        }
    }
    factor_rest(n);
}

static int cmp_bn(const void *a, const void *b)
{
    return bn_cmp(*(bn *const *)a, *(bn *const *)b);
}

static double run(const bn *n, bool pool_mode, bool print)
{
    use_pool = pool_mode;
    nfactors = 0;
    cf_iterations = 0;
    n_mallocs = 0;
    uint64_t t0 = bench_now_ns();
    bn *nn = bn_copy(n);
    factor(nn);
    bn_free(nn);
    double s = (double)(bench_now_ns() - t0) * 1e-9;
    qsort(factors, (size_t)nfactors, sizeof factors[0], cmp_bn);
    bn *prod = bn_u64(1);
    bool all_prime = true;
    for (int i = 0; i < nfactors; i++) {
        bn *t = bn_mul(prod, factors[i]);
        bn_free(prod);
        prod = t;
        all_prime &= bn_probable_prime(factors[i]);
    }
    if (print) {
        printf("factors=");
        for (int i = 0; i < nfactors; i++) {
            if (i)
                putchar('*');
            bn_print(stdout, factors[i]);
        }
        printf("\nverified=%d\ncf_iterations=%lu\nbignums=%lu\n", bn_cmp(prod, n) == 0 && all_prime,
               cf_iterations, n_mallocs);
    }
    bn_free(prod);
    for (int i = 0; i < nfactors; i++)
        bn_free(factors[i]);
    if (pool_mode)
        pool_drain();
    use_pool = false;
    return s;
}

int main(int argc, char **argv)
{
    const char *ns = bench_opt_str(argc, argv, "n", "4175764634412383261319054216609912102");
    fb_override = bench_opt_long(argc, argv, "fb", 0);
    trial_limit = bench_opt_long(argc, argv, "trial", 1000);
    long compare = bench_opt_long(argc, argv, "compare", 0);
    long pool_only = bench_opt_long(argc, argv, "pool", 0);
    printf("benchmark=cfrac\nn=%s\nfb=%ld\ntrial=%ld\n", ns, fb_override, trial_limit);
    bench_print_allocator();
    sieve(1 << 20);
    bn *n = bn_from_str(ns);
    double s = run(n, pool_only != 0, true);
    if (compare > 0) {
        /* Alternate malloc and pool runs; the minimum of each is the least disturbed. */
        double ps = 1e30;
        for (long i = 0; i < compare; i++) {
            double t = run(n, true, false);
            ps = t < ps ? t : ps;
            if (i > 0) {
                t = run(n, false, false);
                s = t < s ? t : s;
            }
        }
        printf("time_s=%.6f\npool_time_s=%.6f\nalloc_share=%.4f\n", s, ps,
               s > 0 ? (s - ps) / s : 0);
    } else {
        printf("time_s=%.6f\n", s);
    }
    printf("maxrss_kb=%ld\n", bench_maxrss_kb());
    bn_free(n);
    free(primes);
    return 0;
}
