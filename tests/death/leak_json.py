#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""USLAB_LEAKS=json (issue 16): runs large_cases leaks under the preload library and checks
that stderr holds one JSON document with the summary and the sites, largest first, the
100,000-byte block of the system allocator first, its stack naming leak_big_block."""
import json
import os
import subprocess
import sys

program, lib = sys.argv[1], sys.argv[2]
env = dict(os.environ, LD_PRELOAD=lib, USLAB_LEAKS="json")
p = subprocess.run([program, "leaks"], env=env, capture_output=True, text=True, timeout=60)
if p.returncode != 0:
    sys.exit("large_cases leaks failed: %d %s" % (p.returncode, p.stderr))
doc = json.loads(p.stderr)["uslab_leaks"]
sites = doc["by_site"]
assert doc["sites"] == len(sites) >= 2, doc
assert doc["bytes"] == sum(s["bytes"] for s in sites), doc
assert doc["objects"] == sum(s["objects"] for s in sites), doc
assert [s["bytes"] for s in sites] == sorted((s["bytes"] for s in sites), reverse=True), sites
big = sites[0]
assert big["bytes"] == 100000 and big["objects"] == 1, big
assert big["cache"] == "malloc (system allocator)", big
# "leak_big_block (large_cases.c:N)" with line information, "leak_big_block+0x.. (...)"
# without (symbols.c).
assert big["stack"][0].startswith(("leak_big_block (large_cases.c:", "leak_big_block+")), big
small = [s for s in sites if s["stack"] and s["stack"][0].startswith("leak_small_block")]
assert len(small) == 1 and small[0]["bytes"] == 112 and small[0]["cache"] == "malloc-112", sites
print("ok: %d sites, %d bytes" % (doc["sites"], doc["bytes"]))
