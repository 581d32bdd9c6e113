#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/run.py's ratio to the best peer: the best of every peer found, Debian's and the
newest built from their sources (mimalloc 3, snmalloc), never an --extra build of uslab.
Usage: bench_ratios.py SOURCE_DIR"""
import importlib.util
import os
import sys

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

for f in failures:
    print("FAIL", f)
print("bench ratios ok" if not failures else "bench ratios FAILED")
sys.exit(1 if failures else 0)
