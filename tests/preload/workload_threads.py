# SPDX-License-Identifier: MIT
# Threads under preload: 8 threads each build and hash their own data; the main thread
# prints the results in thread order.
import hashlib
import json
import threading

results = [None] * 8


def work(k):
    d = {}
    for i in range(40000):
        d["key-%d-%d" % (k, i)] = [i, str(i) * (i % 5), {"t": k}]
    text = json.dumps(d, sort_keys=True)
    back = json.loads(text)
    assert back == d
    results[k] = (len(text), hashlib.sha256(text.encode()).hexdigest())


threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for k, r in enumerate(results):
    print(k, r[0], r[1])
