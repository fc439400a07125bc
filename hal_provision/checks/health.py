"""Checks: the node health check (what it can compare, and with which program)."""

from __future__ import annotations

from ..findings import error, info, warning
from ..model import Cluster, Role
from . import check
from .common import duplicates

HEALTH = ("health",)


@check
def health_checks_apply(c: Cluster):
    """Each named check once, and each one with something to compare on the Slurm nodes: no
    GPUs, fabric or shared file systems make gpus/gpu_model, infiniband or mounts empty."""
    h = c.health
    if h is None:
        return
    for again, first in duplicates(h.checks):
        yield error((*HEALTH, "checks", again), f"{h.checks[again]!r} is listed twice (first at [{first}])")
    groups = c.groups_with_role(Role.compute)
    if not groups:
        yield warning(HEALTH, "no compute node group: slurmd runs nowhere, so the health check never runs")
        return
    has_gpus = any((p := c.profile_of(g)) is not None and p.gpus for g in groups) or bool(
        c.composable is not None and c.composable.pools
    )  # pool GPUs, held in some layout
    reasons = {
        "gpus": None if has_gpus else "no compute node has GPUs",
        "gpu_model": None if has_gpus else "no compute node has GPUs",
        "infiniband": None if c.fabric is not None else "there is no fabric",
        "mounts": None if c.storage.gpfs is not None or c.storage.nfs.mounts else "no shared file system is mounted",
    }
    if "checks" not in h.model_fields_set:
        return  # the default, every check: those with nothing to compare simply do nothing
    for i, name in enumerate(h.checks):
        if reasons.get(name):
            yield info((*HEALTH, "checks", i), f"{name!r} has nothing to check: {reasons[name]}")


@check
def health_program(c: Cluster):
    """NHC has no stock check of the GPU model; a check interval longer than SlurmdTimeout
    lets a broken node take jobs for longer than a dead one would."""
    h = c.health
    if h is None:
        return
    if h.program == "nhc" and "gpu_model" in h.checks:
        yield warning(
            (*HEALTH, "checks", h.checks.index("gpu_model")),
            "LBNL NHC has no stock GPU model check: nhc.conf checks the GPU device files only "
            "(program: hal checks the model and memory through nvidia-smi)",
        )
    if h.interval_s > c.slurm.slurmd_timeout_s:
        yield info(
            (*HEALTH, "interval_s"),
            f"every {h.interval_s} s is longer than SlurmdTimeout ({c.slurm.slurmd_timeout_s} s): "
            "a node that fails a check keeps taking jobs for longer than a node that stops answering",
        )
