#!/usr/bin/env python3
"""Count the results of a `meson test` run from its testlog.json.

meson writes BUILDDIR/meson-logs/testlog.json with one JSON object per line,
one line per test() it ran, whose "result" is a name such as OK, FAIL, SKIP,
TIMEOUT, EXPECTEDFAIL, UNEXPECTEDPASS or ERROR. OK and EXPECTEDFAIL count as
passed, SKIP as skipped, and anything else (including a result this script
does not know, or a line it cannot read) as failed.

Usage:
  testlog.py BUILDDIR            list what did not pass, then end with the
                                 line "N passed, N failed[, N skipped]";
                                 exit 1 if anything failed or nothing ran
  testlog.py --counts BUILDDIR   print "PASSED FAILED SKIPPED" only
  testlog.py --failed BUILDDIR   for each test that did not pass, its name,
                                 result and the last lines of its output
"""

import json
import os
import sys

PASSED = {"OK", "EXPECTEDFAIL"}
SKIPPED = {"SKIP"}
# How much of a failed test's output --failed shows: enough for an assertion
# and the sanitizer report's first frames, short enough for a CI summary.
TAIL_LINES = 25


def count(builddir):
    path = os.path.join(builddir, "meson-logs", "testlog.json")
    passed, failed, skipped, bad = 0, 0, 0, []
    tails = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
    except OSError:
        return 0, 0, 0, []
    for line in lines:
        line = line.strip()
        if not line:
            continue
        try:
            entry = json.loads(line)
            result = str(entry.get("result", "ERROR"))
            name = str(entry.get("name", "?"))
            duration = float(entry.get("duration") or 0.0)
        except (ValueError, AttributeError):
            failed += 1
            bad.append(("UNREADABLE", line[:60], 0.0))
            continue
        if result in PASSED:
            passed += 1
        elif result in SKIPPED:
            skipped += 1
        else:
            failed += 1
            bad.append((result, name, duration))
            out = str(entry.get("stdout") or "").splitlines()
            tails[name] = out[-TAIL_LINES:]
    count.tails = tails
    return passed, failed, skipped, bad


def main(argv):
    if len(argv) == 3 and argv[1] == "--counts":
        passed, failed, skipped, _ = count(argv[2])
        print(passed, failed, skipped)
        return 0
    if len(argv) == 3 and argv[1] == "--failed":
        _, _, _, bad = count(argv[2])
        for result, name, duration in bad:
            print(f"{result} {name} ({duration:.2f}s)")
            for line in count.tails.get(name, []):
                print(f"    {line}")
        return 0
    if len(argv) != 2 or argv[1].startswith("-"):
        sys.stderr.write(__doc__)
        return 2
    passed, failed, skipped, bad = count(argv[1])
    for result, name, duration in bad:
        print(f"  {result:<14} {name} ({duration:.2f}s)")
    line = f"{passed} passed, {failed} failed"
    if skipped:
        line += f", {skipped} skipped"
    print(line)
    return 1 if failed or passed + failed == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
