#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Symbolised stacks (issue 16, docs/design.md §9): runs a build of symbols_program.c under
the preload library and checks how its frames are named.

Usage: symbols_check.py CHECK PROGRAM PRELOAD SOURCE [REFERENCE [OTHER]]

  lines       USLAB_LEAKS=1: the 2,000,000-byte leak's first frame is
              "leak_static_block (symbols_program.c:LINE)", LINE that of the malloc call
              (marked SITE:leak_big in SOURCE), the 112-byte one's likewise
  replaced    PROGRAM loads REFERENCE, a build of SOURCE (symbols_lib.c), from a copy and
              leaks a block from it: its static function is named with its line; with the
              copy replaced by OTHER (another build, its function named otherwise) after
              it was loaded, the frame is "LIB+0x.." and OTHER's name appears nowhere
  json        the same from USLAB_LEAKS=json, as the first frame of the largest site
  names       a build without line information (no -g, compressed debug sections):
              "leak_static_block+0x.. (PROGRAM)", and no file or line
  stripped    no symbols at all: "PROGRAM+0x..", which addr2line on REFERENCE (the same
              build before strip) maps to leak_static_block
  debugfile   a stripped copy of PROGRAM whose symbols and DWARF are in a separate debug
              file (objcopy --only-keep-debug, --add-gnu-debuglink): named as in `lines`
              with that file in .debug/ beside the copy, and beside it; "PROGRAM+0x.."
              when the file there is REFERENCE's (another build: another build id); damaged
              debug files still give the leak report and exit 0. And
              libc's own static function __libc_start_call_main named from its file under
              /usr/lib/debug/.build-id (Debian's libc6-dbg, which valgrind depends on;
              where CI is set, its absence fails the check), and __libc_start_main by its
              global name
  double_free USLAB_DEBUG=F: the BUG report's stack names double_free_static and the line
              of the second free
  double_free_leaks
              the same under USLAB_LEAKS=1 alone, whose tracking records no free stacks: the
              report has the allocation's stack and no "Freed in", and its "detected in" is
              unwound by the report itself (no stack was taken before the free)
  corrupt     copies of PROGRAM with random bytes overwritten after its loaded segments
              (section headers, symbol and string tables, DWARF: what only the symboliser
              reads): each must still run, report its leaks and exit 0 (no fault)
  signal      USLAB_DEBUG=FT: a SIGALRM handler that interrupted malloc or free frees a
              pointer uslab never gave out. Every run must end by SIGABRT within the
              timeout (no deadlock) with the whole report and no TRACE line inside it (a
              report that allocated from a debug cache would trace it, or hang on the lock
              the interrupted call holds); the handler and its line must be named in
              every run (the unwinder is reentrant: a signal that landed in the middle of
              a stack capture captures its own)
"""
import json
import os
import random
import struct
import tempfile
import re
import shutil
import signal
import subprocess
import sys


def fail(msg, output=""):
    sys.exit("FAIL: %s\n--- output ---\n%s--- end ---" % (msg, output))


def site_line(source, name):
    with open(source) as f:
        for number, text in enumerate(f, 1):
            if "SITE:%s " % name in text:
                return number
    fail("no SITE:%s in %s" % (name, source))


def run(program, preload, mode, env_extra, timeout=60, args=()):
    env = {k: v for k, v in os.environ.items() if not k.startswith("USLAB_")}
    env.update(LD_PRELOAD=preload, **env_extra)
    try:
        p = subprocess.run([program, mode, *args], env=env, capture_output=True, text=True,
                           errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
        fail("%s %s still running after %d s (deadlock?)" % (program, mode, timeout),
             (err or "")[-4000:])
    return p


def build_id(path):
    """The GNU build id of an ELF file (64-bit, little-endian) in hex, from its notes."""
    with open(path, "rb") as f:
        image = f.read()
    phoff, = struct.unpack_from("<Q", image, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", image, 0x36)
    for i in range(phnum):
        kind, _, offset, _, _, filesz = struct.unpack_from("<IIQQQQ", image, phoff + i * phentsize)
        at = offset
        while kind == 4 and at + 12 <= offset + filesz:  # PT_NOTE
            namesz, descsz, note = struct.unpack_from("<III", image, at)
            desc = at + 12 + (namesz + 3) // 4 * 4
            if note == 3 and image[at + 12:at + 16] == b"GNU\0":  # NT_GNU_BUILD_ID
                return image[desc:desc + descsz].hex()
            at = desc + (descsz + 3) // 4 * 4
    return None


def loaded_libc():
    with open("/proc/self/maps") as f:
        for line in f:
            if "/libc.so.6" in line:
                return line.split()[-1]
    fail("python3 has no libc.so.6 mapped")


def first_frame_after(output, header):
    m = re.search(re.escape(header) + r"\n    ([^\n]*)\n", output)
    if not m:
        fail("no stack after %r" % header, output)
    return m.group(1)


BIG = "LEAK: 2000000 bytes in 1 objects (system allocator x1), allocated from:"
SMALL = "LEAK: 100 bytes in 1 objects (malloc-112 x1), allocated from:"


def main():
    check, program, preload, source = sys.argv[1:5]
    reference = sys.argv[5] if len(sys.argv) > 5 else None
    name = os.path.basename(program)
    src = os.path.basename(source)
    if check in ("lines", "names", "stripped"):
        p = run(program, preload, "leak", {"USLAB_LEAKS": "1"})
        if p.returncode != 0:
            fail("exit status %d" % p.returncode, p.stderr)
        big = first_frame_after(p.stderr, BIG)
        small = first_frame_after(p.stderr, SMALL)
        if check == "lines":
            want = "leak_static_block (%s:%d)" % (src, site_line(source, "leak_big"))
            want_small = "leak_small_static_block (%s:%d)" % (src, site_line(source, "leak_small"))
            if big != want or small != want_small:
                fail("expected %r and %r, got %r and %r" % (want, want_small, big, small),
                     p.stderr)
        elif check == "names":
            if not re.fullmatch(r"leak_static_block\+0x[0-9a-f]+ \(%s\)" % re.escape(name), big):
                fail("expected leak_static_block+0x.. (%s), got %r" % (name, big), p.stderr)
            if src + ":" in p.stderr:
                fail("a file and line where the build has none", p.stderr)
        else:
            m = re.fullmatch(r"%s\+(0x[0-9a-f]+)" % re.escape(name), big)
            if not m:
                fail("expected %s+0x.., got %r" % (name, big), p.stderr)
            if "leak_static_block" in p.stderr:
                fail("a name that only the symbol table had", p.stderr)
            addr2line = shutil.which("addr2line")
            if addr2line and reference:
                a = subprocess.run([addr2line, "-f", "-e", reference, m.group(1)],
                                   capture_output=True, text=True)
                if a.stdout.split("\n")[0] != "leak_static_block":
                    fail("addr2line -f -e %s %s says %r" % (reference, m.group(1), a.stdout),
                         p.stderr)
        print("ok: %s" % big)
    elif check == "debugfile":
        objcopy = shutil.which("objcopy")
        if not objcopy:
            fail("no objcopy")
        want = "leak_static_block (%s:%d)" % (src, site_line(source, "leak_big"))
        with tempfile.TemporaryDirectory() as tmp:
            copy = os.path.join(tmp, "prog")
            os.mkdir(os.path.join(tmp, ".debug"))
            for where in (".debug/prog.debug", "prog.debug"):
                debug = os.path.join(tmp, where)
                subprocess.run([objcopy, "--only-keep-debug", program, debug], check=True)
                subprocess.run([objcopy, "--strip-all", "--add-gnu-debuglink=" + debug,
                                program, copy], check=True)
                p = run(copy, preload, "leak", {"USLAB_LEAKS": "1"})
                big = first_frame_after(p.stderr, BIG)
                if p.returncode != 0 or big != want:
                    fail("debug file %s: expected %r, got %r" % (where, want, big), p.stderr)
                os.unlink(debug)
                named = p.stderr
            # Damaged debug files (their build id left whole, so that they are read): each
            # run still reports its leaks and exits 0.
            debug = os.path.join(tmp, "prog.debug")
            subprocess.run([objcopy, "--only-keep-debug", program, debug], check=True)
            with open(debug, "rb") as f:
                image = f.read()
            rng = random.Random(86)
            read = 0
            for variant in range(30):
                damaged = bytearray(image)
                for _ in range(rng.choice((1, 4, 32, 256))):
                    damaged[rng.randrange(0x400, len(image))] = rng.randrange(256)
                with open(debug, "wb") as f:
                    f.write(damaged)
                p = run(copy, preload, "leak", {"USLAB_LEAKS": "1"})
                if p.returncode != 0 or BIG not in p.stderr:
                    fail("damaged debug file %d: status %d" % (variant, p.returncode), p.stderr)
                read += "leak_static_block" in p.stderr
            if read == 0:
                fail("no damaged debug file was read")
            # Another build's debug file, at the place the link names: not read.
            subprocess.run([objcopy, "--only-keep-debug", reference,
                            os.path.join(tmp, "prog.debug")], check=True)
            p = run(copy, preload, "leak", {"USLAB_LEAKS": "1"})
            big = first_frame_after(p.stderr, BIG)
            if not re.fullmatch(r"prog\+0x[0-9a-f]+", big) or "leak_static_block" in p.stderr:
                fail("another build's debug file was read: %r" % big, p.stderr)
        libc = loaded_libc()
        libc_id = build_id(libc)
        libc_debug = "/usr/lib/debug/.build-id/%s/%s.debug" % (libc_id[:2], libc_id[2:])
        if not os.path.exists(libc_debug):
            if os.environ.get("CI"):
                fail("no %s (Debian's libc6-dbg) for %s" % (libc_debug, libc))
            print("ok: %s; skipped libc's part: no %s" % (want, libc_debug))
            return
        # ... and __libc_start_main by its global name, without the version of the debug
        # file's symbol (__libc_start_main@@GLIBC_2.34) or its local aliases (_impl).
        if not re.search(r"\n    main \(%s:[0-9]+\)\n    __libc_start_call_main\+0x[0-9a-f]+ "
                         r"\(libc\.so\.6\)\n    __libc_start_main\+0x[0-9a-f]+ \(libc\.so\.6\)\n"
                         % re.escape(src), named):
            fail("libc's static function not named from %s" % libc_debug, named)
        print("ok: %s; %d of 30 damaged debug files read; libc's __libc_start_call_main from %s"
              % (want, read, libc_debug))
    elif check == "replaced":
        other = sys.argv[6]
        header = "LEAK: 3000 bytes in 1 objects (malloc-3072 x1), allocated from:"
        with tempfile.TemporaryDirectory() as tmp:
            lib = os.path.join(tmp, "libsym.so")
            shutil.copy(reference, lib)
            p = run(program, preload, "library", {"USLAB_LEAKS": "1"}, args=(lib,))
            want = "leak_in_library (%s:%d)" % (src, site_line(source, "leak_lib"))
            got = first_frame_after(p.stderr, header)
            if p.returncode != 0 or got != want:
                fail("expected %r, got %r" % (want, got), p.stderr)
            replacement = os.path.join(tmp, "other.so")
            shutil.copy(other, replacement)
            p = run(program, preload, "library", {"USLAB_LEAKS": "1"}, args=(lib, replacement))
            got = first_frame_after(p.stderr, header)
            if p.returncode != 0 or not re.fullmatch(r"libsym\.so\+0x[0-9a-f]+", got) or \
                    "replaced_build_site" in p.stderr:
                fail("the replaced library's file was read: %r" % got, p.stderr)
        print("ok: %s; replaced: %s" % (want, got))
    elif check == "json":
        p = run(program, preload, "leak", {"USLAB_LEAKS": "json"})
        if p.returncode != 0:
            fail("exit status %d" % p.returncode, p.stderr)
        try:
            doc = json.loads(p.stderr)["uslab_leaks"]
        except ValueError as e:
            fail("not one JSON document: %s" % e, p.stderr)
        site = doc["by_site"][0]
        want = "leak_static_block (%s:%d)" % (src, site_line(source, "leak_big"))
        if site["bytes"] != 2000000 or site["stack"][0] != want:
            fail("expected the 2000000-byte site first, its stack from %r" % want, p.stderr)
        print("ok: %s" % site["stack"][0])
    elif check == "corrupt":
        with open(program, "rb") as f:
            image = f.read()
        if image[:6] != b"\x7fELF\x02\x01":
            print("skipped: not a 64-bit little-endian ELF file")
            return
        phoff, = struct.unpack_from("<Q", image, 0x20)
        phentsize, phnum = struct.unpack_from("<HH", image, 0x36)
        loaded_end = 0
        for i in range(phnum):
            kind, _, offset, _, _, filesz = struct.unpack_from("<IIQQQQ", image,
                                                              phoff + i * phentsize)
            if kind == 1:  # PT_LOAD
                loaded_end = max(loaded_end, offset + filesz)
        if loaded_end >= len(image):
            fail("nothing after the loaded segments of %s" % program)
        rng = random.Random(16)
        with tempfile.TemporaryDirectory() as tmp:
            copy = os.path.join(tmp, name)
            for variant in range(60):
                damaged = bytearray(image)
                for _ in range(rng.choice((1, 4, 32, 256))):
                    damaged[rng.randrange(loaded_end, len(image))] = rng.randrange(256)
                with open(copy, "wb") as f:
                    f.write(damaged)
                os.chmod(copy, 0o755)
                p = run(copy, preload, "leak", {"USLAB_LEAKS": "1"})
                if p.returncode != 0 or BIG not in p.stderr:
                    fail("damaged copy %d: status %d" % (variant, p.returncode), p.stderr)
        print("ok: 60 damaged copies reported their leaks")
    elif check in ("double_free", "double_free_leaks"):
        env = {"USLAB_DEBUG": "F"} if check == "double_free" else {"USLAB_LEAKS": "1"}
        p = run(program, preload, "double_free", env)
        if p.returncode != -signal.SIGABRT:
            fail("expected SIGABRT, got status %d" % p.returncode, p.stderr)
        if "BUG malloc-48: Object already free" not in p.stderr:
            fail("no BUG line", p.stderr)
        want = "double_free_static (%s:%d)" % (src, site_line(source, "double_free"))
        got = first_frame_after(p.stderr, "INFO: detected in")
        if got != want:
            fail("expected %r, got %r" % (want, got), p.stderr)
        if check == "double_free_leaks" and ("Freed in" in p.stderr or
                                             "INFO: Allocated in" not in p.stderr):
            fail("expected the allocation's stack and no free stack", p.stderr)
        print("ok: %s" % got)
    elif check == "signal":
        want = "    bad_free_in_handler (%s:%d)\n" % (src, site_line(source, "bad_free"))
        rule = "=" * 77 + "\n"
        for attempt in range(1, 11):
            p = run(program, preload, "signal", {"USLAB_DEBUG": "FT"}, timeout=30)
            start = p.stderr.find("BUG malloc: Invalid pointer: free(0x")
            if p.returncode != -signal.SIGABRT or start < 0:
                fail("run %d: expected the BUG report and SIGABRT, got status %d" %
                     (attempt, p.returncode), p.stderr[-4000:])
            report = p.stderr[start:]
            end = report.find(rule)
            if end < 0:
                fail("run %d: the report is cut short" % attempt, report)
            report = report[:end]
            if "TRACE" in report:
                fail("run %d: the report allocated" % attempt, report)
            if want not in report:
                fail("run %d did not name the handler" % attempt, report)
        print("ok: 10 runs named the handler:\n%s" % report)
    else:
        fail("unknown check %s" % check)


main()
