#!/usr/bin/env bash
# Verifies the hand-off models with spin (Debian package `spin`):
#
# - model/handoff.pml, a serial worker's idle/busy hand-off, with suspend
#   and resume interleaved: safety (assertions: one drain at a time, never
#   listed or parked twice, a parked worker suspended and SCHEDULED and a
#   suspended one never listed, no task started while suspended beyond the
#   allowed slack; end states: every suspend resumed, nothing left in an
#   idle worker) and the LTL property all_run under weak fairness;
# - model/handoff-wide.pml, a wide worker's hand-off to its lanes: safety
#   (assertions: at most WIDTH lanes and CAP drains, never listed twice,
#   work conservation whenever only long tasks run, and when everything
#   stopped nothing left queued) with the cap at the width and below it,
#   and all_run under weak fairness; then with suspend and resume
#   interleaved (a parked worker suspended and SCHEDULED and a suspended
#   one never listed, no lane posted for a suspended worker nor picking
#   while it is suspended), with fewer pushes to keep the search small.
#
# Then checks that each model can fail: each deliberately broken variant
# must produce an error.
#
# First, without spin, it checks that each model's header comment still
# points at real code: every "name() in src/FILE.c" (or .h) must be a
# function defined in that file, every other "name()" must be an inline or
# proctype of the model or a function defined in some src/*.c or src/*.h,
# and no line numbers may be cited (they went stale before; function names
# don't move).
#
# Usage: scripts/check-handoff.sh [-q]   (from anywhere; needs spin and cc)
# Prints the states explored per run; exits non-zero on any failure.

set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
quiet=0
[ "${1:-}" = "-q" ] && quiet=1
status=0

# defined NAME FILE: true if FILE has a definition of the function NAME: a
# line at column 0 that names it before "(", followed by "{" before any ";"
# (a prototype ends with ";").
defined() {
  awk -v name="$1" '
    !inside && $0 ~ ("^([A-Za-z_].*[^A-Za-z0-9_])?" name "[(]") { inside = 1 }
    inside {
      if (index($0, "{")) { found = 1; exit }
      if (index($0, ";")) inside = 0
    }
    END { exit !found }' "$2"
}

# check_refs MODEL: the header comment of MODEL names real code.
check_refs() {
  local model=$1 rel header refs_ok name file found f model_names
  rel=${model#"$here"/}
  # The header comment, as one line: from the top to the first "*/".
  header=$(awk '{ print } /\*\// { exit }' "$model" |
    sed -e 's|^ *\*/.*$||' -e 's|^ */\*||' -e 's|^ *\* \{0,1\}||' |
    tr '\n' ' ' | tr -s ' ')
  refs_ok=1
  if printf '%s\n' "$header" |
    grep -Eq '[Ll]ines? [0-9]|\.(c|h|pml):[0-9]|\([0-9]+-[0-9]+\)'; then
    echo "FAIL refs: the header of $rel cites line numbers; name functions"
    refs_ok=0
  fi
  # Functions given with their file.
  while read -r name file; do
    [ -n "$name" ] || continue
    if [ ! -f "$here/$file" ]; then
      echo "FAIL refs: $name() in $file: there is no $file"
      refs_ok=0
    elif ! defined "$name" "$here/$file"; then
      echo "FAIL refs: $name() in $file: no definition of $name in $file"
      refs_ok=0
    fi
  done < <(printf '%s\n' "$header" |
    grep -Eo '[A-Za-z_][A-Za-z0-9_]*\(\) in src/[A-Za-z0-9_./-]+\.[ch]' |
    sed 's/() in / /' | sort -u)
  # Every other name(): the model's own, or defined somewhere in src/.
  model_names=$(sed -n 's/^[[:space:]]*\(active[[:space:]]\{1,\}\)\{0,1\}\(inline\|proctype\)[[:space:]]\{1,\}\([A-Za-z_][A-Za-z0-9_]*\).*/\3/p' "$model")
  for name in $(printf '%s\n' "$header" | grep -Eo '[A-Za-z_][A-Za-z0-9_]*\(\)' |
    sed 's/()$//' | sort -u); do
    if printf '%s\n' "$model_names" | grep -x "$name" >/dev/null; then
      continue
    fi
    found=0
    for f in "$here"/src/*.c "$here"/src/*.h; do
      if defined "$name" "$f"; then
        found=1
        break
      fi
    done
    if [ "$found" -eq 0 ]; then
      echo "FAIL refs: $name() is named in the header of $rel," \
        "but neither the model nor src/ defines it"
      refs_ok=0
    fi
  done
  if [ "$refs_ok" -eq 1 ]; then
    echo "ok   refs: every function the header of $rel names is defined in src/"
  else
    status=1
  fi
}

check_refs "$here/model/handoff.pml"
check_refs "$here/model/handoff-wide.pml"

command -v spin >/dev/null 2>&1 || { echo "spin not found (apt-get install spin)"; exit 1; }
cc=${CC_PAN:-cc}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

# run NAME EXPECT SPIN_DEFINES CC_DEFINES PAN_ARGS: EXPECT is pass or fail.
run() {
  local name=$1 expect=$2 sdefs=$3 cdefs=$4 pargs=$5 out errors states
  rm -f pan pan.* ./*.trail
  # shellcheck disable=SC2086 # the defines are words on purpose
  spin $sdefs -a "$model" >spin.log 2>&1 || { cat spin.log; status=1; return; }
  # MEMLIM: a run that outgrows 2 GB stops, incomplete, and fails below.
  # shellcheck disable=SC2086
  "$cc" -O2 -w $cdefs -DVECTORSZ=4096 -DMEMLIM=2048 -o pan pan.c ||
    { status=1; return; }
  # shellcheck disable=SC2086
  out=$(./pan -m100000 $pargs 2>&1) || true
  errors=$(printf '%s\n' "$out" | sed -n 's/.*errors: \([0-9]*\).*/\1/p' | tail -n1)
  states=$(printf '%s\n' "$out" | sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' | tail -n1)
  if [ "$quiet" -eq 0 ]; then
    printf '%s\n' "$out" | grep -E 'violated|errors:|states, stored|total actual' |
      sed 's/^/    /' || true
  fi
  if [ -z "$errors" ]; then
    echo "FAIL $name: no result from pan"
    printf '%s\n' "$out"
    status=1
  elif [ "$expect" = pass ] &&
    printf '%s\n' "$out" | grep -Eq 'Search not completed|max search depth too small'; then
    echo "FAIL $name: the search did not cover every state"
    printf '%s\n' "$out"
    status=1
  elif [ "$expect" = pass ] && [ "$errors" -eq 0 ]; then
    echo "ok   $name: $states states, 0 errors"
  elif [ "$expect" = fail ] && [ "$errors" -ne 0 ]; then
    echo "ok   $name: error found as expected ($states states)"
  else
    echo "FAIL $name: expected $expect, pan reported $errors errors"
    printf '%s\n' "$out"
    status=1
  fi
}

spin -V | sed 's/^/# /'

# The serial worker: model/handoff.pml.
model="$here/model/handoff.pml"
# Safety: assertions and invalid end states (the Quiescent process). The
# first run has a suspender, the second none, the third two (nested); with
# budget 2 a drain runs batches of 2, where run_batch()'s look at the flag
# counts.
run "safety (2 producers x 2, 1 timer push, budget 1, 1 suspender)" pass \
  "" "-DNOCLAIM" ""
run "safety (3 producers x 1, 1 timer push, budget 2, no suspender)" pass \
  "-DNPROD=3 -DPUSHES=1 -DBUDGET=2 -DNSUSP=0" "-DNOCLAIM" ""
run "safety (2 producers x 1, 1 timer push, budget 2, 2 suspenders)" pass \
  "-DPUSHES=1 -DBUDGET=2 -DNSUSP=2" "-DNOCLAIM" ""
# Liveness: every task runs, under weak fairness.
run "ltl all_run (weak fairness, 2 producers x 2, no suspender)" pass \
  "-DNSUSP=0" "-DNFAIR=3" "-a -f"
run "ltl all_run (weak fairness, 2 producers x 1, budget 2, 1 suspender)" \
  pass "-DPUSHES=1 -DBUDGET=2" "-DNFAIR=3" "-a -f"
# The model can fail. The parking mutations run without the invariant of
# parking, so that what fails is what the bug does: a task never run, a
# parked worker listed again.
run "broken: after_drain without its second look" fail \
  "-DBROKEN_NO_RECHECK" "-DNOCLAIM" ""
run "broken: producer looks at the state before pushing" fail \
  "-DBROKEN_LOOK_FIRST" "-DNOCLAIM" ""
run "broken: a resume to 0 leaves the worker parked" fail \
  "-DBROKEN_RESUME_NO_UNPARK -DNO_PARK_INV" "-DNOCLAIM" ""
run "broken: parking stores IDLE" fail \
  "-DBROKEN_PARK_IDLE -DNO_PARK_INV" "-DNOCLAIM" ""
run "broken: parking stores IDLE (the invariant of parking)" fail \
  "-DBROKEN_PARK_IDLE" "-DNOCLAIM" ""
run "broken: a suspend leaves a listed worker listed" fail \
  "-DBROKEN_SUSPEND_NO_PARK" "-DNOCLAIM" ""
run "broken: turn fills a batch while suspended" fail \
  "-DBROKEN_TURN_NO_CHECK" "-DNOCLAIM" ""
run "broken: run_batch without its look at the flag" fail \
  "-DBROKEN_BATCH_NO_CHECK -DBUDGET=2" "-DNOCLAIM" ""
# Not a bug: the one task a suspend's slack allows must be reachable, or
# the check of the slack would be vacuous.
run "no slack: a task starts after a suspend returned" fail \
  "-DNO_SLACK" "-DNOCLAIM" ""

# A wide worker (2 lanes): model/handoff-wide.pml.
model="$here/model/handoff-wide.pml"
# Safety, work conservation included, with the cap at the width and below.
run "wide safety (2 producers x 2, 1 timer push, budget 1, cap 2)" pass \
  "" "-DNOCLAIM" ""
run "wide safety (2 producers x 2, 1 timer push, budget 2, cap 1)" pass \
  "-DBUDGET=2 -DCAP=1" "-DNOCLAIM" ""
# Liveness: every task runs, under weak fairness.
run "wide ltl all_run (weak fairness, 2 producers x 2, cap 2)" pass \
  "-DTIMERS=0" "-DNFAIR=3" "-a -f"
run "wide ltl all_run (weak fairness, 2 producers x 2, cap 1)" pass \
  "-DTIMERS=0 -DCAP=1" "-DNFAIR=3" "-a -f"
# The model can fail: these three lose a task, found with the
# work-conservation assertion left out; the last loses none, and only that
# assertion finds it.
run "wide broken: lane_work_done without its look at the queue" fail \
  "-DBROKEN_NO_LOOK -DNO_CONSERVE" "-DNOCLAIM" ""
run "wide broken: producer reads lanes_active before pushing" fail \
  "-DBROKEN_LANES_FIRST -DNO_CONSERVE" "-DNOCLAIM" ""
run "wide broken: serve_wide without re-listing after a push caught mid-way" \
  fail "-DBROKEN_NO_RELIST -DNO_CONSERVE" "-DNOCLAIM" ""
run "wide broken: one lane per serve_wide (work conservation)" fail \
  "-DBROKEN_ONE_LANE" "-DNOCLAIM" ""
# Suspend and resume on a wide worker.
run "wide safety (2 producers x 1, 1 timer push, budget 1, cap 2, 1 suspender)" \
  pass "-DPUSHES=1 -DNSUSP=1" "-DNOCLAIM" ""
run "wide safety (2 producers x 1, 1 timer push, budget 2, cap 1, 1 suspender)" \
  pass "-DPUSHES=1 -DBUDGET=2 -DCAP=1 -DNSUSP=1" "-DNOCLAIM" ""
run "wide safety (2 producers x 1, cap 2, 2 suspenders)" pass \
  "-DPUSHES=1 -DTIMERS=0 -DNSUSP=2" "-DNOCLAIM" ""
run "wide ltl all_run (weak fairness, 2 producers x 1, cap 2, 1 suspender)" \
  pass "-DPUSHES=1 -DTIMERS=0 -DNSUSP=1" "-DNFAIR=3" "-a -f"
run "wide broken: a resume to 0 leaves the worker parked" fail \
  "-DPUSHES=1 -DNSUSP=1 -DBROKEN_RESUME_NO_UNPARK -DNO_PARK_INV -DNO_CONSERVE" \
  "-DNOCLAIM" ""
run "wide broken: parking stores IDLE" fail \
  "-DPUSHES=1 -DNSUSP=1 -DBROKEN_PARK_IDLE -DNO_PARK_INV -DNO_CONSERVE" \
  "-DNOCLAIM" ""
run "wide broken: a suspend leaves a listed worker listed" fail \
  "-DPUSHES=1 -DNSUSP=1 -DBROKEN_SUSPEND_NO_PARK" "-DNOCLAIM" ""
# Reached only while a suspend leaves a listed worker listed.
run "wide broken: serve_wide posts lanes for a suspended worker" fail \
  "-DPUSHES=1 -DNSUSP=1 -DBROKEN_SUSPEND_NO_PARK -DNO_READY_INV -DBROKEN_SERVE_NO_PARK" \
  "-DNOCLAIM" ""
run "wide broken: a lane picks while suspended" fail \
  "-DPUSHES=1 -DNSUSP=1 -DBROKEN_LANE_NO_CHECK" "-DNOCLAIM" ""

exit "$status"
