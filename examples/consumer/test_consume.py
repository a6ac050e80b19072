#!/usr/bin/env python3
"""Suite 'install': build and run consumer.c the ways users get uvsched.

  test_consume.py pkg-config|prefix|cmake|subproject --compiler CC
                  --sanitize B_SANITIZE --meson MESON --source-root DIR
                  --build-root DIR

pkg-config: `meson install --destdir TMP` from the build root, then
  cc consumer.c $(pkg-config --cflags --libs uvsched) with PKG_CONFIG_PATH at
  the installed uvsched.pc and PKG_CONFIG_SYSROOT_DIR=TMP, and run it with
  LD_LIBRARY_PATH at the installed library (ldd must resolve it there).
prefix: the recipe for a prefix of one's own, run as it stands (the sh
  code block after the "install-recipe" comment in docs/install.rst): a copy of
  the source tree, HOME=TMP/home, consumer.c as app.c. So it configures a
  build with --prefix=$HOME/opt/uvsched, runs the real `meson install`
  (no --destdir), finds the libdir with `meson introspect`, builds with
  pkg-config and an rpath and without one, and runs both. Then checks that
  the files landed under the prefix and that the rpath build loads the
  installed libuvsched.so without LD_LIBRARY_PATH. This build is the
  recipe's own (the default compiler, no sanitizers), not the one under
  test.
cmake: a CMake project (cmake/CMakeLists.txt: find_package(uvsched 0.3
  CONFIG REQUIRED), target_link_libraries(... uvsched::uvsched)) built
  with Debian's cmake and ninja, twice: against `meson install --destdir
  TMP` of the build under test (the shared library; the program must load
  the installed one without LD_LIBRARY_PATH, through the rpath CMake
  records), and against a static-only build of the same sources installed
  the same way (the program must not need libuvsched.so at all). Both
  find uvsched through CMAKE_PREFIX_PATH at the prefix under TMP.
subproject: copy project/meson.build and consumer.c to TMP, link
  TMP/subprojects/uvsched to the source root, configure with
  --force-fallback-for=uvsched, build, and run the consumer.
Both build with the compiler and sanitizers of the build under test.
Exit status: 0 passed, 1 failed, 77 skipped (pkg-config or cmake
missing, or this build installs no CMake package: -Dcmake=disabled).
"""

import argparse
import glob
import json
import os
import re
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


RECIPE_MARKER = ".. install-recipe:"


def install_recipe(source_root):
    """The sh code block that follows the install-recipe comment in
    docs/install.rst, dedented."""
    path = os.path.join(source_root, "docs", "install.rst")
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for i, line in enumerate(lines):
        if line.startswith(RECIPE_MARKER):
            break
    else:
        raise SystemExit("FAILED: docs/install.rst has no %r comment"
                         % RECIPE_MARKER)
    rest = [line for line in lines[i + 1:]]
    while rest and not rest[0].strip():
        rest.pop(0)
    if not rest or rest[0].strip() != ".. code-block:: sh":
        raise SystemExit("FAILED: no sh code block right after the comment")
    block = []
    for line in rest[1:]:
        if line.strip() and not line.startswith("   "):
            break
        block.append(line[3:])
    while block and not block[0].strip():
        block.pop(0)
    if not block:
        raise SystemExit("FAILED: the recipe's code block is empty")
    return "\n".join(block).rstrip() + "\n"


def copy_source(source_root, dest):
    """The source tree without build directories and VCS data."""
    def ignore(d, names):
        if os.path.realpath(d) == os.path.realpath(source_root):
            return [n for n in names if n.startswith("build") or n == ".git"]
        return [n for n in names if n == "__pycache__"]
    shutil.copytree(source_root, dest, ignore=ignore, symlinks=True)


def by_prefix(args, tmp):
    if shutil.which("pkg-config") is None:
        print("pkg-config is not installed")
        return 77
    recipe = install_recipe(args.source_root)
    src = os.path.join(tmp, "uvsched")
    home = os.path.join(tmp, "home")
    os.makedirs(home)
    copy_source(args.source_root, src)
    shutil.copy(os.path.join(HERE, "consumer.c"), os.path.join(src, "app.c"))
    script = os.path.join(tmp, "recipe.sh")
    with open(script, "w", encoding="utf-8") as f:
        f.write("set -euxo pipefail\n" + recipe)
    env = dict(os.environ)
    env["HOME"] = home
    # Only what the recipe sets: no uvsched from elsewhere.
    for var in ("PKG_CONFIG_PATH", "PKG_CONFIG_SYSROOT_DIR",
                "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "DESTDIR"):
        env.pop(var, None)
    env["PATH"] = os.path.dirname(os.path.realpath(args.meson)) + \
        os.pathsep + env.get("PATH", "")
    out = run(["bash", script], cwd=src, env=env)
    if out.count("consumer: uvsched ") != 2:
        raise SystemExit("FAILED: the recipe did not run the consumer twice")

    prefix = os.path.join(home, "opt", "uvsched")
    pcs = glob.glob(os.path.join(prefix, "**", "uvsched.pc"), recursive=True)
    # The SONAME's link, libuvsched.so.N (docs/abi.rst).
    libs = [p for p in glob.glob(os.path.join(prefix, "**", "libuvsched.so.*"),
                                 recursive=True)
            if re.fullmatch(r"libuvsched\.so\.[0-9]+", os.path.basename(p))]
    if len(pcs) != 1 or len(libs) != 1 or not os.path.exists(
            os.path.join(prefix, "include", "uvsched.h")):
        raise SystemExit("FAILED: meson install did not put uvsched.pc %r, "
                         "libuvsched.so.N %r and uvsched.h under %s"
                         % (pcs, libs, prefix))
    # The rpath build finds the installed library by itself.
    resolved = run(["ldd", os.path.join(src, "app")], env=env)
    want = os.path.realpath(libs[0])
    for line in resolved.splitlines():
        if "libuvsched.so" in line:
            got = line.split("=>")[-1].split("(")[0].strip()
            if os.path.realpath(got) == want:
                break
            raise SystemExit("FAILED: app loads %s, not %s" % (got, want))
    else:
        raise SystemExit("FAILED: ldd does not list libuvsched.so for app")
    return 0


def build_options(meson, build_root):
    """{name: value} of a configured meson build's options."""
    out = subprocess.run([meson, "introspect", build_root,
                          "--buildoptions"], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, text=True, check=True).stdout
    return {o["name"]: o["value"] for o in json.loads(out)}


def cmake_consumer(args, prefix, tmp, name):
    """Configures, builds and runs the CMake consumer against the uvsched
    installed under PREFIX; returns the program's path."""
    proj = os.path.join(tmp, name)
    os.makedirs(proj)
    shutil.copy(os.path.join(HERE, "cmake", "CMakeLists.txt"), proj)
    shutil.copy(os.path.join(HERE, "consumer.c"), proj)
    build = os.path.join(proj, "build")
    env = dict(os.environ)
    env["CC"] = args.compiler
    # Only the prefix given: no uvsched from elsewhere.
    for var in ("PKG_CONFIG_PATH", "PKG_CONFIG_SYSROOT_DIR",
                "LD_LIBRARY_PATH", "CMAKE_PREFIX_PATH"):
        env.pop(var, None)
    cmd = [args.cmake, "-S", proj, "-B", build, "-G", "Ninja",
           "-DCMAKE_BUILD_TYPE=Debug",
           "-DCMAKE_C_FLAGS=" + " ".join(["-Wall", "-Wextra", "-Werror"] +
                                         sanitize_flags(args.sanitize))]
    if prefix:
        cmd.append("-DCMAKE_PREFIX_PATH=" + prefix)
    run(cmd, env=env)
    run([args.cmake, "--build", build], env=env)
    exe = os.path.join(build, "consumer")
    out = run([exe], env=env)
    if "3 tasks in order" not in out:
        raise SystemExit("FAILED: the CMake consumer did not run")
    return exe


def needed(exe):
    """The DT_NEEDED entries of EXE."""
    out = subprocess.run(["readelf", "-d", exe], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, text=True, check=True).stdout
    return [line.split("[")[1].split("]")[0] for line in out.splitlines()
            if "(NEEDED)" in line]


def by_cmake(args, tmp):
    if shutil.which("pkg-config") is None or shutil.which(args.cmake) is None:
        print("pkg-config or cmake is not installed")
        return 77
    opts = build_options(args.meson, args.build_root)
    if opts.get("cmake") == "disabled":
        print("this build installs no CMake package (-Dcmake=disabled)")
        return 77

    # The shared library of the build under test.
    dest = os.path.join(tmp, "dest")
    run([args.meson, "install", "-C", args.build_root, "--destdir", dest,
         "--no-rebuild", "--quiet"])
    if not glob.glob(os.path.join(dest, "**", "uvschedConfigVersion.cmake"),
                     recursive=True):
        print("no uvschedConfig.cmake was installed (cmake was not found "
              "when the build was configured)")
        return 77
    prefix = dest + opts["prefix"]
    exe = cmake_consumer(args, prefix, tmp, "shared")
    libs = glob.glob(os.path.join(dest, "**", "libuvsched.so.*.*"),
                     recursive=True)
    resolved = run(["ldd", exe])
    want = os.path.realpath(libs[0])
    for line in resolved.splitlines():
        if "libuvsched.so" in line:
            got = line.split("=>")[-1].split("(")[0].strip()
            if os.path.realpath(got) != want:
                raise SystemExit("FAILED: the consumer loads %s, not %s"
                                 % (got, want))
            break
    else:
        raise SystemExit("FAILED: the consumer does not need libuvsched.so")

    # A static-only build of the same sources, its own prefix.
    build = os.path.join(tmp, "build-static")
    sprefix = "/opt/uvsched-static"
    sopts = ["--wrap-mode=nodownload", "--prefix=" + sprefix,
             "-Ddefault_library=static", "-Dtests=false", "-Dexamples=false",
             "-Dbench=false", "-Ddocs=disabled", "-Dcmake=enabled"]
    if args.sanitize not in ("", "none"):
        sopts += ["-Db_sanitize=" + args.sanitize, "-Db_lundef=false"]
    env = dict(os.environ)
    env["CC"] = args.compiler
    run([args.meson, "setup", build, args.source_root] + sopts, env=env)
    run([args.meson, "compile", "-C", build], env=env)
    sdest = os.path.join(tmp, "dest-static")
    run([args.meson, "install", "-C", build, "--destdir", sdest,
         "--no-rebuild", "--quiet"])
    exe = cmake_consumer(args, sdest + sprefix, tmp, "static")
    if any(n.startswith("libuvsched") for n in needed(exe)):
        raise SystemExit("FAILED: the static consumer needs %r" % needed(exe))
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
    ap.add_argument("how",
                    choices=["pkg-config", "prefix", "cmake", "subproject"])
    ap.add_argument("--compiler", default="cc")
    ap.add_argument("--sanitize", default="none")
    ap.add_argument("--meson", default="meson")
    ap.add_argument("--cmake", default="cmake")
    ap.add_argument("--source-root", required=True)
    ap.add_argument("--build-root", required=True)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="uvsched-consume-")
    try:
        if args.how == "pkg-config":
            rc = by_pkg_config(args, tmp)
        elif args.how == "prefix":
            rc = by_prefix(args, tmp)
        elif args.how == "cmake":
            rc = by_cmake(args, tmp)
        else:
            rc = by_subproject(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if rc == 0:
        print("%s: ok" % args.how)
    return rc


if __name__ == "__main__":
    sys.exit(main())
