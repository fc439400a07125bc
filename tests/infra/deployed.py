"""The cluster under test, as its rendered inventory and files describe it, and its hosts.

One object per test session (`deployed()`), built from `ansible-inventory --list` of
HAL_INVENTORY and from the rendered files at HAL_INVENTORY/../files. Test modules use it at
collection time to parametrize over hosts, partitions and files.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from hal_provision.cli.common import InventoryDirError
from hal_provision.cli.common import list_inventory as listed
from hal_provision.cli.verify import VerifyError, check_inventory
from hal_provision.hostlist import ansible_name

INVENTORY_ENV = "HAL_INVENTORY"
TEST_USER = os.environ.get("HAL_TEST_USER", "haltest")
JOB_TIMEOUT = 120  # seconds any one Slurm command may take before the test gives up

# Hosts the slurm role configures (playbooks/slurm-*.yml): each gets every cluster-wide
# Slurm file, the daemons that read them run there or the client commands do.
SLURM_HOSTS = ("service_slurmctld", "service_slurmdbd", "role_login", "role_development", "slurm_nodes")
SLURM_CONF = "etc/slurm/slurm.conf"
FILE_GROUPS: dict[str, tuple[str, ...]] = {
    "etc/hosts": ("all",),
    **{f"etc/slurm/{name}": SLURM_HOSTS for name in ("slurm.conf", "gres.conf", "cgroup.conf", "topology.conf")},
}
SLURMDBD_CONF = "etc/slurm/slurmdbd.conf"
MUNGE_GROUPS = ("all",)


class InventoryError(RuntimeError):
    pass


def list_inventory(inventory: Path) -> dict:
    try:
        return listed(inventory)
    except InventoryDirError as exc:
        raise InventoryError(str(exc)) from None


@dataclass
class Deployed:
    inventory: Path
    hostvars: dict[str, dict]
    groups: dict[str, list[str]]  # every group, children expanded, hosts in inventory order
    _hosts: dict = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, inventory: Path) -> "Deployed":
        try:
            inventory = check_inventory(inventory)
        except VerifyError as exc:
            raise InventoryError(str(exc)) from None
        data = list_inventory(inventory)
        hostvars = data.get("_meta", {}).get("hostvars", {})

        @functools.cache
        def members(group: str) -> tuple[str, ...]:
            entry = data.get(group, {})
            out = list(entry.get("hosts", []))
            for child in entry.get("children", []):
                out.extend(members(child))
            return tuple(dict.fromkeys(out))

        groups = {g: list(members(g)) for g in data if g != "_meta"}
        groups["all"] = list(hostvars)
        return cls(inventory, hostvars, groups)

    # ---- the model, as the inventory and rendered files say ----

    @property
    def files(self) -> Path:
        return self.inventory.parent / "files"

    def rendered(self, rel: str) -> str | None:
        path = self.files / rel
        return path.read_text() if path.is_file() else None

    def health_expectation(self, host: str) -> str | None:
        """The rendered expectation the healthcheck role installs on a host: its own (a composed
        host set apart from its group by the active layout) where there is one, else its group's."""
        return self.rendered(f"etc/hal-provision/health/hosts/{host}.json") or self.rendered(
            f"etc/hal-provision/health/{self.hostvars[host].get('hal_node_group')}.json"
        )

    def telegraf_conf(self, host: str) -> str | None:
        """The rendered telegraf.conf the telegraf role installs on a host: its node group's
        where there is one, else its role's; None: no agent there."""
        hv = self.hostvars[host]
        return self.rendered(f"etc/telegraf/groups/{hv.get('hal_node_group')}.conf") or self.rendered(
            f"etc/telegraf/roles/{hv.get('hal_role')}.conf"
        )

    def hosts_in(self, *groups: str) -> list[str]:
        wanted = {h for g in groups for h in self.groups.get(g, [])}
        return [h for h in self.hostvars if h in wanted]

    @property
    def login(self) -> str:
        return self.hosts_in("role_login")[0]

    @property
    def controller(self) -> str:
        return self.hosts_in("service_slurmctld")[0]

    def hardware(self, host: str) -> dict:
        return self.hostvars[host].get("hal_hardware") or {}

    def gres(self, host: str) -> str:
        """What sinfo's %G shows for the host: 'gpu:TYPE:N' (from the inventory's hardware),
        then the GPUs' shares where its node group shares them (slurm.conf's shard:N or mps:N,
        shown as shard:TYPE:N), or '(null)' without GPUs."""
        hw = self.hardware(host)
        n = len(hw.get("gpu_devices") or [])
        if not n:
            return "(null)"
        gpus = f"gpu:{hw['gpu_type']}:{n}" if hw.get("gpu_type") else f"gpu:{n}"
        from hal_provision.hostlist import nodeset

        for line in (self.rendered(SLURM_CONF) or "").splitlines():
            names, gres = re.match(r"NodeName=(\S+)", line), re.search(r"\bGres=(\S+)", line)
            if names and gres and names.group(1) != "DEFAULT" and host in nodeset(names.group(1)):
                # slurmd registers each share bound to its GPU, so slurmctld shows it typed:
                # slurm.conf's shard:4 is shard:h100:4 once the node is up.
                shares = [g.split(":") for g in gres.group(1).split(",") if g.startswith(("shard:", "mps:"))]
                typed = [
                    f"{kind}:{hw['gpu_type']}:{count}" if hw.get("gpu_type") else f"{kind}:{count}"
                    for kind, count in shares
                ]
                return ",".join([gpus, *typed])
        return gpus

    def partitions(self) -> dict[str, list[str]]:
        """Slurm partition name -> nodes. Names come from the rendered slurm.conf (exact
        spelling), members from the inventory's partition_* groups."""
        conf = self.rendered(SLURM_CONF) or ""
        names = re.findall(r"^PartitionName=(\S+)", conf, flags=re.M)
        return {n: self.hosts_in(f"partition_{ansible_name(n)}") for n in names}

    def gpu_partitions(self) -> list[str]:
        return [p for p, nodes in self.partitions().items() if nodes and all(self.gpus(h) for h in nodes)]

    def compute_partitions(self) -> list[str]:
        """Partitions with nodes, those whose nodes all have GPUs first: a change or a job that
        needs some compute node, on a GPU cluster or a CPU-only one (sandbox up --cpu-only)."""
        gpu = self.gpu_partitions()
        return gpu + [p for p, nodes in self.partitions().items() if nodes and p not in gpu]

    def gpus(self, host: str) -> int:
        return len(self.hardware(host).get("gpu_devices") or [])

    def gpu_request(self, nodes: list[str]) -> str:
        """`--gres` value asking for every GPU of each node; nodes must be alike."""
        kinds = {(self.hardware(h).get("gpu_type"), self.gpus(h)) for h in nodes}
        if len(kinds) != 1:
            raise AssertionError(f"nodes {nodes} differ in GPUs: {sorted(kinds, key=str)}")
        gpu_type, n = kinds.pop()
        return f"gpu:{gpu_type}:{n}" if gpu_type else f"gpu:{n}"

    # ---- reaching the hosts ----

    def is_podman(self, name: str) -> bool:
        return str(self.hostvars[name].get("ansible_connection", "")).endswith("podman")

    def container(self, name: str) -> str | None:
        """The podman container behind a sandbox node (inventory/sandbox.yml), else None."""
        return self.hostvars[name].get("hal_sandbox_container")

    def host(self, name: str):
        if name not in self._hosts:
            import testinfra

            hv = self.hostvars[name]
            if self.is_podman(name):
                self._hosts[name] = testinfra.get_host(f"podman://{hv.get('ansible_host', name)}")
            else:
                become = bool(hv.get("ansible_become")) or hv.get("ansible_user", "root") != "root"
                _ansible_config_as_ansible_reads_it(str(self.inventory))
                self._hosts[name] = testinfra.get_host(
                    f"ansible://{name}", ansible_inventory=str(self.inventory), sudo=become
                )
        return self._hosts[name]

    def as_user(self, name: str, script: str, timeout: int = JOB_TIMEOUT):
        """Run a shell script as the normal test user, in a login shell, on a host."""
        # Over SSH an exit status of 255 means "ssh failed" to testinfra, which raises: a
        # script's own 255 (an ssh it ran was refused, say) is reported as 254.
        return self.host(name).run(
            "timeout %s su - %s -c %s; rc=$?; [ $rc -ne 255 ] || rc=254; exit $rc", str(timeout), TEST_USER, script
        )

    def user_ok(self, script: str, timeout: int = JOB_TIMEOUT) -> str:
        """as_user on the login node; the test fails with the output unless the script exits 0."""
        out = self.as_user(self.login, script, timeout)
        assert out.rc == 0, f"as {TEST_USER} on {self.login}: {script}\nexit {out.rc}\n{out.stdout}{out.stderr}"
        return out.stdout

    def sbatch(self, args: str) -> str:
        """Submit `sbatch --parsable ARGS` as the normal user; the job id."""
        return self.user_ok(f"sbatch --parsable {args}").strip().split(";")[0]

    def journal(self, name: str, unit: str, lines: int = 50) -> str:
        out = self.host(name).run("journalctl -u %s -n %s --no-pager", unit, str(lines))
        return f"--- journalctl -u {unit} on {name} ---\n{out.stdout}{out.stderr}"


def _ansible_config_as_ansible_reads_it(inventory: str) -> None:
    """testinfra's ansible backend reads ansible.cfg with configparser's %-interpolation, which
    fails on ssh_args' ControlPath=.../%C (a token for ssh: Ansible reads the file raw and hands
    ssh_args to ssh as written). Give its runner for this inventory the file read raw, so
    testinfra passes ssh the same options Ansible does."""
    import configparser

    from testinfra.utils.ansible_runner import AnsibleRunner

    runner = AnsibleRunner.get_runner(inventory)
    if "ansible_config" in runner.__dict__:
        return
    config = configparser.RawConfigParser()
    fname = os.environ.get("ANSIBLE_CONFIG")
    if fname:
        config.read(fname)
    runner.__dict__["ansible_config"] = config  # functools.cached_property's slot


# A shell loop printing "ok DEV" or "denied DEV" for each of {devs}. An open() refused by the
# devices cgroup fails with EPERM. An allowed fake device (no driver behind it) fails with
# ENXIO instead, and a real one opens: both count as allowed.
PROBE_DEVICES = (
    'for d in {devs}; do e=$( (: < $d) 2>&1 ); case "$e" in '
    "*'Operation not permitted'*) echo denied $d;; *) echo ok $d;; esac; done"
)


@functools.cache
def deployed() -> Deployed:
    inv = os.environ.get(INVENTORY_ENV)
    if not inv:
        raise InventoryError(f"set {INVENTORY_ENV} to a rendered inventory directory")
    return Deployed.load(Path(inv))


def sandbox_render(workdir: Path, model: dict):
    """(the Cluster of `model`, its tree {path: text}) as `sandbox up` renders the sandbox at
    WORKDIR with `model` as its derived model (its shared mounts, caches and release kept): what
    the tests that change the sandbox's model apply."""
    import dataclasses

    from hal_provision.model import Cluster
    from hal_provision.sandbox import lifecycle

    cluster = Cluster.model_validate(model)
    return cluster, lifecycle.rendered_files(dataclasses.replace(lifecycle.load(workdir), cluster=cluster))


def retry(fn, timeout: float, interval: float = 1.0):
    """Call fn until it returns something true or the time is up; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


# ---- running playbooks against the inventory under test, through hal_provision.cli.runner ----

RECAP_LINE = re.compile(r"^(\S+)\s+:\s+((?:\w+=\d+\s*)+)$")


def site_cmd(
    inventory: Path, *extra: str, playbook: str = "site.yml", inventories: list[Path] | None = None
) -> tuple[list[str], dict[str, str]]:
    """ansible-playbook on playbooks/PLAYBOOK (site.yml or one of its tiers) and its environment,
    as hal_provision.cli.runner builds them. Its -i sources are `inventories`, by default those
    `sandbox up` converges with (the inventory plugin's source in the tree of `inventory`, then
    sandbox.yml)."""
    from hal_provision.cli import runner
    from hal_provision.sandbox.lifecycle import inventories as sandbox_sources

    sources = sandbox_sources(inventory) if inventories is None else inventories
    # The tests parse the output: no colour, even when the caller (molecule) asks for it.
    env = runner.ansible_env(dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1"))
    return runner.playbook_cmd(playbook, sources, *extra), env


def run_site(
    inventory: Path,
    *extra: str,
    timeout: float = 1200,
    playbook: str = "site.yml",
    inventories: list[Path] | None = None,
) -> subprocess.CompletedProcess:
    """Run site_cmd's command through hal_provision.cli.runner (its events pipe, its timeout: the
    run is killed after `timeout` seconds) with Ansible's output kept in a log: its exit status,
    and that output (stderr included) as stdout, for the tests to parse."""
    from hal_provision.cli import runner

    cmd, env = site_cmd(inventory, *extra, playbook=playbook, inventories=inventories)
    with tempfile.TemporaryDirectory(prefix="hal-infra-") as tmp:
        log = Path(tmp) / "ansible.log"
        run = runner.run_playbook(cmd, env=env, log=log, timeout=timeout)
        output = log.read_text(errors="replace") if log.is_file() else ""
    if run.seconds > timeout:
        output += f"\n[killed after {run.seconds:.0f} s: the timeout is {timeout:.0f} s]\n"
    return subprocess.CompletedProcess(cmd, run.returncode, stdout=output)


def parse_recap(output: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP of an ansible-playbook run: host -> {ok, changed, unreachable, failed, ...}."""
    recap: dict[str, dict[str, int]] = {}
    _, found, tail = output.rpartition("PLAY RECAP")
    for line in tail.splitlines() if found else []:
        m = RECAP_LINE.match(line.strip())
        if m:
            recap[m.group(1)] = {k: int(v) for k, v in (kv.split("=") for kv in m.group(2).split())}
    return recap


def tail(text: str, lines: int = 60) -> str:
    return "\n".join(text.splitlines()[-lines:])


def changed_tasks(output: str) -> list[str]:
    """'TASK name -> host' for every task result reported as changed (or failed) in a run."""
    found, task = [], "?"
    for line in output.splitlines():
        if line.startswith("TASK ["):
            task = line[6 : line.rfind("]")]
        elif line.startswith(("changed: [", "fatal: [")):
            found.append(f"{task} -> {line.split('[', 1)[1].split(']', 1)[0]} ({line.split(':', 1)[0]})")
    return found


def run_playbook(
    inventory: Path, playbook: str, *extra: str, timeout: float = 900, inventories: list[Path] | None = None
) -> str:
    """run_site for one playbook; asserts that it succeeded on every host, and returns its output."""
    proc = run_site(inventory, *extra, timeout=timeout, playbook=playbook, inventories=inventories)
    recap = parse_recap(proc.stdout)
    ran = recap or "skipping: no hosts matched" in proc.stdout  # a tier this cluster has no hosts for
    assert proc.returncode == 0 and ran and not any(r["failed"] or r["unreachable"] for r in recap.values()), (
        f"{playbook}: exit {proc.returncode}\n" + "\n".join(changed_tasks(proc.stdout)) + "\n" + tail(proc.stdout)
    )
    return proc.stdout
