#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Memory-return policies measured (issue 13): burst_bench under libuslab-preload.so with
USLAB_RETURN=delay, pressure and both, without and with simulated memory pressure (a PSI
file burst_bench bumps after each burst, named by USLAB_PRESSURE_SOURCE), alternating run
by run. Reports the median (and min-max) of the bursts' time per block, the minor faults
and the resident memory at the end of the idle gaps, and a plot.

Output: a markdown table on stdout and <out>/pressure.md, <out>/pressure.json and
<out>/pressure.png (when matplotlib is there).

Usage: python3 bench/pressure.py [--build build] [--reps 3] [--out bench/results]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
POLICIES = ["delay", "pressure", "both"]
STALLS = [0, 50000]  # microseconds of stall added per burst: none, or 50 ms
sys.path.insert(0, HERE)
from burst import METRICS, report, run as burst_run  # noqa: E402


def run(build, policy, stall, psi, args):
    return burst_run(build, {"USLAB_RETURN": policy, "USLAB_PRESSURE_SOURCE": psi},
                     ["--psi", psi, "--stall", str(stall)] + args, "pressure.py")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--rounds", default="6")
    ap.add_argument("--gap", default="1500")
    ap.add_argument("--plot-from", default="", help="only draw the plot of a pressure.json")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    if a.plot_from:
        with open(a.plot_from) as f:
            plot(json.load(f), a.out)
        return
    args = ["--rounds", a.rounds, "--gap", a.gap, "--mib", "64", "--size", "256"]
    res = {(p, s): [] for p in POLICIES for s in STALLS}
    order = [(p, s) for s in STALLS for p in POLICIES]
    with tempfile.TemporaryDirectory() as tmp:
        psi = os.path.join(tmp, "memory.psi")
        for r in range(a.reps):
            for p, s in order[r % len(order):] + order[:r % len(order)]:
                print("rep %d: %s, stall %d us" % (r + 1, p, s), file=sys.stderr)
                res[(p, s)].append(run(a.build, p, s, psi, args))
    rows = []
    for p, s in order:
        row = {"policy": p, "pressure": "yes" if s else "no"}
        for k, _ in METRICS:
            v = [x[k] for x in res[(p, s)]]
            row[k] = (statistics.median(v), min(v), max(v))
        rows.append(row)
    report(a.out, "pressure", args, a.reps, ["USLAB_RETURN", "pressure"], rows,
           lambda r: [r["policy"], r["pressure"]])
    plot(rows, a.out)


def plot(rows, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        # Debian's interpreter may have it (python3-matplotlib) where this one has not.
        if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != \
                os.path.realpath("/usr/bin/python3"):
            subprocess.run(["/usr/bin/python3", os.path.abspath(__file__), "--plot-from",
                            os.path.join(out, "pressure.json"), "--out", out])
        else:
            print("note: matplotlib is not installed; plot skipped", file=sys.stderr)
        return
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    labels = ["%s\n%s" % (r["policy"], "pressure" if r["pressure"] == "yes" else "calm")
              for r in rows]
    for ax, (k, title) in zip(axes, [METRICS[0], METRICS[2]]):
        med = [r[k][0] for r in rows]
        err = [[r[k][0] - r[k][1] for r in rows], [r[k][2] - r[k][0] for r in rows]]
        ax.bar(range(len(rows)), med, yerr=err, color=["#4c72b0", "#dd8452", "#55a868"] * 2)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_title(title)
    fig.suptitle("USLAB_RETURN: bursts of 64 MiB with idle gaps (burst_bench)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "pressure.png"), dpi=100)


if __name__ == "__main__":
    main()
