"""The Ansible inventory (YAML): groups per role, node group, hardware profile, partition and
service, with the host variables the roles need.

Written by hand rather than through a YAML library: at 100,000 hosts a dumper costs seconds.
Every string goes through json.dumps, whose output is valid YAML; the per-host lines come from
one template per node group (see _host_lines).
"""

from __future__ import annotations

import json

from ..hostlist import ansible_name, expand
from ..model import Cluster, HardwareProfile
from .common import group_addresses, header
from .slurm import MPS_PROGRAM, mps_nodes, withheld_files

PATH = "inventory/hosts.yml"


def _q(value) -> str:
    return json.dumps(value, sort_keys=True)


def hardware_vars(name: str, p: HardwareProfile) -> dict:
    return {
        "name": name,
        "model": p.model,
        "architecture": p.architecture,
        "sockets": p.sockets,
        "cores_per_socket": p.cores_per_socket,
        "threads_per_core": p.threads_per_core,
        "cpus": p.cpus,
        "memory_gib": p.memory_gib,
        "gpu_type": p.gpus.type if p.gpus else None,
        "gpu_devices": [d.file or f"/dev/nvidia{i}" for i, d in enumerate(p.gpus.devices)] if p.gpus else [],
    }


def _member_block(out: list[str], group: str, hosts: list[str], vars_: dict | None = None) -> None:
    out.append(f"    {group}:\n")
    if vars_:
        out.append("      vars:\n")
        for key, value in vars_.items():
            out.append(f"        {key}: {_q(value)}\n")
    out.append("      hosts:\n")
    if hosts:
        out.append("        " + ":\n        ".join(hosts) + ":\n")


def _host_lines(primary: str, hosts: list[str], columns: dict[str, list[str]]) -> str:
    """`host: {"ansible_host": ..., "hal_addresses": {...}}` for each host, by one template.

    Addresses are dotted quads and need no JSON quoting; network names are written as they
    are, as before ('%' escaped for the template).
    """
    pairs = ", ".join(f'"{net.replace("%", "%%")}": "%s"' for net in columns)
    fields = '"ansible_host": "%s", ' if primary in columns else ""
    template = f'        %s: {{{fields}"hal_addresses": {{{pairs}}}}}\n'
    values = [hosts, *([columns[primary]] if primary in columns else []), *columns.values()]
    return "".join(map(template.__mod__, zip(*values)))


def render(cluster: Cluster) -> dict[str, str]:
    primary = cluster.cluster.primary_network
    out = [
        header(cluster),
        "all:\n",
        "  vars:\n",
        f"    hal_cluster_name: {_q(cluster.cluster.name)}\n",
        f"    hal_cluster_domain: {_q(cluster.cluster.domain)}\n",
        '    hal_rendered_dir: "{{ inventory_dir }}/../files"\n',
        "  children:\n",
    ]
    # Node groups carry the host variables (each host is in exactly one node group).
    for group in cluster.nodes:
        out.append(f"    nodes_{ansible_name(group.name)}:\n")
        out.append("      vars:\n")
        out.append(f"        hal_role: {_q(group.role.value)}\n")
        if group.also:
            out.append(f"        hal_roles: {_q([r.value for r in group.roles])}\n")
        out.append(f"        hal_node_group: {_q(group.name)}\n")
        out.append("      hosts:\n")
        out.append(_host_lines(primary, *group_addresses(cluster, group)))
    for role in dict.fromkeys(r for g in cluster.nodes for r in g.roles):
        out.append(f"    role_{role.value}:\n      children:\n")
        out.extend(f"        nodes_{ansible_name(g.name)}:\n" for g in cluster.nodes if g.has(role))
    for name, profile in cluster.hardware.items():
        members = [g for g in cluster.nodes if g.hardware == name]
        if not members:
            continue
        out.append(f"    hw_{ansible_name(name)}:\n      vars:\n")
        out.append(f"        hal_hardware: {_q(hardware_vars(name, profile))}\n")
        out.append("      children:\n")
        out.extend(f"        nodes_{ansible_name(g.name)}:\n" for g in members)
    for part in cluster.slurm.partitions:
        _member_block(out, f"partition_{ansible_name(part.name)}", expand(part.nodes))
    services = cluster.services.model_dump()
    for service, expr in services.items():
        if expr:
            _member_block(out, f"service_{service}", expand(expr))
    if cluster.monitoring is not None and cluster.monitoring.grafana is not None:
        _member_block(out, "service_grafana", expand(cluster.monitoring.grafana.host))
    out.extend(_pool_blocks(cluster))
    out.append("    slurm_nodes:\n")
    if mps_nodes(cluster):
        # slurm.conf names hal-mps as every node's Prolog, Epilog and TaskProlog: the slurm role installs it.
        out.append(f"      vars:\n        hal_slurm_mps_program: {_q(MPS_PROGRAM)}\n")
    out.append("      children:\n")
    out.extend(f"        nodes_{ansible_name(g.name)}:\n" for g in cluster.groups_with_role(*_slurm_roles()))
    if cluster.slurm.configless:
        # The slurm role gives these nodes slurmd's --conf-server instead of the files it withholds.
        _member_block(
            out,
            "slurm_configless",
            list(cluster.configless_hosts),
            {"hal_slurm_withheld_files": withheld_files(cluster)},
        )
    return {PATH: "".join(out)}


def _pool_blocks(cluster: Cluster) -> list[str]:
    """Composable GPUs: a group pool_<name> of each pool's cabled hosts, each with its own
    hal_hardware as the active layout composes it (a host variable: it wins over the profile's
    group variable, so gpu_devices counts the pool GPUs the host holds)."""
    if cluster.composable is None:
        return []
    out = []
    for pool in cluster.composable.pools:
        out.append(f"    pool_{ansible_name(pool.name)}:\n      hosts:\n")
        for host in pool.host_names:
            group = cluster.group_of(host)
            profile = cluster.host_profile(host)
            if group is None or profile is None:
                out.append(f"        {host}:\n")
                continue
            out.append(f'        {host}: {{"hal_hardware": {_q(hardware_vars(group.hardware, profile))}}}\n')
    return out


def _slurm_roles():
    from ..model import Role

    return (Role.compute,)
