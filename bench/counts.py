#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Counts, not times: the real programs of bench/run.py under cachegrind, every allocator.

On a shared 2-core VM one program's wall time moves 10-70% between runs, so whether an
allocator is 3% slower than another cannot be settled by timing it (docs/benchmarks.md,
session 76). Cachegrind runs the program on a simulated CPU and counts what it did:
instructions (Ir), first-level and last-level cache misses (reads and writes, instructions
and data) and mispredicted branches. The counts do not move with the machine's load, so
every (program, allocator) runs once, and two runs may go at once (--jobs). Two programs
move a little all the same: lua seeds its string hashes with the clock and an address, and
redis's clients race; their counts move by up to 1% between runs, and --reps 3 reports
each one's median run and the spread.

Each row is the modelled cost, KCachegrind's cycle estimate:

    CEst = Ir + 10 * (I1mr + D1mr + D1mw) + 100 * (ILmr + DLmr + DLmw) + 10 * (Bcm + Bim)

relative to the best allocator of the row, then each allocator's geometric mean over the
rows. It is a model: the simulated caches are fixed (32 KiB 8-way first-level caches, a
32 MiB 16-way last level, 64-byte lines, this VM's L1 and L3) and there is no TLB, no
second-level cache, no prefetcher and no memory-level parallelism. What it settles is
whether one allocator makes a program execute more or miss more, not the wall time.

--only takes run.py's names: programs by name (the default: every one), other rows by
benchmark or benchmark:case, each run once with run.py's arguments. A row of several
threads runs them one at a time under valgrind: its counts say nothing of contention.

As in run.py, each program must print what its first run printed, and bench/probe, run
under valgrind in the same environment, must report the allocator preloaded (snmalloc
aborts under valgrind: its column is left out with a note). A process a program starts
counts too (gcc's cc1), but for redis only redis-server does: its client runs under
glibc, outside valgrind. Every run's environment is padded to the same bytes (PAD), so that
its stack starts at the same address whatever LD_PRELOAD names or --extra sets.

Usage: python3 bench/counts.py [--full] [--only perl,git,size,cxx:umap] [--jobs 2]
                               [--allocators glibc,uslab] [--reps 1] [--out bench/results/counts]
                               [--extra before=/tmp/before/build/libuslab-preload.so]
       python3 bench/counts.py [--allocators ...] -- COMMAND [ARGS...]   (any program)
"""
import argparse
import concurrent.futures
import glob
import hashlib
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("bench_run", os.path.join(HERE, "run.py"))
run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run)

EVENTS = ["Ir", "I1mr", "ILmr", "Dr", "D1mr", "DLmr", "Dw", "D1mw", "DLmw", "Bc", "Bcm", "Bi",
          "Bim"]
CACHES = ["--I1=32768,8,64", "--D1=32768,8,64", "--LL=33554432,16,64"]
# The processes whose counts are a row's (basename of the command), where not every one.
COUNT_ONLY = {"redis": {"redis-server"}}
# Helpers of a program's script that need not run under valgrind at all.
SKIP = ["*/redis-benchmark", "*/redis-cli", "*/awk", "*/mawk", "*/gawk", "*/mktemp", "*/rm",
        "*/sleep", "*/cat", "*/tr"]


def cost(c):
    """KCachegrind's cycle estimate of counts c (a dict of EVENTS)."""
    return (c["Ir"] + 10 * (c["I1mr"] + c["D1mr"] + c["D1mw"]) +
            100 * (c["ILmr"] + c["DLmr"] + c["DLmw"]) + 10 * (c["Bcm"] + c["Bim"]))


def read_counts(path):
    """(command, {event: total}) of one cachegrind output file."""
    cmd, events, summary = "", None, None
    with open(path) as f:
        for line in f:
            if line.startswith("cmd:"):
                cmd = line[4:].strip()
            elif line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith("summary:"):
                summary = [int(x) for x in line.split()[1:]]
    if events is None or summary is None or len(events) != len(summary):
        raise ValueError("%s: no events and summary lines" % path)
    counts = dict.fromkeys(EVENTS, 0)
    counts.update(zip(events, summary))
    return cmd, counts


def sum_counts(paths, only=None):
    """The counts of every file, or of those whose command's program is in `only`."""
    total, procs = dict.fromkeys(EVENTS, 0), []
    for p in sorted(paths):
        cmd, c = read_counts(p)
        prog = os.path.basename(cmd.split()[0]) if cmd else ""
        if only and prog not in only:
            continue
        procs.append(prog)
        for k in EVENTS:
            total[k] += c[k]
    return total, procs


def median_run(runs):
    """The counts of the run of median cost (the lower one of an even number), and the
    spread of the costs: (max - min) / median."""
    runs = sorted(runs, key=cost)
    mid = runs[(len(runs) - 1) // 2]
    return mid, (cost(runs[-1]) - cost(runs[0])) / cost(mid)


def valgrind(outpat, tool="cachegrind"):
    argv = ["valgrind", "--tool=" + tool, "--trace-children=yes",
            "--trace-children-skip=" + ",".join(SKIP)]
    if tool == "cachegrind":
        argv += ["--cache-sim=yes", "--branch-sim=yes"] + CACHES
        argv.append("--cachegrind-out-file=" + outpat)
    return argv


# The interpreters' hash seeds fixed: a random one changes what a program does from run to
# run (the order of a dict's keys, its collisions), so every allocator sees the same run.
SEEDS = {"PYTHONHASHSEED": "0", "PERL_HASH_SEED": "0", "PERL_PERTURB_KEYS": "0"}


def env_of(name, lib, case_env, own_malloc, glibc_malloc):
    env = dict(run.env_for(lib), **case_env, **SEEDS)
    if name == "glibc" and own_malloc:
        env["LD_PRELOAD"] = glibc_malloc
    return env


# Every run's environment takes the same bytes on its stack: a new process's strings and
# their pointers lie above its first frame, so the stack, and the cache sets its frames fall
# in, start where the environment ends. LD_PRELOAD's paths differ in length between
# allocators, and an --extra run adds its variables: USLAB_CLASSES naming the default table
# alone moved python3's modelled cost 0.2% (docs/benchmarks.md, session 78).
PAD = "COUNTS_PAD"


def env_bytes(env):
    """What env takes on a new process's stack: each "NAME=VALUE" string and its pointer."""
    return sum(len(k.encode()) + len(v.encode()) + 2 + 8 for k, v in env.items())


def padded(envs):
    """envs, each with PAD set so that all take the same bytes (env_bytes)."""
    envs = [{k: v for k, v in e.items() if k != PAD} for e in envs]
    fixed = len(PAD) + 2 + 8
    top = max(env_bytes(e) for e in envs) + fixed
    return [dict(e, **{PAD: "x" * (top - fixed - env_bytes(e))}) for e in envs]


def probe(bindir, name, env):
    """Which malloc bench/probe finds under valgrind with env (snmalloc aborts there)."""
    p = subprocess.run(valgrind("", tool="none") + ["-q", os.path.join(bindir, "probe")],
                       env=env, capture_output=True, text=True, timeout=120)
    got = run.parse_kv(p.stdout).get("allocator")
    return got if p.returncode == 0 and got else "error (exit %d: %s)" % (
        p.returncode, p.stderr.strip().splitlines()[-1][:120] if p.stderr.strip() else "")


def count_one(job):
    """Runs one (row, allocator) under cachegrind; returns its record."""
    row, name, argv, env, only, work, timeout = job
    d = tempfile.mkdtemp(prefix="cg-", dir=work)
    try:
        p = subprocess.run(valgrind(os.path.join(d, "cg.%p")) + argv, env=env,
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
        files = glob.glob(os.path.join(d, "cg.*"))
        rec = {"row": row, "allocator": name, "rc": p.returncode,
               "sha256": hashlib.sha256(p.stdout).hexdigest(),
               "out": p.stdout.decode(errors="replace"),
               "tail": p.stdout.decode(errors="replace").strip()[-200:],
               "err": p.stderr.decode(errors="replace").strip()[-300:]}
        if p.returncode == 0 and files:
            rec["counts"], rec["processes"] = sum_counts(files, only)
        return rec
    except subprocess.TimeoutExpired:
        return {"row": row, "allocator": name, "rc": -9, "err": "timed out"}
    finally:
        shutil.rmtree(d, ignore_errors=True)


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def table(rows, names, counts):
    """The markdown table: each row's CEst relative to its best, then the geometric means."""
    head = "| row | " + " | ".join(names) + " |"
    lines = [head, "|" + " --- |" * (len(names) + 1)]
    rel = {n: [] for n in names}
    for row in rows:
        got = {n: cost(counts[(row, n)]) for n in names if (row, n) in counts}
        if not got:
            continue
        best = min(got.values())
        cells = []
        for n in names:
            if n in got:
                rel[n].append(got[n] / best)
                cells.append("%.3f" % (got[n] / best))
            else:
                cells.append("-")
        lines.append("| %s | %s |" % (row, " | ".join(cells)))
    means = {n: geomean(v) for n, v in rel.items()}
    lines.append("| **geomean** | %s |" % " | ".join(
        "**%.3f**" % means[n] if means[n] else "-" for n in names))
    return "\n".join(lines), means


def detail(rows, names, counts, spread):
    """Per row and allocator: instructions, misses, mispredictions, in millions, and the
    spread of CEst over the repetitions ((max - min) / median)."""
    lines = ["| row | allocator | Ir (M) | L1 misses (M) | LL misses (k) | mispredicted (M) "
             "| CEst (M) | spread |", "|" + " --- |" * 8]
    for row in rows:
        for n in names:
            c = counts.get((row, n))
            if c:
                lines.append("| %s | %s | %.1f | %.2f | %.1f | %.2f | %.1f | %.2f%% |" % (
                    row, n, c["Ir"] / 1e6, (c["I1mr"] + c["D1mr"] + c["D1mw"]) / 1e6,
                    (c["ILmr"] + c["DLmr"] + c["DLmw"]) / 1e3, (c["Bcm"] + c["Bim"]) / 1e6,
                    cost(c) / 1e6, 100 * spread.get((row, n), 0)))
    return "\n".join(lines)


def main():
    argv = sys.argv[1:]
    command = []
    if "--" in argv:
        i = argv.index("--")
        argv, command = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="run.py's full sizes")
    ap.add_argument("--build", default=os.path.join(run.ROOT, "build"))
    ap.add_argument("--only", default="", help="comma-separated programs (perl, git, ...)")
    ap.add_argument("--allocators", default="")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--reps", type=int, default=1, help="runs of each (row, allocator); the "
                    "median's counts are reported (lua's and redis's move by up to 1%%)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "counts"))
    ap.add_argument("--extra", action="append", default=[], metavar="NAME=LIB[,VAR=VALUE...]",
                    help="also count a build of uslab's preload library LIB under NAME, with "
                         "the given settings, as run.py's --extra (a change before and after)")
    args = ap.parse_args(argv)
    if not shutil.which("valgrind"):
        sys.exit("counts.py: valgrind not found (apt-get install valgrind)")
    build = os.path.abspath(args.build)
    bindir = os.path.join(build, "bench")
    glibc_malloc = os.path.join(bindir, "libbench-glibc.so")
    if not os.path.exists(os.path.join(bindir, "probe")):
        sys.exit("counts.py: %s/probe not found: build first (make)" % bindir)

    allocs, skipped = run.discover(build, set(filter(None, args.allocators.split(","))))
    expect = {n: n for n, _ in allocs}
    expect.update({n: family for n, _, family in run.BUILT_PEERS if n in expect})
    for i, e in enumerate(args.extra):  # as run.py's: env_for finds the settings by key
        name, _, spec = e.partition("=")
        lib, *settings = spec.split(",")
        if not name or not lib or name in expect or not all("=" in v for v in settings):
            ap.error("--extra %s: expected a new NAME=LIB[,VAR=VALUE...]" % e)
        key = "%s#%d" % (os.path.abspath(lib), i)
        run.EXTRA_ENV[key] = dict(v.split("=", 1) for v in settings)
        allocs.append((name, key))
        expect[name] = "uslab"
    if command:
        plan = [("command", command, {}, False, True)]
    else:
        # A program row is named as run.py's programs are (perl); another as group:case.
        only = set(filter(None, args.only.split(","))) or {"programs"}

        def names(c):
            return {c.group, "%s:%s" % (c.group, c.name)} | ({c.name} if c.program else set())

        plan = [(c.name if c.program else "%s:%s" % (c.group, c.name),
                 c.argv + (c.full_args if args.full else c.quick_args), c.env, c.own_malloc,
                 c.program) for c in run.cases(bindir, args.full) if names(c) & only]
        if not plan:
            sys.exit("counts.py: no row to run (--only %s)" % args.only)
    ok = []
    for n, lib in allocs:
        got = probe(bindir, n, env_of(n, lib, {}, False, glibc_malloc))
        if got == expect[n]:
            ok.append((n, lib))
        else:
            skipped[n] = "under valgrind bench/probe says malloc is '%s', not %s" % (got,
                                                                                      expect[n])
    allocs, names = ok, [n for n, _ in ok]
    notes = ["%s left out: %s" % (n, why) for n, why in skipped.items()]
    notes += ["row left out: %s not installed" % m for m in run.MISSING_PROGRAMS if not command]
    for line in notes:
        print("note: " + line)
    if not allocs:
        sys.exit("counts.py: no allocator to run")

    os.makedirs(args.out, exist_ok=True)
    jobs = [(row, n, a, env_of(n, lib, env, own, glibc_malloc), COUNT_ONLY.get(row), args.out,
             3600) for _ in range(max(1, args.reps)) for row, a, env, own, _ in plan
            for n, lib in allocs]
    jobs = [j[:3] + (e,) + j[4:] for j, e in zip(jobs, padded([j[3] for j in jobs]))]
    program = {t[0]: t[4] for t in plan}
    counts, failures, records = {}, [], []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        for rec in ex.map(count_one, jobs):
            records.append(rec)
            print("counted %-16s %-10s %s" % (rec["row"], rec["allocator"],
                                              "%.1fM instructions" % (rec["counts"]["Ir"] / 1e6)
                                              if "counts" in rec else "FAILED"),
                  file=sys.stderr, flush=True)
    ref, runs = {}, {}
    for rec in records:
        key = (rec["row"], rec["allocator"])
        if rec["rc"] != 0 or "counts" not in rec:
            failures.append("%s under %s: exit %d: %s" % (key + (rec["rc"], rec["err"])))
            continue
        if program[rec["row"]]:
            first = ref.setdefault(rec["row"], rec["sha256"])
            if rec["sha256"] != first:
                failures.append("%s under %s: output differs from the first run's: %s" % (
                    key + (rec["tail"],)))
                continue
        else:  # one of bench/'s programs: it says which malloc it had, and checks its work
            kv = run.parse_kv(rec["out"])
            if kv.get("allocator") != expect[rec["allocator"]] or kv.get("verified", "1") != "1":
                failures.append("%s under %s: allocator=%s verified=%s" % (
                    key + (kv.get("allocator"), kv.get("verified"))))
                continue
        runs.setdefault(key, []).append(rec["counts"])
    spread = {}
    for key, cs in runs.items():
        counts[key], spread[key] = median_run(cs)
    rows = [t[0] for t in plan]
    tbl, means = table(rows, names, counts)
    info = run.machine_info(build)
    text = ("Modelled cost (cachegrind, KCachegrind's CEst) relative to the best allocator of "
            "each row; 1 = the best. %s mode, commit %s.\n\n%s\n\n%s\n" % (
                "full" if args.full else "quick", info.get("git_commit", "?"), tbl,
                detail(rows, names, counts, spread)))
    print(text)
    for f in failures:
        print("failed: " + f)
    with open(os.path.join(args.out, "counts.md"), "w") as f:
        f.write("\n".join("note: " + n for n in notes) + ("\n\n" if notes else "") + text)
    with open(os.path.join(args.out, "counts.json"), "w") as f:
        json.dump({"machine": info, "allocators": allocs, "notes": notes, "caches": CACHES,
                   "geomean": means, "failures": failures,
                   "reps": max(1, args.reps),
                   "counts": [{"row": r, "allocator": n, "spread": spread[(r, n)], **c}
                              for (r, n), c in counts.items()]},
                  f, indent=1)
    print("wrote %s/{counts.md,counts.json}" % args.out)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
