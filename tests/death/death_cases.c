/* SPDX-License-Identifier: MIT */
/*
 * death_cases.c - misuse of the object-cache API that must be reported on stderr, then
 * abort. argv[1] names the case; death_driver runs it and checks the signal and message.
 * The case "ok" does only legal things and must exit 0 (checks the program itself).
 */
#include "uslab.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uslab_cache_t *make(const char *name, size_t size, unsigned flags)
{
    uslab_cache_t *c = uslab_cache_create(name, size, 0, NULL, NULL, NULL, NULL, flags);
    if (!c) {
        perror("uslab_cache_create");
        exit(2);
    }
    return c;
}

static void *get(uslab_cache_t *c)
{
    void *p = uslab_cache_alloc(c);
    if (!p) {
        perror("uslab_cache_alloc");
        exit(2);
    }
    memset(p, 0x6b, uslab_cache_object_size(c));
    return p;
}

/* Reaching the end of a misuse case means the misuse went unnoticed. */
/* Callbacks that destroy their own cache (uslab.h forbids it; reported). */
static uslab_cache_t *self_cache;

static void dtor_destroys_self(void *obj, void *arg)
{
    (void)obj;
    (void)arg;
    uslab_cache_destroy(self_cache);
}

static int ctor_destroys_self(void *obj, void *arg)
{
    (void)obj;
    (void)arg;
    uslab_cache_destroy(self_cache);
    return 0;
}

static int survived(const char *what)
{
    fprintf(stderr, "death_cases: %s was not detected\n", what);
    return 3;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: death_cases CASE\n");
        return 2;
    }
    const char *k = argv[1];
    /* Some live objects around, so the misuse happens in a used heap. */
    uslab_cache_t *a = make("cache-a", 64, 0);
    uslab_cache_t *b = make("cache-b", 64, 0);
    uslab_cache_t *nm = make("cache-nomag", 64, USLAB_CACHE_NOMAGAZINE);
    void *pa = get(a), *pb = get(b), *pn = get(nm);

    if (strcmp(k, "ok") == 0) {
        uslab_cache_free(a, pa);
        uslab_cache_free(b, pb);
        uslab_cache_free(nm, pn);
        uslab_cache_free(a, NULL);
        uslab_cache_reap(a);
        uslab_cache_destroy(a);
        uslab_cache_destroy(b);
        uslab_cache_destroy(nm);
        return 0;
    }
    if (strcmp(k, "wrong_cache") == 0) {
        uslab_cache_free(b, pa); /* an object of a, same size, freed to b */
        return survived("free to the wrong cache");
    }
    if (strcmp(k, "wrong_cache_same_name") == 0) { /* a plugin loaded twice, say */
        uslab_cache_t *twin = make("cache-a", 64, 0);
        uslab_cache_free(twin, pa);
        return survived("free to another cache of the same name");
    }
    if (strcmp(k, "wrong_cache_nomag") == 0) {
        uslab_cache_free(nm, pa);
        return survived("free to the wrong cache");
    }
    if (strcmp(k, "malloc_block_to_cache") == 0) {
        void *m = uslab_malloc(64);
        uslab_cache_free(a, m);
        return survived("free of a malloc block to a cache");
    }
    if (strcmp(k, "cache_object_to_free") == 0) {
        uslab_free(pa);
        return survived("uslab_free of a cache object");
    }
    if (strcmp(k, "foreign_stack") == 0) {
        char buf[64];
        memset(buf, 0, sizeof buf);
        uslab_cache_free(a, buf);
        return survived("free of a stack pointer");
    }
    if (strcmp(k, "foreign_glibc") == 0) {
        void *m = malloc(64);
        uslab_cache_free(a, m);
        return survived("free of a glibc malloc pointer");
    }
    if (strcmp(k, "foreign_global") == 0) {
        static char global[64];
        uslab_cache_free(nm, global);
        return survived("free of a global");
    }
    if (strcmp(k, "interior_nomag") == 0) {
        uslab_cache_free(nm, (char *)pn + 8);
        return survived("free of a pointer into an object");
    }
    if (strcmp(k, "interior") == 0) {
        /* With magazines the check happens when the object returns to its slab. */
        uslab_cache_free(a, (char *)pa + 8);
        uslab_cache_reap(a);
        return survived("free of a pointer into an object");
    }
    if (strcmp(k, "double_free") == 0) {
        uslab_cache_free(a, pa);
        uslab_cache_free(a, pa);
        uslab_cache_reap(a); /* the second copy reaches the slab layer */
        return survived("double free");
    }
    if (strcmp(k, "double_free_bulk") == 0) {
        void *objs[100];
        for (int i = 0; i < 100; i++)
            objs[i] = get(a);
        objs[99] = objs[10];
        uslab_cache_free_bulk(a, 100, objs);
        uslab_cache_reap(a);
        return survived("double free in a bulk free");
    }
    if (strcmp(k, "double_free_neighbour") == 0 || strcmp(k, "interior_neighbour") == 0) {
        /* Neighbours (a stride apart) go back to their slab in one run of its put: a
         * repeat among them, or an interior pointer after them, is caught there. */
        void *q[4];
        for (int i = 0; i < 3; i++)
            q[i] = get(a);
        uintptr_t d1 = (uintptr_t)q[1] - (uintptr_t)q[0], d2 = (uintptr_t)q[2] - (uintptr_t)q[1];
        if (d1 != d2 || (d1 != 64 && d1 != (uintptr_t)-64)) {
            fprintf(stderr, "death_cases: objects %p %p %p are not neighbours\n", q[0], q[1], q[2]);
            exit(2);
        }
        q[3] = k[0] == 'd' ? q[1] : (char *)q[2] + 8;
        uslab_cache_free_bulk(a, 4, q);
        uslab_cache_reap(a);
        return survived(k[0] == 'd' ? "double free among neighbours"
                                    : "free of a pointer into an object");
    }
    if (strcmp(k, "double_free_nomag") == 0) {
        uslab_cache_free(nm, pn);
        uslab_cache_free(nm, pn);
        return survived("double free");
    }
    if (strcmp(k, "double_free_destroy") == 0) {
        /* Detected when destroy flushes the magazines. */
        uslab_cache_free(a, pa);
        uslab_cache_free(a, pa);
        uslab_cache_destroy(a);
        return survived("double free");
    }
    if (strcmp(k, "never_allocated_nomag") == 0) {
        /* The start of an object of the slab that was never handed out (a slab hands its
         * objects out from the span's end down: design §3). */
        uslab_cache_free(nm, (char *)pn - 64 * 5);
        return survived("free of an object never allocated");
    }
    if (strcmp(k, "destroy_live") == 0) {
        uslab_cache_destroy(a); /* pa is live */
        return survived("destroying a cache with a live object");
    }
    if (strcmp(k, "destroy_live_nomag") == 0) {
        uslab_cache_destroy(nm);
        return survived("destroying a cache with a live object");
    }
    /* Calls with a handle that is not a live cache: each names the call. */
    if (strcmp(k, "destroy_in_dtor") == 0) { /* during a reap: it waited for ever before */
        self_cache =
            uslab_cache_create("cache-self", 48, 0, NULL, dtor_destroys_self, NULL, NULL, 0);
        uslab_cache_free(self_cache, get(self_cache));
        uslab_cache_reap(self_cache);
        return survived("a destructor destroying its own cache");
    }
    if (strcmp(k, "destroy_in_ctor") == 0) {
        self_cache =
            uslab_cache_create("cache-self", 48, 0, ctor_destroys_self, NULL, NULL, NULL, 0);
        (void)uslab_cache_alloc(self_cache);
        return survived("a constructor destroying its own cache");
    }
    if (strcmp(k, "destroy_twice") == 0) {
        uslab_cache_t *c = make("cache-twice", 48, 0);
        uslab_cache_free(c, get(c));
        uslab_cache_destroy(c);
        uslab_cache_destroy(c);
        return survived("destroying a cache twice");
    }
    if (strcmp(k, "destroy_twice_reused") == 0) { /* a create in between: not the same slot */
        uslab_cache_t *c = make("cache-twice", 48, 0);
        uslab_cache_destroy(c);
        uslab_cache_t *d = make("cache-next", 48, 0);
        if (d == c)
            return survived("a destroyed descriptor handed out again at once");
        uslab_cache_destroy(c);
        return survived("destroying a cache twice, with another created in between");
    }
    if (strcmp(k, "alloc_destroyed") == 0) {
        uslab_cache_t *c = make("cache-gone", 48, 0);
        uslab_cache_free(c, get(c));
        uslab_cache_destroy(c);
        make("cache-next", 48, 0); /* may take the destroyed cache's id */
        get(c);
        return survived("allocating from a destroyed cache");
    }
    if (strcmp(k, "free_destroyed") == 0) {
        uslab_cache_t *c = make("cache-gone", 64, 0);
        uslab_cache_destroy(c);
        uslab_cache_t *d = make("cache-next", 64, 0); /* takes the destroyed cache's id */
        uslab_cache_free(c, get(d)); /* an object whose page-map id is c's old one */
        return survived("freeing to a destroyed cache");
    }
    if (strcmp(k, "reap_destroyed") == 0) {
        uslab_cache_t *c = make("cache-gone", 48, USLAB_CACHE_NOMAGAZINE);
        uslab_cache_destroy(c);
        uslab_cache_reap(c);
        return survived("reaping a destroyed cache");
    }
    if (strcmp(k, "stats_destroyed") == 0) {
        uslab_cache_t *c = make("cache-gone", 48, 0);
        uslab_cache_destroy(c);
        struct uslab_cache_stats st;
        uslab_cache_stats(c, &st);
        return survived("statistics of a destroyed cache");
    }
    if (strcmp(k, "reap_null") == 0) {
        uslab_cache_reap(NULL);
        return survived("reaping a NULL cache");
    }
    if (strcmp(k, "name_null") == 0) {
        printf("%s\n", uslab_cache_name(NULL));
        return survived("the name of a NULL cache");
    }
    if (strcmp(k, "size_of_object") == 0) { /* an object's address is not a cache */
        printf("%zu\n", uslab_cache_object_size((uslab_cache_t *)pa));
        return survived("an object passed as a cache");
    }
    if (strcmp(k, "bulk_null") == 0) {
        void *objs[4];
        uslab_cache_alloc_bulk(NULL, 4, objs);
        return survived("a bulk allocation from a NULL cache");
    }
    if (strcmp(k, "free_bulk_null_array") == 0) { /* SIGSEGV before (session 16's audit) */
        uslab_cache_free_bulk(a, 4, NULL);
        return survived("a bulk free of a NULL array");
    }
    if (strcmp(k, "null_arrays") == 0) { /* the calls that refuse with EINVAL instead */
        errno = 0;
        if (uslab_cache_alloc_bulk(a, 4, NULL) != 0 || errno != EINVAL)
            return 4;
        errno = 0;
        if (uslab_cache_stats(a, NULL) != -1 || errno != EINVAL)
            return 5;
        if (uslab_cache_alloc_bulk(a, 0, NULL) != 0) /* nothing asked: nothing to refuse */
            return 6;
        uslab_cache_free_bulk(a, 0, NULL);
        return 0;
    }
    if (strcmp(k, "free_bulk_destroyed") == 0) {
        uslab_cache_t *c = make("cache-gone", 48, 0);
        void *objs[2] = {get(c), get(c)};
        uslab_cache_free_bulk(c, 2, objs);
        uslab_cache_destroy(c);
        uslab_cache_free_bulk(c, 2, objs);
        return survived("a bulk free to a destroyed cache");
    }
    if (strcmp(k, "destroy_live_many") == 0) {
        for (int i = 0; i < 1000; i++)
            uslab_cache_free(b, get(b));
        for (int i = 0; i < 500; i++)
            get(b);
        uslab_cache_destroy(b); /* 500 + pb live */
        return survived("destroying a cache with live objects");
    }
    fprintf(stderr, "death_cases: unknown case %s\n", k);
    return 2;
}
