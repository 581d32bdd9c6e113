/* SPDX-License-Identifier: MIT */
/*
 * test_symbols_hostile.c - the symbols layer's ELF reader on files made to mislead it
 * (docs/design.md §9: every read bounds-checked), each placed so that it ends where a guard
 * page starts: a read past the file faults. Found by tests/fuzz/fuzz_symbols: a section count
 * taken from section 0 (e_shnum 0, extended numbering) whose size in bytes wraps around 2^64
 * passed the bounds check, and the section names' index was read past the file.
 */
#define _GNU_SOURCE
#include "check.h"
#include "symbols.h"

#include <elf.h>
#include <link.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* A buffer of len bytes whose end is the start of a PROT_NONE page. */
static unsigned char *before_guard(size_t len)
{
    long page = sysconf(_SC_PAGESIZE);
    unsigned char *m =
        mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED && mprotect(m + page, (size_t)page, PROT_NONE) == 0, "a guard page");
    return m + page - len;
}

/* An ELF header of this process's kind, with no program header. */
static void header(ElfW(Ehdr) * h)
{
    memset(h, 0, sizeof *h);
    memcpy(h->e_ident, ELFMAG, SELFMAG);
    h->e_ident[EI_CLASS] = sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32;
    h->e_ident[EI_DATA] = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB;
    h->e_phentsize = sizeof(ElfW(Phdr));
    h->e_shentsize = sizeof(ElfW(Shdr));
}

int main(void)
{
    char text[256];
    /* Section 0 says 2^58 + 1 sections (times 64 bytes: 64, after wrapping around); the
     * names are in section 1, past the file's end. */
    size_t len = sizeof(ElfW(Ehdr)) + sizeof(ElfW(Shdr));
    unsigned char *f = before_guard(len);
    ElfW(Ehdr) h;
    header(&h);
    h.e_shoff = sizeof h;
    h.e_shnum = 0;
    h.e_shstrndx = 1;
    ElfW(Shdr) first;
    memset(&first, 0, sizeof first);
    first.sh_size = ((uint64_t)1 << (sizeof(void *) == 8 ? 58 : 26)) + 1;
    memcpy(f, &h, sizeof h);
    memcpy(f + sizeof h, &first, sizeof first);
    usi_symbols_describe_image(f, len, f, len, 0x1234, text, sizeof text);
    CHECK(strcmp(text, "object+0x1234") == 0, "a wrapping section count: \"%s\"", text);

    /* The same through the index: e_shstrndx SHN_XINDEX names section 0's sh_link. */
    h.e_shstrndx = SHN_XINDEX;
    first.sh_link = 3;
    memcpy(f, &h, sizeof h);
    memcpy(f + sizeof h, &first, sizeof first);
    usi_symbols_describe_image(f, len, NULL, 0, 0x1234, text, sizeof text);
    CHECK(strcmp(text, "object+0x1234") == 0, "names through SHN_XINDEX: \"%s\"", text);
    TEST_DONE();
}
