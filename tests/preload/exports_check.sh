#!/bin/sh
# SPDX-License-Identifier: MIT
# exports_check.sh LIBUSLAB PRELOAD_LIB - the shared libraries define the allocation API and
# nothing else (issue 37, docs/design.md §1): every symbol that `nm -D --defined-only` lists
# must be in the lists below. libuslab.so: uslab_* only. libuslab-preload.so: also the
# malloc family, the C++ operators new and delete, and the one wrapper allocation itself needs,
# named with its reason in design §7: __register_atfork (fork safety). mlockall, setrlimit
# and prlimit went with the 4 GiB tag table (session 55).
set -u
lib=$1 preload=$2
fail=0
check() {
    file=$1 allowed=$2
    syms=$(nm -D --defined-only "$file" | awk '{print $3}') || { echo "FAIL: nm $file"; exit 1; }
    [ -n "$syms" ] || { echo "FAIL: no symbols in $file"; exit 1; }
    for s in $syms; do
        if ! printf '%s\n' "$s" | grep -Eqx "$allowed"; then
            echo "FAIL: $file defines $s"
            fail=1
        fi
    done
}
api='uslab_[a-z0-9_]+'
malloc='malloc|free|calloc|realloc|reallocarray|memalign|posix_memalign|aligned_alloc|valloc|pvalloc|cfree|malloc_usable_size|malloc_trim|mallinfo|mallinfo2|mallopt'
cxx='_Zn[wa]m[A-Za-z0-9_]*|_Zd[la]Pv[A-Za-z0-9_]*'
needed='__register_atfork'
check "$lib" "$api"
check "$preload" "$api|$malloc|$cxx|$needed"
# The wrappers issue 37 and session 55 removed must stay removed.
for s in execve execv execvp execvpe fexecve setuid seteuid setreuid setresuid syscall prctl \
         chroot unshare setns daemon _exit _Exit pthread_create pthread_join pthread_tryjoin_np \
         pthread_timedjoin_np pthread_clockjoin_np pthread_detach thrd_create thrd_join \
         mlockall setrlimit setrlimit64 prlimit prlimit64; do
    if nm -D --defined-only "$preload" "$lib" | awk '{print $3}' | grep -qx "$s"; then
        echo "FAIL: $s is defined again"
        fail=1
    fi
done
[ $fail = 0 ] && echo "exports ok"
exit $fail
