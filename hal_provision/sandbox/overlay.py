"""What the sandbox adds to a production render, and nothing else.

Production renders (hal-provision render) never carry these lines. The sandbox renders its
derived model with the same renderers, then applies exactly these test-harness changes:

* slurm.conf ``SlurmdParameters=config_overrides``: small containers declare the real node
  hardware (160 CPUs, 256 GiB); without it slurmd marks them "inval" (Low CPUs/RealMemory).
* slurm.conf ``TaskPlugin=task/cgroup`` (no task/affinity) and cgroup.conf
  ``ConstrainCores=no``: binding to CPUs that do not exist fails every job. CPU binding is
  therefore not exercised in the sandbox.
* inventory/sandbox.yml: reach the nodes through the podman connection (container name =
  host name) and ask the slurm role for fake GPU character devices.
"""

from __future__ import annotations

import json

from ..model import Cluster, Role
from ..render import render_all
from ..render.common import header

SLURM_CONF = "files/etc/slurm/slurm.conf"
CGROUP_CONF = "files/etc/slurm/cgroup.conf"
SANDBOX_INVENTORY = "inventory/sandbox.yml"  # loaded after hosts.yml: its host vars win
MARK = "# ---- sandbox only (hal-provision sandbox); production renders never carry this ----\n"


class OverlayError(RuntimeError):
    pass


def _replace_once(text: str, old: str, new: str, path: str) -> str:
    if text.count(old) != 1:
        raise OverlayError(f"{path}: expected exactly one {old.strip()!r} to replace")
    return text.replace(old, new)


def sandbox_files(cluster: Cluster) -> dict[str, str]:
    files = render_all(cluster)
    slurm = _replace_once(files[SLURM_CONF], "TaskPlugin=task/cgroup,task/affinity\n",
                          "TaskPlugin=task/cgroup\n", SLURM_CONF)
    files[SLURM_CONF] = slurm + (
        "\n" + MARK
        + "# Containers declare the real hardware; CPU binding (task/affinity) is off above.\n"
        + "SlurmdParameters=config_overrides\n"
    )
    files[CGROUP_CONF] = _replace_once(files[CGROUP_CONF], "ConstrainCores=yes\n", "ConstrainCores=no\n", CGROUP_CONF) + (
        MARK + "# ConstrainCores=no: the declared CPUs do not exist in a container.\n"
    )
    files[SANDBOX_INVENTORY] = sandbox_inventory(cluster)
    return dict(sorted(files.items()))


def sandbox_inventory(cluster: Cluster) -> str:
    from ..hostlist import nodeset

    lines = [
        header(cluster),
        MARK,
        "all:\n",
        "  vars:\n",
        "    ansible_connection: containers.podman.podman\n",
        "    ansible_python_interpreter: /usr/bin/python3\n",
        "    hal_sandbox: true\n",
        "    slurm_fake_gpus: true\n",
        "    # -x: chronyd must not set the clock; privileged computes share the host's.\n",
        '    common_chrony_daemon_options: "-F 1 -x"\n',
        "  hosts:\n",
    ]
    for group in cluster.nodes:
        for host in nodeset(group.hosts):
            lines.append(f"    {host}: {{ansible_host: {json.dumps(host)}}}\n")
    return "".join(lines)


def privileged_hosts(cluster: Cluster) -> set[str]:
    """Compute containers run privileged: writable cgroups for Slurm and mknod for fake GPUs."""
    from ..hostlist import nodeset

    return {h for g in cluster.groups_with_role(Role.compute) for h in nodeset(g.hosts)}
