#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The shared libraries read debug stacks with uslab's own unwinder (docs/design.md §9):
neither needs libgcc_s.so nor holds a copy of libgcc's unwinder (no _Unwind_ symbol, not
even a local one: a copy exported could interpose the unwinder other objects of the
process use for C++ exceptions). unit_unwind checks the stacks. Both also bind every
import at load (BIND_NOW, with RELRO: a read-only GOT; design §7, security.md §4)."""
import subprocess
import sys


def main():
    readelf, nm, libs = sys.argv[1], sys.argv[2], sys.argv[3:]
    bad = []
    for lib in libs:
        dyn = subprocess.run([readelf, "-d", lib], capture_output=True, text=True, check=True).stdout
        needed = [l.split("[")[1].rstrip("]") for l in dyn.splitlines() if "(NEEDED)" in l]
        if "BIND_NOW" not in dyn or "GNU_RELRO" not in subprocess.run(
                [readelf, "-l", lib], capture_output=True, text=True, check=True).stdout:
            bad.append("%s does not bind its imports at load with RELRO" % lib)
        if any(n.startswith("libgcc_s") for n in needed):
            bad.append("%s needs libgcc_s (%s)" % (lib, ", ".join(needed)))
        # Every symbol, the local ones of .symtab too, and the dynamic ones.
        syms = set()
        for args in ([nm], [nm, "-D"]):
            out = subprocess.run(args + [lib], capture_output=True, text=True, check=True).stdout
            syms.update(l.split()[-1] for l in out.splitlines() if l.strip())
        unwinder = sorted(s for s in syms if s.startswith("_Unwind_") or s.startswith("__gcc_"))
        if unwinder:
            bad.append("%s holds or takes libgcc's unwinder: %s" % (lib, ", ".join(unwinder)))
        print("%s: needs %s" % (lib, ", ".join(needed)))
    for b in bad:
        print("FAIL: " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
