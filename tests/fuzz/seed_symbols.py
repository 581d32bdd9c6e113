#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Seeds for tests/fuzz/fuzz_symbols: PROGRAM (an ELF file with a symbol table and DWARF) as
the target's input, once for each of a few of its functions' addresses and each mode (the
file alone, and the file as its own debug file).

Usage: seed_symbols.py PROGRAM OUTDIR
"""
import os
import struct
import subprocess
import sys

program, out = sys.argv[1:3]
with open(program, "rb") as f:
    image = f.read()
wanted = ("leak_static_block", "double_free_static", "main")
found = {}
for line in subprocess.run(["nm", program], capture_output=True, text=True, check=True).stdout.split("\n"):
    parts = line.split()
    if len(parts) == 3 and parts[2] in wanted:
        found[parts[2]] = int(parts[0], 16)
if len(found) != len(wanted):
    sys.exit("seed_symbols.py: %s lacks %s" % (program, set(wanted) - set(found)))
for name, address in found.items():
    for mode in (0, 1):
        with open(os.path.join(out, "%s_%d" % (name, mode)), "wb") as f:
            f.write(struct.pack("<QB", address + 4, mode) + image)
print("seed_symbols.py: %d seeds of %d bytes in %s" % (2 * len(found), len(image) + 9, out))
