#!/usr/bin/env bash
# The whole test suite, as ./bootstrap.sh test runs it: pytest (the unit tests, and beside them
# the real-Slurm acceptance tests; arguments given: one pytest with them) and, from when the node
# images are there, every molecule scenario in lanes beside it (molecule/ci-scenarios says which
# lane each runs in), each timed, then the total. Ends with one summary line 'molecule: N passed, N failed'.
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
# pytest's CPU work, which is niced); their output follows pytest's. In order: Debian 12's images
# (then the lanes start), the wheelhouse of the HAL sandbox (hal_provision.sandbox.prefill: what
# `default`'s `up` would otherwise fetch and build; `up` waits on its lock when it comes first),
# Debian 13's image (which only the workstation scenario waits for).
# Low priority, for everything beside the first lane (pytest, the Slurm root, the side lanes):
# a session of its own whose autogroup is niced (with the kernel's autogroups, on by default,
# nice alone counts only within a session), nice 10 for its processes, and its containers
# (cgroups of their own, which neither reaches) started with an eighth of the default CPU
# weight (HAL_CONTAINER_CPU_SHARES: the sandbox's `up` and molecule's create.yml pass it on).
NICE=(setsid -w sh -c 'echo 10 >/proc/self/autogroup 2>/dev/null; export HAL_CONTAINER_CPU_SHARES=128; exec nice -n 10 "$@"' low-priority)
image_log=$(mktemp -t hal-image.XXXXXX)
start=$(date +%s)
( python -m hal_provision.sandbox.image >"$image_log" 2>&1; rc=$?
  echo "image_s=$(( $(date +%s) - start )) rc=$rc" >>"$image_log"; echo "$rc" >"$logs/images.rc"
  if [ "$rc" = 0 ]; then
    python -m hal_provision.sandbox.prefill >>"$image_log" 2>&1; prc=$?
    echo "wheelhouse_s=$(( $(date +%s) - start )) rc=$prc" >>"$image_log"
  fi
  python -m hal_provision.sandbox.image --bare --release trixie >>"$image_log" 2>&1; trc=$?
  echo "trixie_s=$(( $(date +%s) - start )) rc=$trc" >>"$image_log"; echo "$trc" >"$logs/trixie.rc"
  [ "$rc" = 0 ] && [ "$trc" = 0 ] ) &
image_pid=$!
# Slurm 24.11's Debian 13 root for the acceptance tests' second major, built if missing or
# outdated beside pytest too, niced like it: its tests wait for this build (conftest.py).
root_log=$(mktemp -t hal-slurmroot.XXXXXX)
( "${NICE[@]}" python -m hal_provision.sandbox.slurmroot >"$root_log" 2>&1; rc=$?
  echo "slurm_root_s=$(( $(date +%s) - start )) rc=$rc" >>"$root_log"; exit $rc ) &
root_pid=$!

# The scenarios CI runs: molecule/ci-scenarios ('#' comments), each line a scenario and the lane
# it runs in. The untagged ones are the first lane: the longest (`default`), which decides the
# run's length, so it runs at the machine's normal priority from when the node images are there.
# Every other tag names a lane that runs beside it, niced (as pytest is), from the same moment:
# those fill the time the first lane waits for its daemons (about half of it: a 2-core machine
# was half idle behind two lanes) without slowing it. Within a lane the scenarios run one after
# another, in the file's order; their containers, networks, subnets and work directories are
# apart from every other scenario's (tests/unit/molecule/test_molecule_lanes.py). Every scenario prints
# its output as it goes, each line after "[NAME] ". Each is timed.
run_scenario() {  # NAME LOG PREFIX [NICE...]: one molecule test, its output printed as it goes
  # (each line after PREFIX) and kept in LOG; its result line goes to $logs/NAME.result
  local scenario="$1" log="$2" prefix="$3" start result
  shift 3
  start=$(date +%s)
  if "$@" molecule -c molecule/shared/config.yml test -s "$scenario" 2>&1 | tee "$log" | sed -u "s/^/$prefix/"; then
    result=passed
  else
    result=FAILED
  fi
  printf '%s %s\n' "$result" "$(( $(date +%s) - start ))" >"$logs/$scenario.result"
}
scenarios=(); lane_names=(); declare -A lane_of=()
while read -r scenario tag; do
  [ -n "$scenario" ] || continue
  scenarios+=("$scenario"); lane_of[$scenario]=${tag:-first}
  [[ " ${lane_names[*]} " == *" ${tag:-first} "* ]] || lane_names+=("${tag:-first}")
done < <(sed 's/#.*//' molecule/ci-scenarios)
for scenario in "${scenarios[@]}"; do
  [ -f "molecule/$scenario/molecule.yml" ] || { echo "no scenario molecule/$scenario"; failed=$((failed + 1)); }
done
# A scenario whose nodes run Debian 13 waits for that image too: its create.yml names trixie,
# or the description it brings up (a tests/data/clusters file its create.yml names) says
# `os: debian13`.
images_for() {  # SCENARIO: the rc files of the images it needs
  echo "$logs/images.rc"
  local described
  described=$(grep -o 'tests/data/clusters/[A-Za-z0-9_.-]*\.yml' "molecule/$1/create.yml" 2>/dev/null)
  if grep -qs trixie "molecule/$1/create.yml" || grep -qsE '^ +os: +debian13\b' $described /dev/null; then
    echo "$logs/trixie.rc"
  fi
}
lane_pids=()
for lane in "${lane_names[@]}"; do
  ( nice_cmd=(); [ "$lane" = first ] || nice_cmd=("${NICE[@]}")
    for scenario in "${scenarios[@]}"; do
      [ "${lane_of[$scenario]}" = "$lane" ] && [ -f "molecule/$scenario/molecule.yml" ] || continue
      ok=yes
      for rc_file in $(images_for "$scenario"); do
        while [ ! -f "$rc_file" ]; do sleep 5; done
        [ "$(cat "$rc_file")" = 0 ] || ok=""
      done
      if [ -n "$ok" ]; then run_scenario "$scenario" "$logs/$scenario.log" "[$scenario] " "${nice_cmd[@]}"
      else echo "no node images: not run" >"$logs/$scenario.log"; echo "FAILED 0" >"$logs/$scenario.result"; fi
    done ) &
  lane_pids+=($!)
done
start=$(date +%s)
if [ "$#" -gt 0 ]; then
  "${NICE[@]}" python -m pytest -ra "$@"
  pytest_rc=$?
  parts=""
else
  # The unit tests (CPU-bound) and the acceptance tests (real Slurm daemons, MariaDB, InfluxDB,
  # JupyterHub: mostly waiting for them) side by side, each its own pytest, both niced beside
  # the first lane; the acceptance tests' lines after "[acceptance] ". Their daemons run in
  # private namespaces and scratch directories (tests/acceptance/slurm_harness.py), apart from
  # the unit tests'. Each prints its slowest tests (what CI's time budget is spent on).
  ( acc_start=$(date +%s)
    "${NICE[@]}" python -m pytest -ra --durations=10 tests/acceptance 2>&1 | sed -u "s/^/[acceptance] /"; acc_rc=${PIPESTATUS[0]}
    echo "$acc_rc $(( $(date +%s) - acc_start ))" >"$logs/acceptance.result" ) &
  acc_pid=$!
  "${NICE[@]}" python -m pytest -ra --durations=15 tests/unit
  unit_rc=$?
  unit_s=$(( $(date +%s) - start ))
  wait "$acc_pid"
  read -r acc_rc acc_s <"$logs/acceptance.result" || { acc_rc=1; acc_s=0; }
  pytest_rc=$(( unit_rc || acc_rc ))
  parts=" (unit ${unit_s}s $([ "$unit_rc" -eq 0 ] && echo passed || echo FAILED), beside it acceptance ${acc_s}s $([ "$acc_rc" -eq 0 ] && echo passed || echo FAILED))"
fi
pytest_s=$(( $(date +%s) - start ))

echo "== slurm 24.11 root"
wait "$root_pid" || failed=$((failed + 1))
cat "$root_log"
root_s=$(sed -n 's/^slurm_root_s=\([0-9]*\) .*/\1/p' "$root_log")
rm -f "$root_log"

echo "== node images (Debian 12's; the wheelhouse and Debian 13's image follow after the scenarios)"
while [ ! -f "$logs/images.rc" ]; do sleep 5; done
image_lines=$(wc -l <"$image_log")
head -n "$image_lines" "$image_log"

for pid in "${lane_pids[@]}"; do wait "$pid"; done
echo "== node images: the wheelhouse (a failure here only means default's \`up\` filled it itself), Debian 13's image"
wait "$image_pid" || failed=$((failed + 1))
tail -n "+$((image_lines + 1))" "$image_log"
image_s=$(sed -n 's/^image_s=\([0-9]*\) .*/\1/p' "$image_log")
wheelhouse_s=$(sed -n 's/^wheelhouse_s=\([0-9]*\) .*/\1/p' "$image_log")
trixie_s=$(sed -n 's/^trixie_s=\([0-9]*\) .*/\1/p' "$image_log")
rm -f "$image_log"
for scenario in "${scenarios[@]}"; do
  [ -f "$logs/$scenario.result" ] || continue
  read -r result seconds <"$logs/$scenario.result"
  if [ "$result" = passed ]; then passed=$((passed + 1)); else failed=$((failed + 1)); failed_logs+=("$logs/$scenario.log"); fi
  beside=""; [ "${lane_of[$scenario]}" = first ] || beside=" (${lane_of[$scenario]}, niced)"
  timings+=("$(printf '%-16s %-7s %4ds%s' "$scenario" "$result" "$seconds" "$beside")")
done
echo "== timings"
printf '%-16s %-7s %4ds%s\n' pytest "$([ "$pytest_rc" -eq 0 ] && echo passed || echo FAILED)" "$pytest_s" "$parts"
printf '%-16s %-7s %4ds (beside pytest; then the wheelhouse at %ss, Debian 13 at %ss)\n' "node images" - "${image_s:-0}" \
  "${wheelhouse_s:--}" "${trixie_s:--}"
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
