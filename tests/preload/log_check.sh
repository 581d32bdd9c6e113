#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# USLAB_LOG=PATH (issue 39): reports go to a file, %p the process id. Before, a program that
# closes stderr at exit (ls, sort, cat do) lost its statistics and leak table; without it,
# the report asked for goes to the stderr the program started with (cases 5 and 6).
# Usage: log_check.sh PRELOAD
set -euo pipefail
preload=$1
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL: $*"; ls -l "$d" >&2; exit 1; }

# 1. ls closes stderr at exit: its statistics reach the file, one file for the process.
USLAB_LOG="$d/stats.%p" USLAB_STATS=1 LD_PRELOAD=$preload ls / >/dev/null 2>"$d/err"
n=$(ls "$d" | grep -c '^stats\.[0-9][0-9]*$' || true)
[ "$n" = 1 ] || fail "ls: $n log files, want 1"
grep -q '^Name  *Objects' "$d"/stats.* || fail "ls: no statistics table in the log"
[ ! -s "$d/err" ] || fail "ls: stderr got $(cat "$d/err")"

# 2. A pipeline: each process its own file (%p), each with its leak report.
USLAB_LOG="$d/leaks.%p" USLAB_LEAKS=1 LD_PRELOAD=$preload sh -c 'sort /etc/hostname | cat >/dev/null'
n=$(ls "$d" | grep -c '^leaks\.' || true)
[ "$n" -ge 2 ] || fail "pipeline: $n log files, want one a process"
for f in "$d"/leaks.*; do
    grep -q '^uslab: leak report: ' "$f" || fail "$f has no leak report"
done

# 3. %% is a %; nothing to report, no file.
USLAB_LOG="$d/quiet.%%" LD_PRELOAD=$preload /bin/true
[ ! -e "$d/quiet.%" ] || fail "a file with nothing to report"
USLAB_LOG="$d/pct.%%" USLAB_LEAKS=1 LD_PRELOAD=$preload /bin/true
[ -s "$d/pct.%" ] || fail "%% did not give %"

# 4. A file that cannot be opened: stderr, with a line saying so.
out=$(USLAB_LOG="$d/no/such/dir/x" USLAB_LEAKS=1 LD_PRELOAD=$preload /bin/true 2>&1)
echo "$out" | grep -q 'USLAB_LOG: cannot open the log file' || fail "no note: $out"
echo "$out" | grep -q 'leak report' || fail "the report was lost: $out"
# 5. No USLAB_LOG: a report at exit asked for keeps a copy of stderr, which the report
#    uses once the program has closed its own (`uslab run --stats -- ls` printed nothing).
USLAB_STATS=1 LD_PRELOAD=$preload ls / >/dev/null 2>"$d/err5"
grep -q '^Name  *Objects' "$d/err5" || fail "ls without USLAB_LOG: no statistics on stderr"
USLAB_LEAKS=1 LD_PRELOAD=$preload sort /etc/hostname >/dev/null 2>"$d/err5b"
grep -q '^uslab: leak report: ' "$d/err5b" || fail "sort without USLAB_LOG: no leak report"

# 6. The copy is used only while it is still that file: a program that closed stderr and
#    put another file at every number from 3 to 255 gets no report in it.
USLAB_STATS=1 LD_PRELOAD=$preload perl -MPOSIX -e '
    open(my $f, ">>", $ARGV[0]) or die; my $n = fileno($f); POSIX::close(2);
    for my $i (3 .. 255) { POSIX::dup2($n, $i) if $i != $n } exit 0' "$d/victim" 2>"$d/err6"
[ ! -s "$d/victim" ] || fail "the statistics went into the program's own file"
echo "log ok"
