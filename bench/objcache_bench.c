/* SPDX-License-Identifier: MIT */
/*
 * objcache_bench - Bonwick's headline result: keeping objects constructed between uses.
 *
 * The object is a "connection" with a costly constructor: a mutex and a condition
 * variable initialised, a 256-entry CRC-32 table computed, and a 512-byte buffer
 * allocated and cleared. Each round allocates `live` objects, uses each (lock, checksum
 * a few bytes of its buffer through the table, unlock), then frees them all. Modes:
 *   malloc       malloc + constructor ... destructor + free, every time
 *   cache        uslab_cache_alloc / uslab_cache_free with the constructor registered:
 *                the constructor runs only when an object leaves its slab
 *   nomagazine   the same cache with USLAB_CACHE_NOMAGAZINE (constructs every time):
 *                the slab layer without the constructed-object caching
 * Output: <mode>_ns = ns per object (alloc + use + free), ctor_calls per mode.
 *
 * Options: --live 64 --rounds 20000
 */
#include "common.h"

#include <pthread.h>
#include <uslab.h>

struct conn {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint32_t crc_table[256];
    unsigned char *buf;
    size_t used;
    struct conn *next;
};

#define CONN_BUF 512

static unsigned long ctor_calls;

static int conn_ctor(void *obj, void *arg)
{
    (void)arg;
    struct conn *c = obj;
    __atomic_add_fetch(&ctor_calls, 1, __ATOMIC_RELAXED);
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cond, NULL);
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t v = i;
        for (int k = 0; k < 8; k++)
            v = (v & 1) ? 0xedb88320u ^ (v >> 1) : v >> 1;
        c->crc_table[i] = v;
    }
    c->buf = malloc(CONN_BUF);
    if (!c->buf)
        return -1;
    memset(c->buf, 0, CONN_BUF);
    c->used = 0;
    c->next = NULL;
    return 0;
}

static void conn_dtor(void *obj, void *arg)
{
    (void)arg;
    struct conn *c = obj;
    free(c->buf);
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
}

/* Use an object and leave it in its constructed state. */
static uint32_t conn_use(struct conn *c, uint32_t seed)
{
    pthread_mutex_lock(&c->lock);
    uint32_t crc = ~0u;
    for (int i = 0; i < 16; i++) {
        c->buf[i] = (unsigned char)(seed + (uint32_t)i);
        crc = c->crc_table[(crc ^ c->buf[i]) & 0xff] ^ (crc >> 8);
    }
    c->used = 0;
    pthread_mutex_unlock(&c->lock);
    return ~crc;
}

int main(int argc, char **argv)
{
    long live = bench_opt_long(argc, argv, "live", 64);
    long rounds = bench_opt_long(argc, argv, "rounds", 20000);
    printf("benchmark=objcache\nlive=%ld\nrounds=%ld\nobject_size=%zu\n", live, rounds,
           sizeof(struct conn));
    bench_print_allocator();
    struct conn **objs = bench_xmalloc((size_t)live * sizeof *objs);
    uint32_t sink = 0;
    double per = (double)live * (double)rounds;

    /* malloc + construct + destruct + free every time */
    ctor_calls = 0;
    uint64_t t0 = bench_now_ns();
    for (long r = 0; r < rounds; r++) {
        for (long i = 0; i < live; i++) {
            objs[i] = malloc(sizeof(struct conn));
            if (!objs[i] || conn_ctor(objs[i], NULL) != 0)
                return 1;
            sink += conn_use(objs[i], (uint32_t)i);
        }
        for (long i = 0; i < live; i++) {
            conn_dtor(objs[i], NULL);
            free(objs[i]);
        }
    }
    printf("malloc_ns=%.2f\nmalloc_ctor_calls=%lu\n", (double)(bench_now_ns() - t0) / per,
           ctor_calls);

    static const struct {
        const char *name;
        unsigned flags;
    } modes[] = {{"cache", 0}, {"nomagazine", USLAB_CACHE_NOMAGAZINE}};
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        uslab_cache_t *cache = uslab_cache_create("conn", sizeof(struct conn), 0, conn_ctor,
                                                  conn_dtor, NULL, NULL, modes[m].flags);
        if (!cache) {
            perror("uslab_cache_create");
            return 1;
        }
        ctor_calls = 0;
        t0 = bench_now_ns();
        for (long r = 0; r < rounds; r++) {
            for (long i = 0; i < live; i++) {
                objs[i] = uslab_cache_alloc(cache);
                if (!objs[i])
                    return 1;
                sink += conn_use(objs[i], (uint32_t)i);
            }
            for (long i = 0; i < live; i++)
                uslab_cache_free(cache, objs[i]);
        }
        printf("%s_ns=%.2f\n%s_ctor_calls=%lu\n", modes[m].name,
               (double)(bench_now_ns() - t0) / per, modes[m].name, ctor_calls);
        uslab_cache_destroy(cache);
    }
    printf("checksum=%u\nmaxrss_kb=%ld\n", sink, bench_maxrss_kb());
    free(objs);
    return 0;
}
