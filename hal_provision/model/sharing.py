"""GPU sharing per node group: Slurm's shard GRES (several small jobs on one whole GPU) or the
GPUs split into MIG instances, each a GPU of its own type to Slurm."""

from __future__ import annotations

import re

from pydantic import Field, model_validator

from .base import Strict

# The MIG profile as nvidia-smi names it: compute slices, then memory, e.g. 1g.10gb, 3g.40gb.
MIG_PROFILE = r"^(\d+)g\.(\d+)gb$"
# Compute slices of one A100 or H100; a GPU's MIG instances share them.
MIG_SLICES = 7


class MigInstances(Strict):
    profile: str = Field(
        pattern=MIG_PROFILE,
        description="MIG profile as nvidia-smi names it, e.g. 1g.10gb, and the GRES type users ask for "
        "(--gres=gpu:1g.10gb:1). slurmd's NVML detection types each instance <GPU name>_<profile>, e.g. "
        "nvidia_a100_1g.10gb; a type that is a substring of it matches.")
    count: int = Field(ge=1, le=MIG_SLICES, description="Instances of this profile on each GPU.")

    @property
    def slices(self) -> int:
        return int(re.match(MIG_PROFILE, self.profile).group(1)) * self.count


class GpuSharing(Strict):
    """One of shards_per_gpu or mig. Slurm 22.05 or later (every major the model knows)."""

    shards_per_gpu: int | None = Field(
        None, ge=1, description="Slurm's shard GRES: each whole GPU is offered as this many shards, and a job "
        "asking --gres=shard:1 runs beside others on one GPU (no memory or compute fencing between them; "
        "CUDA_VISIBLE_DEVICES names the GPU as for --gres=gpu). A GPU is taken either as a gpu or as shards, "
        "never both at once. Typically the most jobs that may share a GPU.")
    mig: list[MigInstances] | None = Field(
        None, description="The MIG instances every GPU of these nodes is split into (made beforehand with "
        "nvidia-smi mig; Slurm does not partition): each profile is a GPU type to Slurm, --gres=gpu:1g.10gb:1. "
        "Needs slurm.nvml (slurmd finds the instances' device files through NVML). An empty list says MIG "
        "mode is on with no instances, which slurmd's NVML detection refuses (a check reports it).")

    @model_validator(mode="after")
    def _one_kind(self) -> "GpuSharing":
        if self.shards_per_gpu is not None and self.mig is not None:
            raise ValueError("shards_per_gpu and mig exclude each other: shard whole GPUs, or split them into MIG "
                             "instances")
        if self.shards_per_gpu is None and self.mig is None:
            raise ValueError("say how the GPUs are shared: shards_per_gpu or mig")
        profiles = [m.profile for m in self.mig or []]
        twice = sorted({p for p in profiles if profiles.count(p) > 1})
        if twice:
            raise ValueError(f"mig names profile {', '.join(twice)} more than once: give one entry a count")
        slices = sum(m.slices for m in self.mig or [])
        if slices > MIG_SLICES:
            raise ValueError(f"mig instances take {slices} compute slices of each GPU, which has {MIG_SLICES}")
        return self

    @property
    def mig_instances(self) -> list[MigInstances]:
        """The MIG instances of each GPU; empty for shards and for MIG mode without instances."""
        return list(self.mig or [])

    def gres(self, gpu_type: str, gpus: int) -> list[str]:
        """slurm.conf's Gres entries of a node with `gpus` GPUs of `gpu_type` shared this way."""
        if self.mig_instances:
            return [f"gpu:{m.profile}:{m.count * gpus}" for m in self.mig_instances]
        entries = [f"gpu:{gpu_type}:{gpus}"]
        if self.shards_per_gpu is not None:
            entries.append(f"shard:{self.shards_per_gpu * gpus}")
        return entries
