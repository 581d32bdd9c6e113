#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Runs uslab's benchmark suite against glibc and every peer allocator installed.

Every benchmark is a plain program calling malloc/free; LD_PRELOAD selects the allocator.
Each run prints key=value lines, among them "allocator=<name>" (which library's malloc
the process really used, see bench/common.h): a run whose allocator does not match the
one preloaded is refused. For programs that cannot say (python3, sqlite3, perl, jq, lua,
bc, gcc, redis, git), bench/probe is run under the same environment first, and every run
of a program must print what the case's first run printed (a run that does not fails).
A program not installed leaves its row out, with a note in the report.

Allocators are interleaved run by run: each repetition runs every allocator once, in an
order that rotates between repetitions. Results: medians, spread, mean and standard
deviation, ratios to glibc and to the best peer, peak RSS (ru_maxrss of the child) and page
faults (its ru_minflt + ru_majflt, which do not move with the machine's load).

Output: a table on stdout, bench/results/<benchmark>.csv, results.json, report.md, and
plots (PNG, via bench/plot.py under an interpreter that has matplotlib).

Usage: python3 bench/run.py [--quick | --full] [--build build] [--only size,cfrac,large:regrow]
                            [--reps N] [--allocators glibc,uslab] [--out bench/results]
"""
import argparse
import csv
import hashlib
import datetime
import glob
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEERS = [
    # name, sonames looked up in the library path and the usual directories
    ("mimalloc", ["libmimalloc.so.2", "libmimalloc.so"]),
    ("jemalloc", ["libjemalloc.so.2", "libjemalloc.so"]),
    ("tcmalloc", ["libtcmalloc_minimal.so.4", "libtcmalloc_minimal.so"]),
]
# The newest peers, built from their public sources by bench/build_peers.sh (not
# committed): name, library under bench/, and what bench/probe calls its malloc.
BUILT_PEERS = [
    ("mimalloc3", "peers/mimalloc3/libmimalloc.so", "mimalloc"),
    ("snmalloc", "peers/snmalloc/libsnmallocshim.so", "snmalloc"),
]
LIBDIRS = ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
           "/usr/local/lib"]


# ---- benchmark definitions ---------------------------------------------------------------

class Case:
    """One program invocation, measured by some of the keys it prints."""

    def __init__(self, group, name, argv, metrics, quick_args=None, full_args=None,
                 quick_reps=None, full_reps=None, program=False, timeout=600, env=None,
                 own_malloc_of=None):
        self.group = group          # benchmark (CSV file name, plot)
        self.name = name            # case within the benchmark
        self.argv = argv            # program and common args (program path filled in later)
        self.metrics = metrics      # [(key, unit, label)]; key "wall_s" = measured wall time
        self.quick_args = quick_args or []
        self.full_args = full_args or []
        self.quick_reps = quick_reps
        self.full_reps = full_reps
        self.program = program      # an outside program: probe first, no allocator= line
        self.timeout = timeout
        self.env = env or {}        # extra environment of every run (PYTHONMALLOC=malloc)
        # a binary the case runs that links an allocator of its own (Debian's redis-server:
        # jemalloc): its glibc column preloads bench/glibc_malloc.c to measure glibc
        self.own_malloc = links_allocator(own_malloc_of)


def links_allocator(binary):
    """Whether binary links a malloc library of its own (ldd)."""
    if not binary:
        return False
    try:
        out = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    except OSError:
        return False
    return any(lib in out for lib in ("libjemalloc", "libtcmalloc", "libmimalloc"))


# jq's program for the jq row: objects made, transformed, grouped and printed.
JQ_PROGRAM = ('[range($n) | {id: ., name: "user\\(.)", tags: [range(. % 7) | tostring],'
              ' score: ((. * 7919) % 1000)}] | map(select(.score > 300) | .tags |= join(","))'
              ' | group_by(.score % 50) | map({k: (.[0].score % 50), n: length,'
              ' names: (map(.name) | join(" ") | length)})')


def cases(bindir, full):
    b = lambda name: os.path.join(bindir, name)  # noqa: E731
    out = []
    for a, bt in ((2, 20), (10, 10), (20, 2)):
        out.append(Case("size", "a=%d,b=%d" % (a, bt),
                        [b("size_bench"), "--alpha", str(a), "--beta", str(bt)],
                        [("ns_per_pair", "ns", "ns per malloc+touch+free")],
                        ["--count", "200000", "--iterations", "3"],
                        ["--count", "1000000", "--iterations", "5"]))
    for d in (20, 200, 2000, 20000):
        out.append(Case("lifetime", "d=%d" % d, [b("lifetime_bench"), "--distance", str(d)],
                        [("ns_per_op", "ns", "ns per operation")],
                        ["--count", "200000", "--iterations", "2"],
                        ["--count", "1000000", "--iterations", "3"]))
    out.append(Case("cfrac", "thesis N", [b("cfrac")],
                    [("time_s", "s", "time"), ("alloc_share", "", "allocator share")],
                    ["--compare", "1"], ["--compare", "3"]))
    for s in (8, 16, 32, 48, 64, 128, 256):
        out.append(Case("memory", "%d B" % s, [b("memory_bench"), "--size", str(s)],
                        [("rss_increase_mib", "MiB", "RSS increase for 1M objects")],
                        quick_reps=1, full_reps=3))
    out.append(Case("fastpath", "64 B", [b("fastpath_bench"), "--size", "64"],
                    [(k + "_ns", "ns", k) for k in
                     ("alloc", "free", "pair", "conc_alloc", "conc_free", "remote_alloc",
                      "remote_free")] +
                    [(k + "_ticks", "ticks", k + " (rdtsc)") for k in
                     ("alloc", "free", "pair", "conc_alloc", "conc_free", "remote_free")],
                    ["--rounds", "50"], ["--rounds", "200"]))
    out.append(Case("small", "25-1600", [b("small_bench")],
                    [("n%d_s%d_ns" % (n, s), "ns", "%d x 0x%x" % (n, s))
                     for n in (25, 100, 600, 1600) for s in (0x10, 0x40, 0x70, 0x90)] +
                    [("calloc_n100_s%d_ns" % s, "ns", "calloc 100 x 0x%x" % s)
                     for s in (0x10, 0x40, 0x70, 0x90)],
                    ["--reps", "500"], ["--reps", "5000"]))
    out.append(Case("objcache", "conn", [b("objcache_bench")],
                    [("malloc_ns", "ns", "malloc+ctor+dtor+free"),
                     ("cache_ns", "ns", "uslab_cache alloc+free"),
                     ("nomagazine_ns", "ns", "uslab_cache NOMAGAZINE")],
                    ["--rounds", "5000"], ["--rounds", "50000"]))
    # A working set of 10 MiB (9,000 connections of about 1.1 KiB): the objects stay
    # constructed only if the depot keeps what the program cycles (design §4).
    out.append(Case("objcache", "conn 10 MiB", [b("objcache_bench"), "--live", "9000"],
                    [("malloc_ns", "ns", "malloc+ctor+dtor+free"),
                     ("cache_ns", "ns", "uslab_cache alloc+free"),
                     ("nomagazine_ns", "ns", "uslab_cache NOMAGAZINE"),
                     ("cache_ctor_calls", "", "constructor calls (cache: 9,000 if kept)")],
                    ["--rounds", "30"], ["--rounds", "150"]))
    # Blocks above the small classes: medium ones (to 256 KiB by default) in spans of their
    # own, larger ones glibc's (design §8).
    large = [("buffers", ["--steps", "600"], ["--steps", "2000"]),
             ("churn", ["--steps", "300"], ["--steps", "1000"]),
             ("mixed", ["--steps", "6000"], ["--steps", "20000"]),
             ("realloc", ["--steps", "100"], ["--steps", "300"]),
             ("prodcons", ["--steps", "6000"], ["--steps", "20000"]),
             ("calloc", ["--steps", "6000"], ["--steps", "20000"]),
             # issue 38's patterns: medium blocks in churn, every power of two and its +1,
             # large alignments, realloc growth with small blocks in between
             ("medium", ["--steps", "300000"], ["--steps", "1000000"]),
             # pow2: at 300 steps (0.3 ms) its first steps, which fault the blocks in and
             # tune glibc, were a third of the row; 3,000 steps measure the steady state
             ("pow2", ["--steps", "3000"], ["--steps", "10000"]),
             ("align", ["--steps", "10000"], ["--steps", "40000"]),
             ("regrow", ["--steps", "20000"], ["--steps", "60000"]),
             # redis's lists: nodes grown by small reallocs, then small blocks (peak RSS)
             ("nodes", ["--steps", "3"], ["--steps", "10"])]
    for t, q, f in large:
        out.append(Case("large", t, [b("large_bench"), "--test", t], [("ms", "ms", "time")], q, f))
    # A process's start (exec of a program that mallocs 20 blocks) and a fork with a live
    # heap: what a preloaded allocator adds to every process and every fork (quiet guest).
    for t, q, f in (("start", ["--steps", "300"], ["--steps", "1000"]),
                    ("fork", ["--steps", "1000"], ["--steps", "3000"])):
        out.append(Case("process", t, [b("process_bench"), "--test", t],
                        [("ms", "ms", "time a process or a fork")], q, f))
    # issue 38's pattern: C++ containers through operator new and delete.
    for t in ("umap", "map"):
        out.append(Case("cxx", t, [b("cxx_bench"), "--test", t], [("ms", "ms", "time")],
                        ["--rounds", "3"], ["--rounds", "10"]))
    mt = [("larson", ["--epochs", "60"], ["--epochs", "300"]),
          ("xmalloc", ["--blocks", "1000000"], ["--blocks", "4000000"]),
          ("scratch", ["--iterations", "30000"], ["--iterations", "100000"]),
          ("churn", ["--generations", "1500"], ["--generations", "5000"]),
          ("bulk", ["--count", "500000", "--rounds", "4"], ["--count", "1000000", "--rounds", "10"]),
          ("large", ["--steps", "5000"], ["--steps", "20000"]),
          # sh6bench's shape with twice as many threads as this machine's 2 cores.
          ("lifo", ["--rounds", "1500", "--threads", "4"], ["--rounds", "5000", "--threads", "4"])]
    for t, q, f in mt:
        threads = [] if "--threads" in q else ["--threads", "2"]
        out.append(Case("mt", t, [b("mt_bench"), "--test", t] + threads,
                        [("time_s", "s", "time")], q, f))
    # issue 38: 3,000 live threads; peak RSS is what a thread costs, joined_mib what stays.
    out.append(Case("mt", "live", [b("mt_bench"), "--test", "live", "--threads", "3000"],
                    [("time_s", "s", "time"), ("joined_mib", "MiB", "resident once joined")],
                    [], []))
    # mimalloc-bench's glibc-thread, mleak and rptestN (bench.sh: `glibc-thread <procs>`,
    # `mleak 5` and `mleak 50`, `rptest <procs> 0 1 2 500 1000 100 8 16000`); <procs> is
    # this machine's 2 cores, mleak's 10 threads are fixed in mleak.c. glibcthread counts
    # iterations per thread (the original runs 2 s); mleak quick is mleak10's 500 rounds,
    # full mleak100's 5,000; rptest repeats mimalloc-bench's run (2 starts of the threads,
    # 2 passes of 500 loops each) by starting the threads 4 (full: 12) times.
    out.append(Case("mt", "glibcthread",
                    [b("mt_bench"), "--test", "glibcthread", "--threads", "2"],
                    [("time_s", "s", "time")],
                    ["--iterations", "10000000"], ["--iterations", "30000000"]))
    out.append(Case("mt", "mleak", [b("mt_bench"), "--test", "mleak", "--threads", "10"],
                    [("time_s", "s", "mleak: time"),
                     ("joined_mib", "MiB", "mleak: resident once joined")],
                    ["--rounds", "500"], ["--rounds", "5000"]))
    out.append(Case("mt", "rptest", [b("mt_bench"), "--test", "rptest", "--threads", "2"],
                    [("time_s", "s", "rptest: time"),
                     ("sample_rss_mib", "MiB", "rptest: resident at the sample")],
                    ["--rounds", "4"], ["--rounds", "12"]))
    py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else shutil.which("python3")
    progs = os.path.join(HERE, "programs")
    if py:
        out.append(Case("programs", "python3", [py, os.path.join(progs, "alloc.py")],
                        [("wall_s", "s", "wall time")], ["100000"], ["300000"], program=True))
        # Every object through malloc, not pymalloc's arenas: the allocator's own work.
        out.append(Case("programs", "python3-malloc", [py, os.path.join(progs, "alloc.py")],
                        [("wall_s", "s", "wall time")], ["100000"], ["300000"], program=True,
                        env={"PYTHONMALLOC": "malloc"}))
    if shutil.which("sqlite3"):
        out.append(Case("programs", "sqlite3",
                        [shutil.which("sqlite3"), ":memory:", ".read " +
                         os.path.join(progs, "sqlite.sql")],
                        [("wall_s", "s", "wall time")], program=True))
    if shutil.which("perl"):
        out.append(Case("programs", "perl", [shutil.which("perl"), os.path.join(progs, "hash.pl")],
                        [("wall_s", "s", "wall time")], ["60000"], ["200000"], program=True))
    # issue 12's other real programs. jq builds, filters and prints a generated document
    # (no input file); git runs many short processes in its own right, here blame and log
    # of uslab's own history (only in a git checkout of it).
    if shutil.which("jq"):
        out.append(Case("programs", "jq", [shutil.which("jq"), "-n", "-c", "--argjson", "n"],
                        [("wall_s", "s", "wall time")], ["30000", JQ_PROGRAM],
                        ["100000", JQ_PROGRAM], program=True))
    # issue 38: an interpreter more, a calculator, a compiler and a server under load.
    if shutil.which("lua5.4"):
        out.append(Case("programs", "lua", [shutil.which("lua5.4"),
                                            os.path.join(progs, "tables.lua")],
                        [("wall_s", "s", "wall time")], ["200000"], ["600000"], program=True))
    if shutil.which("bc"):
        out.append(Case("programs", "bc", [shutil.which("bc"), "-q",
                                           os.path.join(progs, "pi.bc")],
                        [("wall_s", "s", "wall time")], program=True))
    if shutil.which("gcc"):
        # cc1 compiles uslab's largest file: the driver's children inherit LD_PRELOAD.
        out.append(Case("programs", "gcc", [shutil.which("gcc"), "-O2", "-S", "-o", "-",
                                            "-I" + os.path.join(os.path.dirname(HERE), "src"),
                                            "-I" + os.path.join(os.path.dirname(HERE),
                                                                "include"),
                                            os.path.join(os.path.dirname(HERE), "src",
                                                         "os_linux.c")],
                        [("wall_s", "s", "wall time")], program=True))
    if shutil.which("redis-server") and shutil.which("redis-benchmark"):
        out.append(Case("programs", "redis", [os.path.join(progs, "redis.sh")],
                        [("wall_s", "s", "wall time")], ["20000"], ["100000"], program=True,
                        own_malloc_of=shutil.which("redis-server")))
    for prog, pkg in (("lua5.4", "lua5.4"), ("bc", "bc"), ("gcc", "gcc"),
                      ("redis-server", "redis-server"), ("sqlite3", "sqlite3"), ("perl", "perl"),
                      ("jq", "jq"), ("git", "git")):
        if not shutil.which(prog):
            MISSING_PROGRAMS.append("%s (apt-get install %s)" % (prog, pkg))
    top = os.path.dirname(HERE)
    if shutil.which("git") and os.path.isdir(os.path.join(top, ".git")):
        out.append(Case("programs", "git", [shutil.which("git"), "-C", top, "log", "-p",
                                            "--stat", "--no-color"],
                        [("wall_s", "s", "wall time")], ["-n", "60"], ["-n", "300"],
                        program=True))
    return out


# ---- allocators ---------------------------------------------------------------------------

def find_lib(sonames):
    for so in sonames:
        for d in LIBDIRS:
            p = os.path.join(d, so)
            if os.path.exists(p):
                return p
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            for so in sonames:
                if line.strip().startswith(so + " ") and "=>" in line:
                    return line.split("=>")[1].strip()
    except OSError:
        pass
    return None


def discover(build, wanted):
    allocs, skipped = [], {}
    allocs.append(("glibc", None))
    uslab = os.path.join(build, "libuslab-preload.so")
    if os.path.exists(uslab):
        allocs.append(("uslab", uslab))
    else:
        skipped["uslab"] = "not built (%s missing)" % uslab
    for name, sonames in PEERS:
        p = find_lib(sonames)
        if p:
            allocs.append((name, p))
        else:
            skipped[name] = "not installed (%s not found)" % sonames[0]
    for name, rel, _ in BUILT_PEERS:
        p = os.path.join(HERE, rel)
        if os.path.exists(p):
            allocs.append((name, p))
        else:
            skipped[name] = "not built (bench/build_peers.sh builds it from its public sources)"
    if wanted:
        for n, _ in allocs:
            if n not in wanted:
                skipped[n] = "not selected (--allocators)"
        allocs = [a for a in allocs if a[0] in wanted]
    return allocs, skipped


EXTRA_ENV = {}  # preload library path -> settings of an --extra allocator


def env_for(lib):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if lib:
        lib, _, key = lib.partition("#")  # "#n" tells two --extra runs of one library apart
        env["LD_PRELOAD"] = lib
        env.update(EXTRA_ENV.get(lib + "#" + key if key else lib, {}))
    env["LC_ALL"] = "C"
    return env


def parse_kv(text):
    kv = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith(" "):
            k, v = line.split("=", 1)
            k = k.strip()
            if k and " " not in k:
                kv[k] = v.strip()
    return kv


SPAWN = None  # bench/spawn, set in main()
GLIBC_MALLOC = None  # bench/libbench-glibc.so, set in main()
MISSING_PROGRAMS = []  # real programs not installed: their rows are left out, with a note


def run_once(argv, env, timeout):
    """Runs argv under env's LD_PRELOAD through bench/spawn; returns
    (rc, stdout, stderr, wall seconds, maxrss KiB of the program itself, its page faults,
    its page-fault traps or None where the kernel did not let spawn count them)."""
    preload = env.get("LD_PRELOAD") or "-"
    env = dict(env)
    env.pop("LD_PRELOAD", None)  # the launcher itself runs without it
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile(prefix="uslab-bench-") as rep:
        t0 = time.perf_counter()
        p = subprocess.Popen([SPAWN, rep.name, preload] + argv, stdout=out, stderr=err,
                             stdin=subprocess.DEVNULL, env=env)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            rc = -9
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        with open(rep.name) as f:
            kv = parse_kv(f.read())
        if "wall_ns" in kv:
            wall = int(kv["wall_ns"]) * 1e-9
        return (rc, out.read().decode(errors="replace"), err.read().decode(errors="replace"),
                wall, int(kv.get("maxrss_kb", 0)), int(kv.get("faults", 0)),
                int(kv["traps"]) if "traps" in kv else None)


def probe(bindir, allocs):
    """Checks that each preload really replaces malloc; returns {name: detected}."""
    res = {}
    exe = os.path.join(bindir, "probe")
    for name, lib in allocs:
        rc, out, err = run_once([exe], env_for(lib), 30)[:3]
        res[name] = parse_kv(out).get("allocator", "error rc=%d %s" % (rc, err.strip()[:200]))
    return res


# ---- statistics and output -------------------------------------------------------------------

def summarize(vals):
    if not vals:
        return None
    med = statistics.median(vals)
    mean = statistics.fmean(vals)
    std = statistics.stdev(vals) if len(vals) > 1 else 0.0
    return {"n": len(vals), "median": med, "mean": mean, "std": std, "min": min(vals),
            "max": max(vals),
            "spread_pct": 100.0 * (max(vals) - min(vals)) / med if med else 0.0}


def fmt(v):
    if v is None:
        return "-"
    a = abs(v)
    if a >= 1000:
        return "%.0f" % v
    if a >= 100:
        return "%.1f" % v
    if a >= 1:
        return "%.2f" % v
    return "%.3g" % v


def machine_info(build):
    info = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
            "nproc": os.cpu_count(), "kernel": platform.release(),
            "machine": platform.machine()}
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                info["cpu"] = line.split(":", 1)[1].strip()
    except OSError:
        info["cpu"] = platform.processor()
    try:
        info["glibc"] = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError):
        info["glibc"] = "?"
    cc = "cc"
    cache = os.path.join(build, "CMakeCache.txt")
    if os.path.exists(cache):
        for line in open(cache):
            if line.startswith("CMAKE_C_COMPILER:"):
                cc = line.split("=", 1)[1].strip()
            if line.startswith("CMAKE_BUILD_TYPE:"):
                info["build_type"] = line.split("=", 1)[1].strip()
    try:
        info["compiler"] = subprocess.run([cc, "--version"], capture_output=True,
                                          text=True).stdout.splitlines()[0]
    except (OSError, IndexError):
        info["compiler"] = cc
    try:
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "src",
                                "include", "bench"],
                               capture_output=True, text=True).stdout.strip()
        info["git_commit"] = commit + (" (+uncommitted changes)" if dirty else "")
    except OSError:
        info["git_commit"] = "?"
    info["loadavg_start"] = " ".join("%.2f" % x for x in os.getloadavg())
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version}\\n",
                              "libmimalloc2.0", "libjemalloc2", "libtcmalloc-minimal4",
                              "python3", "sqlite3", "perl"],
                             capture_output=True, text=True).stdout
        info["packages"] = [l for l in out.splitlines() if l.strip()]
    except OSError:
        pass
    return info


def rows_for(results, names):
    """Yields (case, metric, unit, label, {alloc: summary})."""
    for c in results["cases"]:
        for key, unit, label in c["metrics"]:
            stats = {}
            for a in names:
                vals = c["values"].get(a, {}).get(key, [])
                stats[a] = summarize(vals)
            if any(stats.values()):
                yield c, key, unit, label, stats


# Every peer the ratio to the best peer looks at: Debian's and the newest, built from their
# sources (an --extra build is uslab under another name, never a peer).
PEER_NAMES = [name for name, _ in PEERS] + [name for name, _, _ in BUILT_PEERS]


def ratios(stats):
    """uslab / glibc and uslab / best peer (all metrics here: lower is better)."""
    u = stats.get("uslab")
    g = stats.get("glibc")
    peers = [stats[p]["median"] for p in PEER_NAMES if stats.get(p) and stats[p]["median"] > 0]
    rg = u["median"] / g["median"] if u and g and g["median"] else None
    rp = u["median"] / min(peers) if u and peers else None
    return rg, rp


HIGHER_IS_NEUTRAL = {"alloc_share"}


def print_table(results, names):
    head = ["benchmark", "case", "metric"] + names + ["uslab/glibc", "uslab/best peer"]
    rows = []
    for c, key, unit, label, stats in rows_for(results, names):
        rg, rp = ratios(stats) if key not in HIGHER_IS_NEUTRAL else (None, None)
        cells = [c["group"], c["name"], key + (" [%s]" % unit if unit else "")]
        for a in names:
            s = stats.get(a)
            if s is None:
                cells.append(results["failures_by"].get(c["id"], {}).get(a, "-"))
            else:
                cells.append(fmt(s["median"]) + (" ±%.0f%%" % s["spread_pct"]
                                                  if s["n"] > 1 else ""))
        cells += [fmt(rg) if rg else "-", fmt(rp) if rp else "-"]
        rows.append(cells)
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(head, widths)),
             "  ".join("-" * w for w in widths)]
    for r in rows:
        lines.append("  ".join(str(x).ljust(w) if i < 3 else str(x).rjust(w)
                               for i, (x, w) in enumerate(zip(r, widths))))
    return "\n".join(lines)


def is_time_row(c, key, unit):
    """A row of the summary's time: timed (ns, ms or s), not a min or cold-run figure, and
    not the object-cache case (its cache columns are uslab's API under every preload)."""
    return (unit in ("ns", "ms", "s") and key not in HIGHER_IS_NEUTRAL and "_min_" not in key
            and "_cold_" not in key and c["group"] != "objcache")


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summary(results, names):
    """The issue-12 headline: per allocator, the geometric mean over cases of its median
    relative to the best allocator's (time) and to the smallest (peak RSS). Each case
    counts once: its timed rows are combined first (geometric mean)."""
    per_case = {}
    for c, key, unit, label, stats in rows_for(results, names):
        if not is_time_row(c, key, unit):
            continue
        meds = {a: stats[a]["median"] for a in names if stats.get(a) and stats[a]["median"] > 0}
        if len(meds) != len(names):
            continue  # an allocator failed or was refused here: not comparable
        best = min(meds.values())
        per_case.setdefault(c["id"], []).append({a: m / best for a, m in meds.items()})
    time_rel = {a: geomean([geomean([r[a] for r in rows]) for rows in per_case.values()])
                for a in names}
    rss_cases = []
    for c in results["cases"]:
        if c["group"] == "objcache":
            continue
        meds = {a: statistics.median(c["maxrss_kb"][a]) for a in names
                if c["maxrss_kb"].get(a)}
        if len(meds) == len(names) and min(meds.values()) > 0:
            rss_cases.append({a: m / min(meds.values()) for a, m in meds.items()})
    rss_rel = {a: geomean([r[a] for r in rss_cases]) for a in names}
    head = "geometric mean over cases, each allocator relative to the best of each row (1 = best)"
    w = max(len(a) for a in names)
    lines = [head,
             "  %-8s  " % "" + "  ".join(a.rjust(max(w, 8)) for a in names),
             "  %-8s  " % "time" + "  ".join(
                 ("%.3f" % time_rel[a] if time_rel[a] else "-").rjust(max(w, 8)) for a in names)
             + "   (%d cases)" % len(per_case),
             "  %-8s  " % "peak RSS" + "  ".join(
                 ("%.3f" % rss_rel[a] if rss_rel[a] else "-").rjust(max(w, 8)) for a in names)
             + "   (%d cases)" % len(rss_cases)]
    return "\n".join(lines)


def write_csv(results, names, outdir):
    groups = {}
    for c, key, unit, label, stats in rows_for(results, names):
        groups.setdefault(c["group"], []).append((c, key, unit, stats))
    for g, rows in groups.items():
        # The csv module quotes a field with a comma: the size cases are named "a=2,b=20".
        with open(os.path.join(outdir, g + ".csv"), "w", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(["benchmark", "case", "metric", "unit", "allocator", "n", "median", "mean",
                        "std", "min", "max", "spread_pct", "ratio_glibc", "ratio_best_peer",
                        "maxrss_kb_median", "faults_median", "traps_median"])
            for c, key, unit, stats in rows:
                glibc = stats.get("glibc")
                for a in names:
                    s = stats.get(a)
                    if not s:
                        continue
                    rg = s["median"] / glibc["median"] if glibc and glibc["median"] else ""
                    bp = [stats[p]["median"] for p in PEER_NAMES if p != a and stats.get(p)]
                    rp = s["median"] / min(bp) if bp and min(bp) else ""
                    rss = c["maxrss_kb"].get(a, [])
                    flt = c.get("faults", {}).get(a, [])
                    trp = c.get("traps", {}).get(a, [])
                    w.writerow([c["group"], c["name"], key, unit, a, "%d" % s["n"]] +
                               ["%g" % s[k] for k in ("median", "mean", "std", "min", "max")] +
                               ["%.1f" % s["spread_pct"], "%.4f" % rg if rg != "" else "",
                                "%.4f" % rp if rp != "" else "",
                                "%d" % statistics.median(rss) if rss else "",
                                "%d" % statistics.median(flt) if flt else "",
                                "%d" % statistics.median(trp) if trp else ""])


def write_report(results, names, table, outdir, plots):
    m = results["machine"]
    L = ["# uslab benchmark report", ""]
    if results.get("note"):
        L += ["> " + results["note"], ""]
    L += ["Mode: **%s**, %s repetitions per case (allocators interleaved run by run)." % (
        results["mode"], results["reps"]), ""]
    L += ["## Machine", "", "| | |", "|---|---|"]
    for k in ("date", "cpu", "nproc", "machine", "kernel", "glibc", "compiler", "build_type",
              "git_commit", "loadavg_start", "loadavg_end"):
        if k in m:
            L.append("| %s | %s |" % (k, m[k]))
    for p in m.get("packages", []):
        L.append("| package | %s |" % p)
    L += ["", "## Allocators", ""]
    for a, lib in results["allocators"]:
        L.append("- **%s**: %s (probe: `%s`)" % (a, lib or "no preload (glibc malloc)",
                                                results["probe"].get(a, "?")))
    for a, why in results["skipped"].items():
        L.append("- %s: skipped, %s" % (a, why))
    for prog in results.get("missing_programs", []):
        L.append("- programs: %s not installed, its row left out" % prog)
    for case in results.get("own_malloc", []):
        L.append("- programs: %s links an allocator of its own; its glibc column preloads "
                 "bench/libbench-glibc.so (glibc's malloc, bench/glibc_malloc.c)" % case)
    L += ["", "## Results", "",
          "Medians (± spread = (max - min) / median over the repetitions). Lower is better for",
          "every metric except `alloc_share` (the share of cfrac's time spent allocating).",
          "Ratios are uslab's median over glibc's and over the best peer's (< 1: uslab faster).",
          "", "```", table, "```", ""]

    def per_case(title, key, scale):
        """A table of the median of c[key][allocator] / scale for every case."""
        T = [title, "", "| benchmark | case | " + " | ".join(names) + " |",
             "|---|---|" + "---|" * len(names)]
        for c in results["cases"]:
            cells = []
            for a in names:
                r = c.get(key, {}).get(a, [])
                cells.append("%.1f" % (statistics.median(r) / scale) if r else "-")
            T.append("| %s | %s | %s |" % (c["group"], c["name"], " | ".join(cells)))
        return T

    L += per_case("## Peak RSS (ru_maxrss of the benchmark process, MiB, median)", "maxrss_kb",
                  1024)
    # page faults per case: on a VM a fault can cost 10 us or more, and the count, unlike the
    # time, does not move with the machine's load (docs/benchmarks.md, session 58)
    L += [""] + per_case("## Page faults (minor + major, of the benchmark process and its "
                         "children, thousands, median)", "faults", 1000)
    # the faults the CPU took: ru_minflt also counts the pages MADV_POPULATE_WRITE made
    # present, which cost a VM about half a trap (docs/benchmarks.md, session 59)
    if any(c.get("traps") for c in results["cases"]):
        L += [""] + per_case("## Page-fault traps (the faults the CPU took, `perf stat -e "
                             "page-faults`; thousands, median)", "traps", 1000)
    else:
        L += ["", "No page-fault traps: the kernel did not let bench/spawn count them "
              "(perf_event_open, kernel.perf_event_paranoid)."]
    if results["failures"]:
        L += ["", "## Failed or refused runs", ""]
        for f in results["failures"]:
            L.append("- %s / %s under %s: %s" % (f["group"], f["case"], f["allocator"],
                                                  f["why"]))
    if plots:
        L += ["", "## Plots", ""]
        for p in plots:
            L.append("![%s](%s)" % (p, p))
    else:
        L += ["", "Plots: none (%s)." % results.get("plot_note", "matplotlib not found")]
    with open(os.path.join(outdir, "report.md"), "w") as f:
        f.write("\n".join(L) + "\n")


def make_plots(outdir):
    """Runs bench/plot.py with an interpreter that has matplotlib; returns (pngs, note)."""
    candidates = [sys.executable, "/usr/bin/python3", shutil.which("python3")]
    for py in [c for c in dict.fromkeys(candidates) if c]:
        chk = subprocess.run([py, "-c", "import matplotlib"], capture_output=True)
        if chk.returncode == 0:
            r = subprocess.run([py, os.path.join(HERE, "plot.py"), outdir],
                               capture_output=True, text=True)
            if r.returncode != 0:
                return [], "plot.py failed: " + r.stderr.strip()[-300:]
            return [l.strip() for l in r.stdout.splitlines() if l.strip().endswith(".png")], ""
    return [], "matplotlib is not installed (apt-get install python3-matplotlib); plots skipped"


# ---- main -------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, 3 repetitions (default)")
    ap.add_argument("--full", action="store_true", help="full sizes, 10 repetitions")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--only", default="", help="comma-separated benchmarks (size, lifetime, "
                    "cfrac, memory, fastpath, small, objcache, large, process, cxx, mt, "
                    "programs) or cases (large:regrow)")
    ap.add_argument("--reps", type=int, default=0)
    ap.add_argument("--allocators", default="")
    ap.add_argument("--out", default=os.path.join(HERE, "results"))
    ap.add_argument("--note", default="", help="a line put at the top of the report")
    ap.add_argument("--extra", action="append", default=[], metavar="NAME=LIB[,VAR=VALUE...]",
                    help="also run a build of uslab's preload library LIB under NAME, with "
                         "the given settings (e.g. before=/tmp/before/build/libuslab-preload.so "
                         "or notcache=build/libuslab-preload.so,USLAB_TCACHE_MAX=0), in the "
                         "same interleaved run")
    args = ap.parse_args()
    full = args.full
    reps = args.reps or (10 if full else 3)
    build = os.path.abspath(args.build)
    bindir = os.path.join(build, "bench")
    global SPAWN, GLIBC_MALLOC
    SPAWN = os.path.join(bindir, "spawn")
    GLIBC_MALLOC = os.path.join(bindir, "libbench-glibc.so")
    for need in (SPAWN, GLIBC_MALLOC):
        if not os.path.exists(need):
            sys.exit("run.py: %s not found: build first (make)" % need)
    os.makedirs(args.out, exist_ok=True)

    allocs, skipped = discover(build, set(filter(None, args.allocators.split(","))))
    # which malloc each allocator's runs must report: an extra build is uslab under a name
    expect = {name: name for name, _ in allocs}
    expect.update({name: family for name, _, family in BUILT_PEERS if name in expect})
    for i, e in enumerate(args.extra):
        name, _, spec = e.partition("=")
        lib, *settings = spec.split(",")
        if not name or not lib or name in expect or not all("=" in v for v in settings):
            ap.error("--extra %s: expected a new NAME=LIB[,VAR=VALUE...]" % e)
        key = "%s#%d" % (os.path.abspath(lib), i)
        EXTRA_ENV[key] = dict(v.split("=", 1) for v in settings)
        allocs.append((name, key))
        expect[name] = "uslab"
    probed = probe(bindir, allocs)
    ok = []
    for name, lib in allocs:
        if probed[name] == expect[name]:
            ok.append((name, lib))
        else:
            skipped[name] = "probe says malloc is '%s', not %s: refused" % (probed[name],
                                                                            expect[name])
    allocs = ok
    names = [a for a, _ in allocs]
    for a, why in skipped.items():
        print("note: %s skipped: %s" % (a, why))
    print("allocators: " + ", ".join("%s (%s)" % (a, lib or "no preload") for a, lib in allocs))

    only = set(filter(None, args.only.split(",")))
    todo = [c for c in cases(bindir, full)
            if not only or c.group in only or "%s:%s" % (c.group, c.name) in only]
    info = machine_info(build)
    results = {"mode": "full" if full else "quick", "reps": reps, "machine": info,
               "allocators": allocs, "skipped": skipped, "probe": probed, "cases": [],
               "failures": [], "failures_by": {}, "note": args.note,
               "missing_programs": MISSING_PROGRAMS,
               "own_malloc": [c.name for c in todo if c.own_malloc]}
    total = sum((c.full_reps if full else c.quick_reps) or reps for c in todo) * len(allocs)
    done = 0
    tty = sys.stderr.isatty()
    t_start = time.time()
    for ci, c in enumerate(todo):
        creps = (c.full_reps if full else c.quick_reps) or reps
        argv = c.argv + (c.full_args if full else c.quick_args)
        rec = {"id": ci, "group": c.group, "name": c.name, "argv": argv,
               "metrics": c.metrics, "values": {}, "maxrss_kb": {}, "faults": {}, "traps": {},
               "params": {}}
        results["failures_by"][ci] = {}
        for r in range(creps):
            order = allocs[r % len(allocs):] + allocs[:r % len(allocs)]
            for name, lib in order:
                done += 1
                msg = "[%3d/%d %4.0fs] %-9s %-10s %-9s rep %d/%d" % (
                    done, total, time.time() - t_start, c.group, c.name, name, r + 1, creps)
                if tty:
                    sys.stderr.write("\r" + msg + " " * 10)
                    sys.stderr.flush()
                else:
                    print(msg, file=sys.stderr, flush=True)
                env = dict(env_for(lib), **c.env)
                if name == "glibc" and c.own_malloc:
                    env["LD_PRELOAD"] = GLIBC_MALLOC
                if c.program:
                    # the program cannot say which malloc it got: probe the same environment
                    pr = parse_kv(run_once([os.path.join(bindir, "probe")], env, 30)[1])
                    got = pr.get("allocator")
                else:
                    got = None
                rc, out, err, wall, rss, faults, traps = run_once(argv, env, c.timeout)
                kv = parse_kv(out)
                if not c.program:
                    got = kv.get("allocator")
                why = None
                if c.program and rc == 0:
                    # Identical output under every allocator: the first run's is the reference.
                    digest = hashlib.sha256(out.encode()).hexdigest()
                    ref = rec.setdefault("output_sha256", digest)
                    if digest != ref:
                        why = "output differs from the first run's: %s" % out.strip()[-200:]
                if rc != 0:
                    why = "exit status %d: %s" % (rc, (err.strip() or out.strip())[-300:])
                elif got != expect[name]:
                    why = "refused: the run's malloc was '%s', not %s" % (got, expect[name])
                elif kv.get("verified", "1") != "1":
                    why = "wrong result (verified=%s): %s" % (kv.get("verified"), out[-300:])
                if why:
                    results["failures"].append({"group": c.group, "case": c.name,
                                                "allocator": name, "rep": r, "why": why})
                    results["failures_by"][ci][name] = "FAIL"
                    continue
                kv["wall_s"] = "%.6f" % wall
                vals = rec["values"].setdefault(name, {})
                for key, _, _ in c.metrics:
                    if key in kv:
                        try:
                            vals.setdefault(key, []).append(float(kv[key]))
                        except ValueError:
                            pass
                rec["maxrss_kb"].setdefault(name, []).append(rss)
                rec["faults"].setdefault(name, []).append(faults)
                if traps is not None:
                    rec["traps"].setdefault(name, []).append(traps)
                if not rec["params"]:
                    rec["params"] = {k: v for k, v in kv.items()
                                     if k not in ("allocator", "allocator_path", "wall_s")
                                     and k not in dict((m[0], 1) for m in c.metrics)}
        results["cases"].append(rec)
    if tty:
        sys.stderr.write("\n")
    info["loadavg_end"] = " ".join("%.2f" % x for x in os.getloadavg())
    info["elapsed_s"] = round(time.time() - t_start, 1)
    results["failures_by"] = {str(k): v for k, v in results["failures_by"].items()}
    fb = {int(k): v for k, v in results["failures_by"].items()}
    results_tbl = dict(results, failures_by=fb)
    table = print_table(results_tbl, names) + "\n\n" + summary(results_tbl, names)
    print()
    print(table)
    if results["failures"]:
        print("\nfailed or refused runs:")
        for f in results["failures"]:
            print("  %s / %s under %s (rep %d): %s" % (f["group"], f["case"], f["allocator"],
                                                       f["rep"] + 1, f["why"]))
    print("\n(%s mode, %d repetitions, %.0f s; load average %s -> %s)" % (
        results["mode"], reps, info["elapsed_s"], info["loadavg_start"], info["loadavg_end"]))
    # outputs
    for old in glob.glob(os.path.join(args.out, "*.csv")):
        os.remove(old)
    write_csv(results_tbl, names, args.out)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    plots, note = make_plots(args.out)
    results["plot_note"] = note
    if note:
        print("note: " + note)
    write_report(results_tbl | {"plot_note": note}, names, table, args.out, plots)
    print("wrote %s/{results.json,report.md,*.csv%s}" % (args.out, ",*.png" if plots else ""))
    return 1 if results["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
