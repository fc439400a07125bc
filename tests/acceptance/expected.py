"""What Slurm should report, computed from the cluster model alone (never from rendered text).

The acceptance tests compare these with what the real daemons loaded, so a renderer bug
cannot hide behind an expectation derived from the renderer's own output.
"""

from __future__ import annotations

from dataclasses import dataclass

from ClusterShell.NodeSet import NodeSet

from hal_provision.hostlist import nodeset, union
from hal_provision.model import Cluster, HardwareProfile, NodeGroup, Role


@dataclass(frozen=True)
class NodeExpectation:
    group: NodeGroup
    profile: HardwareProfile  # as the active layout composes it (composable GPUs)
    real_memory_mib: int
    pool_features: tuple[str, ...] = ()  # pool_<name> on a host cabled to a GPU pool

    @property
    def gres(self) -> str:
        """As scontrol shows it: the GPUs by type, then shards or MPS shares (GPUs x per GPU), or
        the MIG instances as GPU types (the group's gpu_sharing)."""
        gpus, sharing = self.profile.gpus, self.group.gpu_sharing
        if not gpus:
            return "(null)"
        n = len(gpus.devices)
        if sharing is not None and sharing.mig:
            return ",".join(f"gpu:{m.profile}:{m.count * n}" for m in sharing.mig)
        shares = ""
        if sharing is not None and sharing.shards_per_gpu:
            shares = f",shard:{sharing.shards_per_gpu * n}"
        elif sharing is not None and sharing.mps_per_gpu:
            shares = f",mps:{sharing.mps_per_gpu * n}"
        return f"gpu:{gpus.type}:{n}{shares}"

    @property
    def features(self) -> set[str]:
        return {*self.profile.features, *self.group.features, *self.pool_features}


def compute_nodes(cluster: Cluster) -> dict[str, NodeExpectation]:
    """Every Slurm node (compute role) with its hardware, by host name: composed hosts with the
    pool GPUs the active layout gives them (the model's Cluster.node_builds)."""
    out = {}
    for group in cluster.groups_with_role(Role.compute):
        for build in cluster.node_builds(group):
            for host in nodeset(build.hosts):
                out[host] = NodeExpectation(
                    group, build.profile, cluster.real_memory_mib(build.profile), build.features
                )
    return out


def compute_groups(cluster: Cluster) -> list[tuple[str, NodeExpectation]]:
    """(first host, expectation) for each build of each compute group: one emulated node per build."""
    nodes = compute_nodes(cluster)
    return [
        (nodeset(b.hosts)[0], nodes[nodeset(b.hosts)[0]])
        for g in cluster.groups_with_role(Role.compute)
        for b in cluster.node_builds(g)
    ]


def gpu_cores(profile: HardwareProfile, index: int) -> str:
    """Slurm's core range of the socket GPU `index` hangs off: socket s owns cores
    s*cores_per_socket .. (s+1)*cores_per_socket-1 (cores, not hardware threads)."""
    socket = profile.gpus.devices[index].socket
    first = socket * profile.cores_per_socket
    return f"{first}-{first + profile.cores_per_socket - 1}"


def gpu_links(profile: HardwareProfile, index: int) -> str:
    """gres.conf Links= of GPU `index`: NVLink counts to every GPU, -1 for itself."""
    row = profile.gpus.nvlink[index]
    return ",".join("-1" if j == index else str(n) for j, n in enumerate(row))


def gpu_file(profile: HardwareProfile, index: int) -> str:
    return profile.gpus.devices[index].file or f"/dev/nvidia{index}"


@dataclass(frozen=True)
class SwitchExpectation:
    level: int
    nodes: NodeSet  # every Slurm node below the switch
    children: frozenset[str]


def switches(cluster: Cluster) -> dict[str, SwitchExpectation]:
    """The switches slurmctld should know: those with Slurm nodes somewhere below them."""
    fabric = cluster.fabric
    if fabric is None:
        return {}
    slurm_nodes = cluster.slurm_nodes
    every = fabric.every_switch()  # explicit and compact entries alike
    direct = {name: NodeSet() for _i, name, _sw in every}
    placed = NodeSet()  # a node cabled on several ports (rails): under its lowest port's switch alone
    for link in sorted(fabric.links, key=lambda link: link.port):
        for switch, hosts in link.runs():
            mine = nodeset(hosts).intersection(slurm_nodes).difference(placed)
            direct[switch].update(mine)
        for _switch, hosts in link.runs():
            placed.update(nodeset(hosts).intersection(slurm_nodes))
    kids = {name: [] for _i, name, _sw in every}
    for _i, name, sw in every:
        for up in sw.uplinks:
            kids[up].append(name)

    def below(name: str) -> NodeSet:
        return union([direct[name], *(below(k) for k in kids[name])])

    def level(name: str) -> int:
        known = [level(k) for k in kids[name] if len(below(k))]
        return 1 + max(known) if known else 0

    return {
        name: SwitchExpectation(level(name), below(name), frozenset(k for k in kids[name] if len(below(k))))
        for name in direct
        if len(below(name))
    }
