#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Counts, with callgrind (deterministic), the instructions one small malloc, free,
# uslab_cache_alloc and uslab_cache_free execute on their fast paths, and fails if any
# exceeds its budget (docs/design.md §4). malloc and free were 15 each before free's
# hardening checks (docs/security.md), which added 6 to the pair (14 + 22 = 36), then 2
# more when the key became the block's address xored with a secret (14 + 24 = 38): a
# block freed as an empty list head (its first words holding its own address) took the
# slow path before. `free (selfref)` counts that free: it must stay within free's budget.
# malloc went from 14 to 15 (pair 39) when its size table became one for every thread:
# the table's address is an instruction, and a copy in each thread cache cost 2 KiB and a
# resident page per thread (issue 38: 3,000 live threads, 12 MB). free went from 24 to 23
# (pair 38) when the key became the secret alone, as glibc's tcache_key: the same for every
# block, so no xor with the address (docs/security.md §2.2). free went from 23 to 21 and
# malloc from 15 to 19 (pair 40) when free became a store and the checks moved to the
# handout (issue 38): free no longer reads the block, whose line a program often frees
# cold (std::unordered_map churn: a quarter of the time), and malloc checks the free
# mark (compare with an immediate, branch) and the key (the key's load, an xor that also
# clears it, branch) instead of clearing the key. free went from 21 to 23 (pair 42) when the
# 4 GiB unit-tag table gave way to the range's own tag array (session 55): the index is
# checked against the reservation (subtract the base, compare, branch; the mask's `and`
# went), and the preload library no longer wraps mlockall, setrlimit and prlimit for it.
# Method: run the loop with N and 2N iterations, count the instructions inside each
# function (--toggle-collect), and divide the difference by N: start-up and warm-up cancel.
set -euo pipefail
loop=$1 preload=$2
budget_malloc=${BUDGET_MALLOC:-19}
budget_malloc_large=${BUDGET_MALLOC_LARGE:-23}
budget_free=${BUDGET_FREE:-23}
budget_pair=${BUDGET_PAIR:-42}
# malloc_usable_size of a live small block: free's check from the unit tag's pair, the key
# absent, the class table (redis asks it of every block: 36 before session 77, with a
# lookup of the page map and the class's descriptor).
budget_usable=${BUDGET_USABLE:-22}
budget_cache_alloc=${BUDGET_CACHE_ALLOC:-15}
budget_cache_free=${BUDGET_CACHE_FREE:-24} # 9 of them: the ownership check
# A block of 1 MiB is glibc's (design §8): these count what uslab adds around glibc's own
# malloc and free, not glibc's (entering glibc's function of the same name toggles the
# collection off until it returns; session 70 found no glibc function in the collected
# costs): 139 and 147 at c9fd2c1, where the counts inclusive of glibc's are 311 and 273. A
# free of one read the clock twice and polled the purger (226) until session 49
# (docs/benchmarks.md, "The fixed costs of glibc's blocks").
# C++'s operator new and sized delete of a small block: a compare of the mode (the program may
# define its own, design §8), then malloc's and free's own paths. new called malloc and tested its
# result (28) until session 80: it jumps to a malloc that calls new's failure loop itself (23).
budget_new=${BUDGET_NEW:-23}
budget_delete=${BUDGET_DELETE:-26}
# posix_memalign(64, 64) and aligned_alloc(32, 64): up to 1 KiB, malloc's pop from the power of
# two's class, whose blocks are aligned to its size (94 and 101 through the slow path's class
# lookup until session 80).
budget_memalign=${BUDGET_MEMALIGN:-45}
budget_aligned_alloc=${BUDGET_ALIGNED_ALLOC:-40}
budget_malloc_mib=${BUDGET_MALLOC_MIB:-150}
budget_free_mib=${BUDGET_FREE_MIB:-165}
command -v valgrind >/dev/null || { echo "valgrind is not installed"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

count() { # count <function> <iterations> [size [mode]]
    LD_PRELOAD=$preload valgrind --tool=callgrind --callgrind-out-file="$tmp/out" \
        --toggle-collect="$1" "$loop" "$2" "${3:-32}" ${4:-} >/dev/null 2>"$tmp/err" || { cat "$tmp/err"; exit 1; }
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$tmp/err"
}

status=0
n=20000
# measure <label> <budget> <function> [size [mode]]: N and 2N iterations, the difference
# divided by N, in $per; a line, and status 1 when over the budget.
measure() {
    local a b verdict=ok
    a=$(count "$3" $n "${4:-32}" ${5:-})
    b=$(count "$3" $((2 * n)) "${4:-32}" ${5:-})
    per=$(( (b - a + n / 2) / n ))
    if [ "$per" -gt "$2" ]; then verdict="OVER BUDGET"; status=1; fi
    printf '%-18s %3d instructions per call (budget %d) %s\n' "$1" "$per" "$2" "$verdict"
}
for spec in malloc:$budget_malloc free:$budget_free \
    uslab_cache_alloc:$budget_cache_alloc uslab_cache_free:$budget_cache_free; do
    fn=${spec%%:*}
    measure "$fn" "${spec##*:}" "$fn"
    eval "count_$fn=$per"
done
measure "free (selfref)" "$budget_free" free 32 selfref
measure "malloc_usable_size" "$budget_usable" malloc_usable_size
# The same after mlockall(MCL_FUTURE): free's unit tags are the range's own side array, so
# its fast path runs there too (a 4 GiB tag table could not be mapped there: 126 more a free).
if LD_PRELOAD=$preload "$loop" 10 32 locked >/dev/null 2>&1; then
    measure "free (mlockall)" "$budget_free" free 32 locked
else
    echo "free (mlockall)    not counted: the kernel refused mlockall here"
fi
# Above the small classes (1 KiB) malloc's fast path reads a second table, by 128-byte steps:
# a 4 KiB block took the slow path (its set-up check, the size class's table call): 54 -> 23.
measure "malloc (4 KiB)" "$budget_malloc_large" malloc 4096
measure "operator new" "$budget_new" "operator new(unsigned long)" 32 cxx
measure "operator delete" "$budget_delete" "operator delete(void*, unsigned long)" 32 cxx
measure "posix_memalign" "$budget_memalign" posix_memalign 64 aligned
measure "aligned_alloc" "$budget_aligned_alloc" aligned_alloc 64 aligned
measure "malloc (1 MiB)" "$budget_malloc_mib" malloc 1048576
measure "free (1 MiB)" "$budget_free_mib" free 1048576
pair=$((count_malloc + count_free))
verdict=ok
if [ "$pair" -gt "$budget_pair" ]; then verdict="OVER BUDGET"; status=1; fi
printf '%-18s %3d instructions per pair (budget %d) %s\n' "malloc+free" "$pair" "$budget_pair" "$verdict"
exit $status
