#!/usr/bin/env bash
# Installs the build into a temporary prefix, then builds and runs a program against it
# with the flags pkg-config gives, as a user adopting uslab would.
set -euo pipefail
build=$1 src=$2
command -v pkg-config >/dev/null || { echo "pkg-config is not installed"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
export PKG_CONFIG_PATH=$tmp/prefix/lib/pkgconfig
# shellcheck disable=SC2046
cc "$src/consumer.c" $(pkg-config --cflags --libs uslab) -Wl,-rpath,"$tmp/prefix/lib" \
    -o "$tmp/consumer"
"$tmp/consumer"
test -x "$tmp/prefix/bin/uslab" && test -f "$tmp/prefix/lib/libuslab-preload.so"
echo "installed tree works"
