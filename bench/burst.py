# SPDX-License-Identifier: MIT
"""One run of bench/burst_bench under libuslab-preload.so, for pressure.py and purger.py:
returns the metrics it prints, after checking that the run's malloc was uslab's."""
import os
import subprocess
import sys

METRICS = [("alloc_ns_per_block", "ns per block in bursts"), ("minflt", "minor faults"),
           ("idle_rss_kb", "KiB resident while idle")]


def kv(text):
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def run(build, settings, args, who):
    """burst_bench ARGS with the USLAB_* SETTINGS (others of the environment dropped)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("USLAB_")}
    env.update(settings, LD_PRELOAD=os.path.join(build, "libuslab-preload.so"))
    p = subprocess.run([os.path.join(build, "bench", "burst_bench")] + args,
                       capture_output=True, text=True, env=env, timeout=600)
    if p.returncode != 0:
        sys.exit("%s: burst_bench failed: %s" % (who, p.stderr))
    out = kv(p.stdout)
    if out.get("allocator") != "uslab":
        sys.exit("%s: the run's malloc was %s, not uslab" % (who, out.get("allocator")))
    return {k: float(out[k]) for k, _ in METRICS}
