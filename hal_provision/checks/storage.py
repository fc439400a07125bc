"""Checks: storage arrays and shared filesystems."""

from __future__ import annotations

from ..findings import error
from ..hostlist import nodeset
from ..model import Cluster
from . import check
from .common import outside, shown, unique


def _filesystems(c: Cluster):
    for i, fs in enumerate(c.storage.filesystems):
        yield i, fs, ("storage", "filesystems", i)


@check
def storage_names_unique(c: Cluster):
    yield from unique(c.storage.arrays, ("storage", "arrays"), "array name")
    yield from unique(c.storage.filesystems, ("storage", "filesystems"), "filesystem name")
    yield from unique(c.storage.filesystems, ("storage", "filesystems"), "mount point", key="mount_point")


@check
def filesystem_hosts_in_model(c: Cluster):
    for _i, fs, path in _filesystems(c):
        for key in ("servers", "clients"):
            expr = getattr(fs, key)
            unknown = outside(nodeset(expr), c.all_hosts) if expr else ()
            if len(unknown):
                yield error((*path, key), f"{key} of {fs.name!r} name {shown(unknown)}, not in any node group")


@check
def nfs_has_server_and_export(c: Cluster):
    for _i, fs, path in _filesystems(c):
        if fs.type != "nfs":
            continue
        for key in ("servers", "export_path"):
            if getattr(fs, key) is None:
                yield error(path, f"NFS filesystem {fs.name!r} needs {key}")
