"""Spectrum Scale tuning the model asks for: the desired settings per scope (the cluster and
each node class), what a node class ends up with (its own, the cluster's, GPFS's defaults), the
memory the daemon's caches then take, and what counts as the same value. Read by the checks,
the storage renderer and the tuning plan (hal_provision/model/gpfs_plan.py, which compares it with
`mmlsconfig -Y`)."""

from __future__ import annotations

from dataclasses import dataclass

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet

from ..hostlist import nodeset
from . import Cluster, Gpfs, NodeClass
from .storage import GpfsTuning, size_bytes

CLUSTER = "cluster"
"""Scope name of the cluster-wide settings (mmlsconfig's [common] section)."""

DEFAULTS: dict[str, str] = {
    # GPFS's defaults (Spectrum Scale 5.0 documentation) for the attributes the model types.
    # Used to read an absent mmlsconfig entry: mmlsconfig lists only values that differ.
    "pagepool": "1G",
    "nsdBufSpace": "30",
    "nsdMaxWorkerThreads": "512",
    "nsdMinWorkerThreads": "16",
    "nsdThreadsPerQueue": "3",
    "workerThreads": "48",
    "maxFilesToCache": "4000",
    "maxStatCache": "1000",
    "maxMBpS": "2048",
    "maxblocksize": "4M",
    "pagepoolMaxPhysMemPct": "75",
}

SIZE_ATTRIBUTES = frozenset({"pagepool", "maxblocksize"})

IMMEDIATE = frozenset(
    {
        # Attributes `mmchconfig -i` accepts (immediate and permanent), from the mmchconfig
        # reference of Spectrum Scale 5.0. Every other attribute is treated as needing a daemon
        # restart: the safe side, a restart that turns out unneeded costs a maintenance window,
        # never a false belief that a change is live.
        "pagepool",
        "nsdBufSpace",
        "maxMBpS",
        "ignorePrefetchLUNCount",
        "nsdInlineWriteMax",
        "nsdMultiQueue",
        "pitWorkerThreadsPerNode",
        "readReplicaPolicy",
        "seqDiscardThreshold",
        "syncbuffsperiteration",
        "unmountOnDiskFail",
        "verbsRdmaRoCEToS",
        "deadlockDetectionThreshold",
        "deadlockDataCollectionDailyLimit",
        "expelDataCollectionDailyLimit",
    }
)

OFFLINE = frozenset({"maxblocksize"})
"""Attributes mmchconfig changes only while GPFS is down on every node: planned, never run."""

FILE_CACHE_ENTRY_BYTES = 3 * 1024
STAT_CACHE_ENTRY_BYTES = 400
"""IBM's rule of thumb: memory = pagepool + maxFilesToCache x 3 KiB + maxStatCache x 400 B."""


def tuning_values(tuning: GpfsTuning) -> dict[str, str]:
    """The attributes a tuning block sets, as mmchconfig values (typed ones first, then other)."""
    out = {
        name: str(value)
        for name in GpfsTuning.model_fields
        if name != "other" and (value := getattr(tuning, name)) is not None
    }
    out.update(tuning.other)
    return out


def desired_state(gpfs: Gpfs) -> dict[str, dict[str, str]]:
    """Scope -> attribute -> value: CLUSTER first, then each node class in model order."""
    return {CLUSTER: tuning_values(gpfs.tuning), **{c.name: tuning_values(c.tuning) for c in gpfs.node_classes}}


def effective(gpfs: Gpfs, node_class: NodeClass) -> dict[str, tuple[str, str]]:
    """attribute -> (value, where it comes from: 'class', 'cluster' or 'default') for a class."""
    out = {name: (value, "default") for name, value in DEFAULTS.items()}
    out.update({name: (value, "cluster") for name, value in tuning_values(gpfs.tuning).items()})
    out.update({name: (value, "class") for name, value in tuning_values(node_class.tuning).items()})
    return out


@dataclass(frozen=True)
class CacheMemory:
    pagepool: int
    files: int
    stats: int

    @property
    def total(self) -> int:
        return self.pagepool + self.files + self.stats


def cache_memory(values: dict[str, str]) -> CacheMemory:
    """Memory the daemon's caches take with these settings (IBM's rule of thumb), in bytes."""
    get = lambda name: values.get(name, DEFAULTS[name])  # noqa: E731
    return CacheMemory(
        pagepool=size_bytes(get("pagepool")),
        files=int(get("maxFilesToCache")) * FILE_CACHE_ENTRY_BYTES,
        stats=int(get("maxStatCache")) * STAT_CACHE_ENTRY_BYTES,
    )


def member_memory(cluster: Cluster, hosts: NodeSet) -> list[tuple[int, str, NodeSet]]:
    """(memory GiB, what they are, which hosts) for each build among the known members of `hosts`:
    one entry per hardware profile of model nodes, one per appliance server."""
    out = []
    for name, profile in cluster.hardware.items():
        members = NodeSet(resolver=RESOLVER_NOGROUP)
        for group in cluster.nodes:
            if group.hardware == name:
                group_hosts = nodeset(group.hosts)
                if group_hosts.issubset(hosts):  # the usual case: no intersection to copy
                    members.update(group_hosts)
                    continue
                small, large = (hosts, group_hosts) if len(hosts) <= len(group_hosts) else (group_hosts, hosts)
                members.update(small.intersection(large))
        if len(members):
            out.append((profile.memory_gib, f"'{name}' nodes", members))
    for name, server in cluster.storage.appliance_servers.items():
        if name in hosts:
            out.append((server.memory_gib, "appliance server", nodeset(name)))
    return out


def same_value(attribute: str, a: str | None, b: str | None) -> bool:
    """Whether two mmchconfig values mean the same: sizes in bytes (4G = 4096M), numbers as numbers."""
    if a is None or b is None:
        return a is b
    if attribute in SIZE_ATTRIBUTES:
        try:
            return size_bytes(a) == size_bytes(b)
        except ValueError:
            pass
    if a.strip().lstrip("-").isdigit() and b.strip().lstrip("-").isdigit():
        return int(a) == int(b)
    return a.strip() == b.strip()
