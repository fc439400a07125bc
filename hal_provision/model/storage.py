"""Storage: appliances, the Spectrum Scale (GPFS) cluster and its file systems, and NFS.

GPFS cluster members are named by hostlists that may mix model nodes (managed by Ansible)
and appliance servers: the NSD servers that run inside a storage array's controllers (DDN
GRIDScaler, IBM ESS) and that nobody logs into with Ansible. Appliance servers are declared
under their array, with their own memory, so the same checks (memory fit, one node class per
member) cover both kinds.

Tuning keys are Spectrum Scale's own attribute names (`mmchconfig pagepool=...`), so an
administrator reads them as in IBM's documentation. Sizes are written the way mmchconfig and
mmcrfs take them: an integer with K, M, G or T (binary units), e.g. 1M, 32G.
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import Annotated, Literal

from ClusterShell.NodeSet import NodeSet
from pydantic import AfterValidator, Field

from ..hostlist import union_shared

from .base import Name, Strict, absolute_path
from .placement import PLACED, Placement

_SIZE = re.compile(r"^(\d+)([KMGT])$")
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def size_bytes(value: str) -> int:
    """Bytes of a size such as '1M' or '32G' (binary units, as GPFS reads them)."""
    match = _SIZE.match(value.strip().upper())
    if match is None:
        raise ValueError(f"{value!r} is not a size: write an integer with K, M, G or T, e.g. 1M or 32G")
    return int(match.group(1)) * _UNITS[match.group(2)]


def lies_under(path: str, directory: str) -> bool:
    """Whether `path` is `directory` or inside it (both absolute, as written)."""
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _check_size(value: str) -> str:
    size_bytes(value)
    return value


Size = Annotated[str, AfterValidator(_check_size)]
"""A size such as 1M, 256K or 32G; kept as written, compared in bytes."""

AbsolutePath = absolute_path(r"^/[^\s]*$")


# ---- appliances -----------------------------------------------------------------------------
class ApplianceServer(Strict):
    name: Name = Field(description="Host name of the server inside the appliance, as GPFS knows it (e.g. ddn1-a).")
    memory_gib: int = Field(gt=0, description="Memory of the server (or of its NSD-server VM) in GiB.")
    description: str = Field("", description="Free text, e.g. which controller.")


class StorageArray(Strict):
    name: Name = Field(description="Array name.")
    model: str = Field(description="Vendor model, e.g. DDN GS400NVE.")
    usable_tib: float | None = Field(None, gt=0, description="Usable capacity in TiB.")
    servers: list[ApplianceServer] = Field(
        default_factory=list,
        description="Servers running inside the array (embedded NSD servers); not managed by Ansible, "
        "but members of the GPFS cluster when a node class names them.",
    )
    description: str = Field("", description="Free text.")


# ---- Spectrum Scale -------------------------------------------------------------------------
class GpfsTuning(Strict):
    """mmchconfig attributes. Unset (null) means: inherit the cluster-wide value, else GPFS's default."""

    pagepool: Size | None = Field(None, description="Pinned cache for data and metadata (GPFS default 1G).")
    nsdBufSpace: int | None = Field(
        None, ge=10, le=70, description="Percent of the pagepool for NSD-server buffers (default 30); NSD servers only."
    )
    nsdMaxWorkerThreads: int | None = Field(
        None, ge=1, le=8192, description="Most threads serving NSD I/O on an NSD server (default 512)."
    )
    nsdMinWorkerThreads: int | None = Field(
        None, ge=1, le=8192, description="Threads an NSD server starts with (default 16); at most nsdMaxWorkerThreads."
    )
    nsdThreadsPerQueue: int | None = Field(None, ge=2, le=48, description="Threads per NSD I/O queue (default 3).")
    workerThreads: int | None = Field(
        None, ge=1, le=8192, description="Concurrent file operations of the daemon (default 48)."
    )
    maxFilesToCache: int | None = Field(
        None, ge=1, description="Inodes cached per node (default 4000); about 3 KiB of memory each."
    )
    maxStatCache: int | None = Field(
        None, ge=0, description="Stat-only entries cached per node (default 1000); about 400 bytes each."
    )
    maxMBpS: int | None = Field(
        None, ge=1, description="Expected I/O rate per node in MB/s, sizes prefetch (default 2048)."
    )
    maxblocksize: Size | None = Field(
        None, description="Largest file-system block size the cluster accepts (5.x default 4M)."
    )
    pagepoolMaxPhysMemPct: int | None = Field(
        None, ge=10, le=90, description="Largest pagepool as percent of physical memory (default 75)."
    )
    other: dict[str, str] = Field(
        default_factory=dict,
        description="Any other mmchconfig attribute, applied verbatim (not validated; treated as needing a restart).",
    )


class NodeClass(Strict):
    name: Name = Field(description="GPFS node class name (mmcrnodeclass), e.g. nsdNodes.")
    hosts: Placement = Field(description="Members: model nodes and/or appliance servers." + PLACED)
    tuning: GpfsTuning = Field(default_factory=GpfsTuning, description="Settings for this class (mmchconfig -N).")
    description: str = Field("", description="Free text.")


class Nsd(Strict):
    """A run of `count` NSDs: names <name>01.., devices <device>01.., the same servers and pool."""

    name: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_]*$", description="NSD name, or its prefix when count > 1.")
    count: int = Field(1, ge=1, le=10000, description="How many NSDs; more than 1 numbers name and device 01, 02, ...")
    device: AbsolutePath = Field(description="Block device on the servers, or its prefix when count > 1.")
    servers: list[Name] = Field(
        min_length=1, max_length=8, description="NSD servers, primary first (GPFS allows up to 8)."
    )
    rotate_servers: bool = Field(
        True,
        description="Rotate the server order from one NSD to the next, so each server is primary for an equal share.",
    )
    failure_group: int = Field(ge=-1, le=4000, description="Failure group; replicas go to different groups.")
    usage: Literal["dataAndMetadata", "dataOnly", "metadataOnly", "descOnly"] = Field(
        "dataAndMetadata", description="What the NSDs hold."
    )
    pool: Name = Field("system", description="Storage pool; metadata lives in 'system'.")


class GpfsFilesystem(Strict):
    name: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_]{0,31}$", description="File-system device name (mmcrfs Device).")
    mount_point: AbsolutePath = Field(description="Where every node of the GPFS cluster mounts it (mmcrfs -T).")
    block_size: Size = Field(description="Data block size (mmcrfs -B); one of 64K..16M.")
    metadata_block_size: Size | None = Field(
        None, description="Metadata block size (--metadata-block-size); needs metadataOnly NSDs in the system pool."
    )
    log_size: Size | None = Field(
        None, description="Internal log size (mmcrfs -L); a multiple of the metadata block size."
    )
    inode_limit: int | None = Field(None, ge=1, description="Most inodes (--inode-limit).")
    inodes_preallocated: int | None = Field(None, ge=1, description="Inodes allocated at creation (--inode-limit N:M).")
    data_replicas: int = Field(1, ge=1, le=3, description="Default data replicas (-r).")
    metadata_replicas: int = Field(1, ge=1, le=3, description="Default metadata replicas (-m).")
    max_data_replicas: int = Field(2, ge=1, le=3, description="Maximum data replicas (-R).")
    max_metadata_replicas: int = Field(2, ge=1, le=3, description="Maximum metadata replicas (-M).")
    automount: bool = Field(True, description="Mount when the daemon starts (-A yes).")
    quotas: bool = Field(False, description="Enable quotas (-Q yes).")
    usable_tib: float | None = Field(None, gt=0, description="Usable capacity in TiB, informational.")
    nsds: list[Nsd] = Field(min_length=1, description="The disks, as runs of NSDs.")
    description: str = Field("", description="Free text.")


class Gpfs(Strict):
    cluster_name: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9.\-]*$", description="GPFS cluster name (mmcrcluster -C)."
    )
    release: str = Field("", description="Spectrum Scale release, informational (e.g. 5.0.4).")
    admin_host: Placement = Field(
        description="The model node Ansible runs mm commands on (one host, a member of the cluster)." + PLACED
    )
    daemon_network: Name | None = Field(
        None,
        description="Network whose names the daemons use (node file NodeName = host + its host_suffix); "
        "the admin name stays the primary one. Appliance servers keep their names.",
    )
    quorum: Placement = Field(description="Quorum nodes." + PLACED)
    managers: Placement = Field(description="Manager nodes (file-system and token managers)." + PLACED)
    tiebreaker_disks: list[str] = Field(
        default_factory=list, description="NSD names used as tiebreaker disks (node quorum with tiebreaker disks)."
    )
    node_classes: list[NodeClass] = Field(
        min_length=1, description="Node classes; every cluster member is in exactly one."
    )
    tuning: GpfsTuning = Field(default_factory=GpfsTuning, description="Cluster-wide settings (mmchconfig without -N).")
    filesystems: list[GpfsFilesystem] = Field(default_factory=list, description="GPFS file systems.")

    @cached_property
    def members(self) -> NodeSet:
        """Every member of the GPFS cluster, model nodes and appliance servers: the union of its
        node classes. Shared: never change it."""
        return union_shared(nc.hosts for nc in self.node_classes)


# ---- NFS ------------------------------------------------------------------------------------
class NfsServer(Strict):
    host: Placement = Field(description="The model node serving NFS (one host)." + PLACED)
    volumes: list[AbsolutePath] = Field(
        min_length=1, description="Local file systems the server exports from (e.g. its RAID array at /export)."
    )
    threads: int = Field(8, ge=1, le=1024, description="nfsd threads (nfs.conf [nfsd] threads).")
    description: str = Field("", description="Free text.")


class NfsExport(Strict):
    name: Name = Field(description="Export name; mounts refer to it.")
    server: Placement = Field(description="The NFS server (one host, declared under nfs.servers)." + PLACED)
    path: AbsolutePath = Field(description="Exported directory on the server; inside one of its volumes.")
    clients: Placement | None = Field(
        None, description="Model nodes allowed to mount, one exports(5) entry each." + PLACED
    )
    networks: list[Name] = Field(
        default_factory=list, description="Networks (keys of `networks`) allowed to mount, as their CIDR."
    )
    options: list[str] = Field(
        default_factory=lambda: ["rw", "sync", "no_subtree_check", "root_squash"],
        description="exports(5) options for every client of this export.",
    )


class NfsMount(Strict):
    export: Name = Field(description="Name of the export to mount.")
    mount_point: AbsolutePath = Field(description="Where the clients mount it.")
    clients: Placement = Field(description="Model nodes that mount it." + PLACED)
    options: list[str] = Field(
        default_factory=lambda: ["rw", "hard", "vers=4.2"], description="mount.nfs options (_netdev is added)."
    )


class Nfs(Strict):
    servers: list[NfsServer] = Field(default_factory=list, description="NFS servers.")
    exports: list[NfsExport] = Field(default_factory=list, description="What they export, to whom.")
    mounts: list[NfsMount] = Field(default_factory=list, description="Who mounts what, where.")

    def export(self, name: str) -> NfsExport | None:
        return next((e for e in self.exports if e.name == name), None)


class Storage(Strict):
    arrays: list[StorageArray] = Field(default_factory=list, description="Storage appliances.")
    gpfs: Gpfs | None = Field(None, description="The Spectrum Scale cluster and its file systems.")
    nfs: Nfs = Field(default_factory=Nfs, description="NFS servers, exports and client mounts.")

    @property
    def appliance_servers(self) -> dict[str, ApplianceServer]:
        return {s.name: s for a in self.arrays for s in a.servers}

    def filesystem_mounts(self) -> dict[str, str]:
        """Shared file system name -> mount point: GPFS file systems by name, NFS mounts by
        export (the names `containers.bind_filesystems` and the software checks use)."""
        out: dict[str, str] = {}
        if self.gpfs is not None:
            for fs in self.gpfs.filesystems:
                out.setdefault(fs.name, fs.mount_point)
        for mount in self.nfs.mounts:
            out.setdefault(mount.export, mount.mount_point)
        return out

    def filesystem_names(self) -> set[str]:
        """Names other sections use for shared file systems: GPFS file systems, NFS exports
        (mounted or not)."""
        names = {fs.name for fs in self.gpfs.filesystems} if self.gpfs is not None else set()
        return names | {e.name for e in self.nfs.exports}
