"""Hardware profiles: one per distinct node build."""

from __future__ import annotations

from typing import Annotated, Literal, NamedTuple

from pydantic import Field, StringConstraints, model_validator

from .base import AbsolutePath, Name, Strict, absolute_path

# The share of a scratch device's size Slurm is told (TmpDisk) when the profile names none: the
# file system takes the rest (XFS's log and metadata, ext4's reserved blocks), and slurmd drains
# a node whose TmpFS is smaller than its TmpDisk.
TMP_DISK_SHARE = 0.95

# A block device's path, e.g. /dev/nvme0n1; a GPU's device file, or empty for /dev/nvidia<index>.
DevicePath = absolute_path(r"^/\S+$")
GpuDeviceFile = absolute_path(r"^(/dev/\S+)?$")


class GpuDevice(Strict):
    socket: int = Field(ge=0, description="CPU socket the GPU hangs off (0-based).")
    file: GpuDeviceFile = Field("", description="Device file; empty means /dev/nvidia<index>.")


class Gpus(Strict):
    type: Name = Field(description="Slurm GRES type, e.g. v100; users ask --gres=gpu:<type>:N.")
    model: str = Field(description="Full model name, e.g. NVIDIA Tesla V100-SXM2-16GB.")
    memory_gib: int = Field(gt=0, description="Memory per GPU in GiB.")
    devices: list[GpuDevice] = Field(min_length=1, description="One entry per GPU, in device-index order.")
    nvlink: list[list[int]] = Field(
        default_factory=list,
        description="Square matrix: NVLink connection counts between GPUs i and j (0: none; "
        "the diagonal is ignored). Empty when GPUs have no NVLink.",
    )
    pcie_generation: int | None = Field(
        None,
        ge=1,
        le=6,
        description="PCIe generation each GPU's link trains to at most (the health check's "
        "gpu_faults compares it with nvidia-smi's max_link_gen). None: not checked.",
    )
    pcie_width: int | None = Field(
        None,
        ge=1,
        le=32,
        description="PCIe lanes of each GPU's link, e.g. 16 (gpu_faults compares it with "
        "nvidia-smi's max and current link width). None: not checked.",
    )


# An InfiniBand device port as the driver shows it: DEVICE (its port 1) or DEVICE:PORT.
IbDevicePort = Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_]{0,31}(:[1-9])?$")]


class IbPort(NamedTuple):
    """One InfiniBand port of a node: the device and port the driver shows (/sys/class/infiniband/
    DEVICE/ports/PORT, NCCL_IB_HCA's DEVICE:PORT), its rate, and the GPUs nearest to its adapter."""

    device: str
    port: int
    rate_gbps: int
    gpus: tuple[int, ...] = ()

    def __str__(self) -> str:
        return f"{self.device}:{self.port}"


class IbAdapter(Strict):
    model: str = Field(description="Adapter model, e.g. Mellanox ConnectX-5.")
    ports: int = Field(ge=1, le=8, description="Number of ports.")
    rate_gbps: int = Field(gt=0, description="Per-port rate in Gb/s.")
    devices: list[IbDevicePort] = Field(
        default_factory=list,
        description="Each port's device as the driver shows it (/sys/class/infiniband, ibstat), DEVICE or "
        "DEVICE:PORT, e.g. [mlx5_4] or [mlx5_0:1, mlx5_0:2]; one entry per port. Empty: the mlx5 driver's "
        "naming (ConnectX-4 and later), where every port is a device of its own, numbered over the profile's "
        "adapters in order: mlx5_0, mlx5_1, ..., each its port 1. `hal-provision discover` writes them.",
    )
    numa_node: int | None = Field(None, ge=0, description="NUMA node the adapter hangs off (discover fills it).")
    gpus: list[int] = Field(
        default_factory=list,
        description="Indices of the GPUs nearest to the adapter (behind the same PCIe switch); on a "
        "rail-optimised node, each GPU's own adapter. NCCL_IB_HCA lists the adapters in the order of their "
        "nearest GPUs.",
    )

    @model_validator(mode="after")
    def _a_device_per_port(self) -> "IbAdapter":
        if self.devices and len(self.devices) != self.ports:
            raise ValueError(
                f"devices lists {len(self.devices)} device ports for an adapter of {self.ports} "
                f"port{'s' if self.ports != 1 else ''}: one each"
            )
        return self


class LocalDisk(Strict):
    device: DevicePath = Field(
        description="Block device path, e.g. /dev/nvme0n1 (a /dev/disk/by-id/ name survives renumbering)."
    )
    kind: Literal["nvme", "ssd", "hdd"] = Field("nvme", description="What the device is.")
    size_gib: int = Field(gt=0, description="Size in GiB.")


class LocalScratch(Strict):
    """Node-local scratch: local disks combined into one file system that Slurm's TmpFS names
    and each job's private /tmp lives on (a node group's job_tmp_base)."""

    devices: list[DevicePath] = Field(
        min_length=1, description="Devices of local_disks it is made of (their `device` paths)."
    )
    layout: Literal["single", "raid0"] = Field(
        "single", description="single: one device as it is; raid0: the devices striped with mdadm."
    )
    filesystem: Literal["xfs", "ext4"] = Field("xfs", description="File system made on it.")
    mount_point: AbsolutePath = Field("/local", description="Where it is mounted (slurm.conf TmpFS).")
    tmp_disk_mib: int | None = Field(
        None,
        gt=0,
        description="TmpDisk Slurm is told for these nodes, in MiB. None: "
        f"{int(TMP_DISK_SHARE * 100)} % of the devices' size (the file system takes the rest; slurmd drains a "
        "node whose TmpFS is smaller than its TmpDisk).",
    )

    @model_validator(mode="after")
    def _layout_fits_devices(self) -> "LocalScratch":
        if self.layout == "single" and len(self.devices) != 1:
            raise ValueError(f"layout single takes one device, not {len(self.devices)}: use raid0 to stripe them")
        if self.layout == "raid0" and len(self.devices) < 2:
            raise ValueError("layout raid0 stripes two or more devices: use single for one")
        return self


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
    local_disks: list[LocalDisk] = Field(
        default_factory=list, description="Node-local disks besides the system disk (NVMe, SSD)."
    )
    scratch: LocalScratch | None = Field(
        None, description="Local scratch made of local_disks: Slurm's TmpFS and TmpDisk, each job's private /tmp."
    )

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket

    @model_validator(mode="after")
    def _ib_ports_apart(self) -> "HardwareProfile":
        names = [str(p) for p in self.ib_ports()]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(
                f"ib_adapters name {', '.join(twice)} more than once: each device port is one "
                "adapter's (give each adapter its `devices`)"
            )
        return self

    def ib_ports(self) -> list[IbPort]:
        """The node's InfiniBand ports in the order fabric.links numbers them (port 1 is the first
        adapter's first port): each adapter's `devices`, else the mlx5 naming (mlx5_<i>:1 for
        the node's i-th port, counted from 0)."""
        out: list[IbPort] = []
        for adapter in self.ib_adapters:
            for k in range(adapter.ports):
                if adapter.devices:
                    device, _sep, port = adapter.devices[k].partition(":")
                else:
                    device, port = f"mlx5_{len(out)}", "1"
                out.append(IbPort(device, int(port or 1), adapter.rate_gbps, tuple(adapter.gpus)))
        return out

    @property
    def cpus(self) -> int:
        return self.cores * self.threads_per_core

    def scratch_gib(self) -> int | None:
        """Size of the scratch file system's devices (summed for raid0); None without scratch.
        Devices local_disks does not list count 0 (a check reports them)."""
        if self.scratch is None:
            return None
        sizes = {d.device: d.size_gib for d in self.local_disks}
        return sum(sizes.get(d, 0) for d in self.scratch.devices)

    def tmp_disk_mib(self) -> int | None:
        """TmpDisk for these nodes: the profile's own, else TMP_DISK_SHARE of the devices' size."""
        if self.scratch is None:
            return None
        if self.scratch.tmp_disk_mib is not None:
            return self.scratch.tmp_disk_mib
        return int((self.scratch_gib() or 0) * 1024 * TMP_DISK_SHARE)

    @property
    def gpu_count(self) -> int:
        return len(self.gpus.devices) if self.gpus else 0
