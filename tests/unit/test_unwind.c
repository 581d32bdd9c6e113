/* SPDX-License-Identifier: MIT */
/*
 * test_unwind.c - the stacks of reports (unwind.c, usi_unwind_stack; docs/design.md §9): in
 * each kind of frame a program has, the stack from the caller of the capture outward is the
 * one libgcc's _Unwind_Backtrace (the test's reference, linked here only) gives, frame for
 * frame to the outermost: frames whose CFA is rsp-based (-O2), rbp-based (alloca, -O0), libc's
 * (qsort's callback), a signal handler's (on the thread's stack and on an alternate one, the
 * interrupted frame's pc exact), a thread's (to clone3), and again once the memo holds the rows;
 * code without CFI ends both stacks at the same frame; max is respected; a frame pointer
 * overwritten ends the stack, not the process.
 */
#define _GNU_SOURCE
#include "check.h"
#include "unwinder.h"

#include <alloca.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unwind.h>

#define DEPTH 128

struct trace {
    void *pc[DEPTH];
    uint32_t n;
};

static _Unwind_Reason_Code reference_one(struct _Unwind_Context *ctx, void *arg)
{
    struct trace *t = arg;
    uintptr_t pc = _Unwind_GetIP(ctx);
    if (pc == 0 || t->n == DEPTH)
        return _URC_END_OF_STACK;
    t->pc[t->n++] = (void *)(pc - 1); /* as usi_unwind_stack writes them */
    return _URC_NO_REASON;
}

static void print_trace(const char *name, const struct trace *t)
{
    fprintf(stderr, "  %s (%u frames):", name, t->n);
    for (uint32_t i = 0; i < t->n; i++)
        fprintf(stderr, " %p", t->pc[i]);
    fprintf(stderr, "\n");
}

/* Where caller's return into its own caller is in t: the frames from there on are compared. */
static int index_of(const struct trace *t, void *pc)
{
    for (uint32_t i = 0; i < t->n; i++)
        if (t->pc[i] == pc)
            return (int)i;
    return -1;
}

static int compared; /* stacks compared, each of at least min_frames */

/* Captures the stack both ways and compares them from this function's caller outward. */
static __attribute__((noinline)) void compare(const char *what, uint32_t min_frames)
{
    struct trace ours, ref = {.n = 0};
    void *from = (char *)__builtin_return_address(0) - 1;
    ours.n = usi_unwind_stack(ours.pc, DEPTH);
    _Unwind_Backtrace(reference_one, &ref);
    int a = index_of(&ours, from), b = index_of(&ref, from);
    int same = a >= 0 && b >= 0 && ours.n - (uint32_t)a == ref.n - (uint32_t)b &&
               !memcmp(ours.pc + a, ref.pc + b, (ours.n - (uint32_t)a) * sizeof(void *));
    if (!same || ours.n - (uint32_t)a < min_frames) {
        print_trace("usi_unwind_stack", &ours);
        print_trace("_Unwind_Backtrace", &ref);
    }
    CHECK(same, "%s: the same stack as libgcc's from %p (at %d and %d)", what, from, a, b);
    CHECK(ours.n - (uint32_t)a >= min_frames, "%s: %u frames, at least %u", what,
          ours.n - (uint32_t)a, min_frames);
    compared++;
}

static __attribute__((noinline)) int recurse(int depth, int (*leaf)(void))
{
    if (depth == 0)
        return leaf();
    int r = recurse(depth - 1, leaf);
    __asm__ volatile("" : "+r"(r)); /* no tail call */
    return r + 1;
}

static uint32_t plain_frames; /* recurse's depth, and the frames after it */

static int leaf_plain(void)
{
    compare("rsp-based frames", plain_frames);
    return 0;
}

/* alloca: the CFA is rbp-based. */
static __attribute__((noinline)) int vla_frame(int n)
{
    volatile char *buf = alloca((size_t)n);
    buf[0] = 1;
    buf[n - 1] = 2;
    compare("an rbp-based frame (alloca)", 3);
    return buf[0] + buf[n - 1];
}

static int leaf_vla(void)
{
    return vla_frame(100 + (int)(uintptr_t)&compared % 7);
}

static __attribute__((optimize("O0"), noinline)) int unoptimised(int x)
{
    int y = x * 3;
    compare("an unoptimised frame", 3);
    return y;
}

static int leaf_unoptimised(void)
{
    return unoptimised(2);
}

static int by_qsort(const void *a, const void *b)
{
    static int once;
    if (!once++)
        compare("a callback from libc's qsort", 4);
    return *(const int *)a - *(const int *)b;
}

static int leaf_qsort(void)
{
    int v[64];
    for (int i = 0; i < 64; i++)
        v[i] = (i * 37) % 64;
    qsort(v, 64, sizeof v[0], by_qsort);
    return v[0];
}

static volatile sig_atomic_t in_handler;

static void handler(int sig)
{
    (void)sig;
    in_handler++;
    compare("a signal handler's frame and the interrupted one", 4);
}

static int leaf_signal(void)
{
    raise(SIGUSR1);
    return 0;
}

/* A function whose first instruction faults (ud2): the interrupted pc is the function's own
 * first byte, which only a lookup of the exact pc finds in its FDE; pc - 1 is in the code
 * just before it, never run, whose row has another CFA (rsp + 16). The handler leaves by
 * siglongjmp. */
__asm__(".text\n"
        ".p2align 4\n"
        "before_fault:\n"
        ".cfi_startproc\n"
        "push %rbx\n"
        ".cfi_adjust_cfa_offset 8\n"
        "ud2\n"
        ".cfi_endproc\n"
        "faults_first:\n"
        ".cfi_startproc\n"
        "ud2\n"
        "ret\n"
        ".cfi_endproc\n");
void faults_first(void);
static sigjmp_buf out_of_fault;

static void fault_handler(int sig)
{
    (void)sig;
    in_handler++;
    compare("a handler of a fault at a function's first instruction", 5);
    siglongjmp(out_of_fault, 1);
}

static int leaf_fault(void)
{
    if (!sigsetjmp(out_of_fault, 1))
        faults_first();
    return 0;
}

/* A frame whose CFA is rbp-based, with rbp overwritten (0x4141...40) while it calls rdi, as a
 * program's stack overflow leaves it: the stack must end at that frame, not fault. */
__asm__(".text\n"
        ".p2align 4\n"
        "overwritten_rbp:\n"
        ".cfi_startproc\n"
        "push %rbp\n"
        ".cfi_def_cfa_offset 16\n"
        ".cfi_offset rbp, -16\n"
        "push %rbx\n"
        ".cfi_def_cfa_offset 24\n"
        ".cfi_offset rbx, -24\n"
        "mov %rsp, %rbp\n"
        ".cfi_def_cfa rbp, 24\n"
        "mov %rbp, %rbx\n"
        "movabs $0x4141414141414140, %rbp\n"
        "sub $8, %rsp\n"
        "call *%rdi\n"
        "add $8, %rsp\n"
        "mov %rbx, %rbp\n"
        "pop %rbx\n"
        "pop %rbp\n"
        "ret\n"
        ".cfi_endproc\n");
void overwritten_rbp(void (*call)(void));
static uint32_t overwritten_frames;

static __attribute__((noinline)) void capture_over_overwritten(void)
{
    void *stack[DEPTH];
    overwritten_frames = usi_unwind_stack(stack, DEPTH);
}

/* max: the first frames of a whole stack. Both captures start in this function (at their own
 * calls), and the frames outward are the same. */
static int leaf_max(void)
{
    void *all[DEPTH], *few[5];
    uint32_t n_all = usi_unwind_stack(all, DEPTH);
    uint32_t n_few = usi_unwind_stack(few, 5);
    CHECK(n_all > 12 && n_few == 5, "max respected (%u of %u)", n_few, n_all);
    CHECK(!memcmp(all + 1, few + 1, 4 * sizeof(void *)), "the first frames of the whole stack");
    CHECK(usi_unwind_stack(few, 0) == 0, "max 0");
    return 0;
}

static void *thread_main(void *arg)
{
    (void)arg;
    plain_frames = 9; /* recurse's 6, thread_main, start_thread, clone3 */
    recurse(5, leaf_plain);
    recurse(3, leaf_vla);
    return NULL;
}

/* Code in an anonymous mapping (no object, no CFI) that calls the function in rdi: sub $8,
 * %rsp; call *%rdi; add $8, %rsp; ret. Both unwinders stop at its frame. */
static const unsigned char bare_caller_code[] = {0x48, 0x83, 0xec, 0x08, 0xff, 0xd7,
                                                 0x48, 0x83, 0xc4, 0x08, 0xc3};

static __attribute__((noinline)) void without_cfi(void)
{
    struct trace ours, ref = {.n = 0};
    ours.n = usi_unwind_stack(ours.pc, DEPTH);
    _Unwind_Backtrace(reference_one, &ref);
    /* Both end at the bare caller's frame: theirs in this function, so the tails from it match. */
    void *from = (char *)__builtin_return_address(0) - 1;
    int a = index_of(&ours, from), b = index_of(&ref, from);
    if (a < 0 || b < 0 || ours.n - (uint32_t)a != 1 || ref.n - (uint32_t)b != 1) {
        print_trace("usi_unwind_stack", &ours);
        print_trace("_Unwind_Backtrace", &ref);
    }
    CHECK(a >= 0 && b >= 0, "code without CFI: its frame in both stacks");
    CHECK(ours.n - (uint32_t)a == 1 && ref.n - (uint32_t)b == 1,
          "code without CFI: both stacks end at its frame (%u and %u frames from it)",
          ours.n - (uint32_t)a, ref.n - (uint32_t)b);
}

int main(void)
{
    for (int round = 0; round < 2; round++) { /* the second round reads the memo */
        plain_frames = 25; /* recurse's 21, main, __libc_start_call_main, ..._main, _start */
        recurse(20, leaf_plain);
        recurse(2, leaf_vla);
        recurse(2, leaf_unoptimised);
        recurse(1, leaf_qsort);
        struct sigaction sa = {.sa_handler = handler};
        sigemptyset(&sa.sa_mask);
        CHECK(sigaction(SIGUSR1, &sa, NULL) == 0, "sigaction");
        recurse(2, leaf_signal);
        /* The same on an alternate signal stack. */
        static char alt[64 * 1024];
        stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt};
        CHECK(sigaltstack(&ss, NULL) == 0, "sigaltstack");
        sa.sa_flags = SA_ONSTACK;
        CHECK(sigaction(SIGUSR1, &sa, NULL) == 0, "sigaction");
        recurse(2, leaf_signal);
        ss.ss_flags = SS_DISABLE;
        CHECK(sigaltstack(&ss, NULL) == 0, "sigaltstack off");
        struct sigaction ill = {.sa_handler = fault_handler};
        sigemptyset(&ill.sa_mask);
        CHECK(sigaction(SIGILL, &ill, NULL) == 0, "sigaction SIGILL");
        recurse(2, leaf_fault);
        pthread_t t;
        CHECK(pthread_create(&t, NULL, thread_main, NULL) == 0, "pthread_create");
        pthread_join(t, NULL);
    }
    CHECK(in_handler == 6, "the handlers ran 6 times (%d)", (int)in_handler);

    unsigned char *bare_caller =
        mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(bare_caller != MAP_FAILED, "mmap");
    memcpy(bare_caller, bare_caller_code, sizeof bare_caller_code);
    CHECK(mprotect(bare_caller, 4096, PROT_READ | PROT_EXEC) == 0, "mprotect");
    ((void (*)(void (*)(void)))(void *)bare_caller)(without_cfi);

    recurse(10, leaf_max);
    overwritten_rbp(capture_over_overwritten);
    CHECK(overwritten_frames == 2,
          "a stack through an overwritten frame pointer ends there (%u "
          "frames)",
          overwritten_frames);
    printf("unwind ok: %d stacks compared\n", compared);
    return 0;
}
