"""The Ansible inventory (YAML): groups per role, node group, hardware profile, partition and
service, with the host variables the roles need.

Written by hand rather than through a YAML library: at 100,000 hosts a dumper costs seconds.
Every string goes through json.dumps, whose output is valid YAML.
"""

from __future__ import annotations

import json

from ..hostlist import nodeset
from ..model import Cluster, HardwareProfile
from .common import ansible_name, group_hosts_with_addresses, header

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


def _member_block(out: list[str], group: str, hosts, vars_: dict | None = None) -> None:
    out.append(f"    {group}:\n")
    if vars_:
        out.append("      vars:\n")
        for key, value in vars_.items():
            out.append(f"        {key}: {_q(value)}\n")
    out.append("      hosts:\n")
    out.extend(f"        {h}:\n" for h in hosts)


def render(cluster: Cluster) -> dict[str, str]:
    primary = cluster.cluster.primary_network
    out = [
        header(cluster),
        "all:\n",
        "  vars:\n",
        f"    hal_cluster_name: {_q(cluster.cluster.name)}\n",
        f"    hal_cluster_domain: {_q(cluster.cluster.domain)}\n",
        "    hal_rendered_dir: \"{{ inventory_dir }}/../files\"\n",
        "  children:\n",
    ]
    # Node groups carry the host variables (each host is in exactly one node group).
    for group in cluster.nodes:
        out.append(f"    nodes_{ansible_name(group.name)}:\n")
        out.append("      vars:\n")
        out.append(f"        hal_role: {_q(group.role.value)}\n")
        out.append(f"        hal_node_group: {_q(group.name)}\n")
        out.append("      hosts:\n")
        for host, addrs in group_hosts_with_addresses(cluster, group):
            fields = []
            if primary in addrs:
                fields.append(f'"ansible_host": "{addrs[primary]}"')
            pairs = ", ".join(f'"{net}": "{a}"' for net, a in addrs.items())
            fields.append(f'"hal_addresses": {{{pairs}}}')
            out.append(f"        {host}: {{{', '.join(fields)}}}\n")
    for role in dict.fromkeys(g.role for g in cluster.nodes):
        out.append(f"    role_{role.value}:\n      children:\n")
        out.extend(f"        nodes_{ansible_name(g.name)}:\n" for g in cluster.nodes if g.role is role)
    for name, profile in cluster.hardware.items():
        members = [g for g in cluster.nodes if g.hardware == name]
        if not members:
            continue
        out.append(f"    hw_{ansible_name(name)}:\n      vars:\n")
        out.append(f"        hal_hardware: {_q(hardware_vars(name, profile))}\n")
        out.append("      children:\n")
        out.extend(f"        nodes_{ansible_name(g.name)}:\n" for g in members)
    for part in cluster.slurm.partitions:
        _member_block(out, f"partition_{ansible_name(part.name)}", nodeset(part.nodes))
    services = cluster.services.model_dump()
    for service, expr in services.items():
        if expr:
            _member_block(out, f"service_{service}", nodeset(expr))
    out.append("    slurm_nodes:\n      children:\n")
    out.extend(f"        nodes_{ansible_name(g.name)}:\n" for g in cluster.groups_with_role(*_slurm_roles()))
    return {PATH: "".join(out)}


def _slurm_roles():
    from ..model import Role

    return (Role.compute,)
