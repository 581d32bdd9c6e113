#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Draws the benchmark plots from bench/results/results.json (needs matplotlib).

Figures 5.1, 5.2 and 5.3 of the thesis are redrawn with every allocator: bars of the mean
with the standard deviation as error bars (as the thesis did), one figure per other
benchmark as well. Prints the PNG file names it wrote.

Usage: plot.py <results dir>
"""
import json
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"glibc": "#7f7f7f", "uslab": "#d62728", "mimalloc": "#1f77b4",
          "jemalloc": "#2ca02c", "tcmalloc": "#ff7f0e"}


def series(results, group, keys=None, normalize=False):
    """[(x label, {alloc: (mean, std)})] over the group's cases and chosen metrics."""
    names = [a for a, _ in results["allocators"]]
    out = []
    for c in results["cases"]:
        if c["group"] != group:
            continue
        for key, unit, label in c["metrics"]:
            if keys is not None and key not in keys:
                continue
            d = {}
            base = None
            if normalize:
                g = c["values"].get("glibc", {}).get(key)
                base = statistics.median(g) if g else None
            for a in names:
                v = c["values"].get(a, {}).get(key)
                if not v:
                    continue
                if normalize and base:
                    v = [x / base for x in v]
                d[a] = (statistics.fmean(v), statistics.stdev(v) if len(v) > 1 else 0.0)
            xl = c["name"] if len(c["metrics"]) == 1 or keys and len(keys) == 1 else label
            if d:
                out.append((xl, d))
    return names, out


def bars(outdir, fname, title, ylabel, names, data, note=None):
    if not data:
        return None
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(data) + 2), 4.2))
    present = [a for a in names if any(a in d for _, d in data)]
    w = 0.8 / max(1, len(present))
    for i, a in enumerate(present):
        xs, ys, es = [], [], []
        for j, (_, d) in enumerate(data):
            if a in d:
                xs.append(j - 0.4 + w * (i + 0.5))
                ys.append(d[a][0])
                es.append(d[a][1])
        ax.bar(xs, ys, w, yerr=es, capsize=2, label=a, color=COLORS.get(a))
    ax.set_xticks(range(len(data)))
    ax.set_xticklabels([x for x, _ in data], rotation=20 if len(data) > 6 else 0, ha="right"
                       if len(data) > 6 else "center")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    if note:
        fig.text(0.01, 0.01, note, fontsize=7, alpha=0.7)
    fig.tight_layout()
    path = os.path.join(outdir, fname)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return fname


def main():
    outdir = sys.argv[1]
    with open(os.path.join(outdir, "results.json")) as f:
        r = json.load(f)
    note = "%s mode, %s reps, %s; mean ± std" % (r["mode"], r["reps"],
                                                 r["machine"].get("cpu", ""))
    if r.get("note"):
        note += " - " + r["note"]
    made = []
    spec = [
        ("fig5.1-size.png", "size", None, False,
         "Fig. 5.1: size benchmark (malloc + touch + free of 800*Beta(a,b) bytes)",
         "ns per block"),
        ("fig5.2-lifetime.png", "lifetime", None, False,
         "Fig. 5.2: lifetime benchmark (free d ops after malloc, 8000*Beta(2,20) bytes)",
         "ns per operation"),
        ("fig5.3-cfrac.png", "cfrac", ["time_s"], False,
         "Fig. 5.3: cfrac (factoring the thesis' N)", "seconds"),
        ("memory.png", "memory", None, False, "RSS increase for 1,000,000 objects", "MiB"),
        ("fastpath.png", "fastpath",
         [k + "_ns" for k in ("alloc", "free", "pair", "conc_alloc", "conc_free",
                              "remote_alloc", "remote_free")], False,
         "Fast paths (64-byte blocks)", "ns per operation"),
        ("small.png", "small", None, False,
         "batches of 25-1600 allocations then frees (minimalist README test: 100/600)", "ns per loop"),
        ("objcache.png", "objcache", None, False,
         "Object with a costly constructor: malloc+init vs uslab_cache", "ns per object"),
        ("mt.png", "mt", None, True, "Multi-threaded workloads (2 threads)",
         "time relative to glibc"),
        ("programs.png", "programs", None, True, "Real programs under LD_PRELOAD",
         "time relative to glibc"),
    ]
    for fname, group, keys, norm, title, ylabel in spec:
        names, data = series(r, group, keys, norm)
        p = bars(outdir, fname, title, ylabel, names, data, note)
        if p:
            made.append(p)
    for p in made:
        print(p)


if __name__ == "__main__":
    main()
