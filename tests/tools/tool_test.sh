#!/bin/sh
# SPDX-License-Identifier: MIT
# tool_test.sh CASE USLAB PROBE PRELOAD_LIB [README] - one test case of the `uslab` front end.
# USLAB is build/uslab, PROBE is tool_probe, PRELOAD_LIB is libuslab-preload.so, README the
# file with the settings and command tables (docs/reference.md). Prints what went wrong and
# exits 1 on failure.
set -u
case_name=$1 uslab=$2 probe=$3 lib=$4 readme=${5:-}

# Start from an environment with no uslab settings and no LD_PRELOAD.
for v in $(env | sed -n 's/^\(USLAB_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
unset LD_PRELOAD

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL ($case_name): $*" >&2; exit 1; }

# expect_line FILE LINE: FILE has exactly the line LINE.
expect_line() {
    grep -qxF -- "$2" "$1" || { echo "--- $1:" >&2; cat "$1" >&2; fail "no line '$2'"; }
}
# expect_no_match FILE REGEX
expect_no_match() {
    if grep -q -- "$2" "$1"; then cat "$1" >&2; fail "unexpected '$2'"; fi
}
# run_status EXPECTED ARGS...: run uslab ARGS, stdout to $tmp/out, stderr to $tmp/err.
run_status() {
    want=$1; shift
    "$uslab" "$@" > "$tmp/out" 2> "$tmp/err"
    got=$?
    [ "$got" -eq "$want" ] || { cat "$tmp/out" "$tmp/err" >&2; fail "uslab $* exited $got, want $want"; }
}
abs_lib=$(realpath "$lib")

case $case_name in
run_options)
    run_status 0 run --debug=FZ,malloc-* --stats=json --leaks -- "$probe"
    expect_line "$tmp/out" "USLAB_DEBUG=FZ,malloc-*"
    expect_line "$tmp/out" "USLAB_STATS=json"
    expect_line "$tmp/out" "USLAB_LEAKS=1"
    expect_line "$tmp/out" "LD_PRELOAD=$abs_lib"
    expect_line "$tmp/out" "malloc=uslab"
    expect_no_match "$tmp/out" "^USLAB_DEBUG_CONTINUE="
    # --leaks=json: the child gets USLAB_LEAKS=json and the library writes its leak report
    # as one JSON document on stderr (the probe's stdout buffer is still allocated at exit),
    # not the text report.
    run_status 0 run --leaks=json -- "$probe"
    expect_line "$tmp/out" "USLAB_LEAKS=json"
    expect_line "$tmp/out" "malloc=uslab"
    grep -q '^{"uslab_leaks": {"pid": [0-9]*, "objects": [0-9]*, "bytes": [0-9]*, "sites": [0-9]*, "overwritten": 0, "by_site": \[' \
        "$tmp/err" || { cat "$tmp/err" >&2; fail "--leaks=json: no JSON leak report on stderr"; }
    expect_no_match "$tmp/err" "^uslab: leak report"
    if command -v python3 > /dev/null; then
        python3 -c 'import json, sys; d = json.load(sys.stdin)["uslab_leaks"]; sys.exit(not isinstance(d["by_site"], list))' \
            < "$tmp/err" || { cat "$tmp/err" >&2; fail "--leaks=json: stderr is not one JSON leak report"; }
    fi
    ;;
run_more_options)
    # --stats (table), --continue, --env in both spellings, "-" (no letters: debugging
    # off), the separate-argument forms, and a later option overriding an earlier one.
    run_status 0 run --debug - --stats --continue --env USLAB_PURGE_DELAY=0 \
        --env=USLAB_MAX_SLAB_SIZE=8K --preload "$lib" --stats=table -- "$probe"
    expect_line "$tmp/out" "USLAB_DEBUG=-"
    expect_line "$tmp/out" "USLAB_STATS=1"
    expect_line "$tmp/out" "USLAB_DEBUG_CONTINUE=1"
    expect_line "$tmp/out" "USLAB_PURGE_DELAY=0"
    expect_line "$tmp/out" "USLAB_MAX_SLAB_SIZE=8K"
    expect_line "$tmp/out" "malloc=uslab"
    run_status 0 run --debug=PUT,'conn*',malloc-64 --stats=json --stats -- "$probe"
    expect_line "$tmp/out" "USLAB_DEBUG=PUT,conn*,malloc-64"
    expect_line "$tmp/out" "USLAB_STATS=1"
    # No options: only the preload library; inherited settings are kept.
    USLAB_EMPTY_SLABS=3 "$uslab" run -- "$probe" > "$tmp/out" || fail "plain run failed"
    expect_line "$tmp/out" "USLAB_EMPTY_SLABS=3"
    expect_line "$tmp/out" "malloc=uslab"
    expect_no_match "$tmp/out" "^USLAB_DEBUG="
    ;;
ld_preload_kept)
    LD_PRELOAD=libc.so.6 "$uslab" run --leaks -- "$probe" > "$tmp/out" || fail "run failed"
    expect_line "$tmp/out" "LD_PRELOAD=$abs_lib:libc.so.6"
    expect_line "$tmp/out" "malloc=uslab"
    ;;
exit_status)
    run_status 42 run -- "$probe" 42
    expect_line "$tmp/out" "malloc=uslab"
    run_status 1 run --stats -- "$probe" 1
    run_status 0 run -- sh -c 'exit 0'
    ;;
signal)
    "$uslab" run -- "$probe" signal > "$tmp/out" 2> "$tmp/err"
    got=$?
    [ "$got" -eq 143 ] || fail "program killed by SIGTERM: uslab exited $got, want 143"
    ;;
no_program)
    run_status 127 run -- "$tmp/no-such-program"
    grep -q "cannot execute" "$tmp/err" || fail "no message for a missing program"
    run_status 127 run -- no-such-program-in-path-uslab
    ;;
usage_errors)
    # Each: exit 2, a "uslab: " message on stderr, nothing run.
    check_usage() {
        run_status 2 "$@"
        grep -q '^uslab: ' "$tmp/err" || fail "uslab $*: no error message on stderr"
        expect_no_match "$tmp/out" "malloc="
    }
    check_usage
    check_usage frobnicate
    check_usage run "$probe"
    check_usage run --leaks "$probe"
    check_usage run --leaks
    check_usage run --
    check_usage run --bogus -- "$probe"
    check_usage run --debug=FX -- "$probe"
    check_usage run --debug=fzx,malloc-64 -- "$probe"
    check_usage run --debug
    check_usage run --stats=xml -- "$probe"
    check_usage run --env FOO=1 -- "$probe"
    check_usage run --env USLAB_DEBUG -- "$probe"
    check_usage run --env USLAB_=1 -- "$probe"
    check_usage run --env LD_PRELOAD=x -- "$probe"
    check_usage run --preload= -- "$probe"
    check_usage where extra
    check_usage stats
    check_usage stats 12x
    check_usage stats 1 2
    check_usage stats --xml 1
    check_usage top
    check_usage top -d 0 1
    check_usage top -s z 1
    check_usage top -n 0 1
    check_usage help --bogus
    check_usage help frobnicate
    grep -qF "uslab: help: unknown command 'frobnicate'" "$tmp/err" ||
        { cat "$tmp/err" >&2; fail "help of an unknown command: not called one"; }
    ;;
help)
    for how in --help help -h; do
        # shellcheck disable=SC2086
        "$uslab" $how > "$tmp/help" 2>&1 || fail "uslab $how failed"
        for v in USLAB_MAX_SLAB_SIZE USLAB_RESERVE USLAB_EMPTY_SLABS \
                 USLAB_PURGE_DELAY USLAB_TCACHE_MAX USLAB_DEBUG USLAB_DEBUG_CONTINUE \
                 USLAB_LEAKS USLAB_STATS USLAB_PRELOAD_LIB LD_PRELOAD \
                 --debug --stats --stats=json --leaks --continue --preload --env \
                 'uslab where' 'uslab stats PID' 'uslab top PID' --json --delay --sort \
                 --version; do
            grep -qF -- "$v" "$tmp/help" || fail "uslab $how does not mention $v"
        done
        # Every allocator setting with its default.
        for d in 'default: 256K' 'default: 256G' 'default: 1' 'default: 1000' \
                 'default: 64M' 'uslab settings [--markdown]'; do
            grep -qF -- "$d" "$tmp/help" || fail "uslab $how does not give '$d'"
        done
    done
    # A command's own help: its usage line, its options, and for run the settings.
    "$uslab" run --help > "$tmp/help" 2>&1 || fail "uslab run --help failed"
    for v in 'usage: uslab run' --debug --stats=json --leaks --continue --preload --env \
             USLAB_PURGE_DELAY USLAB_PRELOAD_LIB 'default: 256G'; do
        grep -qF -- "$v" "$tmp/help" || fail "uslab run --help does not mention $v"
    done
    "$uslab" top --help > "$tmp/help" 2>&1 || fail "uslab top --help failed"
    for v in 'usage: uslab top PID' '-d SECONDS' '-s KEY' 'n name' 'a active (the default)'; do
        grep -qF -- "$v" "$tmp/help" || fail "uslab top --help does not mention $v"
    done
    expect_no_match "$tmp/help" "USLAB_RESERVE"
    ;;
help_agrees)
    # Every command of the table (uslab help --markdown) has a --help that shows its usage
    # line and every option the table lists for it, and uslab --help shows them all; a
    # usage error lists every command's usage line.
    "$uslab" help --markdown > "$tmp/md" || fail "uslab help --markdown failed"
    "$uslab" --help > "$tmp/all" || fail "uslab --help failed"
    "$uslab" no-such-command > /dev/null 2> "$tmp/usage" && fail "an unknown command succeeded"
    sed -n 's/^| `uslab \([a-z-]*\)\(.*\)` | .*/\1\2/p' "$tmp/md" > "$tmp/commands"
    [ "$(wc -l < "$tmp/commands")" -ge 8 ] || fail "fewer commands than expected in the table"
    while read -r name synopsis; do
        "$uslab" "$name" --help > "$tmp/one" 2>&1 || fail "uslab $name --help failed"
        line="uslab $name${synopsis:+ $synopsis}"
        grep -qF -- "usage: $line" "$tmp/one" || fail "uslab $name --help: no usage line '$line'"
        grep -qF -- "  $line" "$tmp/all" || fail "uslab --help: no line '$line'"
        grep -qF -- "$line" "$tmp/usage" || fail "a usage error does not list '$line'"
        # The rows of this command's option table, spellings without backquotes.
        awk -v head="| option of \`uslab $name\` | meaning |" '
            $0 == head { f = 1; next } f && /^$/ { f = 0 } f && /^\| `/ { print }' "$tmp/md" |
            sed 's/^| \(.*\) | .* |$/\1/; s/`//g; s/ |.*//' > "$tmp/options"
        while read -r spelling; do
            grep -qxF -- "  $spelling" "$tmp/one" || fail "uslab $name --help: no option '$spelling'"
            grep -qxF -- "  $spelling" "$tmp/all" || fail "uslab --help: no option '$spelling'"
        done < "$tmp/options"
    done < "$tmp/commands"
    # The check can fail: an option the table does not have is not found.
    grep -qxF -- "  --no-such-option" "$tmp/all" && fail "the control option was found"
    grep -c '^| `--' "$tmp/md" > /dev/null || fail "no option rows parsed"
    ;;
readme_commands)
    # docs/reference.md's command tables, between their markers, are `uslab help --markdown`.
    [ -n "$readme" ] && [ -f "$readme" ] || fail "no reference given"
    "$uslab" help --markdown > "$tmp/table.md" || fail "uslab help --markdown failed"
    [ -s "$tmp/table.md" ] || fail "uslab help --markdown printed nothing"
    commands_match() {
        [ "$(grep -c '^<!-- commands:begin' "$1")" = 1 ] || return 1
        [ "$(grep -c '^<!-- commands:end' "$1")" = 1 ] || return 1
        awk '/^<!-- commands:end/ { f = 0 } f { print } /^<!-- commands:begin/ { f = 1 }' \
            "$1" > "$tmp/readme.md"
        cmp -s "$tmp/table.md" "$tmp/readme.md"
    }
    if ! commands_match "$readme"; then
        echo "docs/reference.md's command tables differ from 'uslab help --markdown'" \
             "(regenerate them between the commands markers):" >&2
        diff "$tmp/readme.md" "$tmp/table.md" >&2
        fail "docs/reference.md's command tables are out of date"
    fi
    # The check can fail: an altered row, a missing row, an extra row, a missing marker.
    sed 's/^\(| `uslab top PID\)/\1 [-x]/' "$readme" > "$tmp/r1"
    sed '/^| `--continue` |/d' "$readme" > "$tmp/r2"
    awk '/^<!-- commands:end/ { print "| `--new` | new |" } { print }' "$readme" > "$tmp/r3"
    grep -v '^<!-- commands:begin' "$readme" > "$tmp/r4"
    for r in r1 r2 r3 r4; do
        cmp -s "$readme" "$tmp/$r" && fail "control $r did not change the reference"
        commands_match "$tmp/$r" && fail "the check passes on an altered reference ($r)"
    done
    ;;
version)
    out=$("$uslab" --version) || fail "--version failed"
    echo "$out" | grep -qE '^uslab [0-9]+\.[0-9]+' || fail "--version printed '$out'"
    ;;
where)
    out=$("$uslab" where) || fail "where failed"
    [ -f "$out" ] || fail "where printed '$out', not a file"
    [ "$out" = "$abs_lib" ] || fail "where printed '$out', want $abs_lib"
    cp "$lib" "$tmp/copy.so"
    out=$(USLAB_PRELOAD_LIB=$tmp/copy.so "$uslab" where) || fail "where with USLAB_PRELOAD_LIB"
    [ "$out" = "$(realpath "$tmp/copy.so")" ] || fail "USLAB_PRELOAD_LIB ignored: '$out'"
    out=$(USLAB_PRELOAD_LIB=/nonexistent "$uslab" where --preload="$tmp/copy.so") ||
        fail "where --preload"
    [ "$out" = "$(realpath "$tmp/copy.so")" ] || fail "--preload does not win: '$out'"
    USLAB_PRELOAD_LIB=$tmp/missing.so "$uslab" where > /dev/null 2>&1 &&
        fail "where succeeded with a missing USLAB_PRELOAD_LIB"
    run_status 1 run --preload="$tmp/missing.so" -- "$probe"
    # A directory or a file that is no shared object is refused, by where and run (session
    # 16's audit: taken before, and run went on without uslab, exiting 0)
    printf 'not a library\n' >"$tmp/text.so"
    for bad in "$tmp" "$tmp/text.so"; do
        "$uslab" where --preload="$bad" > /dev/null 2>"$tmp/err" && fail "where took $bad"
        grep -q "^uslab: preload library $bad (from --preload): " "$tmp/err" ||
            fail "where $bad: message: $(cat "$tmp/err")"
        run_status 1 run --preload="$bad" -- "$probe"
    done
    # A path LD_PRELOAD cannot hold: where refuses it as run does (it printed it before)
    mkdir -p "$tmp/a b" && cp "$lib" "$tmp/a b/lib.so"
    "$uslab" where --preload="$tmp/a b/lib.so" > /dev/null 2>"$tmp/err" && fail "where took a space"
    grep -q "contains a space or colon" "$tmp/err" || fail "where space: $(cat "$tmp/err")"
    run_status 1 run --preload="$tmp/a b/lib.so" -- "$probe"
    ;;
layout_build)
    # build/tools/uslab finds ../libuslab-preload.so.
    mkdir -p "$tmp/b/tools"
    cp "$uslab" "$tmp/b/tools/uslab"
    cp "$lib" "$tmp/b/libuslab-preload.so"
    out=$("$tmp/b/tools/uslab" where) || fail "where from tools/"
    [ "$out" = "$(realpath "$tmp/b/libuslab-preload.so")" ] || fail "tools/uslab found '$out'"
    # Found through a symlink to the executable too (/proc/self/exe is the real file).
    ln -s "$tmp/b/tools/uslab" "$tmp/link-uslab"
    out=$("$tmp/link-uslab" where) || fail "where through a symlink"
    [ "$out" = "$(realpath "$tmp/b/libuslab-preload.so")" ] || fail "symlink found '$out'"
    # Nothing to find: an error, exit 1.
    rm "$tmp/b/libuslab-preload.so"
    "$tmp/b/tools/uslab" where > /dev/null 2> "$tmp/err" && fail "where found a library"
    grep -q "cannot find" "$tmp/err" || fail "no message when nothing is found"
    ;;
layout_install)
    # <prefix>/bin/uslab finds <prefix>/lib/libuslab-preload.so and runs with it.
    mkdir -p "$tmp/p/bin" "$tmp/p/lib"
    cp "$uslab" "$tmp/p/bin/uslab"
    cp "$lib" "$tmp/p/lib/libuslab-preload.so"
    out=$("$tmp/p/bin/uslab" where) || fail "where from bin/"
    [ "$out" = "$(realpath "$tmp/p/lib/libuslab-preload.so")" ] || fail "bin/uslab found '$out'"
    "$tmp/p/bin/uslab" run --leaks -- "$probe" > "$tmp/out" || fail "installed run failed"
    expect_line "$tmp/out" "LD_PRELOAD=$(realpath "$tmp/p/lib/libuslab-preload.so")"
    expect_line "$tmp/out" "malloc=uslab"
    ;;
debug_spec)
    # --debug takes exactly what the library takes (src/settings.c's parser): letters in
    # either case, none meaning FZPU, '-' ignored, empty globs; the value reaches the
    # program unchanged, and the library reads it without a warning (its globs select caches
    # the probe uses: one that selects none is named at exit).
    for v in fz ',malloc-*' '' - FZ, 'f-z,,malloc-*' tU,malloc-64; do
        run_status 0 run --debug="$v" -- "$probe"
        expect_line "$tmp/out" "USLAB_DEBUG=$v"
        expect_line "$tmp/out" "malloc=uslab"
        expect_no_match "$tmp/err" "USLAB_DEBUG"
    done
    run_status 0 run --debug ',malloc-*' -- "$probe"
    expect_line "$tmp/out" "USLAB_DEBUG=,malloc-*"
    # No value (issue 39): before `--` or another option, the default letters; before, it
    # took `--` as its letters.
    run_status 0 run --debug -- "$probe"
    expect_line "$tmp/out" "USLAB_DEBUG="
    expect_line "$tmp/out" "malloc=uslab"
    run_status 0 run --debug --leaks -- "$probe"
    expect_line "$tmp/out" "USLAB_DEBUG="
    expect_line "$tmp/out" "USLAB_LEAKS=1"
    run_status 0 run --debug=yes -- "$probe"
    expect_line "$tmp/out" "USLAB_DEBUG=yes"
    expect_no_match "$tmp/err" "ignored"
    # An unknown letter: exit 2, a uslab: message naming it, nothing run.
    for v in FX x fzq,malloc-64 'F Z'; do
        run_status 2 run --debug="$v" -- "$probe"
        grep -q "^uslab: --debug: unknown letter" "$tmp/err" ||
            { cat "$tmp/err" >&2; fail "--debug=$v: no 'unknown letter' message"; }
        grep -qF -- "in '$v'" "$tmp/err" || { cat "$tmp/err" >&2; fail "--debug=$v not quoted"; }
        expect_no_match "$tmp/out" "malloc="
    done
    run_status 2 run --debug=fzq -- "$probe"
    grep -qF "unknown letter 'q'" "$tmp/err" || { cat "$tmp/err" >&2; fail "wrong letter named"; }
    # The library warns about the same value (given through --env, which is not checked).
    run_status 0 run --env USLAB_DEBUG=FX -- "$probe"
    grep -qF "unknown letter 'X' ignored" "$tmp/err" ||
        { cat "$tmp/err" >&2; fail "the library did not warn about USLAB_DEBUG=FX"; }
    grep -qF "debugging with F" "$tmp/err" ||
        { cat "$tmp/err" >&2; fail "the warning about USLAB_DEBUG=FX does not say what is on"; }
    # Other tools' switches (issue 39): USLAB_DEBUG=1 (yes, on, true) turns the default
    # letters on, with no warning; before, it turned debugging off with one.
    for v in 1 yes ON true; do
        run_status 0 run --env USLAB_DEBUG=$v --stats -- "$probe"
        expect_no_match "$tmp/err" "ignored"
        grep -q "^malloc-.* FZPU$" "$tmp/err" || # the statistics' flags: the default letters
            { cat "$tmp/err" >&2; fail "USLAB_DEBUG=$v did not turn debugging on"; }
    done
    run_status 0 run --env USLAB_DEBUG=off --stats -- "$probe"
    expect_no_match "$tmp/err" "FZPU"
    expect_no_match "$tmp/err" "ignored"
    ;;
setting_typos)
    # A USLAB_ name that is nearly a setting's (a typo, or the name with a word added) is
    # reported with the setting it resembles; every other unknown USLAB_ name is reported
    # too, once; the settings themselves pass without a word.
    for pair in USLAB_DEBUGG=F:USLAB_DEBUG USLAB_PURGE_DELAY_MS=5:USLAB_PURGE_DELAY \
        USLAB_STAT=1:USLAB_STATS USLAB_TCACHEMAX=1M:USLAB_TCACHE_MAX USLAB_LEKAS=1:USLAB_LEAKS; do
        v=${pair%:*}
        near=${pair##*:}
        run_status 0 run --env "$v" -- "$probe"
        grep -qF "uslab: ${v%%=*} is not a setting of uslab (ignored); did you mean $near?" \
            "$tmp/err" || { cat "$tmp/err" >&2; fail "$v: no warning naming $near"; }
        expect_line "$tmp/out" "malloc=uslab"
    done
    run_status 0 run --env USLAB_PURGE_DELAY=100 --env USLAB_STATS=0 -- "$probe"
    expect_no_match "$tmp/err" "not a setting"
    expect_line "$tmp/out" "malloc=uslab"
    run_status 0 run --env USLAB_VERBOSE=1 --env USLAB_SHOW_STATS=1 --env USLAB_STATS_FILE=x \
        -- "$probe"
    for v in USLAB_VERBOSE USLAB_SHOW_STATS USLAB_STATS_FILE; do
        [ "$(grep -c "^uslab: $v is not a setting of uslab (ignored" "$tmp/err")" = 1 ] ||
            { cat "$tmp/err" >&2; fail "$v: not reported once"; }
    done
    expect_line "$tmp/out" "malloc=uslab"
    ;;
readme_settings)
    # docs/reference.md's settings table, between its markers, is `uslab settings --markdown`.
    [ -n "$readme" ] && [ -f "$readme" ] || fail "no reference given"
    "$uslab" settings --markdown > "$tmp/table.md" || fail "uslab settings --markdown failed"
    [ -s "$tmp/table.md" ] || fail "uslab settings --markdown printed nothing"
    # readme_matches FILE: 0 if FILE has one begin and one end marker with the table between.
    readme_matches() {
        [ "$(grep -c '^<!-- settings-table:begin' "$1")" = 1 ] || return 1
        [ "$(grep -c '^<!-- settings-table:end' "$1")" = 1 ] || return 1
        awk '/^<!-- settings-table:end/ { f = 0 } f { print } /^<!-- settings-table:begin/ { f = 1 }' \
            "$1" > "$tmp/readme.md"
        cmp -s "$tmp/table.md" "$tmp/readme.md"
    }
    if ! readme_matches "$readme"; then
        echo "docs/reference.md's settings table differs from 'uslab settings --markdown'" \
             "(regenerate it between the settings-table markers):" >&2
        diff "$tmp/readme.md" "$tmp/table.md" >&2
        fail "docs/reference.md's settings table is out of date"
    fi
    # The check can fail: an altered row, a missing row, an extra row, a missing marker.
    sed 's/^\(| `USLAB_RESERVE` | \)256G/\1512G/' "$readme" > "$tmp/r1"
    sed '/^| `USLAB_STATS` |/d' "$readme" > "$tmp/r2"
    awk '/^<!-- settings-table:end/ { print "| `USLAB_NEW` | 0 | 0 or 1 | new |" } { print }' \
        "$readme" > "$tmp/r3"
    grep -v '^<!-- settings-table:end' "$readme" > "$tmp/r4"
    for r in r1 r2 r3 r4; do
        cmp -s "$readme" "$tmp/$r" && fail "control $r did not change the reference"
        readme_matches "$tmp/$r" && fail "the check passes on an altered reference ($r)"
    done
    ;;
stats_unreadable)
    # A process whose memory this user cannot read (not dumpable: its credentials changed) is
    # not said to use uslab or not (session 17's contract audit): the refusal is explained,
    # with the remedy. Needs root to run both as another user.
    # (Debian's python3 by its path: a python3 under root's home is not the other user's.)
    [ "$(id -u)" = 0 ] && command -v setpriv > /dev/null && [ -x /usr/bin/python3 ] ||
        { echo "needs root, setpriv and /usr/bin/python3"; exit 77; }
    chmod 755 "$tmp" && cp "$uslab" "$tmp/uslab" && chmod 755 "$tmp/uslab"
    # PR_SET_DUMPABLE (4) 0: /proc/PID/maps is root's to read.
    setpriv --reuid=1 --regid=1 --clear-groups /usr/bin/python3 -c \
        'import ctypes, time; ctypes.CDLL(None).prctl(4, 0, 0, 0, 0); time.sleep(30)' &
    sleeper=$!
    sleep 0.5
    setpriv --reuid=1 --regid=1 --clear-groups "$tmp/uslab" stats "$sleeper" > "$tmp/out" 2> "$tmp/err"
    got=$?
    kill "$sleeper" 2> /dev/null
    [ "$got" -eq 1 ] || { cat "$tmp/out" "$tmp/err" >&2; fail "uslab stats exited $got, want 1"; }
    grep -q "cannot read the memory of process $sleeper .*not dumpable.*run uslab as root" "$tmp/err" ||
        { cat "$tmp/err" >&2; fail "wrong message"; }
    [ "$(wc -l < "$tmp/err")" = 1 ] || { cat "$tmp/err" >&2; fail "not one line"; }
    expect_no_match "$tmp/err" "uses uslab"
    ;;
probe_plain)
    # The probe itself tells glibc apart: without uslab it reports glibc.
    "$probe" > "$tmp/out" || fail "probe failed"
    expect_line "$tmp/out" "malloc=glibc"
    expect_no_match "$tmp/out" "^USLAB_"
    ;;
*)
    fail "unknown case"
    ;;
esac
exit 0
