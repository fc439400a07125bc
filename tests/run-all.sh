#!/usr/bin/env bash
# The whole test suite, as ./bootstrap.sh test runs it: pytest (unit, golden, real-Slurm
# acceptance), then every molecule scenario, one after another (container names are global),
# each timed, then the total. Ends with one summary line 'molecule: N passed, N failed'.
set -uo pipefail
cd "$(dirname "$0")/.."
# From ./bootstrap.sh's start when it runs this (set-up included), else from here.
all_start=${HAL_BOOTSTRAP_START:-$(date +%s)}

passed=0; failed=0; timings=(); failed_logs=()
# Each scenario's output is also kept, so that a failure's cause is printed again after the
# timings: CI shows a run's tail, and a scenario's first error is often far above it.
logs=$(mktemp -d -t hal-scenarios.XXXXXX)
# Every scenario runs a locally built node image (no registry): Debian 12's bare one and the
# one with the roles' packages on it, and Debian 13's bare one (the workstation scenario's),
# built if missing in the background while pytest runs (mostly downloads and dpkg beside
# pytest's CPU work); their output follows pytest's.
image_log=$(mktemp -t hal-image.XXXXXX)
start=$(date +%s)
( python -m hal_provision.sandbox.image >"$image_log" 2>&1 \
    && python -m hal_provision.sandbox.image --bare --release trixie >>"$image_log" 2>&1; rc=$?
  echo "image_s=$(( $(date +%s) - start )) rc=$rc" >>"$image_log"; exit $rc ) &
image_pid=$!
# Slurm 24.11's Debian 13 root for the acceptance tests' second major, built if missing or
# outdated beside pytest too: its tests come last and wait for this build (conftest.py).
root_log=$(mktemp -t hal-slurmroot.XXXXXX)
( python -m hal_provision.sandbox.slurmroot >"$root_log" 2>&1; rc=$?
  echo "slurm_root_s=$(( $(date +%s) - start )) rc=$rc" >>"$root_log"; exit $rc ) &
root_pid=$!

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

# The scenarios CI runs, in order: molecule/ci-scenarios ('#' comments).
for scenario in $(sed 's/#.*//' molecule/ci-scenarios); do
  dir="molecule/$scenario"
  [ -f "$dir/molecule.yml" ] || { echo "no scenario $dir"; failed=$((failed + 1)); continue; }
  echo "== molecule test -s $scenario"
  start=$(date +%s)
  log="$logs/$scenario.log"
  if molecule -c molecule/shared/config.yml test -s "$scenario" 2>&1 | tee "$log"; then
    passed=$((passed + 1)); result=passed
  else
    failed=$((failed + 1)); result=FAILED; failed_logs+=("$log")
  fi
  timings+=("$(printf '%-16s %-7s %4ds' "$scenario" "$result" "$(( $(date +%s) - start ))")")
done
echo "== timings"
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
