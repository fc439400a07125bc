"""slurm.conf as the plan needs it: the role's restart-or-reconfigure rule, and the nodes and
partitions that decide which jobs a change reaches.

The rule is the slurm role's (roles/slurm/vars/main.yml), with the same key list (the update
policy's `slurm.reconfigure_keys`): the keys of the lines in the symmetric difference of the
two files' non-comment, non-blank lines, each the text before its first '=', lower-cased; any
key outside the list, or any change to another cluster file, restarts slurmctld and every
slurmd; otherwise `scontrol reconfigure` and a slurmd reload apply it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..hostlist import expand, nodeset, pieces
from ..model import slurmtime
from ..model.slurmtime import limit_minutes


def conf_lines(text: str) -> list[str]:
    """Non-comment, non-blank lines, stripped (the role's `reject('match', '^(#|$)')`)."""
    return [s for s in (line.strip() for line in text.splitlines()) if s and not s.startswith("#")]


def changed_keys(old: str, new: str) -> list[str]:
    """Lower-cased keys of the lines one file has and the other has not, sorted."""
    diff = set(conf_lines(old)) ^ set(conf_lines(new))
    return sorted({line.split("=", 1)[0].lower() for line in diff})


def restart_required(keys: list[str], other_files_changed: bool, reconfigure_keys: list[str]) -> bool:
    allowed = {k.lower() for k in reconfigure_keys}
    return other_files_changed or any(k not in allowed for k in keys)


# ---- nodes and partitions --------------------------------------------------------------------
def _fields(line: str) -> dict[str, str]:
    """'NodeName=hal[01-16] CPUs=160 ...' -> {'NodeName': 'hal[01-16]', 'CPUs': '160', ...}."""
    out = {}
    for token in line.split():
        key, sep, value = token.partition("=")
        if sep:
            out[key] = value
    return out


@dataclass
class SlurmConf:
    """What slurm.conf says about its controllers, nodes (per host), node sets and partitions."""

    controllers: list[str] = field(default_factory=list)  # SlurmctldHost lines: the primary, then backups
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    nodesets: dict[str, str] = field(default_factory=dict)
    partitions: dict[str, dict[str, str]] = field(default_factory=dict)
    # Per-partition answers, computed once: every pending job asks them again.
    _cache: dict[tuple[str, str], object] = field(default_factory=dict, repr=False, compare=False)

    def _cached(self, kind: str, partition: str, compute):
        key = (kind, partition)
        if key not in self._cache:
            self._cache[key] = compute(partition)
        return self._cache[key]

    @classmethod
    def parse(cls, text: str) -> "SlurmConf":
        conf = cls()
        for line in conf_lines(text):
            key = line.split("=", 1)[0].lower()
            values = _fields(line)
            if key == "slurmctldhost":
                conf.controllers.append(values["SlurmctldHost"].split("(", 1)[0])  # host(address): the host
            elif key == "nodename" and values.get("NodeName", "").upper() != "DEFAULT":
                attrs = {k: v for k, v in values.items() if k != "NodeName"}
                for host in expand(values["NodeName"]):
                    conf.nodes[host] = attrs
            elif key == "nodeset":
                conf.nodesets[values["NodeSet"]] = values.get("Nodes", "")
            elif key == "partitionname" and values.get("PartitionName", "").upper() != "DEFAULT":
                conf.partitions[values["PartitionName"]] = values
        return conf

    @staticmethod
    def cluster_name(text: str) -> str:
        """ClusterName, as the role reads it (first match, any case)."""
        for line in conf_lines(text):
            key, _sep, value = line.partition("=")
            if key.lower() == "clustername":
                return value.split()[0] if value.split() else ""
        return ""

    def partition_hosts(self, name: str) -> set[str]:
        return self._cached("hosts", name, self._partition_hosts)

    def _partition_hosts(self, name: str) -> set[str]:
        nodes = self.partitions.get(name, {}).get("Nodes", "")
        hosts: set[str] = set()
        for part in pieces(nodes) if nodes else []:
            if part.upper() == "ALL":
                hosts |= set(self.nodes)
            elif part in self.nodesets:
                hosts |= set(expand(self.nodesets[part]))
            else:
                hosts |= set(nodeset(part))
        return hosts

    def max_time(self, partition: str) -> float | None:
        """MaxTime of a partition in minutes; None: unlimited or not set."""
        return limit_minutes(self.partitions.get(partition, {}).get("MaxTime"))

    def partition_qos(self, partition: str) -> str | None:
        return self.partitions.get(partition, {}).get("QOS") or None

    def memory_cap(self, partition: str) -> int | None:
        """The most memory (MB) a job may ask per node in a partition: its largest RealMemory,
        lowered by MaxMemPerNode; None when nothing says."""
        return self._cached("memory", partition, self._memory_cap)

    def _memory_cap(self, partition: str) -> int | None:
        caps = [
            int(self.nodes[h]["RealMemory"])
            for h in self.partition_hosts(partition)
            if self.nodes.get(h, {}).get("RealMemory", "").isdigit()
        ]
        cap = max(caps) if caps else None
        limit = self.partitions.get(partition, {}).get("MaxMemPerNode", "")
        if limit.isdigit():
            cap = int(limit) if cap is None else min(cap, int(limit))
        return cap

    def gpu_cap(self, partition: str) -> int:
        """The most GPUs one node of a partition has."""
        return self._cached("gpus", partition, self._gpu_cap)

    def _gpu_cap(self, partition: str) -> int:
        return max((gpus(self.nodes.get(h, {}).get("Gres", "")) for h in self.partition_hosts(partition)), default=0)


def gpus(gres: str | None) -> int:
    """GPUs in a GRES or TRES string: 'gpu:v100:4', 'gres:gpu:4', 'gres/gpu=8', several comma-separated."""
    total = 0
    for item in (gres or "").split(","):
        item = re.sub(r"\(.*\)$", "", item.strip())
        parts = re.split(r"[:=/]", item)
        if "gpu" in parts and parts[-1].isdigit():
            total += int(parts[-1])
    return total


def definition_changes(old: SlurmConf, new: SlurmConf) -> dict[str, list[str]]:
    """Host -> 'Key old -> new' for each node attribute that differs (hosts in both only)."""
    out = {}
    for host in sorted(old.nodes.keys() & new.nodes.keys()):
        a, b = old.nodes[host], new.nodes[host]
        diffs = [f"{k} {a.get(k, '-')} -> {b.get(k, '-')}" for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)]
        if diffs:
            out[host] = diffs
    return out


# ---- units --------------------------------------------------------------------------------------
def clock(minutes: float | None) -> str:
    """Minutes as Slurm prints a limit (slurmtime.clock); UNLIMITED for None."""
    return "UNLIMITED" if minutes is None else slurmtime.clock(minutes)


def megabytes(mb: int) -> str:
    """Slurm's memory sizes: 204800 -> 200G, 1500 -> 1500M."""
    return f"{mb // 1024}G" if mb % 1024 == 0 else f"{mb}M"
