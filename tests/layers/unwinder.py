#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The shared libraries carry libgcc's unwinder privately (docs/design.md §9): neither
needs libgcc_s.so, and neither exports an _Unwind_ symbol (exported, the copy could
interpose the unwinder other objects of the process use for C++ exceptions). The debug
stacks that use it are checked by the leak-report tests. Both also bind every import at
load (BIND_NOW, with RELRO: a read-only GOT; design §7, security.md §4)."""
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
        syms = subprocess.run([nm, "-D", "--defined-only", lib], capture_output=True, text=True,
                              check=True).stdout.split()
        leaked = sorted({s for s in syms if s.startswith("_Unwind_") or s.startswith("__gcc_")})
        if leaked:
            bad.append("%s exports %s" % (lib, ", ".join(leaked)))
        undef = subprocess.run([nm, "-D", "--undefined-only", lib], capture_output=True,
                               text=True, check=True).stdout
        if "_Unwind_Backtrace" in undef:
            bad.append("%s takes _Unwind_Backtrace from another object" % lib)
        print("%s: needs %s" % (lib, ", ".join(needed)))
    for b in bad:
        print("FAIL: " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
