/* SPDX-License-Identifier: MIT */
/*
 * fuzz_symbols.c - a libFuzzer target: the symbols layer's readers of ELF and DWARF (symbol
 * tables, .debug_line's programs and file tables, build-id notes, the line index), which a
 * report runs on whatever file a frame's object is, fed files of any content (docs/design.md
 * §9: "every read bounds-checked"). A crash, a read out of bounds (ASan) or undefined
 * behaviour (UBSan) is a finding; so is a description that is not a terminated string.
 *
 * Input: 8 bytes of address (little-endian, in the file's own terms), 1 byte of mode (bit 0:
 * the file is also given as its own separate debug file), then the file. The seed is a build
 * of tests/death/symbols_program.c with DWARF 5, prefixed with the address of one of its
 * functions (`make fuzz` writes it).
 */
#include "symbols.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 9)
        return 0;
    uint64_t vaddr;
    memcpy(&vaddr, data, sizeof vaddr);
    /* The file in memory of its own, as a mapped file is: the fuzzer's buffer may be
     * unaligned, and the reader relies on the alignment an ELF file has in a mapping. */
    size_t n = size - 9;
    void *file = aligned_alloc(64, (n + 64) & ~(size_t)63);
    if (!file)
        return 0;
    memcpy(file, data + 9, n);
    char text[512];
    memset(text, 'x', sizeof text);
    usi_symbols_describe_image(file, n, (data[8] & 1) ? file : NULL, n, vaddr, text, sizeof text);
    if (!memchr(text, '\0', sizeof text))
        abort();
    free(file);
    return 0;
}
