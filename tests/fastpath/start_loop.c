/* SPDX-License-Identifier: MIT */
/*
 * start_loop - a short program, as a shell or make starts thousands of: it mallocs and frees
 * 20 blocks of 16 bytes to 4 KiB (process_bench's child, bench/process_bench.c), then
 * prints "ok" and the page faults of its whole life (getrusage), for test_start_budget.sh.
 * With the argument `maps`, also its mappings (the lines of /proc/self/maps, which every
 * fork copies with their page tables) and whether the kernel has guard markers (without
 * them uslab's guard pages are mappings of their own); not in the runs that count
 * instructions and faults, whose numbers it would change. With `fork`, it first forks a
 * child that mallocs and frees a block and exits, and waits for it (test_hot_text.sh: the
 * code a fork runs in the parent and the child).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* The lines of /proc/self/maps, read without stdio (which would allocate a buffer). */
static long mappings(void)
{
    int fd = open("/proc/self/maps", O_RDONLY);
    if (fd < 0)
        return -1;
    char buf[4096];
    long lines = 0;
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0)
        for (ssize_t i = 0; i < n; i++)
            lines += buf[i] == '\n';
    close(fd);
    return lines;
}

/* 1 if madvise(MADV_GUARD_INSTALL) (Linux 6.13) works on a private anonymous page. */
static int guard_markers(void)
{
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return 0;
    int ok = madvise(p, 4096, 102 /* MADV_GUARD_INSTALL */) == 0;
    munmap(p, 4096);
    return ok;
}

int main(int argc, char **argv)
{
    if (argc > 1 && argv[1][0] == 'f') {
        pid_t pid = fork();
        if (pid == 0) {
            free(malloc(100));
            _exit(0);
        }
        int status;
        if (pid < 0 || waitpid(pid, &status, 0) != pid || status != 0)
            return 1;
    }
    void *p[20];
    for (int i = 0; i < 20; i++) {
        size_t n = (size_t)16 << (i % 9);
        p[i] = malloc(n);
        if (!p[i])
            return 1;
        ((volatile unsigned char *)p[i])[0] = (unsigned char)i;
    }
    for (int i = 0; i < 20; i++)
        free(p[i]);
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 1;
    long maps = argc > 1 && argv[1][0] == 'm' ? mappings() : 0;
    printf("ok\nfaults=%ld\n", ru.ru_minflt + ru.ru_majflt);
    if (maps)
        printf("mappings=%ld\nguard_markers=%d\n", maps, guard_markers());
    return 0;
}
