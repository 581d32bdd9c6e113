#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The reports at exit of a process that exits from a signal handler (docs/design.md §9,
§10): runs `large_cases exit_in_handler` under the preload library, whose SIGALRM handler
calls exit(0) while the main loop is inside malloc or free of a 48- or 2,000,000-byte block.
The interrupted call may hold a cache lock or the large table's lock; the report at exit
must neither wait for it (a hang: the run times out) nor assert that no lock is held (an
abort). Every run must exit 0 with its report, text and JSON in turn. What the report could
not lock is named as not scanned.

Two reports:
  leaks  the leak report: USLAB_LEAKS=1 and USLAB_LEAKS=json
  stats  the statistics: USLAB_STATS=1 and USLAB_STATS=json, with USLAB_DEBUG=F, so that
         malloc-48 has no magazines and every malloc and free of 48 bytes takes its cache
         lock (with magazines the loop never leaves them and the lock is seldom held)

At least RUNS runs; if none of them met a busy lock (the signal landed outside the locked
part of every call), more, up to MAX_RUNS, until one does: the skipping path is exercised.

Usage: leak_exit_check.py [--stats] PROGRAM PRELOAD [RUNS [MAX_RUNS]]
"""
import json
import os
import re
import subprocess
import sys

LEAK_SUMMARY = re.compile(r"^uslab: leak report: \d+ live objects, \d+ bytes, "
                          r"from \d+ allocation sites$", re.M)
LEAK_NOT_SCANNED = re.compile(r"^uslab: leak report: .* not scanned: .*$", re.M)
STATS_HEADER = re.compile(r"^Name +Objects Objsize +Space Resident Slabs/Part/Cpu", re.M)
STATS_FOOTER = re.compile(r"^thread caches may hold \d+ KiB \(bound \d+ KiB\); "
                          r"reserved address space \d+ MiB; the columns: `uslab help stats`$",
                          re.M)
STATS_NOT_SCANNED = re.compile(r"^uslab: statistics: .* not (?:scanned|counted): .*$", re.M)
TIMEOUT = 20


def fail(msg, output=""):
    sys.exit("FAIL: %s\n--- output ---\n%s\n--- end ---" % (msg, output[-4000:]))


def run(program, preload, env_update, what):
    env = {k: v for k, v in os.environ.items() if not k.startswith("USLAB_")}
    env.update(LD_PRELOAD=preload, **env_update)
    try:
        p = subprocess.run([program, "exit_in_handler"], env=env, capture_output=True,
                           text=True, errors="replace", timeout=TIMEOUT)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
        fail("%s: still running after %d s (deadlock at exit?)" % (what, TIMEOUT), err or "")
    if p.returncode != 0:
        fail("%s: exit status %d, expected 0" % (what, p.returncode), p.stderr)
    return p.stderr


def one_json(what, text, key):
    """The one JSON document text holds, which must have key."""
    try:
        doc = json.loads(text)
        doc[key]
        return doc
    except (ValueError, KeyError, TypeError) as e:
        fail("%s: not one JSON document with %s: %s" % (what, key, e), text)


def leaks_run(program, preload, attempt):
    mode = "json" if attempt % 2 else "1"
    what = "run %d (USLAB_LEAKS=%s)" % (attempt, mode)
    err = run(program, preload, {"USLAB_LEAKS": mode}, what)
    if mode == "json":
        skipped = one_json(what, err, "uslab_leaks")["uslab_leaks"].get("not_scanned")
        if not isinstance(skipped, list):
            fail("%s: no not_scanned list" % what, err)
        return skipped
    if not LEAK_SUMMARY.search(err):
        fail("%s: no leak report summary line" % what, err)
    return LEAK_NOT_SCANNED.findall(err)


def stats_run(program, preload, attempt):
    mode = "json" if attempt % 2 else "1"
    what = "run %d (USLAB_STATS=%s)" % (attempt, mode)
    err = run(program, preload, {"USLAB_STATS": mode, "USLAB_DEBUG": "F"}, what)
    if mode == "json":
        doc = one_json(what, err, "uslab")
        skipped = doc["uslab"].get("not_scanned")
        if not isinstance(skipped, list) or not isinstance(doc.get("caches"), list):
            fail("%s: no not_scanned list or no caches" % what, err)
        listed = {c["name"] for c in doc["caches"]}
        if listed & set(skipped):
            fail("%s: caches both listed and not scanned: %s" % (what, listed & set(skipped)),
                 err)
        return skipped
    if not STATS_HEADER.search(err) or not STATS_FOOTER.search(err):
        fail("%s: no whole statistics table" % what, err)
    skipped = STATS_NOT_SCANNED.findall(err)
    for line in skipped:
        m = re.match(r"uslab: statistics: cache (.*) not scanned: ", line)
        if m and re.search(r"^%s +\d" % re.escape(m.group(1)), err, re.M):
            fail("%s: cache %s both listed and not scanned" % (what, m.group(1)), err)
    return skipped


def main():
    args = sys.argv[1:]
    one_run = leaks_run
    if args and args[0] == "--stats":
        one_run = stats_run
        args = args[1:]
    program, preload = args[0:2]
    runs = int(args[2]) if len(args) > 2 else 30
    max_runs = int(args[3]) if len(args) > 3 else 200
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
