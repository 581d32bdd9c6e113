#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The licence (issue 39): LICENSE is the MIT licence, and every source, header, script and
# build file of the project (the tests' too) carries the SPDX tag that says so, and no other.
set -euo pipefail
top=$1
head -1 "$top/LICENSE" | grep -qx 'MIT License' || { echo "LICENSE is not the MIT licence"; exit 1; }
grep -q 'Permission is hereby granted, free of charge' "$top/LICENSE" ||
    { echo "LICENSE lacks the MIT grant"; exit 1; }
bad=0
n=0
while IFS= read -r f; do
    tag=$(grep -m1 -o 'SPDX-License-Identifier: [^ */]*' "$f" || true)
    if [ "$tag" != "SPDX-License-Identifier: MIT" ]; then
        echo "$f: ${tag:-no SPDX tag}"
        bad=1
    fi
    n=$((n + 1))
done < <(
    # The tracked files in a git checkout; elsewhere (a release tarball) the tree, without
    # build directories and what bench/build_peers.sh and the runs put in bench/.
    if git -C "$top" rev-parse --is-inside-work-tree > /dev/null 2>&1; then
        git -C "$top" ls-files | sed "s|^|$top/|"
    else
        find "$top" -type d \( -name '.git' -o -name 'build*' -o -path "$top/bench/peers" \
            -o -path "$top/bench/results" \) -prune -o -type f -print
    fi | grep -E '/(CMakeLists\.txt|Makefile)$|\.([ch]|cpp|py|sh|pl|lua|bc|sql|in)$')
[ $bad = 0 ] || exit 1
[ "$n" -gt 50 ] || { echo "only $n files found under $top"; exit 1; }
echo "licence ok"
