"""Checks: Slurm partitions, QOS, ports, memory and job priority."""

from __future__ import annotations

from ..findings import error, warning
from ..hostlist import nodeset, outside, overlap, union
from ..model import Cluster
from ..model import slurmtime
from ..model.slurm import PRIORITY_MAX
from ..model.storage import lies_under
from . import check
from .common import (
    compute_hosts_outside,
    did_you_mean,
    duplicates,
    makeup,
    nearest_host,
    shown,
    unique,
)


def _partitions(c: Cluster):
    for i, part in enumerate(c.slurm.partitions):
        yield i, part, ("slurm", "partitions", i)


@check
def partition_names_unique(c: Cluster):
    yield from unique(c.slurm.partitions, ("slurm", "partitions"), "partition name", why="Slurm needs unique names")


@check
def qos_names_unique(c: Cluster):
    yield from unique(c.slurm.qos, ("slurm", "qos"), "QOS name", why="Slurm needs unique names")


@check
def partition_qos_declared(c: Cluster):
    declared = [q.name for q in c.slurm.qos]
    for _i, part, path in _partitions(c):
        if part.qos is not None and part.qos not in declared:
            yield error(
                (*path, "qos"),
                f"partition {part.name!r} uses QOS {part.qos!r}, which is not declared under slurm.qos"
                + did_you_mean(part.qos, declared),
            )


def _longer(time: str, limit: str) -> bool:
    """A Slurm time is longer than a limit (UNLIMITED is longer than any finite limit)."""
    t, m = slurmtime.minutes(time), slurmtime.minutes(limit)
    return m is not None and (t is None or t > m)


@check
def partition_default_time_within_max(c: Cluster):
    # slurmctld logs "DefaultTime exceeds MaxTime" and drops the DefaultTime: jobs without
    # --time would get MaxTime, not what the model says.
    for _i, part, path in _partitions(c):
        default, limit = part.default_time, part.max_time
        if default is not None and _longer(default, limit):
            yield error(
                (*path, "default_time"),
                f"partition {part.name!r}: DefaultTime {default} is longer than MaxTime {limit}; "
                "slurmctld ignores such a DefaultTime, so jobs without --time would get MaxTime",
            )


@check
def qos_max_wall_within_partition_max_time(c: Cluster):
    # A partition's MaxTime applies to every job in it, whatever its QOS (unless the QOS has
    # the PartitionTimeLimit flag, which the model does not set): a longer MaxWall never bites.
    by_name = {q.name: (i, q) for i, q in enumerate(c.slurm.qos)}
    for _i, part, _path in _partitions(c):
        if part.qos not in by_name:
            continue
        qi, qos = by_name[part.qos]
        wall, limit = qos.max_wall, part.max_time
        if wall is not None and _longer(wall, limit):
            yield warning(
                ("slurm", "qos", qi, "max_wall"),
                f"QOS {qos.name!r} allows MaxWall {wall}, but partition {part.name!r}, which uses it, "
                f"has MaxTime {limit}: the partition's limit stops jobs first, so this MaxWall never applies",
            )


@check
def qos_max_wall_within_some_partition(c: Cluster):
    """A QOS no partition names (given through associations) whose MaxWall is longer than every
    partition's MaxTime: whatever partition its jobs run in stops them first."""
    named = {p.qos for p in c.slurm.partitions}
    limits = [(p.name, p.max_time, slurmtime.minutes(p.max_time)) for p in c.slurm.partitions]
    if not limits or any(m is None for _n, _t, m in limits):
        return  # a partition without MaxTime lets any MaxWall apply
    name, longest, most = max(limits, key=lambda item: item[2])
    for qi, qos in enumerate(c.slurm.qos):
        wall = slurmtime.minutes(qos.max_wall) if qos.max_wall else None
        if qos.name in named or qos.max_wall is None or (wall is not None and wall <= most):
            continue
        yield warning(
            ("slurm", "qos", qi, "max_wall"),
            f"QOS {qos.name!r} allows MaxWall {qos.max_wall}, longer than every partition's MaxTime (the longest: "
            f"{name!r}, {longest}): a job under it is stopped by its partition's limit first, so this MaxWall never "
            f"applies; lower it to at most {longest}, or raise a partition's max_time",
        )


@check
def one_default_partition(c: Cluster):
    defaults = [(i, p) for i, p in enumerate(c.slurm.partitions) if p.default]
    if not defaults:
        yield warning(
            ("slurm", "partitions"), "no partition has default: true; jobs that name no partition will be rejected"
        )
        return
    (first_index, first), *others = defaults
    for i, part in others:
        yield error(
            ("slurm", "partitions", i, "default"),
            f"partition {part.name!r} is a second default partition (slurm.partitions[{first_index}] "
            f"{first.name!r} is one already); mark exactly one partition default: true",
        )


@check
def configless_reaches_a_node(c: Cluster):
    # Controllers, login, development and portal hosts keep the pushed files (Cluster.configless_hosts):
    # where every Slurm node is one of them, configless mode only adds SlurmctldParameters.
    if c.slurm.configless and len(c.slurm_nodes) and not len(c.configless_hosts):
        yield warning(
            ("slurm", "configless"),
            f"no Slurm node fetches its configuration from slurmctld: every Slurm node, {shown(c.slurm_nodes)}, is a "
            "controller, login, development or portal host, which keep the pushed files; configless "
            "changes nothing but slurm.conf's SlurmctldParameters",
        )


@check
def partition_nodes_are_compute(c: Cluster):
    for _i, part, path in _partitions(c):
        not_slurm = outside(nodeset(part.nodes), c.slurm_nodes)
        if not len(not_slurm):
            continue
        unknown = outside(not_slurm, c.all_hosts)
        if len(unknown):
            yield error(
                (*path, "nodes"),
                f"partition {part.name!r} names {shown(unknown)}, not in any node group" + nearest_host(c, unknown),
            )
        non_compute = outside(not_slurm, unknown)
        if len(non_compute):
            roles = sorted({r.value for g in c.nodes if len(overlap(non_compute, nodeset(g.hosts))) for r in g.roles})
            yield error(
                (*path, "nodes"),
                f"partition {part.name!r} names {shown(non_compute)}: {'/'.join(roles)} nodes, "
                "not compute nodes; only compute nodes run slurmd",
            )


@check
def compute_nodes_in_a_partition(c: Cluster):
    """Error, not warning: such a node runs slurmd and is counted as capacity, yet no job can
    ever reach it; a partition in state DOWN is the way to set nodes aside on purpose."""
    for i, idle in compute_hosts_outside(c, union(part.nodes for part in c.slurm.partitions)):
        yield error(
            ("nodes", i, "hosts"),
            f"no Slurm partition includes compute nodes {shown(idle)}, so no job can run there; "
            "add them to a partition's nodes",
        )


@check
def slurm_ports_distinct(c: Cluster):
    s = c.slurm
    ports = [("controller_port", s.controller_port), ("slurmd_port", s.slurmd_port), ("dbd_port", s.dbd_port)]
    for i, first in duplicates([port for _key, port in ports]):
        yield error(
            ("slurm", ports[i][0]),
            f"{ports[i][0]} {ports[i][1]} is also {ports[first][0]}; the daemons need distinct ports",
        )


@check
def real_memory_positive(c: Cluster):
    reserve = c.slurm.memory_reserve_mib
    for name in c.compute_hosts_by_profile:
        profile = c.hardware[name]
        real = c.real_memory_mib(profile)
        if real <= 0:
            yield error(
                ("slurm", "memory_reserve_mib"),
                f"RealMemory of {name!r} nodes would be {profile.memory_gib} GiB - {reserve} MiB = "
                f"{real} MiB; keep memory_reserve_mib below {profile.memory_gib * 1024}",
            )


@check
def def_mem_per_cpu_fits(c: Cluster):
    """Warning, not error: Slurm accepts the setting and small jobs run, but a job that asks
    for every CPU of a node and no memory would ask for more than the node has."""
    by_profile = c.compute_hosts_by_profile
    for i, part, path in _partitions(c):
        if part.def_mem_per_cpu_mib is None:
            per_cpu, where = c.def_mem_per_cpu_mib, ("slurm", "def_mem_per_cpu_mib")
        else:
            per_cpu, where = part.def_mem_per_cpu_mib, (*path, "def_mem_per_cpu_mib")
        for name, _count in makeup(nodeset(part.nodes), by_profile):
            profile = c.hardware[name]
            real = c.real_memory_mib(profile)
            if 0 < real < per_cpu * profile.cpus:
                yield warning(
                    where,
                    f"DefMemPerCPU {per_cpu} MiB x {profile.cpus} CPUs of a {name!r} node in "
                    f"partition {part.name!r} = {per_cpu * profile.cpus} MiB, above its RealMemory "
                    f"{real} MiB; a job using all CPUs could never start: use at most "
                    f"{real // profile.cpus} MiB",
                )


PRIORITY = ("slurm", "priority")


def _policies_in_use(c: Cluster) -> list[tuple[str, str, str]]:
    """Each priority policy the model sets, as (what, who sets it, the weight that carries it)."""
    out = []
    if groups := c.fair_share_groups():
        accounts = ", ".join(repr(g.slurm_account) for _i, g in groups)
        out.append(
            ("fair-share", f"accounts {accounts} set a fair-share (accounts.groups[].fairshare)", "weight_fairshare")
        )
    if qos := c.slurm.prioritised_qos():
        names = ", ".join(f"{q.name!r} ({q.priority})" for _i, q in qos)
        out.append(("QOS priorities", f"QOS {names} set a priority", "weight_qos"))
    return out


@check
def priority_basic_ignores_fair_share_and_qos(c: Cluster):
    """Error, not warning: slurmctld starts and sacctmgr takes the shares and priorities, yet
    priority/basic orders jobs by submit time only; the policy the file describes never applies."""
    if c.slurm.priority.type != "basic":
        return
    for what, who, _weight in _policies_in_use(c):
        yield error(
            (*PRIORITY, "type"),
            f"priority/basic ignores {what}, but {who}: use type multifactor (or leave type out), or drop the {what}",
        )


@check
def priority_weights_reach_used_factors(c: Cluster):
    """A weight of 0 multiplies its factor away: the fair-shares or QOS priorities are set in
    slurmdbd and shown by sshare and sacctmgr, yet never move a job up the queue."""
    if c.priority_type != "multifactor":
        return
    for what, who, weight in _policies_in_use(c):
        if getattr(c.slurm.priority, weight) == 0:
            yield warning(
                (*PRIORITY, weight),
                f"{who}, but {weight} is 0, which leaves {what} out of every job's priority: give it a weight above 0",
            )


@check
def priority_weights_fit_32_bits(c: Cluster):
    """slurmctld caps a job's priority at 2**32-1 ("Job N priority exceeds 32 bits"): above it,
    jobs high in several factors all get the same priority and the factors no longer order them."""
    if c.priority_type != "multifactor":
        return
    highest = c.slurm.priority.highest_priority
    if highest > PRIORITY_MAX:
        yield warning(
            PRIORITY,
            f"the weights add up to {highest}, above {PRIORITY_MAX}, the highest job priority Slurm "
            "holds: jobs beyond it are all cut to that value and no longer ordered by their factors; "
            "scale the weights down",
        )


@check
def fair_share_usage_decays(c: Cluster):
    """With no decay and no reset, usage from years ago weighs as much as yesterday's: an
    account that was busy once keeps a low fair-share factor for good."""
    if c.priority_type != "multifactor" or not c.fair_share_groups():
        return
    p = c.slurm.priority
    if slurmtime.minutes(p.decay_half_life) == 0 and p.usage_reset_period == "NONE":
        yield warning(
            (*PRIORITY, "decay_half_life"),
            "decay_half_life 0 (no decay) with usage_reset_period NONE: recorded usage is never "
            "forgotten, so past usage lowers an account's fair-share forever; set a half-life or "
            "a reset period",
        )


# ---- a backup controller -------------------------------------------------------------------
# slurm.conf's MessageTimeout, which the model leaves at Slurm's default: how long one of the
# backup's pings of the primary may wait for an answer.
MESSAGE_TIMEOUT_S = 10
# The backup asks the primary every SlurmctldTimeout/3 s and takes over once it has had no
# answer for SlurmctldTimeout (slurmctld's backup.c): three asks, each allowed MessageTimeout,
# is the least that a primary busy for a moment does not lose its place over.
TAKEOVER_MIN_S = 3 * MESSAGE_TIMEOUT_S


def _backup(c: Cluster) -> tuple[str, str] | None:
    """(primary, backup) where services.slurmctld names two hosts, else None."""
    return (c.controllers[0], c.controllers[1]) if len(c.controllers) == 2 else None


@check
def slurmctld_state_shared(c: Cluster):
    """With a backup controller, StateSaveLocation is one directory both controllers mount: the
    backup takes over from what the primary last saved there (slurm.conf(5))."""
    pair = _backup(c)
    if pair is None:
        return
    path = c.slurm.state_save_location
    mounting = c.hosts_mounting(path)
    missing = [host for host in pair if host not in mounting]
    if not missing:
        return
    covering = [m.mount_point for m in c.shared_mounts if lies_under(path, m.mount_point)]
    if covering:
        where = (
            f"{' and '.join(missing)} {'does' if len(missing) == 1 else 'do'} not mount "
            f"{', '.join(dict.fromkeys(covering))}: add {'it' if len(missing) == 1 else 'them'} to the "
            "clients of that mount"
        )
    else:
        where = (
            "it lies on no shared file system of the model: put it under the mount point of a GPFS file "
            "system or an NFS mount that both controllers mount"
        )
    yield error(
        ("slurm", "state_save_location"),
        f"services.slurmctld ({c.written(c.services.slurmctld)}) names a backup controller, {pair[1]} "
        f"(primary {pair[0]}), so the state directory {path} must be one both read and write, or the "
        f"backup takes over from its own empty or stale copy and loses the queue; {where}",
    )


@check
def slurmctld_state_export_lets_root_create(c: Cluster):
    """The slurm role creates the shared state directory as root on a controller and gives it
    to the slurm user: an NFS export that squashes root refuses both."""
    pair = _backup(c)
    if pair is None:
        return
    path = c.slurm.state_save_location
    for mount in c.storage.nfs.mounts:
        export = c.storage.nfs.export(mount.export)
        if (
            export is None
            or not lies_under(path, mount.mount_point)
            or "no_root_squash" in export.options
            or not any(host in nodeset(mount.clients) for host in pair)
        ):
            continue
        yield warning(
            ("slurm", "state_save_location"),
            f"the state directory {path} lies on NFS export {export.name!r}, which squashes root "
            "(exports(5)'s default): the slurm role cannot create it as root on the primary controller "
            "nor give it to the slurm user; add no_root_squash to that export's options, or create the "
            "directory, owned by slurm, on the server by hand",
        )


@check
def slurmctld_timeout_allows_takeover(c: Cluster):
    if _backup(c) is None or c.slurm.slurmctld_timeout_s >= TAKEOVER_MIN_S:
        return
    t = c.slurm.slurmctld_timeout_s
    yield warning(
        ("slurm", "slurmctld_timeout_s"),
        f"SlurmctldTimeout {t} s with a backup controller ({c.controllers[1]}, services.slurmctld): "
        f"the backup asks the primary every third of it and each ask may wait MessageTimeout "
        f"({MESSAGE_TIMEOUT_S} s, Slurm's default) for an answer, so below {TAKEOVER_MIN_S} s a primary that is busy or restarting for a moment is taken "
        "over; keep it at least that (Slurm's default is 120 s)",
    )
