"""Checks: training recipes (the virtual partitions their jobs ask for, the framework module)."""

from __future__ import annotations

from ..findings import error, warning
from ..model import Cluster, Role
from ..model.recipes import gpu_partitions, scaling_partitions
from . import check
from .common import did_you_mean, duplicates

REC = ("recipes",)


@check
def recipes_virtual_partitions(c: Cluster):
    """The job script's and the benchmark's virtual partitions exist and have GPUs (a cluster
    without GPU virtual partitions: cpu ones, whose jobs train on the CPUs); the benchmark runs
    from the fewest GPUs (or nodes) up, each size once."""
    r = c.recipes
    if r is None:
        return
    gpus = gpu_partitions(c.swsuite)
    known = [vp.name for vp in c.swsuite.virtual_partitions]
    nodes = {vp.name: vp.nodes for vp in c.swsuite.virtual_partitions if vp.kind == "cpu"}

    def problem(name: str) -> str | None:
        if name not in known:
            return f"virtual partition {name!r} is not in swsuite.virtual_partitions{did_you_mean(name, known)}"
        if gpus and name not in gpus:
            return (
                f"virtual partition {name!r} has no GPUs: the recipe's defaults are GPU partitions where the "
                f"cluster has them (its CPU runs: swbatch -p {name}, scaling.sh --cpu)"
            )
        return None

    if (msg := problem(r.virtual_partition)) is not None:
        yield error((*REC, "virtual_partition"), msg)
    for i, name in enumerate(r.scaling_partitions):
        if (msg := problem(name)) is not None:
            yield error((*REC, "scaling_partitions", i), msg)
    for again, first in duplicates(r.scaling_partitions):
        yield error(
            (*REC, "scaling_partitions", again), f"{r.scaling_partitions[again]!r} is listed twice (first at [{first}])"
        )
    what, size = ("GPUs", gpus) if gpus else ("nodes", nodes)
    sizes = [size[n] for n in r.scaling_partitions if n in size]
    if sizes != sorted(sizes):
        yield error(
            (*REC, "scaling_partitions"),
            f"list the benchmark's virtual partitions from the fewest {what} "
            f"to the most ({what}: {sizes}): efficiency is measured against the first",
        )
    if not scaling_partitions(r, c.swsuite):
        yield error(
            (*REC, "scaling_partitions"),
            f"no virtual partition with a power-of-two count of {what} to "
            "benchmark: list the virtual partitions to run",
        )


@check
def recipes_framework_module(c: Cluster):
    """The modules the job scripts load are in software.modules and visible on compute nodes."""
    r = c.recipes
    if r is None:
        return
    for key in ("framework_module", "cpu_framework_module"):
        ref = getattr(r, key)
        if ref is None:
            continue
        path = (*REC, key)
        if not c.software.resolve(ref):
            yield error(path, f"module {ref!r} is not in software.modules" + did_you_mean(ref, c.software.known_refs()))
        elif not c.software.loadable_on(ref, Role.compute):
            yield error(path, f"module {ref!r} is not visible on compute nodes, where the recipe runs")


@check
def recipes_fabric(c: Cluster):
    """NCCL device names only where there is an InfiniBand fabric to use them."""
    r = c.recipes
    if r is not None and r.nccl_ib_hca and c.fabric is None:
        yield warning(
            (*REC, "nccl_ib_hca"),
            "NCCL_IB_HCA is set but the description has no fabric: NCCL will find "
            "no such adapter and fall back to TCP sockets",
        )
