#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Self-test of tools/check_layers.py: proves it passes clean layering and fails the rest.

Usage: selftest.py --cc CC [--ar AR] [--nm NM] CHECKER FIXTURES WORKDIR

Compiles the C snippets of FIXTURES/src (rank table in FIXTURES/design.md) into WORKDIR,
one folder per case, runs CHECKER on them and compares its exit status and its whole
output with what each case must give. The sources include their headers (base.h, mid.h
for both files of rank 2, top.h), downward and within a rank, so every case also checks
the includes of FIXTURES/src; the include cases check a copy of FIXTURES with a line added.

  clean          loose objects, ranks 1 < 2 = 2 < 3, downward and same-rank uses and
                 includes: exit 0
  clean_archive  the same objects in a static archive, members named base.o etc.: exit 0
  units          that archive plus a loose top.o defining getenv, which the archive's
                 base.o calls: exit 0 (each link unit resolves its own symbols)
  upward         base.c (rank 1) calls mid_b.c (rank 2): exit 1, the edge and its symbol
  cycle          mid_a.c and mid_b.c (both rank 2) call each other: exit 1, the cycle
  unlisted       an archive member whose source is not in the table: exit 1, the member
  upward_include base.c (rank 1) includes top.h (rank 3) and base.h includes mid.h
                 (rank 2): exit 1, both includes
  unlisted_header  mid_a.c includes extra.h, and lost.h lies in src/, neither in the
                 table: exit 1, both headers
  no_table       a design.md without a rank table: exit 2
"""

import argparse
import os
import shlex
import shutil
import subprocess
import sys

CLEAN = ["base", "mid_a", "mid_b", "top"]


def main():
    ap = argparse.ArgumentParser(prog="selftest.py")
    ap.add_argument("--cc", required=True)
    ap.add_argument("--ar", default="ar")
    ap.add_argument("--nm", default="nm")
    ap.add_argument("checker")
    ap.add_argument("fixtures")
    ap.add_argument("workdir")
    args = ap.parse_args()

    design = os.path.join(args.fixtures, "design.md")
    srcdir = os.path.join(args.fixtures, "src")
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)

    def run(cmd):
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return p.returncode, p.stdout

    def compile_(case, names, defines=(), suffix=".c.o"):
        outdir = os.path.join(args.workdir, case)
        os.makedirs(outdir, exist_ok=True)
        objs = []
        for name in names:
            obj = os.path.join(outdir, name + suffix)
            cmd = shlex.split(args.cc) + ["-O2", "-c", os.path.join(srcdir, name + ".c"),
                                          "-o", obj] + [f"-D{d}" for d in defines]
            rc, out = run(cmd)
            if rc != 0:
                sys.exit(f"layers selftest: cannot compile: {shlex.join(cmd)}\n{out}")
            objs.append(obj)
        return objs

    def archive(case, objs):
        lib = os.path.join(args.workdir, case, "libfixture.a")
        cmd = shlex.split(args.ar) + ["rc", lib] + objs
        rc, out = run(cmd)
        if rc != 0:
            sys.exit(f"layers selftest: cannot archive: {shlex.join(cmd)}\n{out}")
        return lib

    def check(case, what, inputs, want_rc, want_lines, design_path=design, opts=()):
        cmd = [sys.executable, args.checker, "--nm", args.nm, *opts, design_path] + inputs
        rc, out = run(cmd)
        got = out.splitlines()
        if rc == want_rc and got == want_lines:
            print(f"layers selftest: {case} ({what}): ok, exit {rc}")
            for line in got:
                print(f"    {line}")
            return True
        print(f"layers selftest: {case} ({what}): FAILED")
        print(f"  command:  {shlex.join(cmd)}")
        print(f"  exit:     {rc}, wanted {want_rc}")
        print("  output:")
        for line in got:
            print(f"    {line}")
        print("  wanted:")
        for line in want_lines:
            print(f"    {line}")
        return False

    ok = True

    def tree(case, edits):
        """A copy of FIXTURES (design.md and src/) in WORKDIR/case/tree with each of edits,
        (file, line), as the file's first line (a new file if there is none); its design.md."""
        root = os.path.join(args.workdir, case, "tree")
        shutil.copytree(srcdir, os.path.join(root, "src"))
        shutil.copy(design, os.path.join(root, "design.md"))
        for name, line in edits:
            path = os.path.join(root, "src", name)
            text = ""
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    text = f.read()
            with open(path, "w", encoding="utf-8") as f:
                f.write(line + "\n" + text)
        return os.path.join(root, "design.md")

    # The fixture's includes: 7 sources and headers, 8 includes, all downward or within a rank.
    clean_includes = "layers: 7 sources and headers, 8 includes, no upward include"

    # (d) clean layering, loose objects and as an archive (members base.o, no .c in the name).
    # The edges name the symbols: functions, weak ones, data, read-only data, TLS.
    clean = compile_("clean", CLEAN)
    ok &= check("clean", "clean layering, loose objects", clean, 0, [
        "layers: edge src/mid_a.c -> src/base.c: base_get, base_table, base_tls",
        "layers: edge src/mid_a.c -> src/mid_b.c: mid_b_helper",
        "layers: edge src/top.c -> src/base.c: base_count, base_weak, base_weak_var",
        "layers: edge src/top.c -> src/mid_a.c: mid_a_run",
        "layers: include src/base.c -> src/base.h",
        "layers: include src/mid.h -> src/base.h",
        "layers: include src/mid_a.c -> src/base.h, src/mid.h",
        "layers: include src/mid_b.c -> src/mid.h",
        "layers: include src/top.c -> src/base.h, src/mid.h, src/top.h",
        "layers: 4 files, 4 edges, no upward call, no cycle",
        clean_includes,
    ], opts=["--edges"])
    objs = compile_("clean_archive", CLEAN, suffix=".o")
    ok &= check("clean_archive", "clean layering, static archive", [archive("clean_archive", objs)],
                0, ["layers: 4 files, 4 edges, no upward call, no cycle", clean_includes])

    # Link units: base.c in the archive calls getenv, which the loose top.o also defines;
    # as the static library's malloc.c and the preload library's malloc, that is no edge.
    lib = archive("units", compile_("units", CLEAN))
    loose = compile_("units_loose", ["top"], defines=["LAYERS_OVERRIDE"])
    ok &= check("units", "each input resolves its own symbols", [lib] + loose, 0,
                ["layers: 4 files, 4 edges, no upward call, no cycle", clean_includes])

    # (a) an upward call
    objs = compile_("upward", CLEAN, defines=["LAYERS_UPWARD"])
    ok &= check("upward", "base.c calls up into mid_b.c", objs, 1, [
        "layers: src/base.c (rank 1, base) -> src/mid_b.c (rank 2, middle): mid_b_helper",
        "layers: FAILED: 1 upward use, 0 cycles, 0 unlisted files, 0 upward includes "
        "(4 files, 5 edges, 8 includes)",
    ])

    # (b) a cycle between two files of the same rank
    objs = compile_("cycle", CLEAN, defines=["LAYERS_CYCLE"])
    ok &= check("cycle", "mid_a.c <-> mid_b.c, same rank", objs, 1, [
        "layers: cycle among 2 files: src/mid_a.c, src/mid_b.c",
        "layers:   for example src/mid_a.c -> src/mid_b.c (mid_b_helper) -> src/mid_a.c (mid_a_run)",
        "layers: FAILED: 0 upward uses, 1 cycle, 0 unlisted files, 0 upward includes "
        "(4 files, 5 edges, 8 includes)",
    ])

    # (c) an object file whose source is not in the table (as an archive member)
    lib = archive("unlisted", compile_("unlisted", CLEAN + ["stray"]))
    ok &= check("unlisted", "stray.c is not in the table", [lib], 1, [
        f"layers: {lib}[stray.c.o]: its source stray.c is not in the rank table of {design}",
        "layers: FAILED: 0 upward uses, 0 cycles, 1 unlisted file, 0 upward includes "
        "(5 files, 5 edges, 8 includes)",
    ])

    # (d) upward includes, of a source and of a header (the objects are the clean ones)
    copy = tree("upward_include", [("base.c", '#include "top.h"'), ("base.h", '#include "mid.h"')])
    ok &= check("upward_include", "base.c includes top.h, base.h includes mid.h", clean, 1, [
        "layers: src/base.c (rank 1, base) includes src/top.h (rank 3, top) (line 1)",
        "layers: src/base.h (rank 1, base) includes src/mid.h (rank 2, middle) (line 1)",
        "layers: FAILED: 0 upward uses, 0 cycles, 0 unlisted files, 2 upward includes "
        "(4 files, 4 edges, 10 includes)",
    ], design_path=copy)

    # (e) headers not in the table: one included, one only lying in src/
    copy = tree("unlisted_header", [("mid_a.c", '#include "extra.h"'), ("extra.h", "/* */"),
                                    ("lost.h", "/* */")])
    ok &= check("unlisted_header", "extra.h and lost.h are not in the table", clean, 1, [
        f"layers: src/extra.h: not in the rank table of {copy} (included by src/mid_a.c)",
        f"layers: src/lost.h: not in the rank table of {copy}",
        "layers: FAILED: 0 upward uses, 0 cycles, 2 unlisted files, 0 upward includes "
        "(4 files, 4 edges, 9 includes)",
    ], design_path=copy)

    # a design.md without a rank table is an error of its own (exit 2), not a pass
    bad = os.path.join(args.workdir, "no_table.md")
    with open(bad, "w", encoding="utf-8") as f:
        f.write("# Layers\n\n| layer | file |\n| --- | --- |\n| os | `src/base.c` |\n")
    ok &= check("no_table", "design.md without a rank table", objs[:1], 2, [
        f"layers: {bad}: no rank table (a markdown table whose header row starts with '| rank |')",
    ], design_path=bad)

    print("layers selftest: " + ("all cases passed" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
