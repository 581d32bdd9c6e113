#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Counts, with callgrind (deterministic), the instructions of the slab layer's take and
# put for each object that leaves its slab and goes back to it (slab_loop.c), and fails
# over budget. Objects cycle through the slabs whenever a program frees more than its
# magazines hold: a collector's sweep, a teardown, shedding beyond the headroom (design
# §3, §4). Freed in the order handed out, a put clears a streak of neighbours a word at a
# time and a take hands out a run of free bits a stride apart: 47.6 instructions an object
# before session 28, 17.3 after. Scattered (a hash table's teardown), one object a streak:
# 98.2 before, 93.2 after, 96.3 with a count of its own a slab, 85.4 since session 78's
# leaner loop (perl's, python's and `cxx umap`'s teardowns), 86.4 since session 80 split
# the loop in two copies (a register move an object in this one, the object caches'). Same method as test_fastpath_budget.sh: N and 2N rounds, the
# difference divided by the objects of N rounds.
set -euo pipefail
loop=$1
budget_fifo=${BUDGET_SLAB_FIFO:-22}
budget_scattered=${BUDGET_SLAB_SCATTERED:-90}
objects=20000 # slab_loop.c's OBJECTS
command -v valgrind >/dev/null || { echo "valgrind is not installed"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

count() { # count <rounds> <order>
    valgrind --tool=callgrind --callgrind-out-file="$tmp/out" --toggle-collect=usi_slab_take \
        --toggle-collect=usi_slab_put "$loop" "$1" "$2" >"$tmp/stdout" 2>"$tmp/err" ||
        { cat "$tmp/err"; exit 1; }
    grep -qx ok "$tmp/stdout" || { cat "$tmp/stdout" "$tmp/err"; exit 1; }
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$tmp/err"
}

status=0
n=4
for spec in fifo:$budget_fifo scattered:$budget_scattered; do
    order=${spec%%:*} budget=${spec##*:}
    a=$(count $n "$order")
    b=$(count $((2 * n)) "$order")
    per10=$(( (b - a) * 10 / (n * objects) ))
    [ "$per10" -gt 0 ] || { echo "no instructions counted in usi_slab_take/usi_slab_put"; exit 1; }
    verdict=ok
    if [ "$per10" -gt $((budget * 10)) ]; then verdict="OVER BUDGET"; status=1; fi
    printf 'slab take+put, %-9s %d.%d instructions an object (budget %d) %s\n' "$order" \
        $((per10 / 10)) $((per10 % 10)) "$budget" "$verdict"
done
exit $status
