/* SPDX-License-Identifier: MIT */
/*
 * test_pressure.c - memory back when the system needs it (USLAB_RETURN, design §3, issue
 * 13). The kernel's signals are simulated: USLAB_PRESSURE_SOURCE names a file in PSI format
 * or a cgroup-like directory that this program writes, so nothing depends on the host's
 * real memory pressure. The process has had a thread, so the purger thread runs the passes.
 *
 * Each mode (argv[1]) frees 64 MiB of malloc blocks, then 64 MiB of a user cache's objects,
 * idles for 2 s (the test sets USLAB_PURGE_DELAY so that the time-based return is far off),
 * checks that the memory is still resident, then signals pressure and checks that it goes
 * back within 4 s. The malloc blocks beyond the headroom went back in their frees already
 * (design §4, "Shedding"); the headroom's empty slabs stay for the signal, and so do the
 * cache's objects, which have a constructor and stay constructed in its depot:
 *  - `psi`: PSI `some total` grows by 50 ms (USLAB_RETURN=pressure, delay 1 s: the policy
 *    keeps idle memory for 10 delays); the cache's reclaim callback runs;
 *  - `events`: memory.events' `high` counter grows (USLAB_RETURN=both, delay 60 s);
 *  - `high`: memory.current reaches 95% of memory.high (both, delay 60 s);
 *  - `ignored`: PSI grows, but USLAB_RETURN=delay (60 s): the memory stays for 4 s;
 *  - `cgroup`: a cgroup-like directory whose memory.pressure (PSI) `some total` grows by
 *    50 ms, its memory.events and memory.high unchanged (USLAB_RETURN=pressure, delay 60 s:
 *    the time-based return is 10 minutes off). This mode depends on no timing and not on
 *    the host's memory: that nothing went back before the signal is read from uslab's
 *    statistics (no slab of the two caches released) and the reclaim callback's count
 *    rather than from RSS, and the response is waited for up to 60 s: the callback runs,
 *    both caches release slabs and RSS falls to the baseline.
 */
#include "mt_common.h"

#include <errno.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>

#define OBJ   1024
#define COUNT (64 * 1024)
#define MIB   ((size_t)1 << 20)

static void *objs[COUNT];
static int reclaims;
static char dir[512];

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void put(const char *name, const char *text)
{
    char path[600];
    snprintf(path, sizeof path, "%s%s%s", dir, name ? "/" : "", name ? name : "");
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s: %s", path, strerror(errno));
    fputs(text, f);
    fclose(f);
}

static void psi(unsigned long total)
{
    char text[200];
    snprintf(text, sizeof text,
             "some avg10=0.00 avg60=0.00 avg300=0.00 total=%lu\n"
             "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
             total);
    put(strcmp(dir + strlen(dir) - 4, ".psi") == 0 ? NULL : "memory.pressure", text);
}

static void events(unsigned long high)
{
    char text[200];
    snprintf(text, sizeof text, "low 0\nhigh %lu\nmax 0\noom 0\noom_kill 0\n", high);
    put("memory.events", text);
}

static int ctor(void *obj, void *arg)
{
    (void)arg;
    memset(obj, 0x33, OBJ);
    return 0;
}

static void reclaim(void *arg)
{
    (void)arg;
    __atomic_fetch_add(&reclaims, 1, __ATOMIC_RELAXED);
}

/* slabs_released of the cache `name` in uslab's JSON statistics; -1 if not found. */
static long released(const char *name)
{
    char *text = NULL, key[100];
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK(f != NULL, "open_memstream");
    CHECK(uslab_stats_print(f, USLAB_STATS_JSON) == 0, "uslab_stats_print");
    fclose(f);
    snprintf(key, sizeof key, "{\"name\":\"%s\",", name);
    const char *c = strstr(text, key), *end = c ? strchr(c, '}') : NULL;
    const char *r = c ? strstr(c, "\"slabs_released\":") : NULL;
    long n = r && r < end ? strtol(r + strlen("\"slabs_released\":"), NULL, 10) : -1;
    free(text);
    return n;
}

/* The allocator's response to pressure, as statistics show it: the reclaim callback ran
 * and both caches released slabs. */
static long cache_released, malloc_released; /* before the signal */

static int responded(void)
{
    return __atomic_load_n(&reclaims, __ATOMIC_RELAXED) > 0 &&
           released("pressure") > cache_released && released("malloc-1024") > malloc_released;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "psi";
    int cgroup = strcmp(mode, "cgroup") == 0;
    const char *src = getenv("USLAB_PRESSURE_SOURCE");
    CHECK(src && strlen(src) < sizeof dir, "USLAB_PRESSURE_SOURCE must be set by the test");
    strcpy(dir, src);
    int is_dir = strcmp(dir + strlen(dir) - 4, ".psi") != 0;
    if (is_dir) {
        CHECK(mkdir(dir, 0700) == 0 || errno == EEXIST, "mkdir %s", dir);
        events(0);
        put("memory.high", "max\n");
        put("memory.current", "1000\n");
    }
    psi(1000);

    CHECK(mt_park_thread(), "thread"); /* the purger thread runs (design §3) */
    uslab_cache_t *c = uslab_cache_create("pressure", OBJ, 0, ctor, NULL, reclaim, NULL, 0);
    CHECK(c != NULL, "create");
    size_t base = mt_rss();
    for (int i = 0; i < COUNT; i++) {
        objs[i] = MT_MALLOC(OBJ);
        CHECK(objs[i] != NULL, "malloc");
        memset(objs[i], 0x5a, OBJ);
    }
    for (int i = 0; i < COUNT; i++)
        MT_FREE(objs[i]);
    for (int i = 0; i < COUNT; i++) {
        objs[i] = uslab_cache_alloc(c);
        CHECK(objs[i] != NULL, "alloc");
    }
    for (int i = 0; i < COUNT; i++)
        uslab_cache_free(c, objs[i]);
    size_t freed = mt_rss();
    cache_released = released("pressure");
    malloc_released = released("malloc-1024");
    CHECK(freed >= base + 64 * MIB, "only %zu KiB resident after the frees", (freed - base) >> 10);

    sleep_ms(2000);
    size_t idle = mt_rss();
    if (cgroup) {
        CHECK(__atomic_load_n(&reclaims, __ATOMIC_RELAXED) == 0,
              "%s: reclaim callback run without pressure", mode);
        CHECK(released("pressure") == cache_released && released("malloc-1024") == malloc_released,
              "%s: slabs released without pressure (%ld of the cache, %ld of malloc-1024)", mode,
              released("pressure") - cache_released, released("malloc-1024") - malloc_released);
    } else {
        CHECK(idle + 8 * MIB >= freed, "%s: %zu KiB went back without pressure", mode,
              (freed - idle) >> 10);
    }

    if (strcmp(mode, "events") == 0)
        events(1);
    else if (strcmp(mode, "high") == 0)
        put("memory.high", "1000000\n"), put("memory.current", "950000\n");
    else
        psi(1000 + 50000);
    size_t now = idle;
    /* Wait for RSS back near the baseline, and in cgroup mode for the response itself.
     * Under a sanitizer RSS never gets there (shadow memory): wait for the response. */
    int waited = 0, limit = cgroup ? 60000 : 4000;
    for (; waited < limit &&
           ((!MT_SANITIZED && now > base + 8 * MIB) || ((cgroup || MT_SANITIZED) && !responded()));
         waited += 50) {
        sleep_ms(50);
        now = mt_rss();
    }
    printf("%s: resident over baseline: freed %zu KiB, idle %zu KiB, %d ms after the signal "
           "%zu KiB; reclaim callbacks %d\n",
           mode, (freed - base) >> 10, (idle - base) >> 10, waited, (now - base) >> 10,
           __atomic_load_n(&reclaims, __ATOMIC_RELAXED));
    if (strcmp(mode, "ignored") == 0) {
        CHECK(now + 8 * MIB >= freed, "USLAB_RETURN=delay: %zu KiB went back on pressure",
              (freed - now) >> 10);
    } else {
        CHECK(MT_SANITIZED || now <= base + 8 * MIB,
              "%s: %zu KiB still resident %d s after the pressure signal", mode, (now - base) >> 10,
              limit / 1000);
        CHECK(__atomic_load_n(&reclaims, __ATOMIC_RELAXED) > 0, "no reclaim callback");
        if (cgroup)
            CHECK(released("pressure") > cache_released &&
                      released("malloc-1024") > malloc_released,
                  "%s: no slab released on pressure (%ld of the cache, %ld of malloc-1024)", mode,
                  released("pressure") - cache_released, released("malloc-1024") - malloc_released);
    }
    uslab_cache_destroy(c);
    TEST_DONE();
}
