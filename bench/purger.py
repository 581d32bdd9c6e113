#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Where purge passes run (issue 15, docs/design.md §3 "Where passes run"), measured:
burst_bench under libuslab-preload.so, single-threaded with USLAB_PURGER=auto (no thread:
passes run on slow paths), always (the purger thread, the behaviour before issue 15) and
never, and with a thread joined first under auto (the purger thread starts). Configurations
alternate run by run. Reports the median (and min-max) of the bursts' time per block, the
minor faults, and the resident memory at the end of the idle gaps.

Output: a markdown table on stdout and <out>/purger.md, <out>/purger.json.

Usage: python3 bench/purger.py [--build build] [--reps 3] [--out bench/results]
"""
import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CONFIGS = [("single-threaded", "auto", "0"), ("single-threaded", "always", "0"),
           ("single-threaded", "never", "0"), ("a thread joined first", "auto", "1")]
sys.path.insert(0, HERE)
from burst import METRICS, report, run as burst_run  # noqa: E402


def run(build, purger, threaded, args):
    return burst_run(build, {"USLAB_PURGER": purger}, ["--threaded", threaded] + args,
                     "purger.py")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--rounds", default="6")
    ap.add_argument("--gap", default="1500")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    args = ["--rounds", a.rounds, "--gap", a.gap, "--mib", "64", "--size", "256"]
    res = {c: [] for c in CONFIGS}
    for r in range(a.reps):
        for c in CONFIGS[r % len(CONFIGS):] + CONFIGS[:r % len(CONFIGS)]:
            print("rep %d: %s, USLAB_PURGER=%s" % (r + 1, c[0], c[1]), file=sys.stderr)
            res[c].append(run(a.build, c[1], c[2], args))
    rows = []
    for c in CONFIGS:
        row = {"process": c[0], "purger": c[1]}
        for k, _ in METRICS:
            v = [x[k] for x in res[c]]
            row[k] = (statistics.median(v), min(v), max(v))
        rows.append(row)
    report(a.out, "purger", args, a.reps, ["process", "USLAB_PURGER"], rows,
           lambda r: [r["process"], r["purger"]])

if __name__ == "__main__":
    main()
