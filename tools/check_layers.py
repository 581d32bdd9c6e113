#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""check_layers.py - the layer order of docs/design.md §1, checked on object files and includes.

Usage: check_layers.py [--nm NM] [--edges] [--root DIR] DESIGN.md OBJECTS...

OBJECTS are static archives (libuslab.a) and/or object files (the preload library's
CMakeFiles/uslab-preload.dir/src/*.c.o); a ';'-separated list (as CMake's
$<TARGET_OBJECTS:...> gives it) counts as several, and @FILE reads arguments from FILE, one
per line (the build writes build/tests/layers/objects.txt). Every defined global symbol is mapped to
the source file of its object, every undefined one to the file defining it, which gives a
graph of src/ files. The check fails (exit 1) on

  (a) a use of a symbol defined in a file of higher rank than the user's,
  (b) any cycle in the file graph (same-rank files included),
  (c) an object file whose source is not in the rank table;

and, reading the #include lines of the sources and headers (below), on

  (d) an include of a file of higher rank than the includer's,
  (e) a file that is not in the rank table but is included by a checked file, or is a .h
      file in a folder of the table's files (src/),

and prints "layers: N files, M edges, no upward call, no cycle" and "layers: N sources and
headers, M includes, no upward include" otherwise (exit 0). Exit 2: bad arguments, no rank
table in DESIGN.md, or nm failed.

The rank table is the markdown table of DESIGN.md whose header row starts with "| rank |";
each body row is "| <rank> | <layer> | `src/a.c`, `src/b.c`, `src/a.h` | <what it owns> |". A file
may use symbols of files of lower or equal rank. A file listed but never compiled is fine.

Headers: a header's rank is that of the row that lists it in its files column; there is no
rule by name (the os layer's os.h serves os_linux.c, the purger's purge.h serves purge.c and
pressure.c, and the rank-0 row lists headers only). Object files are matched to the .c files
of the table only. Every file of the table that exists under ROOT is read: ROOT is --root,
else the nearest folder at or above DESIGN.md's that holds a file of the table (the table's
paths are relative to it). A line `#include "x.h"` or `#include <x.h>` names the file x.h in
the includer's own folder if there is one (where the compiler looks first for the quoted
form, and where the build's -I of that folder finds the other), and then it is checked: it must be in the table,
and of rank lower than or equal to the includer's. A name that is no file there (a system
header, the public include/uslab.h) is not checked. The lines are read as text: an include
inside #if counts whatever the condition.

Only global symbols are seen: static functions, calls inside one object and inline functions
from headers leave no trace in nm (the include check covers inline functions and data
structures: a file can use only what the headers it includes declare). Symbols defined in no
given object (libc, libgcc, pthread, weak libstdc++ references) are ignored. Each archive is
one link unit and the loose objects together another, and an undefined symbol resolves only
within its own unit: the static library's malloc.c calls the C library's malloc, which the
preload library's malloc.c defines, and that is no edge. So give each library whole (an
archive, or all its objects).

Python 3 standard library only; runs on Debian 12's python3 (3.11).
"""

import argparse
import os
import re
import shlex
import subprocess
import sys

# nm symbol types (GNU and llvm-nm). Upper case is global; of the lower-case letters only
# 'u' (unique global), 'i' (indirect function) and the weak 'w'/'v' are not file-local.
DEFINED = set("TDBRCVWGSui")
WEAK_DEFINED = set("CVW")
UNDEFINED = set("Uwv")
OBJ_SUFFIXES = (".o", ".obj")
HEADER_SUFFIXES = (".h",)
INCLUDE = re.compile(r'^\s*#\s*include\s*(?:"([^"]+)"|<([^>]+)>)')


class Parser(argparse.ArgumentParser):
    def error(self, message):
        self.print_usage(sys.stderr)
        fail_usage(message)


def fail_usage(msg):
    print(f"layers: {msg}", file=sys.stderr)
    sys.exit(2)


# ---------------------------------------------------------------------------------------
# The rank table
# ---------------------------------------------------------------------------------------


class Layer:
    def __init__(self, rank, name, line):
        self.rank = rank
        self.name = name
        self.line = line


def split_row(line):
    cells = line.strip()
    if cells.startswith("|"):
        cells = cells[1:]
    if cells.endswith("|"):
        cells = cells[:-1]
    return [c.strip() for c in cells.split("|")]


def parse_files_cell(cell):
    quoted = re.findall(r"`([^`]+)`", cell)
    items = quoted if quoted else [c for c in (x.strip() for x in cell.split(",")) if c]
    return [os.path.normpath(i.strip()) for i in items]


def parse_design(path):
    """Returns {source path: Layer} from the rank table of the markdown file at path."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        fail_usage(f"cannot read {path}: {e.strerror}")

    start = None
    for i, line in enumerate(lines):
        cells = split_row(line) if line.lstrip().startswith("|") else []
        if cells and cells[0].lower() == "rank":
            if start is not None:
                fail_usage(f"{path}:{i + 1}: a second rank table (the first is at line {start})")
            start = i + 1
    if start is None:
        fail_usage(f"{path}: no rank table (a markdown table whose header row starts with '| rank |')")

    files = {}
    i = start  # index of the line after the header row
    if i < len(lines) and re.fullmatch(r"\s*\|?[\s:|-]+\|?\s*", lines[i]):
        i += 1  # the | --- | separator row
    nrows = 0
    while i < len(lines) and lines[i].lstrip().startswith("|"):
        lineno = i + 1
        cells = split_row(lines[i])
        i += 1
        if len(cells) < 3:
            fail_usage(f"{path}:{lineno}: a rank row needs | rank | layer | files | owns |")
        if not re.fullmatch(r"-?\d+", cells[0]):
            fail_usage(f"{path}:{lineno}: rank '{cells[0]}' is not an integer")
        layer = Layer(int(cells[0]), cells[1], lineno)
        srcs = parse_files_cell(cells[2])
        if not srcs:
            fail_usage(f"{path}:{lineno}: layer '{layer.name}' lists no file")
        for src in srcs:
            if src in files:
                fail_usage(f"{path}:{lineno}: {src} is listed twice (also at line {files[src].line})")
            files[src] = layer
        nrows += 1
    if nrows == 0:
        fail_usage(f"{path}:{start}: the rank table has no rows")
    return files


# ---------------------------------------------------------------------------------------
# Symbols
# ---------------------------------------------------------------------------------------


class Obj:
    """One object file: an archive member or a loose .o."""

    def __init__(self, label, path, unit):
        self.label = label  # how messages name it: libuslab.a[cache.c.o] or the path
        self.path = path  # member name or file path, used to find its source
        self.unit = unit  # link unit: the archive's path, or "" for loose objects
        self.defined = {}  # symbol -> weak?
        self.undefined = set()
        self.src = None  # the source file in the rank table, or a name if unlisted
        self.listed = False


def is_archive(path):
    try:
        with open(path, "rb") as f:
            return f.read(8) in (b"!<arch>\n", b"!<thin>\n")
    except OSError as e:
        fail_usage(f"cannot read {path}: {e.strerror}")


def read_symbols(nm, path, objs):
    """Runs nm on one input and adds its object files to objs (keyed by label)."""
    archive = is_archive(path)
    cmd = nm + ["-A", "-P", path]
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except OSError as e:
        fail_usage(f"cannot run {nm[0]}: {e.strerror}")
    if p.returncode != 0:
        fail_usage(f"{shlex.join(cmd)} failed: {p.stderr.strip()}")
    unit = path if archive else ""
    for line in p.stdout.splitlines():
        # POSIX format: "<file>: <name> <type> [<value> <size>]"; for an archive member
        # "<archive>[<member>]: ...". The file name is known, so no guessing at colons.
        if not line.startswith(path):
            continue  # e.g. an empty archive member's "no symbols" notice
        rest = line[len(path):]
        member = None
        if archive:
            m = re.match(r"\[([^\]]*)\]: (.*)$", rest)
            if not m:
                continue
            member, rest = m.group(1), m.group(2)
        elif rest.startswith(": "):
            rest = rest[2:]
        else:
            continue
        fields = rest.split()
        if len(fields) < 2:
            continue
        name, typ = fields[0], fields[1]
        label = f"{path}[{member}]" if archive else path
        obj = objs.get(label)
        if obj is None:
            obj = objs[label] = Obj(label, member if archive else path, unit)
        if typ in DEFINED:
            obj.defined[name] = typ in WEAK_DEFINED
        elif typ in UNDEFINED:
            obj.undefined.add(name)
    # An object with no global symbol at all still counts (it must be listed).
    if not archive and path not in objs:
        objs[path] = Obj(path, path, unit)


def is_header(path):
    return path.endswith(HEADER_SUFFIXES)


def source_of(obj, table):
    """Finds obj's source in the rank table: cache.c.o -> src/cache.c (also cache.o)."""
    table = [s for s in table if not is_header(s)]
    path = obj.path
    for suffix in OBJ_SUFFIXES:
        if path.endswith(suffix):
            path = path[: -len(suffix)]
            break
    base = os.path.basename(path)
    cands = [s for s in table if os.path.basename(s) == base]
    if not cands:  # cache.o: compare without the source's extension
        cands = [s for s in table if os.path.splitext(os.path.basename(s))[0] == base]
    if len(cands) > 1:  # same name in two folders: the object's path decides
        norm = os.path.normpath(path)
        cands = [s for s in cands if norm.endswith(os.sep + os.path.splitext(s)[0])
                 or norm.endswith(os.sep + s)] or cands
    if len(cands) == 1:
        return cands[0], True
    if len(cands) > 1:
        fail_usage(f"{obj.label}: which source is it? {', '.join(sorted(cands))}")
    return base, False


# ---------------------------------------------------------------------------------------
# Includes
# ---------------------------------------------------------------------------------------


def find_root(design, table):
    """The nearest folder at or above DESIGN.md's that holds a file of the table, or None."""
    folder = os.path.dirname(os.path.abspath(design))
    while True:
        if any(os.path.isfile(os.path.join(folder, src)) for src in table):
            return folder
        parent = os.path.dirname(folder)
        if parent == folder:
            return None
        folder = parent


def read_includes(root, table):
    """Returns (files read, [(includer, line number, included)], unlisted headers found in
    the table's folders). Paths are relative to root, as in the table."""
    listed = sorted(src for src in table if os.path.isfile(os.path.join(root, src)))
    folders = sorted({os.path.dirname(src) for src in table})
    stray = []
    for folder in folders:
        try:
            names = sorted(os.listdir(os.path.join(root, folder)))
        except OSError:
            continue
        for name in names:
            path = os.path.normpath(os.path.join(folder, name))
            if is_header(name) and path not in table and os.path.isfile(os.path.join(root, path)):
                stray.append(path)
    includes = []
    for src in listed + stray:
        try:
            with open(os.path.join(root, src), encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError as e:
            fail_usage(f"cannot read {os.path.join(root, src)}: {e.strerror}")
        for lineno, line in enumerate(lines, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            target = os.path.normpath(os.path.join(os.path.dirname(src), m.group(1) or m.group(2)))
            if os.path.isfile(os.path.join(root, target)):
                includes.append((src, lineno, target))
    return listed + stray, includes, stray


# ---------------------------------------------------------------------------------------
# The graph
# ---------------------------------------------------------------------------------------


def build_graph(objs):
    """Returns {(from src, to src): set of symbols}."""
    # (unit, symbol) -> [(obj, weak)]
    defs = {}
    for obj in objs.values():
        for name, weak in obj.defined.items():
            defs.setdefault((obj.unit, name), []).append((obj, weak))

    edges = {}
    for obj in objs.values():
        for name in obj.undefined:
            cands = defs.get((obj.unit, name))
            if not cands:
                continue  # libc, libgcc, pthread, ...
            strong = [o for o, weak in cands if not weak]
            for target in {o.src for o in (strong or [o for o, _ in cands])}:
                if target != obj.src:
                    edges.setdefault((obj.src, target), set()).add(name)
    return edges


def strongly_connected(nodes, succ):
    """Tarjan's algorithm, iterative. Returns the components with more than one node."""
    index, low, on_stack, stack, comps = {}, {}, set(), [], []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(succ.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(succ.get(nxt, ()))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    n = stack.pop()
                    on_stack.discard(n)
                    comp.append(n)
                    if n == node:
                        break
                if len(comp) > 1:
                    comps.append(sorted(comp))
    return comps


def shortest_cycle(start, comp, succ):
    """A shortest cycle through start inside comp, as a list of files ending at start."""
    inside = set(comp)
    prev = {start: None}
    queue = [start]
    for node in queue:
        for nxt in succ.get(node, ()):
            if nxt == start:
                path = []
                while node is not None:
                    path.append(node)
                    node = prev[node]
                path.reverse()  # start ... node, then back to start
                return path + [start]
            if nxt in inside and nxt not in prev:
                prev[nxt] = node
                queue.append(nxt)
    return [start, start]


# ---------------------------------------------------------------------------------------


def main():
    ap = Parser(
        prog="check_layers.py", fromfile_prefix_chars="@",
        description="Check object files and includes against the layer order (rank table) of "
                    "design.md.",
        epilog="@FILE reads arguments from FILE, one per line.")
    ap.add_argument("--nm", default="nm", help="the nm program (default: nm); may hold options")
    ap.add_argument("--edges", action="store_true",
                    help="also print every edge of the file graph with its symbols, and every "
                         "include")
    ap.add_argument("--root", help="the folder the table's paths are relative to (default: the "
                                   "nearest at or above DESIGN.md's that holds one of them)")
    ap.add_argument("design", help="design.md with the rank table")
    ap.add_argument("objects", nargs="+", help="static archives and/or object files")
    args = ap.parse_args()

    nm = shlex.split(args.nm)
    if not nm:
        fail_usage("--nm is empty")
    table = parse_design(args.design)
    root = args.root if args.root is not None else find_root(args.design, table)
    if root is None or not os.path.isdir(root):
        fail_usage(f"no file of the rank table of {args.design} found"
                   f"{'' if root is None else ' under ' + root}; give --root")
    read_files, includes, stray_headers = read_includes(root, table)

    inputs = [p for arg in args.objects for p in arg.split(";") if p]
    if not inputs:
        fail_usage("no object file given")
    objs = {}
    for path in inputs:
        if not os.path.isfile(path):
            fail_usage(f"{path}: no such file")
        read_symbols(nm, path, objs)

    unlisted = []
    for obj in objs.values():
        obj.src, obj.listed = source_of(obj, table)
        if not obj.listed:
            unlisted.append(obj)

    edges = build_graph(objs)
    files = sorted({o.src for o in objs.values()})

    def rank(src):
        layer = table.get(src)
        return layer.rank if layer else None

    def describe(src):
        layer = table.get(src)
        return f"{src} (rank {layer.rank}, {layer.name})" if layer else f"{src} (not in the table)"

    if args.edges:
        for a, b in sorted(edges, key=lambda e: (rank(e[0]) or 0, e[0], rank(e[1]) or 0, e[1])):
            print(f"layers: edge {a} -> {b}: {', '.join(sorted(edges[(a, b)]))}")
        by_includer = {}
        for a, _, b in includes:
            by_includer.setdefault(a, []).append(b)
        for a in sorted(by_includer, key=lambda s: (rank(s) if rank(s) is not None else 99, s)):
            print(f"layers: include {a} -> {', '.join(sorted(set(by_includer[a])))}")

    problems = 0

    # (a) upward uses
    upward = [(a, b) for (a, b) in edges
              if rank(a) is not None and rank(b) is not None and rank(b) > rank(a)]
    upward.sort(key=lambda e: (rank(e[0]), e[0], rank(e[1]), e[1]))
    for a, b in upward:
        print(f"layers: {describe(a)} -> {describe(b)}: {', '.join(sorted(edges[(a, b)]))}")
    problems += len(upward)

    # (b) cycles
    succ = {}
    for a, b in sorted(edges):
        succ.setdefault(a, []).append(b)
    comps = strongly_connected(files, succ)
    for comp in sorted(comps, key=lambda c: (rank(c[0]) or 0, c)):
        start = min(comp, key=lambda s: (rank(s) if rank(s) is not None else 1 << 30, s))
        path = shortest_cycle(start, comp, succ)
        steps = " -> ".join(
            [path[0]] + [f"{b} ({', '.join(sorted(edges[(a, b)]))})" for a, b in zip(path, path[1:])])
        print(f"layers: cycle among {len(comp)} files: {', '.join(comp)}")
        print(f"layers:   for example {steps}")
    problems += len(comps)

    # (c) objects whose source is not in the table
    seen = set()
    for obj in sorted(unlisted, key=lambda o: o.label):
        if obj.src in seen:
            continue
        seen.add(obj.src)
        print(f"layers: {obj.label}: its source {obj.src} is not in the rank table of {args.design}")
    problems += len(seen)

    # (d) upward includes
    up_includes = [(a, n, b) for (a, n, b) in includes
                   if rank(a) is not None and rank(b) is not None and rank(b) > rank(a)]
    for a, n, b in up_includes:
        print(f"layers: {describe(a)} includes {describe(b)} (line {n})")
    problems += len(up_includes)

    # (e) headers not in the table
    unlisted_headers = sorted(set(stray_headers) | {b for (_, _, b) in includes if b not in table})
    for h in unlisted_headers:
        users = sorted({a for (a, _, b) in includes if b == h})
        more = f" and {len(users) - 3} more" if len(users) > 3 else ""
        print(f"layers: {h}: not in the rank table of {args.design}"
              + (f" (included by {', '.join(users[:3])}{more})" if users else ""))
    problems += len(unlisted_headers)
    unlisted = len(seen) + len(unlisted_headers)

    if problems:
        print(f"layers: FAILED: {len(upward)} upward "
              f"{'use' if len(upward) == 1 else 'uses'}, {len(comps)} "
              f"{'cycle' if len(comps) == 1 else 'cycles'}, {unlisted} unlisted "
              f"{'file' if unlisted == 1 else 'files'}, {len(up_includes)} upward "
              f"{'include' if len(up_includes) == 1 else 'includes'} ({len(files)} files, "
              f"{len(edges)} edges, {len(includes)} includes)")
        return 1
    print(f"layers: {len(files)} files, {len(edges)} edges, no upward call, no cycle")
    print(f"layers: {len(read_files)} sources and headers, {len(includes)} includes, "
          f"no upward include")
    return 0


if __name__ == "__main__":
    sys.exit(main())
