/* SPDX-License-Identifier: MIT */
/*
 * test_symbols_cache.c - the symbols layer's cache for reports (symbols.c, usi_symbols_begin;
 * docs/design.md §9): addresses sampled across the whole text of this program and of libc
 * (whose .dynsym has aliases and nested ranges) are named by the function that a plain scan
 * of the file's .symtab (its debug file's, when libc's is installed under /usr/lib/debug),
 * then .dynsym, finds (the test's own reference: global names first), and alike in a
 * report's cache and without one; addresses in no file too; caches nest and restore; and, in test
 * builds, a cache maps each file once where calls without one map it every time, and lines
 * found through a file's index of line programs are those found by running every program.
 */
#define _GNU_SOURCE
#include "check.h"
#include "symbols.h"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SAMPLES 1500 /* addresses of each object's text */

struct text_range {
    const char *want; /* "" the program, else a substring of the object's name */
    uintptr_t start, end, bias;
    const char *path;
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
            r->bias = info->dlpi_addr;
            r->path = program ? "/proc/self/exe" : info->dlpi_name;
            return 1;
        }
    }
    return 0;
}

static uintptr_t pcs[2 * SAMPLES + 4];
static char plain[2 * SAMPLES + 4][512];
static size_t npcs;

/* The reference: the first STT_FUNC symbol of the table named `table` whose range holds
 * vaddr, scanned in the file's order, global names before local ones. */
static const char *scan_table(const unsigned char *f, const char *table, uint64_t vaddr)
{
    const ElfW(Ehdr) *h = (const void *)f;
    const ElfW(Shdr) *sh = (const void *)(f + h->e_shoff);
    const char *names = (const char *)f + sh[h->e_shstrndx].sh_offset;
    for (int local = 0; local < 2; local++)
        for (size_t i = 1; i < h->e_shnum; i++) {
            if (strcmp(names + sh[i].sh_name, table) != 0)
                continue;
            const ElfW(Sym) *sym = (const void *)(f + sh[i].sh_offset);
            const char *strs = (const char *)f + sh[sh[i].sh_link].sh_offset;
            for (size_t k = 0; k < sh[i].sh_size / sizeof *sym; k++) {
                unsigned type = ELF64_ST_TYPE(sym[k].st_info);
                if ((type == STT_FUNC || type == STT_GNU_IFUNC) && sym[k].st_shndx != SHN_UNDEF &&
                    sym[k].st_name && (ELF64_ST_BIND(sym[k].st_info) == STB_LOCAL) == local &&
                    vaddr >= sym[k].st_value && vaddr - sym[k].st_value < sym[k].st_size)
                    return strs + sym[k].st_name;
            }
        }
    return NULL;
}

/* The file mapped at *size where the file of f's build id lies under /usr/lib/debug/.build-id
 * (an installed debug package), or NULL. */
static const unsigned char *debug_file_of(const unsigned char *f, size_t *size)
{
    const ElfW(Ehdr) *h = (const void *)f;
    const ElfW(Phdr) *ph = (const void *)(f + h->e_phoff);
    for (size_t i = 0; i < h->e_phnum; i++) {
        for (size_t at = ph[i].p_offset;
             ph[i].p_type == PT_NOTE &&
             at + sizeof(ElfW(Nhdr)) <= ph[i].p_offset + ph[i].p_filesz;) {
            const ElfW(Nhdr) *n = (const void *)(f + at);
            const unsigned char *desc = f + at + sizeof *n + (n->n_namesz + 3) / 4 * 4;
            at = (size_t)(desc - f) + (n->n_descsz + 3) / 4 * 4;
            if (n->n_type != NT_GNU_BUILD_ID || n->n_descsz == 0)
                continue;
            char path[256];
            int len = snprintf(path, sizeof path, "/usr/lib/debug/.build-id/%02x/", desc[0]);
            for (size_t k = 1; k < n->n_descsz; k++)
                len += snprintf(path + len, sizeof path - (size_t)len, "%02x", desc[k]);
            snprintf(path + len, sizeof path - (size_t)len, ".debug");
            int fd = open(path, O_RDONLY);
            struct stat st;
            if (fd < 0 || fstat(fd, &st) != 0) {
                if (fd >= 0)
                    close(fd);
                return NULL;
            }
            void *d = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
            close(fd);
            *size = (size_t)st.st_size;
            return d == MAP_FAILED ? NULL : d;
        }
    }
    return NULL;
}

static void sample(const char *object)
{
    struct text_range r = {object, 0, 0, 0, NULL};
    dl_iterate_phdr(find_text, &r);
    CHECK(r.end > r.start, "the text of %s found", object[0] ? object : "the program");
    int fd = open(r.path, O_RDONLY);
    struct stat st;
    CHECK(fd >= 0 && fstat(fd, &st) == 0, "%s opened", r.path);
    const unsigned char *f = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    CHECK(f != MAP_FAILED, "%s mapped", r.path);
    close(fd);
    size_t debug_size = 0;
    const unsigned char *debug = NULL; /* libc's debug file, if installed: uslab reads it */
    const ElfW(Ehdr) *h = (const void *)f;
    int has_symtab = 0;
    for (size_t i = 1; i < h->e_shnum; i++)
        has_symtab |= ((const ElfW(Shdr) *)(const void *)(f + h->e_shoff))[i].sh_type == SHT_SYMTAB;
    if (!has_symtab)
        debug = debug_file_of(f, &debug_size);
    size_t found = 0;
    for (size_t i = 0; i < SAMPLES; i++) { /* an odd stride: every offset within a page */
        uintptr_t pc = r.start + (r.end - r.start) / SAMPLES * i + (i * 37) % 64;
        char text[512];
        usi_symbols_describe((void *)pc, text, sizeof text);
        const char *want = scan_table(debug ? debug : f, ".symtab", pc - r.bias);
        if (!want)
            want = scan_table(f, ".dynsym", pc - r.bias);
        size_t n = want ? strcspn(want, "@") : 0; /* a version of .symtab's left out */
        CHECK(want ? strncmp(text, want, n) == 0 && (text[n] == ' ' || text[n] == '+')
                   : strchr(text, '(') == NULL,
              "pc %#lx: \"%s\", the file's tables say %s", (unsigned long)pc, text,
              want ? want : "no function");
        found += want != NULL;
        pcs[npcs++] = pc;
    }
    CHECK(found > SAMPLES / 5, "many addresses of %s are in a function (%zu)", r.path, found);
    munmap((void *)f, (size_t)st.st_size);
    if (debug)
        munmap((void *)debug, debug_size);
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

    /* Without a cache of the thread's: each call makes its own. */
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
#ifdef USLAB_ASSERTS
    unsigned long cached = usi_symbols_files_mapped - mapped;
    /* The program and libc, and each once more for the nested cache. */
    CHECK(cached <= 4, "in a cache each file is mapped once (%lu)", cached);
#endif
    usi_symbols_end(c);
    usi_symbols_end(NULL);
#ifdef USLAB_ASSERTS
    /* Lines through the index of a file's line programs (built on its first lookup), and
     * with every program run up to the one that holds the address: the same text, and the
     * index runs only the programs whose addresses hold the lookup's. */
    size_t with_lines = 0;
    unsigned long runs[2];
    for (int no_index = 0; no_index < 2; no_index++) {
        usi_symbols_no_line_index = no_index;
        unsigned long before = usi_symbols_line_programs;
        c = usi_symbols_begin();
        CHECK(c != NULL, "a cache");
        for (size_t i = 0; i < npcs; i++) {
            usi_symbols_describe((void *)pcs[i], text, sizeof text);
            CHECK(strcmp(text, plain[i]) == 0, "pc %#lx: \"%s\" %s the line index, \"%s\" with",
                  (unsigned long)pcs[i], text, no_index ? "without" : "with", plain[i]);
            with_lines += !no_index && strstr(text, ".c:") != NULL;
        }
        usi_symbols_end(c);
        runs[no_index] = usi_symbols_line_programs - before;
    }
    usi_symbols_no_line_index = 0;
    CHECK(with_lines > SAMPLES / 5, "many addresses have a line (%zu)", with_lines);
    /* This program's units cover disjoint addresses: a lookup runs at most one program. */
    CHECK(runs[0] <= npcs && runs[0] < runs[1],
          "the index runs at most a program a lookup: %lu for %zu lookups, without it %lu", runs[0],
          npcs, runs[1]);
#endif
    munmap(anon, 4096);
    TEST_DONE();
}
