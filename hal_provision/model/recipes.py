"""Training recipes: the cluster's own distributed ResNet-50 recipe and its scaling benchmark.

HAL's paper proves the system by training ResNet-50 on ImageNet from 4 GPUs on one node to 64
GPUs on 16 nodes (PyTorch DDP, per-GPU batch 256, mixed precision, learning-rate scaling with
warm-up), and its users got recipes because multi-node training "is non-trivial even for
advanced users". This section places the recipe (the programs in hal_provision.node.recipes and
the job scripts rendered for this cluster) on every login, development and compute node, and
says how jobs start: through the wrapper suite's virtual partitions, one srun task per GPU, or
on a job without GPUs (a cpu virtual partition: whole nodes) one per socket, pinned as the
partition's hardware profile says (cpu_layouts).
"""

from __future__ import annotations

from typing import Annotated, NamedTuple

from pydantic import Field, StringConstraints

from .base import AbsolutePath, Name, Strict
from .software import ModuleRef


class Recipes(Strict):
    prefix: AbsolutePath | None = Field(
        None,
        description="Where the recipes are installed on every login, development and compute node "
        "(PREFIX/resnet50/...). Default: cluster.prefix/recipes.",
    )
    framework_module: ModuleRef | None = Field(
        None,
        description="software.modules entry that provides PyTorch and torchvision, loaded by the job scripts "
        "before the program starts; None: the job's own environment (a virtualenv the user activates).",
    )
    cpu_framework_module: ModuleRef | None = Field(
        None,
        description="software.modules entry with a CPU build of PyTorch, loaded instead of framework_module by "
        "jobs without GPUs (the cpu virtual partitions: gloo, threads and pinning from the hardware profile); "
        "None: framework_module there too.",
    )
    virtual_partition: Name = Field(
        description="The wrapper suite's GPU virtual partition the job script asks for by default "
        "(`#SWBATCH -p`); `swbatch -p gpuxN resnet50.swbatch` overrides it."
    )
    scaling_partitions: list[Name] = Field(
        default_factory=list,
        description="Virtual partitions the scaling benchmark runs, smallest first; empty: every GPU virtual "
        "partition whose GPU count is a power of two.",
    )
    batch_per_gpu: int = Field(256, ge=1, le=4096, description="Images per GPU per step (the paper: 256).")
    time_hours: float = Field(1.0, gt=0, description="Time limit of one benchmark job, in hours.")
    nccl_ib_hca: list[Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_]+:[0-9]+$")]] | None = Field(
        None,
        description="NCCL_IB_HCA entries (DEVICE:PORT, e.g. mlx5_0:1); None: derived from the fabric: the "
        "cabled ports of the compute nodes, each as its hardware profile's ib_adapters name it (`devices`, "
        "else the mlx5 driver's naming for ConnectX-4 and later: the node's i-th port is mlx5_<i-1>:1). "
        "Without a fabric NCCL uses TCP sockets (NCCL_IB_DISABLE=1).",
    )


def gpu_partitions(swsuite) -> dict[str, int]:
    """The wrapper suite's GPU virtual partitions: name -> GPUs."""
    return {vp.name: vp.gpus for vp in swsuite.virtual_partitions if vp.kind == "gpu" and vp.gpus}


def scaling_partitions(recipes: Recipes, swsuite) -> list[str]:
    """The benchmark's virtual partitions: the model's list, else every GPU virtual partition
    with a power-of-two GPU count, fewest GPUs first (1, 2, 4, 8, 16 on HAL); on a cluster
    without GPU virtual partitions, the cpu ones with a power-of-two node count."""
    if recipes.scaling_partitions:
        return list(recipes.scaling_partitions)
    gpus = gpu_partitions(swsuite)
    if not gpus:
        return cpu_scaling_partitions(swsuite)
    return sorted((n for n, g in gpus.items() if g & (g - 1) == 0), key=lambda n: (gpus[n], n))


def nccl_ib_hca(recipes: Recipes, fabric, compute_groups) -> list[str]:
    """NCCL_IB_HCA for the compute nodes: the model's list, else the DEVICE:PORT of every port
    the fabric cables on compute nodes (HardwareProfile.ib_ports: the profile's devices, or
    the mlx5 naming), adapters with nearest GPUs in the order of those GPUs, the others after
    them in port order; none without a fabric. `compute_groups`: (hosts, hardware profile or
    None) of each compute group."""
    if recipes.nccl_ib_hca is not None:
        return list(recipes.nccl_ib_hca)
    if fabric is None:
        return []
    from ..hostlist import nodeset, overlaps

    cabled = fabric.hosts_by_port()
    found: dict[str, tuple[float, int]] = {}
    for hosts, profile in compute_groups:
        ports = profile.ib_ports() if profile is not None else []
        for number, on in cabled.items():
            if not overlaps(on, nodeset(hosts)) or number > len(ports):
                continue  # a port the profile lacks: a check reports it
            port = ports[number - 1]
            found.setdefault(str(port), (min(port.gpus) if port.gpus else float("inf"), number))
    return sorted(found, key=found.__getitem__)


def cpu_scaling_partitions(swsuite) -> list[str]:
    """The benchmark's CPU runs: every cpu virtual partition with a power-of-two node count,
    fewest nodes first (cpun1, cpun2, cpun4 on HAL)."""
    nodes = {vp.name: vp.nodes for vp in swsuite.virtual_partitions if vp.kind == "cpu" and vp.nodes}
    return sorted((n for n, k in nodes.items() if k & (k - 1) == 0), key=lambda n: (nodes[n], n))


class CpuLayout(NamedTuple):
    """How the recipe runs on the CPUs of one real partition's nodes: one task per socket (its
    memory local), each given the socket's hardware threads and running one compute thread per
    core (SMT threads share a core's vector units; a second thread per core adds little to
    convolutions and costs cache)."""

    partition: str
    profile: str  # the hardware profile it was derived from
    tasks_per_node: int  # = sockets
    cpus_per_task: int  # = cores_per_socket * threads_per_core
    threads: int  # = cores_per_socket: OMP_NUM_THREADS, MKL_NUM_THREADS, torch.set_num_threads
    profiles: int  # how many profiles the partition's nodes have (more than 1: the smallest taken)


def cpu_layout(partition: str, name: str, profile, profiles: int = 1) -> CpuLayout:
    """The layout of the nodes of hardware profile `profile` (named `name`)."""
    return CpuLayout(
        partition,
        name,
        profile.sockets,
        profile.cores_per_socket * profile.threads_per_core,
        profile.cores_per_socket,
        profiles,
    )


def cpu_layouts(cluster) -> list[CpuLayout]:
    """One layout per real partition the cpu virtual partitions send jobs to, in the order the
    virtual partitions first name them; a partition without compute nodes has none. A
    partition of several builds takes the one with the fewest hardware threads (then sockets):
    its sockets x socket-sized tasks fit every node of the job, whichever builds it gets."""
    out: list[CpuLayout] = []
    for vp in cluster.swsuite.virtual_partitions:
        if vp.kind != "cpu" or any(layout.partition == vp.partition for layout in out):
            continue
        builds = cluster.partition_hardware(vp.partition)
        if not builds:
            continue
        smallest = min(builds, key=lambda b: (b.profile.cpus, b.profile.sockets, b.name))
        out.append(cpu_layout(vp.partition, smallest.name, smallest.profile, len(builds)))
    return out
