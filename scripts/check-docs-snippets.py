#!/usr/bin/env python3
"""Check that every C snippet of the documentation compiles.

The snippets: in docs/*.rst, every ``.. code-block::`` (or ``code``,
``sourcecode``) in C and every literal block (``::``) while the page's
highlight language is C (docs/conf.py makes it the default; a
``.. highlight::`` directive changes it for the rest of the page); in
docs/*.md and README.md, every fenced block marked ``c``. Included files
(``literalinclude``) are not snippets: they are built with the examples.

Each one is compiled on its own, with warnings as errors, as a reader would
compile it:

    CC -std=c11 -Wall -Wextra -Werror -D_POSIX_C_SOURCE=200809L -O2 -c

(``-D_POSIX_C_SOURCE`` because README.md and docs/install.rst say that
``uv.h`` needs it under ``-std=c11``; ``-O2`` because some of gcc's
warnings need the optimiser.)

A snippet that defines ``main`` is a whole program: it is compiled as it
stands, and must show every ``#include`` it needs.

Any other snippet is a fragment of a program. It is compiled after the
includes of the guide's first program (``<uvsched.h>``, ``<stdio.h>``,
``<stdlib.h>``); any other header it needs, the fragment must show. Then
comes its context: what the rest of the program would declare, and the
fragment uses without showing (its own types, variables and functions).
The context is an RST comment just before the snippet, which the HTML does
not show::

    .. snippet context:
       typedef struct conn_s conn_t;
       void conn_close(conn_t* c);

(in Markdown, ``<!-- snippet context: ... -->``). It declares, and holds no
``#include``: a header that the fragment needs is one the reader must see.
A fragment without a context of its own gets the names the guide's program
uses::

    uv_loop_t* loop; uvs_sched_t sched; uvs_worker_t worker; int rc;

The fragment's declarations and definitions at file level (preprocessor
lines, ``static``, ``typedef``, ``extern``, ``struct``/``union``/``enum``
definitions, function definitions and prototypes) are compiled at file
scope, in their order; its statements, in their order, in the body of a
function ``int f(void)`` after them (a ``return 1;`` there is fine). The
fragment's own ``static`` functions and variables count as used, as the
rest of its program would use them; an unused parameter, a variable set and
never read, a missing header or a wrong type is an error. ``#line``
directives make the compiler's messages name the page and its line.

A snippet that is not meant to compile (there is none today) says so, with
the reason, in an RST comment just before it::

    .. snippet not compiled: the reason

Run from anywhere: python3 scripts/check-docs-snippets.py [-v] [--keep DIR]
[--cc CC...] [-- CFLAGS...]. CC defaults to $CC or cc; the flags after
``--`` are added (the include directories of uvsched and libuv: by default
this tree's include/ and ``pkg-config --cflags libuv``). It prints each
snippet that fails with the compiler's messages and exits 1 if any did.
"""

import os
import re
import shlex
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror",
         "-D_POSIX_C_SOURCE=200809L", "-O2"]
PRELUDE = "#include <uvsched.h>\n#include <stdio.h>\n#include <stdlib.h>\n"
DEFAULT_CONTEXT = ("uv_loop_t* loop;\nuvs_sched_t sched;\n"
                   "uvs_worker_t worker;\nint rc;\n")
KEYWORDS = {"if", "else", "for", "while", "do", "switch", "return", "case",
            "goto", "break", "continue", "sizeof", "default"}


class Snippet:
    def __init__(self, path, line, text, context, skip):
        self.path = path        # relative to ROOT
        self.line = line        # the doc's line of the snippet's first line
        self.text = text        # dedented, lines joined with "\n"
        self.context = context  # None: the default context
        self.skip = skip        # the reason it is not compiled, or None


def dedent(lines):
    body = [s for s in lines if s.strip()]
    n = min((len(s) - len(s.lstrip()) for s in body), default=0)
    return [s[n:] for s in lines]


def comment_before(lines, i):
    """The RST comment that ends just before line i, at line i's indent
    (blank lines between allowed): (its first line's text, its body's
    lines), or None."""
    indent = len(lines[i]) - len(lines[i].lstrip())
    j = i - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    end = j
    while j >= 0 and (not lines[j].strip() or
                      len(lines[j]) - len(lines[j].lstrip()) > indent):
        j -= 1
    if j < 0:
        return None
    head = lines[j]
    if (len(head) - len(head.lstrip()) != indent or "::" in head or
            not re.match(r"\.\.\s+\S", head.strip())):
        return None
    return head.strip()[2:].strip(), dedent(lines[j + 1:end + 1])


def marks(head, body):
    """(context, skip) from a comment's first line and body."""
    if head.startswith("snippet context:"):
        rest = head[len("snippet context:"):].strip()
        return "\n".join(([rest] if rest else []) + body).strip() + "\n", None
    if head.startswith("snippet not compiled:"):
        reason = head[len("snippet not compiled:"):].strip()
        reason = " ".join([reason] + [s.strip() for s in body]).strip()
        return None, reason or "(no reason given)"
    return None, None


def rst_snippets(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        lines = f.read().split("\n")
    out = []
    lang = "c"
    i = 0
    while i < len(lines):
        s = lines[i]
        m = re.match(r"(\s*)\.\.\s+highlight::\s*(\S+)", s)
        if m:
            lang = m.group(2).lower()
            i += 1
            continue
        m = re.match(r"(\s*)\.\.\s+(?:code-block|code|sourcecode)::\s*(\S*)",
                     s)
        is_literal = (re.search(r"::\s*$", s) and
                      not re.match(r"\s*\.\.\s", s) and s.strip() != "")
        if not m and not is_literal:
            i += 1
            continue
        indent = len(s) - len(s.lstrip())
        block_lang = (m.group(2).lower() or lang) if m else lang
        j = i + 1
        if m:  # the directive's options
            while j < len(lines) and re.match(r"\s+:[\w-]+:", lines[j]):
                j += 1
        start = j
        while j < len(lines) and (not lines[j].strip() or
                                  len(lines[j]) - len(lines[j].lstrip()) > indent):
            j += 1
        while start < j and not lines[start].strip():
            start += 1
        end = j
        while end > start and not lines[end - 1].strip():
            end -= 1
        if block_lang == "c" and end > start:
            context, skip = None, None
            c = comment_before(lines, i)
            if c:
                context, skip = marks(*c)
            out.append(Snippet(path, start + 1,
                               "\n".join(dedent(lines[start:end])) + "\n",
                               context, skip))
        i = max(j, i + 1)
    return out


def md_snippets(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        text = f.read()
    lines = text.split("\n")
    out = []
    i = 0
    while i < len(lines):
        m = re.match(r"\s*(```+|~~~+)\s*\{?([\w+-]*)\}?\s*(\S*)", lines[i])
        if not m:
            i += 1
            continue
        fence, lang = m.group(1), m.group(2).lower()
        if lang == "code-block":
            lang = m.group(3).lower()
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        if lang == "c":
            context, skip = None, None
            before = "\n".join(lines[:i]).rstrip()
            last = before.rfind("<!--")
            c = re.fullmatch(r"<!--\s*(snippet (?:context|not compiled):)"
                             r"(.*)-->", before[last:], re.S)
            if last >= 0 and before.endswith("-->") and c:
                body = c.group(2).split("\n")
                context, skip = marks(c.group(1) + body[0],
                                      dedent(body[1:]))
            out.append(Snippet(path, i + 2, "\n".join(lines[i + 1:j]) + "\n",
                               context, skip))
        i = j + 1
    return out


def blank_c(text):
    """Comments and string/char literals blanked, same length and lines."""
    out = []
    i, n = 0, len(text)
    while i < n:
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text[i] in "\"'":
            q, j = text[i], i + 1
            while j < n and text[j] != q and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(q + " " * (min(j, n) - i - 1) + (q if j < n else ""))
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)[:n]


def items(text):
    """Splits a fragment into its top-level items: (offset, text, blanked),
    where an item ends after a ';' or a '}' at depth 0 (unless what follows
    continues it: else, ';', ','), and a preprocessor line is one item."""
    b = blank_c(text)
    out = []
    start, depth, i, n = 0, 0, 0, len(text)
    while i < n:
        c = b[i]
        if depth == 0 and not b[start:i].strip() and c == "#":
            j = i
            while True:
                j = b.find("\n", j)
                if j < 0 or not b[:j].rstrip(" \t").endswith("\\"):
                    break
                j += 1
            j = n if j < 0 else j
            out.append((start, text[start:j], b[start:j]))
            start = i = j
            continue
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
            if depth == 0 and c == "}":
                rest = b[i + 1:].lstrip()
                if not re.match(r"(else\b|;|,)", rest):
                    out.append((start, text[start:i + 1], b[start:i + 1]))
                    start = i + 1
        elif c == ";" and depth == 0:
            out.append((start, text[start:i + 1], b[start:i + 1]))
            start = i + 1
        i += 1
    if text[start:].strip():
        out.append((start, text[start:], b[start:]))
    return out


def at_file_scope(blanked):
    """Whether a top-level item is a declaration or definition that belongs
    at file scope, rather than a statement of a function body."""
    s = blanked.strip()
    if not s:
        return False
    if s.startswith("#"):
        return True
    first = re.match(r"[A-Za-z_]\w*", s)
    if not first or first.group(0) in KEYWORDS:
        return False
    if first.group(0) in ("static", "typedef", "extern"):
        return True
    if re.match(r"(struct|union|enum)\s+\w*\s*\{", s):
        return True
    # A function's definition or prototype: a type, then a name and "(".
    # (A call has no type before its name, an assignment has "=".)
    head = s.split("(", 1)[0]
    return ("=" not in head and
            re.fullmatch(r"(?:[A-Za-z_]\w*[\s*]+)+\**[A-Za-z_]\w*\s*", head)
            is not None)


def used_names(blanked):
    """The static functions and objects that a file-scope item defines:
    ([function], []) or ([], [object, ...])."""
    s = blanked.strip()
    if not s.startswith("static"):
        return [], []
    m = re.match(r"static\b[^=;{(]*?\b([A-Za-z_]\w*)\s*\([^;]*\)\s*\{",
                 s, re.S)
    if m:
        return [m.group(1)], []
    if "(" in s.split("=", 1)[0]:
        return [], []  # a prototype or a function pointer: left alone
    # The declarators, split at commas at depth 0; each one's name is the
    # last identifier before its initializer or its array's size.
    depth, part, parts = 0, "", []
    for c in s.rstrip(";"):
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        if c == "," and depth == 0:
            parts.append(part)
            part = ""
        else:
            part += c
    parts.append(part)
    objects = []
    for p in parts:
        names = re.findall(r"[A-Za-z_]\w*", p.split("=", 1)[0].split("[", 1)[0])
        if names:
            objects.append(names[-1])
    return [], objects


def build(sn):
    """The C file that compiles the snippet, and an error, if any."""
    path = sn.path
    is_program = re.search(r"^\s*int\s+main\s*\(", blank_c(sn.text), re.M)
    if is_program:
        return (sn.context or "") + f'#line {sn.line} "{path}"\n' + sn.text, None
    if sn.context and re.search(r"^\s*#\s*include", sn.context, re.M):
        return None, ("its context has an #include: a header the snippet "
                      "needs goes in the snippet, where the reader sees it")
    context = DEFAULT_CONTEXT if sn.context is None else sn.context
    top, body, funcs, objs = [], [], [], []
    statements = False
    for off, text, blanked in items(sn.text):
        line = sn.line + sn.text.count("\n", 0, off)
        chunk = f'#line {line} "{path}"\n{text}\n'
        if at_file_scope(blanked):
            top.append(chunk)
            f, o = used_names(blanked)
            funcs += f
            objs += o
        else:
            body.append(chunk)
            statements = statements or blanked.strip() != ""
    out = [PRELUDE, '#line 1 "context"\n', context]
    out += top
    if not statements:
        out += body  # comments only
    else:
        out.append('#line 1 "wrapper"\nint uvs_snippet_body(void);\n'
                   "int uvs_snippet_body(void) {\n")
        out += body
        out.append('#line 1 "wrapper"\nreturn 0;\n}\n')
    out.append('#line 1 "wrapper"\n')
    for k, f in enumerate(funcs):
        out.append(f"void (*const uvs_snippet_fn{k})(void) = "
                   f"(void (*)(void)) {f};\n")
    for k, o in enumerate(objs):
        out.append(f"const void* const uvs_snippet_obj{k} = &{o};\n")
    return "".join(out), None


def snippets():
    found = []
    docs = os.path.join(ROOT, "docs")
    for name in sorted(os.listdir(docs)):
        if name.endswith(".rst"):
            found += rst_snippets(os.path.join("docs", name))
        elif name.endswith(".md"):
            found += md_snippets(os.path.join("docs", name))
    found += md_snippets("README.md")
    return found


def default_cflags():
    flags = ["-I" + os.path.join(ROOT, "include")]
    try:
        r = subprocess.run(["pkg-config", "--cflags", "libuv"],
                           capture_output=True, text=True, check=False)
        if r.returncode == 0:
            flags += shlex.split(r.stdout)
    except OSError:
        pass
    return flags


def main(argv):
    verbose = keep = None
    cc, extra = None, None
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "-v":
            verbose = True
        elif a == "--keep":
            i += 1
            keep = argv[i]
        elif a == "--cc":
            cc = []
            while i + 1 < len(argv) and argv[i + 1] != "--":
                i += 1
                cc.append(argv[i])
        elif a == "--":
            extra = argv[i + 1:]
            break
        else:
            print(f"check-docs-snippets: unknown argument {a}")
            return 2
        i += 1
    cc = cc or shlex.split(os.environ.get("CC", "cc"))
    extra = default_cflags() if extra is None else extra

    found = snippets()
    failed = skipped = 0
    with tempfile.TemporaryDirectory() as tmp:
        out_dir = keep or tmp
        os.makedirs(out_dir, exist_ok=True)
        for n, sn in enumerate(found):
            where = f"{sn.path}:{sn.line}"
            if sn.skip:
                skipped += 1
                if verbose:
                    print(f"{where}: not compiled: {sn.skip}")
                continue
            source, error = build(sn)
            if error:
                print(f"{where}: {error}")
                failed += 1
                continue
            name = os.path.join(out_dir, "snippet%02d.c" % n)
            with open(name, "w", encoding="utf-8") as f:
                f.write(source)
            cmd = cc + FLAGS + extra + ["-c", name, "-o", name[:-2] + ".o"]
            r = subprocess.run(cmd, capture_output=True, text=True,
                               cwd=ROOT, check=False)
            if r.returncode != 0:
                failed += 1
                print(f"{where}: does not compile ({os.path.basename(name)})")
                print(r.stdout + r.stderr)
            elif verbose:
                print(f"{where}: ok")
    if failed:
        print(f"check-docs-snippets: {failed} of {len(found)} snippets "
              f"fail ({' '.join(cc + FLAGS)})")
        return 1
    print(f"check-docs-snippets: {len(found) - skipped} snippets compile"
          + (f", {skipped} marked not to" if skipped else "")
          + f" ({' '.join(cc + FLAGS)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
