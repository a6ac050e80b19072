#!/usr/bin/env python3
"""Checks that calls among src/*.c go one way (issue 10, docs/design.rst),
that src/ stays in pieces a reader can hold, and that it keeps no tick
counter.

Each file may call functions defined in files below it in the order that
src/internal.h lays out; no file may reach a file that reaches it back (a
circle), with no exception: a file that needs the loop thread rings its
doorbell (uvs__ring(), an inline of bell.h that calls only libuv).
Prints the file graph and fails on a circle.

A call made inside an inline function of a header counts as a call of
every file that uses that inline (directly, or through other inlines), so
a header can't hide a call that goes the wrong way. src/internal.h itself
holds declarations only: a function body there fails.

It also fails, with one line per offender:
- on a src/*.c or src/*.h file of more than MAX_FILE_LINES lines;
- on a function of src/*.c longer than MAX_FUNC_LINES lines, counted from
  the first line of its definition to its closing brace at column 0. The
  scan is line-based, for the libuv style of src/: a line at column 0 that
  starts with a lowercase letter and has a "(" opens a definition (its
  signature may go on over several lines), unless the signature ends with
  ";" (a prototype) or has "=" before its "(" (a variable); the next line
  that is exactly "}" closes it (a definition that none closes fails);
- on a tick counter in src/*.c or src/*.h (case-insensitive: rdtsc,
  __rdtsc, "tick count", ticks_per, cntvct): time comes from the clock
  (uv_hrtime(), the scheduler's clock), never from the CPU's counter.

Ends with the largest file and the longest function. Exits 1 on any
failure, 0 otherwise.
"""
import pathlib
import re
import sys

MAX_FILE_LINES = 600
MAX_FUNC_LINES = 80
TICK_COUNTER = re.compile(r"rdtsc|tick count|ticks_per|cntvct", re.I)

src = pathlib.Path(__file__).resolve().parent.parent / "src"
files = sorted(src.glob("*.c"))
failed = False
defined = {}
for f in files:
    for m in re.finditer(r"^[a-z][\w \*]*?\b(uvs__\w+)\(", f.read_text(), re.M):
        defined[m.group(1)] = f.name

# The inline functions of src/*.h, and the functions of src/*.c each one
# calls, directly or through other inlines.
INLINE = re.compile(r"^static inline [^;{]*?\b(uvs__\w+)\(", re.M)
inline_body = {}
for h in sorted(src.glob("*.h")):
    text = h.read_text()
    for m in INLINE.finditer(text):
        end = text.find("\n}\n", m.end())
        inline_body[m.group(1)] = text[m.end():end if end >= 0 else None]


def calls_in(text):
    """The uvs__ names that text calls."""
    return set(re.findall(r"\b(uvs__\w+)\(", text))


inline_calls = {}


def reach(name, seen=()):
    """The functions of src/*.c that the inline name calls, through other
    inlines too."""
    if name in inline_calls:
        return inline_calls[name]
    found = set()
    for callee in calls_in(inline_body[name]):
        if callee in defined:
            found.add(callee)
        elif callee in inline_body and callee not in seen and callee != name:
            found |= reach(callee, seen + (name,))
    inline_calls[name] = found
    return found


edges = {f.name: set() for f in files}
for f in files:
    text = f.read_text()
    called = calls_in(text)
    for name in called & set(inline_body):
        called |= reach(name)
    for name in called:
        home = defined.get(name)
        if home is not None and home != f.name:
            edges[f.name].add(home)

# internal.h declares; it defines no function.
internal = (src / "internal.h").read_text()
for m in re.finditer(r"^[a-z][^;{#]*\b(\w+)\([^;]*?\)\s*\{", internal, re.M):
    print("function in src/internal.h: %s(); internal.h holds declarations "
          "only (put it in the header of its file)" % m.group(1))
    failed = True

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
            return True
        if m not in state and visit(m):
            return True
    stack.pop()
    state[n] = 2
    return False


circle = False
for n in sorted(edges):
    if n not in state and visit(n):
        circle = True
        break
if circle:
    failed = True
else:
    print("no circle among %d files" % len(files))


def functions(lines):
    """Yields (name, first line, length in lines) of each definition; the
    length is None for one that no "}" at column 0 closes."""
    i = 0
    while i < len(lines):
        line = lines[i]
        if not re.match(r"[a-z]", line) or "(" not in line:
            i += 1
            continue
        if "=" in line[: line.index("(")]:
            i += 1  # a variable with an initializer
            continue
        # The signature: up to a line that opens the body ("{" at its end,
        # or alone on the next line) or ends a prototype (";").
        start = i
        sig = line.rstrip()
        while not sig.endswith(("{", ";")) and not (
                sig.endswith("}") and "{" in sig):
            i += 1
            if i == len(lines):
                return
            sig += " " + lines[i].strip()
        if sig.endswith(";"):
            i += 1
            continue
        head = re.sub(r"__attribute__\s*\(\(.*?\)\)", "", sig)
        m = re.search(r"(\w+)\s*\(", head)
        name = m.group(1) if m else "?"
        if sig.endswith("}"):
            yield name, start + 1, i - start + 1  # its body on one line
            i += 1
            continue
        i += 1
        while i < len(lines) and lines[i] != "}":
            i += 1
        if i == len(lines):
            yield name, start + 1, None  # no "}" at column 0 closes it
            return
        yield name, start + 1, i - start + 1
        i += 1


largest = ("-", 0)
longest = ("-", "-", 0)
for f in sorted(src.glob("*.c")) + sorted(src.glob("*.h")):
    lines = f.read_text().splitlines()
    if len(lines) > largest[1]:
        largest = (f.name, len(lines))
    if len(lines) > MAX_FILE_LINES:
        print("file too long: src/%s has %d lines (at most %d)"
              % (f.name, len(lines), MAX_FILE_LINES))
        failed = True
    for no, line in enumerate(lines, 1):
        if TICK_COUNTER.search(line):
            print("tick counter: src/%s:%d: %s" % (f.name, no, line.strip()))
            failed = True
    if f.suffix != ".c":
        continue
    for name, first, length in functions(lines):
        if length is None:
            print("function not closed: %s() in src/%s:%d has no \"}\" at "
                  "column 0 after it" % (name, f.name, first))
            failed = True
            continue
        if length > longest[2]:
            longest = (name, f.name, length)
        if length > MAX_FUNC_LINES:
            print("function too long: %s() in src/%s:%d has %d lines "
                  "(at most %d)" % (name, f.name, first, length,
                                    MAX_FUNC_LINES))
            failed = True

print("largest file: %s (%d lines); longest function: %s in %s (%d lines)"
      % (largest[0], largest[1], longest[0], longest[1], longest[2]))
sys.exit(1 if failed else 0)
