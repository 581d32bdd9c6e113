#!/bin/sh
# SPDX-License-Identifier: MIT
# readme_use.sh SOURCE_DIR - the first `sh` block of README.md's "## Use" runs as written,
# from the top of the tree (issue 39): each line must exit 0, and those run under uslab
# must be uslab's (the --stats line prints the table). Skipped (77) where build/ is not the
# tree's build of the preload library and the tool.
set -u
src=$1
cd "$src" || exit 1
[ -x build/uslab ] && [ -f build/libuslab-preload.so ] || { echo "no build/ in $src"; exit 77; }
block=$(awk '/^## Use/ { use = 1 } use && /^```sh$/ { inside = 1; next }
             inside && /^```$/ { exit } inside { print }' README.md)
[ -n "$block" ] || { echo "FAIL: no sh block under ## Use"; exit 1; }
rm -f /tmp/uslab.[0-9]* # what the USLAB_LOG line writes
n=0
printf '%s\n' "$block" | {
    while IFS= read -r line; do
        case $line in '' | '#'*) continue ;; esac
        n=$((n + 1))
        out=$(sh -c "$line" 2>&1) || { echo "FAIL: README line exits non-zero: $line"; echo "$out"; exit 1; }
        case $line in
        *USLAB_LOG=*)
            grep -ql '^in use: ' /tmp/uslab.* 2>/dev/null ||
                { echo "FAIL: no statistics in /tmp/uslab.* from: $line"; exit 1; } ;;
        *--stats*)
            printf '%s\n' "$out" | grep -q '^in use: ' ||
                { echo "FAIL: no statistics from: $line"; echo "$out"; exit 1; } ;;
        *hello*)
            printf '%s\n' "$out" | grep -qx 'hello' ||
                { echo "FAIL: no hello from: $line"; echo "$out"; exit 1; } ;;
        esac
    done
    [ "$n" -ge 4 ] || { echo "FAIL: only $n lines"; exit 1; }
    echo "readme use ok ($n lines)"
}
