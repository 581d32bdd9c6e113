/* SPDX-License-Identifier: MIT */
/*
 * unwinder.c - the calling thread's stack (the symbols layer, rank 7; docs/design.md §9).
 *
 * A frame is three registers: pc, rsp and rbp (rbp may be unknown). The call frame
 * information (CFI) of the object pc is in says how the caller's are found from them: the
 * canonical frame address (CFA) is rsp or rbp plus an offset, the return address is saved at
 * CFA plus an offset, rbp is saved at CFA plus an offset or kept, and the caller's rsp is the
 * CFA (the x86-64 psABI). Only those three columns are followed; a CFA computed from another
 * register or by a DWARF expression ends the stack. The CFI is found as libgcc's unwinder
 * finds it with glibc 2.35 and later: _dl_find_object gives the object's .eh_frame_hdr, whose
 * sorted table gives the FDE. A signal handler's return address is glibc's __restore_rt
 * (the rt_sigreturn instructions, its FDE marked 'S'): the interrupted frame's registers are
 * in the ucontext at the handler's CFA, and its pc is exact (not a return address). The rows
 * read are kept in a memo (below); uslab's own frames are walked and left out (own_code).
 */
#define _GNU_SOURCE
#include "unwinder.h"

#include <dlfcn.h>
#include <string.h>
#include <ucontext.h>

/* DWARF register numbers of x86-64 (psABI figure 3.36). */
#define DW_BP 6
#define DW_SP 7
#define DW_RA 16

/* Pointer encodings of .eh_frame (LSB's DW_EH_PE_*). */
#define PE_PCREL   0x10
#define PE_DATAREL 0x30
#define PE_INDIR   0x80

enum how { SAME, AT_CFA, UNDEF, UNREAD }; /* a register's rule */

struct rule {
    int64_t off; /* AT_CFA: saved at CFA + off */
    enum how how;
};

/* The rules of one row of the CFI table. Invariant: cfa_reg is a DWARF register number; the
 * row is usable only if !cfa_expr and cfa_reg is DW_SP or DW_BP. */
struct row {
    int64_t cfa_off;
    uint64_t cfa_reg;
    int cfa_expr;
    struct rule bp, ra;
};

#define REMEMBERED 8                      /* DW_CFA_remember_state's stack; GCC nests one or two */
#define FRAME_MAX  ((uintptr_t)256 << 20) /* the farthest rbp is believed above rsp */

struct cie {
    const uint8_t *insns, *end; /* its initial instructions */
    uint64_t code_align, ra_reg;
    int64_t data_align;
    uint8_t fde_enc;
    int signal;   /* 'S': the frame is a signal handler's return (__restore_rt) */
    int fde_data; /* 'z': each FDE has augmentation data, after its length */
};

static uint32_t load32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* A word of the stack: a plain load (a sanitizer's memcpy would check another frame's
 * bytes). */
static uintptr_t stack_word(uintptr_t at)
{
    uintptr_t v;
    __builtin_memcpy(&v, (const void *)at, sizeof v);
    return v;
}

/* A LEB128 number at *pp (signed or not); advances *pp. */
static uint64_t leb(const uint8_t **pp, int is_signed)
{
    const uint8_t *p = *pp;
    uint64_t v = 0;
    unsigned shift = 0;
    uint8_t b;
    do {
        b = *p++;
        if (shift < 64)
            v |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
    } while (b & 0x80);
    if (is_signed && shift < 64 && (b & 0x40))
        v |= ~(uint64_t)0 << shift;
    *pp = p;
    return v;
}
#define uleb(pp) leb(pp, 0)
#define sleb(pp) ((int64_t)leb(pp, 1))

/* Reads a pointer encoded as enc at *pp (relative to the field for pcrel, to data_base for
 * datarel; an indirect one is loaded only if deref), and advances *pp. 0: an encoding that
 * x86-64 objects do not use (2-byte, textrel, funcrel, aligned). */
static int read_encoded(const uint8_t **pp, uint8_t enc, uintptr_t data_base, int deref,
                        uintptr_t *out)
{
    const uint8_t *p = *pp;
    uintptr_t v;
    switch (enc & 0x0f) {
    case 0x00: /* absptr */
    case 0x04: /* udata8 */
    case 0x0c: /* sdata8 */
        memcpy(&v, p, 8);
        p += 8;
        break;
    case 0x01:
        v = uleb(&p);
        break;
    case 0x03:
        v = load32(p);
        p += 4;
        break;
    case 0x09:
        v = (uintptr_t)sleb(&p);
        break;
    case 0x0b:
        v = (uintptr_t)(intptr_t)(int32_t)load32(p);
        p += 4;
        break;
    default:
        return 0;
    }
    switch (enc & 0x70) {
    case 0:
        break;
    case PE_PCREL:
        v += (uintptr_t)*pp;
        break;
    case PE_DATAREL:
        if (!data_base)
            return 0;
        v += data_base;
        break;
    default:
        return 0;
    }
    if ((enc & PE_INDIR) && deref)
        memcpy(&v, (const void *)v, sizeof v);
    *pp = p;
    *out = v;
    return 1;
}

/* An entry of .eh_frame (CIE or FDE) in the 32-bit format (the only one linkers write for
 * code): its contents after the length, with *end after them; NULL for a terminator. */
static const uint8_t *entry_body(const uint8_t *e, const uint8_t **end)
{
    uint32_t len = load32(e);
    if (len == 0 || len == 0xffffffff)
        return NULL;
    *end = e + 4 + len;
    return e + 4;
}

static int read_cie(const uint8_t *e, struct cie *ci)
{
    const uint8_t *end, *p = entry_body(e, &end);
    if (!p || load32(p) != 0) /* a CIE's id is 0 in .eh_frame */
        return 0;
    p += 4;
    uint8_t version = *p++;
    if (version != 1 && version != 3)
        return 0;
    const char *aug = (const char *)p;
    while (*p)
        p++;
    p++;
    ci->code_align = uleb(&p);
    ci->data_align = sleb(&p);
    ci->ra_reg = version == 1 ? *p++ : uleb(&p);
    ci->fde_enc = 0;
    ci->signal = 0;
    ci->fde_data = aug[0] == 'z';
    if (aug[0] == 'z') {
        uint64_t len = uleb(&p);
        const uint8_t *data_end = p + len;
        for (const char *a = aug + 1; *a; a++) { /* 'S' has no data: no check of p */
            uintptr_t skip;
            if (*a == 'R') {
                ci->fde_enc = *p++;
            } else if (*a == 'L') {
                p++;
            } else if (*a == 'P') {
                uint8_t enc = *p++;
                if (!read_encoded(&p, enc, 0, 0, &skip))
                    return 0;
            } else if (*a == 'S') {
                ci->signal = 1;
            } else {
                break; /* the rest of the data is skipped whole */
            }
        }
        p = data_end;
    } else if (aug[0]) {
        return 0; /* "eh" and the like: no compiler of this century */
    }
    ci->insns = p;
    ci->end = end;
    return ci->ra_reg == DW_RA;
}

/* The FDE of .eh_frame_hdr hdr whose range holds pc: its CIE, the address its table starts
 * at, its instructions; 0 if none. */
static int find_fde(const uint8_t *hdr, uintptr_t pc, struct cie *ci, uintptr_t *begin,
                    const uint8_t **insns, const uint8_t **end)
{
    /* version 1, a table of sorted 4-byte pairs relative to hdr: what every linker writes */
    if (!hdr || hdr[0] != 1 || hdr[3] != (PE_DATAREL | 0x0b))
        return 0;
    const uint8_t *p = hdr + 4;
    uintptr_t eh_frame, count, base = (uintptr_t)hdr;
    if (!read_encoded(&p, hdr[1], base, 1, &eh_frame) ||
        !read_encoded(&p, hdr[2], base, 1, &count) || count == 0)
        return 0;
    size_t lo = 0, hi = count; /* the last entry that starts at or below pc */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (base + (uintptr_t)(intptr_t)(int32_t)load32(p + 8 * mid) <= pc)
            lo = mid;
        else
            hi = mid;
    }
    if (base + (uintptr_t)(intptr_t)(int32_t)load32(p + 8 * lo) > pc)
        return 0;
    const uint8_t *q = entry_body(
        (const uint8_t *)(base + (uintptr_t)(intptr_t)(int32_t)load32(p + 8 * lo + 4)), end);
    if (!q || load32(q) == 0 || !read_cie(q - load32(q), ci)) /* the CIE: back from its field */
        return 0;
    q += 4;
    uintptr_t range;
    if (!read_encoded(&q, ci->fde_enc, 0, 1, begin) ||
        !read_encoded(&q, ci->fde_enc & 0x0f, 0, 0, &range) || pc - *begin >= range)
        return 0;
    if (ci->fde_data) {
        uint64_t len = uleb(&q);
        q += len;
    }
    *insns = q;
    return 1;
}

static struct rule *rule_of(struct row *r, uint64_t reg)
{
    return reg == DW_BP ? &r->bp : reg == DW_RA ? &r->ra : NULL;
}

/* Runs the CFA instructions [p, end) from row *r at address *loc while *loc <= pc (pc is where
 * the frame is: the rows of later addresses do not apply). init: the row after the CIE's
 * instructions, for DW_CFA_restore (NULL while running those). 0: an instruction not read. */
static int run_cfa(const uint8_t *p, const uint8_t *end, const struct cie *ci, uintptr_t *loc,
                   uintptr_t pc, struct row *r, const struct row *init)
{
    struct row saved[REMEMBERED];
    unsigned depth = 0;
    while (p < end && *loc <= pc) {
        uint8_t op = *p++;
        uint64_t reg = op & 0x3f, len;
        int64_t off;
        struct rule *rl;
        uintptr_t to;
        switch (op >> 6) {
        case 1: /* DW_CFA_advance_loc */
            *loc += reg * ci->code_align;
            continue;
        case 2: /* DW_CFA_offset */
            off = (int64_t)uleb(&p) * ci->data_align;
            goto at_cfa;
        case 3: /* DW_CFA_restore */
            goto restore;
        }
        switch (op) {
        case 0x00: /* nop */
            break;
        case 0x01: /* set_loc */
            if (!read_encoded(&p, ci->fde_enc, 0, 1, &to))
                return 0;
            *loc = to;
            break;
        case 0x02: /* advance_loc1 */
            *loc += *p++ * ci->code_align;
            break;
        case 0x03: { /* advance_loc2 */
            uint16_t d;
            memcpy(&d, p, 2);
            p += 2;
            *loc += d * ci->code_align;
            break;
        }
        case 0x04: /* advance_loc4 */
            *loc += load32(p) * ci->code_align;
            p += 4;
            break;
        case 0x05: /* offset_extended */
            reg = uleb(&p);
            off = (int64_t)uleb(&p) * ci->data_align;
            goto at_cfa;
        case 0x11: /* offset_extended_sf */
            reg = uleb(&p);
            off = sleb(&p) * ci->data_align;
            goto at_cfa;
        case 0x2f: /* GNU_negative_offset_extended */
            reg = uleb(&p);
            off = -(int64_t)uleb(&p) * ci->data_align;
            goto at_cfa;
        case 0x06: /* restore_extended */
            reg = uleb(&p);
            goto restore;
        case 0x07: /* undefined */
        case 0x08: /* same_value */
            reg = uleb(&p);
            if ((rl = rule_of(r, reg)))
                *rl = (struct rule){0, op == 0x07 ? UNDEF : SAME};
            break;
        case 0x09: { /* register: reg's value is in another register */
            reg = uleb(&p);
            uint64_t from = uleb(&p);
            if ((rl = rule_of(r, reg)))
                *rl = (struct rule){0, from == reg ? SAME : UNREAD};
            break;
        }
        case 0x0a: /* remember_state: GCC's includes the CFA, as libgcc's unwinder has it */
            if (depth == REMEMBERED)
                return 0;
            saved[depth++] = *r;
            break;
        case 0x0b: /* restore_state */
            if (depth == 0)
                return 0;
            *r = saved[--depth];
            break;
        case 0x0c: /* def_cfa */
            r->cfa_reg = uleb(&p);
            r->cfa_off = (int64_t)uleb(&p);
            r->cfa_expr = 0;
            break;
        case 0x12: /* def_cfa_sf */
            r->cfa_reg = uleb(&p);
            r->cfa_off = sleb(&p) * ci->data_align;
            r->cfa_expr = 0;
            break;
        case 0x0d: /* def_cfa_register */
            r->cfa_reg = uleb(&p);
            r->cfa_expr = 0;
            break;
        case 0x0e: /* def_cfa_offset */
            r->cfa_off = (int64_t)uleb(&p);
            break;
        case 0x13: /* def_cfa_offset_sf */
            r->cfa_off = sleb(&p) * ci->data_align;
            break;
        case 0x0f: /* def_cfa_expression */
            len = uleb(&p);
            p += len;
            r->cfa_expr = 1;
            break;
        case 0x10: /* expression */
        case 0x16: /* val_expression */
            reg = uleb(&p);
            len = uleb(&p);
            p += len;
            if ((rl = rule_of(r, reg)))
                rl->how = UNREAD;
            break;
        case 0x14: /* val_offset */
        case 0x15: /* val_offset_sf */
            reg = uleb(&p);
            if (op == 0x14)
                (void)uleb(&p);
            else
                (void)sleb(&p);
            if ((rl = rule_of(r, reg)))
                rl->how = UNREAD;
            break;
        case 0x2e: /* GNU_args_size */
            (void)uleb(&p);
            break;
        default:
            return 0;
        }
        continue;
    at_cfa:
        if ((rl = rule_of(r, reg)))
            *rl = (struct rule){off, AT_CFA};
        continue;
    restore:
        if (!init)
            return 0;
        if ((rl = rule_of(r, reg)))
            *rl = reg == DW_BP ? init->bp : init->ra;
    }
    return 1;
}

enum row_read { ROW_NONE, ROW_READ, ROW_SIGNAL, ROW_OUTERMOST };

/* The row of obj's CFI table at address where: ROW_READ, ready for a step (the CFA is rsp or
 * rbp plus an offset, the return address saved); ROW_SIGNAL for a signal handler's return;
 * ROW_OUTERMOST where the return address is undefined (_start, a thread's clone3); else
 * ROW_NONE. */
static enum row_read read_row(const struct dl_find_object *obj, uintptr_t where, struct row *r)
{
    struct cie ci;
    uintptr_t loc, cie_loc = 0;
    const uint8_t *insns, *end;
    if (!find_fde((const uint8_t *)obj->dlfo_eh_frame, where, &ci, &loc, &insns, &end))
        return ROW_NONE;
    if (ci.signal)
        return ROW_SIGNAL;
    struct row init = {0, DW_SP, 0, {0, SAME}, {0, UNREAD}};
    if (!run_cfa(ci.insns, ci.end, &ci, &cie_loc, UINTPTR_MAX, &init, NULL))
        return ROW_NONE;
    *r = init;
    if (!run_cfa(insns, end, &ci, &loc, where, r, &init))
        return ROW_NONE;
    if (r->ra.how == UNDEF)
        return ROW_OUTERMOST;
    return !r->cfa_expr && (r->cfa_reg == DW_SP || r->cfa_reg == DW_BP) && r->ra.how == AT_CFA
               ? ROW_READ
               : ROW_NONE;
}

/* The memo: the rows read so far, a word each, so that a stack through the same calls reads
 * no CFI again (test unwind_budget: 2,623 instructions a capture with it, 36,327 without; design
 * §9). 2,048 sets of two words, the set chosen by the address's low bits mixed with the next
 * ones; a word is read and written whole (relaxed atomics: no lock, no torn entry), and holds
 * the address's bits above SET_BITS (addresses below 2^47, the user half), a fingerprint of
 * the object (where its .eh_frame_hdr is, its extent: an object unloaded and another mapped at
 * its place do not share rows), and the row where it fits: the return address at CFA-8 (the
 * psABI's), the CFA rsp or rbp plus a multiple of 8 below 64 KiB, rbp kept, lost or saved
 * within 248 bytes below the CFA; or the outermost frame (MEMO_OUTERMOST). 0: empty. */
#define SET_BITS       11
#define PRINT_BITS     7
#define RULE_BITS      21
#define MEMO_OUTERMOST (3u << 1) /* rbp's rule 3, which no row has */
static uint64_t memo[2u << SET_BITS];

/* The object's fingerprint, in its place in a memo word. */
static uint64_t memo_object(const struct dl_find_object *obj)
{
    uint64_t a = (uintptr_t)obj->dlfo_eh_frame - (uintptr_t)obj->dlfo_map_start;
    uint64_t b = (uintptr_t)obj->dlfo_map_end - (uintptr_t)obj->dlfo_map_start;
    return ((a * 0x9e3779b97f4a7c15ull ^ b) * 0x9e3779b97f4a7c15ull) >> (64 - PRINT_BITS)
                                                                            << RULE_BITS;
}

static uint64_t memo_rule(const struct row *r)
{
    uint64_t words = (uint64_t)r->cfa_off / 8, slot = (uint64_t)-r->bp.off / 8;
    uint64_t how = r->bp.how == SAME ? 0 : r->bp.how == AT_CFA ? 1 : 2;
    if (r->ra.off != -8 || r->cfa_off % 8 || words == 0 || words >> 13)
        return 0;
    if (how == 1 && (r->bp.off % 8 || slot == 0 || slot >> 5))
        return 0;
    return (r->cfa_reg == DW_BP) | how << 1 | (how == 1 ? slot : 0) << 3 | words << 8;
}

static void memo_row(uint64_t w, struct row *r)
{
    unsigned how = (w >> 1) & 3;
    r->cfa_reg = w & 1 ? DW_BP : DW_SP;
    r->cfa_off = (int64_t)((w >> 8) & 0x1fff) * 8;
    r->cfa_expr = 0;
    r->bp = (struct rule){-(int64_t)((w >> 3) & 31) * 8, how == 0   ? SAME
                                                         : how == 1 ? AT_CFA
                                                                    : UNDEF};
    r->ra = (struct rule){-8, AT_CFA};
}

/* The bytes of glibc's __restore_rt: mov $15 (rt_sigreturn), %rax; syscall. */
static const uint8_t sigreturn_code[9] = {0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05};

struct frame {
    uintptr_t pc, sp, bp;
    int has_bp;
    int exact; /* pc is where the frame stopped (an interrupted or the first frame), not a
                * return address */
    /* The object of the frame before and its fingerprint: a stack's frames are mostly in one
     * object, and the objects of a thread's own stack stay loaded while it reads it. */
    struct dl_find_object obj;
    uint64_t obj_print;
};

/* Steps f to its caller. 0: the stack ends here (or is not read further). */
static int step(struct frame *f)
{
    uintptr_t where = f->exact ? f->pc : f->pc - 1; /* inside the call, for a return address */
    if (where - (uintptr_t)f->obj.dlfo_map_start >=
        (uintptr_t)f->obj.dlfo_map_end - (uintptr_t)f->obj.dlfo_map_start) {
        if (_dl_find_object((void *)where, &f->obj) != 0)
            return 0;
        f->obj_print = memo_object(&f->obj);
    }
    uint64_t key = (uint64_t)(where >> SET_BITS) << (RULE_BITS + PRINT_BITS) | f->obj_print;
    uint64_t rule_mask = ((uint64_t)1 << RULE_BITS) - 1;
    uint64_t *set = &memo[2 * ((where ^ where >> SET_BITS) & ((1u << SET_BITS) - 1))];
    uint64_t w0 = __atomic_load_n(&set[0], __ATOMIC_RELAXED), w = w0;
    if ((w & ~rule_mask) != key)
        w = __atomic_load_n(&set[1], __ATOMIC_RELAXED);
    struct row r;
    if (where >> 47 == 0 && w && (w & ~rule_mask) == key) {
        if ((w & rule_mask) == MEMO_OUTERMOST)
            return 0;
        memo_row(w, &r);
    } else {
        enum row_read got = read_row(&f->obj, where, &r);
        if (got == ROW_SIGNAL && !f->exact && !memcmp((const void *)f->pc, sigreturn_code, 9)) {
            /* The handler returned here: the interrupted registers are in the ucontext. */
            const ucontext_t *uc = (const ucontext_t *)f->sp;
            f->pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
            f->sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
            f->bp = (uintptr_t)uc->uc_mcontext.gregs[REG_RBP];
            f->has_bp = 1;
            f->exact = 1;
            return f->pc != 0;
        }
        if (got != ROW_READ && got != ROW_OUTERMOST)
            return 0;
        uint64_t rule = got == ROW_OUTERMOST ? MEMO_OUTERMOST : memo_rule(&r);
        if (rule && where >> 47 == 0) /* into an empty way, else the second */
            __atomic_store_n(&set[w0 != 0], key | rule, __ATOMIC_RELAXED);
        if (got == ROW_OUTERMOST)
            return 0;
    }
    /* A frame pointer below the stack pointer or far above it was overwritten (a program's
     * stack overflow): the stack ends rather than a load from anywhere. */
    if (r.cfa_reg == DW_BP && (!f->has_bp || f->bp < f->sp || f->bp - f->sp > FRAME_MAX))
        return 0;
    uintptr_t cfa = (r.cfa_reg == DW_SP ? f->sp : f->bp) + (uintptr_t)r.cfa_off;
    if (cfa <= f->sp || cfa % 8)
        return 0; /* no sense: the stack grows down */
    f->pc = stack_word(cfa + (uintptr_t)r.ra.off);
    if (r.bp.how == AT_CFA)
        f->bp = stack_word(cfa + (uintptr_t)r.bp.off);
    else if (r.bp.how != SAME)
        f->has_bp = 0;
    f->sp = cfa;
    f->exact = 0;
    return f->pc != 0;
}

#ifdef USLAB_OWN_SECTION
/* The static library's code: its sections renamed uslab_text when it is built (CMakeLists.txt),
 * bounded by the linker in the program it is linked into. */
extern const char __start_uslab_text[] __attribute__((visibility("hidden")));
extern const char __stop_uslab_text[] __attribute__((visibility("hidden")));
#endif

/* Whether where is uslab's own code: the static library's section, or the shared library's
 * whole object (own: its object, found at the first frame, which is always uslab's). Sources
 * built into a program directly (the fuzzing targets) have nothing to tell it by: none. */
static int own_code(uintptr_t where, const struct dl_find_object *own)
{
#if defined(USLAB_OWN_SECTION)
    (void)own;
    return where - (uintptr_t)__start_uslab_text <
           (uintptr_t)__stop_uslab_text - (uintptr_t)__start_uslab_text;
#elif defined(USLAB_SHARED)
    return where - (uintptr_t)own->dlfo_map_start <
           (uintptr_t)own->dlfo_map_end - (uintptr_t)own->dlfo_map_start;
#else
    (void)where;
    (void)own;
    return 0;
#endif
}

__attribute__((noinline)) uint32_t usi_unwind_stack(void **stack, uint32_t max)
{
    struct frame f = {.has_bp = 1, .exact = 1}; /* and no object yet */
    __asm__ volatile("mov %%rbp, %0\n\tmov %%rsp, %1\n\tlea 0(%%rip), %2"
                     : "=&r"(f.bp), "=&r"(f.sp), "=&r"(f.pc));
    if (max == 0 || !step(&f)) /* the first step finds uslab's own object */
        return 0;
    struct dl_find_object own = f.obj;
    uint32_t n = 0;
    do
        if (!own_code(f.exact ? f.pc : f.pc - 1, &own))
            stack[n++] = (void *)(f.pc - 1);
    while (n < max && step(&f));
    return n;
}
