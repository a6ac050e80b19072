#!/usr/bin/env bash
# Builds the Debian packages (debian/) from a copy of this tree, checks them
# with lintian, installs them with apt-get, and builds and runs
# examples/consumer/consumer.c against them three ways: with pkg-config,
# with CMake (uvsched::uvsched, the shared library) and with CMake and
# uvsched_USE_STATIC_LIBS (the static library). Removes the packages
# again at the end, so that nothing later finds this uvsched in /usr.
#
#   scripts/check-debian.sh [OUTDIR]
#
# OUTDIR (default: a temporary directory, removed at the end) keeps the
# .deb files. DEB_BUILD_OPTIONS is passed on (CI sets nocheck: the tests
# run in its other steps). Fails on a lintian error or warning. Needs root
# (or sudo) to install packages; Debian 12 or later.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/setup.sh
. scripts/setup.sh
src=$(pwd)

# What dpkg-buildpackage and lintian need, and debian/control's
# Build-Depends (dpkg-checkbuilddeps checks them below).
uvs_install_packaging_deps

keep=${1:-}
tmp=$(mktemp -d)
installed=0
cleanup() {
  local p pkgs=()
  if [ "$installed" -eq 1 ]; then
    for p in libuvsched-dev libuvsched2; do
      uvs_deb_installed "$p" && pkgs+=("$p")
    done
    if [ "${#pkgs[@]}" -ne 0 ]; then
      uvs_log "removing the packages again: ${pkgs[*]}"
      DEBIAN_FRONTEND=noninteractive apt-get purge -y -q "${pkgs[@]}" \
        </dev/null >"$tmp/purge.log" 2>&1 || {
        cat "$tmp/purge.log"
        echo "warning: could not remove ${pkgs[*]}" >&2
      }
    fi
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# A copy: dpkg-buildpackage writes debian/ files and obj-*/ into the tree it
# builds, and its .debs into the directory above.
version=$(dpkg-parsechangelog -l debian/changelog -S Version)
upstream=${version%-*}
copy="$tmp/uvsched-$upstream"
mkdir -p "$copy"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -z --cached --others --exclude-standard |
    xargs -0 cp -P --parents -t "$copy"
else
  tar -C "$src" --exclude='./build*' --exclude=./.git -cf - . |
    tar -C "$copy" -xf -
fi

section() { printf -- '---- %s\n' "$*"; }

section "dpkg-buildpackage -us -uc -b (uvsched $version)"
(cd "$copy" && dpkg-checkbuilddeps && dpkg-buildpackage -us -uc -b) \
  >"$tmp/build.log" 2>&1 || {
  tail -n 60 "$tmp/build.log"
  uvs_die "dpkg-buildpackage failed"
}
ls -1 "$tmp"/*.deb

section "lintian"
changes=$(ls "$tmp"/uvsched_*.changes)
lrc=0
lintian --fail-on error,warning "$changes" >"$tmp/lintian.log" 2>&1 || lrc=$?
# lintian says so when it runs as root; that is not about the packages.
grep -v 'running with root privileges' "$tmp/lintian.log" || true
[ "$lrc" -eq 0 ] || uvs_die "lintian found errors or warnings (exit $lrc)"
echo "lintian: no error, no warning"

section "apt-get install ./*.deb"
installed=1
uvs_install_pkgs "$tmp"/libuvsched2_*.deb "$tmp"/libuvsched-dev_*.deb
dpkg-query -W libuvsched2 libuvsched-dev

exe() { # NAME: runs the consumer NAME, which must print its line
  "$1" | grep "3 tasks in order" >/dev/null || uvs_die "$1 did not run as it should"
  echo "$1: ok"
}
needs_uvsched() { readelf -d "$1" | grep 'NEEDED.*libuvsched\.so' >/dev/null; }

section "pkg-config consumer"
# shellcheck disable=SC2046 # pkg-config's output is words on purpose
cc -std=c11 -D_POSIX_C_SOURCE=200809L -Wall -Wextra -Werror \
  examples/consumer/consumer.c -o "$tmp/consumer-pc" \
  $(pkg-config --cflags --libs uvsched)
needs_uvsched "$tmp/consumer-pc" || uvs_die "consumer-pc does not need libuvsched"
exe "$tmp/consumer-pc"

for kind in shared static; do
  section "CMake consumer ($kind)"
  proj="$tmp/cmake-$kind"
  mkdir -p "$proj"
  cp examples/consumer/cmake/CMakeLists.txt examples/consumer/consumer.c \
    "$proj"
  static=OFF
  [ "$kind" = static ] && static=ON
  cmake -S "$proj" -B "$proj/build" -G Ninja -Duvsched_USE_STATIC_LIBS=$static \
    -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" >"$proj/cmake.log" 2>&1 ||
    { cat "$proj/cmake.log"; uvs_die "cmake failed"; }
  cmake --build "$proj/build" >>"$proj/cmake.log" 2>&1 ||
    { cat "$proj/cmake.log"; uvs_die "the build failed"; }
  if [ "$kind" = shared ]; then
    needs_uvsched "$proj/build/consumer" ||
      uvs_die "the shared CMake consumer does not need libuvsched"
  elif needs_uvsched "$proj/build/consumer"; then
    uvs_die "the static CMake consumer needs libuvsched.so"
  fi
  exe "$proj/build/consumer"
done

if [ -n "$keep" ]; then
  mkdir -p "$keep"
  cp "$tmp"/*.deb "$keep"/
  uvs_log "the packages are in $keep"
fi
uvs_log "Debian packages: built, lintian clean, installed, and consumed"
