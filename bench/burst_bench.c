/* SPDX-License-Identifier: MIT */
/*
 * burst_bench - bursts of allocation separated by idle gaps: the shape that decides what a
 * memory-return policy costs (issue 13). Each round allocates `mib` MiB of `size`-byte
 * blocks, writes them, frees them all, then idles for `gap` ms; between rounds it may
 * signal memory pressure by adding `stall` microseconds to the `some total` of a PSI-format
 * file (`--psi FILE`, the file USLAB_PRESSURE_SOURCE names), as the kernel would.
 *
 * Output: alloc_ns_per_block (the bursts' time per block: refaults show here), minflt
 * (minor page faults over the run), idle_rss_kb (mean resident memory at the end of the
 * gaps: what the policy kept while nothing used it), maxrss_kb.
 * Options: --rounds 8 --mib 64 --size 256 --gap 1500 --psi FILE --stall 0 --threaded 1
 * (--threaded 1 starts and joins a thread first: a process with threads, where uslab's
 * purger is a thread; 0: single-threaded, where passes run on the slow paths).
 */
#include "common.h"

#include <pthread.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static void write_psi(const char *path, unsigned long total)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(1);
    }
    fprintf(f,
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=%lu\n"
            "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
            total);
    fclose(f);
}

static void *nothing(void *arg)
{
    return arg;
}

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &size, &res) != 2)
            res = 0;
        fclose(f);
    }
    return res * (sysconf(_SC_PAGESIZE) / 1024);
}

int main(int argc, char **argv)
{
    long rounds = bench_opt_long(argc, argv, "rounds", 8);
    long mib = bench_opt_long(argc, argv, "mib", 64);
    long size = bench_opt_long(argc, argv, "size", 256);
    long gap = bench_opt_long(argc, argv, "gap", 1500);
    long stall = bench_opt_long(argc, argv, "stall", 0);
    const char *psi = bench_opt_str(argc, argv, "psi", "");
    if (bench_opt_long(argc, argv, "threaded", 1)) {
        pthread_t t;
        pthread_create(&t, NULL, nothing, NULL);
        pthread_join(t, NULL);
    }
    printf("benchmark=burst\nrounds=%ld\nmib=%ld\nsize=%ld\ngap=%ld\nstall=%ld\n", rounds, mib,
           size, gap, stall);
    bench_print_allocator();
    unsigned long total = 1000;
    if (*psi)
        write_psi(psi, total);
    size_t n = (size_t)mib * 1024 * 1024 / (size_t)size;
    void **b = bench_xmalloc(n * sizeof *b);
    uint64_t busy = 0;
    long idle_sum = 0;
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    for (long r = 0; r < rounds; r++) {
        uint64_t t0 = bench_now_ns();
        for (size_t i = 0; i < n; i++) {
            b[i] = malloc((size_t)size);
            bench_touch(b[i], (size_t)size, (unsigned char)i);
        }
        for (size_t i = 0; i < n; i++)
            free(b[i]);
        busy += bench_now_ns() - t0;
        if (*psi && stall) {
            total += (unsigned long)stall;
            write_psi(psi, total);
        }
        struct timespec ts = {gap / 1000, (gap % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        idle_sum += rss_kb();
    }
    getrusage(RUSAGE_SELF, &r1);
    free(b);
    printf("alloc_ns_per_block=%.2f\nminflt=%ld\nidle_rss_kb=%ld\nmaxrss_kb=%ld\n",
           (double)busy / (double)(n * (size_t)rounds), r1.ru_minflt - r0.ru_minflt,
           idle_sum / rounds, bench_maxrss_kb());
    return 0;
}
