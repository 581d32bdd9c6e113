# SPDX-License-Identifier: MIT
"""One run of bench/burst_bench under libuslab-preload.so, for pressure.py and purger.py:
returns the metrics it prints, after checking that the run's malloc was uslab's."""
import json
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


def report(out_dir, name, args, reps, head, rows, label):
    """Prints and writes <out_dir>/<name>.md (a markdown table: the `head` columns, from
    label(row), then each metric's median (min-max)) and <name>.json; returns the table."""
    lines = ["| " + " | ".join(head) + " | " + " | ".join(l for _, l in METRICS) + " |",
             "|" + "---|" * (len(head) + len(METRICS))]
    for row in rows:
        lines.append("| " + " | ".join(label(row)) + " | " + " | ".join(
            "%.0f (%.0f-%.0f)" % row[k] for k, _ in METRICS) + " |")
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(out_dir, name + ".md"), "w") as f:
        f.write("burst_bench %s, %d repetitions, median (min-max)\n\n%s\n" %
                (" ".join(args), reps, text))
    with open(os.path.join(out_dir, name + ".json"), "w") as f:
        json.dump(rows, f, indent=1)
    return text
