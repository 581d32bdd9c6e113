/* SPDX-License-Identifier: MIT */
/*
 * slow_clock.c - an LD_PRELOAD shim for unit_slab_slow_clock: the monotonic clocks
 * (CLOCK_MONOTONIC, _COARSE, _RAW, CLOCK_BOOTTIME) read 0 when the process starts and advance
 * one millisecond per second, so a test sees the clock of a machine that booted a moment ago
 * for its whole run: any test arithmetic such as `now - constant` underflows there.
 * clock_gettime of other clocks, and sleeping, are unchanged.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { SLOWDOWN = 1000, NCLOCKS = 16 };

static int64_t start_ns[NCLOCKS];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static int slowed(clockid_t id)
{
    return id == CLOCK_MONOTONIC || id == CLOCK_MONOTONIC_COARSE || id == CLOCK_MONOTONIC_RAW ||
           id == CLOCK_BOOTTIME;
}

static int64_t real_ns(clockid_t id, struct timespec *ts)
{
    if (syscall(SYS_clock_gettime, id, ts) != 0)
        return -1;
    return (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec;
}

static void start(void)
{
    struct timespec ts;
    for (clockid_t id = 0; id < NCLOCKS; id++)
        if (slowed(id))
            start_ns[id] = real_ns(id, &ts);
}

__attribute__((constructor)) static void init(void)
{
    pthread_once(&once, start);
}

__attribute__((visibility("default"))) int clock_gettime(clockid_t id, struct timespec *ts)
{
    pthread_once(&once, start); /* also before the constructor, e.g. from libc's start-up */
    int64_t ns = real_ns(id, ts);
    if (ns < 0)
        return -1; /* errno set by syscall() */
    if (id >= 0 && id < NCLOCKS && slowed(id)) {
        ns -= start_ns[id];
        ns = ns > 0 ? ns / SLOWDOWN : 0; /* a coarse clock may read below its start */
        ts->tv_sec = (time_t)(ns / 1000000000);
        ts->tv_nsec = (long)(ns % 1000000000);
    }
    return 0;
}
