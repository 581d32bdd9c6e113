#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The leak report of a process that exits from a signal handler (issue 16, docs/design.md
§9): runs `large_cases exit_in_handler` under the preload library, whose SIGALRM handler
calls exit(0) while the main loop is inside malloc or free of a 48- or 100,000-byte block.
The interrupted call may hold a cache lock or the large table's lock; the report at exit
must neither wait for it (a hang: the run times out) nor assert that no lock is held (an
abort). Every run must exit 0 with a report: text (USLAB_LEAKS=1) and JSON
(USLAB_LEAKS=json) alternate. A cache or table whose lock was busy is named as not scanned.

At least RUNS runs; if none of them met a busy lock (the signal landed outside the locked
part of every call), more, up to MAX_RUNS, until one does: the skipping path is exercised.

Usage: leak_exit_check.py PROGRAM PRELOAD [RUNS [MAX_RUNS]]
"""
import json
import os
import re
import subprocess
import sys

SUMMARY = re.compile(r"^uslab: leak report: \d+ live objects, \d+ bytes, "
                     r"from \d+ allocation sites$", re.M)
NOT_SCANNED = re.compile(r"^uslab: leak report: .* not scanned: .*$", re.M)
TIMEOUT = 20


def fail(msg, output=""):
    sys.exit("FAIL: %s\n--- output ---\n%s\n--- end ---" % (msg, output[-4000:]))


def one_run(program, preload, attempt):
    mode = "json" if attempt % 2 else "1"
    env = {k: v for k, v in os.environ.items() if not k.startswith("USLAB_")}
    env.update(LD_PRELOAD=preload, USLAB_LEAKS=mode)
    try:
        p = subprocess.run([program, "exit_in_handler"], env=env, capture_output=True,
                           text=True, errors="replace", timeout=TIMEOUT)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
        fail("run %d (USLAB_LEAKS=%s): still running after %d s (deadlock at exit?)" %
             (attempt, mode, TIMEOUT), err or "")
    if p.returncode != 0:
        fail("run %d (USLAB_LEAKS=%s): exit status %d, expected 0" %
             (attempt, mode, p.returncode), p.stderr)
    if mode == "json":
        try:
            doc = json.loads(p.stderr)["uslab_leaks"]
        except (ValueError, KeyError) as e:
            fail("run %d: not one JSON leak report: %s" % (attempt, e), p.stderr)
        skipped = doc.get("not_scanned")
        if not isinstance(skipped, list):
            fail("run %d: no not_scanned list" % attempt, p.stderr)
        return skipped
    if not SUMMARY.search(p.stderr):
        fail("run %d: no leak report summary line" % attempt, p.stderr)
    return NOT_SCANNED.findall(p.stderr)


def main():
    program, preload = sys.argv[1:3]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 30
    max_runs = int(sys.argv[4]) if len(sys.argv) > 4 else 200
    busy = 0
    attempt = 0
    while attempt < runs or (busy == 0 and attempt < max_runs):
        attempt += 1
        skipped = one_run(program, preload, attempt)
        if skipped:
            busy += 1
            if busy == 1:
                print("run %d skipped: %s" % (attempt, skipped))
    if busy == 0:
        fail("%d runs, none met a busy lock: the skipping path was not exercised" % attempt)
    print("ok: %d runs exited 0 with a report, %d of them skipped a busy lock" %
          (attempt, busy))


main()
