"""Rich tables describing a cluster (for `hal-provision show`)."""

from __future__ import annotations

from rich.table import Table

from ..hostlist import nodeset, union
from ..model import Cluster, Role


def tables(c: Cluster) -> list[Table]:
    groups = Table(title=f"Cluster {c.cluster.name} ({c.cluster.domain}): node groups")
    for col in ("group", "role", "hosts", "count", "hardware", "GPUs/node"):
        groups.add_column(col, justify="right" if col in ("count", "GPUs/node") else "left")
    for g in c.nodes:
        p = c.profile_of(g)
        groups.add_row(g.name, "+".join(r.value for r in g.roles), g.hosts, str(len(nodeset(g.hosts))),
                       g.hardware or "-", str(p.gpu_count) if p else "-")

    hw = Table(title="Hardware profiles")
    for col in ("profile", "model", "arch", "sockets x cores x threads", "CPUs", "memory", "GPUs"):
        hw.add_column(col)
    for name, p in c.hardware.items():
        gpus = f"{p.gpu_count}x {p.gpus.type} {p.gpus.memory_gib} GiB" if p.gpus else "-"
        hw.add_row(name, p.model, p.architecture, f"{p.sockets} x {p.cores_per_socket} x {p.threads_per_core}",
                   str(p.cpus), f"{p.memory_gib} GiB", gpus)

    parts = Table(title="Slurm partitions")
    for col in ("partition", "nodes", "count", "GPUs", "default", "max time", "QOS"):
        parts.add_column(col)
    for part in c.slurm.partitions:
        ns = nodeset(part.nodes)
        gpus = sum(b.profile.gpu_count * b.count for b in c.partition_hardware(part.name))
        written = c.written(part.nodes)
        nodes = part.nodes if written == part.nodes else f"{part.nodes} ({written})"
        parts.add_row(part.name, nodes, str(len(ns)), str(gpus), "yes" if part.default else "",
                      part.max_time, part.qos or "")

    totals = Table(title="Totals (compute nodes)")
    for col in ("nodes", "GPUs", "cores", "hardware threads", "memory"):
        totals.add_column(col, justify="right")
    computes = c.groups_with_role(Role.compute)
    n = g_ = cores = cpus = mem = 0
    for g in computes:
        k = len(nodeset(g.hosts))
        p = c.profile_of(g)  # a compute group always has one (the model requires it)
        n += k
        g_ += k * p.gpu_count
        cores += k * p.cores
        cpus += k * p.cpus
        mem += k * p.memory_gib
    totals.add_row(str(n), str(g_), str(cores), str(cpus), f"{mem} GiB")
    out = [groups, hw, parts, totals]
    if c.swsuite.virtual_partitions:
        vp = Table(title="Slurm Wrapper Suite: virtual partitions")
        for col in ("name", "kind", "partition", "GPUs", "nodes", "mem/CPU (MiB)", "max hours"):
            vp.add_column(col)
        for v in c.swsuite.virtual_partitions:
            vp.add_row(v.name, v.kind, v.partition, str(v.gpus or ""), str(v.nodes or ""),
                       str(v.mem_per_cpu_mib), str(v.max_time_hours))
        out.append(vp)
    _ = union  # keep import for callers that compose tables
    return out
