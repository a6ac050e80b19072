#!/usr/bin/env bash
# The demo: uvsched in a real server. Installs what is missing first
# (Debian 12, as root: compilers, meson, libuv1-dev, libhttp-parser-dev,
# wrk, curl), builds into build/, then:
#
# 1. starts examples/http-pipeline (an HTTP/1.1 server where each connection
#    owns a uvsched worker) in --mode pool, then in --mode loop (the same
#    work on the loop thread: the baseline), and drives each with wrk for
#    about 10 s: 64 connections, 16 pipelined requests per batch, a pool of
#    one thread per CPU. wrk's script checks that every answer carries the
#    id of its request, in order;
# 2. prints requests/s, latency p50 and p99, errors and answers out of
#    order for both modes;
# 3. runs the library's quick benchmark table (bench/uvsched-bench --smoke),
#    when bench/ is built.
#
# Exits 0 only if there were no errors and no answer out of order in either
# mode, both servers passed their own checks (order, overlap, leaks), and the
# bench table, when there is one, ran clean.
#
# Environment: UVS_DEMO_SECONDS (default 10) per mode, UVS_DEMO_CONNECTIONS
# (default 64), UVS_DEMO_ROUNDS (SHA-256 rounds per request, default 1000).

set -euo pipefail
cd "$(dirname "$0")"
# shellcheck source=scripts/setup.sh
. scripts/setup.sh

uvs_install_deps

seconds=${UVS_DEMO_SECONDS:-10}
connections=${UVS_DEMO_CONNECTIONS:-64}
rounds=${UVS_DEMO_ROUNDS:-1000}
cpus=$(nproc 2>/dev/null || echo 2)

# Keep the build quiet unless it fails.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
uvs_log "building build/ (http-pipeline, uvsched-bench)"
targets=(http-pipeline)
if ! { uvs_configure build -Dexamples=true &&
  meson compile -C build "${targets[@]}"; } >"$log" 2>&1; then
  cat "$log"
  uvs_die "the build failed"
fi
have_bench=0
if meson introspect build --targets 2>/dev/null |
  grep -q '"name": "uvsched-bench"'; then
  if meson compile -C build uvsched-bench >"$log" 2>&1; then
    have_bench=1
  else
    cat "$log"
    uvs_die "building uvsched-bench failed"
  fi
fi
rm -f "$log"
trap - EXIT

status=0
echo
uvs_log "http-pipeline under wrk: pool workers vs the loop thread" \
  "(${seconds}s per mode)"
python3 examples/http-pipeline/load.py \
  --server build/examples/http-pipeline/http-pipeline \
  --modes pool,loop --duration "$seconds" --connections "$connections" \
  --depth 16 --rounds "$rounds" --threads "$cpus" --wrk-threads "$cpus" ||
  status=1

echo
if [ "$have_bench" -eq 1 ]; then
  uvs_log "quick bench table: build/bench/uvsched-bench --smoke"
  build/bench/uvsched-bench --smoke || status=1
else
  uvs_log "bench/ is not part of this tree yet: no bench table"
fi

echo
if [ "$status" -eq 0 ]; then
  uvs_log "demo: ok (no errors, no answer out of order)"
else
  uvs_log "demo: FAILED"
fi
exit "$status"
