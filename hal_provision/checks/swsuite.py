"""Checks: the Slurm Wrapper Suite's virtual partitions (gpux<N>, cpun<N>).

The suite shapes every job of a virtual partition for one node build of its real partition:
the one offering the most (GPUs per node, then CPUs, then nodes): Cluster.partition_build. The
checks judge each request against that same build, with the suite's own resolver
(Cluster.job_shape: swsuite/translate.py's job_shape), so what they accept the suite can run:
a number of GPUs up to one node's, or a multiple of it on whole nodes; memory per CPU times
the CPUs a job takes on a node within the node's RealMemory.
"""

from __future__ import annotations

from ..findings import error, warning
from ..model import Cluster, Partition
from . import check
from ..model import slurmtime
from .common import did_you_mean, plural, unique


def _virtual(c: Cluster):
    for i, vp in enumerate(c.swsuite.virtual_partitions):
        yield i, vp, ("swsuite", "virtual_partitions", i)


def _targets(c: Cluster):
    """(index, virtual partition, path, real partition, build) for each virtual partition
    whose real partition exists and the active composable layout does not hide (a composable
    check warns of those); build (Cluster.partition_build) is None when that partition has no
    compute node."""
    parts: dict[str, Partition] = {}
    for part in c.slurm.partitions:
        parts.setdefault(part.name, part)
    for i, vp, path in _virtual(c):
        part = parts.get(vp.partition)
        if part is not None and c.layout_hides(vp) is None:
            yield i, vp, path, part, c.partition_build(part.name)


@check
def virtual_partition_names_unique(c: Cluster):
    yield from unique(c.swsuite.virtual_partitions, ("swsuite", "virtual_partitions"), "virtual partition name")
    real = {p.name for p in c.slurm.partitions}
    for i, name in enumerate(vp.name for vp in c.swsuite.virtual_partitions):
        if name in real:
            yield warning(
                ("swsuite", "virtual_partitions", i, "name"),
                f"virtual partition {name!r} has the name of a real Slurm partition; "
                "`swrun -p` would be ambiguous: rename one of them",
            )


@check
def virtual_partitions_target_partitions(c: Cluster):
    real = [p.name for p in c.slurm.partitions]
    for _i, vp, path in _virtual(c):
        if vp.partition not in real:
            yield error(
                (*path, "partition"),
                f"virtual partition {vp.name!r} sends jobs to unknown partition {vp.partition!r}"
                + did_you_mean(vp.partition, real),
            )


@check
def virtual_partitions_fit(c: Cluster):
    for _i, vp, path, part, shape in _targets(c):
        if shape is None:
            yield error((*path, "partition"), f"partition {part.name!r} of {vp.name!r} has no compute nodes")
            continue
        per_node, built = shape.profile.gpu_count, f"{plural(shape.count, f'{shape.name} node')}"
        if vp.kind == "gpu" and not per_node:
            yield error(
                (*path, "partition"), f"{vp.name!r} asks for GPUs, but partition {part.name!r} has no GPU nodes"
            )
        elif vp.kind == "gpu" and vp.gpus > per_node and vp.gpus % per_node:
            lower, upper = vp.gpus // per_node * per_node, (vp.gpus // per_node + 1) * per_node
            yield error(
                (*path, "gpus"),
                f"{vp.name!r} asks for {vp.gpus} GPUs, more than one {shape.name!r} node has ({per_node}); "
                f"spanning nodes takes whole nodes, so ask for a multiple of {per_node} (e.g. {lower} or {upper})",
            )
        elif vp.kind == "gpu" and (job := c.job_shape(vp)) is not None and job.nodes > shape.count:
            yield error(
                (*path, "gpus"),
                f"{vp.name!r} asks for {vp.gpus} GPUs; partition {part.name!r} offers at most "
                f"{shape.count * per_node} on identical nodes ({built} x {per_node} GPUs): "
                f"ask for {shape.count * per_node} or fewer",
            )
        elif vp.kind == "shard" and not (per_gpu := c.partition_shards(part.name, shape.name)):
            yield error(
                (*path, "partition"),
                f"{vp.name!r} asks for GPU shards, but the {shape.name!r} nodes of partition {part.name!r} offer "
                "none: set gpu_sharing.shards_per_gpu on their node group",
            )
        elif vp.kind == "shard" and vp.shards > per_gpu * per_node:
            yield error(
                (*path, "shards"),
                f"{vp.name!r} asks for {vp.shards} shards; a {shape.name!r} node offers {per_gpu * per_node} "
                f"({per_node} GPUs x {per_gpu})",
            )
        elif vp.kind == "cpu" and vp.nodes > shape.count:
            yield error(
                (*path, "nodes"),
                f"{vp.name!r} asks for {plural(vp.nodes, 'whole node')}; partition {part.name!r} has {built} "
                f"(jobs are shaped for its largest node build): ask for {shape.count} or fewer",
            )


@check
def virtual_partition_memory_fits(c: Cluster):
    for _i, vp, path, _part, shape in _targets(c):
        job = c.job_shape(vp)
        if shape is None or job is None:
            continue  # virtual_partitions_fit reports it
        cpus = job.tasks_per_node
        real = c.real_memory_mib(shape.profile)
        if 0 < real < vp.mem_per_cpu_mib * cpus:
            yield error(
                (*path, "mem_per_cpu_mib"),
                f"{vp.name!r} gives --mem-per-cpu={vp.mem_per_cpu_mib}: its {cpus} CPUs on a {shape.name!r} "
                f"node need {vp.mem_per_cpu_mib * cpus} MiB, above RealMemory {real} MiB; "
                f"use at most {real // cpus} MiB",
            )


@check
def virtual_partition_times_fit(c: Cluster):
    for _i, vp, path in _virtual(c):
        if vp.default_time_hours > vp.max_time_hours:
            yield error(
                (*path, "default_time_hours"),
                f"default time {vp.default_time_hours} h is above the maximum {vp.max_time_hours} h; "
                "lower it or raise max_time_hours",
            )
    for _i, vp, path, part, _shape in _targets(c):
        limit = slurmtime.minutes(part.max_time)
        if limit is not None and vp.max_time_hours * 60 > limit:
            yield warning(
                (*path, "max_time_hours"),
                f"{vp.name!r} allows {vp.max_time_hours} h, but partition {part.name!r} has MaxTime "
                f"{part.max_time}; Slurm refuses longer jobs: use at most {int(limit // 60)} h",
            )
        # A warning too: an error on a virtual partition means swrun refuses its jobs (see
        # test_checks_accept_exactly_what_the_suite_can_run); swrun submits these with --time set
        # to the default, and slurmctld never starts them.
        if limit is not None and vp.default_time_hours * 60 > limit:
            yield warning(
                (*path, "default_time_hours"),
                f"{vp.name!r} gives jobs without -t --time={vp.default_time_hours:02d}:00:00, beyond MaxTime "
                f"{part.max_time} of partition {part.name!r}; slurmctld leaves such jobs pending "
                f"(Reason=PartitionTimeLimit): use a default of at most {int(limit // 60)} h",
            )
