"""Checks: hardware profiles (GPU placement and the NVLink matrix)."""

from __future__ import annotations

from ..findings import error, info, warning
from ..model import Cluster, Role
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
        m = len(matrix)
        if m != n and _square(matrix, m):  # a whole matrix for another count: the devices disagree
            listed = ", ".join(f"socket {d.socket}" for d in profile.gpus.devices) or "none"
            more = m - n
            yield error(
                (*path, "devices"),
                f"devices lists {n} GPU{'s' if n != 1 else ''} ({listed}) but nvlink is a {m} x {m} matrix: "
                + (
                    f"{more} GPU{'s are' if more > 1 else ' is'} missing from devices, or nvlink has "
                    f"{more} row{'s' if more > 1 else ''} and column{'s' if more > 1 else ''} too many"
                    if more > 0
                    else f"devices has {-more} GPU{'s' if -more > 1 else ''} more than nvlink describes: add "
                    f"{'their rows and columns' if -more > 1 else 'its row and column'} to nvlink"
                ),
            )
            continue
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


# ---- local scratch ----------------------------------------------------------------------------


@check
def scratch_devices_are_local_disks(c: Cluster):
    """The scratch is made of disks the profile lists, each once; TmpDisk fits on them."""
    for name, profile in c.hardware.items():
        scratch = profile.scratch
        if scratch is None:
            continue
        path = ("hardware", name, "scratch")
        known = [d.device for d in profile.local_disks]
        seen: set[str] = set()
        for k, device in enumerate(scratch.devices):
            if device not in known:
                yield error(
                    (*path, "devices", k),
                    f"{device} is not one of the local_disks of {name!r}"
                    + (f" ({', '.join(known)})" if known else " (it lists none)"),
                )
            elif device in seen:
                yield error((*path, "devices", k), f"{device} is named twice")
            seen.add(device)
        size_mib = (profile.scratch_gib() or 0) * 1024
        if scratch.tmp_disk_mib is not None and scratch.tmp_disk_mib > size_mib:
            yield error(
                (*path, "tmp_disk_mib"),
                f"TmpDisk {scratch.tmp_disk_mib} MiB is more than the "
                f"{size_mib} MiB of its devices: slurmd would drain every node of {name!r} (Low TmpDisk)",
            )


@check
def job_tmp_lies_on_local_scratch(c: Cluster):
    """A group's job /tmp base on its profile's scratch; one scratch mount point (Slurm's TmpFS
    is one path for the whole cluster)."""
    points: dict[str, str] = {}
    for i, group in enumerate(c.nodes):
        profile = c.profile_of(group)
        if (
            group.has(Role.compute)
            and profile is not None
            and profile.scratch is not None
            and group.hardware not in points
        ):
            points[group.hardware] = profile.scratch.mount_point
        if not group.job_tmp_base:
            continue
        scratch = profile.scratch if profile is not None else None
        base = group.job_tmp_base.rstrip("/")
        mount = scratch.mount_point.rstrip("/") if scratch is not None else None
        if mount is None or not (base == mount or base.startswith(mount + "/")):
            where = (
                f"outside its local scratch {scratch.mount_point}"
                if scratch is not None
                else f"on the system disk (profile {group.hardware!r} has no scratch)"
            )
            yield warning(
                ("nodes", i, "job_tmp_base"),
                f"jobs' private /tmp under {group.job_tmp_base} lies "
                f"{where}: a job's files then fill the root file system",
            )
    if len(set(points.values())) > 1:
        listed = ", ".join(f"{name}: {point}" for name, point in points.items())
        first_other = next(name for name, point in points.items() if point != next(iter(points.values())))
        yield error(
            ("hardware", first_other, "scratch", "mount_point"),
            "Slurm's TmpFS is one path for the "
            f"cluster, but the Slurm nodes' scratch mount points differ ({listed}): mount them at one place",
        )
