#!/usr/bin/env bash
# Set up everything hal-provision needs on a Debian 12 machine, then run one job:
#   ./bootstrap.sh demo   validate, show and render the embedded HAL description
#   ./bootstrap.sh test   run the whole test suite (unit, golden, real-Slurm acceptance)
# Idempotent: a second run only re-checks. Needs root (or sudo) for apt-get.
set -euo pipefail
cd "$(dirname "$0")"

job="${1:-}"
case "$job" in demo|test) ;; *) echo "usage: $0 demo|test" >&2; exit 2 ;; esac

SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"

# Debian packages: real Slurm daemons, munge and hwloc for the acceptance tests.
APT_PACKAGES=(python3 python3-venv slurmctld slurmd slurm-client munge hwloc util-linux)
missing=()
for p in "${APT_PACKAGES[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "== apt-get install ${missing[*]}"
  $SUDO apt-get update -q
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# The Debian packages start daemons with the package's example config; the tests run their
# own private daemons and need none of these.
for svc in slurmctld slurmd munge; do $SUDO systemctl disable --now "$svc" >/dev/null 2>&1 || true; done

# Python: a project-local virtual environment.
if [ ! -x .venv/bin/python ]; then
  echo "== python3 -m venv .venv"
  python3 -m venv .venv
fi
if ! .venv/bin/python -c 'import hal_provision, pytest' 2>/dev/null || [ pyproject.toml -nt .venv/.installed ]; then
  echo "== pip install -e .[test]"
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -e '.[test]'
  touch .venv/.installed
fi

case "$job" in
  demo)
    .venv/bin/hal-provision validate
    .venv/bin/hal-provision show
    .venv/bin/hal-provision render -o rendered/hal
    echo "== rendered tree: rendered/hal"
    find rendered/hal -type f | sort
    ;;
  test)
    exec .venv/bin/python -m pytest -ra "${@:2}"
    ;;
esac
