#!/usr/bin/env python3
"""Checks which uvs_ symbols shared objects export (readelf --dyn-syms).

  check_symbols.py HEADER --hidden SO... --exported SO... [--no-libuv SO...]

--hidden SO: SO exports no symbol starting with uvs_ (while its full symbol
table still holds uvs_sched_init, as a local symbol: the code is there, only
not exported), and does export probe_version, so that an empty dynamic
table cannot pass.
--exported SO: SO exports every function that HEADER declares with
UVS_EXTERN, and no internal uvs__ symbol.
--no-libuv SO: SO has no libuv in its DT_NEEDED entries (an addon that
must use its host's libuv).
Prints one line per check; exits 1 if any failed, 77 (skip) if readelf is
missing.
"""

import argparse
import re
import shutil
import subprocess
import sys


def readelf(*args):
    out = subprocess.run(["readelf", "-W", *args], check=True,
                         capture_output=True, text=True).stdout
    return out


def symbols(path, dynamic):
    """Defined symbols of PATH: {name: (bind, visibility)}."""
    out = readelf("--dyn-syms" if dynamic else "--syms", path)
    syms = {}
    for line in out.splitlines():
        f = line.split()
        # Num: Value Size Type Bind Vis Ndx Name
        if len(f) < 8 or not f[0].endswith(":") or f[6] == "UND":
            continue
        syms[f[7].split("@")[0]] = (f[4], f[5])
    return syms


def needed(path):
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]",
                      readelf("--dynamic", path))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("header")
    ap.add_argument("--hidden", nargs="*", default=[])
    ap.add_argument("--exported", nargs="*", default=[])
    ap.add_argument("--no-libuv", nargs="*", default=[])
    a = ap.parse_args()
    if shutil.which("readelf") is None:
        print("readelf not found (binutils): skipped")
        return 77

    api = re.findall(r"UVS_EXTERN\s[^;(]*?\b(uvs_\w+)\s*\(",
                     open(a.header).read())
    if len(api) < 10:
        print(f"FAIL: found only {len(api)} UVS_EXTERN functions in "
              f"{a.header}")
        return 1
    failed = 0

    def check(ok, what):
        nonlocal failed
        print(("ok   " if ok else "FAIL ") + what)
        failed += not ok

    for so in a.hidden:
        dyn = symbols(so, True)
        leaked = sorted(n for n in dyn if n.startswith("uvs_"))
        check(not leaked, f"{so}: exports no uvs_ symbol"
              + (f" (exports {len(leaked)}: {', '.join(leaked[:5])} ...)"
                 if leaked else f" ({len(dyn)} dynamic symbols)"))
        check("probe_version" in dyn or "napi_register_module_v1" in dyn,
              f"{so}: exports its own entry point")
        full = symbols(so, False)
        check(full.get("uvs_sched_init", ("", ""))[0] == "LOCAL",
              f"{so}: holds uvs_sched_init as a local symbol")
    for so in a.exported:
        dyn = symbols(so, True)
        missing = [n for n in api if n not in dyn]
        check(not missing, f"{so}: exports all {len(api)} API functions"
              + (f" (missing: {', '.join(missing)})" if missing else ""))
        internal = sorted(n for n in dyn if n.startswith("uvs__"))
        check(not internal, f"{so}: exports no uvs__ internal"
              + (f" ({', '.join(internal[:5])})" if internal else ""))
    for so in a.no_libuv:
        libs = needed(so)
        uv = [n for n in libs if n.startswith("libuv")]
        check(not uv, f"{so}: needs no libuv of its own (NEEDED: "
              f"{', '.join(libs) or 'none'})")
    print(f"{failed} check(s) failed" if failed else "all checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
