"""What the sandbox adds to a production render, and nothing else.

Production renders (hal-provision render) never carry these lines. The sandbox renders its
derived model with the same renderers, then applies exactly these test-harness changes:

* slurm.conf ``SlurmdParameters=config_overrides``: small containers declare the real node
  hardware (160 CPUs, 256 GiB); without it slurmd marks them "inval" (Low CPUs/RealMemory).
* slurm.conf ``TaskPlugin=task/cgroup`` (no task/affinity) and cgroup.conf
  ``ConstrainCores=no``: binding to CPUs that do not exist fails every job. CPU binding is
  therefore not exercised in the sandbox.
* inventory/sandbox.yml, monitoring: Telegraf cannot be installed here, so the telegraf role
  runs its stand-in (same telegraf.conf, same collectors, same database and user); fake
  nvidia-smi and ipmitool answer with recorded output (tests/data); Grafana's provisioning is
  put in place without Grafana.
* health expectations (files/etc/hal-provision/health/<group>.json): the mounts check lists the
  shared file systems the sandbox binds into the group's nodes (the derived model narrows
  storage to the kept hosts, which serve none of them, so it renders no mount points), and the
  local scratch as rendered.
* inventory/sandbox.yml, with the host's caches (the default): the portal installs its Python
  packages, and the module environments' (a CPU build of PyTorch), from the host's wheelhouse,
  bound into the nodes (portal_pip_wheelhouse, lmod_pip_wheelhouse).
* inventory/sandbox.yml: reach the nodes over SSH at their model addresses as root with the
  sandbox's own key pair and known_hosts (the connection settings themselves, pipelining and
  ControlPersist, are the repository's ansible.cfg, as on a real site), name each node's
  container, and ask the slurm role for fake GPU character devices.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..model import Cluster, Role
from ..render import render_all
from ..render.common import header

SLURM_CONF = "files/etc/slurm/slurm.conf"
CGROUP_CONF = "files/etc/slurm/cgroup.conf"
SANDBOX_INVENTORY = "inventory/sandbox.yml"  # loaded after hosts.yml: its host vars win
MARK = "# ---- sandbox only (hal-provision sandbox); production renders never carry this ----\n"


class OverlayError(RuntimeError):
    pass


@dataclass(frozen=True)
class SshAccess:
    """Where the sandbox keeps root's private key and the nodes' host keys (absolute paths:
    Ansible reads them relative to its working directory otherwise)."""

    private_key: Path
    known_hosts: Path

    @property
    def user_keys(self) -> Path:
        """Directory users' key pairs (NAME, NAME.pub): the sandbox's stand-ins for the keys
        the model lists, whose private halves only their owners hold."""
        return self.private_key.parent / "users"


def _replace_once(text: str, old: str, new: str, path: str) -> str:
    if text.count(old) != 1:
        raise OverlayError(f"{path}: expected exactly one {old.strip()!r} to replace")
    return text.replace(old, new)


# Recorded and documented-format hardware output the fake nvidia-smi and ipmitool answer with.
RECORDS = Path(__file__).resolve().parents[2] / "tests" / "data"

# Where the sandbox binds the host's CA bundle for pip (host_pip_cert) in every container.
NODE_PIP_CERT = "/etc/ssl/hal-sandbox/host-ca.crt"


def sandbox_files(
    cluster: Cluster,
    ssh: SshAccess,
    shared: dict[str, list[str]] | None = None,
    pip_cert: bool = False,
    wheelhouse: str | None = None,
) -> dict[str, str]:
    """The production render of the sandbox's model plus the test-harness changes above.
    `shared`: mount point -> nodes, the shared file systems the sandbox backs with host
    directories (listed in the inventory for the tests). `pip_cert`: the host's pip trusts a
    CA bundle of its own, bound into the nodes at NODE_PIP_CERT; the nodes' pip gets it too.
    `wheelhouse`: where the nodes see the host's wheelhouse (None: pip uses the index)."""
    files = render_all(cluster)
    slurm = _replace_once(
        files[SLURM_CONF], "TaskPlugin=task/cgroup,task/affinity\n", "TaskPlugin=task/cgroup\n", SLURM_CONF
    )
    files[SLURM_CONF] = slurm + (
        "\n"
        + MARK
        + "# Containers declare the real hardware; CPU binding (task/affinity) is off above.\n"
        + "SlurmdParameters=config_overrides\n"
    )
    files[CGROUP_CONF] = _replace_once(
        files[CGROUP_CONF], "ConstrainCores=yes\n", "ConstrainCores=no\n", CGROUP_CONF
    ) + (MARK + "# ConstrainCores=no: the declared CPUs do not exist in a container.\n")
    files.update(_health_mounts(cluster, files, shared or {}))
    files[SANDBOX_INVENTORY] = sandbox_inventory(cluster, ssh, shared or {}, pip_cert, wheelhouse)
    return dict(sorted(files.items()))


def _health_mounts(cluster: Cluster, files: dict[str, str], shared: dict[str, list[str]]) -> dict[str, str]:
    """Each health expectation's mounts: the bound mount points every node of its group has."""
    from ..hostlist import nodeset
    from ..render.health import HEALTH_DIR

    if cluster.health is None or "mounts" not in cluster.health.checks:
        return {}
    out = {}
    for group in cluster.groups_with_role(Role.compute):
        path = f"{HEALTH_DIR}/{group.name}.json"
        hosts = set(nodeset(group.hosts))
        points = sorted(point for point, nodes in shared.items() if hosts <= set(nodes))
        profile = cluster.profile_of(group)
        if points and profile is not None and profile.scratch is not None:
            points.append(profile.scratch.mount_point)
        if path not in files or not points:
            continue
        data = json.loads(files[path])
        data["checks"]["mounts"] = {"mount_points": points}
        data["_sandbox"] = "mounts: the shared file systems the sandbox binds into these nodes (hal-provision sandbox)"
        out[path] = json.dumps(data, indent=2, sort_keys=True) + "\n"
    return out


def sandbox_inventory(
    cluster: Cluster,
    ssh: SshAccess,
    shared: dict[str, list[str]],
    pip_cert: bool = False,
    wheelhouse: str | None = None,
) -> str:
    from ..hostlist import nodeset

    known_hosts = f"-o UserKnownHostsFile={ssh.known_hosts} -o StrictHostKeyChecking=yes"
    lines = [
        header(cluster),
        MARK,
        "all:\n",
        "  vars:\n",
        "    # hosts.yml gives each node its model address (ansible_host).\n",
        "    ansible_connection: ssh\n",
        "    ansible_user: root\n",
        f"    ansible_ssh_private_key_file: {json.dumps(str(ssh.private_key))}\n",
        f"    ansible_ssh_common_args: {json.dumps(known_hosts)}\n",
        "    ansible_python_interpreter: /usr/bin/python3\n",
        "    hal_sandbox: true\n",
        "    slurm_fake_gpus: true\n",
        "    # -x: chronyd must not set the clock; privileged computes share the host's.\n",
        '    common_chrony_daemon_options: "-F 1 -x"\n',
        "    # The model's shared file systems, each one host directory bound into its nodes.\n",
        f"    hal_sandbox_shared: {json.dumps(shared, sort_keys=True)}\n",
        "    # Directory users' private keys (NAME), whose public halves the sandbox's model lists.\n",
        f"    hal_sandbox_user_keys: {json.dumps(str(ssh.user_keys))}\n",
        "    # The sandbox's work directory: its derived model (model.json), keys and rendered tree.\n",
        f"    hal_sandbox_workdir: {json.dumps(str(ssh.private_key.parent.parent))}\n",
    ]
    lines += [
        "    # Monitoring: no Telegraf or Grafana packages can be reached from here (see above).\n",
        "    telegraf_install_method: standin\n",
        "    telegraf_fake_hardware: true\n",
        f"    telegraf_fake_hardware_records: {json.dumps(str(RECORDS))}\n",
        "    grafana_install: false\n",
    ]
    if pip_cert:
        lines += [
            "    # pip on the nodes trusts what the host's pip trusts (its CA bundle, bound in).\n",
            f"    portal_pip_environment: {json.dumps({'PIP_CERT': NODE_PIP_CERT})}\n",
            f"    lmod_pip_environment: {json.dumps({'PIP_CERT': NODE_PIP_CERT})}\n",
        ]
    if wheelhouse:
        lines += [
            "    # The portal's and the module environments' Python packages from the host's wheelhouse,\n",
            "    # bound into every node (hal-provision sandbox --caches); pip does not reach for the index.\n",
            f"    portal_pip_wheelhouse: {json.dumps(wheelhouse)}\n",
            f"    lmod_pip_wheelhouse: {json.dumps(wheelhouse)}\n",
        ]
    lines += [
        "  hosts:\n",
    ]
    for group in cluster.nodes:
        for host in nodeset(group.hosts):
            lines.append(f"    {host}: {{hal_sandbox_container: {json.dumps(host)}}}\n")
    return "".join(lines)


def privileged_hosts(cluster: Cluster) -> set[str]:
    """Compute containers run privileged: writable cgroups for Slurm and mknod for fake GPUs."""
    from ..hostlist import nodeset

    return {h for g in cluster.groups_with_role(Role.compute) for h in nodeset(g.hosts)}
