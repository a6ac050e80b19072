#!/usr/bin/env python3
"""Checks that calls among src/*.c go one way (issue 10, docs/design.rst).

Each file may call functions defined in files below it in the order that
src/internal.h lays out; no file may reach a file that reaches it back (a
circle), with no exception: a file that needs the loop thread rings its
doorbell (uvs__ring(), an inline of internal.h that calls only libuv).
Prints the file graph and exits 1 on a circle.
"""
import pathlib
import re
import sys

src = pathlib.Path(__file__).resolve().parent.parent / "src"
files = sorted(src.glob("*.c"))
defined = {}
for f in files:
    for m in re.finditer(r"^[a-z][\w \*]*?\b(uvs__\w+)\(", f.read_text(), re.M):
        defined[m.group(1)] = f.name

edges = {f.name: set() for f in files}
for f in files:
    text = f.read_text()
    for name, home in defined.items():
        if home == f.name:
            continue
        if re.search(r"\b%s\(" % re.escape(name), text):
            edges[f.name].add(home)

for name in sorted(edges):
    print("%-12s -> %s" % (name, " ".join(sorted(edges[name])) or "-"))

state = {}
stack = []


def visit(n):
    state[n] = 1
    stack.append(n)
    for m in sorted(edges[n]):
        if state.get(m) == 1:
            cycle = stack[stack.index(m):] + [m]
            print("circle: " + " -> ".join(cycle))
            sys.exit(1)
        if m not in state:
            visit(m)
    stack.pop()
    state[n] = 2


for n in sorted(edges):
    if n not in state:
        visit(n)
print("no circle among %d files" % len(files))
