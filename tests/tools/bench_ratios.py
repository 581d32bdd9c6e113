#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/run.py's ratio to the best peer: the best of every peer found, Debian's and the
newest built from their sources (mimalloc 3, snmalloc), never an --extra build of uslab.
And its CSV files read back as written: the size cases' names hold a comma ("a=2,b=20"),
and each row has its allocator's median peak RSS, page faults and page-fault traps. And
bench/spawn's report of a program: its faults, and its traps where the kernel counts them.
And the glibc column of a program linked with an allocator of its own (Debian's redis-server
links jemalloc): bench/libbench-glibc.so gives it glibc's malloc, and bench/probe says so.
Usage: bench_ratios.py SOURCE_DIR [SPAWN GLIBC_MALLOC PROBE]"""
import csv
import shutil
import subprocess
import importlib.util
import os
import sys
import tempfile

spec = importlib.util.spec_from_file_location(
    "bench_run", os.path.join(sys.argv[1], "bench", "run.py"))
run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run)


def stats(**medians):
    return {a: {"median": m} for a, m in medians.items()}


failures = []


def expect(what, got, want):
    if got is None or abs(got - want) > 1e-9:
        failures.append("%s: %r, expected %r" % (what, got, want))


# A newest peer best: the ratio is against it, not against Debian's best.
expect("mimalloc3 best", run.ratios(stats(glibc=4.0, uslab=2.0, mimalloc=2.5, jemalloc=3.0,
                                          tcmalloc=2.2, mimalloc3=1.0, snmalloc=1.6))[1], 2.0)
expect("snmalloc best", run.ratios(stats(glibc=4.0, uslab=2.0, tcmalloc=2.2,
                                         snmalloc=0.5))[1], 4.0)
# An extra build (uslab before a change) is not a peer, however fast.
expect("extra ignored", run.ratios(stats(glibc=4.0, uslab=2.0, mimalloc=4.0, before=0.1))[1],
       0.5)
# The ratio to glibc.
expect("glibc", run.ratios(stats(glibc=4.0, uslab=2.0, mimalloc=4.0))[0], 0.5)
# No peer at all: no ratio.
if run.ratios(stats(glibc=4.0, uslab=2.0))[1] is not None:
    failures.append("no peer: a ratio was given")

# The CSV: a case named with a comma keeps every column in place.
case = {"group": "size", "name": "a=2,b=20", "metrics": [("ns_per_pair", "ns", "ns a pair")],
        "values": {"glibc": {"ns_per_pair": [80.0, 82.0, 84.0]},
                   "uslab": {"ns_per_pair": [40.0, 41.0, 45.0]},
                   "mimalloc": {"ns_per_pair": [36.0, 37.0, 38.0]}},
        "maxrss_kb": {"uslab": [22000, 22536, 23000]},
        "faults": {"uslab": [5000, 5100, 9000], "glibc": [7000]},
        "traps": {"uslab": [900, 1000, 3000]}}
with tempfile.TemporaryDirectory() as out:
    run.write_csv({"cases": [case]}, ["glibc", "uslab", "mimalloc"], out)
    with open(os.path.join(out, "size.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    u = [r for r in rows if r["allocator"] == "uslab"]
    if len(rows) != 3 or len(u) != 1 or any(None in r for r in rows):
        failures.append("size.csv: %r" % rows)
    else:
        u = u[0]
        if u["case"] != "a=2,b=20" or u["metric"] != "ns_per_pair" or u["median"] != "41":
            failures.append("size.csv's uslab row: %r" % u)
        expect("csv ratio to glibc", float(u["ratio_glibc"]), round(41.0 / 82.0, 4))
        expect("csv ratio to the best peer", float(u["ratio_best_peer"]), round(41.0 / 37.0, 4))
        expect("csv peak RSS", float(u["maxrss_kb_median"]), 22536)
        expect("csv page faults", float(u["faults_median"]), 5100)
        expect("csv page-fault traps", float(u["traps_median"]), 1000)
        m = [r for r in rows if r["allocator"] == "mimalloc"][0]
        if m["faults_median"] != "" or m["traps_median"] != "":
            failures.append("size.csv: faults for a run without a count: %r" % m)

# bench/spawn on a program that writes 2,000 fresh pages: faults, and traps (the CPU's) if
# the kernel lets it count them, at least those pages and at most the faults.
if len(sys.argv) < 3:
    print("spawn: not built (USLAB_BUILD_BENCH=OFF), not checked")
else:
    with tempfile.NamedTemporaryFile() as rep:
        prog = ("import mmap; m = mmap.mmap(-1, 2000 * 4096); m.madvise(mmap.MADV_NOHUGEPAGE)\n"
                "for i in range(0, 2000 * 4096, 4096): m[i] = 1")
        rc = os.spawnv(os.P_WAIT, sys.argv[2],
                       [sys.argv[2], rep.name, "-", sys.executable, "-c", prog])
        kv = dict(line.split("=", 1) for line in open(rep.name).read().split())
    if rc != 0 or int(kv.get("faults", 0)) < 2000:
        failures.append("spawn: rc %d, %r" % (rc, kv))
    elif "traps" in kv and not 2000 <= int(kv["traps"]) <= int(kv["faults"]):
        failures.append("spawn: traps %s, faults %s" % (kv["traps"], kv["faults"]))
    print("spawn: faults %s, traps %s" % (kv.get("faults"), kv.get("traps", "not counted")))

# glibc's malloc over a program's own allocator.
if len(sys.argv) >= 5:
    shim, probe = sys.argv[3], sys.argv[4]
    env = dict(os.environ, LD_PRELOAD=shim)
    out = subprocess.run([probe], env=env, capture_output=True, text=True).stdout
    if "allocator=glibc\n" not in out:
        failures.append("probe under libbench-glibc.so: %r" % out)
    if run.links_allocator(sys.executable) or run.links_allocator(None):
        failures.append("links_allocator: python3 or nothing links an allocator of its own")
    redis = shutil.which("redis-server")
    if redis and "libjemalloc" in subprocess.run(["ldd", redis], capture_output=True,
                                                 text=True).stdout:
        if not run.links_allocator(redis):
            failures.append("links_allocator: %s links jemalloc" % redis)
        r = subprocess.run([redis, "--version"], capture_output=True, text=True,
                           env=dict(env, LD_DEBUG="bindings"))
        bound = [line for line in r.stderr.splitlines()
                 if "binding file " + redis in line and "normal symbol `malloc'" in line]
        if r.returncode != 0 or not bound or not all("libbench-glibc" in b for b in bound):
            failures.append("redis-server under libbench-glibc.so: rc %d, malloc bound %r"
                            % (r.returncode, bound))
        else:
            print("redis-server: malloc bound to libbench-glibc.so")
    else:
        print("redis-server with jemalloc: not installed, not checked")

for f in failures:
    print("FAIL", f)
print("bench ratios ok" if not failures else "bench ratios FAILED")
sys.exit(1 if failures else 0)
