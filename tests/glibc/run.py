#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""run.py - glibc's own malloc tests, run under glibc and under libuslab-preload.so.

Usage: run.py [--build DIR] [--jobs N] [--tarball PATH] [--only NAME[,NAME...]] [--control]

PATH defaults to $GLIBC_SOURCE_TARBALL, else the newest /usr/src/glibc/glibc-*.tar.*.

At test time, from Debian's glibc-source package (a tarball under /usr/src/glibc/):

  1. extract malloc/, support/ and the few other files the tests include into
     DIR/glibc-tests/src (again only when the tarball changes);
  2. build a minimal libsupport.a from the support/ files the tests link, outside glibc's
     build system: a generated header (DIR/glibc-tests/shim/glibc-oot-config.h) stands in
     for what glibc's configure would write, and a shim include directory holds the few
     self-contained glibc-internal headers the tests include (links into the extracted
     tree), so everything else comes from the installed C library's headers (Debian 12's
     libc6-dev is glibc 2.36, the same release);
  3. build each test of TESTS below with glibc's own warning flags and -Werror;
  4. run each test with LD_PRELOAD=DIR/libuslab-preload.so, and each that fails there again
     under plain glibc (the control), which tells a failure of uslab's from one of the
     machine's; --control runs the control for every test (it doubles the time: two of the
     tests take a minute each). The support library's test driver (linked into every test)
     enforces the test's own timeout (TIMEOUT in the test source, else 20 s, scaled by
     TIMEOUTFACTOR as in glibc's make check); the harness kills a run only if the driver
     itself hangs, 30 s after that.

Prints one line per test: name, result under glibc ("-" where the control did not run),
result under uslab (PASS, FAIL ..., TIMEOUT, UNSUPPORTED), then the start of each failing
uslab run's output. Logs are in DIR/glibc-tests/logs/<test>.<glibc|uslab>.log.

Exit status: 0 when every test passes under uslab (the control's results are reported, not
judged); 1 when one fails or times out under uslab, or the build fails; 0 with a SKIP line when
the glibc-source tarball is absent and the environment variable CI is unset or empty (with CI
set, a missing tarball is a failure); 2 on bad arguments.

The inherited environment is kept except LD_PRELOAD, MALLOC_* and GLIBC_TUNABLES, which would
change what is tested; USLAB_* settings pass through (e.g. USLAB_DEBUG=F for a run with checks).

Nothing from glibc is copied into the repository: the tests, the support library and the
internal headers are read from the extracted tarball. Python 3 standard library only.
"""

import argparse
import concurrent.futures
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

# ---- which tests, and why the others are left out -------------------------------------------

# The malloc tests that say something about an interposed malloc. Each is a file
# malloc/<name>.c of the glibc tree.
TESTS = [
    "mallocbug",  # blocks that must not overlap after a sequence of large allocations
    "tst-malloc",  # malloc(-1) fails with ENOMEM, basic malloc/realloc
    "tst-calloc",  # calloc zeroes, overflow of n * size fails
    "tst-realloc",  # realloc(NULL, n), realloc(p, 0), huge sizes, contents kept
    "tst-reallocarray",  # overflow detection, contents kept
    "tst-valloc",  # page alignment
    "tst-pvalloc",  # page alignment, rounding, huge sizes
    "tst-pvalloc-fortify",  # pvalloc's rounding is visible to _FORTIFY_SOURCE
    "tst-memalign",  # alignments, huge sizes, EINVAL
    "tst-posix_memalign",  # alignments, huge sizes, EINVAL, out-pointer untouched
    "tst-aligned-alloc",  # only in glibc >= 2.38 (not in Debian 12's 2.36): run if present
    "tst-mallocalign1",  # every block is aligned to glibc's MALLOC_ALIGNMENT (16 on 64 bit)
    "tst-malloc-too-large",  # every entry point fails with NULL and ENOMEM near SIZE_MAX
    "tst-free-errno",  # free preserves errno, also when munmap fails
    "tst-obstack",  # obstacks on top of malloc
    "tst-tcfree3",  # free of blocks whose contents look like a tcache entry must not abort
    "tst-malloc-thread-exit",  # blocks handed between threads that exit
    "tst-malloc-thread-fail",  # every entry point under RLIMIT_AS, in threads, fails cleanly
    "tst-mallocfork",  # fork from a signal handler while the main thread mallocs
    "tst-mallocfork2",  # fork from a signal handler while other threads malloc
    "tst-mallocfork3",  # fork while other threads malloc
    "tst-malloc-fork-deadlock",  # fork while other threads malloc, child mallocs
    "tst-interpose-nothread",  # glibc's internal allocations (stdio, getline) + fork
    "tst-interpose-thread",  # the same from a second thread
]

# Tests that glibc's own malloc fails by design (the control's result is printed with this).
GLIBC_EXPECTED_FAIL = {
    "tst-interpose-nothread": "expected: glibc's malloc moves the program break",
    "tst-interpose-thread": "expected: glibc's malloc moves the program break",
}

# Left out, with the reason. A replacement allocator replaces the malloc family; glibc's
# introspection and tuning entry points (mallinfo, mallinfo2, malloc_stats, malloc_info,
# mallopt, malloc_trim) are not part of it and still answer for glibc's own heap, and glibc's
# debugging hooks and heap-hardening checks are glibc's, not the interface's.
EXCLUDED = {
    "tst-interpose-static-nothread": "statically linked: LD_PRELOAD has no effect, and a static "
    "link of uslab cannot work as built (it calls glibc's __libc_malloc & co., which live in "
    "the same libc.a object as glibc's malloc, so both mallocs would be linked)",
    "tst-interpose-static-thread": "as tst-interpose-static-nothread",
    "tst-malloc-usable": "expects malloc_usable_size(malloc(7)) == 7, true only in glibc's "
    "MALLOC_CHECK_=3 debugging mode (libc_malloc_debug.so); the interface promises >= 7",
    "tst-malloc-usable-tunables": "the same through GLIBC_TUNABLES=glibc.malloc.check=3",
    "tst-malloc-check": "glibc's MALLOC_CHECK_ debugging mode (libc_malloc_debug.so)",
    "tst-mallocstate": "malloc_get_state/malloc_set_state: a dump of glibc's heap format "
    "(compat symbols in libc_malloc_debug.so)",
    "tst-compathooks-off": "__malloc_hook & co.: hooks a replacement allocator by definition "
    "does not have",
    "tst-compathooks-on": "as tst-compathooks-off",
    "tst-mtrace": "mtrace: glibc's tracing hooks (libc_malloc_debug.so)",
    "tst-malloc-backtrace": "corrupts glibc's in-band chunk header and expects glibc's "
    "consistency check to abort; uslab keeps no header in front of a block",
    "tst-tcfree1": "expects glibc's abort at the second free; uslab's free only stores its key "
    "and the double free is caught at the next handout of the block (docs/security.md §2.2), "
    "or at once with USLAB_DEBUG=F",
    "tst-tcfree2": "as tst-tcfree1",
    "tst-safe-linking": "glibc's pointer mangling of its free lists (safe-linking)",
    "tst-malloc-tcache-leak": "measures leaks with mallinfo(), which counts glibc's heap only "
    "(its assert that glibc has bytes in use does not hold under uslab)",
    "tst-malloc_info": "malloc_info: glibc's arenas as XML",
    "tst-mallinfo2": "mallinfo2: glibc's heap statistics",
    "tst-malloc-stats-cancellation": "malloc_stats: glibc's report of its own arenas",
    "tst-mallopt": "mallopt: glibc's tuning parameters",
    "tst-mxfast": "GLIBC_TUNABLES glibc.malloc.mxfast: glibc's fastbins",
    "tst-trim1": "malloc_trim on glibc's arenas",
    "tst-alloc_buffer": "glibc-internal helper (alloc_buffer), not malloc; needs in-tree headers",
    "tst-dynarray": "glibc-internal helper (dynarray), an internal test",
    "tst-dynarray-fail": "as tst-dynarray",
    "tst-dynarray-at-fail": "as tst-dynarray",
    "tst-scratch_buffer": "glibc-internal helper (scratch_buffer), an internal test",
}

# The support/ files the tests above link (found with the linker's map; a test that needs
# another one fails to link and names the symbol). The rest of support/ (DNS, namespaces,
# chroot, capture of subprocesses) needs more of glibc's internal headers and is not used.
SUPPORT = """
    check oom_error support_paths support_record_failure support_shared_allocate
    support_test_compare_failure support_test_main support_test_verify_impl temp_file
    write_message xasprintf xcalloc xchdir xfopen xfork xmalloc xmmap xmunmap xopen
    xpthread_barrier_destroy xpthread_barrier_init xpthread_barrier_wait
    xpthread_barrierattr_destroy xpthread_barrierattr_init xpthread_barrierattr_setpshared
    xpthread_check_return xpthread_create xpthread_join xpthread_kill xsignal xsysconf
""".split()

# glibc-internal headers the tests include: self-contained, linked from the tree into the
# shim directory (malloc-size.h and malloc-alignment.h: the generic ones, which x86_64 and
# aarch64 use).
INTERNAL_HEADERS = [
    "include/array_length.h",
    "include/libc-diag.h",
    "include/intprops.h",
    "sysdeps/generic/malloc-size.h",
    "sysdeps/generic/malloc-alignment.h",
]

# What the extraction keeps (paths inside the tarball's top directory).
EXTRACT = ["malloc/", "support/", "test-skeleton.c"] + INTERNAL_HEADERS

# glibc's own warning flags for C (Makeconfig: +gccwarn, +gccwarn-c) and -Werror.
CFLAGS = [
    "-std=gnu11", "-O2", "-g",
    "-Wall", "-Wwrite-strings", "-Wundef", "-Wstrict-prototypes", "-Wold-style-definition",
    "-Werror",
]

DEFAULT_TIMEOUT = 20  # support/test-driver.h: DEFAULT_TIMEOUT
DRIVER_GRACE = 30  # seconds the harness waits beyond the driver's own timeout
TIMED_OUT = "Timed out: killed the child process"  # support_test_main.c's message

# ---- small helpers --------------------------------------------------------------------------


def say(msg):
    print(msg, flush=True)


def fail(msg):
    say("test-glibc: " + msg)
    sys.exit(1)


def run_cmd(cmd, log):
    """Runs a build command; on failure prints it and its output, then exits 1."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        fail("build step failed (%s):\n  %s\n%s" % (log, " ".join(cmd), p.stdout))


def find_tarball(arg):
    """Returns (tarball or None, where it was looked for)."""
    where = arg or os.environ.get("GLIBC_SOURCE_TARBALL")
    if where:
        return (where if os.path.isfile(where) else None), where
    found = sorted(glob.glob("/usr/src/glibc/glibc-*.tar.*"))
    return (found[-1] if found else None), "/usr/src/glibc/glibc-*.tar.*"


# ---- extraction -----------------------------------------------------------------------------


def extract(tarball, top):
    """Extracts the needed parts of the tarball into top/src once per tarball version."""
    src = os.path.join(top, "src")
    stamp = os.path.join(top, "src.stamp")
    st = os.stat(tarball)
    key = "%s %d %d\n" % (os.path.abspath(tarball), st.st_size, int(st.st_mtime))
    if os.path.isdir(src) and os.path.exists(stamp) and open(stamp).read() == key:
        return src
    shutil.rmtree(src, ignore_errors=True)
    if os.path.exists(stamp):
        os.unlink(stamp)
    os.makedirs(src)
    with tarfile.open(tarball) as tf:
        members = []
        for m in tf:
            parts = m.name.split("/", 1)
            if len(parts) < 2 or not (m.isfile() or m.isdir()):
                continue
            rel = parts[1]
            if any(rel == e or (e.endswith("/") and rel.startswith(e)) for e in EXTRACT):
                m.name = rel
                members.append(m)
        if not members:
            fail("%s holds no malloc/ directory: not a glibc source tarball?" % tarball)
        if hasattr(tarfile, "data_filter"):
            tf.extractall(src, members=members, filter="data")
        else:
            tf.extractall(src, members=members)
    with open(stamp, "w") as f:
        f.write(key)
    return src


# ---- the out-of-tree support library --------------------------------------------------------


def write_shim(src, top):
    """The shim include directory: <support/...> resolves into the extracted tree, the
    internal headers are links into it, and glibc-oot-config.h replaces configure's output
    for the support library."""
    shim = os.path.join(top, "shim")
    shutil.rmtree(shim, ignore_errors=True)
    os.makedirs(shim)
    os.symlink(os.path.join(src, "support"), os.path.join(shim, "support"))
    for h in INTERNAL_HEADERS:
        os.symlink(os.path.join(src, h), os.path.join(shim, os.path.basename(h)))
    multiarch = subprocess.run(["gcc", "-print-multiarch"], stdout=subprocess.PIPE,
                               text=True).stdout.strip() or "x86_64-linux-gnu"
    config = os.path.join(shim, "glibc-oot-config.h")
    with open(config, "w") as f:
        f.write("""/* Generated by tests/glibc/run.py: what glibc's configure and build would give
   the support library, for a build outside glibc against the installed C library. */
#ifndef GLIBC_OOT_CONFIG_H
#define GLIBC_OOT_CONFIG_H
/* config.h: scale of test timeouts (the TIMEOUTFACTOR variable scales it further). */
#define TIMEOUTFACTOR 1
/* The paths support_paths.c exports: the extracted tree, this build directory, and the
   installed system's directories (Debian's layout; the malloc tests use none of them). */
#define SRCDIR_PATH "%(src)s"
#define OBJDIR_PATH "%(obj)s"
#define OBJDIR_ELF_LDSO_PATH "/lib64/ld-linux-x86-64.so.2"
#define INSTDIR_PATH "/"
#define LIBDIR_PATH "/usr/lib/%(ma)s"
#define SLIBDIR_PATH "/lib/%(ma)s"
#define BINDIR_PATH "/usr/bin"
#define SBINDIR_PATH "/usr/sbin"
#define ROOTSBINDIR_PATH "/sbin"
#define COMPLOCALEDIR_PATH "/usr/lib/locale"
/* In the tree, <limits.h> is reached through glibc's wrapper headers before temp_file.c
   uses NAME_MAX; outside it is included here. */
#include <limits.h>
#endif
""" % {"src": src, "obj": top, "ma": multiarch})
    return shim, config


def compile_all(jobs, items):
    """Runs (cmd, log) compile jobs in parallel; exits 1 on the first failure."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as ex:
        futs = [ex.submit(subprocess.run, cmd, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True) for cmd, _ in items]
        for (cmd, log), fut in zip(items, futs):
            p = fut.result()
            if p.returncode != 0:
                fail("build of %s failed:\n  %s\n%s" % (log, " ".join(cmd), p.stdout))


def build_support(src, top, shim, config, jobs):
    obj = os.path.join(top, "obj", "support")
    os.makedirs(obj, exist_ok=True)
    items = []
    objs = []
    for name in SUPPORT:
        o = os.path.join(obj, name + ".o")
        objs.append(o)
        # -I support: the support files include their siblings as <xunistd.h>, as in glibc's
        # build (which puts each subdirectory on the include path).
        items.append(([os.environ.get("CC", "gcc")] + CFLAGS + [
            "-D_GNU_SOURCE", "-include", config, "-I", shim, "-I",
            os.path.join(src, "support"), "-c", os.path.join(src, "support", name + ".c"),
            "-o", o], "support/%s.c" % name))
    compile_all(jobs, items)
    lib = os.path.join(top, "obj", "libsupport.a")
    if os.path.exists(lib):
        os.unlink(lib)
    run_cmd(["ar", "rcs", lib] + objs, "libsupport.a")
    return lib


def build_tests(src, top, shim, lib, tests, jobs):
    bindir = os.path.join(top, "bin")
    os.makedirs(bindir, exist_ok=True)
    items = []
    for t in tests:
        # The tst-interpose-* tests are built without glibc's tst-interpose-aux-*.o: that is
        # glibc's own toy malloc, which would be linked into the program and take precedence
        # over any LD_PRELOAD library. Without it the test checks whichever malloc is in the
        # process: libc's internal allocations (stdio, getline, fork) must work through it and
        # the program break must not move, which holds for an interposed mmap-based
        # allocator and not for glibc's own (hence the control fails them).
        # -DTEST_NO_MALLOPT: as glibc's malloc/Makefile builds its tests (the driver would
        # otherwise call mallopt(M_PERTURB)).
        items.append(([os.environ.get("CC", "gcc")] + CFLAGS + [
            "-D_GNU_SOURCE", "-DTEST_NO_MALLOPT", "-I", shim,
            os.path.join(src, "malloc", t + ".c"), "-o", os.path.join(bindir, t), lib,
            "-lpthread"], "malloc/%s.c" % t))
    compile_all(jobs, items)
    return bindir


# ---- running --------------------------------------------------------------------------------


def test_timeout(src, t):
    """The driver's timeout for test t: its TIMEOUT macro, else DEFAULT_TIMEOUT."""
    text = open(os.path.join(src, "malloc", t + ".c"), errors="replace").read()
    m = re.search(r"^#\s*define\s+TIMEOUT\s+(\d+)", text, re.M)
    return int(m.group(1)) if m else DEFAULT_TIMEOUT


def clean_env():
    env = {k: v for k, v in os.environ.items()
           if k != "LD_PRELOAD" and not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    return env


def kill_session(sid):
    """SIGKILLs every process of session sid: the driver, and the test it forked, which the
    driver moved to a process group of its own (so killpg of the driver's misses it)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = open("/proc/%s/stat" % pid).read()
            fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
            if int(fields[3]) == sid:  # state ppid pgrp session
                os.kill(int(pid), signal.SIGKILL)
        except (OSError, ValueError, IndexError):
            pass  # gone meanwhile


def run_one(binary, alloc, preload, timeout, logdir, factor):
    """Runs one test under one allocator; returns (result, seconds, output)."""
    name = os.path.basename(binary)
    env = clean_env()
    if alloc == "uslab":
        env["LD_PRELOAD"] = preload
    tmp = tempfile.mkdtemp(prefix="%s.%s." % (name, alloc), dir=logdir)
    env["TMPDIR"] = tmp
    start = time.monotonic()
    p = subprocess.Popen([binary], cwd=tmp, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, start_new_session=True)
    hung = False
    try:
        out, _ = p.communicate(timeout=timeout * factor + DRIVER_GRACE)
    except subprocess.TimeoutExpired:
        hung = True
        kill_session(p.pid)
        out, _ = p.communicate()
    secs = time.monotonic() - start
    out = out.decode("utf-8", "replace")
    shutil.rmtree(tmp, ignore_errors=True)
    with open(os.path.join(logdir, "%s.%s.log" % (name, alloc)), "w") as f:
        f.write(out)
    rc = p.returncode
    if hung:
        res = "HANG (killed after %ds)" % (timeout * factor + DRIVER_GRACE)
    elif rc == 0:
        res = "PASS"
    elif rc == 77:
        res = "UNSUPPORTED"
    elif TIMED_OUT in out:
        res = "TIMEOUT (%ds)" % (timeout * factor)
    elif rc < 0:
        res = "FAIL (%s)" % signal.Signals(-rc).name
    else:
        res = "FAIL (exit %d)" % rc
    return res, secs, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="uslab's build directory")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--tarball", help="glibc source tarball (default: $GLIBC_SOURCE_TARBALL, "
                    "else /usr/src/glibc/glibc-*.tar.*)")
    ap.add_argument("--only", help="comma-separated test names (default: all of TESTS)")
    ap.add_argument("--control", action="store_true",
                    help="run every test under plain glibc too, not only those that fail")
    args = ap.parse_args()

    build = os.path.abspath(args.build)
    preload = os.path.join(build, "libuslab-preload.so")
    tarball, where = find_tarball(args.tarball)
    if tarball is None:
        if os.environ.get("CI"):
            fail("no glibc source tarball (%s) and CI is set: install the Debian package "
                 "glibc-source (see .ci/run)" % where)
        say("test-glibc: SKIP: no glibc source tarball (%s; apt-get install glibc-source); "
            "CI is not set, so this is not a failure" % where)
        return 0
    if not os.path.isfile(preload):
        fail("%s is missing: build uslab first (make)" % preload)

    tests = TESTS
    if args.only:
        tests = args.only.split(",")
        unknown = [t for t in tests if t not in TESTS]
        if unknown:
            say("test-glibc: not in TESTS: %s" % ", ".join(unknown))
            return 2

    t0 = time.monotonic()
    top = os.path.join(build, "glibc-tests")
    os.makedirs(top, exist_ok=True)
    src = extract(tarball, top)
    absent = [t for t in tests if not os.path.exists(os.path.join(src, "malloc", t + ".c"))]
    tests = [t for t in tests if t not in absent]
    shim, config = write_shim(src, top)
    lib = build_support(src, top, shim, config, args.jobs)
    bindir = build_tests(src, top, shim, lib, tests, args.jobs)
    t_build = time.monotonic() - t0

    factor = 1
    if os.environ.get("TIMEOUTFACTOR", "").isdigit():
        factor = max(int(os.environ["TIMEOUTFACTOR"]), 1)
    logdir = os.path.join(top, "logs")
    shutil.rmtree(logdir, ignore_errors=True)
    os.makedirs(logdir)

    # Longest first (by timeout), so the runs that may take their full timeout start at once.
    timeouts = {t: test_timeout(src, t) for t in tests}
    tests_by_time = sorted(tests, key=lambda t: -timeouts[t])
    say("test-glibc: %s: %d tests built in %.0f s; running each under uslab, and under glibc "
        "%s (%d jobs)" % (os.path.basename(tarball), len(tests), t_build,
                          "too" if args.control else "where it fails", args.jobs))

    def run_all(runs):
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as ex:
            futs = {ex.submit(run_one, os.path.join(bindir, t), a, preload, timeouts[t], logdir,
                              factor): (t, a) for t, a in runs}
            for fut in concurrent.futures.as_completed(futs):
                results[futs[fut]] = fut.result()

    results = {}
    if args.control:
        run_all([(t, a) for t in tests_by_time for a in ("uslab", "glibc")])
    else:
        run_all([(t, "uslab") for t in tests_by_time])
        run_all([(t, "glibc") for t in tests_by_time
                 if results[(t, "uslab")][0] not in ("PASS", "UNSUPPORTED")])

    width = max(len(t) for t in tests)
    say("")
    say("%-*s  %-22s  %s" % (width, "test", "glibc (control)", "uslab"))
    failed = []
    for t in tests:
        g, gs, _ = results.get((t, "glibc"), ("-", None, None))
        u, us, _ = results[(t, "uslab")]
        note = ""
        if t in GLIBC_EXPECTED_FAIL and g not in ("PASS", "-"):
            note = "  (glibc: %s)" % GLIBC_EXPECTED_FAIL[t]
        gtext = g if gs is None else "%s %.1fs" % (g, gs)
        say(("%-*s  %-22s  %-22s%s" % (width, t, gtext, "%s %.1fs" % (u, us), note)).rstrip())
        if u not in ("PASS", "UNSUPPORTED"):
            failed.append(t)
    for t in absent:
        say("%-*s  %-22s  %s" % (width, t, "(not in this glibc)", "-"))
    ran_g = [t for t in tests if (t, "glibc") in results]
    npass_g = sum(results[(t, "glibc")][0] == "PASS" for t in ran_g)
    npass_u = sum(results[(t, "uslab")][0] == "PASS" for t in tests)
    say("")
    say("test-glibc: passed under uslab %d/%d, under glibc (the control) %d/%d run (%d "
        "excluded: see EXCLUDED in tests/glibc/run.py); %.0f s"
        % (npass_u, len(tests), npass_g, len(ran_g), len(EXCLUDED), time.monotonic() - t0))
    for t in failed:
        out = results[(t, "uslab")][2].splitlines()
        seen = []
        for line in out:  # the first 12 distinct lines: enough to see the failing check
            if line not in seen:
                seen.append(line)
            if len(seen) == 12:
                break
        say("")
        say("--- %s under uslab (%d lines; %s/%s.uslab.log):" % (t, len(out), logdir, t))
        for line in seen:
            say("    " + line)
    if failed:
        say("")
        say("test-glibc: FAILED under uslab: %s" % " ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
