# SPDX-License-Identifier: MIT
# An allocation-heavy Python workload for bench/run.py (runs under each LD_PRELOAD):
# many small objects (tuples, dicts, strings) built, sorted and dropped.
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 200000
records = []
for i in range(n):
    key = "k%07d" % ((i * 7919) % n)
    records.append({"key": key, "value": i, "tags": [key[-3:], str(i % 97)]})
index = {r["key"]: r for r in records}
words = {}
for r in records:
    for t in r["tags"]:
        words[t] = words.get(t, 0) + 1
total = sum(r["value"] for r in sorted(records, key=lambda r: r["key"])[: n // 2])
del records, index
print("words=%d\ntotal=%d" % (len(words), total))
