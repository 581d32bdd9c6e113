/* SPDX-License-Identifier: MIT */
/*
 * test_pages_faults.c - a freed span reads as zero when it is reused, whichever way the
 * pages layer had to make it so (docs/design.md §2). Each case fills a span with a pattern,
 * frees it while the fault switch makes the os layer's calls fail, and takes the same span
 * back (the free list is last in, first out):
 *   purge        MADV_DONTNEED fails (as under mlockall): a MAP_FIXED mapping replaces it
 *   zero         the replacement fails too: the span is zeroed by hand
 *   hole         the failed replacement unmapped the span: zero pages are mapped into it
 *   abandon      the hole cannot be refilled either: the span is never handed out again
 * A span zeroed by hand is resident, on the free list with the others, and the first reused.
 * Before the pages layer looked at the purge's result, "purge" got its old contents back.
 */
#define _GNU_SOURCE
#include "base.h"
#include "check.h"
#include "faults.h"
#include "init.h"
#include "os.h"
#include "pages.h"
#include "testutil.h"
#include "uslab.h"

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define ORDER 1 /* 128 KiB */

static size_t span_size(void)
{
    return USI_UNIT_SIZE << ORDER;
}

static int all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

/* Frees a span full of 0xa5 under `faults`, then allocates again with no faults. */
static unsigned char *cycle(const char *faults, unsigned char **freed)
{
    unsigned char *s = usi_pages_alloc_span(ORDER, 0);
    CHECK(s, "a span");
    memset(s, 0xa5, span_size());
    CHECK(uslab_faults_set(faults) == 0, "fault spec %s", faults);
    usi_pages_free_span(s, ORDER, 0, 0);
    CHECK(uslab_faults_set(NULL) == 0, "faults off");
    *freed = s;
    unsigned char *again = usi_pages_alloc_span(ORDER, 0);
    CHECK(again, "a span again");
    return again;
}

static void test_reused_zero(const char *name, const char *faults, const char *letters)
{
    unsigned long before = uslab_faults_injected(letters);
    size_t abandoned = usi_pages_abandoned_bytes();
    unsigned char *freed, *s = cycle(faults, &freed);
    CHECK(uslab_faults_injected(letters) > before, "%s: faults %s were injected", name, letters);
    CHECK(s == freed, "%s: the freed span %p is reused (got %p)", name, (void *)freed, (void *)s);
    CHECK(all_zero(s, span_size()), "%s: the reused span reads as zero", name);
    CHECK(usi_pages_abandoned_bytes() == abandoned, "%s: nothing abandoned", name);
    memset(s, 1, span_size()); /* writable, too */
    usi_pages_free_span(s, ORDER, 0, 0);
}

/* Pages of the span in memory (mincore). */
static size_t resident_pages(const void *span)
{
    unsigned char vec[(USI_UNIT_SIZE << ORDER) / USI_PAGE_SIZE];
    CHECK(mincore((void *)span, span_size(), vec) == 0, "mincore");
    size_t n = 0;
    for (size_t i = 0; i < sizeof vec; i++)
        n += vec[i] & 1;
    return n;
}

static void test_resident_reused_first(void)
{
    unsigned char *a = usi_pages_alloc_span(ORDER, 0), *b = usi_pages_alloc_span(ORDER, 0);
    CHECK(a && b, "two spans");
    memset(a, 0xa5, span_size());
    memset(b, 0x5a, span_size());
    usi_pages_free_span(b, ORDER, 0, 0); /* purged */
    CHECK(resident_pages(b) == 0, "a purged span holds no memory");
    CHECK(uslab_faults_set("1,1,ar") == 0, "faults");
    usi_pages_free_span(a, ORDER, 0, 0);
    CHECK(uslab_faults_set(NULL) == 0, "faults off");
    CHECK(all_zero(a, span_size()), "zeroed by hand");
    CHECK(resident_pages(a) == span_size() / USI_PAGE_SIZE, "a span zeroed by hand: resident");
    unsigned char *x = usi_pages_alloc_span(ORDER, 0), *y = usi_pages_alloc_span(ORDER, 0);
    CHECK(x == a, "the span zeroed by hand, freed last, is reused first");
    CHECK(x && y && all_zero(x, span_size()) && all_zero(y, span_size()), "reused: zero");
    usi_pages_free_span(x, ORDER, 0, 0);
    usi_pages_free_span(y, ORDER, 0, 0);
}

static void test_abandon(void)
{
    size_t abandoned = usi_pages_abandoned_bytes();
    unsigned char *freed, *s = cycle("1,1,arhm", &freed);
    CHECK(usi_pages_abandoned_bytes() == abandoned + span_size(), "the span is abandoned");
    CHECK(s != freed, "an abandoned span is not handed out again");
    CHECK(all_zero(s, span_size()), "the span handed out instead reads as zero");
    usi_pages_free_span(s, ORDER, 0, 0);
    /* The hole is in the middle of the reservation: plug it, so that no later mapping of
     * this process lands there. */
    void *plug = mmap(freed, span_size(), PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    CHECK(plug == freed, "plug the hole at %p", (void *)freed);
}

/* A span of an internal cache has guard pages (design §3): guard markers where the kernel
 * takes them, else PROT_NONE (here forced by failing madvise). Freed while the call that
 * takes them off fails, the guards stay: a fresh mapping replaces the span (it could be
 * neither purged into a usable span nor zeroed by hand); failing that too, the span is
 * abandoned, never handed out with a guard page in it. */
static void test_guarded(void)
{
    for (int prot = 0; prot < 2; prot++)
        for (int fail_replace = 0; fail_replace < 2; fail_replace++) {
            size_t abandoned = usi_pages_abandoned_bytes();
            unsigned char *s = usi_pages_alloc_span(ORDER, 0);
            CHECK(s, "a span");
            memset(s, 0xa5, span_size());
            CHECK(uslab_faults_set(prot ? "1,1,a" : NULL) == 0, "faults");
            int how;
            CHECK(usi_pages_guard(s, span_size(), USI_PAGE_SIZE, &how) == 0, "guard pages");
            CHECK(uslab_faults_set(NULL) == 0, "faults off");
            CHECK(how == USI_GUARD_PROT || (!prot && how == USI_GUARD_MARKERS),
                  "guard pages made %d", how);
            CHECK(write_faults(s) && write_faults(s + USI_PAGE_SIZE - 1) &&
                      write_faults(s + span_size() - USI_PAGE_SIZE) &&
                      write_faults(s + span_size() - 1) && !write_faults(s + USI_PAGE_SIZE) &&
                      !write_faults(s + span_size() - USI_PAGE_SIZE - 1),
                  "the guard pages fault, and only they (made %d)", how);
            const char *off = how == USI_GUARD_PROT ? "p" : "a";
            char spec[16];
            snprintf(spec, sizeof spec, "1,1,%s%s", off, fail_replace ? "r" : "");
            CHECK(uslab_faults_set(spec) == 0, "faults");
            usi_pages_free_span(s, ORDER, USI_PAGE_SIZE, how);
            CHECK(uslab_faults_set(NULL) == 0, "faults off");
            unsigned char *again = usi_pages_alloc_span(ORDER, 0);
            CHECK(again, "a span again");
            if (fail_replace) {
                CHECK(usi_pages_abandoned_bytes() == abandoned + span_size(), "abandoned");
                CHECK(again != s, "a span with guard pages is not handed out again");
            } else {
                CHECK(again == s, "the replaced span is reused");
                CHECK(usi_pages_abandoned_bytes() == abandoned, "nothing abandoned");
            }
            CHECK(all_zero(again, span_size()), "the span reads as zero");
            memset(again, 1, span_size()); /* writable at both ends */
            usi_pages_free_span(again, ORDER, 0, 0);
            /* Guards taken off as they were made: the span is whole again. */
            unsigned char *g = usi_pages_alloc_span(ORDER, 0);
            CHECK(g, "a third span");
            CHECK(usi_pages_guard(g, span_size(), USI_PAGE_SIZE, &how) == 0, "guards");
            usi_pages_free_span(g, ORDER, USI_PAGE_SIZE, how);
            CHECK(usi_pages_abandoned_bytes() == abandoned + (fail_replace ? span_size() : 0),
                  "guards taken off");
            unsigned char *h = usi_pages_alloc_span(ORDER, 0);
            CHECK(h == g && all_zero(h, span_size()), "the span is reused, reading as zero");
            memset(h, 2, span_size());
            usi_pages_free_span(h, ORDER, 0, 0);
        }
}

/* Guard markers that fail for want of kernel memory (EAGAIN, the fault switch's "g") are
 * refused for that span only: it gets PROT_NONE guards, and the next span markers again.
 * Before, any failure made every later span take PROT_NONE guards, a mapping split in
 * three each. Runs first: a refusal (EINVAL, test_guarded) is for good. */
static void test_markers_shortage(void)
{
    unsigned char *probe = usi_pages_alloc_span(ORDER, 0);
    CHECK(probe, "a span");
    int how;
    CHECK(usi_pages_guard(probe, span_size(), USI_PAGE_SIZE, &how) == 0, "guards");
    usi_pages_free_span(probe, ORDER, USI_PAGE_SIZE, how);
    if (how != USI_GUARD_MARKERS) {
        printf("guard markers: not on this kernel, shortage case skipped\n");
        return;
    }
    unsigned long injected = uslab_faults_injected("a");
    unsigned char *s = usi_pages_alloc_span(ORDER, 0);
    CHECK(s, "a span");
    CHECK(uslab_faults_set("1,1,ag") == 0, "faults");
    int rc = usi_pages_guard(s, span_size(), USI_PAGE_SIZE, &how);
    CHECK(uslab_faults_set(NULL) == 0, "faults off");
    CHECK(uslab_faults_injected("a") > injected, "a marker was refused (EAGAIN)");
    CHECK(rc == 0 && how == USI_GUARD_PROT, "that span's guards are PROT_NONE (%d)", how);
    CHECK(write_faults(s) && write_faults(s + span_size() - 1), "and fault");
    usi_pages_free_span(s, ORDER, USI_PAGE_SIZE, how);
    unsigned char *t = usi_pages_alloc_span(ORDER, 0);
    CHECK(t, "a span");
    CHECK(usi_pages_guard(t, span_size(), USI_PAGE_SIZE, &how) == 0, "guards");
    CHECK(how == USI_GUARD_MARKERS, "the next span's guards are markers again (%d)", how);
    usi_pages_free_span(t, ORDER, USI_PAGE_SIZE, how);
}

/* Slabs on spans freed under faults: objects and slab headers stay consistent. */
static void test_slabs(void)
{
    uslab_cache_t *c = uslab_cache_create("faults", 200, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(c, "create");
    enum { N = 3000 };
    static void *objs[N];
    static const char *const modes[] = {"1,1,a", "1,1,ar", "1,1,arh", NULL};
    for (int round = 0; round < 8; round++) {
        for (int i = 0; i < N; i++) {
            objs[i] = uslab_cache_alloc(c);
            CHECK(objs[i], "alloc %d", i);
            memset(objs[i], round + 1, 200);
        }
        for (int i = 0; i < N; i++) {
            const unsigned char *p = objs[i];
            for (int k = 0; k < 200; k++)
                CHECK(p[k] == round + 1, "round %d object %d byte %d", round, i, k);
        }
        for (int i = 0; i < N; i++)
            uslab_cache_free(c, objs[i]);
        CHECK(uslab_faults_set(modes[round % 4]) == 0, "faults");
        uslab_reap(); /* every empty slab goes back to the pages layer */
        CHECK(uslab_faults_set(NULL) == 0, "faults off");
    }
    uslab_cache_destroy(c);
}

int main(void)
{
    CHECK(usi_ensure_init() == 0, "init");
    test_markers_shortage();
    test_guarded();
    test_reused_zero("purge", "1,1,a", "a");
    test_reused_zero("zero", "1,1,ar", "r");
    test_reused_zero("hole", "1,1,arh", "h");
    test_resident_reused_first();
    test_abandon();
    test_slabs();
    TEST_DONE();
}
