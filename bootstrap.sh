#!/usr/bin/env bash
# Set up everything hal-provision needs on a Debian 12 machine, then run one job:
#   ./bootstrap.sh demo   validate, show and render the embedded HAL description, bring up
#                         the sandbox cluster (podman), converge it and verify it (the tests
#                         that read the cluster; those that change it run in CI)
#   ./bootstrap.sh test   the whole test suite: unit, golden, real-Slurm acceptance, then
#                         every molecule scenario (timed)
# Idempotent: a second run only re-checks. Needs root (or sudo) for apt-get and podman.
# Each step prints one line with its time; a step's own output is kept in a log and shown
# only when it fails.
set -euo pipefail
cd "$(dirname "$0")"
# tests/run-all.sh prints the total from here, set-up included.
export HAL_BOOTSTRAP_START="${HAL_BOOTSTRAP_START:-$(date +%s)}"

job="${1:-}"
case "$job" in demo|test) ;; *) echo "usage: $0 demo|test" >&2; exit 2 ;; esac

SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"

LOGS=$(mktemp -d -t hal-bootstrap.XXXXXX)
trap 'rm -rf "$LOGS"' EXIT

# The test job (CI's) runs in a HOME that starts empty, so that whatever the project reads from
# or writes into an earlier run's home fails here first, not on a user's first run. What is
# meant to persist is named outright: pip's configuration (a site's index or mirror) and cache,
# and hal-provision's own caches (the node wheelhouse, Slurm's second-major root, the parsed
# inventory), where the user's own home keeps them. HAL_KEEP_HOME=1 runs in the real HOME.
if [ "$job" = test ] && [ -z "${HAL_KEEP_HOME:-}" ]; then
  real_home="${HOME:-$(getent passwd "$(id -un)" | cut -d: -f6)}"
  real_cache="${XDG_CACHE_HOME:-$real_home/.cache}"
  export PIP_CACHE_DIR="${PIP_CACHE_DIR:-$real_cache/pip}"
  export HAL_PROVISION_CACHE="${HAL_PROVISION_CACHE:-$real_cache/hal-provision}"
  if [ -z "${PIP_CONFIG_FILE:-}" ]; then
    for conf in "${XDG_CONFIG_HOME:-$real_home/.config}/pip/pip.conf" "$real_home/.pip/pip.conf"; do
      if [ -f "$conf" ]; then export PIP_CONFIG_FILE="$conf"; break; fi
    done
  fi
  HOME=$(mktemp -d -t hal-home.XXXXXX); export HOME
  unset XDG_CACHE_HOME XDG_CONFIG_HOME XDG_DATA_HOME XDG_STATE_HOME
  trap 'rm -rf "$LOGS" "$HOME"' EXIT
  echo "== HOME=$HOME (empty; kept: pip's cache $PIP_CACHE_DIR${PIP_CONFIG_FILE:+ and configuration $PIP_CONFIG_FILE}, $HAL_PROVISION_CACHE)"
fi
clock() { local s=$(( $(date +%s) - $1 )); if [ "$s" -ge 60 ]; then printf '%dm%02ds' $((s / 60)) $((s % 60)); else printf '%ds' "$s"; fi; }
# quiet NAME CMD...: one line "== NAME ... TIME"; the command's output only if it fails.
quiet() {
  local name="$1" log="$LOGS/step.$RANDOM" start; shift; start=$(date +%s)
  printf '== %s ... ' "$name"
  if ! "$@" >"$log" 2>&1; then
    printf 'FAILED after %s\n' "$(clock "$start")"
    tail -n 40 "$log" >&2
    exit 1
  fi
  printf '%s\n' "$(clock "$start")"
}
# step NAME: a step whose own output follows (its time comes with `done_step`).
# step NAME [NOTE]: a step whose own output follows; `done_step` closes it with its time.
step() { STEP_NAME="$1"; STEP_START=$(date +%s); echo "== $1${2:+ ($2)}"; }
done_step() { echo "== $STEP_NAME: $(clock "$STEP_START")"; }

# Debian packages: real Slurm daemons, munge, hwloc and slapd (slapadd) for the acceptance
# tests, ruby (erb) for the rendered Open OnDemand templates; podman and friends for the
# sandbox (aardvark-dns is only a Recommends of podman: name it); headless Chromium and its
# driver for the portal's browser tests; InfluxDB 1.6 (influxd) for the dashboards' queries;
# Graphviz (dot) for `hal-provision diagram`; minisign, which signs pull mode's releases
# (`hal-provision bundle`) and verifies them in the tests; sudo, whose visudo checks the rendered
# sudoers rules; python3-yaml for the node image's builder, which
# runs under the system's Python beside the virtual environment's set-up; ipmitool, which
# `hal-provision power` drives IPMI BMCs with; dnsmasq-base (the daemon, no service), which
# checks and answers the rendered network boot's configuration in the unit tests; Prometheus
# (promtool), Alertmanager (amtool) and the node exporter, which check and run the Prometheus
# backend's rendered configuration, rules and collectors' output in the unit tests; python3-bcrypt,
# which hashes the Prometheus web configuration's password as the prometheus role does on a node.
APT_PACKAGES=(python3 python3-venv python3-yaml slurmctld slurmd slurmdbd slurm-client munge hwloc util-linux
              iproute2 fio iptables podman runc debootstrap netavark aardvark-dns tar openssh-client rsync slapd
              ldap-utils ruby chromium chromium-driver influxdb graphviz minisign sudo ipmitool dnsmasq-base
              python3-bcrypt prometheus prometheus-alertmanager prometheus-node-exporter)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  quiet "apt-get update" $SUDO apt-get update -q
  quiet "apt-get install ${#missing[@]} packages" \
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# The Debian packages start daemons with the package's example config; the tests run their
# own private daemons and need none of these on the host.
for svc in slurmctld slurmd slurmdbd munge slapd influxdb prometheus prometheus-alertmanager prometheus-node-exporter; do $SUDO systemctl disable --now "$svc" >/dev/null 2>&1 || true; done

# Podman on a cgroups-v1 hybrid host without CAP_SYS_RESOURCE: crun fails, runc needs lower
# default ulimits; netavark gives DNS by container name. A drop-in, so the admin's own
# containers.conf stays untouched.
PODMAN_DROPIN=/etc/containers/containers.conf.d/50-hal-provision.conf
if [ ! -f "$PODMAN_DROPIN" ]; then
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
  echo "== wrote $PODMAN_DROPIN"
fi

# The sandbox's node images (bare, then with the roles' packages) build while the Python
# environment installs: both mostly wait on downloads and unpacking. The builder needs only
# the standard library and PyYAML, so the system's Python runs it. For the test job too: the
# scenarios start once the images are there, so they are the first thing every run waits for;
# tests/run-all.sh's own build of them waits on this one's lock (hal_provision/sandbox/image.py),
# then finds them, and shows the error should this one have failed.
images() { /usr/bin/python3 -m hal_provision.sandbox.image; }
images_start=$(date +%s)
images >"$LOGS/images" 2>&1 & images_pid=$!
[ "$job" = demo ] || echo "== node images: building beside the Python set-up (tests/run-all.sh waits for them)"

# Python: a project-local virtual environment with the package, tests and Ansible tooling, on
# Debian's own Python (built with profile-guided optimisation: Ansible's controller runs about
# 12 % faster than on a Python built without, as some machines put first on PATH).
if [ ! -x .venv/bin/python ]; then
  quiet "/usr/bin/python3 -m venv .venv" /usr/bin/python3 -m venv .venv
fi
if [ ! -f .venv/.installed ] || [ pyproject.toml -nt .venv/.installed ]; then
  quiet "pip install -e .[test,sandbox]" sh -c '.venv/bin/pip install -q --disable-pip-version-check --upgrade pip &&
    .venv/bin/pip install -q --disable-pip-version-check -e ".[test,sandbox]"'
  touch .venv/.installed
fi
export PATH="$PWD/.venv/bin:$PATH"

case "$job" in
  demo)
    step "validate, show, render" "the embedded HAL description"
    hal-provision validate
    hal-provision show
    hal-provision render -o rendered/hal
    done_step
    printf '== node images (bare, and with the roles'"'"' packages) ... '
    if ! wait "$images_pid"; then echo FAILED; tail -n 40 "$LOGS/images" >&2; exit 1; fi
    echo "$(clock "$images_start") (built beside the Python set-up)"
    step "sandbox up" "containers, then site.yml; Ansible's own output goes to .hal-sandbox/logs/"
    hal-provision sandbox up
    done_step
    step "verify" "the tests that read the cluster, tests/infra"
    hal-provision verify .hal-sandbox/rendered/inventory -- -q --no-header
    done_step
    cat <<EOF
== verified in $(clock "$HAL_BOOTSTRAP_START") from the start of ./bootstrap.sh
   The tests that change the cluster (day-2 changes, fault injection) run in CI's scenarios;
   on this sandbox, after these:
     .venv/bin/hal-provision verify .hal-sandbox/rendered/inventory --changes --faults
   Remove the sandbox:  .venv/bin/hal-provision sandbox down
EOF
    ;;
  test)
    # Not exec: the EXIT trap removes the logs and the empty HOME afterwards.
    bash tests/run-all.sh "${@:2}"
    ;;
esac
