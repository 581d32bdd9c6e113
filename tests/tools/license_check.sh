#!/usr/bin/env bash
# The licence (issue 39): LICENSE is the MIT licence, and every source, header, script and
# build file of the project carries the SPDX tag that says so, and no other.
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
done < <(find "$top/src" "$top/include" "$top/tools" "$top/bench" -path "$top/bench/peers" -prune \
    -o -path "$top/bench/results" -prune -o -type f \
    \( -name '*.[ch]' -o -name '*.py' -o -name '*.sh' -o -name '*.pl' -o -name '*.lua' \
    -o -name '*.bc' -o -name '*.sql' \) -print)
[ $bad = 0 ] || exit 1
[ "$n" -gt 50 ] || { echo "only $n files found under $top"; exit 1; }
echo "licence ok"
