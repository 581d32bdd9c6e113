#!/bin/sh
# SPDX-License-Identifier: MIT
# Tests of `uslab profile` and USLAB_CLASSES (issue 13, docs/design.md §8), one case each:
#   profile_test.sh CASE USLAB_TOOL CLASSES_PROBE PRELOAD_LIB
set -u
case_name=$1 uslab=$2 probe=$3 lib=$4
shim=$(dirname "$lib")/libuslab-profile.so # uslab profile preloads it after the library
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL ($case_name): $*"; exit 1; }
export USLAB_PRELOAD_LIB="$lib"
unset USLAB_CLASSES USLAB_PROFILE

# usable SIZE [env...]: malloc_usable_size(malloc(SIZE)) under the preload library (a
# start-up that hangs, as one reading a FIFO did, fails after 20 seconds)
usable() {
    size=$1; shift
    timeout 20 env "$@" LD_PRELOAD="$lib" "$probe" size "$size" 2>"$tmp/err"
}

case $case_name in
fit)
    # The probe asks for 40, 600 and 2100 bytes: the fitted table has 48, 608 and 2176,
    # where the default classes are 48, 640 and 2304.
    (cd "$tmp" && "$uslab" profile -- "$probe" work) >"$tmp/out" 2>&1 || fail "profile: $(cat "$tmp/out")"
    grep -q "fitted classes" "$tmp/out" || fail "no summary: $(cat "$tmp/out")"
    f=$tmp/uslab-classes.txt
    [ "$(head -n 1 "$f")" = "uslab-classes 1" ] || fail "header: $(head -n 1 "$f")"
    for s in 16 48 608 1024 2176 32768 65536 262144; do
        tr ' ' '\n' <"$f" | grep -qx "$s" || fail "size $s not in $(cat "$f")"
    done
    # fitted up to 32 KiB; above, the medium classes, as the default table has them
    [ "$(tr ' ' '\n' <"$f" | grep -E '^[0-9]+$' | awk '$1 > 32768' | tr '\n' ' ')" = \
        "49152 65536 98304 131072 196608 262144 " ] ||
        fail "medium classes: $(cat "$f")"
    [ "$(usable 100000 USLAB_CLASSES="$f")" = 131072 ] || fail "fitted 100000: not a medium block"
    [ "$(usable 600)" = 640 ] || fail "default 600 -> $(usable 600)"
    [ "$(usable 2100)" = 2304 ] || fail "default 2100 -> $(usable 2100)"
    [ "$(usable 600 USLAB_CLASSES="$f")" = 608 ] || fail "fitted 600 -> $(usable 600 USLAB_CLASSES="$f")"
    [ "$(usable 2100 USLAB_CLASSES="$f")" = 2176 ] || fail "fitted 2100"
    [ -s "$tmp/err" ] && fail "stderr with a good file: $(cat "$tmp/err")"
    # uslab run --classes does the same
    out=$("$uslab" run --classes="$f" -- "$probe" size 2100) || fail "run --classes"
    [ "$out" = 2176 ] || fail "run --classes: 2100 -> $out"
    # what the program did with the fitted classes: its blocks are sound
    "$uslab" run --classes="$f" -- "$probe" work || fail "work with the fitted classes"
    ;;
processes)
    # A fork child's requests are counted (shared counters), and a program started by the
    # profiled one writes its own profile (the probe runs itself again: size 9000).
    (cd "$tmp" && "$uslab" profile -o "$tmp/c.txt" -- "$probe" fork) >"$tmp/out" 2>&1 ||
        fail "profile: $(cat "$tmp/out")"
    tr ' ' '\n' <"$tmp/c.txt" | grep -qx 4736 || fail "the fork child's 4700 not fitted: $(cat "$tmp/c.txt")"
    tr ' ' '\n' <"$tmp/c.txt" | grep -qx 9088 || fail "the started program's 9000 not fitted: $(cat "$tmp/c.txt")"
    grep -q "from 2 processes" "$tmp/out" || fail "not two processes: $(cat "$tmp/out")"
    ;;
options)
    (cd "$tmp" && "$uslab" profile -o "$tmp/m.txt" --max-classes 20 --max-size 8192 -- "$probe" work) \
        >"$tmp/out" 2>&1 || fail "profile with options: $(cat "$tmp/out")"
    n=$(grep -v '^#' "$tmp/m.txt" | tail -n +2 | wc -w)
    [ "$n" -le 20 ] || fail "$n classes, wanted at most 20"
    tr ' ' '\n' <"$tmp/m.txt" | grep -qx 8192 || fail "largest not 8192: $(cat "$tmp/m.txt")"
    [ "$(usable 9000 USLAB_CLASSES="$tmp/m.txt")" -ge 9000 ] || fail "9000 above the largest class"
    "$uslab" profile --max-classes 5 -- "$probe" work >"$tmp/out" 2>&1 && fail "5 classes accepted"
    grep -q "cannot hold the powers of two" "$tmp/out" || fail "5 classes: $(cat "$tmp/out")"
    "$uslab" profile --max-size 3000 -- "$probe" work >"$tmp/out" 2>&1 && fail "max-size 3000"
    "$uslab" profile "$probe" >"$tmp/out" 2>&1
    [ $? = 2 ] || fail "no -- accepted"
    "$uslab" profile -- "$probe" bad >"$tmp/out" 2>&1
    [ $? = 2 ] || fail "the program's failure is not the exit status: $(cat "$tmp/out")"
    ;;
bad_files)
    # Each bad file: one clear message, the default classes, no crash.
    printf 'uslab-classes 1\n16 32 48 64 128 256 512 1024\n' >"$tmp/ok"
    printf 'uslab-classes 2\n16 32 64 128 256 512 1024\n' >"$tmp/version"
    printf '16 32 64 128 256 512 1024\n' >"$tmp/noheader"
    printf 'uslab-classes 1\n16 32 40 64 128 256 512 1024\n' >"$tmp/notmult"
    printf 'uslab-classes 1\n16 32 64 128 256 512 1024 1100\n' >"$tmp/notmult128"
    printf 'uslab-classes 1\n16 32 64 128 512 1024\n' >"$tmp/nopow"
    printf 'uslab-classes 1\n16 64 32 128 256 512 1024\n' >"$tmp/order"
    printf 'uslab-classes 1\n16 32 64 128 256 512\n' >"$tmp/small"
    printf 'uslab-classes 1\n16 32 64 128 256 512 1024 2048 4096 8192 16384 32768 65536 131072 2097152\n' >"$tmp/big"
    printf 'uslab-classes 1\n16 32 64 x 128\n' >"$tmp/word"
    printf 'uslab-classes 1\n0 16 32 64 128 256 512 1024\n' >"$tmp/zero"
    : >"$tmp/empty"
    mkfifo "$tmp/fifo" || fail "mkfifo"
    { echo "uslab-classes 1"; i=0; while [ $i -lt 97 ]; do echo $((16 + 16 * i)); i=$((i + 1)); done; } >"$tmp/many"
    { echo "uslab-classes 1"; i=0; while [ $i -lt 3000 ]; do echo "# padding line $i"; i=$((i + 1)); done; } >"$tmp/long"
    [ "$(usable 600 USLAB_CLASSES="$tmp/ok")" = 1024 ] || fail "a good short file not used"
    for f in version noheader notmult notmult128 nopow order small big word zero empty many long \
        missing fifo; do
        got=$(usable 600 USLAB_CLASSES="$tmp/$f") || fail "$f: the program failed"
        [ "$got" = 640 ] || fail "$f: 600 -> $got, not the default 640"
        grep -q "^uslab: USLAB_CLASSES=$tmp/$f: .*; using the default classes" "$tmp/err" ||
            fail "$f: message: $(cat "$tmp/err")"
        [ "$(wc -l <"$tmp/err")" = 1 ] || fail "$f: more than one line: $(cat "$tmp/err")"
    done
    # the reasons that are easy to get wrong: a FIFO (or a directory) is no file of classes,
    # and 0 is not refused as a size that is no multiple of 16
    for f in fifo:"it is not a regular file" .:"it is not a regular file" zero:"line 2, 0: a size is 0"; do
        usable 600 USLAB_CLASSES="$tmp/${f%%:*}" >/dev/null || fail "${f%%:*}: the program failed"
        grep -q "^uslab: USLAB_CLASSES=$tmp/${f%%:*}: ${f#*:}" "$tmp/err" ||
            fail "${f%%:*}: message: $(cat "$tmp/err")"
    done
    # the message names the line and the word or size refused, or the power of two missing
    for f in word:'line 2, "x": a word that is not a size' \
        order:'line 2, 32: sizes are not in increasing order' \
        notmult:'line 2, 40: a size up to 1024 is not a multiple of 16' \
        nopow:'256: a power of two from 16 to the largest size is missing' \
        noheader:'line 1: the first line is not'; do
        usable 600 USLAB_CLASSES="$tmp/${f%%:*}" >/dev/null || fail "${f%%:*}: the program failed"
        grep -qF "uslab: USLAB_CLASSES=$tmp/${f%%:*}: ${f#*:}" "$tmp/err" ||
            fail "${f%%:*}: message: $(cat "$tmp/err")"
    done
    # once in a process tree: a pipeline of three under a shell, all with the bad file, says
    # it once (the shell's), where each process said it before
    timeout 20 env USLAB_CLASSES="$tmp/word" LD_PRELOAD="$lib" sh -c \
        '"$1" size 600 | "$1" size 600 >/dev/null; "$1" size 600 >/dev/null' sh "$probe" \
        2>"$tmp/err" || fail "pipeline: failed"
    [ "$(grep -c "USLAB_CLASSES=" "$tmp/err")" = 1 ] ||
        fail "pipeline: not said once: $(cat "$tmp/err")"
    # USLAB_MAX_SLAB_SIZE set with a file of classes: the file wins, with one line that says
    # so (session 16's audit: silent before); the same largest size: no line
    got=$(usable 600 USLAB_CLASSES="$tmp/ok" USLAB_MAX_SLAB_SIZE=2048) || fail "max+classes: failed"
    [ "$got" = 1024 ] || fail "max+classes: 600 -> $got, not the file's 1024"
    grep -q "^uslab: USLAB_MAX_SLAB_SIZE=2048 ignored: USLAB_CLASSES=$tmp/ok sets the classes, the largest 1024 bytes" \
        "$tmp/err" || fail "max+classes: message: $(cat "$tmp/err")"
    usable 600 USLAB_CLASSES="$tmp/ok" USLAB_MAX_SLAB_SIZE=1024 >/dev/null || fail "same max: failed"
    [ ! -s "$tmp/err" ] || fail "same max: a message: $(cat "$tmp/err")"
    # uslab run --classes: the same message, and the program still runs on the defaults
    for f in "$tmp/version" "$tmp/missing"; do
        got=$("$uslab" run --classes="$f" -- "$probe" size 600 2>"$tmp/err") ||
            fail "run --classes=$f: the program failed"
        [ "$got" = 640 ] || fail "run --classes=$f: 600 -> $got, not the default 640"
        grep -q "^uslab: USLAB_CLASSES=$f: .*; using the default classes" "$tmp/err" ||
            fail "run --classes=$f: message: $(cat "$tmp/err")"
    done
    ;;
exit)
    # The profile survives a program that leaves without exit(): the probe asks for 4700
    # bytes 1000 times (the profile's 4704 granule), then leaves by each way in turn.
    # Counted straight from the files (USLAB_PROFILE as `uslab profile` sets it): every
    # request once, however many times the counts were written.
    d=$tmp/profiles
    # granule SIZE: the sum of that granule's counts over the profiles in $d
    granule() {
        cat "$d"/profile.* 2>/dev/null | awk -v s="$1" '$1 == s { n += $2 } END { print n + 0 }'
    }
    # ends HOW WANT FILES [ARGS...]: the probe leaves by HOW; the 4704 granule must count WANT
    # in FILES profiles, each starting with its header, and nothing else left in $d
    ends() {
        how=$1 want=$2 files=$3; shift 3
        rm -rf "$d" && mkdir "$d" || fail "mkdir $d"
        timeout 60 env LD_PRELOAD="$lib:$shim" USLAB_PROFILE="$d/profile" "$probe" end "$how" 4700 1000 "$@" \
            >"$tmp/out" 2>&1 || fail "$how: the probe failed: $(cat "$tmp/out")"
        [ "$(granule 4704)" = "$want" ] || fail "$how: 4700 counted $(granule 4704) times, not $want"
        n=$(ls "$d" | wc -l)
        [ "$n" = "$files" ] || fail "$how: $n files, not $files: $(ls "$d")"
        for f in "$d"/profile.*; do
            [ "$(head -n 1 "$f")" = "uslab-profile 1" ] || fail "$how: $f: $(head -n 1 "$f")"
        done
    }
    for how in exit _exit _Exit quick_exit exit_group; do
        ends $how 1000 1
    done
    # an exec of a program that asks for nothing, and of one that asks for 4800 bytes 500
    # times under the same pid: each image's counts in a file of its own
    ends execv 1000 1 /bin/true
    ends execv 1000 2 "$probe" end exit 4800 500
    [ "$(granule 4800)" = 500 ] || fail "execv: the new program's 4800 counted $(granule 4800) times"
    # a seccomp filter that allows no file access: the counts so far are written as it is
    # installed; the exit writes nothing more (it would be killed for the openat)
    ends seccomp 1000 1
    # an exec that fails: written before it, then again at exit, counted once
    ends execfail 2000 1
    # daemon: the parent leaves at once (by glibc's own _exit); the daemon writes both
    # processes' counts when it ends
    rm -rf "$d" && mkdir "$d" || fail "mkdir $d"
    env LD_PRELOAD="$lib:$shim" USLAB_PROFILE="$d/profile" "$probe" end daemon 4700 1000 >/dev/null 2>&1 ||
        fail "daemon: the probe failed"
    # (the counts written before daemon() show 1000 until the daemon's own write replaces
    # them: wait for the end state, not for the first file)
    i=0
    while [ "$(granule 4704)" != 2000 ] && [ $i -lt 200 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    [ "$(granule 4704)" = 2000 ] || fail "daemon: 4700 counted $(granule 4704) times, not 2000"
    [ "$(ls "$d" | wc -l)" = 1 ] || fail "daemon: files $(ls "$d")"

    # A realloc is a request too, also when the block stays where it is.
    rm -rf "$d" && mkdir "$d" || fail "mkdir $d"
    env LD_PRELOAD="$lib:$shim" USLAB_PROFILE="$d/profile" "$probe" realloc >/dev/null 2>&1 ||
        fail "realloc: the probe failed"
    [ "$(granule 4704)" = 1000 ] || fail "realloc: 4700 counted $(granule 4704) times, not 1000"

    # The tool: a table fitted to the requests of a program that leaves by _exit ...
    (cd "$tmp" && "$uslab" profile -o "$tmp/c.txt" -- "$probe" end _exit 4700 1000) >"$tmp/out" 2>&1 ||
        fail "profile of _exit: $(cat "$tmp/out")"
    tr ' ' '\n' <"$tmp/c.txt" | grep -qx 4736 || fail "_exit: 4700 not fitted: $(cat "$tmp/c.txt")"
    # ... and two different reasons for having no table: a program killed before it could
    # write its profile, and one that asked for nothing in the slab range
    (cd "$tmp" && "$uslab" profile -o "$tmp/k.txt" -- "$probe" end kill 4700 10) >"$tmp/out" 2>&1
    [ $? = 137 ] || fail "kill: status $?: $(cat "$tmp/out")"
    grep -q "no profile was written: .* killed by signal 9" "$tmp/out" || fail "kill: $(cat "$tmp/out")"
    grep -q "made no request of" "$tmp/out" && fail "kill: $(cat "$tmp/out")"
    (cd "$tmp" && "$uslab" profile -o "$tmp/a.txt" -- "$probe" end _exit 100000 10) >"$tmp/out" 2>&1 &&
        fail "nothing in range: a table written"
    grep -q "made no request of 32768 bytes or less, the sizes a table fits (1 profile)" "$tmp/out" || fail "above: $(cat "$tmp/out")"
    [ -e "$tmp/k.txt" ] || [ -e "$tmp/a.txt" ] && fail "a table without requests"
    # A program killed after a child process of its own wrote a profile: the table, and the
    # signal said as such (it said "exited with status 137" before)
    (cd "$tmp" && "$uslab" profile -o "$tmp/s.txt" -- sh -c '"$0" end _exit 4700 1000; kill -9 $$' \
        "$probe") >"$tmp/out" 2>&1
    [ $? = 137 ] || fail "child then kill: status $?: $(cat "$tmp/out")"
    [ -e "$tmp/s.txt" ] || fail "child then kill: no table: $(cat "$tmp/out")"
    grep -q "uslab profile: sh was killed by signal 9" "$tmp/out" || fail "child then kill: $(cat "$tmp/out")"
    ;;
*)
    fail "unknown case"
    ;;
esac
echo "ok ($case_name)"
