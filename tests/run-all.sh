#!/usr/bin/env bash
# The whole test suite, as ./bootstrap.sh test runs it: pytest (unit, golden, real-Slurm
# acceptance) and every molecule scenario, in lanes that run beside each other (molecule/ci-scenarios
# says which scenario runs in which lane), each timed, then the total. Ends with one summary
# line 'molecule: N passed, N failed'.
set -uo pipefail
cd "$(dirname "$0")/.."
# From ./bootstrap.sh's start when it runs this (set-up included), else from here.
all_start=${HAL_BOOTSTRAP_START:-$(date +%s)}

passed=0; failed=0; timings=(); failed_logs=()
# Each scenario's output is also kept, so that a failure's cause is printed again after the
# timings: CI shows a run's tail, and a scenario's first error is often far above it.
logs=$(mktemp -d -t hal-scenarios.XXXXXX)
# Every scenario runs a locally built node image (no registry): Debian 12's bare one and the
# one with the roles' packages on it, then Debian 13's bare one (the workstation scenario's),
# each built if missing, in the background from the start. $logs/images.rc says the Debian 12
# images are there (the lanes start then), $logs/trixie.rc that Debian 13's is too.
image_log=$(mktemp -t hal-image.XXXXXX)
start=$(date +%s)
( python -m hal_provision.sandbox.image >"$image_log" 2>&1; rc=$?
  echo "$rc" >"$logs/images.rc"
  [ "$rc" -eq 0 ] && python -m hal_provision.sandbox.image --bare --release trixie >>"$image_log" 2>&1; rc=$?
  echo "$rc" >"$logs/trixie.rc"
  echo "image_s=$(( $(date +%s) - start )) rc=$rc" >>"$image_log"; exit $rc ) &
image_pid=$!
# Slurm 24.11's Debian 13 root for the acceptance tests' second major, built if missing or
# outdated beside pytest too: its tests come last and wait for this build (conftest.py).
root_log=$(mktemp -t hal-slurmroot.XXXXXX)
( python -m hal_provision.sandbox.slurmroot >"$root_log" 2>&1; rc=$?
  echo "slurm_root_s=$(( $(date +%s) - start )) rc=$rc" >>"$root_log"; exit $rc ) &
root_pid=$!

# molecule/ci-scenarios: 'NAME LANE [trixie]' per line ('#' comments). The scenarios of one lane
# run one after another; the lanes run beside each other and beside pytest, each from when the
# node images are there (a scenario marked trixie also waits for Debian 13's image). No two
# scenarios share a host name, network, subnet or work directory
# (tests/unit/test_molecule_lanes.py). Every scenario prints its output as it goes, each line
# after "[NAME] ", and is timed.
run_scenario() {  # NAME LOG: one molecule test; its result line goes to $logs/NAME.result
  local scenario="$1" log="$2" start result
  start=$(date +%s)
  if molecule -c molecule/shared/config.yml test -s "$scenario" 2>&1 | tee "$log" | sed -u "s/^/[$scenario] /"; then
    result=passed
  else
    result=FAILED
  fi
  printf '%s %s\n' "$result" "$(( $(date +%s) - start ))" >"$logs/$scenario.result"
}
wait_for() {  # FILE: until it exists; its content (an exit status)
  while [ ! -f "$1" ]; do sleep 5; done
  cat "$1"
}
run_lane() {  # SCENARIO...: one after another, once the images they need are there
  local scenario needs
  for scenario in "$@"; do
    needs="$logs/images.rc"
    [[ " ${trixie[*]} " == *" $scenario "* ]] && needs="$logs/trixie.rc"
    if [ "$(wait_for "$logs/images.rc")" = 0 ] && [ "$(wait_for "$needs")" = 0 ]; then
      run_scenario "$scenario" "$logs/$scenario.log"
    else
      echo "no node images: not run" >"$logs/$scenario.log"; echo "FAILED 0" >"$logs/$scenario.result"
    fi
  done
}
declare -A lane_of=(); lanes=(); order=(); trixie=()
while read -r scenario lane extra; do
  [ -n "$scenario" ] || continue
  order+=("$scenario"); lane_of[$scenario]="${lane:-main}"
  [[ " ${lanes[*]} " == *" ${lane:-main} "* ]] || lanes+=("${lane:-main}")
  [ "${extra:-}" = trixie ] && trixie+=("$scenario")
done < <(sed 's/#.*//' molecule/ci-scenarios)
for scenario in "${order[@]}"; do
  [ -f "molecule/$scenario/molecule.yml" ] || { echo "no scenario molecule/$scenario"; failed=$((failed + 1)); }
done
lane_pids=()
for lane in "${lanes[@]}"; do
  members=()
  for scenario in "${order[@]}"; do
    [ "${lane_of[$scenario]}" = "$lane" ] && [ -f "molecule/$scenario/molecule.yml" ] && members+=("$scenario")
  done
  run_lane "${members[@]}" &
  lane_pids+=($!)
done

start=$(date +%s)
python -m pytest -ra "$@"
pytest_rc=$?
pytest_s=$(( $(date +%s) - start ))

echo "== slurm 24.11 root"
wait "$root_pid" || failed=$((failed + 1))
cat "$root_log"
root_s=$(sed -n 's/^slurm_root_s=\([0-9]*\) .*/\1/p' "$root_log")
rm -f "$root_log"

echo "== node images"
wait "$image_pid" || failed=$((failed + 1))
cat "$image_log"
image_s=$(sed -n 's/^image_s=\([0-9]*\) .*/\1/p' "$image_log")
rm -f "$image_log"

for pid in "${lane_pids[@]}"; do wait "$pid"; done
for scenario in "${order[@]}"; do
  [ -f "$logs/$scenario.result" ] || continue
  read -r result seconds <"$logs/$scenario.result"
  if [ "$result" = passed ]; then passed=$((passed + 1)); else failed=$((failed + 1)); failed_logs+=("$logs/$scenario.log"); fi
  timings+=("$(printf '%-16s %-7s %4ds (lane %s)' "$scenario" "$result" "$seconds" "${lane_of[$scenario]}")")
done
echo "== timings (the lanes and pytest beside each other)"
printf '%-16s %-7s %4ds\n' pytest "$([ "$pytest_rc" -eq 0 ] && echo passed || echo FAILED)" "$pytest_s"
printf '%-16s %-7s %4ds (beside pytest)\n' "node images" - "${image_s:-0}"
printf '%-16s %-7s %4ds (beside pytest)\n' "slurm root" - "${root_s:-0}"
printf '%s\n' "${timings[@]}"
total=$(( $(date +%s) - all_start ))
printf '%-16s %-7s %4ds (%dm%02ds)\n' total - "$total" $((total / 60)) $((total % 60))
for log in "${failed_logs[@]}"; do
  echo "== why $(basename "$log" .log) failed (its errors, then its last lines; whole output above)"
  grep -a -E -A6 'fatal: |FAILED|failed=[1-9]|ERROR|[Ee]rror: |Traceback|AssertionError' "$log" | cut -c1-400 | tail -n 60
  echo "-- last lines"
  tail -n 25 "$log" | cut -c1-400
done
if [ "${#failed_logs[@]}" -gt 0 ]; then  # what a machine-dependent failure is most often about
  echo "== this machine: $(nproc) CPUs, user $(id -un), HOME=${HOME:-unset}, $(uname -r)"
  df -h . /tmp /var/lib/containers 2>/dev/null | cut -c1-200
  free -m | head -2
  losetup -l 2>/dev/null | head -n 12
fi
rm -rf "$logs"
echo "molecule: $passed passed, $failed failed"
[ "$pytest_rc" -eq 0 ] && [ "$failed" -eq 0 ]
