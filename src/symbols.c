/* SPDX-License-Identifier: MIT */
/*
 * symbols.c - names for code addresses in reports (docs/design.md §9): a stack frame's pc
 * becomes "function (file.c:line)" when the object that holds it carries DWARF line
 * information, "function+0xoff (object)" when it has only a symbol table, "object+0xoff"
 * (the address inside the object, as addr2line takes it) when it has neither, and the bare
 * address when the object cannot be found.
 *
 * How: the loaded object that holds pc comes from the dynamic linker's table (_dl_find_object:
 * memory only, no lock), with its path (the program's: /proc/self/exe) and load bias, which
 * makes pc an address in the file's own terms (PIE and non-PIE alike). Its file is opened and
 * mapped read-only if it is the object loaded: the same build id as the notes in memory (or,
 * without one, the same program headers), so that a library replaced since it was loaded is
 * not read. The function is the STT_FUNC symbol of .symtab (static functions included), else
 * of .dynsym, whose range holds that address (both sorted by address once a file: fn_index).
 * The line is found by running the line-number programs of .debug_line (DWARF 2 to 5) whose
 * addresses hold it (line_index, once a file) until a row range holds the address; the file
 * name comes from the program's file table (v5: entries described by their own formats, names
 * in .debug_line_str or .debug_str or inline). An object without .symtab or a readable
 * .debug_line takes them from its separate debug file with the same build id, found as gdb
 * finds it (find_debug_file).
 *
 * Under a seccomp filter (usi_os_seccomp_mode asks the kernel: prctl, else /proc) no file
 * is opened: an address is named "object+0xaddress", without its function or line. The
 * filter may kill for openat (a sandbox that allows only what it needs), and a report of a
 * debug check, or the leak report at exit, then ended the process with SIGSYS instead.
 *
 * Each call keeps what it read in a cache of its own; a report that names many frames opens
 * one for all of them (usi_symbols_begin), so each file is opened once a report, not once a
 * frame. The leak report at exit keeps where the objects lie in it first
 * (usi_symbols_keep_objects): glibc's __libc_freeres takes dlopen's objects out of the table.
 *
 * Rules: never allocates from uslab or malloc (scratch memory is the cache, one anonymous
 * mapping, a file is mapped and its sorted functions are one more), takes no lock and uses
 * no stdio, so it works in a signal
 * handler that interrupted malloc and while a report holds uslab's locks; only the os
 * layer's calls reach the kernel. Everything read from a file is bounds-checked: a
 * truncated or hostile file gives a plainer answer, never a crash. A compressed section
 * (SHF_COMPRESSED) or one absent (NOBITS, stripped) is treated as absent.
 */
#define _GNU_SOURCE
#include "symbols.h"
#include "base.h"
#include "os.h"

#include <elf.h>
#include <errno.h>
#include <link.h>
#include <string.h>
#include <sys/auxv.h>

/* ---- text without stdio --------------------------------------------------------------- */

/* A bounded string being built: buf[used] is always '\0' and used < cap. */
struct text {
    char *buf;
    size_t cap, used;
};

static void text_add(struct text *t, const char *s, size_t n)
{
    while (n-- && t->used + 1 < t->cap)
        t->buf[t->used++] = *s++;
    t->buf[t->used] = '\0';
}

static void text_str(struct text *t, const char *s)
{
    text_add(t, s, strlen(s));
}

static void text_hex(struct text *t, uint64_t v)
{
    char digits[2 + 16];
    size_t n = sizeof digits;
    do
        digits[--n] = "0123456789abcdef"[v & 15];
    while (v >>= 4);
    digits[--n] = 'x';
    digits[--n] = '0';
    text_add(t, digits + n, sizeof digits - n);
}

static void text_dec(struct text *t, uint64_t v)
{
    char digits[20];
    size_t n = sizeof digits;
    do
        digits[--n] = (char)('0' + v % 10);
    while (v /= 10);
    text_add(t, digits + n, sizeof digits - n);
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

#define PATH_BYTES 4096 /* a debug file's path (find_debug_file) */

/* ---- ELF -------------------------------------------------------------------------------- */

/* The process's own ELF class (32 or 64 bits): the only one read. */
typedef ElfW(Ehdr) elf_header;
typedef ElfW(Phdr) elf_program_header;
typedef ElfW(Shdr) elf_section_header;
typedef ElfW(Sym) elf_symbol;

/* A mapped ELF file of this process's class and byte order. Invariant: the section and
 * program header tables lie inside [base, base + size). */
struct elf_image {
    const unsigned char *base;
    size_t size;
    const elf_header *header;
    const elf_section_header *sections;
    size_t nsections;
    const char *section_names;
    size_t section_names_size;
};

static int in_file(const struct elf_image *e, uint64_t offset, uint64_t bytes)
{
    return offset <= e->size && bytes <= e->size - offset;
}

static int elf_open(struct elf_image *e, const void *base, size_t size)
{
    e->base = base;
    e->size = size;
    e->header = base;
    const elf_header *h = e->header;
    if (size < sizeof *h || memcmp(h->e_ident, ELFMAG, SELFMAG) != 0 ||
        h->e_ident[EI_CLASS] != (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32) ||
        h->e_ident[EI_DATA] !=
            (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB) ||
        h->e_phentsize != sizeof(elf_program_header) ||
        !in_file(e, h->e_phoff, (uint64_t)h->e_phnum * sizeof(elf_program_header)) ||
        (h->e_phoff % _Alignof(elf_program_header)) != 0)
        return 0;
    e->sections = NULL;
    e->nsections = 0;
    e->section_names = NULL;
    e->section_names_size = 0;
    if (h->e_shoff == 0 || h->e_shentsize != sizeof(elf_section_header) ||
        (h->e_shoff % _Alignof(elf_section_header)) != 0 ||
        !in_file(e, h->e_shoff, sizeof(elf_section_header)))
        return 1; /* no section headers: program headers only, no symbols */
    const elf_section_header *first = (const void *)(e->base + h->e_shoff);
    /* Extended numbering: the counts live in section 0 when they do not fit the header. */
    size_t n = h->e_shnum ? h->e_shnum : (size_t)first->sh_size;
    size_t names = h->e_shstrndx == SHN_XINDEX ? first->sh_link : h->e_shstrndx;
    if (n > (size - h->e_shoff) / sizeof(elf_section_header)) /* n * size may wrap around */
        return 1;
    e->sections = first;
    e->nsections = n;
    if (names < n && e->sections[names].sh_type == SHT_STRTAB &&
        in_file(e, e->sections[names].sh_offset, e->sections[names].sh_size)) {
        e->section_names = (const char *)e->base + e->sections[names].sh_offset;
        e->section_names_size = e->sections[names].sh_size;
    }
    return 1;
}

/* A section's bytes: 1, or 0 if it has none in the file or is compressed. */
static int section_bytes(const struct elf_image *e, const elf_section_header *sh,
                         const unsigned char **p, size_t *n)
{
    if (sh->sh_type == SHT_NOBITS || (sh->sh_flags & SHF_COMPRESSED) ||
        !in_file(e, sh->sh_offset, sh->sh_size))
        return 0;
    *p = e->base + sh->sh_offset;
    *n = sh->sh_size;
    return 1;
}

static const elf_section_header *find_section(const struct elf_image *e, const char *name)
{
    size_t len = strlen(name);
    for (size_t i = 1; i < e->nsections && e->section_names; i++) {
        size_t at = e->sections[i].sh_name;
        if (at < e->section_names_size && e->section_names_size - at > len &&
            memcmp(e->section_names + at, name, len + 1) == 0)
            return &e->sections[i];
    }
    return NULL;
}

/* The GNU build id among the notes at [p, p + n): its length and *id, or 0. */
static size_t notes_build_id(const unsigned char *p, size_t n, const unsigned char **id)
{
    ElfW(Nhdr) h;
    for (size_t at = 0; at <= n && n - at >= sizeof h;) {
        memcpy(&h, p + at, sizeof h);
        size_t name = at + sizeof h, desc = name + ((h.n_namesz + 3) & ~3ull);
        if (h.n_namesz > n || h.n_descsz > n || desc > n || h.n_descsz > n - desc)
            return 0;
        if (h.n_type == NT_GNU_BUILD_ID && h.n_namesz == 4 && memcmp(p + name, "GNU", 4) == 0 &&
            h.n_descsz > 0) {
            *id = p + desc;
            return h.n_descsz;
        }
        at = desc + ((h.n_descsz + 3) & ~3ull);
    }
    return 0;
}

/* The GNU build id of the file e (its .note.gnu.build-id): its length and *id, or 0. */
static size_t build_id(const struct elf_image *e, const unsigned char **id)
{
    const elf_section_header *sh = find_section(e, ".note.gnu.build-id");
    const unsigned char *p;
    size_t n;
    if (!sh || sh->sh_type != SHT_NOTE || !section_bytes(e, sh, &p, &n))
        return 0;
    return notes_build_id(p, n, id);
}

/* Whether e has line information it can read: a .debug_line in the file, uncompressed. */
static int has_lines(const struct elf_image *e)
{
    const elf_section_header *sh = find_section(e, ".debug_line");
    const unsigned char *p;
    size_t n;
    return sh && section_bytes(e, sh, &p, &n);
}

/* A file's function symbols (STT_FUNC, of .symtab, else of .dynsym) sorted by address, made on
 * a file's first lookup (struct usi_symbols_cache). rank is the order of a scan of .symtab then
 * .dynsym, .symtab's global names before its local ones (a library's debug file has local
 * aliases, __libc_start_main_impl, beside the name its callers know): among the symbols
 * that hold an address, the lowest rank names it. Invariant:
 * entries sorted by start; reach is the largest end of this entry and those before it, so a
 * scan back from the last start at or below an address stops at the first reach at or
 * below it. */
struct fn_entry {
    uint64_t start, end, reach, rank;
    const char *name;
};

struct fn_index {
    struct fn_entry *e; /* NULL: no function, or no memory for them */
    size_t n, bytes;    /* bytes: the mapping's size */
    int built;
};

/* Appends (or, with out NULL, counts) the functions of a symbol table that can name an
 * address: defined, sized, their name inside the string table. */
static size_t index_table(const struct elf_image *e, const elf_section_header *table,
                          uint64_t rank_base, struct fn_entry *out)
{
    const unsigned char *syms, *strs;
    size_t syms_size, strs_size, n = 0;
    if (!table || table->sh_entsize != sizeof(elf_symbol) || table->sh_link >= e->nsections ||
        !section_bytes(e, table, &syms, &syms_size) ||
        !section_bytes(e, &e->sections[table->sh_link], &strs, &strs_size) ||
        ((uintptr_t)syms % _Alignof(elf_symbol)) != 0)
        return 0;
    const elf_symbol *sym = (const void *)syms;
    for (size_t i = 0; i < syms_size / sizeof *sym; i++) {
        unsigned type = ELF64_ST_TYPE(sym[i].st_info);
        size_t at = sym[i].st_name;
        if ((type != STT_FUNC && type != STT_GNU_IFUNC) || sym[i].st_shndx == SHN_UNDEF ||
            sym[i].st_size == 0 || sym[i].st_value + sym[i].st_size < sym[i].st_value || at == 0 ||
            at >= strs_size || !memchr(strs + at, '\0', strs_size - at))
            continue;
        if (out)
            out[n] = (struct fn_entry){
                sym[i].st_value, sym[i].st_value + sym[i].st_size, 0,
                rank_base + i + ((uint64_t)(ELF64_ST_BIND(sym[i].st_info) == STB_LOCAL) << 31),
                (const char *)strs + at};
        n++;
    }
    return n;
}

static int fn_before(const struct fn_entry *a, const struct fn_entry *b)
{
    return a->start < b->start || (a->start == b->start && a->rank < b->rank);
}

/* Heapsort: no allocation, and no worst case (glibc's qsort may call malloc). */
static void fn_sift(struct fn_entry *e, size_t root, size_t n)
{
    for (size_t child; (child = 2 * root + 1) < n; root = child) {
        if (child + 1 < n && fn_before(&e[child], &e[child + 1]))
            child++;
        if (!fn_before(&e[root], &e[child]))
            return;
        struct fn_entry t = e[root];
        e[root] = e[child];
        e[child] = t;
    }
}

/* The functions of s's .symtab (the object's, or its debug file's) and of e's .dynsym. */
static void fn_index_build(struct fn_index *x, const struct elf_image *s, const struct elf_image *e)
{
    const elf_section_header *symtab = find_section(s, ".symtab"), *dynsym;
    dynsym = find_section(e, ".dynsym");
    size_t n = index_table(s, symtab, 0, NULL) + index_table(e, dynsym, 1ull << 32, NULL);
    x->built = 1;
    x->bytes = n * sizeof *x->e;
    x->e = n ? usi_os_map(x->bytes) : NULL;
    if (!x->e) {
        x->n = x->bytes = 0;
        return;
    }
    x->n = index_table(s, symtab, 0, x->e);
    x->n += index_table(e, dynsym, 1ull << 32, x->e + x->n);
    for (size_t i = x->n / 2; i-- > 0;)
        fn_sift(x->e, i, x->n);
    for (size_t i = x->n; i-- > 1;) {
        struct fn_entry t = x->e[0];
        x->e[0] = x->e[i];
        x->e[i] = t;
        fn_sift(x->e, 0, i);
    }
    for (size_t i = 0; i < x->n; i++)
        x->e[i].reach = i && x->e[i - 1].reach > x->e[i].end ? x->e[i - 1].reach : x->e[i].end;
}

/* The function whose range holds vaddr (and vaddr's offset in it), or NULL. */
static const char *fn_index_find(const struct fn_index *x, uint64_t vaddr, uint64_t *offset)
{
    size_t lo = 0, hi = x->n; /* the first entry that starts above vaddr */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (x->e[mid].start <= vaddr)
            lo = mid + 1;
        else
            hi = mid;
    }
    const struct fn_entry *best = NULL;
    for (size_t i = lo; i-- > 0 && x->e[i].reach > vaddr;)
        if (vaddr < x->e[i].end && (!best || x->e[i].rank < best->rank))
            best = &x->e[i];
    if (!best)
        return NULL;
    *offset = vaddr - best->start;
    return best->name;
}

/* ---- DWARF line-number programs (.debug_line, DWARF 2 to 5) ---------------------------- */

#define DW_LNS_copy             1
#define DW_LNS_advance_pc       2
#define DW_LNS_advance_line     3
#define DW_LNS_set_file         4
#define DW_LNS_const_add_pc     8
#define DW_LNS_fixed_advance_pc 9
#define DW_LNE_end_sequence     1
#define DW_LNE_set_address      2
#define DW_LNCT_path            1

#define DW_FORM_block2    0x03
#define DW_FORM_block4    0x04
#define DW_FORM_data2     0x05
#define DW_FORM_data4     0x06
#define DW_FORM_data8     0x07
#define DW_FORM_string    0x08
#define DW_FORM_block     0x09
#define DW_FORM_block1    0x0a
#define DW_FORM_data1     0x0b
#define DW_FORM_sdata     0x0d
#define DW_FORM_strp      0x0e
#define DW_FORM_udata     0x0f
#define DW_FORM_strx      0x1a
#define DW_FORM_strp_sup  0x1d
#define DW_FORM_data16    0x1e
#define DW_FORM_line_strp 0x1f
#define DW_FORM_strx1     0x25
#define DW_FORM_strx2     0x26
#define DW_FORM_strx3     0x27
#define DW_FORM_strx4     0x28

/* Reads bytes in [p, end); a read past end sets `failed` and yields zeros from then on. */
struct reader {
    const unsigned char *p, *end;
    int failed;
};

static int reader_has(struct reader *r, uint64_t n)
{
    if (r->failed || n > (uint64_t)(r->end - r->p)) {
        r->failed = 1;
        return 0;
    }
    return 1;
}

static void skip_bytes(struct reader *r, uint64_t n)
{
    if (reader_has(r, n))
        r->p += n;
}

/* An unsigned value of n bytes (n <= 8) in the file's byte order (the process's). */
static uint64_t read_fixed(struct reader *r, unsigned n)
{
    uint64_t v = 0;
    if (!reader_has(r, n))
        return 0;
    for (unsigned i = 0; i < n; i++) {
        unsigned shift = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? 8 * i : 8 * (n - 1 - i);
        v |= (uint64_t)r->p[i] << shift;
    }
    r->p += n;
    return v;
}

static uint64_t read_uleb(struct reader *r)
{
    uint64_t v = 0;
    for (unsigned shift = 0;; shift += 7) {
        if (!reader_has(r, 1))
            return 0;
        unsigned char b = *r->p++;
        if (shift < 64)
            v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return v;
    }
}

static int64_t read_sleb(struct reader *r)
{
    uint64_t v = 0;
    unsigned shift = 0;
    unsigned char b;
    do {
        if (!reader_has(r, 1))
            return 0;
        b = *r->p++;
        if (shift < 64)
            v |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
    } while (b & 0x80);
    if (shift < 64 && (b & 0x40))
        v |= ~(uint64_t)0 << shift;
    return (int64_t)v;
}

/* A NUL-terminated string at the reader, or NULL (and failed) if it runs past the end. */
static const char *read_cstr(struct reader *r)
{
    const unsigned char *nul = r->failed ? NULL : memchr(r->p, '\0', (size_t)(r->end - r->p));
    if (!nul) {
        r->failed = 1;
        return NULL;
    }
    const char *s = (const char *)r->p;
    r->p = nul + 1;
    return s;
}

struct debug_sections {
    const unsigned char *line, *line_str, *str;
    size_t line_size, line_str_size, str_size;
};

/* The string at offset of a string section, or NULL. */
static const char *string_at(const unsigned char *sec, size_t size, uint64_t offset)
{
    if (!sec || offset >= size || !memchr(sec + offset, '\0', size - (size_t)offset))
        return NULL;
    return (const char *)sec + offset;
}

/* One line-number program's header, as read. Invariant: tables <= program <= unit_end,
 * all inside .debug_line. */
struct line_header {
    unsigned version, offset_size;
    unsigned min_inst_length, max_ops, line_range, opcode_base;
    int default_is_stmt, line_base;
    const unsigned char *opcode_lengths; /* opcode_base - 1 bytes */
    const unsigned char *tables;         /* directory and file tables */
    const unsigned char *program, *unit_end;
};

/* Reads the unit at r; on return r is at the next unit. 1 if its header can be used. */
static int read_line_header(struct reader *r, struct line_header *h)
{
    h->offset_size = 4;
    uint64_t length = read_fixed(r, 4);
    if (length == 0xffffffffu) {
        h->offset_size = 8;
        length = read_fixed(r, 8);
    } else if (length >= 0xfffffff0u) {
        r->failed = 1; /* reserved values: nothing after this can be trusted */
    }
    if (!reader_has(r, length))
        return 0;
    struct reader unit = {r->p, r->p + length, 0};
    r->p += length;
    h->unit_end = unit.end;
    h->version = (unsigned)read_fixed(&unit, 2);
    if (h->version < 2 || h->version > 5)
        return 0;
    if (h->version >= 5)
        skip_bytes(&unit, 2); /* address_size, segment_selector_size */
    uint64_t header_length = read_fixed(&unit, h->offset_size);
    if (!reader_has(&unit, header_length))
        return 0;
    h->program = unit.p + header_length;
    h->min_inst_length = (unsigned)read_fixed(&unit, 1);
    h->max_ops = h->version >= 4 ? (unsigned)read_fixed(&unit, 1) : 1;
    h->default_is_stmt = (int)read_fixed(&unit, 1);
    h->line_base = (int)(int8_t)read_fixed(&unit, 1);
    h->line_range = (unsigned)read_fixed(&unit, 1);
    h->opcode_base = (unsigned)read_fixed(&unit, 1);
    h->opcode_lengths = unit.p;
    if (h->opcode_base == 0)
        return 0;
    skip_bytes(&unit, h->opcode_base - 1);
    h->tables = unit.p;
    if (h->max_ops == 0)
        h->max_ops = 1;
    return !unit.failed && h->line_range != 0 && h->tables <= h->program;
}

/* Reads one value of a v5 entry format's form: for string forms the string (NULL if it
 * cannot be resolved here, e.g. strx, which needs the unit's string offsets), for the
 * others NULL after skipping it. An unknown form sets failed. */
static const char *read_form(struct reader *r, uint64_t form, const struct line_header *h,
                             const struct debug_sections *d)
{
    switch (form) {
    case DW_FORM_string:
        return read_cstr(r);
    case DW_FORM_line_strp:
        return string_at(d->line_str, d->line_str_size, read_fixed(r, h->offset_size));
    case DW_FORM_strp:
        return string_at(d->str, d->str_size, read_fixed(r, h->offset_size));
    case DW_FORM_strp_sup:
        skip_bytes(r, h->offset_size);
        return NULL;
    case DW_FORM_udata:
    case DW_FORM_strx:
        read_uleb(r);
        return NULL;
    case DW_FORM_sdata:
        read_sleb(r);
        return NULL;
    case DW_FORM_data1:
    case DW_FORM_strx1:
        skip_bytes(r, 1);
        return NULL;
    case DW_FORM_data2:
    case DW_FORM_strx2:
        skip_bytes(r, 2);
        return NULL;
    case DW_FORM_strx3:
        skip_bytes(r, 3);
        return NULL;
    case DW_FORM_data4:
    case DW_FORM_strx4:
        skip_bytes(r, 4);
        return NULL;
    case DW_FORM_data8:
        skip_bytes(r, 8);
        return NULL;
    case DW_FORM_data16:
        skip_bytes(r, 16);
        return NULL;
    case DW_FORM_block:
        skip_bytes(r, read_uleb(r));
        return NULL;
    case DW_FORM_block1:
        skip_bytes(r, read_fixed(r, 1));
        return NULL;
    case DW_FORM_block2:
        skip_bytes(r, read_fixed(r, 2));
        return NULL;
    case DW_FORM_block4:
        skip_bytes(r, read_fixed(r, 4));
        return NULL;
    default:
        r->failed = 1;
        return NULL;
    }
}

/* Walks a v5 entry table (format count, formats, entry count, entries) at r, leaving r
 * after it; returns the DW_LNCT_path of entry `wanted` (NULL if absent or not reached). */
static const char *v5_table_path(struct reader *r, uint64_t wanted, const struct line_header *h,
                                 const struct debug_sections *d)
{
    unsigned nformats = (unsigned)read_fixed(r, 1);
    struct reader formats = *r;
    for (unsigned k = 0; k < nformats; k++) {
        read_uleb(r);
        read_uleb(r);
    }
    uint64_t count = read_uleb(r);
    const char *found = NULL;
    if (nformats == 0) /* entries of no bytes: nothing to find, nothing to skip */
        return NULL;
    for (uint64_t i = 0; i < count && !r->failed; i++) {
        struct reader f = formats;
        for (unsigned k = 0; k < nformats && !r->failed; k++) {
            uint64_t content = read_uleb(&f);
            uint64_t form = read_uleb(&f);
            const char *s = read_form(r, form, h, d);
            if (i == wanted && content == DW_LNCT_path)
                found = s;
        }
    }
    return r->failed ? NULL : found;
}

/* The name of file `index` of a line-number program (DWARF 5 counts from 0, earlier
 * versions from 1), or NULL. */
static const char *line_file_name(const struct line_header *h, const struct debug_sections *d,
                                  uint64_t index)
{
    struct reader r = {h->tables, h->program, 0};
    if (h->version >= 5) {
        v5_table_path(&r, UINT64_MAX, h, d); /* directories */
        return v5_table_path(&r, index, h, d);
    }
    for (const char *dir = read_cstr(&r); dir && *dir; dir = read_cstr(&r))
        ; /* include_directories */
    for (uint64_t i = 1; !r.failed; i++) {
        const char *name = read_cstr(&r);
        if (!name || !*name)
            return NULL;
        read_uleb(&r); /* directory, modification time, length */
        read_uleb(&r);
        read_uleb(&r);
        if (i == index && !r.failed)
            return name;
    }
    return NULL;
}

/* The line-number state machine's registers that matter here. */
struct line_row {
    uint64_t address, file, line;
};

/* The addresses a program's rows cover, [lo, hi): lo > hi where none. */
struct line_span {
    uint64_t lo, hi;
};

/* Runs one program: 1 and *found if a row's range [row, next row) holds vaddr. Sequences
 * that start at address 0 (code the linker discarded) are ignored. With span (and vaddr
 * UINT64_MAX, which no row holds), the addresses of its rows instead. */
static int line_program_find(const struct line_header *h, uint64_t vaddr, struct line_row *found,
                             struct line_span *span)
{
    struct reader r = {h->program, h->unit_end, 0};
    struct line_row row = {0, 1, 1}, prev = {0, 0, 0};
    uint64_t op_index = 0, sequence_start = 0;
    int have_prev = 0; /* prev is an earlier row of the current sequence */
    while (r.p < r.end && !r.failed) {
        unsigned op = (unsigned)read_fixed(&r, 1);
        int emit = 0, end_sequence = 0;
        uint64_t advance = 0; /* operation advance */
        if (op >= h->opcode_base) {
            unsigned adjusted = op - h->opcode_base;
            advance = adjusted / h->line_range;
            row.line += (uint64_t)(int64_t)(h->line_base + (int)(adjusted % h->line_range));
            emit = 1;
        } else if (op == 0) {
            uint64_t len = read_uleb(&r);
            if (len == 0 || !reader_has(&r, len))
                break;
            struct reader ext = {r.p, r.p + len, 0};
            r.p += len;
            unsigned sub = (unsigned)read_fixed(&ext, 1);
            if (sub == DW_LNE_end_sequence) {
                emit = end_sequence = 1;
            } else if (sub == DW_LNE_set_address && len - 1 <= 8) {
                row.address = read_fixed(&ext, (unsigned)(len - 1));
                op_index = 0;
            }
        } else if (op == DW_LNS_copy) {
            emit = 1;
        } else if (op == DW_LNS_advance_pc) {
            advance = read_uleb(&r);
        } else if (op == DW_LNS_advance_line) {
            row.line += (uint64_t)read_sleb(&r);
        } else if (op == DW_LNS_set_file) {
            row.file = read_uleb(&r);
        } else if (op == DW_LNS_const_add_pc) {
            advance = (255 - h->opcode_base) / h->line_range;
        } else if (op == DW_LNS_fixed_advance_pc) {
            row.address += read_fixed(&r, 2);
            op_index = 0;
        } else { /* other standard opcodes: skip their unsigned LEB128 operands */
            for (unsigned k = 0; k < h->opcode_lengths[op - 1]; k++)
                read_uleb(&r);
        }
        if (advance) {
            row.address += h->min_inst_length * ((op_index + advance) / h->max_ops);
            op_index = (op_index + advance) % h->max_ops;
        }
        if (!emit || r.failed)
            continue;
        if (have_prev && sequence_start != 0 && prev.address <= vaddr && vaddr < row.address) {
            *found = prev;
            return 1;
        }
        if (span && have_prev && sequence_start != 0) {
            span->lo = prev.address < span->lo ? prev.address : span->lo;
            span->hi = row.address > span->hi ? row.address : span->hi;
        }
        if (!have_prev)
            sequence_start = row.address;
        prev = row;
        have_prev = !end_sequence;
        if (end_sequence) {
            row = (struct line_row){0, 1, 1};
            op_index = 0;
        }
    }
    return 0;
}

/* The line-number programs of a file's .debug_line with the addresses each covers, made on
 * the file's first line lookup (struct usi_symbols_cache) by running every program once, so
 * that a lookup runs only the programs that may hold its address, not every program before
 * the one that does (a leak report of python3 with its -g library: 3,000 lookups). Invariant:
 * units in the section's order, each with lo < hi and offset the start of its header. */
struct line_unit {
    uint64_t lo, hi;
    size_t offset;
};

struct line_index {
    struct line_unit *u; /* NULL: not built, or no memory (every program is run) */
    size_t n, bytes;
    int built;
};

#ifdef USLAB_ASSERTS
unsigned long usi_symbols_line_programs; /* test builds: line programs run for a lookup */
int usi_symbols_no_line_index;           /* test builds: lookups without the index */
#endif

static void line_index_build(struct line_index *x, const struct debug_sections *d)
{
    struct reader r = {d->line, d->line + d->line_size, 0};
    struct line_header h;
    size_t n = 0;
    x->built = 1;
#ifdef USLAB_ASSERTS
    if (usi_symbols_no_line_index)
        return;
#endif
    for (; r.p < r.end && !r.failed; n++)
        read_line_header(&r, &h);
    x->bytes = n * sizeof *x->u;
    x->u = n ? usi_os_map(x->bytes) : NULL;
    r = (struct reader){d->line, d->line + d->line_size, 0};
    while (x->u && r.p < r.end && !r.failed && x->n < n) {
        size_t offset = (size_t)(r.p - d->line);
        struct line_span span = {UINT64_MAX, 0};
        if (read_line_header(&r, &h) && !line_program_find(&h, UINT64_MAX, NULL, &span) &&
            span.lo < span.hi)
            x->u[x->n++] = (struct line_unit){span.lo, span.hi, offset};
    }
}

/* File name and line of vaddr from .debug_line: 1, or 0 if no program covers it. The
 * programs that may are found in x, built on first use. */
static int line_of(const struct debug_sections *d, struct line_index *x, uint64_t vaddr,
                   const char **file, uint64_t *line)
{
    if (!x->built)
        line_index_build(x, d);
    struct reader r = {d->line, d->line + d->line_size, 0};
    for (size_t i = 0; x->u ? i < x->n : r.p < r.end && !r.failed; i++) {
        struct line_header h;
        struct line_row row;
        if (x->u && (vaddr < x->u[i].lo || vaddr >= x->u[i].hi))
            continue;
        if (x->u)
            r.p = d->line + x->u[i].offset;
#ifdef USLAB_ASSERTS
        __atomic_fetch_add(&usi_symbols_line_programs, 1, __ATOMIC_RELAXED);
#endif
        if (!read_line_header(&r, &h) || !line_program_find(&h, vaddr, &row, NULL))
            continue;
        *file = line_file_name(&h, d, row.file);
        *line = row.line;
        return *file != NULL;
    }
    return 0;
}

/* ---- a frame as text ------------------------------------------------------------------- */

/* Describes vaddr of object e into t, with the symbols and lines of its debug file dbg
 * where e lacks them (NULL: none). Its functions are looked up in index, sorted on first use,
 * its lines through lines, built on first use. */
static void describe_vaddr(struct text *t, const struct elf_image *e, const struct elf_image *dbg,
                           uint64_t vaddr, const char *object, struct fn_index *index,
                           struct line_index *lines)
{
    uint64_t offset = 0;
    if (!index->built)
        fn_index_build(index, dbg && find_section(dbg, ".symtab") ? dbg : e, e);
    const char *function = index->e ? fn_index_find(index, vaddr, &offset) : NULL;
    /* A .symtab's versioned name, "__libc_start_main@@GLIBC_2.34", without its version. */
    size_t name_len = function ? strcspn(function, "@") : 0;
    const struct elf_image *l = dbg && !has_lines(e) ? dbg : e; /* where the lines are */
    struct debug_sections d = {0};
    const elf_section_header *sh;
    const char *file = NULL;
    uint64_t line = 0;
    if ((sh = find_section(l, ".debug_line_str")))
        section_bytes(l, sh, &d.line_str, &d.line_str_size);
    if ((sh = find_section(l, ".debug_str")))
        section_bytes(l, sh, &d.str, &d.str_size);
    if (function && (sh = find_section(l, ".debug_line")) &&
        section_bytes(l, sh, &d.line, &d.line_size) && line_of(&d, lines, vaddr, &file, &line)) {
        text_add(t, function, name_len);
        text_str(t, " (");
        text_str(t, base_name(file));
        text_str(t, ":");
        text_dec(t, line);
        text_str(t, ")");
    } else if (function) {
        text_add(t, function, name_len);
        text_str(t, "+");
        text_hex(t, offset);
        text_str(t, " (");
        text_str(t, object);
        text_str(t, ")");
    } else {
        text_str(t, object);
        text_str(t, "+");
        text_hex(t, vaddr);
    }
}

/* ---- the cache ------------------------------------------------------------------------- */

#define CACHE_FILES  8   /* the objects' files kept mapped, with their sorted functions */
#define KEPT_OBJECTS 512 /* loaded objects kept (usi_symbols_keep_objects) */

/* A loaded object's file, mapped. Invariant: object is the key (NULL: a free slot); image
 * is NULL where the file could not be read or is not the one loaded (not tried again). */
struct cached_file {
    const void *object; /* the object's start in memory (dlfo_map_start) */
    const void *image;
    struct usi_os_file file;
    const void *debug_image; /* its separate debug file (find_debug_file), or NULL */
    struct usi_os_file debug_file;
    int debug_sought;
    struct fn_index functions;
    struct line_index lines;
};

/* What a lookup reads, kept: the objects' files mapped with their functions sorted. Each call
 * makes one for itself, unless its thread opened one with usi_symbols_begin, which then serves
 * every call until usi_symbols_end: a report of thousands of frames opens each file once, not
 * once a frame. Invariant: `busy` while a call uses it, so that a signal handler's report in
 * the middle of one makes its own; slots are reused in turn (`next_file`). */
struct usi_symbols_cache {
    struct usi_symbols_cache *outer; /* the thread's cache before this one */
    int seccomp, busy;
    size_t next_file, nkept;
    struct cached_file files[CACHE_FILES];
    struct dl_find_object kept[KEPT_OBJECTS];
    char program[PATH_BYTES]; /* the program's path ("" until asked: program_path) */
    char debug_path[PATH_BYTES];
};

static __thread struct usi_symbols_cache *tls_cache __attribute__((tls_model("initial-exec")));

#ifdef USLAB_ASSERTS
unsigned long usi_symbols_files_mapped; /* test builds: files mapped to describe a pc */
#endif

static struct usi_symbols_cache *cache_new(void)
{
    struct usi_symbols_cache *c = usi_os_map(sizeof *c);
    if (c)
        c->seccomp = usi_os_seccomp_mode();
    return c;
}

static void file_free(struct cached_file *f)
{
    if (f->functions.e)
        usi_os_unmap(f->functions.e, f->functions.bytes);
    if (f->lines.u)
        usi_os_unmap(f->lines.u, f->lines.bytes);
    if (f->image)
        usi_os_unmap_file(f->image, f->file.size);
    if (f->debug_image)
        usi_os_unmap_file(f->debug_image, f->debug_file.size);
}

static void cache_free(struct usi_symbols_cache *c)
{
    for (size_t i = 0; i < CACHE_FILES; i++)
        file_free(&c->files[i]);
    usi_os_unmap(c, sizeof *c);
}

struct usi_symbols_cache *usi_symbols_begin(void)
{
    int saved_errno = errno;
    struct usi_symbols_cache *c = cache_new();
    if (c) {
        c->outer = tls_cache;
        tls_cache = c;
    }
    errno = saved_errno;
    return c;
}

void usi_symbols_end(struct usi_symbols_cache *c)
{
    if (!c)
        return;
    int saved_errno = errno;
    tls_cache = c->outer;
    cache_free(c);
    errno = saved_errno;
}

/* The thread's cache, marked busy, or one of the call's own (*own; NULL: no memory). */
static struct usi_symbols_cache *cache_take(struct usi_symbols_cache **own)
{
    struct usi_symbols_cache *c = tls_cache;
    *own = NULL;
    if (!c || c->busy)
        return *own = cache_new();
    c->busy = 1;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    return c;
}

static void cache_give(struct usi_symbols_cache *c, struct usi_symbols_cache *own)
{
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (own)
        cache_free(own);
    else if (c)
        c->busy = 0;
}

/* The program's file: the target of /proc/self/exe, else the name it was executed by; NULL
 * if neither is known. */
static const char *program_path(struct usi_symbols_cache *c)
{
    if (!c->program[0] && !usi_os_readlink("/proc/self/exe", c->program, sizeof c->program)) {
        const char *execfn = (const char *)getauxval(AT_EXECFN);
        struct text t = {c->program, sizeof c->program, 0};
        text_str(&t, execfn ? execfn : "");
    }
    return c->program[0] ? c->program : NULL;
}

/* The loaded object obj's program headers in memory and their number (*n), or NULL: the
 * program's where the kernel put them (AT_PHDR: the dynamic linker's table may cover only
 * part of a static-pie program), a library's after the ELF header its mapping starts with. */
static const elf_program_header *loaded_headers(const struct dl_find_object *obj, size_t *n)
{
    const char *name = obj->dlfo_link_map->l_name;
    if (!name || !name[0]) {
        *n = getauxval(AT_PHNUM);
        return getauxval(AT_PHENT) == sizeof(elf_program_header) ? (const void *)getauxval(AT_PHDR)
                                                                 : NULL;
    }
    const unsigned char *start = obj->dlfo_map_start;
    size_t size = (size_t)((const unsigned char *)obj->dlfo_map_end - start);
    const elf_header *h = obj->dlfo_map_start;
    if (size < sizeof *h || memcmp(h->e_ident, ELFMAG, SELFMAG) != 0 ||
        h->e_phentsize != sizeof(elf_program_header) || h->e_phoff > size ||
        (uint64_t)h->e_phnum * sizeof(elf_program_header) > size - h->e_phoff ||
        h->e_phoff % _Alignof(elf_program_header) != 0)
        return NULL;
    *n = h->e_phnum;
    return (const void *)(start + h->e_phoff);
}

/* Whether the file e is the loaded object obj: the same build id, or, where the object has
 * none, the same program headers (a program rebuilt since it started is not read). A note
 * is read in memory only inside a loadable segment's file bytes, which are mapped. */
static int is_loaded(const struct elf_image *e, const struct dl_find_object *obj)
{
    size_t n = 0, id_len = 0;
    const elf_program_header *ph = loaded_headers(obj, &n);
    const unsigned char *id = NULL, *file_id;
    for (size_t i = 0; ph && i < n && !id_len; i++)
        for (size_t k = 0; ph[i].p_type == PT_NOTE && k < n && !id_len; k++)
            if (ph[k].p_type == PT_LOAD && ph[i].p_vaddr >= ph[k].p_vaddr &&
                ph[i].p_vaddr - ph[k].p_vaddr <= ph[k].p_filesz &&
                ph[i].p_memsz <= ph[k].p_filesz - (ph[i].p_vaddr - ph[k].p_vaddr))
                id_len = notes_build_id((const void *)(obj->dlfo_link_map->l_addr + ph[i].p_vaddr),
                                        ph[i].p_memsz, &id);
    if (id_len)
        return build_id(e, &file_id) == id_len && memcmp(file_id, id, id_len) == 0;
    return ph && e->header->e_phnum == n &&
           memcmp(e->base + e->header->e_phoff, ph, n * sizeof *ph) == 0;
}

/* The file of the loaded object obj (path; NULL: the program), kept mapped in the cache;
 * NULL if it cannot be read or is not the one loaded. The program's is /proc/self/exe, the
 * very file the kernel mapped, else its path. */
static struct cached_file *map_object(struct usi_symbols_cache *c, const struct dl_find_object *obj,
                                      const char *path)
{
    for (size_t i = 0; i < CACHE_FILES; i++)
        if (c->files[i].object == obj->dlfo_map_start)
            return c->files[i].image ? &c->files[i] : NULL;
    struct cached_file *cf = &c->files[c->next_file++ % CACHE_FILES];
    file_free(cf);
    *cf = (struct cached_file){.object = obj->dlfo_map_start};
    const char *names[2] = {path ? path : "/proc/self/exe", path ? NULL : program_path(c)};
    for (int k = 0; k < 2 && names[k] && !cf->image; k++) {
        struct usi_os_file f;
        struct elf_image e;
        int fd = usi_os_open_ro(names[k]);
        const void *image = fd >= 0 ? usi_os_map_file(fd, &f) : NULL;
        usi_os_close(fd);
        if (!image)
            continue;
#ifdef USLAB_ASSERTS
        __atomic_fetch_add(&usi_symbols_files_mapped, 1, __ATOMIC_RELAXED);
#endif
        if (elf_open(&e, image, f.size) && is_loaded(&e, obj)) {
            cf->image = image;
            cf->file = f;
        } else {
            usi_os_unmap_file(image, f.size);
        }
    }
    return cf->image ? cf : NULL;
}

/* Maps the debug file at c->debug_path into f if it is object e's: the same build id (id_len
 * bytes at id), another file. 1 if it is. */
static int try_debug_file(struct usi_symbols_cache *c, struct cached_file *f,
                          const unsigned char *id, size_t id_len)
{
    struct usi_os_file df;
    struct elf_image d;
    const unsigned char *did;
    int fd = usi_os_open_ro(c->debug_path);
    const void *image = fd >= 0 ? usi_os_map_file(fd, &df) : NULL;
    usi_os_close(fd);
    if (!image)
        return 0;
    if ((df.inode == f->file.inode && df.device_major == f->file.device_major &&
         df.device_minor == f->file.device_minor) ||
        !elf_open(&d, image, df.size) || build_id(&d, &did) != id_len ||
        memcmp(did, id, id_len) != 0) {
        usi_os_unmap_file(image, df.size);
        return 0;
    }
    f->debug_image = image;
    f->debug_file = df;
    return 1;
}

/* The separate debug file of object e (at path; NULL: not known), looked for once, where e lacks a
 * symbol table or line information (a stripped program or library), as gdb looks:
 * DEBUG_ROOT/.build-id/xx/ rest.debug (xx/rest: e's build id in hex), else the file its
 * .gnu_debuglink names, beside it, in .debug/ beside it, or under DEBUG_ROOT with its directory. A
 * file is taken only with e's build id, so one from another build of e is never read. */
#define DEBUG_ROOT "/usr/lib/debug"
static void find_debug_file(struct usi_symbols_cache *c, struct cached_file *f,
                            const struct elf_image *e, const char *path)
{
    const unsigned char *id, *link;
    size_t id_len = build_id(e, &id), link_size;
    f->debug_sought = 1;
    if (id_len == 0 || (find_section(e, ".symtab") && has_lines(e)))
        return;
    struct text t = {c->debug_path, sizeof c->debug_path, 0};
    text_str(&t, DEBUG_ROOT "/.build-id/");
    for (size_t i = 0; i < id_len; i++) {
        char hex[3] = {"0123456789abcdef"[id[i] >> 4], "0123456789abcdef"[id[i] & 15], '/'};
        text_add(&t, hex, i == 0 ? 3 : 2);
    }
    text_str(&t, ".debug");
    if (try_debug_file(c, f, id, id_len))
        return;
    const elf_section_header *sh = find_section(e, ".gnu_debuglink");
    if (!path || !sh || !section_bytes(e, sh, &link, &link_size) || !memchr(link, '\0', link_size))
        return;
    size_t dir = (size_t)(base_name(path) - path); /* with its last '/' */
    for (int where = 0; where < 3; where++) {
        t.used = 0;
        text_str(&t, where == 2 ? DEBUG_ROOT : "");
        text_add(&t, path, dir);
        text_str(&t, where == 1 ? ".debug/" : "");
        text_str(&t, (const char *)link);
        if (try_debug_file(c, f, id, id_len))
            return;
    }
}

void usi_symbols_keep_objects(struct usi_symbols_cache *c)
{
    for (const struct link_map *m = _r_debug.r_map; c && m && c->nkept < KEPT_OBJECTS;
         m = m->l_next)
        if (m->l_ld && _dl_find_object((void *)m->l_ld, &c->kept[c->nkept]) == 0)
            c->nkept++;
}

/* The loaded object that holds pc, from the dynamic linker's table (memory only, no lock),
 * else from those c kept: 1 and *obj, or 0. */
static int find_object(const struct usi_symbols_cache *c, const void *pc,
                       struct dl_find_object *obj)
{
    if (_dl_find_object((void *)pc, obj) == 0)
        return 1;
    for (size_t i = 0; c && i < c->nkept; i++)
        if (pc >= c->kept[i].dlfo_map_start && pc < c->kept[i].dlfo_map_end) {
            *obj = c->kept[i];
            return 1;
        }
    return 0;
}

void usi_symbols_describe(const void *pc, char *buf, size_t len)
{
    if (len == 0)
        return;
    int saved_errno = errno;
    struct text t = {buf, len, 0};
    struct dl_find_object obj;
    buf[0] = '\0';
    struct usi_symbols_cache *own, *c = cache_take(&own);
    if (!find_object(c, pc, &obj)) { /* code outside every object (generated code) */
        text_hex(&t, (uintptr_t)pc);
        cache_give(c, own);
        errno = saved_errno;
        return;
    }
    const char *path = obj.dlfo_link_map->l_name; /* "" for the program */
    path = path && path[0] ? path : NULL;
    uint64_t vaddr = (uintptr_t)pc - obj.dlfo_link_map->l_addr; /* in the file's own terms */
    /* Under a seccomp filter no file is opened (the filter may kill for openat). */
    struct cached_file *f = c && c->seccomp == 0 ? map_object(c, &obj, path) : NULL;
    const char *object = path ? path : c && c->seccomp == 0 ? program_path(c) : NULL;
    object = object ? base_name(object) : "program";
    struct elf_image e, dbg;
    if (f && elf_open(&e, f->image, f->file.size)) {
        if (!f->debug_sought)
            find_debug_file(c, f, &e, path ? path : program_path(c));
        int has_dbg = f->debug_image && elf_open(&dbg, f->debug_image, f->debug_file.size);
        describe_vaddr(&t, &e, has_dbg ? &dbg : NULL, vaddr, object, &f->functions, &f->lines);
    } else { /* "object+0xaddress": the address in the object, as addr2line takes it */
        text_str(&t, object);
        text_str(&t, "+");
        text_hex(&t, vaddr);
    }
    cache_give(c, own);
    errno = saved_errno;
}

void usi_symbols_describe_image(const void *image, size_t size, const void *debug,
                                size_t debug_size, uint64_t vaddr, char *buf, size_t len)
{
    struct text t = {buf, len, 0};
    struct fn_index functions = {0};
    struct line_index lines = {0};
    struct elf_image e, dbg;
    const unsigned char *id;
    buf[0] = '\0';
    if (len && elf_open(&e, image, size)) {
        (void)build_id(&e, &id); /* the notes a debug file is matched by */
        int has_dbg = debug && elf_open(&dbg, debug, debug_size);
        describe_vaddr(&t, &e, has_dbg ? &dbg : NULL, vaddr, "object", &functions, &lines);
    }
    if (functions.e)
        usi_os_unmap(functions.e, functions.bytes);
    if (lines.u)
        usi_os_unmap(lines.u, lines.bytes);
}
