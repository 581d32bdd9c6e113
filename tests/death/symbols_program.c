/* SPDX-License-Identifier: MIT */
/*
 * symbols_program.c - misuse from static functions, for the symbolised stacks of issue 16
 * (docs/design.md §9; driven by symbols_check.py). Built several ways (PIE with DWARF 5 and
 * DWARF 4, without -g, stripped, with compressed debug sections): the report must name the
 * static function, with file and line where the build has them. The lines the reports must
 * show carry a marker comment "SITE:<name>", which the test finds in this file.
 *
 *   leak         leaks one 2,000,000-byte block (the system allocator's) and one of 100 bytes
 *   double_free  frees a 40-byte block twice (USLAB_DEBUG=F: a BUG report, then abort)
 *   signal       a SIGALRM handler that interrupted malloc or free frees a pointer into a
 *                static array (USLAB_DEBUG=F: a BUG report, then abort); the loop it
 *                interrupts allocates and frees for ever
 *   library LIB [REPLACEMENT]
 *                loads LIB (symbols_lib.c) and leaks a block from it; then, with
 *                REPLACEMENT, renames that file over LIB before the report at exit
 */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

void *volatile sink;

__attribute__((noinline)) static void leak_static_block(void)
{
    sink = malloc(2000000); /* SITE:leak_big */
    memset(sink, 1, 2000000);
}

__attribute__((noinline)) static void leak_small_static_block(void)
{
    sink = malloc(100); /* SITE:leak_small */
    memset(sink, 2, 100);
}

__attribute__((noinline)) static void double_free_static(void)
{
    void *p = malloc(40);
    sink = p;
    free(p);
    free(p); /* SITE:double_free */
}

static volatile sig_atomic_t in_allocator;
static _Alignas(16) char not_from_malloc[256];

__attribute__((noinline)) static void bad_free_in_handler(int sig)
{
    (void)sig;
    /* Only when the signal interrupted malloc or free. */
    if (in_allocator)
        free(not_from_malloc + 64); /* SITE:bad_free */
}

static void allocate_until_signal(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = bad_free_in_handler;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval every_ms = {{0, 1000}, {0, 1000}};
    setitimer(ITIMER_REAL, &every_ms, NULL);
    for (;;) {
        in_allocator = 1;
        void *p = malloc(48);
        in_allocator = 0;
        sink = p;
        in_allocator = 1;
        free(p);
        in_allocator = 0;
    }
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "leak") == 0) {
        leak_static_block();
        leak_small_static_block();
    } else if (strcmp(mode, "double_free") == 0) {
        double_free_static();
    } else if (strcmp(mode, "signal") == 0) {
        allocate_until_signal();
    } else if (strcmp(mode, "library") == 0 && argc > 2) {
        void *lib = dlopen(argv[2], RTLD_NOW);
        void (*leak)(void) = lib ? (void (*)(void))dlsym(lib, "leak_from_library") : NULL;
        if (!leak) {
            fprintf(stderr, "%s\n", dlerror());
            return 2;
        }
        leak();
        if (argc > 3 && rename(argv[3], argv[2]) != 0) {
            perror("rename");
            return 2;
        }
    } else {
        fprintf(stderr, "usage: %s leak|double_free|signal|library LIB [REPLACEMENT]\n", argv[0]);
        return 2;
    }
    return 0;
}
