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
CHECKS = ("cpus", "memory", "gpus", "gpu_model", "mounts", "services", "infiniband")
Check = Literal["cpus", "memory", "gpus", "gpu_model", "mounts", "services", "infiniband"]
NodeState = Literal["any", "idle", "alloc", "mixed", "nondrained_idle"]


class Health(Strict):
    program: Literal["hal", "nhc"] = Field(
        "hal",
        description="hal: the toolkit's own check program (hal-healthcheck); nhc: LBNL Node Health Check "
        "with an nhc.conf rendered from the same expectations.")
    interval_s: int = Field(300, ge=5, le=86400, description="HealthCheckInterval: seconds between runs on each node.")
    node_state: list[NodeState] = Field(
        default_factory=lambda: ["any"], min_length=1,
        description="HealthCheckNodeState: run on nodes in these states (any: every state).")
    cycle: bool = Field(
        False, description="HealthCheckNodeState CYCLE: spread the runs over the interval instead of all at once.")
    checks: list[Check] = Field(
        default_factory=lambda: list(CHECKS),
        description="Which checks run: cpus (sockets, cores, threads), memory (installed, within the tolerance), "
        "gpus (the GPU device files), gpu_model (nvidia-smi: count, model, memory), mounts (the shared file "
        "systems the node mounts), services (munge, and sssd with a directory), infiniband (the cabled ports "
        "ACTIVE at the fabric's rate).")
    memory_tolerance_pct: float = Field(
        5.0, ge=0, le=50,
        description="How far below the profile's memory_gib the memory the kernel sees may be (firmware and "
        "kernel reservations), in percent.")
    reason_prefix: str = Field(
        "hal-health", pattern=r"^[A-Za-z][A-Za-z0-9_.-]{0,31}$",
        description="Drain reasons start with '<prefix>: <check>: ...'; the program resumes only nodes whose "
        "reason starts with it, never a node an admin drained.")
