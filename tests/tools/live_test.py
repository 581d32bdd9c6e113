#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""live_test.py CASE USLAB PROGRAM PRELOAD LINKED - tests of `uslab stats PID` and `uslab top
PID` (issue 14, docs/design.md §10.1), which read a running process's caches from outside
with process_vm_readv (the map `uslab_introspect`, src/live.h), against live_program, a
program that changes its heap in steps it is told to take (one command per line on its
stdin, one "ok ..." line back when the step is done).

USLAB is build/uslab, PROGRAM live_program (not linked to uslab), PRELOAD
libuslab-preload.so, LINKED live_program_linked (linked with libuslab.a). Cases:

  steps_run, steps_preload, steps_linked
      the figures `uslab stats PID --json` reads after each step against what the program
      did: started by `uslab run` with a thread, by LD_PRELOAD, and linked with libuslab.a
  idle_preload, idle_linked
      a process that allocated and then does nothing (no reap, no slow path, no thread):
      its active objects exactly as many as it holds, those in its magazines counted apart
  not_uslab        a process without uslab, no process: a clear message, exit 1; and a
                   process that allocated for a while has no file in /dev/shm
  version          a map of another version (the step mapversion): a clean refusal naming
                   both versions, exit 1; the right version read again
  other_user       the tool run as nobody against root's process: refused with the reason
                   and the remedy (skipped when not root); root reads nobody's process
  top_keys         `uslab top` in tmux: header, rows, the sort changed by a key, q quits and
                   the terminal is restored
  top_exit         `uslab top` in tmux when the process exits: says so, exits 0
  top_sigint       `uslab top` in tmux, ^C: exits 130 with the terminal restored
  top_plain        `uslab top -n 2` without a terminal: two plain frames
  top_narrow       `uslab top` in an 80x24 tmux: whole cache names, no line past 80

Nothing depends on timing thresholds: every step is acknowledged, the figures are read at
the moment, and everything else is polled for with generous timeouts.
Exit 0 on success, 1 on failure, 77 when a case cannot run here.
"""

import glob
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
import time

TIMEOUT = 60  # seconds for anything polled for: generous, never a threshold of the test


class Fail(Exception):
    pass


class Skip(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Fail(what)


def clean_env(extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("USLAB_") and k != "LD_PRELOAD"}
    env.update(extra or {})
    return env


def shm_files(pid):
    """The files of /dev/shm named for process pid (a live statistics page of old)."""
    return glob.glob(f"/dev/shm/uslab.*.{pid}")


def wait_until(pred, what, timeout=TIMEOUT, interval=0.05):
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise Fail(f"timed out waiting for {what}")
        time.sleep(interval)


class Program:
    """live_program, driven one acknowledged step at a time."""

    def __init__(self, argv, env, user=None):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env, text=True, bufsize=1)
        first = self.proc.stdout.readline().split()
        if first[:2] != ["ok", "pid"]:
            err = self.proc.stderr.read() if self.proc.poll() is not None else ""
            raise Fail(f"live_program did not start: {first} {err}")
        self.pid = int(first[2])

    def step(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line.startswith("ok"):
            err = self.proc.stderr.read() if self.proc.poll() is not None else ""
            raise Fail(f"step '{command}' failed: '{line.strip()}' {err}")
        return line.split()

    def finish(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def start(args, how, thread=False):
    """Starts live_program: how is run (uslab run), preload or linked."""
    if how == "run":
        p = Program([args.uslab, "run", "--", args.program], clean_env())
    elif how == "preload":
        p = Program([args.program], clean_env({"LD_PRELOAD": args.preload}))
    else:
        p = Program([args.linked], clean_env())
    if thread:
        p.step("thread")
    return p


def uslab(args, *argv):
    r = subprocess.run([args.uslab, *argv], capture_output=True, text=True, env=clean_env(),
                       timeout=TIMEOUT)
    return r.returncode, r.stdout, r.stderr


def stats_json(args, pid):
    rc, out, err = uslab(args, "stats", str(pid), "--json")
    check(rc == 0, f"uslab stats {pid} --json exited {rc}: {err}")
    try:
        return json.loads(out)
    except ValueError as e:
        raise Fail(f"uslab stats --json printed no JSON ({e}): {out}")


def caches_by_name(doc):
    return {c["name"]: c for c in doc["caches"]}


def check_total(c):
    """A slab holds objs_per_slab objects; a malloc class's, one fewer at some phases of its
    lattice (live.h)."""
    room = c["slabs"] * c["objs_per_slab"]
    low = room - c["slabs"] if c["name"].startswith("malloc-") else room
    check(low <= c["total_objects"] <= room,
          f"{c['name']}: total objects {c['total_objects']}, slabs {c['slabs']} of {c['objs_per_slab']}")


def check_cache(c, objects, objsize):
    name = c["name"]
    check(c["objects"] == objects, f"{name}: {c['objects']} active objects, the program holds {objects}")
    check(c["objsize"] == objsize, f"{name}: object size {c['objsize']}, want {objsize}")
    check(c["cached_thread"] == 0 and c["cached_depot"] == 0,
          f"{name}: objects in magazines after uslab_reap: {c['cached_thread']}, {c['cached_depot']}")
    check(c["slab_takes"] - c["slab_puts"] == objects,
          f"{name}: takes {c['slab_takes']} - puts {c['slab_puts']} is not the {objects} objects out")
    check_total(c)
    check(c["slabs"] == c["partial"] + c["full"] + c["empty"], f"{name}: slab lists")
    check(c["total_objects"] >= objects, f"{name}: fewer objects than active")
    check(c["resident_bytes"] >= objects * c["stride"],
          f"{name}: resident {c['resident_bytes']} below the objects' {objects * c['stride']} bytes")
    check(c["resident_bytes"] <= c["slabs"] * c["slab_size"], f"{name}: resident above its slabs")


def check_header(doc, pid):
    u = doc["uslab"]
    check(u["pid"] == pid, f"statistics of pid {u['pid']}, want {pid}")
    check(u["updates"] == 1, f"one snapshot per `uslab stats`, not {u['updates']}")
    check(u["caches_in_use"] == u["caches_shown"] == len(doc["caches"]),
          f"caches in use {u['caches_in_use']}, shown {u['caches_shown']}, listed {len(doc['caches'])}")


def case_steps(args, how):
    p = start(args, how, thread=how == "run")
    try:
        for cmd in ["cache zz_many 24", "cache aa_few 100", "alloc zz_many 5000", "alloc aa_few 10",
                    "malloc 2500 300", "reap"]:
            p.step(cmd)
        doc = stats_json(args, p.pid)
        check_header(doc, p.pid)
        c = caches_by_name(doc)
        for name in ("zz_many", "aa_few", "malloc-2560"):
            check(name in c, f"no cache {name} in {sorted(c)}")
        check_cache(c["zz_many"], 5000, 24)
        check_cache(c["aa_few"], 10, 100)
        check_cache(c["malloc-2560"], 300, 2560)
        before = c

        p.step("free zz_many 3000")
        p.step("reap")
        c = caches_by_name(stats_json(args, p.pid))
        check_cache(c["zz_many"], 2000, 24)
        z0, z1 = before["zz_many"], c["zz_many"]
        check(z1["slab_puts"] - z0["slab_puts"] == 3000 and z1["slab_takes"] == z0["slab_takes"],
              f"zz_many: 3000 frees made puts {z0['slab_puts']} -> {z1['slab_puts']}, takes "
              f"{z0['slab_takes']} -> {z1['slab_takes']}")
        check(z1["slabs"] < z0["slabs"] and z1["slabs_released"] > z0["slabs_released"],
              "zz_many: reap released no slab")
        rc, out, err = uslab(args, "stats", str(p.pid))
        check(rc == 0, f"uslab stats {p.pid} exited {rc}: {err}")
        rows = [line.split() for line in out.splitlines() if line.startswith("zz_many ")]
        check(len(rows) == 1 and rows[0][1] == "2000" and rows[0][2] == "24",
              f"the table's zz_many row: {rows}\n{out}")
        check(out.splitlines()[0].startswith(f"process {p.pid} (") and
              out.splitlines()[1].startswith("Name") and "Slabs/Part/Cpu" in out, "table header")

        # The whole process's totals, read from outside (issue 39): 20 glibc blocks of 2 MiB
        # and 20 medium blocks of 256 KiB, counted and totalled, then gone once freed.
        # (The program's own arrays may be glibc's blocks too: counted from a baseline.)
        mib = 1 << 20
        t0 = stats_json(args, p.pid)["totals"]
        p.step("malloc 2097152 20")
        p.step("malloc 262144 20")
        t = stats_json(args, p.pid)["totals"]
        blocks, size = t["large_blocks"] - t0["large_blocks"], t["large_bytes"] - t0["large_bytes"]
        check(blocks == 20 and 40 * mib <= size < 41 * mib,
              f"totals: {blocks} glibc blocks more, of {size} bytes, want 20 of 40 MiB")
        check(t["in_use_bytes"] >= 5 * mib + 2500 * 300, f"totals: {t['in_use_bytes']} bytes in use")
        check(t["held_bytes"] >= t["in_use_bytes"] and 0 < t["rss_bytes"] <= t["rss_peak_bytes"],
              f"totals: {t}")
        rc, out, err = uslab(args, "stats", str(p.pid))
        check(rc == 0 and re.search(r"^in use: .* in %d blocks of the system allocator"
                                    % t["large_blocks"], out, re.M),
              f"the table's totals: {out[-600:]}")
        p.step("mfree 2097152 20")
        p.step("mfree 262144 20")
        t = stats_json(args, p.pid)["totals"]
        check(t["large_blocks"] == t0["large_blocks"] and t["large_bytes"] == t0["large_bytes"]
              and t["large_peak_bytes"] >= 40 * mib, f"totals after the frees: {t}, before {t0}")

        p.step("mfree 2500 300")
        p.step("free aa_few 10")
        p.step("reap")
        doc = stats_json(args, p.pid)
        c = caches_by_name(doc)
        for name in ("aa_few", "malloc-2560"):
            check(name not in c or c[name]["objects"] == 0, f"{name} still has objects: {c.get(name)}")
        check_cache(c["zz_many"], 2000, 24)

        def moved(c):
            return c["slab_takes"] + c["slab_puts"] + c["depot_in"] + c["depot_out"]
        p.step("churn 300")
        p.step("reap")
        after = stats_json(args, p.pid)
        check_header(after, p.pid)
        a = caches_by_name(after)
        for name in ("malloc-48", "malloc-64", "malloc-80", "malloc-96"):
            check(name in a and a[name]["objects"] == 1, f"{name} after churn: {a.get(name)}")
            check(moved(a[name]) > (moved(c[name]) if name in c else 0),
                  f"{name}: the churn moved no object through its depot or slab layer")
        check(not shm_files(p.pid), f"files in /dev/shm for the process: {shm_files(p.pid)}")
        p.step("exit")
        p.proc.wait(timeout=TIMEOUT)
        rc, out, err = uslab(args, "stats", str(p.pid))
        check(rc == 1 and "no process" in err, f"uslab stats after the exit: {rc} {err}")
    finally:
        p.finish()


def check_counts(c):
    """The identities of a snapshot (live.h): what is out of the slabs is active, in the
    threads' magazines or in the depot; the slabs and their lists agree."""
    name = c["name"]
    check(c["objects"] + c["cached_thread"] + c["cached_depot"] == c["slab_takes"] - c["slab_puts"],
          f"{name}: active {c['objects']} + threads {c['cached_thread']} + depot "
          f"{c['cached_depot']} is not takes {c['slab_takes']} - puts {c['slab_puts']}")
    check_total(c)
    check(c["slabs"] == c["partial"] + c["full"] + c["empty"], f"{name}: slab lists")


def malloc_class(caches, size):
    """The name of the malloc class that holds blocks of `size` bytes: the smallest in use
    at least that large (the test's own blocks keep it in use)."""
    sizes = sorted(int(n[len("malloc-"):]) for n in caches
                   if n.startswith("malloc-") and n[len("malloc-"):].isdigit())
    fit = [s for s in sizes if s >= size]
    check(fit, f"no malloc class of {size} bytes or more in {sorted(caches)}")
    return f"malloc-{fit[0]}"


def case_idle(args, how):
    """A process that allocated, then sat idle: no reap, no slow path since, no thread. Its
    figures are the moment's all the same, with the objects still in its magazines apart."""
    p = start(args, how)
    try:
        p.step("malloc 100 10000")
        p.step("cache idle_objs 64")
        p.step("alloc idle_objs 5000")
        time.sleep(2)  # idle: nothing the figures could wait for
        doc = stats_json(args, p.pid)
        check_header(doc, p.pid)
        c = caches_by_name(doc)
        cls = malloc_class(c, 100)
        check(cls == "malloc-112", f"blocks of 100 bytes are in {cls}, want malloc-112")
        check("idle_objs" in c, f"no cache idle_objs in {sorted(c)}")
        for name, objects, objsize in ((cls, 10000, 112), ("idle_objs", 5000, 64)):
            check(c[name]["objects"] == objects,
                  f"{name}: {c[name]['objects']} active objects, the program holds {objects} "
                  f"(threads' magazines {c[name]['cached_thread']}, depot {c[name]['cached_depot']})")
            check(c[name]["objsize"] == objsize, f"{name}: object size {c[name]['objsize']}")
            check_counts(c[name])
        rc, out, err = uslab(args, "stats", str(p.pid))
        check(rc == 0, f"uslab stats {p.pid} exited {rc}: {err}")
        rows = {line.split()[0]: line.split() for line in out.splitlines()[2:] if line.split()}
        check(rows.get(cls, [None, None])[1] == "10000" and rows.get("idle_objs", [None, None])[1] == "5000",
              f"the table's rows of {cls} and idle_objs:\n{out}")
        check(not shm_files(p.pid), f"files in /dev/shm for the process: {shm_files(p.pid)}")
    finally:
        p.finish()


def case_not_uslab(args):
    sleeper = subprocess.Popen(["sleep", "600"], env=clean_env())
    try:
        rc, out, err = uslab(args, "stats", str(sleeper.pid))
        check(rc == 1 and "does not use uslab" in err and out == "", f"uslab stats of sleep: {rc} {err}")
        rc, out, err = uslab(args, "top", str(sleeper.pid))
        check(rc == 1 and "does not use uslab" in err, f"uslab top of sleep: {rc} {err}")
    finally:
        sleeper.kill()
        sleeper.wait()
    rc, out, err = uslab(args, "stats", str(sleeper.pid))
    check(rc == 1 and "no process" in err, f"uslab stats of a dead pid: {rc} {err}")
    rc, out, err = uslab(args, "top", "-n", "1", str(sleeper.pid))
    check(rc == 1 and "no process" in err, f"uslab top of a dead pid: {rc} {err}")
    # A process that has allocated for a while, on slow paths, preloaded and under `uslab
    # run` with a thread: read all the same, and no file of it in /dev/shm (the process does
    # nothing for the tool).
    for how in ("preload", "run"):
        p = start(args, how, thread=how == "run")
        try:
            p.step("churn 1500")
            p.step("malloc 100 1000")
            check(not shm_files(p.pid), f"{how}: files in /dev/shm for the process: {shm_files(p.pid)}")
            doc = stats_json(args, p.pid)
            check_header(doc, p.pid)
            check(not shm_files(p.pid), f"{how}: files in /dev/shm after uslab stats: {shm_files(p.pid)}")
        finally:
            p.finish()


def case_version(args):
    """A map of another layout (its version changed in the process): refused, naming both
    versions; read again once the version is back."""
    for how in ("preload", "linked"):
        p = start(args, how)
        try:
            p.step("malloc 100 10")
            rc, out, err = uslab(args, "stats", str(p.pid))
            check(rc == 0, f"{how}: uslab stats exited {rc}: {err}")
            p.step("mapversion 7")
            rc, out, err = uslab(args, "stats", str(p.pid))
            versions = set(re.findall(r"version (\d+)", err))
            check(rc == 1 and out == "" and "7" in versions and len(versions) == 2 and
                  "same build" in err and err.count("\n") == 1,
                  f"{how}: uslab stats of a map of version 7: {rc} {err!r}")
            rc, out, err = uslab(args, "top", "-n", "1", str(p.pid))
            check(rc == 1 and "version 7" in err, f"{how}: uslab top of a map of version 7: {rc} {err}")
            ours = (versions - {"7"}).pop()
            p.step(f"mapversion {ours}")
            doc = stats_json(args, p.pid)
            check_header(doc, p.pid)
        finally:
            p.finish()


def case_other_user(args):
    if os.geteuid() != 0:
        raise Skip("not root: cannot start a process of another user here")
    if not shutil.which("setpriv"):
        raise Skip("no setpriv to run as nobody")
    nobody = pwd.getpwnam("nobody")
    as_nobody = ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups"]
    # The tool as nobody against root's process: refused, with the reason and the remedy.
    tmp = tempfile.mkdtemp(prefix="uslab-live-test-")
    p = None
    try:
        os.chmod(tmp, 0o755)
        tool = os.path.join(tmp, "uslab")
        shutil.copy(args.uslab, tool)
        os.chmod(tool, 0o755)
        p = start(args, "preload")
        p.step("malloc 100 1000")
        for argv in (["stats", str(p.pid)], ["top", "-n", "1", str(p.pid)]):
            r = subprocess.run(as_nobody + [tool, *argv], capture_output=True, text=True,
                               env=clean_env(), timeout=TIMEOUT)
            if r.returncode != 1 and "setpriv" in r.stderr:
                raise Skip(f"cannot run as nobody: {r.stderr}")
            check(r.returncode == 1 and r.stdout == "" and "another user" in r.stderr and
                  "as root" in r.stderr and r.stderr.count("\n") == 1,
                  f"uslab {argv[0]} of root's process as nobody: {r.returncode} {r.stderr!r}")
    finally:
        if p:
            p.finish()
        shutil.rmtree(tmp, ignore_errors=True)
    # Root reads nobody's process.
    try:
        p = Program(as_nobody + [args.program], clean_env({"LD_PRELOAD": args.preload}))
    except Fail as e:
        raise Skip(f"cannot run live_program as nobody ({e})")
    try:
        p.step("malloc 100 1000")
        p.step("cache nobodys 48")
        p.step("alloc nobodys 300")
        c = caches_by_name(stats_json(args, p.pid))
        check("nobodys" in c and c["nobodys"]["objects"] == 300,
              f"root reading nobody's process: {c.get('nobodys')}")
        check_counts(c["nobodys"])
    finally:
        p.finish()


class Tmux:
    """A private tmux server (its own socket) with one detached session."""

    def __init__(self, name):
        if not shutil.which("tmux"):
            if os.environ.get("CI"):
                raise Fail("tmux is not installed")
            raise Skip("tmux is not installed")
        self.sock = f"uslab-live-test-{os.getpid()}-{name}"
        self.env = dict(os.environ, TERM=os.environ.get("TERM") or "xterm")

    def run(self, *argv):
        return subprocess.run(["tmux", "-L", self.sock, *argv], capture_output=True, text=True,
                              env=self.env, timeout=TIMEOUT)

    def start(self, shell_command, cols=150, lines=45):
        r = self.run("new-session", "-d", "-s", "top", "-x", str(cols), "-y", str(lines),
                     shell_command)
        check(r.returncode == 0, f"tmux new-session: {r.stderr}")

    def screen(self):
        return self.run("capture-pane", "-p", "-t", "top").stdout

    def keys(self, *keys):
        check(self.run("send-keys", "-t", "top", *keys).returncode == 0, "tmux send-keys")

    def wait_for(self, pred, what):
        """The first screen that satisfies pred."""
        def matching():
            screen = self.screen()
            return screen if pred(screen) else None
        return wait_until(matching, what)

    def close(self):
        self.run("kill-server")


def top_command(args, pid, *extra):
    """top inside a shell that reports, after it, whether the terminal's settings are those
    from before, and its exit status; then stays, so the screen can be read."""
    opts = " ".join(extra)
    return (f"sh -c 'trap : INT; before=$(stty -g); \"$0\" top -d 0.2 {opts} \"$1\"; s=$?; "
            f"[ \"$(stty -g)\" = \"$before\" ] && echo tty-restored; echo status=$s; sleep 600' "
            f"{args.uslab} {pid}")


def row_index(screen, name):
    for i, line in enumerate(screen.splitlines()):
        if line.split() and line.split()[0] == name:
            return i
    return None


def prepared(args):
    p = start(args, "run", thread=True)
    for cmd in ["cache zz_many 24", "cache aa_few 100", "alloc zz_many 5000", "alloc aa_few 10",
                "reap"]:
        p.step(cmd)
    return p


def case_top_keys(args):
    p = prepared(args)
    t = Tmux("keys")
    try:
        t.start(top_command(args, p.pid))
        scr = t.wait_for(lambda s: "OBJS" in s and row_index(s, "zz_many") is not None and
                         row_index(s, "aa_few") is not None, "the table of uslab top")
        for text in ("uslab top - pid %d" % p.pid, "Active / Total Objects", "ACTIVE", "RESIDENT",
                     "CHURN", "NAME", "Sorted by active"):
            check(text in scr, f"no '{text}' on the screen:\n{scr}")
        check(row_index(scr, "zz_many") < row_index(scr, "aa_few"),
              f"by active, zz_many (5000) is not above aa_few (10):\n{scr}")
        t.keys("n")
        scr = t.wait_for(lambda s: "Sorted by name" in s and row_index(s, "aa_few") is not None and
                         row_index(s, "zz_many") is not None and
                         row_index(s, "aa_few") < row_index(s, "zz_many"), "the order by name")
        t.keys("a")
        t.wait_for(lambda s: "Sorted by active" in s and row_index(s, "zz_many") is not None and
                   row_index(s, "aa_few") is not None and
                   row_index(s, "zz_many") < row_index(s, "aa_few"), "the order by active again")
        t.keys("q")
        scr = t.wait_for(lambda s: "status=" in s, "uslab top to quit on q")
        check("status=0" in scr and "tty-restored" in scr, f"after q:\n{scr}")
        check("OBJS" not in scr, f"the view is still on the screen after q:\n{scr}")
    finally:
        t.close()
        p.finish()


def case_top_exit(args):
    p = prepared(args)
    t = Tmux("exit")
    try:
        t.start(top_command(args, p.pid))
        t.wait_for(lambda s: row_index(s, "zz_many") is not None, "the table of uslab top")
        p.step("exit")
        p.proc.wait(timeout=TIMEOUT)
        scr = t.wait_for(lambda s: "status=" in s, "uslab top to exit with its process")
        check(f"process {p.pid} (live_program) has exited" in scr and "status=0" in scr and
              "tty-restored" in scr, f"after the process exited:\n{scr}")
    finally:
        t.close()
        p.finish()


def case_top_sigint(args):
    p = prepared(args)
    t = Tmux("sigint")
    try:
        t.start(top_command(args, p.pid, "-s", "r"))
        scr = t.wait_for(lambda s: row_index(s, "zz_many") is not None, "the table of uslab top")
        check("Sorted by resident" in scr, f"-s r did not sort by resident:\n{scr}")
        t.keys("C-c")
        scr = t.wait_for(lambda s: "status=" in s, "uslab top to exit on ^C")
        check("status=130" in scr and "tty-restored" in scr, f"after ^C:\n{scr}")
        check("OBJS" not in scr, f"the view is still on the screen after ^C:\n{scr}")
    finally:
        t.close()
        p.finish()


def case_top_narrow(args):
    """uslab top in an 80x24 terminal: whole cache names (they were cut to `malloc-`)."""
    p = prepared(args)
    t = Tmux("narrow")
    try:
        t.start(top_command(args, p.pid), cols=80, lines=24)
        scr = t.wait_for(lambda s: row_index(s, "zz_many") is not None and
                         re.search(r"^malloc-[0-9]+ ", s, re.M) is not None,
                         "the table of uslab top at 80 columns")
        lines = scr.splitlines()
        head = [i for i, line in enumerate(lines) if line.split()[:2] == ["NAME", "OBJS"]]
        check(head, f"no header row:\n{scr}")
        rows = [line for line in lines[head[0] + 1:] if line.strip()]
        check(rows, f"no rows:\n{scr}")
        for line in rows:
            check(len(line) <= 80, f"a line of {len(line)} columns:\n{scr}")
            name = line.split()[0]
            m = re.fullmatch(r"malloc-([0-9]+)", name)
            check(name in ("zz_many", "aa_few") or name.startswith("uslab-") or
                  (m is not None and int(m.group(1)) % 16 == 0 and int(m.group(1)) >= 16),
                  f"a cut name '{name}':\n{scr}")
        t.keys("q")
        t.wait_for(lambda s: "status=" in s, "uslab top to quit on q")
    finally:
        t.close()
        p.finish()


def case_top_plain(args):
    p = prepared(args)
    try:
        rc, out, err = uslab(args, "top", "-n", "2", "-d", "0.1", "-s", "n", str(p.pid))
        check(rc == 0, f"uslab top -n 2 exited {rc}: {err}")
        check(out.count("uslab top - pid") == 2 and "\033" not in out,
              f"not two plain frames:\n{out}")
        check(row_index(out, "aa_few") < row_index(out, "zz_many"), f"-s n:\n{out}")
    finally:
        p.finish()


CASES = {
    "steps_run": lambda a: case_steps(a, "run"),
    "steps_preload": lambda a: case_steps(a, "preload"),
    "steps_linked": lambda a: case_steps(a, "linked"),
    "idle_preload": lambda a: case_idle(a, "preload"),
    "idle_linked": lambda a: case_idle(a, "linked"),
    "not_uslab": case_not_uslab,
    "version": case_version,
    "other_user": case_other_user,
    "top_keys": case_top_keys,
    "top_exit": case_top_exit,
    "top_sigint": case_top_sigint,
    "top_plain": case_top_plain,
    "top_narrow": case_top_narrow,
}


class Args:
    def __init__(self, argv):
        self.case, self.uslab, self.program, self.preload, self.linked = argv


def main():
    if len(sys.argv) != 6 or sys.argv[1] not in CASES:
        print(__doc__, file=sys.stderr)
        return 2
    args = Args(sys.argv[1:])
    try:
        CASES[args.case](args)
    except Skip as e:
        print(f"SKIP ({args.case}): {e}")
        return 77
    except Fail as e:
        print(f"FAIL ({args.case}): {e}", file=sys.stderr)
        return 1
    print(f"ok ({args.case})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
