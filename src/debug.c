/* SPDX-License-Identifier: MIT */
/*
 * debug.c - slub_debug-style checking (docs/design.md §9): USLAB_DEBUG=<letters>[,<glob>...]
 *
 *   F  sanity checks: double free, invalid pointers, slab consistency, with full reports
 *   Z  red zones before and after every object, checked on free and on allocation
 *   P  poisoning: free objects are filled with 0x6b (last byte 0xa5) and checked when they
 *      are allocated again (writes after free); new objects are filled with 0x5a
 *   U  user tracking: allocation and free call stacks, thread and time of each object
 *   T  a trace line for every allocation and free
 *
 * Globs (with * and ?) select caches by name; without one, every cache is debugged, the
 * malloc classes ("malloc-64", ...) included. A debug cache has no magazines (capacity 0,
 * as libumem and SLUB do), so every operation reaches the slab layer and these hooks; other
 * caches never look at any of this: their fast paths are unchanged.
 *
 * A debug cache's slot:  [left red zone][object][right red zone][state][tracks]
 * The user pointer is slot + obj_offset. The slab layer keeps nothing in a free object (its
 * bitmap is its free list), so the poison and the red zones stay intact while it is free.
 */
#define _GNU_SOURCE
#include "debug.h"
#include "base.h"
#include "descriptor.h"
#include "options.h"
#include "os.h"
#include "registry.h"
#include "report.h"
#include "settings.h"
#include "symbols.h"
#include "unwinder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RED_INACTIVE 0xbb /* red zone of a free object */
#define RED_ACTIVE   0xcc /* red zone of an allocated object */
#define POISON_FREE  0x6b
#define POISON_END   0xa5
#define POISON_NEW   0x5a
#define RED_RIGHT    16 /* minimum bytes of right red zone */
#define TRACK_DEPTH  16 /* frames kept, from the one that called into uslab */

#define STATE_ALLOC 0xa110ca7edull
#define STATE_FREE  0xf4eedull

struct track {
    void *stack[TRACK_DEPTH];
    uint64_t when_ms;
    uint32_t tid;
    uint32_t depth;
};

/* After the right red zone: the object's state, the size a malloc caller asked for, then
 * (with U) its two tracks. */
struct tail {
    uint64_t state;
    uint64_t asked; /* ASKED_SET | size (usi_debug_asked); 0: the whole object is the user's */
    struct track alloc, free;
};

#define ASKED_SET ((uint64_t)1 << 63)

int usi_debug_enabled;

/* The caller's stack, captured by usi_debug_capture before the cache lock is taken, for the
 * report or track the locked code then writes. */
static __thread struct {
    void *stack[TRACK_DEPTH];
    uint32_t depth;
} pending __attribute__((tls_model("initial-exec")));

void usi_debug_capture(void)
{
    pending.depth = usi_unwind_stack(pending.stack, TRACK_DEPTH);
}

void usi_debug_capture_put(const struct uslab_cache *c)
{
    if (c->debug != USI_DEBUG_U)
        usi_debug_capture();
    else
        pending.depth = 0; /* none: a report captures its own */
}

static struct {
    unsigned letters;
    char globs[256]; /* comma-separated, copied from the environment */
    int continue_after_report;
    int leaks, leaks_json;
    uint64_t globs_matched; /* bit i: the i-th glob (of the first 64) selected a cache */
} dbg;

static size_t round_up(size_t x, size_t a)
{
    return (x + a - 1) & ~(a - 1);
}

void usi_debug_read_options(void)
{
    const struct usi_setting *set = &usi_settings_table[USI_SETTING_DEBUG];
    const char *v = usi_os_getenv(set->name);
    const char *globs;
    char bad = 0;
    /* USLAB_DEBUG_CONTINUE and USLAB_LEAKS were read (and checked) by options.c. */
    dbg.continue_after_report = usi_options.debug_continue != 0;
    dbg.leaks_json = usi_options.leaks == USI_STATS_JSON;
    dbg.leaks = usi_options.leaks != USI_STATS_OFF;
    /* Letters in either case, '-' ignored, none meaning FZPU; an unknown letter is skipped,
     * a glob with a bracket makes the whole value ignored. */
    int rc = usi_settings_parse_debug(v, &dbg.letters, &globs, &bad);
    if (rc == -1)
        usi_report_warn("%s: unknown letter '%c' ignored (the letters are F, Z, P, U and T; "
                        "an empty value means FZPU): %s%s%s%s%s%s",
                        set->name, bad, dbg.letters ? "debugging with " : "debugging is off",
                        dbg.letters & USI_DEBUG_F ? "F" : "", dbg.letters & USI_DEBUG_Z ? "Z" : "",
                        dbg.letters & USI_DEBUG_P ? "P" : "", dbg.letters & USI_DEBUG_U ? "U" : "",
                        dbg.letters & USI_DEBUG_T ? "T" : "");
    else if (rc == -2)
        usi_report_warn("ignoring %s=%s (a glob has '%c': globs have only `*` and `?`); using "
                        "the default, %s",
                        set->name, v, bad, set->def_text);
    if (globs)
        snprintf(dbg.globs, sizeof dbg.globs, "%s", globs);
    if (dbg.letters & USI_DEBUG_U)
        dbg.letters |= USI_DEBUG_FREED;
    if (dbg.leaks) /* a leak report needs the allocation stacks */
        dbg.letters |= USI_DEBUG_U;
    usi_debug_enabled = dbg.letters != 0;
}

/* Glob match with * and ?, on name[0..) against pat[0..len). */
static int glob_match(const char *pat, size_t len, const char *name)
{
    if (len == 0)
        return *name == '\0';
    if (*pat == '*') {
        for (const char *n = name;; n++) {
            if (glob_match(pat + 1, len - 1, n))
                return 1;
            if (*n == '\0')
                return 0;
        }
    }
    if (*name == '\0' || (*pat != '?' && *pat != *name))
        return 0;
    return glob_match(pat + 1, len - 1, name + 1);
}

/* The letters of the cache named `name`: all of them where a glob selects it (or there are
 * no globs); else U alone while a leak report is asked for, since the report covers every
 * cache (USLAB_LEAKS; before session 17's audit a glob left the other caches out, and the
 * report counted only the selected caches' leaks). */
unsigned usi_debug_flags_for(const char *name, unsigned cache_flags)
{
    if (!dbg.letters || (cache_flags & USI_CACHE_INTERNAL))
        return 0;
    if (dbg.globs[0] == '\0')
        return dbg.letters;
    unsigned i = 0;
    for (const char *g = dbg.globs; *g; i++) {
        size_t len = strcspn(g, ",");
        if (len && glob_match(g, len, name)) {
            if (i < 64)
                __atomic_fetch_or(&dbg.globs_matched, (uint64_t)1 << i, __ATOMIC_RELAXED);
            return dbg.letters;
        }
        g += len + (g[len] == ',');
    }
    return dbg.leaks ? USI_DEBUG_U : 0;
}

/* At exit: a glob that selected no cache checked nothing, and said nothing (session 18's
 * audit: `USLAB_DEBUG=FZ,malloc-24`, the size asked for rather than a class's name). */
static void note_unmatched_globs(void)
{
    uint64_t matched = __atomic_load_n(&dbg.globs_matched, __ATOMIC_RELAXED);
    unsigned i = 0;
    for (const char *g = dbg.globs; *g && i < 64; i++) {
        size_t len = strcspn(g, ",");
        if (len && !(matched & ((uint64_t)1 << i)))
            usi_report_warn("%s: the glob '%.*s' selected no cache, so nothing was checked for "
                            "it (malloc classes are named by their block size: malloc-16, "
                            "malloc-32, malloc-48, ...; USLAB_STATS=1 lists the caches)",
                            usi_settings_table[USI_SETTING_DEBUG].name, (int)len, g);
        g += len + (g[len] == ',');
    }
}

void usi_debug_layout(struct uslab_cache *c)
{
    size_t left = (c->debug & USI_DEBUG_Z) ? (c->align > 16 ? c->align : 16) : 0;
    size_t end = left + c->size + ((c->debug & USI_DEBUG_Z) ? RED_RIGHT : 0);
    size_t tail_at = round_up(end, sizeof(void *));
    size_t tail = (c->debug & USI_DEBUG_U) ? sizeof(struct tail) : offsetof(struct tail, alloc);
    c->obj_offset = (uint32_t)left;
    c->tail_offset = (uint32_t)tail_at;
    c->stride = round_up(tail_at + tail, c->align);
}

static struct tail *tail_of(const struct uslab_cache *c, char *slot)
{
    return (struct tail *)(void *)(slot + c->tail_offset);
}

/* ---- reports ---------------------------------------------------------------------- */

static void out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void out(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    size_t n = usi_report_vformat(buf, sizeof buf, fmt, ap); /* report.c's: little stack */
    va_end(ap);
    if (n > 0)
        usi_os_write_err(buf, n);
}

/* One frame as text: "function (file.c:line)", "function+0xoff (object)", "object+0xoff"
 * or the address (symbols.c; no allocation, no lock). */
static void frame_text(void *pc, char *buf, size_t len)
{
    usi_symbols_describe(pc, buf, len);
}

static void print_frame(const char *indent, void *pc)
{
    char text[512];
    frame_text(pc, text, sizeof text);
    out("%s%s\n", indent, text);
}

/* A stack as captured: uslab's own frames are left out already (usi_unwind_stack). */
static void print_stack(void *const *stack, uint32_t depth)
{
    for (uint32_t i = 0; i < depth; i++)
        print_frame("    ", stack[i]);
}

static void print_track(const char *what, const struct track *t)
{
    if (t->depth == 0)
        return;
    /* The caller checked the state word before it: a linear overflow that reaches the
     * tracks passes it first. The bound is kept all the same (an overwritten depth walked
     * off the record, session 18's audit). */
    uint32_t depth = t->depth < TRACK_DEPTH ? t->depth : TRACK_DEPTH;
    uint64_t now = usi_os_now_ms();
    out("INFO: %s age=%llu ms tid=%u\n", what, (unsigned long long)(now - t->when_ms), t->tid);
    print_stack(t->stack, depth);
}

/* The tail's state word is one of the two a debug cache writes: else the program overwrote
 * the tail (an overflow past the right red zone), and the tracks after it are its data. */
static int tail_intact(const struct tail *t)
{
    return t->state == STATE_ALLOC || t->state == STATE_FREE;
}

static void hexdump(const char *label, const unsigned char *p, size_t n)
{
    for (size_t off = 0; off < n; off += 16) {
        char line[128];
        int k = snprintf(line, sizeof line, "%-8s %p: ", off ? "" : label, (const void *)(p + off));
        for (size_t i = off; i < off + 16 && i < n; i++)
            k += snprintf(line + k, sizeof line - (size_t)k, "%02x ", p[i]);
        line[k++] = '\n';
        usi_os_write_err(line, (size_t)k);
    }
}

static const char rule[] =
    "=============================================================================\n";

void usi_debug_report(struct uslab_cache *c, struct usi_slab *s, const void *obj, const char *what)
{
    struct usi_symbols_cache *names = usi_symbols_begin(); /* three stacks, a few files */
    out("%sBUG %s: %s\n", rule, c->name, what);
    out("-----------------------------------------------------------------------------\n");
    char *slot = NULL;
    if (s) {
        uintptr_t off = (uintptr_t)obj - c->obj_offset - (uintptr_t)s->objs;
        if (off < (uintptr_t)s->nobjs * c->stride)
            slot = s->objs + off / c->stride * c->stride;
    }
    /* The object the pointer is in (or nearest before it): an interior pointer is reported
     * with that object's sizes, tracks and dump (session 18's audit: the bad pointer was
     * labelled the object, with no offset and no stacks). */
    const char *base = slot ? slot + c->obj_offset : (const char *)obj;
    const struct tail *tk = slot && c->debug ? tail_of(c, slot) : NULL;
    if (base != (const char *)obj)
        out("INFO: pointer %p is %ld bytes into the object at %p\n", obj,
            (long)((const char *)obj - base), (const void *)base);
    if (tk && tail_intact(tk) && (tk->asked & ASKED_SET))
        out("INFO: object %p, size %zu (%llu asked for), objects every %zu bytes\n",
            (const void *)base, c->size, (unsigned long long)(tk->asked & ~ASKED_SET), c->stride);
    else
        out("INFO: object %p, size %zu, objects every %zu bytes\n", (const void *)base, c->size,
            c->stride);
    if (s) {
        out("INFO: slab %p objects=%u used=%u colour=%u first object %p\n", (void *)s->span,
            s->nobjs, s->inuse, s->colour, (void *)(s->objs + c->obj_offset));
    }
    if (tk) {
        if ((c->debug & USI_DEBUG_U) && tail_intact(tk)) {
            print_track("Allocated in", &tk->alloc);
            print_track("Freed in", &tk->free);
        } else if (c->debug & USI_DEBUG_U) {
            out("INFO: allocation and free stacks unknown: the tracking record at %p, after the "
                "object's red zone, is overwritten\n",
                (const void *)tk);
        }
        if (c->obj_offset)
            hexdump("Redzone", (unsigned char *)slot, c->obj_offset);
        hexdump("Object", (const unsigned char *)base, c->size < 256 ? c->size : 256);
        if (c->debug & USI_DEBUG_Z)
            hexdump("Redzone", (const unsigned char *)base + c->size,
                    c->tail_offset - c->obj_offset - c->size);
    }
    out("INFO: detected in\n");
    if (pending.depth == 0) /* none was taken before the lock (usi_debug_capture_put) */
        usi_debug_capture();
    print_stack(pending.stack, pending.depth);
    out("%s", rule);
    usi_symbols_end(names);
    if (!dbg.continue_after_report)
        abort();
}

void usi_debug_bug(const char *cache, const char *what)
{
    usi_debug_capture(); /* no lock is held on the paths that report invalid pointers */
    out("%sBUG %s: %s\n", rule, cache, what);
    out("-----------------------------------------------------------------------------\n");
    out("INFO: detected in\n");
    print_stack(pending.stack, pending.depth);
    out("%s", rule);
    abort();
}

/* ---- hooks ---------------------------------------------------------------------------- */

/* Blocks uslab allocates for itself through the program's allocator (the purger thread's
 * TLS, made by glibc's pthread_create): tracked with OWN_TID and left out of the leak
 * report, which listed the live purger's TLS as the program's leak. */
#define OWN_TID UINT32_MAX
static __thread int own_allocations __attribute__((tls_model("initial-exec")));

void usi_debug_own_allocations(int delta)
{
    own_allocations += delta;
}

static void record(struct track *t)
{
    t->depth = own_allocations ? 0 : pending.depth;
    memcpy(t->stack, pending.stack, t->depth * sizeof(void *));
    t->when_ms = usi_os_now_ms();
    t->tid = own_allocations ? OWN_TID : usi_os_gettid();
}

/* First byte in p[0..n) that is not `v`, or NULL. */
/* The first of p[0..n) that is not v, or NULL: eight bytes a step, then the byte. */
static const unsigned char *first_not(const unsigned char *p, size_t n, unsigned char v)
{
    uint64_t all_v = 0x0101010101010101ull * v, w;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, p + i, 8);
        if (w != all_v)
            break;
    }
    for (; i < n; i++)
        if (p[i] != v)
            return p + i;
    return NULL;
}

static void check_redzones(struct uslab_cache *c, struct usi_slab *s, char *slot,
                           unsigned char want, const char *when)
{
    char *obj = slot + c->obj_offset;
    size_t right = c->tail_offset - c->obj_offset - c->size;
    const unsigned char *bad = first_not((unsigned char *)slot, c->obj_offset, want);
    /* A live malloc block's class beyond the size asked for (usi_debug_asked). */
    uint64_t a = __atomic_load_n(&tail_of(c, slot)->asked, __ATOMIC_ACQUIRE);
    size_t asked = want == RED_ACTIVE && (a & ASKED_SET) ? (size_t)(a & ~ASKED_SET) : c->size;
    if (!bad && asked < c->size)
        bad = first_not((unsigned char *)obj + asked, c->size - asked, want);
    if (!bad)
        bad = first_not((unsigned char *)obj + c->size, right, want);
    if (bad) {
        char what[200];
        long at = (long)((const char *)bad - obj);
        if (asked < c->size && at >= (long)asked)
            snprintf(what, sizeof what,
                     "Redzone overwritten (%s): byte 0x%02x at %p, object%+ld, past the %zu "
                     "bytes asked for",
                     when, *bad, (const void *)bad, at, asked);
        else
            snprintf(what, sizeof what, "Redzone overwritten (%s): byte 0x%02x at %p, object%+ld",
                     when, *bad, (const void *)bad, at);
        usi_debug_report(c, s, obj, what);
    }
}

/* A free object's poison (P): a byte that is not is a write after free. */
static void check_poison(struct uslab_cache *c, struct usi_slab *s, char *slot, const char *when)
{
    char *obj = slot + c->obj_offset;
    const unsigned char *bad = first_not((unsigned char *)obj, c->size - 1, POISON_FREE);
    if (!bad && ((unsigned char *)obj)[c->size - 1] != POISON_END)
        bad = (unsigned char *)obj + c->size - 1;
    if (bad) {
        char what[160];
        snprintf(what, sizeof what,
                 "Poison overwritten%s: byte 0x%02x at %p, object+%ld (written after free)", when,
                 *bad, (const void *)bad, (long)((const char *)bad - obj));
        usi_debug_report(c, s, obj, what);
    }
}

void usi_debug_asked(struct uslab_cache *c, void *obj, size_t size)
{
    if (!(c->debug & (USI_DEBUG_Z | USI_DEBUG_U)))
        return;
    char *slot = (char *)obj - c->obj_offset;
    if (!(c->debug & USI_DEBUG_Z)) { /* U: the leak report's size, no red zone */
        __atomic_store_n(&tail_of(c, slot)->asked, size >= c->size ? 0 : ASKED_SET | size,
                         __ATOMIC_RELAXED);
        return;
    }
    USI_VG_DEFINED(slot, c->stride);
    /* The exit check may read it from another thread (no lock here): the user's part is
     * never smaller, as it reads, than what the caller may write. Growing, the new size
     * first; shrinking, the red zone first. */
    struct tail *t = tail_of(c, slot);
    uint64_t was = __atomic_load_n(&t->asked, __ATOMIC_RELAXED);
    size_t had = (was & ASKED_SET) ? (size_t)(was & ~ASKED_SET) : c->size;
    if (size >= c->size) { /* all the user's (a realloc may have grown it in place) */
        __atomic_store_n(&t->asked, 0, __ATOMIC_RELEASE);
        return;
    }
    if (size >= had) /* the bytes past `size` are red already */
        __atomic_store_n(&t->asked, ASKED_SET | size, __ATOMIC_RELEASE);
    memset((char *)obj + size, RED_ACTIVE, c->size - size);
    if (size < had)
        __atomic_store_n(&t->asked, ASKED_SET | size, __ATOMIC_RELEASE);
    USI_VG_UNDEFINED((char *)obj + size, c->size - size);
}

size_t usi_debug_usable_size(const struct uslab_cache *c, const void *obj)
{
    if (!(c->debug & USI_DEBUG_Z))
        return c->size;
    const struct tail *t = tail_of(c, (char *)(uintptr_t)obj - c->obj_offset);
    return (t->asked & ASKED_SET) ? (size_t)(t->asked & ~ASKED_SET) : c->size;
}

void usi_debug_on_alloc(struct uslab_cache *c, struct usi_slab *s, char *slot)
{
    USI_VG_DEFINED(slot, c->stride); /* the checks read a freed object */
    struct tail *t = tail_of(c, slot);
    char *obj = slot + c->obj_offset;
    int was_free = t->state == STATE_FREE; /* never-used objects read as zero */
    if (was_free && (c->debug & USI_DEBUG_Z))
        check_redzones(c, s, slot, RED_INACTIVE, "while free");
    if (was_free && (c->debug & USI_DEBUG_P))
        check_poison(c, s, slot, "");
    if (c->debug & USI_DEBUG_Z) {
        memset(slot, RED_ACTIVE, c->obj_offset);
        memset(obj + c->size, RED_ACTIVE, c->tail_offset - c->obj_offset - c->size);
    }
    if (c->debug & USI_DEBUG_P)
        memset(obj, POISON_NEW, c->size);
    t->state = STATE_ALLOC;
    t->asked = 0; /* a malloc caller says its size next (usi_debug_asked) */
    if (c->debug & USI_DEBUG_U) {
        record(&t->alloc);
        t->free.depth = 0;
    }
    if (c->debug & USI_DEBUG_T)
        out("TRACE %s alloc %p inuse=%u/%u\n", c->name, (void *)obj, s->inuse, s->nobjs);
}

void usi_debug_on_release(struct uslab_cache *c, struct usi_slab *s, char *slot)
{
    USI_VG_DEFINED(slot, c->stride);
    if (c->debug & USI_DEBUG_Z)
        check_redzones(c, s, slot, RED_INACTIVE, "while free, in quarantine");
    if (c->debug & USI_DEBUG_P)
        check_poison(c, s, slot, " (in quarantine)");
    USI_VG_NOACCESS(slot + c->obj_offset, c->size);
}

int usi_debug_is_free(const struct uslab_cache *c, const char *slot)
{
    return tail_of(c, (char *)(uintptr_t)slot)->state == STATE_FREE;
}

void usi_debug_on_free(struct uslab_cache *c, struct usi_slab *s, char *slot)
{
    USI_VG_DEFINED(slot, c->stride);
    struct tail *t = tail_of(c, slot);
    char *obj = slot + c->obj_offset;
    if ((c->debug & USI_DEBUG_F) && t->state != STATE_ALLOC)
        usi_debug_report(c, s, obj, "Object state corrupted (tail overwritten)");
    if (c->debug & USI_DEBUG_Z)
        check_redzones(c, s, slot, RED_ACTIVE, "on free");
    if (c->debug & USI_DEBUG_Z) {
        memset(slot, RED_INACTIVE, c->obj_offset);
        memset(obj + c->size, RED_INACTIVE, c->tail_offset - c->obj_offset - c->size);
    }
    if (c->debug & USI_DEBUG_P) {
        memset(obj, POISON_FREE, c->size - 1);
        ((unsigned char *)obj)[c->size - 1] = POISON_END;
    }
    t->state = STATE_FREE;
    if (c->debug & USI_DEBUG_FREED)
        record(&t->free);
    USI_VG_NOACCESS(obj, c->size);
    if (c->debug & USI_DEBUG_T)
        out("TRACE %s free %p inuse=%u/%u\n", c->name, (void *)obj, s->inuse, s->nobjs);
}

/* ---- blocks of the system allocator (issue 16) --------------------------------------- */

/*
 * When debugging or leak reporting is on, every block the malloc front end gets from the
 * system allocator (sizes above the slab range, large alignments, fallbacks) is recorded
 * here with its size and allocation stack, so that leak reports list it and a pointer that
 * is neither a slab block nor one of these is reported instead of handed to glibc.
 * An open-addressing table keyed by address, in its own mapping; a freed block stays as a
 * tombstone (state FREED: a second free is reported as such) until its slot is reused or
 * the table is rebuilt, which keeps only live blocks. Under large.lock, a leaf lock: the
 * malloc paths call in with no other uslab lock held, the leak report after its walk over
 * the caches, the fork handlers first (design §6).
 */
enum { LARGE_EMPTY, LARGE_LIVE, LARGE_FREED };

struct large_entry {
    const void *p;
    size_t size;
    uint32_t state;
    struct track alloc;
};

static struct {
    usi_mutex lock;
    struct large_entry *slots;
    size_t cap, live, used; /* used: live + tombstones */
    int missed;             /* a block went untracked (no memory for the table, or a signal handler
                             * inside this thread's table work): from then on an address the table does
                             * not know may be that block, so its free is left unchecked, to glibc's own
                             * checks, not reported as an invalid pointer (atomic; session 16's audit:
                             * a correct program near its RLIMIT_DATA was aborted) */
} large = {.lock = USI_MUTEX_INIT};

/* Set while this thread holds large.lock: a signal handler that interrupted it and frees
 * (or allocates) must not wait for the lock its own thread holds. It skips the table
 * instead: the block goes unchecked, or untracked (free from a signal handler is not
 * async-signal-safe anyway; a report must still never deadlock, issue 16). */
static __thread int holding_large __attribute__((tls_model("initial-exec")));

/* Takes large.lock unless this thread already holds it (interrupted by a handler that came
 * back in): 1, or 0 and nothing taken. */
static int large_lock(void)
{
    if (holding_large)
        return 0;
    usi_lock(&large.lock);
    holding_large = 1;
    return 1;
}

static void large_unlock(void)
{
    holding_large = 0;
    usi_unlock(&large.lock);
}

static size_t large_hash(const void *p, size_t cap)
{
    return (size_t)(usi_mix64((uint64_t)(uintptr_t)p) & (cap - 1));
}

/* The slot of p, or of the empty slot where it would go. */
static struct large_entry *large_find(const void *p)
{
    size_t i = large_hash(p, large.cap);
    for (;; i = (i + 1) & (large.cap - 1))
        if (large.slots[i].p == p || large.slots[i].state == LARGE_EMPTY)
            return &large.slots[i];
}

/* Rebuilds the table with room for twice the live blocks (tombstones dropped); 0 or -1. */
static int large_rebuild(void)
{
    size_t cap = 1024;
    while (cap < 4 * (large.live + 1))
        cap *= 2;
    struct large_entry *slots = usi_os_map(cap * sizeof *slots);
    if (!slots)
        return -1;
    struct large_entry *old = large.slots;
    size_t old_cap = large.cap;
    large.slots = slots;
    large.cap = cap;
    large.used = large.live;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].state == LARGE_LIVE)
            *large_find(old[i].p) = old[i];
    usi_os_unmap(old, old_cap * sizeof *old);
    return 0;
}

void usi_debug_large_alloc(const void *p, size_t size)
{
    if (!p)
        return;
    usi_debug_capture();
    if (!large_lock()) { /* from a handler that interrupted this thread's table work */
        __atomic_store_n(&large.missed, 1, __ATOMIC_RELAXED);
        return; /* untracked */
    }
    if ((large.used + 1) * 2 > large.cap && large_rebuild() != 0) {
        __atomic_store_n(&large.missed, 1, __ATOMIC_RELAXED);
        large_unlock(); /* no memory for the table: the block goes untracked */
        return;
    }
    struct large_entry *e = large_find(p);
    if (e->state == LARGE_EMPTY)
        large.used++;
    if (e->state != LARGE_LIVE)
        large.live++;
    e->p = p;
    e->size = size;
    e->state = LARGE_LIVE;
    record(&e->alloc);
    large_unlock();
}

int usi_debug_large_release(const void *p, int release, size_t *size)
{
    int r = 0;
    if (!large_lock())
        return 2; /* from a handler that interrupted this thread's table work: unchecked */
    if (large.cap) {
        struct large_entry *e = large_find(p);
        if (e->state == LARGE_LIVE) {
            r = 1;
            *size = e->size;
            if (release) {
                e->state = LARGE_FREED;
                large.live--;
            }
        } else if (e->state == LARGE_FREED) {
            r = -1;
            *size = e->size;
        }
    }
    if (r == 0 && __atomic_load_n(&large.missed, __ATOMIC_RELAXED))
        r = 2; /* maybe a block that went untracked */
    large_unlock();
    return r;
}

const void *usi_debug_large_containing(const void *p, size_t *size)
{
    const void *start = NULL;
    if (!large_lock())
        return NULL;
    for (size_t i = 0; i < large.cap && !start; i++) { /* a report's cold path: a scan */
        const struct large_entry *e = &large.slots[i];
        if (e->state == LARGE_LIVE && (uintptr_t)p - (uintptr_t)e->p < e->size) {
            start = e->p;
            *size = e->size;
        }
    }
    large_unlock();
    return start;
}

void usi_debug_prefork(void)
{
    usi_lock(&large.lock);
}

void usi_debug_postfork(int child)
{
    if (child)
        usi_mutex_init(&large.lock); /* as the pages lock: depth reset by os */
    else
        usi_unlock(&large.lock);
}

/* ---- leak report --------------------------------------------------------------------- */

/*
 * Live objects grouped into sites: a site is an allocation stack, compared without uslab's
 * own leading frames (one call that malloc serves from a slab or hands to the system
 * allocator passes through different frames of uslab). Within a site the objects are
 * counted per cache (its parts), smallest objects first. Everything lives in one mapping
 * made for the report, so the report allocates nothing.
 *
 * The report must never wait for a lock: exit() may be called by a signal handler that
 * interrupted this very thread inside malloc or free, with a cache lock, the large table's
 * or the registry's held (waiting would hang for ever, and the registry's pinned walk
 * asserts that no lock is held). Each lock is tried for a moment (usi_trylock_for); what
 * could not be locked is named as not scanned, in the text and in the JSON.
 */
#define LEAK_SITES   (1u << 16) /* at most half of them used */
#define LEAK_PARTS   (1u << 15)
#define LEAK_SKIPPED 64u /* names of what was not scanned; more are only counted */
#define LEAK_LOCK_MS 20u /* how long a busy lock is tried before it is given up */

/* The name the system allocator's blocks are listed under; "every slab cache" is what the
 * registry walk skips when the registry lock is busy ("*", as a glob of USLAB_DEBUG). */
static const char system_allocator[] = "system allocator";
static const char every_cache[] = "*";

struct leak_part {
    const char *cache; /* compared by address: a cache's name is its own string */
    size_t order;      /* object size; the system allocator's blocks come last */
    size_t count, bytes;
    uint32_t next; /* index + 1 of the site's next part; 0 ends the list */
};

struct leak_site {
    void *stack[TRACK_DEPTH]; /* a copy, uslab's leading frames left out */
    uint32_t depth;
    uint32_t parts; /* index + 1 of the first part; 0: the slot is free */
    size_t count, bytes;
};

struct leak_table {
    struct leak_site *sites;
    struct leak_part *parts;
    const char **skipped;
    uint32_t *order; /* sites' indices, largest first, for printing */
    size_t nsites, nparts, nskipped, objects, bytes;
    size_t overwritten; /* live objects whose tracking record the program overwrote */
};

static const struct track no_track;

static uint64_t stack_hash(void *const *stack, uint32_t depth)
{
    uint64_t h = 1469598103934665603ull;
    for (uint32_t i = 0; i < depth; i++)
        h = (h ^ (uint64_t)(uintptr_t)stack[i]) * 1099511628211ull;
    return h;
}

static void leak_skipped(struct leak_table *lt, const char *what)
{
    if (lt->nskipped < LEAK_SKIPPED)
        lt->skipped[lt->nskipped] = what;
    lt->nskipped++;
}

/* Counts one live object of `size` bytes, allocated from t's stack, in `cache` (its order
 * among the site's parts). Dropped when the tables are full. */
static void leak_add(struct leak_table *lt, const char *cache, size_t order, const struct track *t,
                     size_t size)
{
    /* A track overwritten by the program may hold any depth: the copy below stays inside. */
    uint32_t depth = t->depth < TRACK_DEPTH ? t->depth : TRACK_DEPTH;
    void *const *stack = t->stack;
    size_t i = (size_t)stack_hash(stack, depth) & (LEAK_SITES - 1);
    struct leak_site *site;
    for (;; i = (i + 1) & (LEAK_SITES - 1)) {
        site = &lt->sites[i];
        if (!site->parts)
            break;
        if (site->depth == depth && memcmp(site->stack, stack, depth * sizeof(void *)) == 0)
            break;
    }
    struct leak_part *part = NULL;
    for (uint32_t k = site->parts; k && !part; k = lt->parts[k - 1].next)
        if (lt->parts[k - 1].cache == cache)
            part = &lt->parts[k - 1];
    if (!part) {
        if (lt->nparts == LEAK_PARTS || (!site->parts && lt->nsites == LEAK_SITES / 2))
            return; /* full: not listed */
        if (!site->parts) {
            memcpy(site->stack, stack, depth * sizeof(void *));
            site->depth = depth;
            lt->nsites++;
        }
        uint32_t *link = &site->parts; /* the parts stay ordered by object size */
        while (*link && lt->parts[*link - 1].order <= order)
            link = &lt->parts[*link - 1].next;
        part = &lt->parts[lt->nparts++];
        *part = (struct leak_part){cache, order, 0, 0, *link};
        *link = (uint32_t)lt->nparts;
    }
    part->count++;
    part->bytes += size;
    site->count++;
    site->bytes += size;
    lt->objects++;
    lt->bytes += size;
}

/* fn on every object of debug cache c that is out of its slabs (bitmap bit set: live, or
 * quarantined), with c->lock held by the caller: the leak report, the exit check and a
 * destroy's list of live objects walk the same way. */
static void each_held_object(struct uslab_cache *c,
                             void (*fn)(struct uslab_cache *c, struct usi_slab *s, char *slot,
                                        void *arg),
                             void *arg)
{
    for (unsigned l = USI_SLAB_PARTIAL; l <= USI_SLAB_FULL; l++)
        for (struct usi_slab *s = c->lists[l].first; s; s = s->next)
            for (uint32_t i = 0; i < s->bump; i++)
                if (s->alloc_map[i >> 6] & ((uint64_t)1 << (i & 63)))
                    fn(c, s, usi_slab_object(c, s, i), arg);
}

static void leak_scan_object(struct uslab_cache *c, struct usi_slab *s, char *slot, void *arg)
{
    (void)s;
    struct leak_table *lt = arg;
    const struct tail *t = tail_of(c, slot);
    if (t->state == STATE_FREE || (tail_intact(t) && t->alloc.tid == OWN_TID))
        return; /* quarantined (freed), or uslab's own */
    if (!tail_intact(t))
        lt->overwritten++; /* listed with no stack: its track is data */
    /* The size asked for (malloc's, usi_debug_asked), else the object's. */
    size_t size =
        tail_intact(t) && (t->asked & ASKED_SET) ? (size_t)(t->asked & ~ASKED_SET) : c->size;
    leak_add(lt, c->name, c->size, tail_intact(t) ? &t->alloc : &no_track, size);
}

static void leak_scan_cache(struct uslab_cache *c, void *arg)
{
    struct leak_table *lt = arg;
    if (!(c->debug & USI_DEBUG_U))
        return;
    if (usi_trylock_for(&c->lock, LEAK_LOCK_MS) != 0) {
        leak_skipped(lt, c->name);
        return;
    }
    each_held_object(c, leak_scan_object, lt);
    usi_unlock(&c->lock);
}

static void leak_scan_large(struct leak_table *lt)
{
    /* holding_large: this thread was interrupted inside the table's code. */
    if (holding_large || usi_trylock_for(&large.lock, LEAK_LOCK_MS) != 0) {
        leak_skipped(lt, system_allocator);
        return;
    }
    holding_large = 1;
    for (size_t i = 0; i < large.cap; i++)
        if (large.slots[i].state == LARGE_LIVE && large.slots[i].alloc.tid != OWN_TID)
            leak_add(lt, system_allocator, SIZE_MAX, &large.slots[i].alloc, large.slots[i].size);
    large_unlock();
}

/* Sites largest first, into lt->order (a shell sort on indices: no allocation). */
static void leak_sort(struct leak_table *lt)
{
    size_t n = 0;
    for (uint32_t i = 0; i < LEAK_SITES; i++)
        if (lt->sites[i].parts)
            lt->order[n++] = i;
    for (size_t gap = n / 2; gap > 0; gap = gap == 2 ? 1 : gap * 5 / 11) {
        for (size_t i = gap; i < n; i++) {
            uint32_t v = lt->order[i];
            size_t j = i;
            for (; j >= gap && lt->sites[lt->order[j - gap]].bytes < lt->sites[v].bytes; j -= gap)
                lt->order[j] = lt->order[j - gap];
            lt->order[j] = v;
        }
    }
}

/* A JSON string of text (quotes, backslashes and control characters escaped). */
static void json_string(const char *text)
{
    char buf[600];
    size_t k = 0;
    buf[k++] = '"';
    for (const char *c = text; *c && k + 8 < sizeof buf; c++) {
        if (*c == '"' || *c == '\\') {
            buf[k++] = '\\';
            buf[k++] = *c;
        } else if ((unsigned char)*c < 0x20) {
            k += (size_t)snprintf(buf + k, sizeof buf - k, "\\u%04x", (unsigned char)*c);
        } else {
            buf[k++] = *c;
        }
    }
    buf[k++] = '"';
    usi_os_write_err(buf, k);
}

static void print_leaks_json(const struct leak_table *lt)
{
    out("{\"uslab_leaks\": {\"pid\": %d, \"objects\": %zu, \"bytes\": %zu, \"sites\": %zu, "
        "\"overwritten\": %zu, \"by_site\": [",
        (int)usi_os_getpid(), lt->objects, lt->bytes, lt->nsites, lt->overwritten);
    for (size_t i = 0; i < lt->nsites; i++) {
        const struct leak_site *site = &lt->sites[lt->order[i]];
        out("%s\n  {\"bytes\": %zu, \"objects\": %zu, \"caches\": [", i ? "," : "", site->bytes,
            site->count);
        for (uint32_t k = site->parts; k; k = lt->parts[k - 1].next) {
            const struct leak_part *part = &lt->parts[k - 1];
            out("%s{\"cache\": ", k == site->parts ? "" : ", ");
            json_string(part->cache);
            out(", \"objects\": %zu, \"bytes\": %zu}", part->count, part->bytes);
        }
        out("], \"stack\": [");
        for (uint32_t f = 0; f < site->depth; f++) {
            char text[512];
            frame_text(site->stack[f], text, sizeof text);
            out("%s", f ? ", " : "");
            json_string(text);
        }
        out("]}");
    }
    out("], \"only_caches\": ");
    if (dbg.leaks || !dbg.globs[0])
        out("null");
    else
        json_string(dbg.globs);
    out(", \"not_scanned\": [");
    for (size_t i = 0; i < lt->nskipped && i < LEAK_SKIPPED; i++) {
        out("%s", i ? ", " : "");
        json_string(lt->skipped[i]);
    }
    if (lt->nskipped > LEAK_SKIPPED)
        out(", \"+%zu more\"", lt->nskipped - LEAK_SKIPPED);
    out("]}}\n");
}

static void print_leaks_text(const struct leak_table *lt)
{
    out("uslab: leak report: %zu live objects, %zu bytes, from %zu allocation sites\n", lt->objects,
        lt->bytes, lt->nsites);
    if (!dbg.leaks && dbg.globs[0]) /* U from USLAB_DEBUG's letters, for its globs only */
        out("uslab: leak report: of the caches the debug globs select (%s) and the system "
            "allocator's blocks only; USLAB_LEAKS=1 tracks every cache\n",
            dbg.globs);
    for (size_t i = 0; i < lt->nskipped && i < LEAK_SKIPPED; i++) {
        const char *what = lt->skipped[i];
        if (what == every_cache)
            out("uslab: leak report: no slab cache scanned: the cache registry's lock is held\n");
        else if (what == system_allocator)
            out("uslab: leak report: the system allocator's blocks not scanned: their table's "
                "lock is held\n");
        else
            out("uslab: leak report: cache %s not scanned: its lock is held\n", what);
    }
    if (lt->nskipped > LEAK_SKIPPED)
        out("uslab: leak report: %zu more caches not scanned\n", lt->nskipped - LEAK_SKIPPED);
    if (lt->overwritten)
        out("uslab: leak report: %zu of these objects had their tracking record overwritten "
            "(an overflow past the block): listed with no stack\n",
            lt->overwritten);
    for (size_t i = 0; i < lt->nsites; i++) {
        const struct leak_site *site = &lt->sites[lt->order[i]];
        out("LEAK: %zu bytes in %zu objects (", site->bytes, site->count);
        for (uint32_t k = site->parts; k; k = lt->parts[k - 1].next)
            out("%s%s x%zu", k == site->parts ? "" : ", ", lt->parts[k - 1].cache,
                lt->parts[k - 1].count);
        out("), allocated from:\n");
        if (site->depth == 0)
            out("    (stack unknown)\n");
        for (uint32_t f = 0; f < site->depth; f++)
            print_frame("    ", site->stack[f]);
    }
}

static void keep_objects(void *names)
{
    usi_symbols_keep_objects(names);
}

void usi_debug_leak_report(void);
void usi_debug_leak_report(void)
{
    /* The C and C++ runtimes' own blocks for the process's life (stdio's buffers, the C++
     * emergency exception pool, a joined thread's cached TLS) are not the program's leaks:
     * freed first where that is safe, as valgrind does (session 18's audit: every C++
     * program's report began with libstdc++'s 72,704-byte pool). */
    /* Every frame of every site is named: the files stay mapped and their functions sorted
     * for the whole report (symbols.c), not opened again for each frame (a report of gcc's
     * 820 sites took 4 s); where the objects lie is kept first, as freeing the runtime's
     * blocks takes the dlopen'd ones out of the dynamic linker's table. */
    struct usi_symbols_cache *names = usi_symbols_begin();
    usi_os_runtime_freeres(keep_objects, names);
    size_t sites = LEAK_SITES * sizeof(struct leak_site);
    size_t parts = LEAK_PARTS * sizeof(struct leak_part);
    size_t skipped = LEAK_SKIPPED * sizeof(const char *);
    size_t bytes = sites + parts + skipped + LEAK_SITES / 2 * sizeof(uint32_t);
    char *mem = usi_os_map(bytes);
    if (!mem) { /* say so: silence would read as "no leaks" */
        out("uslab: leak report: no memory for its table\n");
        usi_symbols_end(names);
        return;
    }
    struct leak_table lt = {
        .sites = (struct leak_site *)(void *)mem,
        .parts = (struct leak_part *)(void *)(mem + sites),
        .skipped = (const char **)(void *)(mem + sites + parts),
        .order = (uint32_t *)(void *)(mem + sites + parts + skipped),
    };
    if (usi_registry_try_each(leak_scan_cache, &lt, LEAK_LOCK_MS) != 0)
        leak_skipped(&lt, every_cache);
    leak_scan_large(&lt); /* after the walk: large.lock is taken with no other lock (§6) */
    leak_sort(&lt);
    /* A clean run says nothing unless a report was asked for (USLAB_LEAKS): U of
     * USLAB_DEBUG alone printed "0 live objects" in every process (issue 39). */
    int quiet = !dbg.leaks && !lt.objects && !lt.nskipped && !lt.overwritten;
    if (quiet)
        ;
    else if (dbg.leaks_json)
        print_leaks_json(&lt);
    else
        print_leaks_text(&lt);
    size_t leaked = lt.objects;
    usi_os_unmap(mem, bytes);
    usi_symbols_end(names);
    if (leaked && usi_options.leaks_exitcode) /* a leak fails the run, as under LSan */
        usi_os_exit_after_reports((int)usi_options.leaks_exitcode);
}

/* ---- live objects of a cache destroyed too early --------------------------------------- */

#define LIVE_LISTED 8u

struct live_list {
    struct {
        const void *obj;
        struct track alloc;
    } live[LIVE_LISTED];
    size_t n, more;
};

static void list_live_object(struct uslab_cache *c, struct usi_slab *s, char *slot, void *arg)
{
    (void)s;
    struct live_list *ll = arg;
    const struct tail *t = tail_of(c, slot);
    if (t->state != STATE_ALLOC) /* quarantined, or overwritten */
        return;
    if (ll->n == LIVE_LISTED) {
        ll->more++;
        return;
    }
    ll->live[ll->n].obj = slot + c->obj_offset;
    ll->live[ll->n].alloc = t->alloc;
    ll->n++;
}

void usi_debug_report_live(struct uslab_cache *c)
{
    if (!(c->debug & USI_DEBUG_U)) {
        out("uslab: USLAB_DEBUG=U,%s would list the live objects' allocation stacks\n", c->name);
        return;
    }
    struct live_list ll;
    ll.n = ll.more = 0;
    if (usi_trylock_for(&c->lock, LEAK_LOCK_MS) != 0)
        return;
    each_held_object(c, list_live_object, &ll); /* copied under the lock, printed after it */
    usi_unlock(&c->lock);
    struct usi_symbols_cache *names = usi_symbols_begin();
    for (size_t k = 0; k < ll.n; k++) {
        uint32_t depth =
            ll.live[k].alloc.depth < TRACK_DEPTH ? ll.live[k].alloc.depth : TRACK_DEPTH;
        out("uslab: live object %p of cache %s, allocated by thread %u at:\n", ll.live[k].obj,
            c->name, ll.live[k].alloc.tid);
        print_stack(ll.live[k].alloc.stack, depth);
    }
    usi_symbols_end(names);
    if (ll.more)
        out("uslab: and %zu more live objects of cache %s\n", ll.more, c->name);
}

/* ---- checks at exit (session 18's audit) -------------------------------------------- */

/* A live object's red zones, and a quarantined one's red zones and poison, are checked when
 * the object is next freed or handed out: never, for a block the program leaks or a freed
 * object that stays in the quarantine to the end. So at exit, after every destructor, each
 * debug cache with Z or P is walked once (its lock tried, as the leak report does). */
static void exit_check_object(struct uslab_cache *c, struct usi_slab *s, char *slot, void *arg)
{
    (void)arg;
    USI_VG_DEFINED(slot, c->stride);
    const struct tail *t = tail_of(c, slot);
    if (t->state == STATE_ALLOC && (c->debug & USI_DEBUG_Z)) {
        check_redzones(c, s, slot, RED_ACTIVE, "at exit, never freed");
    } else if (t->state == STATE_FREE) { /* quarantined */
        if (c->debug & USI_DEBUG_Z)
            check_redzones(c, s, slot, RED_INACTIVE, "while free, at exit");
        if (c->debug & USI_DEBUG_P)
            check_poison(c, s, slot, " (at exit)");
    }
}

static void exit_check_cache(struct uslab_cache *c, void *arg)
{
    if (!(c->debug & (USI_DEBUG_Z | USI_DEBUG_P)))
        return;
    if (usi_trylock_for(&c->lock, LEAK_LOCK_MS) != 0)
        return;
    each_held_object(c, exit_check_object, arg);
    usi_unlock(&c->lock);
}

static void exit_check(void)
{
    usi_debug_capture(); /* "detected in": the exit */
    usi_registry_try_each(exit_check_cache, NULL, LEAK_LOCK_MS);
}

__attribute__((destructor)) static void check_at_exit(void)
{
    if (!(dbg.letters & (USI_DEBUG_Z | USI_DEBUG_P))) /* set only by initialisation */
        return;
    if (usi_os_after_destructors(exit_check) != 0)
        exit_check();
}

/* After every library's destructor, when possible (usi_os_after_destructors): blocks a
 * library frees in its destructor are not leaks, whatever the order of finalisation. */
__attribute__((destructor)) static void leak_report_at_exit(void)
{
    if (dbg.letters && dbg.globs[0])
        note_unmatched_globs();
    if (!dbg.leaks && !(dbg.letters & USI_DEBUG_U)) /* set only by initialisation */
        return;
    if (usi_os_after_destructors(usi_debug_leak_report) != 0)
        usi_debug_leak_report();
}
