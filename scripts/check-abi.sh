#!/usr/bin/env bash
# The ABI check (docs/abi.rst): fails if the shared libuvsched built from
# this tree is incompatible with a released ABI its SONAME claims to keep.
#
#   scripts/check-abi.sh [BUILDDIR]          check (default BUILDDIR:
#                                            build-abi/, set up here)
#   scripts/check-abi.sh --write [BUILDDIR]  write the build's ABI to
#                                            abi/libuvsched.so.N.abi, the
#                                            baseline of a release
#
# abi/libuvsched.so.N.abi is the ABI of the release that introduced SONAME
# libuvsched.so.N, as abidw (Debian: abigail-tools) writes it from a build
# with debug information. The build's SONAME is libuvsched.so.N:
# - with abi/libuvsched.so.N.abi committed, N is a released ABI: abidiff
#   must find no change but additions of functions (a changed struct size
#   or layout, a changed signature, a removed function all fail);
# - without it, N is an ABI not released yet: the newest baseline must be
#   N-1 (the SONAME goes up by one, not more), and abidiff's report against
#   it is printed, announced by the new SONAME.
# BUILDDIR is reused when it is configured; the library is built with
# -g (buildtype debugoptimized, the default) so that abidiff sees types.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/setup.sh
. scripts/setup.sh

write=0
if [ "${1:-}" = "--write" ]; then
  write=1
  shift
fi
build=${1:-build-abi}

command -v abidiff >/dev/null 2>&1 || uvs_install_packaging_deps

if [ ! -f "$build/meson-private/coredata.dat" ] || [ "$build" = build-abi ]; then
  uvs_configure "$build" --buildtype=debugoptimized -Dtests=false \
    -Dexamples=false -Dbench=false -Ddocs=disabled \
    >/dev/null
fi
meson compile -C "$build" uvsched:shared_library >/dev/null

lib=$(readlink -f "$build/libuvsched.so")
soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
case "$soname" in
libuvsched.so.[0-9]*) ;;
*) uvs_die "$lib: SONAME '$soname' is not libuvsched.so.N" ;;
esac
n=${soname#libuvsched.so.}
readelf -S "$lib" | grep '\.debug_info' >/dev/null ||
  uvs_die "$lib has no debug information: abidiff would see no types"

if [ "$write" -eq 1 ]; then
  abidw --no-corpus-path --no-comp-dir-path --short-locs \
    --out-file "abi/$soname.abi" "$lib"
  uvs_log "wrote abi/$soname.abi from $lib"
  exit 0
fi

# abidiff's exit status is a bit field: 1 error, 2 usage error, 4 some ABI
# change, 8 an incompatible one. Additions of functions are left out
# (--no-added-syms); every other change counts, since a program embeds
# uvsched's structs, private fields included.
diff_abi() {
  local rc=0
  abidiff --no-added-syms --suppressions abi/internal.abignore "$1" "$lib" ||
    rc=$?
  if [ $((rc & 3)) -ne 0 ]; then
    uvs_die "abidiff failed (exit $rc)"
  fi
  return "$rc"
}

if [ -f "abi/$soname.abi" ]; then
  if diff_abi "abi/$soname.abi"; then
    uvs_log "$soname: no incompatible change against abi/$soname.abi"
    exit 0
  fi
  echo
  echo "The ABI of $soname changed incompatibly since its release (above)."
  echo "Either undo the change, or announce it: raise uvsched_soversion in"
  echo "meson.build to $((n + 1)) (docs/abi.rst)."
  exit 1
fi

prev=""
for f in abi/libuvsched.so.*.abi; do
  [ -e "$f" ] || continue
  m=${f#abi/libuvsched.so.}
  m=${m%.abi}
  if [ "$m" -lt "$n" ] && { [ -z "$prev" ] || [ "$m" -gt "$prev" ]; }; then
    prev=$m
  fi
done
[ -n "$prev" ] || uvs_die "no baseline in abi/ for $soname or an older SONAME"
if [ "$prev" -ne $((n - 1)) ]; then
  uvs_die "$soname follows libuvsched.so.$prev: the SONAME goes up by one"
fi
rc=0
diff_abi "abi/libuvsched.so.$prev.abi" || rc=$?
if [ "$rc" -eq 0 ]; then
  uvs_log "$soname: no change against libuvsched.so.$prev, yet a new SONAME"
else
  uvs_log "$soname: the changes above against libuvsched.so.$prev are" \
    "announced by the new SONAME"
fi
uvs_log "when this ABI is released: scripts/check-abi.sh --write, and" \
  "commit abi/$soname.abi"
exit 0
