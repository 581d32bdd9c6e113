#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""USLAB_LEAKS=json (issue 16): runs large_cases leaks under the preload library and checks
that stderr holds one JSON document with the summary and the sites, largest first, the
100,000-byte block of the system allocator first, its stack starting at
"leak_big_block (large_cases.c:LINE)", LINE that of its malloc call (marked SITE:leak_big in
the source), the 112-byte block's at SITE:leak_small, and an empty not_scanned list.

large_cases is built with -g in every build (tests/death/CMakeLists.txt), so the file and
line are required, not only the function's name.

Usage: leak_json.py PROGRAM PRELOAD SOURCE
"""
import json
import os
import subprocess
import sys

program, lib, source = sys.argv[1:4]


def site_line(name):
    with open(source) as f:
        for number, text in enumerate(f, 1):
            if "SITE:%s " % name in text:
                return number
    sys.exit("no SITE:%s in %s" % (name, source))


def frame(function, marker):
    return "%s (large_cases.c:%d)" % (function, site_line(marker))


env = {k: v for k, v in os.environ.items() if not k.startswith("USLAB_")}
env.update(LD_PRELOAD=lib, USLAB_LEAKS="json")
p = subprocess.run([program, "leaks"], env=env, capture_output=True, text=True, timeout=60)
if p.returncode != 0:
    sys.exit("large_cases leaks failed: %d %s" % (p.returncode, p.stderr))
doc = json.loads(p.stderr)["uslab_leaks"]
sites = doc["by_site"]
assert doc["sites"] == len(sites) >= 2, doc
assert doc["bytes"] == sum(s["bytes"] for s in sites), doc
assert doc["objects"] == sum(s["objects"] for s in sites), doc
assert doc["not_scanned"] == [], doc
assert [s["bytes"] for s in sites] == sorted((s["bytes"] for s in sites), reverse=True), sites
big = sites[0]
assert big["bytes"] == 100000 and big["objects"] == 1, big
assert big["cache"] == "malloc (system allocator)", big
assert big["stack"][0] == frame("leak_big_block", "leak_big"), big
small = [s for s in sites if s["stack"] and s["stack"][0].startswith("leak_small_block")]
assert len(small) == 1 and small[0]["bytes"] == 112 and small[0]["cache"] == "malloc-112", sites
assert small[0]["stack"][0] == frame("leak_small_block", "leak_small"), small
print("ok: %d sites, %d bytes" % (doc["sites"], doc["bytes"]))
