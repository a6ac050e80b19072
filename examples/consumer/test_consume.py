#!/usr/bin/env python3
"""Suite 'install': build and run consumer.c the two ways users get uvsched.

  test_consume.py pkg-config|subproject --compiler CC --sanitize B_SANITIZE
                  --meson MESON --source-root DIR --build-root DIR

pkg-config: `meson install --destdir TMP` from the build root, then
  cc consumer.c $(pkg-config --cflags --libs uvsched) with PKG_CONFIG_PATH at
  the installed uvsched.pc and PKG_CONFIG_SYSROOT_DIR=TMP, and run it with
  LD_LIBRARY_PATH at the installed library (ldd must resolve it there).
subproject: copy project/meson.build and consumer.c to TMP, link
  TMP/subprojects/uvsched to the source root, configure with
  --force-fallback-for=uvsched, build, and run the consumer.
Both build with the compiler and sanitizers of the build under test.
Exit status: 0 passed, 1 failed, 77 skipped (pkg-config missing).
"""

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, **kw):
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, **kw)
    sys.stdout.write(p.stdout)
    if p.returncode != 0:
        raise SystemExit("FAILED: %s exited %d" % (cmd[0], p.returncode))
    return p.stdout


def sanitize_flags(b_sanitize):
    if b_sanitize in ("", "none"):
        return []
    return ["-fsanitize=" + b_sanitize]


def by_pkg_config(args, tmp):
    if shutil.which("pkg-config") is None:
        print("pkg-config is not installed")
        return 77
    dest = os.path.join(tmp, "dest")
    run([args.meson, "install", "-C", args.build_root, "--destdir", dest,
         "--no-rebuild", "--quiet"])
    pcs = glob.glob(os.path.join(dest, "**", "uvsched.pc"), recursive=True)
    libs = glob.glob(os.path.join(dest, "**", "libuvsched.so"),
                     recursive=True)
    if len(pcs) != 1 or len(libs) != 1:
        raise SystemExit("FAILED: installed uvsched.pc %r, libuvsched.so %r"
                         % (pcs, libs))
    for h in ("uvsched.h", os.path.join("uvsched", "private.h")):
        if not glob.glob(os.path.join(dest, "**", "include", h),
                         recursive=True):
            raise SystemExit("FAILED: %s was not installed" % h)
    env = dict(os.environ)
    env["PKG_CONFIG_PATH"] = os.path.dirname(pcs[0])
    env["PKG_CONFIG_SYSROOT_DIR"] = dest
    flags = run(["pkg-config", "--cflags", "--libs", "uvsched"],
                env=env).split()
    exe = os.path.join(tmp, "consumer")
    run([args.compiler, "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-Wall",
         "-Wextra", "-Werror"] + sanitize_flags(args.sanitize) +
        [os.path.join(HERE, "consumer.c"), "-o", exe] + flags)
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.path.dirname(libs[0])
    resolved = run(["ldd", exe], env=env)
    if os.path.realpath(libs[0]) not in resolved and dest not in resolved:
        raise SystemExit("FAILED: the consumer does not load the installed "
                         "libuvsched.so")
    run([exe], env=env)
    return 0


def by_subproject(args, tmp):
    proj = os.path.join(tmp, "consumer")
    os.makedirs(os.path.join(proj, "subprojects"))
    shutil.copy(os.path.join(HERE, "project", "meson.build"), proj)
    shutil.copy(os.path.join(HERE, "consumer.c"), proj)
    os.symlink(os.path.realpath(args.source_root),
               os.path.join(proj, "subprojects", "uvsched"))
    build = os.path.join(proj, "build")
    opts = ["--wrap-mode=nodownload", "--force-fallback-for=uvsched"]
    if args.sanitize not in ("", "none"):
        opts += ["-Db_sanitize=" + args.sanitize, "-Db_lundef=false"]
    env = dict(os.environ)
    env["CC"] = args.compiler
    out = run([args.meson, "setup", build, proj] + opts, env=env)
    if "Executing subproject uvsched" not in out:
        raise SystemExit("FAILED: uvsched was not taken as a subproject")
    run([args.meson, "compile", "-C", build], env=env)
    if not glob.glob(os.path.join(build, "subprojects", "uvsched",
                                  "libuvsched.so*")):
        raise SystemExit("FAILED: the subproject's library was not built")
    run([os.path.join(build, "consumer")])
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("how", choices=["pkg-config", "subproject"])
    ap.add_argument("--compiler", default="cc")
    ap.add_argument("--sanitize", default="none")
    ap.add_argument("--meson", default="meson")
    ap.add_argument("--source-root", required=True)
    ap.add_argument("--build-root", required=True)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="uvsched-consume-")
    try:
        if args.how == "pkg-config":
            rc = by_pkg_config(args, tmp)
        else:
            rc = by_subproject(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if rc == 0:
        print("%s: ok" % args.how)
    return rc


if __name__ == "__main__":
    sys.exit(main())
