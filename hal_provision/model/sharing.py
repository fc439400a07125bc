"""GPU sharing per node group: Slurm's shard GRES (several small jobs on one whole GPU), its mps
GRES (jobs on one GPU through CUDA MPS, each with a share of its compute) or the GPUs split into
MIG instances, each a GPU of its own type to Slurm."""

from __future__ import annotations

import re

from pydantic import Field, model_validator

from .base import Strict

# The MIG profile as nvidia-smi names it: compute slices, then memory, e.g. 1g.10gb, 3g.40gb.
MIG_PROFILE = r"^(\d+)g\.(\d+)gb$"
# Compute slices of one A100 or H100; a GPU's MIG instances share them.
MIG_SLICES = 7
# Slurm turns a job's mps count into CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (count * 100 / the GPU's
# count, at least 1): a GPU's count is a multiple of this for whole percentages.
MPS_PERCENT = 100


class MigInstances(Strict):
    profile: str = Field(
        pattern=MIG_PROFILE,
        description="MIG profile as nvidia-smi names it, e.g. 1g.10gb, and the GRES type users ask for "
        "(--gres=gpu:1g.10gb:1). slurmd's NVML detection types each instance <GPU name>_<profile>, e.g. "
        "nvidia_a100_1g.10gb; a type that is a substring of it matches.",
    )
    count: int = Field(ge=1, le=MIG_SLICES, description="Instances of this profile on each GPU.")

    @property
    def slices(self) -> int:
        return int(re.match(MIG_PROFILE, self.profile).group(1)) * self.count


class GpuSharing(Strict):
    """One of shards_per_gpu, mps_per_gpu or mig. Slurm 22.05 or later (every major the model knows)."""

    shards_per_gpu: int | None = Field(
        None,
        ge=1,
        description="Slurm's shard GRES: each whole GPU is offered as this many shards, and a job "
        "asking --gres=shard:1 runs beside others on one GPU (no memory or compute fencing between them; "
        "CUDA_VISIBLE_DEVICES names the GPU as for --gres=gpu). A GPU is taken either as a gpu or as shards, "
        "never both at once. Typically the most jobs that may share a GPU.",
    )
    mps_per_gpu: int | None = Field(
        None,
        ge=1,
        description="Slurm's mps GRES (CUDA Multi-Process Service): each whole GPU is offered as "
        "this many mps, typically 100, and a job asking --gres=mps:25 runs beside others on one GPU through an "
        "MPS server, with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 (its request as a percentage of this count). "
        "A job's mps come from one GPU of each node; a GPU is taken either as a gpu or as mps, never both at "
        "once. Slurm does not start MPS: every compute node then runs hal-mps as Prolog, Epilog and "
        "TaskProlog, which starts nvidia-cuda-mps-control for the GPU of a job holding mps, points the job's "
        "tasks at it and stops it after the GPU's last such job (a no-op for other jobs). MPS serves one "
        "user at a time per GPU: jobs of different users on one GPU take turns.",
    )
    mig: list[MigInstances] | None = Field(
        None,
        description="The MIG instances every GPU of these nodes is split into (made beforehand with "
        "nvidia-smi mig; Slurm does not partition): each profile is a GPU type to Slurm, --gres=gpu:1g.10gb:1. "
        "Needs slurm.nvml (slurmd finds the instances' device files through NVML). An empty list says MIG "
        "mode is on with no instances, which slurmd's NVML detection refuses (a check reports it).",
    )

    @model_validator(mode="after")
    def _one_kind(self) -> "GpuSharing":
        kinds = [k for k in ("shards_per_gpu", "mps_per_gpu", "mig") if getattr(self, k) is not None]
        if len(kinds) > 1:
            # Slurm keeps a GPU from being a gpu and a shard, or a gpu and mps, at once, but not from
            # holding shard jobs and MPS jobs at once; MIG instances are GPUs of their own.
            raise ValueError(
                f"{' and '.join(kinds)} exclude each other: shard whole GPUs, share them through MPS, "
                "or split them into MIG instances (Slurm would give one GPU to shard jobs and MPS "
                "jobs at once)"
            )
        if not kinds:
            raise ValueError("say how the GPUs are shared: shards_per_gpu, mps_per_gpu or mig")
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

    @property
    def shares(self) -> tuple[str, int] | None:
        """The GRES whole GPUs are shared as and how many of it each GPU offers: ("shard", N) or
        ("mps", N); None for MIG instances."""
        if self.shards_per_gpu is not None:
            return "shard", self.shards_per_gpu
        if self.mps_per_gpu is not None:
            return "mps", self.mps_per_gpu
        return None

    def gres(self, gpu_type: str, gpus: int) -> list[str]:
        """slurm.conf's Gres entries of a node with `gpus` GPUs of `gpu_type` shared this way."""
        if self.mig_instances:
            return [f"gpu:{m.profile}:{m.count * gpus}" for m in self.mig_instances]
        entries = [f"gpu:{gpu_type}:{gpus}"]
        if self.shares is not None:
            kind, per_gpu = self.shares
            entries.append(f"{kind}:{per_gpu * gpus}")
        return entries
