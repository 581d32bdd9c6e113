#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# test_install.sh BUILD SRC LIVE_PROGRAM
# Installs the build into a temporary prefix, then builds and runs programs against it as a
# user adopting uslab would: with the flags pkg-config gives, and with CMake's
# find_package(uslab CONFIG REQUIRED) from the installed tree moved elsewhere (the package
# must be relocatable): uslab::uslab, uslab::uslab_static, and uslab::preload preloaded;
# then the installed uslab watches a program (LIVE_PROGRAM: tests/tools' live_program).
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

# README.md's two blocks after "After `cmake --install build --prefix DIR`", as written
# (issue 39), DIR being this prefix: the sh block builds prog.c, the cmake block links prog.
readme=$src/../../README.md
block() { # block LANG: the first ```LANG block after the install line
    awk -v lang="$1" '/^After `cmake --install build --prefix DIR`/ { after = 1 }
        after && $0 == "```" lang { inside = 1; next } inside && /^```$/ { exit } inside { print }' \
        "$readme"
}
sh_block=$(block sh) cmake_block=$(block cmake)
[ -n "$sh_block" ] && [ -n "$cmake_block" ] || { echo "no pkg-config or cmake block in README.md"; exit 1; }
mkdir "$tmp/readme" && cp "$src/consumer.c" "$tmp/readme/prog.c"
(cd "$tmp/readme" && env -u PKG_CONFIG_PATH sh -ec "$(printf '%s\n' "$sh_block" | sed "s|DIR|$tmp/prefix|g")") ||
    { echo "README's pkg-config lines failed"; exit 1; }
LD_LIBRARY_PATH=$tmp/prefix/lib "$tmp/readme/a.out" >/dev/null
printf 'cmake_minimum_required(VERSION 3.20)\nproject(prog C)\nadd_executable(prog prog.c)\n%s\n' \
    "$cmake_block" >"$tmp/readme/CMakeLists.txt"
cmake -S "$tmp/readme" -B "$tmp/readme/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >"$tmp/cmake.log" 2>&1 &&
    cmake --build "$tmp/readme/build" >>"$tmp/cmake.log" 2>&1 || { cat "$tmp/cmake.log"; exit 1; }
"$tmp/readme/build/prog" >/dev/null
echo "README's lines work"

# The CMake package, from a moved tree.
mv "$tmp/prefix" "$tmp/moved"
mkdir "$tmp/proj"
cp "$src/consumer.c" "$src/preload_check.c" "$tmp/proj/"
cat >"$tmp/proj/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.20)
project(uslab_consumer C)
find_package(uslab 0.1 CONFIG REQUIRED)
add_executable(consumer_shared consumer.c)
target_link_libraries(consumer_shared PRIVATE uslab::uslab)
add_executable(consumer_static consumer.c)
target_link_libraries(consumer_static PRIVATE uslab::uslab_static)
add_executable(preload_check preload_check.c)
target_link_libraries(preload_check PRIVATE ${CMAKE_DL_LIBS})
file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/preload_path.txt CONTENT "$<TARGET_FILE:uslab::preload>")
CMAKE
cmake -S "$tmp/proj" -B "$tmp/proj/build" -DCMAKE_PREFIX_PATH="$tmp/moved" >"$tmp/cmake.log" 2>&1 ||
    { cat "$tmp/cmake.log"; exit 1; }
cmake --build "$tmp/proj/build" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
"$tmp/proj/build/consumer_shared"
"$tmp/proj/build/consumer_static"
lib=$(cat "$tmp/proj/build/preload_path.txt")
case $lib in "$tmp/moved/"*) ;; *) echo "uslab::preload is $lib, not in the moved tree"; exit 1 ;; esac
LD_PRELOAD=$lib "$tmp/proj/build/preload_check"
# The version file: 0.1 is found, a later minor version is not (0.x may change the API).
mkdir "$tmp/proj2"
printf 'cmake_minimum_required(VERSION 3.20)\nproject(v C)\nfind_package(uslab 0.2 CONFIG QUIET)\nif(uslab_FOUND)\n  message(FATAL_ERROR "0.2 accepted")\nendif()\n' \
    >"$tmp/proj2/CMakeLists.txt"
cmake -S "$tmp/proj2" -B "$tmp/proj2/build" -DCMAKE_PREFIX_PATH="$tmp/moved" >"$tmp/cmake2.log" 2>&1 ||
    { cat "$tmp/cmake2.log"; exit 1; }
echo "cmake package works"

# Statistics of a running process from the moved tree (issue 14): its uslab runs a program
# (the preload library found in ../lib), and its stats and top read the program's memory.
prog=$3
mkfifo "$tmp/in" "$tmp/out"
env -u LD_PRELOAD "$tmp/moved/bin/uslab" run -- "$prog" <"$tmp/in" >"$tmp/out" &
exec 3>"$tmp/in" 4<"$tmp/out"
read -r _ _ pid <&4
for step in "cache installed_cache 40" "alloc installed_cache 123"; do
    echo "$step" >&3
    read -r reply <&4
    case $reply in ok*) ;; *) echo "live_program: $step: $reply"; exit 1 ;; esac
done
"$tmp/moved/bin/uslab" stats "$pid" >"$tmp/stats" || { cat "$tmp/stats"; exit 1; }
grep -Eq '^installed_cache +123 +40 ' "$tmp/stats" || { cat "$tmp/stats"; exit 1; }
"$tmp/moved/bin/uslab" top -n 1 "$pid" >"$tmp/top" || { cat "$tmp/top"; exit 1; }
grep -Eq '^installed_cache +1[0-9]+ +123 ' "$tmp/top" || { cat "$tmp/top"; exit 1; }
! ls /dev/shm/uslab.*."$pid" >/dev/null 2>&1 || { echo "a file in /dev/shm for the process"; exit 1; }
echo exit >&3
read -r _ <&4
exec 3>&- 4<&-
wait
echo "live statistics work"
echo "installed tree works"
