#!/bin/sh
# SPDX-License-Identifier: MIT
# limits.sh PRELOAD PROBE - uslab under RLIMIT_AS (docs/design.md §2). For each limit, the
# room left for large blocks (malloc of 16 MiB until ENOMEM) with uslab preloaded must be
# at least glibc's alone minus a quarter of the limit (uslab's budget) and one block; small
# blocks must work and keep errno; slabs must be on where the budget holds a useful
# reservation and off (silently) where it does not. Then fork while threads malloc, with
# slabs on and with slabs off.
set -eu
preload=$1 probe=$2
status=0
field() { sed -n "s/.*$1=\([^ ]*\).*/\1/p"; }
for spec in 16384:on 4096:on 1024:on 200:off 96:off; do
    mib=${spec%%:*} want=${spec##*:}
    g=$("$probe" "$mib" measure) || { echo "limit ${mib} MiB: glibc run failed"; exit 1; }
    u=$(env LD_PRELOAD="$preload" "$probe" "$mib" measure 2>"${TMPDIR:-/tmp}/limits.err.$$") ||
        { echo "limit ${mib} MiB: uslab run failed"; cat "${TMPDIR:-/tmp}/limits.err.$$"; exit 1; }
    if [ -s "${TMPDIR:-/tmp}/limits.err.$$" ]; then
        echo "limit ${mib} MiB: uslab wrote to stderr:"; cat "${TMPDIR:-/tmp}/limits.err.$$"; status=1
    fi
    rm -f "${TMPDIR:-/tmp}/limits.err.$$"
    gl=$(echo "$g" | field large) ul=$(echo "$u" | field large) res=$(echo "$u" | field reserved)
    floor=$(( gl - (mib << 20) / 4 - (16 << 20) ))
    verdict=ok
    [ "$ul" -ge "$floor" ] || { verdict="FAIL: less room than glibc minus a quarter"; status=1; }
    if [ "$want" = on ]; then
        case $res in disabled|glibc) verdict="FAIL: slabs are off"; status=1 ;; esac
    else
        [ "$res" = disabled ] || { verdict="FAIL: slabs should be off, reserved=$res"; status=1; }
    fi
    echo "limit ${mib} MiB: large blocks glibc $((gl >> 20)) MiB, uslab $((ul >> 20)) MiB, reserved $res: $verdict"
done
for mib in 1024 96; do
    out=$(env LD_PRELOAD="$preload" "$probe" "$mib" fork) || { echo "limit ${mib} MiB: fork run failed"; exit 1; }
    echo "limit ${mib} MiB: $out"
done
# `ulimit -v 8000000` (KiB), as CI systems and sandboxes set it (issue 15): the shell's
# limit, in force from exec. Slabs stay on, and uslab prints nothing: its stderr is the
# program's. Both modes, each compared with an empty stderr.
err="${TMPDIR:-/tmp}/limits.err.$$"
for mode in measure fork; do
    out=$( (ulimit -v 8000000 && env LD_PRELOAD="$preload" "$probe" 7812 "$mode") 2>"$err") ||
        { echo "ulimit -v 8000000 $mode: run failed"; cat "$err"; rm -f "$err"; exit 1; }
    if [ -s "$err" ]; then
        echo "ulimit -v 8000000 $mode: uslab wrote to stderr:"; cat "$err"; status=1
    else
        echo "ulimit -v 8000000 $mode: stderr empty; $out"
    fi
    case $mode:$(echo "$out" | field reserved) in
    measure:disabled | measure:glibc) echo "ulimit -v 8000000: slabs are off"; status=1 ;;
    esac
done
rm -f "$err"
exit $status
