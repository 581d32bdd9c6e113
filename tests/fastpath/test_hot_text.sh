#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The text every process runs lies in one block (src/hot.list, design §7): the kernel maps a
# library's pages 64 KiB at a time around each page a process touches, so code spread over
# the library's text made nearly all of it resident in every process (217 KB of the library
# resident in a process that mallocs 20 blocks, 151 KB with the block: session 89).
# Runs start_loop (a short process) and thread_loop (threads made, used and joined, some
# alive at once) under callgrind with the preload library, and fails
# - on every function of the library they run that lies outside the block, naming it
#   (it goes on its file's line of src/hot.list), and
# - when that block grows past BUDGET_HOT_BYTES (64 KiB: then it spans at least two windows).
set -euo pipefail
start_loop=$1
thread_loop=$2
preload=$3
budget=${BUDGET_HOT_BYTES:-65536}
command -v valgrind >/dev/null || { echo "valgrind is not installed"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The block's bounds: the symbols the linker script sets around it.
bound() { nm "$preload" | awk -v s="$1" '$3 == s { print $1 }'; }
lo=$(bound __uslab_hot_start)
hi=$(bound __uslab_hot_end)
[ -n "$lo" ] && [ -n "$hi" ] || { echo "no __uslab_hot_start/__uslab_hot_end in $preload"; exit 1; }
lo=$((16#$lo))
hi=$((16#$hi))

# The library's functions each run executes. callgrind's profile compresses names: the first
# "ob=(id) path" or "cob=(id) path", "fn=(id) name" or "cfn=(id) name" names an id, later lines
# give the id alone; a function's costs follow its "fn=" line, under the last "ob=" line's
# object.
executed() { # executed <callgrind file>
    awk -v lib="$(basename "$preload")" '
        function id_of(line) { match(line, /=\([0-9]+\)/); return substr(line, RSTART + 1, RLENGTH - 1) }
        function name_of(line) { return substr(line, RSTART + RLENGTH + 1) }
        /^c?ob=/ { id = id_of($0); if (name_of($0) != "") path[id] = name_of($0) }
        /^ob=/ { cur = index(path[id], lib) > 0 }
        /^c?fn=/ { id = id_of($0); if (name_of($0) != "") name[id] = name_of($0) }
        /^fn=/ { if (cur) run[id] = 1 }
        END { for (id in run) print name[id] }' "$1"
}
for run in "$start_loop" "$thread_loop 40" "$thread_loop 8 64"; do
    # shellcheck disable=SC2086 # the run's arguments
    env LD_PRELOAD="$preload" valgrind --tool=callgrind --demangle=no \
        --callgrind-out-file="$tmp/out" $run >"$tmp/stdout" 2>"$tmp/err" ||
        { cat "$tmp/err"; exit 1; }
    grep -qx ok "$tmp/stdout" || { cat "$tmp/stdout" "$tmp/err"; exit 1; }
    executed "$tmp/out" >>"$tmp/names"
done
sort -u "$tmp/names" -o "$tmp/names"

# Each name's address (nm: static functions and the compiler's clones too).
nm "$preload" | awk '$2 ~ /^[tT]$/ { print $3, $1 }' | sort -k1,1 >"$tmp/syms"
status=0
n=0
while read -r name; do
    case $name in # a function callgrind has no name for: its address in the library
    0x*) a=${name#0x} ;;
    *) a=$(awk -v n="$name" '$1 == n { print $2; exit }' "$tmp/syms") ;;
    esac
    if [ -z "$a" ]; then
        echo "not in the symbol table: $name"
        status=1
        continue
    fi
    n=$((n + 1))
    a=$((16#$a))
    if [ "$a" -lt "$lo" ] || [ "$a" -ge "$hi" ]; then
        echo "runs in every process but lies outside the hot block: $name (src/hot.list)"
        status=1
    fi
done <"$tmp/names"
[ "$n" -gt 50 ] || { echo "only $n functions found: the profile was not read"; exit 1; }
verdict=ok
if [ $((hi - lo)) -gt "$budget" ]; then verdict="OVER BUDGET"; status=1; fi
printf 'the hot block: %d bytes (budget %d) %s; the %d functions run lie in it: %s\n' \
    $((hi - lo)) "$budget" "$verdict" "$n" "$([ $status = 0 ] && echo yes || echo no)"
exit $status
