#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/counts.py: cachegrind's files read and summed (only a row's own processes where
it says so), the modelled cost and its ratios, and, with valgrind and the benchmarks built,
a real run of a command and of one of bench/'s rows under glibc and uslab (and an --extra
build with its setting): each counted, and a command whose output differs between
allocators refused.
Usage: bench_counts.py SOURCE_DIR BUILD_DIR"""
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

src, build = sys.argv[1], sys.argv[2]
spec = importlib.util.spec_from_file_location("bench_counts",
                                              os.path.join(src, "bench", "counts.py"))
counts = importlib.util.module_from_spec(spec)
spec.loader.exec_module(counts)
failures = []


def expect(what, got, want):
    if got != want:
        failures.append("%s: %r, expected %r" % (what, got, want))


with tempfile.TemporaryDirectory() as d:
    # Events in another order than EVENTS, and no branch events: the rest count 0.
    a = os.path.join(d, "cg.1")
    with open(a, "w") as f:
        f.write("desc: I1 cache: 32768 B, 64 B, 8-way associative\n"
                "cmd: /usr/bin/redis-server --port 0\nevents: Dr Ir D1mr DLmr\n"
                "fl=x.c\nfn=main\n1 5 10 1 0\nsummary: 500 1000 20 3\n")
    b = os.path.join(d, "cg.2")
    with open(b, "w") as f:
        f.write("cmd: /bin/sh redis.sh 20\nevents: Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw Bc "
                "Bcm Bi Bim\nsummary: 7 1 1 0 0 0 0 0 0 0 2 0 1\n")
    cmd, c = counts.read_counts(a)
    expect("command", cmd, "/usr/bin/redis-server --port 0")
    expect("Ir", c["Ir"], 1000)
    expect("Dr", c["Dr"], 500)
    expect("Bcm", c["Bcm"], 0)
    expect("cost", counts.cost(c), 1000 + 10 * 20 + 100 * 3)
    expect("cost with branches", counts.cost(counts.read_counts(b)[1]),
           7 + 10 * 1 + 100 * 1 + 10 * (2 + 1))
    total, procs = counts.sum_counts([a, b])
    expect("sum", (total["Ir"], procs), (1007, ["redis-server", "sh"]))
    total, procs = counts.sum_counts([a, b], {"redis-server"})
    expect("only the server", (total["Ir"], procs), (1000, ["redis-server"]))
    bad = os.path.join(d, "cg.3")
    with open(bad, "w") as f:
        f.write("cmd: x\nevents: Ir D1mr\n")
    try:
        counts.read_counts(bad)
        failures.append("a file without its summary was read")
    except ValueError:
        pass

# The table: each row relative to its best, a missing cell left out of the geomean.
z = dict.fromkeys(counts.EVENTS, 0)
cs = {("p", "glibc"): dict(z, Ir=200), ("p", "uslab"): dict(z, Ir=100),
      ("q", "glibc"): dict(z, Ir=100), ("q", "uslab"): dict(z, Ir=400),
      ("r", "glibc"): dict(z, Ir=50)}
text, means = counts.table(["p", "q", "r"], ["glibc", "uslab"], cs)
expect("geomean glibc", round(means["glibc"], 6), round((2.0 * 1.0 * 1.0) ** (1 / 3), 6))
expect("geomean uslab", round(means["uslab"], 6), round((1.0 * 4.0) ** 0.5, 6))
if "| r | 1.000 | - |" not in text:
    failures.append("the row with one allocator: %s" % text)

# Every run's environment takes the same bytes on its stack: the smaller ones padded, a
# padding already there replaced, the rest kept.
envs = counts.padded([{"A": "1"}, {"A": "1", "LD_PRELOAD": "/x/libz.so", counts.PAD: "x" * 99},
                      {}])
expect("padded bytes", len({counts.env_bytes(e) for e in envs}), 1)
expect("the largest's padding", envs[1][counts.PAD], "")
expect("kept", (envs[0]["A"], envs[1]["LD_PRELOAD"]), ("1", "/x/libz.so"))
expect("bytes", counts.env_bytes({"AB": "cd"}), len("AB=cd") + 1 + 8)

# Repetitions: the median run's counts, and the spread of their costs.
mid, spread = counts.median_run([dict(z, Ir=110), dict(z, Ir=100), dict(z, Ir=104)])
expect("median run", (mid["Ir"], round(spread, 6)), (104, round(10 / 104, 6)))

# A real run, where valgrind and the built benchmarks are at hand.
ran = False
if shutil.which("valgrind") and os.path.exists(os.path.join(build, "bench", "probe")):
    ran = True
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "numbers")
        with open(data, "w") as f:
            rng = random.Random(1)
            f.write("".join("%d\n" % rng.randrange(10 ** 9) for _ in range(20000)))
        script = os.path.join(src, "bench", "counts.py")
        # An --extra build with a setting: uslab without thread caches takes its slow paths.
        extra = "notcache=%s,USLAB_TCACHE_MAX=0" % os.path.join(build, "libuslab-preload.so")
        p = subprocess.run([sys.executable, script, "--build", build, "--allocators",
                            "glibc,uslab", "--extra", extra, "--out", d, "--", "sort", "-n",
                            data], capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            failures.append("sort: exit %d: %s %s" % (p.returncode, p.stdout[-500:],
                                                      p.stderr[-500:]))
        else:
            res = json.load(open(os.path.join(d, "counts.json")))
            got = {r["allocator"]: r["Ir"] for r in res["counts"]}
            if sorted(got) != ["glibc", "notcache", "uslab"] or min(got.values()) < 10 ** 6:
                failures.append("sort's counts: %r" % got)
            elif got["notcache"] <= got["uslab"]:
                failures.append("the --extra setting made no difference: %r" % got)
            if abs(min(res["geomean"].values()) - 1.0) > 1e-9:
                failures.append("no allocator is the best: %r" % res["geomean"])
        # One of bench/'s own rows, named as run.py names it: it says which malloc it had.
        p = subprocess.run([sys.executable, script, "--build", build, "--allocators",
                            "glibc,uslab", "--out", d, "--only", "memory:16 B"],
                           capture_output=True, text=True, timeout=600)
        rows = json.load(open(os.path.join(d, "counts.json")))["counts"]
        if p.returncode != 0 or sorted((r["row"], r["allocator"]) for r in rows) != [
                ("memory:16 B", "glibc"), ("memory:16 B", "uslab")]:
            failures.append("memory:16 B: exit %d: %s" % (p.returncode, p.stdout[-500:]))
        # bench/probe prints which allocator it has: not the same output under both.
        p = subprocess.run([sys.executable, script, "--build", build, "--allocators",
                            "glibc,uslab", "--out", d, "--",
                            os.path.join(build, "bench", "probe")],
                           capture_output=True, text=True, timeout=600)
        if p.returncode != 1 or "output differs" not in p.stdout:
            failures.append("a differing output was not refused: exit %d: %s" % (
                p.returncode, p.stdout[-500:]))

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("bench counts ok" + ("" if ran else " (no valgrind or no built benchmarks: parsing only)"))
