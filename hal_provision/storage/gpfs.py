"""Spectrum Scale tuning: the settings the model asks for, and the plan that reaches them.

The desired state is one mapping per scope: the cluster-wide settings (mmchconfig without -N)
and one per node class (mmchconfig ... -N <class>). The current state comes from
`mmlsconfig -Y`, which lists only the values that differ from GPFS's defaults, each with the
node list it applies to (empty: cluster-wide). `plan` compares the two and returns the
changes, grouped into mmchconfig commands: changes mmchconfig accepts with -i (immediate and
permanent) in one command, the rest, which take effect at the next daemon start, in another;
the plan names the classes that then need a restart. Nothing here runs a command.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import unquote

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet

from ..hostlist import nodeset
from ..model import Cluster, Gpfs, NodeClass
from ..model.storage import GpfsTuning, size_bytes

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

IMMEDIATE = frozenset({
    # Attributes `mmchconfig -i` accepts (immediate and permanent), from the mmchconfig
    # reference of Spectrum Scale 5.0. Every other attribute is treated as needing a daemon
    # restart: the safe side, a restart that turns out unneeded costs a maintenance window,
    # never a false belief that a change is live.
    "pagepool", "nsdBufSpace", "maxMBpS", "ignorePrefetchLUNCount", "nsdInlineWriteMax",
    "nsdMultiQueue", "pitWorkerThreadsPerNode", "readReplicaPolicy", "seqDiscardThreshold",
    "syncbuffsperiteration", "unmountOnDiskFail", "verbsRdmaRoCEToS",
    "deadlockDetectionThreshold", "deadlockDataCollectionDailyLimit", "expelDataCollectionDailyLimit",
})

OFFLINE = frozenset({"maxblocksize"})
"""Attributes mmchconfig changes only while GPFS is down on every node: planned, never run."""

FILE_CACHE_ENTRY_BYTES = 3 * 1024
STAT_CACHE_ENTRY_BYTES = 400
"""IBM's rule of thumb: memory = pagepool + maxFilesToCache x 3 KiB + maxStatCache x 400 B."""


class MmlsconfigError(ValueError):
    """Output that is not `mmlsconfig -Y`."""


# ---- desired state --------------------------------------------------------------------------
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


# ---- current state --------------------------------------------------------------------------
@dataclass(frozen=True)
class Setting:
    attribute: str
    value: str
    nodes: tuple[str, ...]  # node classes or nodes it applies to; () = cluster-wide


def parse_mmlsconfig(text: str) -> list[Setting]:
    """The settings of `mmlsconfig -Y` output, in the order listed.

    Records look like `mmlsconfig::0:1:::pagepool:4G:computeNodes:`; fields are
    percent-encoded (`:` inside a value is `%3A`). Lines of any other kind are ignored, so a
    stray warning in the output cannot become a setting.
    """
    settings: list[Setting] = []
    seen_header = False
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) < 9 or fields[0] != "mmlsconfig":
            continue
        if fields[2] == "HEADER":
            if fields[6:9] != ["configParameter", "value", "nodeList"]:
                raise MmlsconfigError(f"unexpected mmlsconfig -Y header: {line!r}")
            seen_header = True
            continue
        attribute, value, nodes = (unquote(f) for f in fields[6:9])
        settings.append(Setting(attribute, value, tuple(n for n in nodes.split(",") if n)))
    if not seen_header:
        raise MmlsconfigError("no mmlsconfig -Y header line: is this the output of `mmlsconfig -Y`?")
    return settings


def current_state(settings: list[Setting]) -> dict[str, dict[str, str]]:
    """Scope -> attribute -> value as listed (later entries win, as in GPFS's own lookup)."""
    out: dict[str, dict[str, str]] = {CLUSTER: {}}
    for s in settings:
        for scope in s.nodes or (CLUSTER,):
            out.setdefault(scope, {})[s.attribute] = s.value
    return out


# ---- the plan -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Change:
    scope: str
    attribute: str
    current: str | None  # None: GPFS's default, which this module does not know
    desired: str
    source: str  # where `current` comes from: "set" for the scope, "cluster" (inherited) or "default"

    @property
    def immediate(self) -> bool:
        return self.attribute in IMMEDIATE

    @property
    def offline(self) -> bool:
        return self.attribute in OFFLINE

    def describe(self) -> str:
        was = {"set": "{}", "cluster": "{} (cluster-wide)", "default": "{} (GPFS default)"}[self.source].format(
            "unset" if self.current is None else self.current)
        when = "offline only" if self.offline else "now (-i)" if self.immediate else "after a restart"
        return f"{self.scope}: {self.attribute} {was} -> {self.desired} [{when}]"


def _command_order(attribute: str) -> tuple[int, str]:
    # mmchconfig: "specify maxblocksize first if you are decreasing the values", "pagepool
    # first if you are increasing" them; the rest in name order, so commands are stable.
    return ({"maxblocksize": 0, "pagepool": 1}.get(attribute, 2), attribute)


@dataclass
class Plan:
    changes: list[Change] = field(default_factory=list)
    current: dict[str, dict[str, str]] = field(default_factory=dict)
    desired: dict[str, dict[str, str]] = field(default_factory=dict)
    overrides: list[Setting] = field(default_factory=list)  # managed attributes set for other node lists

    @property
    def applicable(self) -> list[Change]:
        return [c for c in self.changes if not c.offline]

    @property
    def deferred(self) -> list[Change]:
        return [c for c in self.changes if c.offline]

    def commands(self) -> list[list[str]]:
        """mmchconfig argument vectors: per scope, the immediate changes (-i), then the rest."""
        out: list[list[str]] = []
        for scope in self.desired:
            for immediate in (True, False):
                batch = sorted(
                    (c for c in self.applicable if c.scope == scope and c.immediate is immediate),
                    key=lambda c: _command_order(c.attribute),
                )
                if batch:
                    argv = ["mmchconfig", ",".join(f"{c.attribute}={c.desired}" for c in batch)]
                    argv += ["-i"] if immediate else []
                    argv += [] if scope == CLUSTER else ["-N", scope]
                    out.append(argv)
        return out

    def restart(self) -> list[str]:
        """Scopes whose daemons must restart for a planned change to take effect."""
        scopes = {c.scope for c in self.applicable if not c.immediate}
        return [s for s in self.desired if s in scopes]

    def view(self, which: str) -> str:
        """The managed settings as mmlsconfig groups them, before or after the plan.

        Only planned changes differ between the two views: a value listed in another spelling
        (65536M for 64G) shows as the model writes it, so a diff shows real changes only."""
        planned = {(c.scope, c.attribute): c for c in self.changes}
        lines = []
        for scope, wanted in self.desired.items():
            lines.append(f"[{'common' if scope == CLUSTER else scope}]")
            for attribute in sorted(wanted):
                change = planned.get((scope, attribute))
                value = wanted[attribute]
                if which == "before" and change is not None:
                    value = change.current if change.current is not None else "(default)"
                lines.append(f"{attribute} {value}")
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict:
        return {
            "changed": bool(self.applicable),
            "changes": [
                {"scope": c.scope, "attribute": c.attribute, "current": c.current, "desired": c.desired,
                 "immediate": c.immediate, "offline": c.offline, "text": c.describe()}
                for c in self.changes
            ],
            "commands": self.commands(),
            "restart": self.restart(),
            "deferred": [c.describe() for c in self.deferred],
            "overrides": [f"{s.attribute} {s.value} on {','.join(s.nodes)}" for s in self.overrides],
            "diff": {"before": self.view("before"), "after": self.view("after")},
        }


def plan(desired: dict[str, dict[str, str]], settings: list[Setting]) -> Plan:
    """What mmchconfig must change so that every scope has its desired values.

    A class's current value is its own entry, else the cluster-wide one (after this plan's
    cluster-wide changes, which run first), else GPFS's default. Entries for node lists the
    model does not name stay as they are: they are the administrator's.
    """
    current = current_state(settings)
    changes: list[Change] = []
    cluster_after = {**current[CLUSTER], **desired.get(CLUSTER, {})}
    for scope, wanted in desired.items():
        own = current.get(scope, {})
        for attribute, value in wanted.items():
            if attribute in own:
                was, source = own[attribute], "set"
            elif scope != CLUSTER and attribute in cluster_after:
                was, source = cluster_after[attribute], "cluster"
            else:
                was, source = DEFAULTS.get(attribute), "default"
            if not same_value(attribute, was, value):
                changes.append(Change(scope, attribute, was, value, source))
    managed = {a for wanted in desired.values() for a in wanted}
    overrides = [s for s in settings if s.nodes and s.attribute in managed and not set(s.nodes) <= set(desired)]
    return Plan(changes=changes, current=current, desired=desired, overrides=overrides)
