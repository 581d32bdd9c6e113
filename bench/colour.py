#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Slab colouring on and off (issue 13): colour_bench for several object sizes and slab
counts, with colouring (the default) and with USLAB_CACHE_NOCOLOUR, alternating run by
run; the median ns per touch of each, their ratio and spreads. (cachegrind cannot show
it: it simulates a first and a last level, and the conflict is in the 16-way L2 between
them, whose set index the 64 KiB-aligned slabs share.)

Output: a markdown table on stdout and <out>/colour.md, <out>/colour.json and a plot
<out>/colour.png (when matplotlib is there).

Usage: python3 bench/colour.py [--build build] [--reps 5] [--out bench/results]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CASES = [(400, 64), (700, 64), (1100, 64), (1100, 16), (2000, 64)]


def kv(text):
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def run(exe, size, slabs, nocolour, rounds):
    p = subprocess.run([exe, "--size", str(size), "--slabs", str(slabs), "--rounds",
                        str(rounds), "--nocolour", str(nocolour)], capture_output=True,
                       text=True, timeout=300)
    if p.returncode != 0:
        sys.exit("colour.py: colour_bench failed: %s" % p.stderr)
    return kv(p.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    args = ap.parse_args()
    exe = os.path.join(os.path.abspath(args.build), "bench", "colour_bench")
    if not os.path.exists(exe):
        sys.exit("colour.py: %s not found: build first (make)" % exe)
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for size, slabs in CASES:
        ns = {0: [], 1: []}
        info = {}
        for rep in range(args.reps):
            for nocolour in ((0, 1) if rep % 2 == 0 else (1, 0)):
                r = run(exe, size, slabs, nocolour, args.rounds)
                ns[nocolour].append(float(r["ns_per_touch"]))
                info[nocolour] = r
        row = {"size": size, "slabs": slabs, "objects_per_slab": int(info[0]["objects_per_slab"]),
               "coloured_slabs": int(info[0]["slabs_off_the_first_colour"]),
               "ns_colour": ns[0], "ns_nocolour": ns[1]}
        rows.append(row)
        print("size %d, %d slabs: %.2f ns coloured, %.2f ns not" % (
            size, slabs, statistics.median(ns[0]), statistics.median(ns[1])), flush=True)
    spread = lambda v: 100.0 * (max(v) - min(v)) / statistics.median(v)  # noqa: E731
    lines = ["| object size | slabs | objects per slab | slabs off colour 0 | ns per touch, "
             "coloured | not coloured | not/coloured (spreads) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        mc, mn = statistics.median(r["ns_colour"]), statistics.median(r["ns_nocolour"])
        lines.append("| %d | %d | %d | %d | %.2f | %.2f | %.2f (±%.0f%%, ±%.0f%%) |" % (
            r["size"], r["slabs"], r["objects_per_slab"], r["coloured_slabs"], mc, mn, mn / mc,
            spread(r["ns_colour"]) / 2, spread(r["ns_nocolour"]) / 2))
    text = "\n".join(lines) + "\n"
    print()
    print(text)
    with open(os.path.join(args.out, "colour.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "colour.json"), "w") as f:
        json.dump(rows, f, indent=1)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("colour.py: no matplotlib, no plot")
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    labels = ["%d B, %d slabs" % (r["size"], r["slabs"]) for r in rows]
    xs = range(len(rows))
    for off, key, name, col in ((-0.2, "ns_colour", "coloured (default)", "#d62728"),
                                (0.2, "ns_nocolour", "USLAB_CACHE_NOCOLOUR", "#7f7f7f")):
        med = [statistics.median(r[key]) for r in rows]
        err = [[m - min(r[key]) for m, r in zip(med, rows)],
               [max(r[key]) - m for m, r in zip(med, rows)]]
        ax.bar([x + off for x in xs], med, 0.4, yerr=err, label=name, color=col)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, rotation=25, ha="right", fontsize=8)
    ax.set_ylabel("ns per touch (median, min-max)")
    ax.set_title("colour_bench: objects of the same index in every slab together")
    ax.legend(fontsize=8)
    fig.tight_layout()
    png = os.path.join(args.out, "colour.png")
    fig.savefig(png, dpi=110)
    print(png)


if __name__ == "__main__":
    main()
