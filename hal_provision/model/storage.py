"""Storage: arrays and filesystems (GPFS and NFS). Extension point, filled in by later work."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import Hostlist, Name, Strict


class StorageArray(Strict):
    name: Name = Field(description="Array name.")
    model: str = Field(description="Vendor model, e.g. DDN GS400NVE.")
    usable_tib: float | None = Field(None, gt=0, description="Usable capacity in TiB.")
    filesystem: Literal["gpfs", "nfs", "none"] = Field(description="What the array serves.")


class Filesystem(Strict):
    name: Name = Field(description="Filesystem name.")
    type: Literal["gpfs", "nfs"] = Field(description="Spectrum Scale (gpfs) or NFS.")
    mount_point: str = Field(pattern=r"^/\S*$", description="Where clients mount it.")
    servers: Hostlist | None = Field(None, description="Model nodes serving it (NFS server).")
    export_path: str | None = Field(None, pattern=r"^/\S*$", description="NFS export path.")
    clients: Hostlist = Field(description="Nodes that mount it.")
    usable_tib: float | None = Field(None, gt=0, description="Usable capacity in TiB.")


class Storage(Strict):
    arrays: list[StorageArray] = Field(default_factory=list, description="Storage appliances.")
    filesystems: list[Filesystem] = Field(default_factory=list, description="Shared filesystems.")
