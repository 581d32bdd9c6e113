#!/bin/sh
# SPDX-License-Identifier: MIT
# compare.sh PRELOAD_LIB PACKAGE STDIN PROGRAM [ARGS...]
#
# Runs PROGRAM ARGS (stdin from the file STDIN, or /dev/null for "-") twice: plainly and with
# LD_PRELOAD=PRELOAD_LIB. Fails when either run exits non-zero, when the outputs differ or
# are empty, or when the preloaded run prints a uslab report on stderr. PACKAGE names the
# Debian package that provides PROGRAM, for the message when it is missing.
set -u
lib=$1 pkg=$2 in=$3
shift 3
prog=$1
shift

case $prog in
*NOTFOUND* | "")
    echo "preload test: program not found; install the Debian package '$pkg'" >&2
    exit 1
    ;;
esac
if ! command -v "$prog" >/dev/null 2>&1; then
    echo "preload test: '$prog' not found; install the Debian package '$pkg'" >&2
    exit 1
fi
if [ ! -f "$lib" ]; then
    echo "preload test: preload library '$lib' missing" >&2
    exit 1
fi
[ "$in" = - ] && in=/dev/null

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

env -u LD_PRELOAD "$prog" "$@" <"$in" >"$tmp/plain.out" 2>"$tmp/plain.err"
rc=$?
if [ $rc -ne 0 ]; then
    echo "preload test: '$prog $*' failed without preload (exit $rc):" >&2
    head -c 4000 "$tmp/plain.err" >&2
    exit 1
fi
LD_PRELOAD=$lib "$prog" "$@" <"$in" >"$tmp/preload.out" 2>"$tmp/preload.err"
rc=$?
if [ $rc -ne 0 ]; then
    echo "preload test: '$prog $*' failed under LD_PRELOAD=$lib (exit $rc):" >&2
    head -c 4000 "$tmp/preload.err" >&2
    exit 1
fi
if grep -q '^uslab:' "$tmp/preload.err"; then
    echo "preload test: uslab reported a problem:" >&2
    grep '^uslab:' "$tmp/preload.err" | head -20 >&2
    exit 1
fi
if [ ! -s "$tmp/plain.out" ]; then
    echo "preload test: '$prog $*' printed nothing" >&2
    exit 1
fi
if ! cmp -s "$tmp/plain.out" "$tmp/preload.out"; then
    echo "preload test: output differs under LD_PRELOAD (- plain, + preload):" >&2
    diff -u "$tmp/plain.out" "$tmp/preload.out" | head -40 >&2
    exit 1
fi
echo "same output with and without LD_PRELOAD ($(wc -l <"$tmp/plain.out") lines):"
head -5 "$tmp/plain.out"
exit 0
