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
# 2. prints the table a newcomer should read: requests/s, latency p50 and
#    p99, errors and answers out of order for both modes, and the servers'
#    own verdicts (the per-run lines and server logs only if a run failed);
# 3. runs the benchmark program's smoke run (bench/uvsched-bench --smoke),
#    when bench/ is built, as a correctness check only: its figures come
#    from tiny sizes and mean nothing, so they are not printed (only if it
#    fails);
# 4. says where the real benchmark figures come from (docs/benchmarks.md).
#
# Exits 0 only if there were no errors and no answer out of order in either
# mode, both servers passed their own checks (order, overlap, leaks), and the
# smoke run, when there is one, found every task run exactly once and in
# order.
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
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo
uvs_log "http-pipeline under wrk: pool workers vs the loop thread"
echo "    ${seconds} s per mode, ${connections} connections, 16 pipelined" \
  "requests per batch,"
echo "    /work?n=${rounds} (SHA-256 rounds per request), a pool of ${cpus}" \
  "threads; every answer's id and order checked"
echo
# The table, the pool/loop ratio and the verdict; the per-run lines repeat
# the table, so they are shown only when something failed, with the rest.
if python3 examples/http-pipeline/load.py \
  --server build/examples/http-pipeline/http-pipeline \
  --modes pool,loop --duration "$seconds" --connections "$connections" \
  --depth 16 --rounds "$rounds" --threads "$cpus" --wrk-threads "$cpus" \
  >"$log" 2>&1; then
  grep -Ev '^wrk: |^[a-z]+ +run [0-9]+: ' "$log" | sed '/./,$!d'
else
  status=1
  cat "$log"
fi

echo
if [ "$have_bench" -eq 1 ]; then
  # A correctness check: every scenario at tiny sizes, every task run
  # exactly once and in order. Its timings mean nothing at these sizes.
  if build/bench/uvsched-bench --smoke >"$log" 2>&1; then
    uvs_log "bench smoke run: ok (every task ran exactly once, in order)"
  else
    status=1
    cat "$log"
    uvs_log "bench smoke run: FAILED (build/bench/uvsched-bench --smoke)"
  fi
fi

echo
if [ "$status" -eq 0 ]; then
  uvs_log "demo: ok (no errors, no answer out of order)"
else
  uvs_log "demo: FAILED"
fi
echo
echo "Benchmark figures worth reading come from a release build and a full"
echo "run on a quiet machine, several minutes on 2 cores (docs/benchmarks.md):"
echo "    meson setup build-bench -Dbuildtype=release"
echo "    meson compile -C build-bench"
echo "    build-bench/bench/uvsched-bench"
exit "$status"
