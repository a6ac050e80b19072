#!/usr/bin/env python3
"""Check that the error codes the reference pages list are the ones the code
can return.

For every public function documented in docs/*.rst with a
``.. c:function::`` directive, the ``:returns:`` field of that entry names
some UV_E* codes (a field that says "as :c:func:`other`" also names every
code of ``other``'s field). The code side: the UV_E* codes that the
function's definition in src/ can return, found by walking the call graph
of src/*.c and src/*.h, roughly:

- a UV_E* token counts when it is a value that the function returns or
  stores: after ``return``, ``=`` (not ``==``, ``!=``, ``<=``, ``>=``),
  ``?`` or ``:``; a code passed as an argument (``uvs__drop(s, t,
  UV_ECANCELED)``, a done_cb status) or compared does not count;
- a call to another function defined in src/ counts when its value is
  returned or stored in the same way (``return f(...)``, ``rc = f(...)``),
  and then brings in every code of that function, transitively.

Calls into libuv are not followed: a code that comes only from libuv is
listed in LIBUV below for the functions that pass it on. The walk does not
follow constant arguments either: a code that the call graph reaches but
the function's own arguments rule out is listed in NOT_REACHED, with the
reason (for example uvs_schedule_after, which shares schedule() with
uvs_schedule but never takes its UV_EAGAIN path).

A :returns: field may name another function's codes with "as
:c:func:`other`" or "what :c:func:`other` returns"; "never returns
``UV_E...``" names a code the call does not return.

It prints every code a page lists that the code cannot return, and every
code the code can return that the page omits, and exits 1 if there is any.
Run it from anywhere: python3 scripts/check-docs-errors.py [-v].
"""

import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
DOCS = os.path.join(ROOT, "docs")
HEADER = os.path.join(ROOT, "include", "uvsched.h")

# Codes that reach a public function only from a libuv call, which this
# script does not follow: none today (every libuv failure is mapped to a
# code of uvsched's own in src/). Form: {"uvs_fn": {"UV_E..."}}.
LIBUV = {}

# Codes that the call graph reaches but that the function's own arguments
# rule out (the walk does not follow constants): each with the reason, to be
# checked again when the code named there changes.
NOT_REACHED = {
    ("uvs_schedule_after", "UV_EAGAIN"):
        "schedule() with delayed set takes accept_later(), never "
        "accept_now(): a delayed task meets the bounds when it falls due",
    ("uvs_schedule_after", "UV_ENOMEM"): "as UV_EAGAIN: accept_later()",
    ("uvs_schedule_every", "UV_EAGAIN"): "as for uvs_schedule_after",
    ("uvs_schedule_every", "UV_ENOMEM"): "as for uvs_schedule_after",
    ("uvs_post", "UV_EBUSY"):
        "accept_now() with UVS__T_POST never calls claim(): a post node "
        "is the library's own and is never busy",
    ("uvs_worker_init", "UV_ENOMEM"):
        "uvs__worker_init() with options NULL allocates neither a key "
        "block nor histograms",
}

CODE = re.compile(r"\bUV_E[A-Z0-9]+\b")
IDENT = re.compile(r"[A-Za-z_]\w*")
KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "do", "else"}


def strip_c(text):
    """Comments and string/char literals blanked; newlines kept."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
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
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (j - i - 1) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def closing(text, i, opening, close):
    """The index of the bracket that closes text[i] (an `opening`), or
    len(text) if none does."""
    d = 0
    for j in range(i, len(text)):
        if text[j] == opening:
            d += 1
        elif text[j] == close:
            d -= 1
            if d == 0:
                return j
    return len(text)


def functions(text):
    """Yields (name, body) for every function defined in C text."""
    text = strip_c(text)
    # Preprocessor lines out (macro bodies are not function definitions).
    text = re.sub(r"(?m)^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", "", text)
    depth = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif depth == 0 and c == "(":
            # Identifier just before "(", balanced parens, then "{".
            m = re.search(r"([A-Za-z_]\w*)\s*$", text[max(0, i - 200):i])
            j = closing(text, i, "(", ")")
            k = j + 1
            while k < n and text[k].isspace():
                k += 1
            if m and k < n and text[k] == "{" and m.group(1) not in KEYWORDS:
                e = closing(text, k, "{", "}")
                yield m.group(1), text[k:e + 1]
                i = e + 1
                continue
            i = j
        i += 1


# A value position: after return, a lone "=", "?" or ":" (and any opening
# parens or casts in between).
VALUE = r"(?:\breturn\b|(?<![=!<>+\-*/%&|^])=(?!=)|\?|(?<!:):(?!:))\s*(?:\(\s*)*"


def value_calls(body):
    """Functions whose value body returns or stores: the call in a value
    position and nothing after its closing paren but ";", ")" or ",":
    ``open = f(w) == 0`` compares f's value and does not count."""
    out = set()
    for m in re.finditer(VALUE + r"([A-Za-z_]\w*)\s*\(", body):
        j, d = m.end() - 1, 0
        while j < len(body):
            if body[j] == "(":
                d += 1
            elif body[j] == ")":
                d -= 1
                if d == 0:
                    break
            j += 1
        rest = body[j + 1:].lstrip()
        if rest[:1] in (";", ")", ","):
            out.add(m.group(1))
    return out


def code_graph():
    codes, calls = {}, {}
    paths = [os.path.join(SRC, f) for f in sorted(os.listdir(SRC))
             if f.endswith((".c", ".h"))]
    for path in paths:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for name, body in functions(text):
            codes.setdefault(name, set()).update(
                re.findall(VALUE + r"(UV_E[A-Z0-9]+)\b", body))
            calls.setdefault(name, set()).update(value_calls(body))
    for name in calls:
        calls[name] &= set(codes)
    return codes, calls


def reachable_codes(fn, codes, calls):
    seen, todo, out = set(), [fn], set()
    while todo:
        f = todo.pop()
        if f in seen or f not in codes:
            continue
        seen.add(f)
        out |= codes[f]
        out |= LIBUV.get(f, set())
        todo.extend(calls.get(f, ()))
    return {c for c in out if (fn, c) not in NOT_REACHED}


def public_functions():
    with open(HEADER, encoding="utf-8") as f:
        text = strip_c(f.read())
    return set(re.findall(r"UVS_EXTERN[^;(]*?\b(uvs_\w+)\s*\(", text))


def documented():
    """{fn: (page, line, codes named, functions referred to with 'as')}."""
    out = {}
    for page in sorted(os.listdir(DOCS)):
        if not page.endswith(".rst"):
            continue
        with open(os.path.join(DOCS, page), encoding="utf-8") as f:
            lines = f.read().split("\n")
        i = 0
        while i < len(lines):
            m = re.match(r"\.\. c:function::.*?\b(\w+)\s*\(", lines[i])
            if not m:
                i += 1
                continue
            fn, start = m.group(1), i + 1
            i += 1
            field, in_field = [], False
            while i < len(lines) and (lines[i] == "" or lines[i][0] == " "):
                s = lines[i].strip()
                if s.startswith(":returns:"):
                    in_field = True
                elif in_field and (s.startswith(":") or
                                   (s and len(lines[i]) - len(lines[i].lstrip()) <= 3)):
                    in_field = False
                if in_field:
                    field.append(lines[i])
                i += 1
            text = " ".join(field)
            # "never returns ``UV_EAGAIN``" names a code the call does not
            # return: not a listed one.
            text = re.sub(r"\bnever\s+returns?\s+``UV_E[A-Z0-9]+``", "",
                          text)
            out[fn] = (page, start, set(CODE.findall(text)),
                       re.findall(r"\b(?:as|what)\s+:c:func:`(\w+)`", text),
                       bool(field))
    return out


def main():
    verbose = "-v" in sys.argv[1:]
    codes, calls = code_graph()
    docs = documented()
    public = public_functions()
    problems = 0

    def doc_codes(fn, seen=()):
        page, line, named, inherits, _ = docs[fn]
        named = set(named)
        for other in inherits:
            if other in docs and other not in seen:
                named |= doc_codes(other, seen + (fn,))
        return named

    for fn in sorted(public - set(docs)):
        print(f"undocumented: {fn} has no .. c:function:: entry in docs/")
        problems += 1
    for fn in sorted(docs):
        page, line, _, _, has_field = docs[fn]
        where = f"docs/{page}:{line}: {fn}"
        if fn not in public:
            print(f"{where}: not a public function of include/uvsched.h")
            problems += 1
            continue
        if fn not in codes:
            print(f"{where}: no definition found in src/")
            problems += 1
            continue
        actual = reachable_codes(fn, codes, calls)
        listed = doc_codes(fn) if has_field else set()
        if not has_field and actual:
            print(f"{where}: no :returns: field, and the code can return "
                  f"{', '.join(sorted(actual))}")
            problems += 1
            continue
        for c in sorted(listed - actual):
            print(f"{where}: the page lists {c}, which the code cannot return")
            problems += 1
        for c in sorted(actual - listed):
            print(f"{where}: the code can return {c}, which the page omits")
            problems += 1
        if verbose:
            print(f"{where}: {', '.join(sorted(actual)) or '-'}")
    if problems:
        print(f"check-docs-errors: {problems} problem(s)")
        return 1
    print(f"check-docs-errors: {len(docs)} functions, every listed code "
          "matches the code")
    return 0


if __name__ == "__main__":
    sys.exit(main())
