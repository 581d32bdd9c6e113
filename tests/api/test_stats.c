/* SPDX-License-Identifier: MIT */
/*
 * test_stats.c - statistics against known counts: a cache with 1000 then 500 live objects,
 * read through uslab_cache_stats, the JSON output and the slabinfo table (both parsed).
 */
#include "check.h"
#include "uslab.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define N 1000

static char *print_to_string(int format)
{
    static char buf[1 << 20];
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    CHECK(f != NULL, "fmemopen");
    CHECK(uslab_stats_print(f, format) == 0, "uslab_stats_print");
    long n = ftell(f);
    fclose(f);
    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

/* The value of "key": in the JSON object of the cache named `name`. */
static long json_field(const char *json, const char *name, const char *key)
{
    char pat[96];
    snprintf(pat, sizeof pat, "{\"name\":\"%s\"", name);
    const char *obj = strstr(json, pat);
    CHECK(obj != NULL, "no JSON entry for %s", name);
    const char *end = strchr(obj, '}');
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *k = strstr(obj, pat);
    CHECK(k != NULL && k < end, "no field %s for %s", key, name);
    return strtol(k + strlen(pat), NULL, 10);
}

/* Objects and Objsize columns of the table row of `name`. */
static void table_row(const char *table, const char *name, long *objects, long *objsize)
{
    CHECK(strncmp(table, "Name ", 5) == 0 && strstr(table, "Slabs/Part/Cpu"), "table header");
    char pat[64];
    snprintf(pat, sizeof pat, "\n%s ", name);
    const char *row = strstr(table, pat);
    CHECK(row != NULL, "no table row for %s", name);
    CHECK(sscanf(row + strlen(pat), "%ld %ld", objects, objsize) == 2, "row of %s", name);
}

int main(void)
{
    uslab_cache_t *c = uslab_cache_create("stats-test", 100, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(c != NULL, "create");
    static void *o[N];
    for (int i = 0; i < N; i++) {
        o[i] = uslab_cache_alloc(c);
        CHECK(o[i] != NULL, "alloc");
        memset(o[i], i, 100);
    }
    struct uslab_cache_stats st;
    CHECK(uslab_cache_stats(c, &st) == 0, "stats");
    CHECK(strcmp(st.name, "stats-test") == 0, "name");
    CHECK(st.object_size == 100, "object size %zu", st.object_size);
    CHECK(st.active_objects == N, "active %zu, want %d", st.active_objects, N);
    CHECK(st.total_objects == st.slabs * st.objects_per_slab && st.total_objects >= N, "total %zu",
          st.total_objects);
    CHECK(st.slabs >= (N + st.objects_per_slab - 1) / st.objects_per_slab, "slabs %zu", st.slabs);

    char *json = print_to_string(USLAB_STATS_JSON);
    CHECK(json[0] == '{' && strstr(json, "\"caches\":["), "JSON shape");
    CHECK(json_field(json, "stats-test", "objects") == N, "JSON objects");
    CHECK(json_field(json, "stats-test", "objsize") == 100, "JSON objsize");
    CHECK(json_field(json, "stats-test", "slabs") == (long)st.slabs, "JSON slabs");

    for (int i = 0; i < N / 2; i++)
        uslab_cache_free(c, o[i]);
    CHECK(uslab_cache_stats(c, &st) == 0, "stats");
    CHECK(st.active_objects == N / 2, "active %zu after freeing half", st.active_objects);
    /* Freed objects are cached, plus what the last magazine fill took ahead (less than a
     * magazine: at most 256 objects, design §4). */
    CHECK(st.cached_objects >= N / 2 && st.cached_objects < N / 2 + 256, "cached %zu",
          st.cached_objects);

    long objects, objsize;
    table_row(print_to_string(USLAB_STATS_TABLE), "stats-test", &objects, &objsize);
    CHECK(objects == N / 2 && objsize == 100, "table: %ld objects of %ld bytes", objects, objsize);

    /* malloc classes appear by name too. */
    void *m = uslab_malloc(40);
    table_row(print_to_string(USLAB_STATS_TABLE), "malloc-48", &objects, &objsize);
    CHECK(objects >= 1 && objsize == 48, "malloc-48 row: %ld objects of %ld", objects, objsize);
    uslab_free(m);

    /* A name with control characters: '?' in the table, not an escape sequence or a new
     * row of its own (session 16's audit); escaped in JSON. */
    uslab_cache_t *odd = uslab_cache_create("x\033[2J\nfake-row", 64, 0, NULL, NULL, NULL, NULL, 0);
    CHECK(odd != NULL, "create the oddly named cache");
    void *oo = uslab_cache_alloc(odd);
    const char *table = print_to_string(USLAB_STATS_TABLE);
    CHECK(strchr(table, '\033') == NULL, "an escape character in the table");
    CHECK(strstr(table, "\nx?[2J?fake-row ") != NULL, "the odd name's row:\n%s", table);
    CHECK(strstr(table, "\nfake-row") == NULL, "a row made by the name's newline");
    CHECK(strstr(print_to_string(USLAB_STATS_JSON), "\"name\":\"x\\u001b[2J\\u000afake-row\"") !=
              NULL,
          "the odd name in JSON");
    uslab_cache_free(odd, oo);
    uslab_cache_destroy(odd);
    /* One live object in a slab of 4096: the table's %Fr is 99, not 100, and %Ef at least 1
     * (rounded to the nearest, they read 100 and 0 beside a live object; session 17). */
    uslab_cache_t *one =
        uslab_cache_create("one-of-many", 16, 0, NULL, NULL, NULL, NULL, USLAB_CACHE_NOMAGAZINE);
    CHECK(one != NULL, "create one-of-many");
    void *lone = uslab_cache_alloc(one);
    table = print_to_string(USLAB_STATS_TABLE);
    const char *row = strstr(table, "\none-of-many ");
    CHECK(row != NULL, "no row for one-of-many:\n%s", table);
    unsigned long objs, osize, per, fr, ef;
    char space[32], resident[32], slabs[64];
    CHECK(sscanf(row + 1, "one-of-many %lu %lu %31s %31s %63s %lu %lu %lu", &objs, &osize, space,
                 resident, slabs, &per, &fr, &ef) == 8,
          "row: %.120s", row + 1);
    CHECK(objs == 1 && fr == 99 && ef >= 1, "one of %lu objects live: %%Fr %lu, %%Ef %lu (%.120s)",
          per, fr, ef, row + 1);
    uslab_cache_free(one, lone);
    uslab_cache_destroy(one);
    /* Another format, or no stream: -1 and EINVAL (it printed the table and said 0). */
    errno = 0;
    CHECK(uslab_stats_print(stdout, 7) == -1 && errno == EINVAL, "format 7");
    errno = 0;
    CHECK(uslab_stats_print(NULL, USLAB_STATS_TABLE) == -1 && errno == EINVAL, "NULL stream");

    for (int i = N / 2; i < N; i++)
        uslab_cache_free(c, o[i]);
    uslab_cache_reap(c);
    CHECK(uslab_cache_stats(c, &st) == 0 && st.active_objects == 0 && st.cached_objects == 0 &&
              st.slabs == 0,
          "after reap: %zu active, %zu cached, %zu slabs", st.active_objects, st.cached_objects,
          st.slabs);
    uslab_cache_destroy(c);
    TEST_DONE();
}
