/* SPDX-License-Identifier: MIT */
/*
 * test_symbols_cache.c - the symbols layer's cache for reports (symbols.c, usi_symbols_begin;
 * docs/design.md §9): inside it every frame is named exactly as without it (addresses
 * sampled across the whole text of this program and of libc, whose .dynsym has aliases and
 * nested ranges, plus addresses in no file); file ids agree; caches nest and restore; and, in
 * test builds, a cache maps each file once where the calls without one map it every time.
 */
#define _GNU_SOURCE
#include "check.h"
#include "symbols.h"

#include <link.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#define SAMPLES 1500 /* addresses of each object's text */

struct text_range {
    const char *want; /* "" the program, else a substring of the object's name */
    uintptr_t start, end;
};

/* dl_iterate_phdr's callback: the executable PT_LOAD segment of the object wanted. */
static int find_text(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct text_range *r = arg;
    int program = !info->dlpi_name || !info->dlpi_name[0];
    if (r->want[0] ? !info->dlpi_name || !strstr(info->dlpi_name, r->want) : !program)
        return 0;
    for (size_t i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
            r->start = info->dlpi_addr + ph->p_vaddr;
            r->end = r->start + ph->p_memsz;
            return 1;
        }
    }
    return 0;
}

static uintptr_t pcs[2 * SAMPLES + 4];
static char plain[2 * SAMPLES + 4][512];
static size_t npcs;

static void sample(const char *object)
{
    struct text_range r = {object, 0, 0};
    dl_iterate_phdr(find_text, &r);
    CHECK(r.end > r.start, "the text of %s found", object[0] ? object : "the program");
    for (size_t i = 0; i < SAMPLES; i++) /* an odd stride: every offset within a page */
        pcs[npcs++] = r.start + (r.end - r.start) / SAMPLES * i + (i * 37) % 64;
}

int main(void)
{
    sample("");
    sample("libc.so");
    void *anon = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(anon != MAP_FAILED, "an anonymous mapping");
    pcs[npcs++] = (uintptr_t)anon + 16; /* memory of no file: the bare address */
    pcs[npcs++] = 4096;                 /* nothing mapped */
    pcs[npcs++] = (uintptr_t)main;
    pcs[npcs++] = (uintptr_t)strlen;

    /* Without a cache, one call at a time, as before the cache existed. */
#ifdef USLAB_ASSERTS
    unsigned long mapped = usi_symbols_files_mapped;
#endif
    for (size_t i = 0; i < npcs; i++)
        usi_symbols_describe((void *)pcs[i], plain[i], sizeof plain[i]);
#ifdef USLAB_ASSERTS
    unsigned long uncached = usi_symbols_files_mapped - mapped;
    CHECK(uncached >= 2 * SAMPLES, "without a cache each frame maps its file (%lu)", uncached);
    mapped = usi_symbols_files_mapped;
#endif
    size_t named = 0;
    for (size_t i = 0; i < 2 * SAMPLES; i++)
        named += strchr(plain[i], '+') == NULL || strstr(plain[i], ") ") || strchr(plain[i], '(');
    CHECK(named > SAMPLES, "most sampled addresses have a function (%zu)", named);

    struct usi_symbols_cache *c = usi_symbols_begin();
    CHECK(c != NULL, "a cache");
    for (size_t i = 0; i < npcs; i++) {
        char cached[512];
        usi_symbols_describe((void *)pcs[i], cached, sizeof cached);
        CHECK(strcmp(cached, plain[i]) == 0, "pc %#lx: \"%s\" in the cache, \"%s\" without",
              (unsigned long)pcs[i], cached, plain[i]);
    }
    /* A report inside the report (a signal handler's): its own cache, then this one again. */
    struct usi_symbols_cache *inner = usi_symbols_begin();
    CHECK(inner != NULL && inner != c, "a nested cache");
    char text[512];
    usi_symbols_describe((void *)pcs[0], text, sizeof text);
    CHECK(strcmp(text, plain[0]) == 0, "the nested cache names alike: \"%s\"", text);
    usi_symbols_end(inner);
    usi_symbols_describe((void *)pcs[SAMPLES], text, sizeof text);
    CHECK(strcmp(text, plain[SAMPLES]) == 0, "the outer cache again: \"%s\"", text);
    uint64_t program = usi_symbols_file_id((void *)main), libc = usi_symbols_file_id(strlen);
#ifdef USLAB_ASSERTS
    unsigned long cached = usi_symbols_files_mapped - mapped;
    /* The program and libc, and each once more for the nested cache. */
    CHECK(cached <= 4, "in a cache each file is mapped once (%lu)", cached);
#endif
    usi_symbols_end(c);
    CHECK(program && libc && program != libc, "file ids in a cache");
    CHECK(usi_symbols_file_id((void *)main) == program && usi_symbols_file_id(strlen) == libc,
          "the same file ids without");
    CHECK(usi_symbols_file_id(anon) == 0, "no file id for anonymous memory");
    usi_symbols_end(NULL);
    munmap(anon, 4096);
    TEST_DONE();
}
