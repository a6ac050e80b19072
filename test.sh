#!/usr/bin/env bash
# Build uvsched in build/ with warnings as errors and run every test suite
# (unit, stress, examples). Installs what is missing first (Debian 12, as
# root). Extra arguments go to `meson test`, e.g. ./test.sh --suite unit.
# Exits non-zero if a test failed or if no test ran.

set -euo pipefail
cd "$(dirname "$0")"
# shellcheck source=scripts/setup.sh
. scripts/setup.sh

uvs_install_deps
uvs_configure build -Dwerror=true -Dtests=true -Dexamples=true
meson compile -C build

# A stale log from an earlier run must not be counted.
rm -f build/meson-logs/testlog.json
status=0
meson test -C build --print-errorlogs "$@" </dev/null || status=$?

echo
uvs_log "results (build/meson-logs/testlog.json)"
python3 scripts/testlog.py build || status=1
exit "$status"
