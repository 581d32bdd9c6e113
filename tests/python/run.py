#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""run.py - CPython's own regression tests, run with every object allocated by uslab.

Usage: run.py [--build DIR] [--jobs N] [--python PATH] [--only MODULE[,MODULE...]]

Debian's libpython3.X-testsuite package installs the standard library's test package
(/usr/lib/python3.X/test) for /usr/bin/python3. This runs MODULES below, one regrtest process
per module (`python -m test --timeout 300 -u none --junit-xml ... MODULE`), N at a time, with
LD_PRELOAD=DIR/libuslab-preload.so and PYTHONMALLOC=malloc, so that every Python object is a
malloc block of uslab's rather than one of pymalloc's arenas (issue 12's python3 row runs the
same way). A module passes when regrtest exits 0 and no line of its output starts with
"uslab:" (uslab's reports and warnings).

A module that fails under uslab is run again under plain glibc, the control, with the same
environment but LD_PRELOAD. What fails there too is the machine's, not uslab's: the module
is judged on the test cases (from the JUnit XML) that failed under uslab and not under glibc.
Such cases, or a failure under uslab where glibc passes, get one more run under uslab (a test
of CPython's that is flaky under load must fail twice); a module still failing then fails the
run. SIGINT and SIGQUIT are set back to their defaults in every test process: a background
job starts with them ignored, and nine cases of test_threading, test_signal and
test_multiprocessing_fork fail under glibc and uslab alike when they are (session 17's
audit).

Prints one line per module (name, result, seconds; then, for a failure, the start of its
output). Logs and XML are in DIR/python-tests/<module>.<uslab|glibc|uslab2>.{log,xml}.

Exit status: 0 when every module passes (or fails only as it does under glibc); 1 otherwise;
0 with a SKIP line when the interpreter or its test package is missing and the environment
variable CI is unset or empty (with CI set, that is a failure); 2 on bad arguments.

The inherited environment is kept except LD_PRELOAD, MALLOC_*, GLIBC_TUNABLES and PYTHON*
(which would change what is tested); USLAB_* settings pass through (USLAB_TCACHE_MAX=0, say).
Python 3 standard library only.
"""

import argparse
import concurrent.futures
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

# The modules, chosen for what they make the allocator do and for time (about a minute on
# two cores). Threads, fork and signals: test_threading, test_thread, test_threading_local,
# test_fork1, test_os, test_posix, test_pty, test_sys_settrace, test_sys.
# Containers and strings of every size, resized in place (realloc): test_dict, test_list,
# test_set, test_deque, test_bytes, test_unicode, test_string, test_collections,
# test_ordered_dict, test_array, test_struct, test_long, test_bisect, test_heapq,
# test_itertools, test_sort, test_weakset. Memory and lifetimes: test_gc,
# test_weakref, test_mmap, test_resource, test_tracemalloc, test_finalization,
# test_memoryview, test_buffer, test_descr, test_generators, test_exceptions, test_atexit.
# Parsers, codecs, compressors and file formats (buffers grown and shrunk): test_json,
# test_pickle, test_marshal, test_re, test_codecs, test_zlib, test_bz2, test_lzma, test_gzip,
# test_memoryio, test_fileio, test_bufio, test_ctypes, test_decimal, test_hashlib,
# test_ast, test_compile, test_xml_etree, test_pyexpat, test_csv, test_email,
# test_mailbox, test_tempfile, test_shutil, test_select, test_embed.
#
# Left out, each for time or for a dependence on the machine rather than on the allocator
# (session 17's audit ran them all, under glibc and uslab, with the same results):
# test_multiprocessing_fork, _forkserver and test_concurrent_futures (two minutes each, with
# timing-sensitive cases), test_asyncio (1.5 min), test_signal (a minute of timed signal
# deliveries), test_socket (its VSOCK cases hang in accept() on some hosts), test_ssl (the
# host's OpenSSL configuration), test_readline (the terminal), test_faulthandler and
# test_selectors (35 s of timed waits between them, for code that hardly allocates).
# Session 70 took out six more for make test's 15 minutes (111 of the 247 s the 70 modules
# ran for, in seconds of one job): test_subprocess 43 (processes started and waited for;
# the preload tests start programs under fork and exec), test_io 30 (large files and timed
# signal interruptions; test_bufio, test_fileio and test_memoryio stay), test_zipfile 11 and
# test_tarfile 10 (archives written to disk), test_queue 9 (timed waits) and test_cmd_line 8
# (interpreters started with options).
# Debian's package ships no test_capi, test_sqlite3 or test_threadedimport.
MODULES = """
test_threading test_thread test_threading_local test_fork1 test_os test_posix test_pty
test_sys_settrace test_sys test_dict test_list test_set test_deque test_bytes test_unicode
test_string test_collections test_ordered_dict test_array test_struct test_long test_bisect
test_heapq test_itertools test_sort test_weakset test_gc test_weakref test_mmap
test_resource test_tracemalloc test_finalization test_memoryview test_buffer test_descr
test_generators test_exceptions test_atexit test_json test_pickle test_marshal test_re
test_codecs test_zlib test_bz2 test_lzma test_gzip test_memoryio test_fileio test_bufio
test_ctypes test_decimal test_hashlib test_ast test_compile test_xml_etree test_pyexpat
test_csv test_email test_mailbox test_tempfile test_shutil test_select test_embed
""".split()

MODULE_TIMEOUT = 900  # seconds for one regrtest process; regrtest's own is 300 per test


def log(msg):
    print(msg, flush=True)


def clean_env():
    env = {k: v for k, v in os.environ.items()
           if k != "LD_PRELOAD" and not k.startswith(("MALLOC_", "PYTHON"))
           and k != "GLIBC_TUNABLES"}
    env["PYTHONMALLOC"] = "malloc"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def default_signals():
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def run_module(python, module, env, out_dir, tag):
    """Runs one module under env; returns (passed, seconds, failed case ids, output)."""
    base = os.path.join(out_dir, "%s.%s" % (module, tag))
    xml_path = base + ".xml"
    tmp = base + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    if os.path.exists(xml_path):
        os.unlink(xml_path)
    argv = [python, "-m", "test", "--timeout", "300", "-u", "none",
            "--junit-xml", xml_path, "--tempdir", tmp, module]
    t0 = time.monotonic()
    with open(base + ".log", "w+b") as out:
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             env=env, cwd=tmp, preexec_fn=default_signals,
                             start_new_session=True)
        try:
            rc = p.wait(timeout=MODULE_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = "timeout"
        out.seek(0)
        text = out.read().decode(errors="replace")
    secs = time.monotonic() - t0
    shutil.rmtree(tmp, ignore_errors=True)
    reports = [ln for ln in text.splitlines() if ln.startswith("uslab:")]
    failed = failed_cases(xml_path)
    if rc != 0 and not failed:
        failed = {"%s (regrtest exit %s)" % (module, rc)}
    for ln in reports:
        failed.add("uslab report: " + ln)
    return rc == 0 and not reports, secs, failed, text


def failed_cases(xml_path):
    """The ids of the cases that failed or erred, from regrtest's JUnit XML."""
    try:
        root = ET.parse(xml_path).getroot()
    except (OSError, ET.ParseError):
        return set()
    out = set()
    for tc in root.iter("testcase"):
        if tc.find("failure") is not None or tc.find("error") is not None:
            out.add("%s.%s" % (tc.get("classname", "?"), tc.get("name", "?")))
    return out


def judge(python, module, lib, out_dir):
    """Runs one module under uslab, and the control where it fails; returns a line and
    whether the module counts as passed."""
    env_u = clean_env()
    env_u["LD_PRELOAD"] = lib
    ok, secs, failed, text = run_module(python, module, env_u, out_dir, "uslab")
    if ok:
        return "%-28s PASS  %6.1f s" % (module, secs), True, ""
    _, _, failed_g, _ = run_module(python, module, clean_env(), out_dir, "glibc")
    own = failed - failed_g
    if not own:
        return ("%-28s PASS  %6.1f s  (%d case(s) fail under glibc too)"
                % (module, secs, len(failed)), True, "")
    ok2, _, failed2, text2 = run_module(python, module, env_u, out_dir, "uslab2")
    own2 = (failed2 - failed_g) & own if not ok2 else set()
    if not own2:
        return ("%-28s PASS  %6.1f s  (failed once, passed again: %s)"
                % (module, secs, ", ".join(sorted(own))[:200]), True, "")
    tail = "\n".join("    " + ln for ln in text2.splitlines()[-40:])
    return ("%-28s FAIL  %6.1f s  under uslab only: %s"
            % (module, secs, ", ".join(sorted(own2))[:400]), False, tail)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    in_ci = bool(os.environ.get("CI"))

    lib = os.path.abspath(os.path.join(args.build, "libuslab-preload.so"))
    if not os.path.exists(lib):
        log("run.py: %s does not exist (build first)" % lib)
        return 1
    modules = MODULES
    if args.only:
        modules = [m for m in args.only.split(",") if m]
        unknown = [m for m in modules if not re.fullmatch(r"test_\w+", m)]
        if unknown:
            log("run.py: not a test module name: %s" % ", ".join(unknown))
            return 2

    python = args.python
    probe = subprocess.run([python, "-c", "import test.libregrtest, test.test_dict"],
                           capture_output=True, env=clean_env()) if os.path.exists(python) else None
    if probe is None or probe.returncode != 0:
        ver = "3.X"
        if probe is not None:
            v = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                               capture_output=True, text=True)
            ver = v.stdout.strip() or ver
        why = ("%s is missing" % python if probe is None else
               "%s has no test package (Debian: libpython%s-testsuite)" % (python, ver))
        if in_ci:
            log("FAIL: %s" % why)
            return 1
        log("SKIP: %s" % why)
        return 0

    # The preload must take effect: the loader only warns about a library it cannot load.
    env_u = clean_env()
    env_u["LD_PRELOAD"] = lib
    check = subprocess.run([python, "-c", "import sys; sys.exit(0 if 'libuslab-preload' in "
                            "open('/proc/self/maps').read() else 3)"], env=env_u,
                           capture_output=True)
    if check.returncode != 0:
        log("FAIL: %s is not loaded into %s: %s" % (lib, python, check.stderr.decode()[:300]))
        return 1

    out_dir = os.path.abspath(os.path.join(args.build, "python-tests"))
    os.makedirs(out_dir, exist_ok=True)
    log("CPython's tests (%s) under uslab, PYTHONMALLOC=malloc, %d modules, %d at a time"
        % (python, len(modules), args.jobs))
    t0 = time.monotonic()
    bad = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futs = [pool.submit(judge, python, m, lib, out_dir) for m in modules]
        for f in futs:
            line, ok, tail = f.result()
            log(line)
            if not ok:
                bad.append(line)
                if tail:
                    log(tail)
    log("%d of %d modules passed under uslab in %.0f s"
        % (len(modules) - len(bad), len(modules), time.monotonic() - t0))
    if bad:
        log("FAIL: %d module(s) fail under uslab and not under glibc (logs in %s)"
            % (len(bad), out_dir))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
