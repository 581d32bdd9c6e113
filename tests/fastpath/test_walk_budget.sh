#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Counts, with callgrind (deterministic), the instructions of one uslab_reap in a program
# whose last cache has an id above 2,000 (walk_loop.c), and fails over budget. A reap
# walks every cache, as every purger pass does and as fork does in a threaded process;
# walking the whole id table (65,535 entries) made it 865,582 instructions a call; it is
# 109,032 now that the walks stop at the highest id in use (design §5). Same method as
# test_fastpath_budget.sh: N and 2N calls, the difference divided by N.
set -euo pipefail
loop=$1
budget=${BUDGET_REAP:-200000}
command -v valgrind >/dev/null || { echo "valgrind is not installed"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

count() { # count <iterations>
    valgrind --tool=callgrind --callgrind-out-file="$tmp/out" --toggle-collect=uslab_reap \
        "$loop" "$1" 2000 >"$tmp/stdout" 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
    grep -qx ok "$tmp/stdout" || { cat "$tmp/stdout" "$tmp/err"; exit 1; }
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$tmp/err"
}

n=20
a=$(count $n)
b=$(count $((2 * n)))
per=$(( (b - a + n / 2) / n ))
verdict=ok
status=0
if [ "$per" -gt "$budget" ]; then verdict="OVER BUDGET"; status=1; fi
printf 'uslab_reap %d instructions per call (budget %d) %s\n' "$per" "$budget" "$verdict"
exit $status
