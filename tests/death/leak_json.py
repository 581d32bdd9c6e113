#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""USLAB_LEAKS=json (issue 16): runs large_cases under the preload library and checks that
stderr holds one JSON document with the summary and the sites, largest first, one site per
stack (the summary's count of sites is the number of distinct stacks), each listing its
objects per cache, and an empty not_scanned list.

  leaks     the 2,000,000-byte block of the system allocator first, its stack starting at
            "leak_big_block (large_cases.c:LINE)", LINE that of its malloc call (marked
            SITE:leak_big in the source); the 100-byte block (malloc-112)'s at SITE:leak_small
  one_site  40, 100, 1000 and 2,000,000 bytes from one call (SITE:one_site): one site of
            four objects in malloc-48, malloc-112, malloc-1024 and the system allocator,
            in that order

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


def report(case):
    env = {k: v for k, v in os.environ.items() if not k.startswith("USLAB_")}
    env.update(LD_PRELOAD=lib, USLAB_LEAKS="json")
    p = subprocess.Popen([program, case], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    _, err = p.communicate(timeout=60)
    if p.returncode != 0:
        sys.exit("large_cases %s failed: %d %s" % (case, p.returncode, err))
    doc = json.loads(err)["uslab_leaks"]
    # The pid tells a fork child's report from its parent's (session 18's audit).
    assert doc["pid"] == p.pid and doc["overwritten"] == 0, doc
    sites = doc["by_site"]
    assert doc["sites"] == len(sites) >= 1, doc
    assert doc["bytes"] == sum(s["bytes"] for s in sites), doc
    assert doc["objects"] == sum(s["objects"] for s in sites), doc
    assert doc["not_scanned"] == [], doc
    assert len({tuple(s["stack"]) for s in sites}) == len(sites), "a stack in two sites: %s" % sites
    assert [s["bytes"] for s in sites] == sorted((s["bytes"] for s in sites), reverse=True), sites
    for s in sites:
        assert s["bytes"] == sum(c["bytes"] for c in s["caches"]), s
        assert s["objects"] == sum(c["objects"] for c in s["caches"]), s
        assert len({c["cache"] for c in s["caches"]}) == len(s["caches"]), s
    return doc, sites


def only(cache, objects, nbytes):
    return [{"cache": cache, "objects": objects, "bytes": nbytes}]


doc, sites = report("leaks")
big = sites[0]
assert big["bytes"] == 2000000 and big["objects"] == 1, big
assert big["caches"] == only("system allocator", 1, 2000000), big
assert big["stack"][0] == frame("leak_big_block", "leak_big"), big
small = [s for s in sites if s["stack"][0].startswith("leak_small_block")]
assert len(small) == 1 and small[0]["caches"] == only("malloc-112", 1, 100), sites
assert small[0]["stack"][0] == frame("leak_small_block", "leak_small"), small
print("ok: leaks: %d sites, %d bytes" % (doc["sites"], doc["bytes"]))

doc, sites = report("one_site")
mixed = [s for s in sites if s["stack"][0].startswith("leak_one_site")]
assert len(mixed) == 1, sites
mixed = mixed[0]
assert mixed is sites[0] and mixed["stack"][0] == frame("leak_one_site", "one_site"), sites
assert mixed["objects"] == 4 and mixed["bytes"] == 40 + 100 + 1000 + 2000000, mixed
assert [(c["cache"], c["objects"]) for c in mixed["caches"]] == [
    ("malloc-48", 1), ("malloc-112", 1), ("malloc-1024", 1), ("system allocator", 1)], mixed
print("ok: one_site: %d sites, %d bytes" % (doc["sites"], doc["bytes"]))
