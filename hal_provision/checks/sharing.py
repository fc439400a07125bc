"""Checks: GPU sharing of node groups (shards, mps, MIG instances) against their GPUs and Slurm."""

from __future__ import annotations

from ..findings import error, warning
from ..model import Cluster, Role
from ..model.sharing import MPS_PERCENT
from . import check


def _sharing_groups(c: Cluster):
    for i, group in enumerate(c.nodes):
        if group.gpu_sharing is not None:
            yield group, group.gpu_sharing, ("nodes", i, "gpu_sharing")


@check
def gpu_sharing_needs_gpus(c: Cluster):
    for group, _sharing, path in _sharing_groups(c):
        if not group.has(Role.compute):
            yield error(
                path,
                f"node group {group.name!r} is not compute: only slurmd's nodes offer shared GPUs (remove gpu_sharing)",
            )
            continue
        profile = c.hardware.get(group.hardware) if group.hardware else None
        if profile is not None and profile.gpus is None:
            yield error(path, f"node group {group.name!r} shares GPUs, but its profile {group.hardware!r} has none")


@check
def mig_needs_nvml(c: Cluster):
    if c.slurm.nvml:
        return
    for group, sharing, path in _sharing_groups(c):
        if sharing.mig_instances:
            yield error(
                (*path, "mig"),
                f"node group {group.name!r} splits its GPUs into MIG instances, but slurmd is built without NVML "
                "(slurm.nvml false, as Debian's packages are): gres.conf cannot be written for them, since each "
                "instance's device files (/dev/nvidia-caps minors of the GPU and compute instance ids the driver "
                "picked) are known only on the node. Use a Slurm built with NVML and set slurm.nvml, or shards",
            )


@check
def mig_mode_without_instances(c: Cluster):
    for group, sharing, path in _sharing_groups(c):
        if sharing.mig is not None and not sharing.mig:
            yield warning(
                (*path, "mig"),
                f"node group {group.name!r} says MIG mode is on with no instances (mig: []): slurmd's NVML "
                "detection exits (fatal: MIG mode is enabled, but no MIG devices were found) and, without NVML, "
                "jobs get GPUs CUDA cannot use. Make the instances and list them, or turn MIG mode off and drop "
                "mig",
            )


@check
def mps_count_is_percentage(c: Cluster):
    for group, sharing, path in _sharing_groups(c):
        per_gpu = sharing.mps_per_gpu
        if per_gpu is not None and per_gpu % MPS_PERCENT:
            yield warning(
                (*path, "mps_per_gpu"),
                f"node group {group.name!r} offers {per_gpu} mps per GPU, not a multiple of {MPS_PERCENT}: Slurm "
                "gives a job CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = its mps * 100 / the GPU's count, rounded down "
                f"and at least 1, so --gres=mps:N is not N percent of the GPU. Use {MPS_PERCENT} (or a multiple "
                "of it)",
            )
