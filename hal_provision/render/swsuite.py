"""The Slurm Wrapper Suite's virtual-partition table, resolved against the hardware.

swrun/swbatch read this file on login nodes; everything they need about the hardware is in
it, so they never disagree with slurm.conf (both come from the same model).
"""

from __future__ import annotations

import json

from ..model import Cluster
from .common import json_comment

PATH = "files/etc/swsuite/virtual-partitions.json"


def table(cluster: Cluster) -> dict:
    """Each virtual partition with the node build its jobs are shaped for (Cluster.job_node);
    one whose partition has no compute node is left out, and so is one the active composable
    layout hides, listed under "_hidden" with why (Cluster.hidden_virtual_partitions)."""
    vps = {}
    hidden = cluster.hidden_virtual_partitions
    for vp in cluster.swsuite.virtual_partitions:
        node = cluster.job_node(vp.partition)
        if node is None or vp.name in hidden:
            continue
        vps[vp.name] = {
            "kind": vp.kind,
            "partition": vp.partition,
            "gpus": vp.gpus,
            "nodes": vp.nodes,
            **({"shards": vp.shards} if vp.shards is not None else {}),
            "mem_per_cpu_mib": vp.mem_per_cpu_mib,
            "max_time_hours": vp.max_time_hours,
            "default_time_hours": vp.default_time_hours,
            "description": vp.description,
            "node": node,
        }
    return {
        "cluster": cluster.cluster.name,
        "virtual_partitions": vps,
        **({"_hidden": list(hidden.values())} if hidden else {}),
    }


def render(cluster: Cluster) -> dict[str, str]:
    body = json.dumps(
        {"_comment": json_comment(cluster), **table(cluster)},
        indent=2,
        sort_keys=True,
    )
    return {PATH: body + "\n"}
