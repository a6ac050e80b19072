#!/usr/bin/env bash
# Build uvsched in build/ and run the demo (examples/demo.c): 200 simulated
# connections, each with its own ordered pool worker, fed from the loop
# thread and two foreign threads. Installs what is missing first (Debian 12,
# as root). Arguments go to the demo: ./demo.sh [connections [rounds]].
# Exits with the demo's status: 0 when every check it prints passed.

set -euo pipefail
cd "$(dirname "$0")"
# shellcheck source=scripts/setup.sh
. scripts/setup.sh

uvs_install_deps

# Keep the build quiet unless it fails.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
uvs_log "building build/examples/uvsched-demo"
if ! { uvs_configure build -Dexamples=true &&
  meson compile -C build uvsched-demo; } >"$log" 2>&1; then
  cat "$log"
  uvs_die "the build failed"
fi
rm -f "$log"
trap - EXIT

exec build/examples/uvsched-demo "$@"
