#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Counts, with callgrind (deterministic), the instructions of a debug stack capture
# (usi_unwind_stack: 16 of the program's frames, uslab's own 6 walked and left out) once the
# unwinder's memo holds the rows (unwind_loop.c), and fails over budget, or if no capture ran.
# 2,623 at the commit that set the budget; 36,327 without the memo (each row read anew);
# libgcc's _Unwind_Backtrace took about 20,000 for 16 frames (design §9, "Stacks").
# Then, under USLAB_LEAKS=1 alone, the captures of a pair: one (its allocation's), since a leak
# report shows allocation stacks only; fails if the free unwinds too (session 86).
# Same method as test_fastpath_budget.sh: N and 2N pairs, the difference divided by N.
set -euo pipefail
loop=$1
budget=${BUDGET_UNWIND:-3000}
command -v valgrind >/dev/null || { echo "valgrind is not installed"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

count() { # count <pairs> <setting>
    env "$2" valgrind --tool=callgrind --callgrind-out-file="$tmp/out" \
        --toggle-collect=usi_unwind_stack "$loop" "$1" >"$tmp/stdout" 2>"$tmp/err" ||
        { cat "$tmp/err"; exit 1; }
    grep -qx ok "$tmp/stdout" || { cat "$tmp/stdout" "$tmp/err"; exit 1; }
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$tmp/err"
}

n=200
a=$(count $n USLAB_DEBUG=U,unwind-budget)
b=$(count $((2 * n)) USLAB_DEBUG=U,unwind-budget)
per=$(( (b - a + n) / (2 * n) )) # two captures a pair
c=$(count $n USLAB_LEAKS=1)
d=$(count $((2 * n)) USLAB_LEAKS=1)
leaks=$(( (d - c + n / 2) / n )) # a pair's
verdict=ok
status=0
if [ "$per" -lt 100 ]; then verdict="NO CAPTURE COUNTED"; status=1; fi
if [ "$per" -gt "$budget" ]; then verdict="OVER BUDGET"; status=1; fi
printf 'usi_unwind_stack %d instructions per capture of 16 program frames (budget %d) %s\n' "$per" \
    "$budget" "$verdict"
verdict=ok
if [ "$leaks" -gt $((per * 3 / 2)) ]; then verdict="THE FREE UNWINDS TOO"; status=1; fi
if [ "$leaks" -lt $((per / 2)) ]; then verdict="NO CAPTURE AT THE ALLOCATION"; status=1; fi
printf 'USLAB_LEAKS=1: %d instructions of captures per malloc and free (one capture) %s\n' "$leaks" \
    "$verdict"
exit $status
