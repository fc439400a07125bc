"""Rich tables describing a cluster (for `hal-provision show`)."""

from __future__ import annotations

from rich.table import Table

from ..hostlist import nodeset, union
from ..model import Cluster, Role


def _gpus_per_node(c: Cluster, g) -> str:
    """A group's GPUs per node as the active layout composes them: its profile's, or the range
    over its hosts with '(pool)' where pool GPUs are attached."""
    p = c.profile_of(g)
    if p is None:
        return "-"
    if not g.has(Role.compute) or c.composable is None:
        return str(p.gpu_count)
    counts = sorted({b.profile.gpu_count for b in c.node_builds(g)})
    pooled = any(b.features for b in c.node_builds(g))
    shown = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    return shown + (" (pool)" if pooled else "")


def _pool_table(c: Cluster) -> Table:
    comp = c.composable
    table = Table(title=f"Composable GPU pools (layout {comp.active} active)")
    for col in ("pool", "GPUs", "cabled hosts", "slots/host", "attached now", "free"):
        table.add_column(col, justify="right" if col in ("GPUs", "slots/host", "free") else "left")
    for pool in comp.pools:
        held = comp.attached(pool)
        attached = ", ".join(f"{hosts}: {n}" for n, hosts in held) or "none"
        used = sum(n * len(nodeset(hosts)) for n, hosts in held)
        table.add_row(
            pool.name,
            f"{pool.gpus.count}x {pool.gpus.type} {pool.gpus.memory_gib} GiB",
            pool.hosts,
            str(pool.slots_per_host),
            attached,
            str(pool.gpus.count - used),
        )
    return table


def tables(c: Cluster) -> list[Table]:
    groups = Table(title=f"Cluster {c.cluster.name} ({c.cluster.domain}): node groups")
    for col in ("group", "role", "hosts", "count", "hardware", "GPUs/node"):
        groups.add_column(col, justify="right" if col in ("count", "GPUs/node") else "left")
    for g in c.nodes:
        groups.add_row(
            g.name,
            "+".join(r.value for r in g.roles),
            g.hosts,
            str(len(nodeset(g.hosts))),
            g.hardware or "-",
            _gpus_per_node(c, g),
        )

    hw = Table(title="Hardware profiles")
    for col in ("profile", "model", "arch", "sockets x cores x threads", "CPUs", "memory", "GPUs"):
        hw.add_column(col)
    for name, p in c.hardware.items():
        gpus = f"{p.gpu_count}x {p.gpus.type} {p.gpus.memory_gib} GiB" if p.gpus else "-"
        hw.add_row(
            name,
            p.model,
            p.architecture,
            f"{p.sockets} x {p.cores_per_socket} x {p.threads_per_core}",
            str(p.cpus),
            f"{p.memory_gib} GiB",
            gpus,
        )

    parts = Table(title="Slurm partitions")
    for col in ("partition", "nodes", "count", "GPUs", "default", "max time", "QOS"):
        parts.add_column(col)
    for part in c.slurm.partitions:
        ns = nodeset(part.nodes)
        gpus = sum(b.profile.gpu_count * b.count for b in c.composed_partition_hardware(part.name))
        written = c.written(part.nodes)
        nodes = part.nodes if written == part.nodes else f"{part.nodes} ({written})"
        parts.add_row(
            part.name, nodes, str(len(ns)), str(gpus), "yes" if part.default else "", part.max_time, part.qos or ""
        )

    totals = Table(title="Totals (compute nodes)")
    for col in ("nodes", "GPUs", "cores", "hardware threads", "memory"):
        totals.add_column(col, justify="right")
    computes = c.groups_with_role(Role.compute)
    n = g_ = cores = cpus = mem = 0
    for g in computes:  # by build: the active layout's pool GPUs count on the hosts holding them
        for build in c.node_builds(g):
            k, p = len(nodeset(build.hosts)), build.profile
            n += k
            g_ += k * p.gpu_count
            cores += k * p.cores
            cpus += k * p.cpus
            mem += k * p.memory_gib
    totals.add_row(str(n), str(g_), str(cores), str(cpus), f"{mem} GiB")
    out = [groups, hw, parts, totals]
    if c.composable is not None:
        out.append(_pool_table(c))
    if c.swsuite.virtual_partitions:
        vp = Table(title="Slurm Wrapper Suite: virtual partitions")
        for col in ("name", "kind", "partition", "GPUs", "nodes", "mem/CPU (MiB)", "max hours"):
            vp.add_column(col)
        for v in c.swsuite.virtual_partitions:
            vp.add_row(
                v.name,
                v.kind,
                v.partition,
                str(v.gpus or ""),
                str(v.nodes or ""),
                str(v.mem_per_cpu_mib),
                str(v.max_time_hours),
            )
        out.append(vp)
    _ = union  # keep import for callers that compose tables
    return out
