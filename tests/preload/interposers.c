/* SPDX-License-Identifier: MIT */
/*
 * interposers.c - uslab loaded before another interposing library changes nothing (issue
 * 37): run with LD_PRELOAD=libuslab-preload.so:<interposer>, each mode checks that the
 * interposer's functions are the ones the program reaches, and that they work:
 *  - `faketime` (libfaketime, FAKETIME="2001-02-03 04:05:06"): the program starts (every
 *    program hung at start-up when uslab's initialisation held its lock across getpid,
 *    which faketime's getpid mallocs), time() is faked, and allocation works;
 *  - `uid_wrapper` (libuid_wrapper, UID_WRAPPER=1 UID_WRAPPER_ROOT=1): syscall() is the
 *    wrapper's (uslab's own made the system call by the instruction: the real uid came
 *    back, and a setresuid failed with EPERM); a setresuid to 1000 through syscall() is
 *    the wrapper's: getuid through syscall() says 1000, and the kernel's own record of
 *    the process (/proc/self/status) still says the uid it started with;
 *  - `fakechroot` (libfakechroot): chroot() is fakechroot's (uslab's made a real chroot as
 *    root, and failed with EPERM otherwise).
 * Prints "interposers <mode> ok".
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int fail(const char *what)
{
    fprintf(stderr, "interposers: %s\n", what);
    return 1;
}

/* Whether name resolves (as the program calls it) into an object whose path contains lib. */
static int defined_by(const char *name, const char *lib)
{
    void *f = dlsym(RTLD_DEFAULT, name);
    Dl_info info;
    if (!f || !dladdr(f, &info) || !info.dli_fname)
        return 0;
    printf("%s: %s\n", name, info.dli_fname);
    return strstr(info.dli_fname, lib) != NULL;
}

/* The real uid, as the kernel reports it in /proc/self/status (no wrapper sees the read). */
static unsigned real_uid(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned uid = ~0u;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Uid: %u", &uid) == 1)
            break;
    if (f)
        fclose(f);
    return uid;
}

static int allocates(void)
{
    for (int i = 0; i < 100000; i++) {
        char *p = malloc((size_t)(16 + i % 2000));
        if (!p)
            return 0;
        p[0] = (char)i;
        free(p);
    }
    return defined_by("malloc", "uslab");
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (!allocates())
        return fail("malloc is not uslab's, or failed");
    if (strcmp(mode, "faketime") == 0) {
        time_t t = time(NULL);
        struct tm tm;
        gmtime_r(&t, &tm);
        if (tm.tm_year + 1900 != 2001)
            return fail("time() is not faked");
    } else if (strcmp(mode, "uid_wrapper") == 0) {
        if (!defined_by("syscall", "uid_wrapper"))
            return fail("syscall is not uid_wrapper's");
        unsigned before = real_uid();
        if (syscall(SYS_setresuid, 1000, 1000, 1000) != 0 || syscall(SYS_getuid) != 1000)
            return fail("setresuid(1000) through syscall() was not the wrapper's");
        if (real_uid() != before)
            return fail("a real setresuid was made");
    } else if (strcmp(mode, "fakechroot") == 0) {
        if (!defined_by("chroot", "fakechroot"))
            return fail("chroot is not fakechroot's");
    } else {
        return fail("mode: faketime, uid_wrapper or fakechroot");
    }
    printf("interposers %s ok\n", mode);
    return 0;
}
