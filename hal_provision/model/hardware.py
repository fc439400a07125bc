"""Hardware profiles: one per distinct node build."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import Name, Strict


class GpuDevice(Strict):
    socket: int = Field(ge=0, description="CPU socket the GPU hangs off (0-based).")
    file: str = Field("", description="Device file; empty means /dev/nvidia<index>.", pattern=r"^(/dev/\S+)?$")


class Gpus(Strict):
    type: Name = Field(description="Slurm GRES type, e.g. v100; users ask --gres=gpu:<type>:N.")
    model: str = Field(description="Full model name, e.g. NVIDIA Tesla V100-SXM2-16GB.")
    memory_gib: int = Field(gt=0, description="Memory per GPU in GiB.")
    devices: list[GpuDevice] = Field(
        min_length=1, description="One entry per GPU, in device-index order."
    )
    nvlink: list[list[int]] = Field(
        default_factory=list,
        description="Square matrix: NVLink connection counts between GPUs i and j (0: none; "
        "the diagonal is ignored). Empty when GPUs have no NVLink.",
    )


class IbAdapter(Strict):
    model: str = Field(description="Adapter model, e.g. Mellanox ConnectX-5.")
    ports: int = Field(ge=1, le=8, description="Number of ports.")
    rate_gbps: int = Field(gt=0, description="Per-port rate in Gb/s.")


class HardwareProfile(Strict):
    model: str = Field(description="Vendor model, e.g. IBM Power System AC922 8335-GTH.")
    architecture: Literal["ppc64le", "x86_64", "aarch64"] = Field(description="CPU architecture.")
    cpu_model: str = Field("", description="CPU model, informational.")
    sockets: int = Field(ge=1, le=16, description="CPU sockets (Slurm Sockets).")
    cores_per_socket: int = Field(ge=1, le=512, description="Physical cores per socket.")
    threads_per_core: int = Field(ge=1, le=8, description="Hardware threads per core (SMT).")
    memory_gib: int = Field(gt=0, description="Installed memory in GiB.")
    gpus: Gpus | None = Field(None, description="GPUs of the node, if any.")
    ib_adapters: list[IbAdapter] = Field(default_factory=list, description="InfiniBand adapters.")
    features: list[Name] = Field(
        default_factory=list, description="Slurm node features every node of this profile gets."
    )

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket

    @property
    def cpus(self) -> int:
        return self.cores * self.threads_per_core

    @property
    def gpu_count(self) -> int:
        return len(self.gpus.devices) if self.gpus else 0
