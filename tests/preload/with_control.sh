#!/bin/sh
# SPDX-License-Identifier: MIT
# with_control.sh LIB [NAME=VALUE...] -- PROGRAM [ARG...]: runs PROGRAM with LIB preloaded
# and the NAME=VALUE entries set; its exit status is the test's. Where that run fails (not
# 0, not 77: skipped), the same program runs again under glibc alone, the control, and the
# script prints its exit status (not its output, which a test's pass expression could
# match): a test glibc fails too asks for something the host does not give, not for a fix
# in uslab. (Each such test had a twin under glibc that ran every time: 32 runs, about 35 s
# of make test.)
lib=$1
shift
vars=
while [ "$#" -gt 0 ] && [ "$1" != -- ]; do
    vars="$vars $1"
    shift
done
[ "$1" = -- ] && shift
# shellcheck disable=SC2086 # vars: a list of NAME=VALUE words, no spaces inside
env LD_PRELOAD="$lib" $vars "$@"
rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
    env -u LD_PRELOAD "$@" > /dev/null 2>&1
    echo "with_control.sh: exit status $rc under uslab, $? under glibc alone (the control)" >&2
fi
exit "$rc"
