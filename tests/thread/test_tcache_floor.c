/* SPDX-License-Identifier: MIT */
/*
 * test_tcache_floor.c - past the bound on thread-cached bytes (USLAB_TCACHE_MAX, here 0 or
 * a small one) a pair trades its magazines for floor magazines (docs/design.md §4). Every
 * free that filled one made a new floor magazine and sent the full one to the depot, whose
 * overflow came back emptied and stayed on its list of empty magazines: no exchange ever
 * took one from there, so the magazines grew without bound (2.1 GB of them after 300,000
 * rounds of 64 blocks, one thread, USLAB_TCACHE_MAX=0). Each thread here allocates and
 * frees rounds of blocks in eight classes, with verified contents, and the live magazines
 * of every magazine cache are counted from the statistics table: they must stay a bounded
 * few, not grow with the rounds. Nor may the objects in the classes' depots: a pair past
 * the bound never takes a full magazine from its depot, so the full ones it gave there
 * stayed (with a depot that keeps every magazine: 960,000 objects after 30,000 rounds of
 * 64 blocks, and growing). argv[1]: threads (1 or 2); argv[2]: rounds (20,000; 5,000 under a
 * sanitizer, after which 116 objects stayed in the depots and 64 magazines were live, the same
 * as after 20,000).
 */
#include "mt_common.h"
#include "os.h"
#include "sizeclass.h"
#include "uslab.h"

static long rounds = MT_SCALED(20000);
#define BLOCKS 64

static void *worker(void *arg)
{
    uint64_t seed = (uint64_t)(uintptr_t)arg;
    void *p[BLOCKS];
    for (long r = 0; r < rounds; r++) {
        for (int i = 0; i < BLOCKS; i++) {
            size_t n = 16 + (size_t)(i % 8) * 16 + (size_t)(r % 3) * 1000;
            p[i] = uslab_malloc(n);
            CHECK(p[i] != NULL, "malloc(%zu)", n);
            mt_fill(p[i], 16, seed + (uint64_t)i);
        }
        for (int i = 0; i < BLOCKS; i++) {
            CHECK(mt_check(p[i], 16, seed + (uint64_t)i), "contents of block %d, round %ld", i, r);
            uslab_free(p[i]);
        }
    }
    return NULL;
}

/* Live objects of the magazine caches ("uslab-magazine*" rows of the table). */
static long live_magazines(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK(f != NULL, "open_memstream");
    CHECK(uslab_stats_print(f, USLAB_STATS_TABLE) == 0, "stats");
    fclose(f);
    long total = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char name[64];
        long objects;
        if (sscanf(line, "%63s %ld", name, &objects) == 2 &&
            strncmp(name, "uslab-magazine", 14) == 0)
            total += objects;
    }
    free(text);
    return total;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    if (argc > 2)
        rounds = atol(argv[2]);
    pthread_t th[2];
    for (int i = 0; i < threads && i < 2; i++)
        CHECK(pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)(i + 1)) == 0, "thread");
    for (int i = 0; i < threads && i < 2; i++)
        pthread_join(th[i], NULL);
    long mags = live_magazines();
    printf("%d thread(s), %ld rounds of %d blocks: %ld magazines live\n", threads, rounds, BLOCKS,
           mags);
    /* Per class: a pair's two, the depot's full ones (1 MiB of objects; with two threads
     * its limit may grow while the other thread finds it empty, up to a few thousand
     * floor magazines in all, which a later pass reaps) and its empty ones. One thread:
     * about 150; two: 150 to 2,200. Before the fix, 40 more every round: 800,000 and 1.1
     * million after 20,000 rounds. */
    long most = threads > 1 ? 10000 : 1000;
    CHECK(mags < most, "%ld magazines live: they grow with the rounds", mags);
    size_t in_depots = 0;
    for (unsigned id = 1; id <= usi_nclasses; id++) { /* under its lock: the purger's passes */
        struct uslab_cache *c = usi_class_caches[id];
        if (!c)
            continue; /* not set up: never used */
        usi_lock(&c->lock);
        in_depots += c->depot_rounds;
        usi_unlock(&c->lock);
    }
    printf("objects in the classes' depots: %zu\n", in_depots);
    CHECK(in_depots < (size_t)rounds, "%zu objects in the depots: they grow with the rounds",
          in_depots);
    TEST_DONE();
}
