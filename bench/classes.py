#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Size classes fitted to each program (issue 13): waste, peak RSS and time, default
classes against the table `uslab profile` fits to the program, and what recording costs.

For each program: `uslab profile` runs it once and writes its table (bench/results/
classes-<name>.txt) and the bytes wasted per request by both tables; then the program runs
`--reps` times under the preload library with the default classes, with the fitted ones, and
while recording (USLAB_PROFILE set, as `uslab profile` runs it: every malloc counted), in a
rotating order, through bench/spawn (wall time, ru_maxrss of the program). The table is fitted
to the same run it is measured on, as a profile-guided build is.

Output: a markdown table on stdout and in <out>/classes.md, the numbers in
<out>/classes.json and a plot <out>/classes.png (when matplotlib is there).

Usage: python3 bench/classes.py [--build build] [--reps 5] [--out bench/results]
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import run  # noqa: E402  (run_once, parse_kv)


def programs(bindir):
    b = lambda name: os.path.join(bindir, name)  # noqa: E731
    progs = os.path.join(HERE, "programs")
    out = [("size a=2,b=20", [b("size_bench"), "--alpha", "2", "--beta", "20"], {}),
           ("size a=10,b=10", [b("size_bench"), "--alpha", "10", "--beta", "10"], {}),
           ("size a=20,b=2", [b("size_bench"), "--alpha", "20", "--beta", "2"], {}),
           ("lifetime d=2000", [b("lifetime_bench"), "--distance", "2000"], {}),
           ("cfrac", [b("cfrac")], {})]
    py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else shutil.which("python3")
    if py:
        out.append(("python3", [py, os.path.join(progs, "alloc.py"), "100000"],
                    {"PYTHONMALLOC": "malloc"}))
    if shutil.which("perl"):
        out.append(("perl", [shutil.which("perl"), os.path.join(progs, "hash.pl"), "60000"], {}))
    if shutil.which("sqlite3"):
        out.append(("sqlite3", [shutil.which("sqlite3"), ":memory:",
                                ".read " + os.path.join(progs, "sqlite.sql")], {}))
    return out


def profile(tool, argv, extra, table):
    env = dict(os.environ, **extra)
    p = subprocess.run([tool, "profile", "-o", table, "--"] + argv, env=env,
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit("classes.py: uslab profile %s failed: %s" % (argv[0], p.stderr.strip()))
    waste = dict(re.findall(r"(default|fitted) classes\s+\(\d+\): ([0-9.]+) bytes", p.stdout))
    reqs = re.search(r"profile: (\d+) requests", p.stdout)
    return float(waste["default"]), float(waste["fitted"]), int(reqs.group(1))


def med(v):
    return statistics.median(v) if v else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    bindir = os.path.join(build, "bench")
    run.SPAWN = os.path.join(bindir, "spawn")
    tool = os.path.join(build, "uslab")
    lib = os.path.join(build, "libuslab-preload.so")
    for f in (run.SPAWN, tool, lib):
        if not os.path.exists(f):
            sys.exit("classes.py: %s not found: build first (make)" % f)
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for name, argv, extra in programs(bindir):
        slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
        table = os.path.join(args.out, "classes-%s.txt" % slug)
        wd, wf, reqs = profile(tool, argv, extra, table)
        kinds = ["default", "fitted", "profiled"]
        times = {k: [] for k in kinds}
        rss = {k: [] for k in kinds}
        counts = os.path.join(args.out, "classes-%s.counts" % slug)
        for rep in range(args.reps):
            order = kinds[rep % 3:] + kinds[:rep % 3]
            for which in order:
                env = dict(os.environ, LD_PRELOAD=lib, **extra)
                env.pop("USLAB_CLASSES", None)
                env.pop("USLAB_PROFILE", None)
                if which == "fitted":
                    env["USLAB_CLASSES"] = table
                if which == "profiled":
                    env["USLAB_PROFILE"] = counts
                rc, out, err, wall, maxrss = run.run_once(argv, env, 600)[:5]
                if rc != 0 or "USLAB_CLASSES" in err:
                    sys.exit("classes.py: %s (%s) failed: rc=%d %s" % (name, which, rc,
                                                                       err.strip()[:300]))
                kv = run.parse_kv(out)
                t = float(kv["time_s"]) if "time_s" in kv else wall
                times[which].append(t)
                rss[which].append(maxrss / 1024.0)
        for f in os.listdir(args.out):  # the profiled runs' count files (PATH.<pid>)
            if f.startswith(os.path.basename(counts) + "."):
                os.unlink(os.path.join(args.out, f))
        row = {"program": name, "requests": reqs, "waste_default": wd, "waste_fitted": wf,
               "time_default": times["default"], "time_fitted": times["fitted"],
               "rss_default": rss["default"], "rss_fitted": rss["fitted"], "table": table,
               "time_profiled": times["profiled"], "rss_profiled": rss["profiled"]}
        rows.append(row)
        print("%-16s waste %.2f -> %.2f B/request, RSS %.1f -> %.1f MiB, time ratio %.3f, "
              "recording %.3f" % (name, wd, wf, med(rss["default"]), med(rss["fitted"]),
                                  med(times["fitted"]) / med(times["default"]),
                                  med(times["profiled"]) / med(times["default"])), flush=True)
    lines = ["| program | requests | waste per request, default → fitted (bytes) | "
             "peak RSS, default → fitted (MiB) | time fitted/default (median; spread of "
             "each) | time recording/default (spread) |", "|---|---|---|---|---|---|"]
    for r in rows:
        td, tf, tp = r["time_default"], r["time_fitted"], r["time_profiled"]
        spread = lambda v: 100.0 * (max(v) - min(v)) / med(v)  # noqa: E731
        lines.append("| %s | %d | %.2f → %.2f | %.1f → %.1f | %.3f (±%.0f%%, ±%.0f%%) | "
                     "%.2f (±%.0f%%) |" % (
                         r["program"], r["requests"], r["waste_default"], r["waste_fitted"],
                         med(r["rss_default"]), med(r["rss_fitted"]), med(tf) / med(td),
                         spread(td) / 2, spread(tf) / 2, med(tp) / med(td), spread(tp) / 2))
    text = "\n".join(lines) + "\n"
    print()
    print(text)
    with open(os.path.join(args.out, "classes.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "classes.json"), "w") as f:
        json.dump(rows, f, indent=1)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("classes.py: no matplotlib, no plot")
        return
    names = [r["program"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    series = [("bytes wasted per request", "waste_default", "waste_fitted", False),
              ("peak RSS (MiB)", "rss_default", "rss_fitted", True),
              ("time (s, median)", "time_default", "time_fitted", True)]
    for ax, (title, kd, kf, is_list) in zip(axes, series):
        vd = [med(r[kd]) if is_list else r[kd] for r in rows]
        vf = [med(r[kf]) if is_list else r[kf] for r in rows]
        xs = range(len(names))
        ax.bar([x - 0.2 for x in xs], vd, 0.4, label="default classes", color="#7f7f7f")
        ax.bar([x + 0.2 for x in xs], vf, 0.4, label="fitted (uslab profile)", color="#d62728")
        ax.set_xticks(list(xs))
        ax.set_xticklabels(names, rotation=35, ha="right", fontsize=8)
        ax.set_title(title, fontsize=10)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    png = os.path.join(args.out, "classes.png")
    fig.savefig(png, dpi=110)
    print(png)


if __name__ == "__main__":
    main()
