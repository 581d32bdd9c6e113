/* SPDX-License-Identifier: MIT */
/*
 * process_bench - what an allocator adds to a process's own life: its start and its forks.
 * A preloaded allocator is loaded, relocated and initialised in every process a shell,
 * make or a test driver starts, and its fork handlers run at every fork; a quiet guest
 * costs about nothing there.
 *
 *   start   execs this program (--child) `steps` times one after another and waits for each:
 *           the child mallocs and frees 20 blocks of 16 B to 4 KiB (a short program's
 *           first allocations) and exits. The environment, LD_PRELOAD with it, is
 *           inherited: each child loads the allocator under test. Reports ms per process.
 *   fork    first makes a heap like glibc's tst-mallocfork2's: 1,009 slots, 4 replacements
 *           each of a block of 0 to 70,000 bytes, ends written; then forks `steps` times, a
 *           child that calls _exit(0) at once, waited for. Reports ms per fork.
 *
 * Prints key=value lines: ms (per process or per fork) and the allocator's name.
 */
#include "common.h"

#include <sys/wait.h>

static void child_work(void)
{
    void *p[20];
    for (int i = 0; i < 20; i++) {
        size_t n = (size_t)16 << (i % 9);
        p[i] = malloc(n);
        if (!p[i])
            exit(3);
        ((volatile unsigned char *)p[i])[0] = (unsigned char)i;
    }
    for (int i = 0; i < 20; i++)
        free(p[i]);
}

static void wait_ok(pid_t pid)
{
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "process_bench: a child failed\n");
        exit(1);
    }
}

static void run_start(const char *self, long steps)
{
    for (long i = 0; i < steps; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            execl(self, self, "--child", (char *)NULL);
            _exit(127);
        }
        wait_ok(pid);
    }
}

static void make_heap(void)
{
    enum { SLOTS = 1009, MAX = 70000 };
    static unsigned char *slot[SLOTS];
    bench_rng r;
    bench_rng_seed(&r, 1);
    for (int i = 0; i < 4 * SLOTS; i++) {
        size_t k = (size_t)bench_below(&r, SLOTS), n = (size_t)bench_below(&r, MAX) + 1;
        free(slot[k]);
        slot[k] = malloc(n);
        if (!slot[k])
            exit(1);
        slot[k][0] = slot[k][n - 1] = (unsigned char)i;
    }
    bench_escape(slot);
}

static void run_fork(long steps)
{
    for (long i = 0; i < steps; i++) {
        pid_t pid = fork();
        if (pid == 0)
            _exit(0);
        wait_ok(pid);
    }
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--child") == 0) {
        child_work();
        return 0;
    }
    const char *test = bench_opt_str(argc, argv, "test", "start");
    long steps = bench_opt_long(argc, argv, "steps", 500);
    printf("benchmark=process\ntest=%s\nsteps=%ld\n", test, steps);
    bench_print_allocator();
    uint64_t t0;
    if (strcmp(test, "start") == 0) {
        t0 = bench_now_ns();
        run_start("/proc/self/exe", steps);
    } else if (strcmp(test, "fork") == 0) {
        make_heap(); /* not timed */
        t0 = bench_now_ns();
        run_fork(steps);
    } else {
        fprintf(stderr, "unknown test %s\n", test);
        return 2;
    }
    printf("ms=%.4f\n", (double)(bench_now_ns() - t0) * 1e-6 / (double)steps);
    return 0;
}
