/* SPDX-License-Identifier: MIT */
/*
 * symbols.h - the symbols layer (rank 7, symbols.c; docs/design.md §1): code addresses as
 * function, file and line (design §9), for reports only.
 */
#ifndef USLAB_SYMBOLS_H
#define USLAB_SYMBOLS_H

#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

/* Writes what pc is into buf (len bytes, always terminated, cut short if need be):
 * "function (file.c:line)" with DWARF line information, "function+0xoff (object)" with a
 * symbol table (.symtab, else .dynsym), "object+0xoff" (the address in the object's file)
 * without, or the bare address when no loaded object holds it. Finds the object in the
 * dynamic linker's table and reads its file; never allocates (one anonymous mapping of
 * scratch), takes no lock and leaves errno alone: safe in a signal handler and under uslab's
 * locks. For reports only: it costs system calls and a scan of the object's tables (fewer
 * inside a cache, below). */
void usi_symbols_describe(const void *pc, char *buf, size_t len);
/* A cache of what usi_symbols_describe reads (the files mapped, their functions
 * sorted), for the calling thread's calls until usi_symbols_end: for
 * a report that names many frames (each call without one makes its own). Nests (a signal
 * handler's report opens its own); NULL if no memory. Never allocates but by anonymous
 * mappings, takes no lock. */
struct usi_symbols_cache;
struct usi_symbols_cache *usi_symbols_begin(void);
void usi_symbols_end(struct usi_symbols_cache *cache); /* NULL: nothing */
/* Keeps in cache where every loaded object lies, for lookups after __libc_freeres, which
 * empties the dynamic linker's table of the objects dlopen loaded (the leak report at exit,
 * through usi_os_runtime_freeres). Reads the dynamic linker's list without its lock: only
 * where no other thread runs. */
void usi_symbols_keep_objects(struct usi_symbols_cache *cache);
/* What usi_symbols_describe writes for address vaddr (in the file's own terms) of the ELF
 * file image[0 .. size), with debug[0 .. debug_size) as its separate debug file (NULL: none),
 * the object named "object": for the fuzzer (tests/fuzz/fuzz_symbols.c), which feeds it
 * files of any content. */
void usi_symbols_describe_image(const void *image, size_t size, const void *debug,
                                size_t debug_size, uint64_t vaddr, char *buf, size_t len);
#ifdef USLAB_ASSERTS
extern unsigned long usi_symbols_files_mapped;  /* test builds: files mapped so far */
extern unsigned long usi_symbols_line_programs; /* test builds: line programs run so far */
extern int usi_symbols_no_line_index; /* test builds: 1, every lookup runs every program */
#endif

#pragma GCC visibility pop

#endif
