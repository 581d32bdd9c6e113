#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Self-test of tools/check_layers.py: proves it passes clean layering and fails the rest.

Usage: selftest.py --cc CC [--ar AR] [--nm NM] CHECKER FIXTURES WORKDIR

Compiles the C snippets of FIXTURES/src (rank table in FIXTURES/design.md) into WORKDIR,
one folder per case, runs CHECKER on them and compares its exit status and its whole
output with what each case must give:

  clean          loose objects, ranks 1 < 2 = 2 < 3, downward and same-rank uses: exit 0
  clean_archive  the same objects in a static archive, members named base.o etc.: exit 0
  units          that archive plus a loose top.o defining getenv, which the archive's
                 base.o calls: exit 0 (each link unit resolves its own symbols)
  upward         base.c (rank 1) calls mid_b.c (rank 2): exit 1, the edge and its symbol
  cycle          mid_a.c and mid_b.c (both rank 2) call each other: exit 1, the cycle
  unlisted       an archive member whose source is not in the table: exit 1, the member
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

    # (d) clean layering, loose objects and as an archive (members base.o, no .c in the name).
    # The edges name the symbols: functions, weak ones, data, read-only data, TLS.
    objs = compile_("clean", CLEAN)
    ok &= check("clean", "clean layering, loose objects", objs, 0, [
        "layers: edge src/mid_a.c -> src/base.c: base_get, base_table, base_tls",
        "layers: edge src/mid_a.c -> src/mid_b.c: mid_b_helper",
        "layers: edge src/top.c -> src/base.c: base_count, base_weak, base_weak_var",
        "layers: edge src/top.c -> src/mid_a.c: mid_a_run",
        "layers: 4 files, 4 edges, no upward call, no cycle",
    ], opts=["--edges"])
    objs = compile_("clean_archive", CLEAN, suffix=".o")
    ok &= check("clean_archive", "clean layering, static archive", [archive("clean_archive", objs)],
                0, ["layers: 4 files, 4 edges, no upward call, no cycle"])

    # Link units: base.c in the archive calls getenv, which the loose top.o also defines;
    # as the static library's malloc.c and the preload library's malloc, that is no edge.
    lib = archive("units", compile_("units", CLEAN))
    loose = compile_("units_loose", ["top"], defines=["LAYERS_OVERRIDE"])
    ok &= check("units", "each input resolves its own symbols", [lib] + loose, 0,
                ["layers: 4 files, 4 edges, no upward call, no cycle"])

    # (a) an upward call
    objs = compile_("upward", CLEAN, defines=["LAYERS_UPWARD"])
    ok &= check("upward", "base.c calls up into mid_b.c", objs, 1, [
        "layers: src/base.c (rank 1, base) -> src/mid_b.c (rank 2, middle): mid_b_helper",
        "layers: FAILED: 1 upward use, 0 cycles, 0 unlisted files (4 files, 5 edges)",
    ])

    # (b) a cycle between two files of the same rank
    objs = compile_("cycle", CLEAN, defines=["LAYERS_CYCLE"])
    ok &= check("cycle", "mid_a.c <-> mid_b.c, same rank", objs, 1, [
        "layers: cycle among 2 files: src/mid_a.c, src/mid_b.c",
        "layers:   for example src/mid_a.c -> src/mid_b.c (mid_b_helper) -> src/mid_a.c (mid_a_run)",
        "layers: FAILED: 0 upward uses, 1 cycle, 0 unlisted files (4 files, 5 edges)",
    ])

    # (c) an object file whose source is not in the table (as an archive member)
    lib = archive("unlisted", compile_("unlisted", CLEAN + ["stray"]))
    ok &= check("unlisted", "stray.c is not in the table", [lib], 1, [
        f"layers: {lib}[stray.c.o]: its source stray.c is not in the rank table of {design}",
        "layers: FAILED: 0 upward uses, 0 cycles, 1 unlisted file (5 files, 5 edges)",
    ])

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
