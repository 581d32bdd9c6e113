/* SPDX-License-Identifier: MIT */
/*
 * dlopen_wait_mod.c - dlopen_wait.c's module: its constructor, run by dlopen with the
 * dynamic linker's lock held, tells the program it is inside and waits up to 20 s for the
 * program's thread creations. dlopen_wait_ctor_ok is 1 if they came in time.
 */
#define _GNU_SOURCE
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((visibility("default"))) int dlopen_wait_ctor_ok;

__attribute__((constructor)) static void dlopen_wait_ctor(void)
{
    const char *fds = getenv("DLOPEN_WAIT_FDS");
    int out = -1, in = -1;
    if (!fds || sscanf(fds, "%d,%d", &out, &in) != 2)
        return;
    if (write(out, "i", 1) != 1)
        return;
    struct pollfd p = {.fd = in, .events = POLLIN};
    char c;
    if (poll(&p, 1, 20000) == 1 && read(in, &c, 1) == 1)
        dlopen_wait_ctor_ok = 1;
}
