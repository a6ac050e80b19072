#!/usr/bin/env bash
# Runs part of the unit suite, and the random stress program for a few
# seconds, under valgrind's memcheck, on a build without sanitizers: a read
# of memory that nothing set (which none of CI's sanitizers sees), an
# invalid access or a definite leak fails, as does a failed test.
#
# The part: the tests of the files below, which cover posts and tasks on
# wide workers with and without per-key bounds, hooks, suspends and the
# bugs of test-regress.c, about two minutes on two cores. Every other unit
# test ran clean under valgrind when this was written; some of them time
# what they check, which valgrind's slowness breaks, so they are left out.
#
# Usage: scripts/check-valgrind.sh [BUILDDIR] [TEST...]
#   BUILDDIR  default build/ (configured if it is not, and the two programs
#             built); one with a sanitizer is refused
#   TEST...   these unit tests instead of the files' (no stress run)
# Environment: UVS_VALGRIND_JOBS (tests at once, default 2),
# UVS_VALGRIND_STRESS_SECONDS (default 15; 0 skips the stress run).
# Prints one line per program; exits non-zero if any failed.

set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
# shellcheck source=scripts/setup.sh
. scripts/setup.sh

files=(test-regress.c test-keybound.c test-keys.c test-post.c test-hooks.c
  test-suspend.c)
dir=${1:-build}
[ "$#" -gt 0 ] && shift
jobs=${UVS_VALGRIND_JOBS:-2}
stress_secs=${UVS_VALGRIND_STRESS_SECONDS:-15}

uvs_install_valgrind
if [ ! -f "$dir/meson-private/coredata.dat" ]; then
  uvs_configure "$dir" -Dtests=true
fi
sanitize=$(python3 -c '
import json, sys
for o in json.load(open(sys.argv[1])):
    if o["name"] == "b_sanitize":
        print(o["value"])' "$dir/meson-info/intro-buildoptions.json")
if [ -n "$sanitize" ] && [ "$sanitize" != none ]; then
  uvs_die "$dir is built with b_sanitize=$sanitize: valgrind needs a plain build"
fi
meson compile -C "$dir" uvsched-tests uvsched-stress >/dev/null

logs="$dir/valgrind-logs"
rm -rf "$logs"
mkdir -p "$logs"
if [ "$#" -gt 0 ]; then
  tests=("$@")
  stress_secs=0
else
  mapfile -t tests < <(cd test && sed -n 's/^TEST_IMPL(\([a-z0-9_]*\)).*/\1/p' \
    "${files[@]}")
fi

# vg LOG PROGRAM ARG...: memcheck; 99 for a valgrind error, else the
# program's own status.
vg() {
  local log=$1
  shift
  timeout 600 valgrind --error-exitcode=99 --leak-check=full \
    --errors-for-leak-kinds=definite --track-origins=yes -q "$@" \
    >"$log" 2>&1
}

# one NAME: a unit test, one line out.
one() {
  local t0 rc=0
  t0=$(date +%s)
  vg "$logs/$1.log" "$dir/test/uvsched-tests" "$1" </dev/null || rc=$?
  if [ "$rc" -eq 0 ]; then
    echo "ok   $1 ($(($(date +%s) - t0)) s)"
  elif [ "$rc" -eq 99 ]; then
    echo "FAIL $1: valgrind reported errors ($logs/$1.log)"
  else
    echo "FAIL $1: the test failed, exit $rc ($logs/$1.log)"
  fi
}
export -f vg one
export dir logs

t0=$(date +%s)
printf '%s\n' "${tests[@]}" | xargs -P "$jobs" -I{} bash -c 'one "$@"' _ {} |
  tee "$logs/summary"
if [ "$stress_secs" != 0 ]; then
  rc=0
  vg "$logs/stress.log" "$dir/test/uvsched-stress" --seconds "$stress_secs" \
    --quiet </dev/null || rc=$?
  if [ "$rc" -eq 0 ]; then
    echo "ok   uvsched-stress --seconds $stress_secs" | tee -a "$logs/summary"
  else
    echo "FAIL uvsched-stress --seconds $stress_secs: exit $rc" \
      "($logs/stress.log)" | tee -a "$logs/summary"
  fi
fi
failed=$(grep -c '^FAIL' "$logs/summary" || true)
ran=$(grep -c '' "$logs/summary" || true)
sed -n 's/^FAIL .*(\(.*\.log\))$/\1/p' "$logs/summary" | while read -r f; do
  echo "---- $f"
  tail -n 40 "$f"
done
echo "check-valgrind: $ran programs under memcheck, $failed failing," \
  "$(($(date +%s) - t0)) s"
[ "$ran" -gt 0 ] && [ "$failed" -eq 0 ]
