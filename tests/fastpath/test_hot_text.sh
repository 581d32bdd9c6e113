#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The text every process runs lies in one block (src/hot.list, design §7): the kernel maps a
# library's pages 64 KiB at a time around each page a process touches (from the start of the
# mapping where that is nearer), so code spread over the library's text made nearly all of it
# resident in every process (136-144 KiB of text, 206-214 KB of the library in a process that
# mallocs 20 blocks), and as one block at the start of the text it is the 64 KiB that one fault
# maps (the library 143 KB: session 89).
# Runs start_loop (a short process, also with a fork), thread_loop (threads made, used and
# joined, some alive at once) and fastpath_loop (an object cache's life besides malloc) under
# callgrind with the preload library, and fails
# - on every function of the library they run that lies outside the block, naming it (it goes
#   on its file's line of src/hot.list), and
# - when the block ends more than BUDGET_HOT_BYTES (64 KiB) past the start of the library's
#   executable segment: then one fault no longer maps it all.
set -euo pipefail
start_loop=$1
thread_loop=$2
fastpath_loop=$3
preload=$4
budget=${BUDGET_HOT_BYTES:-65536}
command -v valgrind >/dev/null || { echo "valgrind is not installed"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The block's bounds, the symbols the linker script sets around it, and the start of the
# executable segment (the mapping the kernel's windows are clamped to).
bound() { nm "$preload" | awk -v s="$1" '$3 == s { print $1 }'; }
lo=$(bound __uslab_hot_start)
hi=$(bound __uslab_hot_end)
[ -n "$lo" ] && [ -n "$hi" ] || { echo "no __uslab_hot_start/__uslab_hot_end in $preload"; exit 1; }
lo=$((16#$lo))
hi=$((16#$hi))
seg=$(readelf -lW "$preload" | awk '$1 == "LOAD" && $7 == "R" && $8 == "E" { print $3; exit }')
[ -n "$seg" ] || { echo "no executable segment in $preload"; exit 1; }
seg=$((seg))

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
for run in "$start_loop" "$start_loop fork" "$thread_loop 40" "$thread_loop 8 64" \
    "$fastpath_loop 100 32"; do
    rm -f "$tmp"/out.*
    # shellcheck disable=SC2086 # the run's arguments
    env LD_PRELOAD="$preload" valgrind --tool=callgrind --demangle=no --trace-children=yes \
        --callgrind-out-file="$tmp/out.%p" $run >"$tmp/stdout" 2>"$tmp/err" ||
        { cat "$tmp/err"; exit 1; }
    grep -qx ok "$tmp/stdout" || { cat "$tmp/stdout" "$tmp/err"; exit 1; }
    for out in "$tmp"/out.*; do executed "$out" >>"$tmp/names"; done # a fork child's too
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
if [ $((hi - seg)) -gt "$budget" ]; then verdict="OVER BUDGET"; status=1; fi
printf 'the hot block: %d bytes, ending %d bytes into the executable segment (budget %d) %s;\n' \
    $((hi - lo)) $((hi - seg)) "$budget" "$verdict"
printf 'the %d functions run lie in it: %s\n' "$n" "$([ $status = 0 ] && echo yes || echo no)"
exit $status
