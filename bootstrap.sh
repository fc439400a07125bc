#!/usr/bin/env bash
# Set up everything hal-provision needs on a Debian 12 machine, then run one job:
#   ./bootstrap.sh demo   validate, show and render the embedded HAL description, bring up
#                         the sandbox cluster (podman), converge it and verify it
#   ./bootstrap.sh test   the whole test suite: unit, golden, real-Slurm acceptance, then
#                         every molecule scenario (timed)
# Idempotent: a second run only re-checks. Needs root (or sudo) for apt-get and podman.
set -euo pipefail
cd "$(dirname "$0")"
# tests/run-all.sh prints the total from here, set-up included.
export HAL_BOOTSTRAP_START="${HAL_BOOTSTRAP_START:-$(date +%s)}"

job="${1:-}"
case "$job" in demo|test) ;; *) echo "usage: $0 demo|test" >&2; exit 2 ;; esac

SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"

# One line per step; a step's own output is kept in a log and shown only when it fails.
LOG=$(mktemp -t hal-bootstrap.XXXXXX)
trap 'rm -f "$LOG"' EXIT
step() { echo "== $*"; }
quiet() {
  if ! "$@" >"$LOG" 2>&1; then
    echo "failed: $*" >&2
    tail -n 40 "$LOG" >&2
    exit 1
  fi
}

# Debian packages: real Slurm daemons, munge, hwloc and slapd (slapadd) for the acceptance
# tests, ruby (erb) for the rendered Open OnDemand templates; podman and friends for the
# sandbox (aardvark-dns is only a Recommends of podman: name it); headless Chromium and its
# driver for the portal's browser tests; InfluxDB 1.6 (influxd) for the dashboards' queries;
# Graphviz (dot) for `hal-provision diagram`.
APT_PACKAGES=(python3 python3-venv slurmctld slurmd slurmdbd slurm-client munge hwloc util-linux iproute2 fio iptables
              podman runc debootstrap netavark aardvark-dns tar openssh-client rsync slapd ldap-utils ruby
              chromium chromium-driver influxdb graphviz)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  step "apt-get install ${missing[*]}"
  quiet $SUDO apt-get update -q
  quiet $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# The Debian packages start daemons with the package's example config; the tests run their
# own private daemons and need none of these on the host.
for svc in slurmctld slurmd slurmdbd munge slapd influxdb; do $SUDO systemctl disable --now "$svc" >/dev/null 2>&1 || true; done

# Podman on a cgroups-v1 hybrid host without CAP_SYS_RESOURCE: crun fails, runc needs lower
# default ulimits; netavark gives DNS by container name. A drop-in, so the admin's own
# containers.conf stays untouched.
PODMAN_DROPIN=/etc/containers/containers.conf.d/50-hal-provision.conf
if [ ! -f "$PODMAN_DROPIN" ]; then
  step "writing $PODMAN_DROPIN"
  $SUDO mkdir -p "$(dirname "$PODMAN_DROPIN")"
  $SUDO tee "$PODMAN_DROPIN" >/dev/null <<'CONF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
[network]
network_backend = "netavark"
CONF
fi

# Python: a project-local virtual environment with the package, tests and Ansible tooling.
if [ ! -x .venv/bin/python ]; then
  step "python3 -m venv .venv"
  quiet python3 -m venv .venv
fi
if [ ! -f .venv/.installed ] || [ pyproject.toml -nt .venv/.installed ]; then
  step "pip install -e .[test,sandbox]"
  quiet .venv/bin/pip install -q --disable-pip-version-check --upgrade pip
  quiet .venv/bin/pip install -q --disable-pip-version-check -e '.[test,sandbox]'
  touch .venv/.installed
fi
export PATH="$PWD/.venv/bin:$PATH"

case "$job" in
  demo)
    hal-provision validate
    hal-provision show
    hal-provision render -o rendered/hal
    echo "== rendered tree: rendered/hal"
    find rendered/hal -type f | sort
    hal-provision sandbox up
    hal-provision verify .hal-sandbox/rendered/inventory
    ;;
  test)
    exec bash tests/run-all.sh "${@:2}"
    ;;
esac
