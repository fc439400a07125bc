"""Checks: hardware profiles (GPU placement and the NVLink matrix)."""

from __future__ import annotations

from ..findings import error, info
from ..model import Cluster
from . import check


def _gpu_profiles(c: Cluster):
    for name, profile in c.hardware.items():
        if profile.gpus is not None:
            yield name, profile, ("hardware", name, "gpus")


@check
def gpu_sockets_exist(c: Cluster):
    for name, profile, path in _gpu_profiles(c):
        for k, device in enumerate(profile.gpus.devices):
            if device.socket >= profile.sockets:
                yield error(
                    (*path, "devices", k, "socket"),
                    f"GPU {k} is on socket {device.socket}, but {name!r} has {profile.sockets} "
                    f"socket(s), numbered 0-{profile.sockets - 1}",
                )


def _square(matrix: list[list[int]], n: int) -> bool:
    return len(matrix) == n and all(len(row) == n for row in matrix)


@check
def nvlink_matrix_shape(c: Cluster):
    for _name, profile, path in _gpu_profiles(c):
        matrix, n = profile.gpus.nvlink, profile.gpu_count
        if not matrix:
            continue  # no NVLink
        if len(matrix) != n:
            yield error(
                (*path, "nvlink"),
                f"nvlink has {len(matrix)} rows for {n} GPUs; it must be a {n} x {n} matrix (or empty)",
            )
        for r, row in enumerate(matrix):
            if len(row) != n:
                yield error(
                    (*path, "nvlink", r),
                    f"nvlink row {r} has {len(row)} entries; each row needs one per GPU ({n})",
                )


@check
def nvlink_matrix_symmetric(c: Cluster):
    for _name, profile, path in _gpu_profiles(c):
        matrix, n = profile.gpus.nvlink, profile.gpu_count
        if not matrix or not _square(matrix, n):
            continue  # nvlink_matrix_shape reports it
        for i in range(n):
            for j in range(i + 1, n):
                if matrix[i][j] != matrix[j][i]:
                    yield error(
                        (*path, "nvlink", j, i),
                        f"nvlink[{j}][{i}] is {matrix[j][i]} but nvlink[{i}][{j}] is {matrix[i][j]}; "
                        "a link joins both GPUs, so the matrix must be symmetric",
                    )


@check
def nvlink_counts_not_negative(c: Cluster):
    for _name, profile, path in _gpu_profiles(c):
        for i, row in enumerate(profile.gpus.nvlink):
            for j, count in enumerate(row):
                if count < 0 and i != j:
                    yield error(
                        (*path, "nvlink", i, j),
                        f"nvlink[{i}][{j}] is {count}; a count of NVLink connections is 0 or more",
                    )


@check
def hardware_profiles_used(c: Cluster):
    used = {g.hardware for g in c.nodes}
    for name in c.hardware:
        if name not in used:
            yield info(("hardware", name), f"hardware profile {name!r} is not used by any node group")
