#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the newest peers from their public sources into bench/peers/ (not committed, see
# .gitignore), where bench/run.py finds them next to Debian's packages: mimalloc 3.x
# (`mimalloc3`, bench/peers/mimalloc3/libmimalloc.so) and snmalloc (`snmalloc`,
# bench/peers/snmalloc/libsnmallocshim.so). Without them the benchmark runs all the same,
# with a note in its report.
#
# Usage: bench/build_peers.sh [MIMALLOC_SOURCE [SNMALLOC_SOURCE]]
# A SOURCE is a source tree, or a git directory (its tag below is exported); by default
# the repositories are cloned from GitHub. Needs cmake, make, gcc and g++.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$here/peers
mimalloc_tag=${MIMALLOC_TAG:-v3.4.3}
snmalloc_tag=${SNMALLOC_TAG:-0.7.5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# source <name> <given or empty> <url> <tag>: a source tree in $work/<name>
source_tree() {
    local name=$1 given=$2 url=$3 tag=$4
    mkdir -p "$work/$name"
    if [ -z "$given" ]; then
        git clone -q --depth 1 --branch "$tag" "$url" "$work/$name"
    elif [ -f "$given/CMakeLists.txt" ]; then
        cp -a "$given/." "$work/$name/"
    else
        git --git-dir="$given" archive "$tag" | tar -x -C "$work/$name"
    fi
}

source_tree mimalloc "${1:-}" https://github.com/microsoft/mimalloc "$mimalloc_tag"
cmake -S "$work/mimalloc" -B "$work/mimalloc/build" -DCMAKE_BUILD_TYPE=Release \
    -DMI_BUILD_TESTS=OFF -DMI_BUILD_STATIC=OFF -DMI_BUILD_OBJECT=OFF >/dev/null
cmake --build "$work/mimalloc/build" -j "$(nproc)" >/dev/null
mkdir -p "$out/mimalloc3"
cp -L "$work/mimalloc/build/libmimalloc.so" "$out/mimalloc3/libmimalloc.so"
echo "$mimalloc_tag" >"$out/mimalloc3/VERSION"

source_tree snmalloc "${2:-}" https://github.com/microsoft/snmalloc "$snmalloc_tag"
cmake -S "$work/snmalloc" -B "$work/snmalloc/build" -DCMAKE_BUILD_TYPE=Release \
    -DSNMALLOC_BUILD_TESTING=OFF >/dev/null
cmake --build "$work/snmalloc/build" -j "$(nproc)" --target snmallocshim >/dev/null
mkdir -p "$out/snmalloc"
cp -L "$work/snmalloc/build/libsnmallocshim.so" "$out/snmalloc/libsnmallocshim.so"
echo "$snmalloc_tag" >"$out/snmalloc/VERSION"
echo "built: $out/mimalloc3 ($mimalloc_tag), $out/snmalloc ($snmalloc_tag)"
