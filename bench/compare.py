#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Ratios of two allocators of one interleaved bench/run.py run, repetition by repetition.

Usage: python3 bench/compare.py RESULTS.json A B [--markdown]

For each metric of each case, the ratio A/B of the runs of the same repetition (run.py runs
every allocator once per repetition, back to back, so both saw the same machine state),
then the median of those ratios and their 25th-75th percentile range. Pairing removes most
of the drift of a shared machine that the separate medians keep. Lower is better for every
metric run.py reports (times, RSS, page faults and traps), so a ratio < 1 means A is faster or smaller.
Typical use: a before/after comparison, with --extra before=OLD/libuslab-preload.so.
"""
import json
import statistics
import sys


def quantile(xs, q):
    xs = sorted(xs)
    if len(xs) == 1:
        return xs[0]
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    md = "--markdown" in sys.argv
    if len(args) != 3:
        sys.exit(__doc__)
    path, a, b = args
    res = json.load(open(path))
    rows = []
    for c in res["cases"]:
        va, vb = c["values"].get(a, {}), c["values"].get(b, {})
        series = [(m[0], m[1]) for m in c["metrics"]]
        if c.get("maxrss_kb", {}).get(a) and c["maxrss_kb"].get(b):
            va = dict(va, peak_rss=c["maxrss_kb"][a])
            vb = dict(vb, peak_rss=c["maxrss_kb"][b])
            series.append(("peak_rss", "KiB"))
        if c.get("faults", {}).get(a) and c["faults"].get(b):
            va = dict(va, page_faults=c["faults"][a])
            vb = dict(vb, page_faults=c["faults"][b])
            series.append(("page_faults", ""))
        if c.get("traps", {}).get(a) and c["traps"].get(b):
            va = dict(va, page_traps=c["traps"][a])
            vb = dict(vb, page_traps=c["traps"][b])
            series.append(("page_traps", ""))
        for key, unit in series:
            xa, xb = va.get(key) or [], vb.get(key) or []
            pairs = [x / y for x, y in zip(xa, xb) if x is not None and y]
            if not pairs:
                continue
            rows.append((c["group"], c["name"], key, len(pairs), statistics.median(pairs),
                         quantile(pairs, 0.25), quantile(pairs, 0.75)))
    head = ("benchmark", "case", "metric", "n", "%s/%s" % (a, b), "25%-75%")
    if md:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for g, n, k, cnt, med, lo, hi in rows:
            print("| %s | %s | %s | %d | %.3f | %.2f-%.2f |" % (g, n, k, cnt, med, lo, hi))
    else:
        print("%-9s %-10s %-22s %3s %8s %s" % head)
        for g, n, k, cnt, med, lo, hi in rows:
            print("%-9s %-10s %-22s %3d %8.3f %.2f-%.2f" % (g, n, k, cnt, med, lo, hi))


if __name__ == "__main__":
    main()
