"""The Slurm Wrapper Suite's virtual-partition table, resolved against the hardware.

swrun/swbatch read this file on login nodes; everything they need about the hardware is in
it, so they never disagree with slurm.conf (both come from the same model).
"""

from __future__ import annotations

import json

from ..hostlist import common_count, nodeset
from ..model import Cluster, HardwareProfile, Role
from .common import json_comment

PATH = "files/etc/swsuite/virtual-partitions.json"


def _partition_profiles(cluster: Cluster, partition: str) -> list[tuple[HardwareProfile, int]]:
    part = next((p for p in cluster.slurm.partitions if p.name == partition), None)
    if part is None:
        return []
    members = nodeset(part.nodes)
    out: dict[str, int] = {}
    for g in cluster.groups_with_role(Role.compute):
        n = common_count(nodeset(g.hosts), members)
        if n:
            out[g.hardware] = out.get(g.hardware, 0) + n
    return [(cluster.hardware[name], n) for name, n in out.items()]


def table(cluster: Cluster) -> dict:
    vps = {}
    by_partition: dict[str, list[tuple[HardwareProfile, int]]] = {}
    for vp in cluster.swsuite.virtual_partitions:
        if vp.partition not in by_partition:
            by_partition[vp.partition] = _partition_profiles(cluster, vp.partition)
        profiles = by_partition[vp.partition]
        if not profiles:
            continue
        # The node build that offers the most GPUs (or CPUs for cpu partitions) defines the
        # shape of a job; checks make sure the request fits it.
        profile, count = max(profiles, key=lambda pc: (pc[0].gpu_count, pc[0].cpus, pc[1]))
        entry = {
            "kind": vp.kind,
            "partition": vp.partition,
            "gpus": vp.gpus,
            "nodes": vp.nodes,
            "mem_per_cpu_mib": vp.mem_per_cpu_mib,
            "max_time_hours": vp.max_time_hours,
            "default_time_hours": vp.default_time_hours,
            "description": vp.description,
            "node": {
                "sockets": profile.sockets,
                "cores_per_socket": profile.cores_per_socket,
                "threads_per_core": profile.threads_per_core,
                "real_memory_mib": cluster.real_memory_mib(profile),
                "gpu_type": profile.gpus.type if profile.gpus else None,
                "gpu_sockets": [d.socket for d in profile.gpus.devices] if profile.gpus else [],
                "count": count,
            },
        }
        vps[vp.name] = entry
    return {"cluster": cluster.cluster.name, "virtual_partitions": vps}


def render(cluster: Cluster) -> dict[str, str]:
    body = json.dumps(
        {"_comment": json_comment(cluster), **table(cluster)},
        indent=2,
        sort_keys=True,
    )
    return {PATH: body + "\n"}
