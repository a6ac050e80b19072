#!/usr/bin/env bash
# Setup shared by ./demo.sh, ./test.sh and .ci/run.
#
# Source it from bash, then call:
#   uvs_install_deps            install the Debian packages that are missing
#                               for building, testing and the demo
#   uvs_install_docs_deps       the same for the Sphinx documentation
#   uvs_install_packaging_deps  the same for the ABI check and the Debian
#                               packages (scripts/check-abi.sh,
#                               scripts/check-debian.sh)
#   uvs_install_valgrind        the same for scripts/check-valgrind.sh
#   uvs_install_pkgs PKG...     install the given packages (apt-get)
#   uvs_configure DIR [OPT...]  `meson setup DIR OPT...`, reusing DIR with
#                               --reconfigure when it is already configured
# Run it directly to install what is missing and nothing else.
#
# Nothing is installed when everything is already there, so a second run does
# no apt work. It needs root (or sudo) only when something is missing.

UVS_LIBUV_MIN=1.44
UVS_MESON_MIN=1.0

uvs_log() {
  printf '==> %s\n' "$*"
}

uvs_die() {
  printf 'error: %s\n' "$*" >&2
  exit 1
}

# True if version $1 >= version $2 (dotted numbers).
uvs_version_ge() {
  [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]
}

uvs_apt_updated=0

uvs_install_pkgs() {
  local sudo=() log
  [ "$#" -gt 0 ] || return 0
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 ||
      uvs_die "missing packages ($*) and not root: run as root or install them"
    sudo=(sudo)
  fi
  command -v apt-get >/dev/null 2>&1 ||
    uvs_die "missing packages ($*) and no apt-get: install them by hand"
  uvs_log "installing with apt-get: $*"
  # apt's output goes to a log, shown only if something goes wrong.
  log=$(mktemp)
  if [ "$uvs_apt_updated" -eq 0 ]; then
    if ! DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get update -q \
      -o DPkg::Lock::Timeout=600 </dev/null >"$log" 2>&1; then
      cat "$log"
      rm -f "$log"
      uvs_die "apt-get update failed"
    fi
    uvs_apt_updated=1
  fi
  # Another apt run (unattended upgrades, a parallel job) may hold the dpkg
  # lock for a while: wait for it rather than fail.
  if ! DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -q \
    -o DPkg::Lock::Timeout=600 \
    --no-install-recommends "$@" </dev/null >"$log" 2>&1; then
    cat "$log"
    rm -f "$log"
    uvs_die "apt-get install $* failed"
  fi
  rm -f "$log"
}

# True if the Debian package $1 is installed.
uvs_deb_installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

# True if node's headers are where examples/node-addon/meson.build looks:
# the include/node directory beside node's bin/.
uvs_node_headers() {
  local h
  h=$(node -p 'require("path").resolve(process.execPath,
    "../../include/node/node_api.h")' 2>/dev/null) && [ -e "$h" ]
}

# Lists what is missing for building and testing with gcc, then installs it:
# the toolchain and libuv for the library; cmake for the CMake package
# files (meson's cmake module needs it) and the install suite's CMake
# consumer; libhttp-parser-dev and
# libssl-dev (libcrypto's SHA-256) for the HTTP example
# (examples/http-pipeline), curl, wrk and h2load (nghttp2-client) for its
# tests and the demo; node and its headers for the Node addon
# (examples/node-addon); libwebsockets-dev, its libuv plugin
# (libwebsockets-evlib-uv, which lws loads at run time) and
# python3-websockets for the WebSocket example (examples/websocket) and its
# tests.
uvs_install_deps() {
  local missing=() v
  if ! command -v gcc >/dev/null 2>&1; then
    missing+=(gcc libc6-dev)
  elif [ ! -e /usr/include/stdio.h ]; then
    missing+=(libc6-dev)
  fi
  command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
  command -v python3 >/dev/null 2>&1 || missing+=(python3)
  command -v ninja >/dev/null 2>&1 || missing+=(ninja-build)
  command -v cmake >/dev/null 2>&1 || missing+=(cmake)
  if ! command -v meson >/dev/null 2>&1; then
    missing+=(meson)
  else
    v=$(meson --version 2>/dev/null || echo 0)
    uvs_version_ge "$v" "$UVS_MESON_MIN" ||
      uvs_die "meson $v is older than $UVS_MESON_MIN"
  fi
  if ! command -v pkg-config >/dev/null 2>&1 ||
    ! pkg-config --atleast-version="$UVS_LIBUV_MIN" libuv 2>/dev/null; then
    missing+=(libuv1-dev)
  fi
  [ -e /usr/include/http_parser.h ] || missing+=(libhttp-parser-dev)
  [ -e /usr/include/openssl/evp.h ] || missing+=(libssl-dev)
  command -v curl >/dev/null 2>&1 || missing+=(curl)
  command -v wrk >/dev/null 2>&1 || missing+=(wrk)
  command -v h2load >/dev/null 2>&1 || missing+=(nghttp2-client)
  # Debian's nodejs ships no headers: libnode-dev has them. A node from
  # elsewhere (NodeSource's nodejs package ships them) is left alone: a
  # Debian -dev package for another node could conflict with it, and the
  # addon is only skipped when its headers are missing.
  if ! command -v node >/dev/null 2>&1; then
    missing+=(nodejs libnode-dev)
  elif ! uvs_node_headers; then
    if dpkg-query -W -f='${Version}' nodejs 2>/dev/null | grep -q dfsg; then
      missing+=(libnode-dev)
    else
      uvs_log "node has no headers beside it: examples/node-addon is skipped"
    fi
  fi
  uvs_deb_installed libwebsockets-dev || missing+=(libwebsockets-dev)
  uvs_deb_installed libwebsockets-evlib-uv || missing+=(libwebsockets-evlib-uv)
  uvs_deb_installed python3-websockets || missing+=(python3-websockets)
  if [ "${#missing[@]}" -eq 0 ]; then
    return 0
  fi
  uvs_install_pkgs "${missing[@]}"
  pkg-config --atleast-version="$UVS_LIBUV_MIN" libuv ||
    uvs_die "libuv >= $UVS_LIBUV_MIN not found after installing libuv1-dev"
}

# Sphinx for docs/, and MyST for the Markdown page it includes
# (docs/benchmarks.md).
uvs_install_docs_deps() {
  local missing=()
  command -v sphinx-build >/dev/null 2>&1 || missing+=(python3-sphinx)
  uvs_deb_installed python3-myst-parser || missing+=(python3-myst-parser)
  [ "${#missing[@]}" -eq 0 ] || uvs_install_pkgs "${missing[@]}"
}

# abidiff and abidw (abigail-tools) for scripts/check-abi.sh; debhelper,
# dpkg-dev, build-essential (which dpkg-checkbuilddeps requires) and
# lintian for scripts/check-debian.sh, with debian/control's
# Build-Depends (cmake, libuv1-dev, meson, ninja-build, pkg-config).
uvs_install_packaging_deps() {
  local missing=() p
  for p in abigail-tools build-essential debhelper dpkg-dev lintian cmake \
    libuv1-dev meson ninja-build pkg-config; do
    uvs_deb_installed "$p" || missing+=("$p")
  done
  [ "${#missing[@]}" -eq 0 ] || uvs_install_pkgs "${missing[@]}"
}

# valgrind (memcheck) for scripts/check-valgrind.sh.
uvs_install_valgrind() {
  command -v valgrind >/dev/null 2>&1 || uvs_install_pkgs valgrind
}

# meson setup DIR, or meson setup --reconfigure DIR when DIR is configured.
# The compiler of a configured DIR is kept; set CC before the first setup.
# --wrap-mode=nodownload: libuv must come from the system (libuv1-dev);
# never try to fetch the fallback subproject.
uvs_configure() {
  local dir=$1
  shift
  if [ -f "$dir/meson-private/coredata.dat" ]; then
    meson setup --reconfigure --wrap-mode=nodownload "$dir" "$@" && return 0
    uvs_log "reconfiguring $dir failed; setting it up again"
    meson setup --wipe --wrap-mode=nodownload "$dir" "$@"
  else
    meson setup --wrap-mode=nodownload "$dir" "$@"
  fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  uvs_install_deps
  uvs_log "all build dependencies are present"
fi
