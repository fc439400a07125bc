"""Node health: what slurmd's HealthCheckProgram compares every Slurm node with.

The model already says what each node should have (its hardware profile, the shared file
systems it mounts, the services every node runs, its cabled InfiniBand ports). The renderer
writes that down once per node group as the node's expectation; a check program run by slurmd
at `interval_s` compares the node with it, drains the node naming the failed check, and
resumes only the nodes it drained itself. Sites that run LBNL NHC get an nhc.conf written
from the same expectations instead (`program: nhc`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import Strict

# Every check the program knows, in the order it runs them.
CHECKS = ("cpus", "memory", "gpus", "gpu_model", "gpu_faults", "dcgm", "mounts", "services", "infiniband")
Check = Literal["cpus", "memory", "gpus", "gpu_model", "gpu_faults", "dcgm", "mounts", "services", "infiniband"]
NodeState = Literal["any", "idle", "alloc", "mixed", "nondrained_idle"]

# The XIDs (NVIDIA's driver error codes in the kernel log) that mean the GPU itself is bad, not
# the job on it: 48 double-bit ECC error, 63 and 64 a row remap or page retirement recorded /
# failed, 74 NVLink error, 79 fallen off the bus, 92 high single-bit ECC rate, 94 and 95
# contained / uncontained ECC error, 119 and 120 GSP (the GPU's firmware processor) timeout and
# error. Each wants a GPU reset or a reboot, some a replaced GPU. Left out on purpose: the XIDs a
# user's program causes (13 graphics engine exception, 31 MMU fault, 43 stopped channel, 45
# preemptive cleanup), which would drain a node for a bug in a job.
DEFAULT_XIDS = (48, 63, 64, 74, 79, 92, 94, 95, 119, 120)
ThrottleReason = Literal[
    "hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown", "sw_power_cap"
]


class GpuFaults(Strict):
    """What the gpu_faults check counts as a faulty GPU (nvidia-smi -q -x, nvidia-smi nvlink
    --status and the kernel log since boot)."""

    max_uncorrectable_ecc: int = Field(
        0,
        ge=0,
        description="Volatile (since the driver loaded) uncorrectable ECC errors a GPU may have, "
        "SRAM and DRAM together; more fail the check.",
    )
    xids: list[int] = Field(
        default_factory=lambda: list(DEFAULT_XIDS),
        description="XIDs in the kernel log since boot that fail the check, naming the GPU by PCI bus id. The "
        "default lists the ones that mean a bad GPU (ECC, row remapping, NVLink, fallen off the bus, GSP), not "
        "those a user's program causes; a reboot clears the log. Empty: the kernel log is not read.",
    )
    check_pcie: bool = Field(
        True,
        description="Compare each GPU's PCIe link with the profile's gpus.pcie_generation and "
        "gpus.pcie_width, where the profile names them.",
    )
    throttle_reasons: list[ThrottleReason] = Field(
        default_factory=lambda: ["hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"],
        description="Clock slowdown reasons that fail the check while nvidia-smi reports them Active: the "
        "hardware ones by default (overheating, a power supply's brake signal); sw_thermal_slowdown and "
        "sw_power_cap are the driver's own, normal under load.",
    )


class Health(Strict):
    program: Literal["hal", "nhc"] = Field(
        "hal",
        description="hal: the toolkit's own check program (hal-healthcheck); nhc: LBNL Node Health Check "
        "with an nhc.conf rendered from the same expectations.",
    )
    interval_s: int = Field(300, ge=5, le=86400, description="HealthCheckInterval: seconds between runs on each node.")
    node_state: list[NodeState] = Field(
        default_factory=lambda: ["any"],
        min_length=1,
        description="HealthCheckNodeState: run on nodes in these states (any: every state).",
    )
    cycle: bool = Field(
        False, description="HealthCheckNodeState CYCLE: spread the runs over the interval instead of all at once."
    )
    checks: list[Check] = Field(
        default_factory=lambda: list(CHECKS),
        description="Which checks run: cpus (sockets, cores, threads), memory (installed, within the tolerance), "
        "gpus (the GPU device files), gpu_model (nvidia-smi: count, model, memory), gpu_faults (GPU lost, "
        "uncorrectable ECC errors, row remapping, pages pending retirement, XIDs, inactive NVLink links, a "
        "PCIe link below the profile's, hardware clock slowdown), dcgm (where DCGM is installed: each GPU's "
        "Failure incident from `dcgmi health --check` (Warnings as dcgm_warnings says), the watches set when none are; passes on a "
        "node without dcgmi), mounts (the shared file "
        "systems the node mounts), services (munge, and sssd with a directory), infiniband (the cabled ports "
        "ACTIVE at the fabric's rate).",
    )
    gpu_faults: GpuFaults = Field(default_factory=GpuFaults, description="Thresholds of the gpu_faults check.")
    dcgm_warnings: Literal["report", "drain"] = Field(
        "report",
        description="What the dcgm check does with a GPU's Warning (a Failure always drains): report "
        "prints it in the check's output and its last result, leaving the node in service (a PCIe replay "
        "or a thermal violation is worth a look, not a drain); drain drains on it as on a Failure.",
    )
    memory_tolerance_pct: float = Field(
        5.0,
        ge=0,
        le=50,
        description="How far below the profile's memory_gib the memory the kernel sees may be (firmware and "
        "kernel reservations), in percent.",
    )
    reason_prefix: str = Field(
        "hal-health",
        pattern=r"^[A-Za-z][A-Za-z0-9_.-]{0,31}$",
        description="Drain reasons start with '<prefix>: <check>: ...'; the program resumes only nodes whose "
        "reason starts with it, never a node an admin drained.",
    )
