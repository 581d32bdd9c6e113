#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Exit reports after every library's destructor (design §9): leak_dtor_main links
libleak_dtor_lib.so (DT_NEEDED), which keeps 50 blocks (and, with malloc, one of 2,000,000
bytes) until its destructor frees them and then writes a line on stderr. Before, the leak
report ran in uslab's own destructor, which runs before that library's (the preload library
is finalised right after the program), and listed the 50 blocks as leaks.

For each way out (exit(0), return from main), with USLAB_LEAKS=1 and =json:
  - the library's line comes before the report;
  - no site names leak_dtor_fill, the library's allocation site;
  - the real leak (leak_for_real) is still reported: one site of 1 object; with uslab linked
    into the program, whose frames are then uslab's own and not shown, the one object of
    the whole report (the library's frames would be shown).
With --stats (preload only), USLAB_STATS=json: the library's line comes before the
statistics, and malloc-48 counts fewer than 50 active objects.

Usage: leak_dtor_check.py PROGRAM PRELOAD|- [--stats]
  PRELOAD: the preload library to run PROGRAM under; -: PROGRAM has uslab linked in.
"""
import json
import os
import subprocess
import sys

program, preload = sys.argv[1:3]
stats = "--stats" in sys.argv[3:]
MARK = "leak_dtor_lib: blocks freed in its destructor\n"
failures = []


def run(how, extra):
    env = dict(os.environ)
    for k in ("USLAB_LEAKS", "USLAB_STATS", "USLAB_DEBUG", "LD_PRELOAD"):
        env.pop(k, None)
    env.update(extra)
    if preload != "-":
        env["LD_PRELOAD"] = preload
    p = subprocess.run([program, how], env=env, stderr=subprocess.PIPE, timeout=60)
    err = p.stderr.decode(errors="replace")
    if p.returncode != 0:
        failures.append(f"{how} {extra}: exit status {p.returncode}\n{err}")
        return None
    at = err.find(MARK)
    if at < 0:
        failures.append(f"{how} {extra}: the library's destructor did not run\n{err}")
        return None
    return err, at


def check_text(how):
    got = run(how, {"USLAB_LEAKS": "1"})
    if not got:
        return
    err, at = got
    summary = err.find("uslab: leak report:")
    where = f"{how} USLAB_LEAKS=1"
    if summary < at:
        failures.append(f"{where}: the report came before the library's destructor\n{err}")
    if "leak_dtor_fill" in err:
        failures.append(f"{where}: the library's blocks reported as leaks\n{err}")
    lines = err.splitlines()
    if preload == "-":
        ok = "uslab: leak report: 1 live objects," in err and "(dtor-cache x1)" in err
    else:
        real = [i for i, l in enumerate(lines) if l.strip().startswith("leak_for_real")]
        ok = len(real) == 1 and lines[real[0] - 1].startswith("LEAK: ") and \
            " in 1 objects " in lines[real[0] - 1]
    if not ok:
        failures.append(f"{where}: the real leak is not one site of 1 object\n{err}")


def check_json(how):
    got = run(how, {"USLAB_LEAKS": "json"})
    if not got:
        return
    err, at = got
    start = err.find('{"uslab_leaks"')
    where = f"{how} USLAB_LEAKS=json"
    if start < at:
        failures.append(f"{where}: no report after the library's destructor\n{err}")
        return
    doc = json.JSONDecoder().raw_decode(err[start:])[0]["uslab_leaks"]
    sites = doc["by_site"]
    if any(any(f.startswith("leak_dtor_fill") for f in s["stack"]) for s in sites):
        failures.append(f"{where}: the library's blocks reported as leaks\n{err}")
    if preload == "-":
        real = sites if doc["objects"] == 1 else []
    else:
        real = [s for s in sites if s["stack"] and s["stack"][0].startswith("leak_for_real")]
    if len(real) != 1 or real[0]["objects"] != 1:
        failures.append(f"{where}: the real leak is not one site of 1 object\n{err}")
    if doc["not_scanned"]:
        failures.append(f"{where}: not scanned: {doc['not_scanned']}")


def check_stats(how):
    got = run(how, {"USLAB_STATS": "json"})
    if not got:
        return
    err, at = got
    start = err.find('{"uslab":')
    where = f"{how} USLAB_STATS=json"
    if start < at:
        failures.append(f"{where}: no statistics after the library's destructor\n{err}")
        return
    doc = json.JSONDecoder().raw_decode(err[start:])[0]
    m48 = [c for c in doc["caches"] if c["name"] == "malloc-48"]
    if not m48 or m48[0]["objects"] >= 50:
        failures.append(f"{where}: the library's blocks counted as active\n{err}")


for how in ("exit", "return"):
    check_text(how)
    check_json(how)
    if stats:
        check_stats(how)
for f in failures:
    print("FAIL:", f)
print("ok" if not failures else f"{len(failures)} failures")
sys.exit(1 if failures else 0)
