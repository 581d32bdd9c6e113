# SPDX-License-Identifier: MIT
# A json/dict/list-heavy workload for the preload test: builds 50k dicts (200k until session
# 56: 37 s of the suite), round-trips them through json, sorts, groups and hashes.
# Deterministic (seeded, no set/dict-order output that depends on string hashing).
import hashlib
import json
import random
import sys

rng = random.Random(12345)
words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, 12)))
         for _ in range(5000)]

records = []
for i in range(50000):
    n = rng.randint(0, 6)
    records.append({
        "id": i,
        "name": rng.choice(words) + "-" + str(i % 977),
        "score": rng.random() * 1000.0,
        "tags": [rng.choice(words) for _ in range(n)],
        "nested": {"a": i * 3, "b": [i, i + 1, str(i)], "c": {"deep": "x" * (i % 8)}},
    })

h = hashlib.sha256()
text = json.dumps(records, sort_keys=True)
h.update(text.encode())
print("json bytes", len(text), h.hexdigest())

back = json.loads(text)
assert back == records
back.sort(key=lambda r: (r["name"], -r["score"]))
print("first", back[0]["name"], back[0]["id"], "last", back[-1]["name"], back[-1]["id"])

groups = {}
for r in back:
    groups.setdefault(r["name"].split("-")[0], []).append(r["id"])
sizes = sorted(((len(v), k) for k, v in groups.items()), reverse=True)[:10]
print("groups", len(groups), sizes)

tag_count = {}
for r in records:
    for t in r["tags"]:
        tag_count[t] = tag_count.get(t, 0) + 1
top = sorted(tag_count.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
print("tags", len(tag_count), top)

# Many short-lived strings and lists, growing and shrinking
acc = []
for i in range(300000):
    s = words[i % len(words)] * (1 + i % 7)
    acc.append(s.upper()[::-1])
    if len(acc) > 1000:
        del acc[: rng.randint(1, 1000)]
h2 = hashlib.sha256("|".join(acc).encode()).hexdigest()
print("strings", len(acc), h2)

lines = [json.dumps({"k": i, "v": [str(j) for j in range(i % 20)]}) for i in range(50000)]
total = sum(len(json.loads(l)["v"]) for l in lines)
print("lines", len(lines), total)
sys.stdout.flush()
