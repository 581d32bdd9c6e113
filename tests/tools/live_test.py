#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""live_test.py CASE USLAB PROGRAM PRELOAD LINKED - tests of the live statistics page
(issue 14, docs/design.md §10.1): `uslab stats PID` and `uslab top PID` against
live_program, a program that changes its heap in steps it is told to take (one command per
line on its stdin, one "ok ..." line back when the step is done).

USLAB is build/uslab, PROGRAM live_program (not linked to uslab), PRELOAD
libuslab-preload.so, LINKED live_program_linked (linked with libuslab.a). Cases:

  steps_run, steps_preload, steps_linked
      the figures `uslab stats PID --json` reads after each step against what the program
      did: started by `uslab run` with a thread, by LD_PRELOAD without a thread (both
      USLAB_LIVE=auto, the default), and linked with libuslab.a with a thread
      (USLAB_LIVE=always, which the static archive needs)
  not_uslab        a process without uslab, no process, a uslab process under auto that
                   has not allocated for a second yet, one under `ulimit -f 50` and one
                   under never: a clear
                   message, exit 1, no page; a single-threaded process under auto makes its
                   page by itself once it has allocated for a second
  other_user       another user's process is refused (run as nobody with setpriv; skipped
                   when not root), and so are pages of another owner or mode
  leftovers        no page left after a normal exit, nor after fork children exit; the
                   child never removes its parent's page
  sigkill          the page of a SIGKILLed process is removed by the tool and by the next
                   page made
  top_keys         `uslab top` in tmux: header, rows, the sort changed by a key, q quits and
                   the terminal is restored
  top_exit         `uslab top` in tmux when the process exits: says so, exits 0
  top_sigint       `uslab top` in tmux, ^C: exits 130 with the terminal restored
  top_plain        `uslab top -n 2` without a terminal: two plain frames

Nothing depends on timing thresholds: every step is acknowledged, the page is published at
once by uslab_reap, and everything else is polled for with generous timeouts.
Exit 0 on success, 1 on failure, 77 when a case cannot run here.
"""

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
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


def page_path(pid, uid=None):
    return f"/dev/shm/uslab.{os.geteuid() if uid is None else uid}.{pid}"


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


def start(args, how, thread):
    """Starts live_program: how is run (uslab run), preload or linked."""
    if how == "run":
        p = Program([args.uslab, "run", "--", args.program], clean_env())
    elif how == "preload":
        p = Program([args.program], clean_env({"LD_PRELOAD": args.preload}))
    else:
        p = Program([args.linked], clean_env({"USLAB_LIVE": "always"}))
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


def check_cache(c, objects, objsize):
    name = c["name"]
    check(c["objects"] == objects, f"{name}: {c['objects']} active objects, the program holds {objects}")
    check(c["objsize"] == objsize, f"{name}: object size {c['objsize']}, want {objsize}")
    check(c["cached_thread"] == 0 and c["cached_depot"] == 0,
          f"{name}: objects in magazines after uslab_reap: {c['cached_thread']}, {c['cached_depot']}")
    check(c["slab_takes"] - c["slab_puts"] == objects,
          f"{name}: takes {c['slab_takes']} - puts {c['slab_puts']} is not the {objects} objects out")
    check(c["total_objects"] == c["slabs"] * c["objs_per_slab"], f"{name}: total objects")
    check(c["slabs"] == c["partial"] + c["full"] + c["empty"], f"{name}: slab lists")
    check(c["total_objects"] >= objects, f"{name}: fewer objects than active")
    check(c["resident_bytes"] >= objects * c["stride"],
          f"{name}: resident {c['resident_bytes']} below the objects' {objects * c['stride']} bytes")
    check(c["resident_bytes"] <= c["slabs"] * c["slab_size"], f"{name}: resident above its slabs")


def case_steps(args, how):
    p = start(args, how, thread=how != "preload")
    try:
        for cmd in ["cache zz_many 24", "cache aa_few 100", "alloc zz_many 5000", "alloc aa_few 10",
                    "malloc 2500 300", "reap"]:
            p.step(cmd)
        doc = stats_json(args, p.pid)
        u = doc["uslab"]
        check(u["pid"] == p.pid, f"page of pid {u['pid']}, want {p.pid}")
        check(u["updates"] >= 1 and u["caches_in_use"] >= len(doc["caches"]), "header counts")
        c = caches_by_name(doc)
        for name in ("zz_many", "aa_few", "malloc-2560"):
            check(name in c, f"no cache {name} in {sorted(c)}")
        check_cache(c["zz_many"], 5000, 24)
        check_cache(c["aa_few"], 10, 100)
        check_cache(c["malloc-2560"], 300, 2560)
        st = os.stat(page_path(p.pid))
        check(st.st_uid == os.geteuid() and (st.st_mode & 0o777) == 0o600,
              f"page owner {st.st_uid} mode {oct(st.st_mode)}")
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
        check(out.splitlines()[1].startswith("Name") and "Slabs/Part/Cpu" in out, "table header")

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
        a = caches_by_name(after)
        for name in ("malloc-48", "malloc-64", "malloc-80", "malloc-96"):
            check(name in a and a[name]["objects"] == 1, f"{name} after churn: {a.get(name)}")
            check(moved(a[name]) > (moved(c[name]) if name in c else 0),
                  f"{name}: the churn moved no object through its depot or slab layer")
        check(after["uslab"]["updates"] > doc["uslab"]["updates"], "no update since the last reap")
        p.step("exit")
        p.proc.wait(timeout=TIMEOUT)
        check(not os.path.exists(page_path(p.pid)), "the page outlived its process")
    finally:
        p.finish()


def case_not_uslab(args):
    sleeper = subprocess.Popen(["sleep", "600"], env=clean_env())
    try:
        rc, out, err = uslab(args, "stats", str(sleeper.pid))
        check(rc == 1 and "does not use uslab" in err, f"uslab stats of sleep: {rc} {err}")
        rc, out, err = uslab(args, "top", str(sleeper.pid))
        check(rc == 1 and "does not use uslab" in err, f"uslab top of sleep: {rc} {err}")
    finally:
        sleeper.kill()
        sleeper.wait()
    rc, out, err = uslab(args, "stats", str(sleeper.pid))
    check(rc == 1 and "no process" in err, f"uslab stats of a dead pid: {rc} {err}")
    # USLAB_LIVE=auto (the default): no page before the process has allocated for a second
    # (checked only when the test itself took less than that, so a slow machine cannot
    # fail it), then one made by a slow path, with no reap and no thread.
    began = time.monotonic()
    p = Program([args.program], clean_env({"LD_PRELOAD": args.preload}))
    try:
        p.step("cache few 64")
        p.step("alloc few 100")
        page = p.step("page")[2]
        rc, out, err = uslab(args, "stats", str(p.pid))
        if time.monotonic() - began < 0.9:
            check(page == "0", "a page before the process's first second under auto")
            check(rc == 1 and "uses uslab but has no live statistics page" in err and
                  "allocated for a second" in err and "USLAB_LIVE=always" in err,
                  f"uslab stats of a process in its first second: {rc} {err}")
        p.step("churn 1500")
        check(p.step("page")[2] == "1", "no page after a second and a half of allocation")
        rc, out, err = uslab(args, "stats", str(p.pid), "--json")
        check(rc == 0 and '"caches"' in out, f"uslab stats after a second: {rc} {err}")
    finally:
        p.finish()
    # Under `ulimit -f 50` the page (104 KiB) cannot be made: no page, no SIGXFSZ, and the
    # tool names the limit.
    p = Program(["sh", "-c", 'ulimit -f 50 && exec "$0"', args.program],
                clean_env({"LD_PRELOAD": args.preload, "USLAB_LIVE": "always"}))
    try:
        p.step("churn 200")
        p.step("reap")
        check(p.step("page")[2] == "0", "a page beyond the file size limit")
        rc, out, err = uslab(args, "stats", str(p.pid))
        check(rc == 1 and "file size limit" in err, f"uslab stats under ulimit -f: {rc} {err}")
    finally:
        p.finish()
    # USLAB_LIVE=never: none even with threads.
    p = Program([args.uslab, "run", "--env", "USLAB_LIVE=never", "--", args.program], clean_env())
    try:
        p.step("thread")
        p.step("malloc 100 1000")
        p.step("reap")
        check(p.step("page")[2] == "0", "a page under USLAB_LIVE=never")
        rc, out, err = uslab(args, "stats", str(p.pid))
        check(rc == 1 and "USLAB_LIVE=never" in err, f"uslab stats under never: {rc} {err}")
    finally:
        p.finish()


def case_other_user(args):
    if os.geteuid() != 0:
        raise Skip("not root: cannot start a process of another user here")
    if not shutil.which("setpriv"):
        raise Skip("no setpriv to start a process as nobody")
    nobody = pwd.getpwnam("nobody")
    env = clean_env({"LD_PRELOAD": args.preload, "USLAB_LIVE": "always"})
    argv = ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups",
            args.program]
    try:
        p = Program(argv, env)
    except Fail as e:
        raise Skip(f"cannot run live_program as nobody ({e})")
    try:
        p.step("malloc 100 1000")
        p.step("reap")
        check(p.step("page")[2] == "1", "nobody's process made no page")
        st = os.stat(page_path(p.pid, nobody.pw_uid))
        check(st.st_uid == nobody.pw_uid and (st.st_mode & 0o777) == 0o600,
              f"nobody's page: owner {st.st_uid}, mode {oct(st.st_mode)}")
        rc, out, err = uslab(args, "stats", str(p.pid))
        check(rc == 1 and "not to you" in err and out == "", f"uslab stats of nobody's process: {rc} {err}")
        rc, out, err = uslab(args, "top", "-n", "1", str(p.pid))
        check(rc == 1 and "not to you" in err, f"uslab top of nobody's process: {rc} {err}")
        p.step("exit")  # removes its page itself
        p.proc.wait(timeout=TIMEOUT)
        check(not os.path.exists(page_path(p.pid, nobody.pw_uid)), "nobody's page outlived it")
    finally:
        p.finish()
        if os.path.exists(page_path(p.pid, nobody.pw_uid)):  # after a failure: not left
            os.unlink(page_path(p.pid, nobody.pw_uid))
    # Our own process, with a page file that is not ours, or that others may read.
    p = Program([args.uslab, "run", "--", args.program], clean_env())  # one thread: no page
    try:
        path = page_path(p.pid)
        for owner, mode, why in ((nobody.pw_uid, 0o600, "another user"), (0, 0o644, "others may read")):
            with open(path, "wb") as f:
                f.write(b"\0" * 4096)
            os.chown(path, owner, -1)
            os.chmod(path, mode)
            rc, out, err = uslab(args, "stats", str(p.pid))
            check(rc == 1 and why in err, f"a page of owner {owner} mode {oct(mode)}: {rc} {err}")
            os.unlink(path)
    finally:
        p.finish()
        if os.path.exists(page_path(p.pid)):
            os.unlink(page_path(p.pid))


def case_leftovers(args):
    p = Program([args.program], clean_env({"LD_PRELOAD": args.preload, "USLAB_LIVE": "always"}))
    try:
        p.step("malloc 100 1000")
        p.step("reap")
        check(p.step("page")[2] == "1", "no page made")
        for _ in range(3):
            child = p.step("fork")  # ["ok", "child", PID, "page", P] then "ok fork"
            check(child[1] == "child" and child[4] == "1", f"the fork child made no page: {child}")
            line = p.proc.stdout.readline()
            check(line.startswith("ok fork"), f"fork: {line}")
            check(not os.path.exists(page_path(int(child[2]))), "a fork child's page outlived it")
            check(os.path.exists(page_path(p.pid)), "the fork child removed its parent's page")
        doc = stats_json(args, p.pid)
        check(doc["uslab"]["pid"] == p.pid, "the parent's page is another process's")
        p.step("exit")
        p.proc.wait(timeout=TIMEOUT)
        check(not os.path.exists(page_path(p.pid)), "the page outlived its process")
    finally:
        p.finish()
    # Under auto (uslab run's default) too: the fork child of a process with threads is
    # single-threaded; its reap makes its own page, which goes with it; the parent's stays.
    p = start(args, "run", thread=True)
    try:
        p.step("reap")
        check(p.step("page")[2] == "1", "no page with a thread")
        child = p.step("fork")
        check(child[4] == "1", f"a fork child under auto made no page at its reap: {child}")
        p.proc.stdout.readline()
        check(not os.path.exists(page_path(int(child[2]))), "a fork child's page outlived it")
        check(os.path.exists(page_path(p.pid)), "the parent's page went with its child")
        p.step("exit")
        p.proc.wait(timeout=TIMEOUT)
        check(not os.path.exists(page_path(p.pid)), "the page outlived its process")
    finally:
        p.finish()


def killed_with_page(args):
    """The pid of a SIGKILLed process whose page is still there. Any process of this user
    that makes a page sweeps stale ones (other tests run meanwhile), so it tries again
    when its page went before it was looked at."""
    for _ in range(10):
        p = start(args, "run", thread=True)
        p.step("malloc 100 100")
        p.step("reap")
        check(p.step("page")[2] == "1", "no page")
        p.proc.send_signal(signal.SIGKILL)
        p.proc.wait(timeout=TIMEOUT)
        if os.path.exists(page_path(p.pid)):
            return p.pid
    raise Fail("a SIGKILLed process left no page ten times: nothing to sweep")


def case_sigkill(args):
    dead = killed_with_page(args)
    rc, out, err = uslab(args, "stats", str(dead))
    check(rc == 1 and "no process" in err, f"uslab stats of the killed process: {rc} {err}")
    check(not os.path.exists(page_path(dead)), "the tool did not remove the killed process's page")
    dead = killed_with_page(args)
    p = start(args, "run", thread=True)  # its page, made at the reap, sweeps the stale one
    try:
        p.step("reap")
        check(p.step("page")[2] == "1", "no page")
        check(not os.path.exists(page_path(dead)), "a new page did not sweep the killed process's")
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

    def start(self, shell_command):
        r = self.run("new-session", "-d", "-s", "top", "-x", "150", "-y", "45", shell_command)
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
        if line.split() and line.split()[-1] == name:
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
    "not_uslab": case_not_uslab,
    "other_user": case_other_user,
    "leftovers": case_leftovers,
    "sigkill": case_sigkill,
    "top_keys": case_top_keys,
    "top_exit": case_top_exit,
    "top_sigint": case_top_sigint,
    "top_plain": case_top_plain,
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
