"""The cluster model: one pydantic tree for the whole cluster description (cluster.yml)."""

from __future__ import annotations

from functools import cached_property
from typing import Literal

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet
from pydantic import Field, PrivateAttr, model_validator

from ..hostlist import nodeset, union_shared
from .accounts import Accounts, Directory, ResearchGroup, User
from .base import Strict
from .identity import ClusterInfo
from .hardware import GpuDevice, Gpus, HardwareProfile, IbAdapter
from .health import Health
from .network import Fabric, FabricLink, Network, Switch
from .nodes import NodeGroup, Role
from .placement import Placement, resolving
from .services import Services
from .portal import Portal, PortalApp
from .monitoring import Grafana, InfluxDb, Monitoring
from .recipes import Recipes
from .slurm import Cgroup, Partition, Priority, Qos, Slurm, SwSuite, VirtualPartition
from .software import Containers, Module, Software
from .storage import (ApplianceServer, Gpfs, GpfsFilesystem, GpfsTuning, Nfs, NfsExport, NfsMount, NfsServer,
                      NodeClass, Nsd, Storage, StorageArray, lies_under)

SCHEMA_VERSION = 1


class Cluster(Strict):
    """A HAL-class cluster, described once."""

    schema_version: int = Field(SCHEMA_VERSION, ge=1, le=SCHEMA_VERSION, description="Format version of this file.")
    cluster: ClusterInfo = Field(description="Name, DNS domain and primary network.")
    networks: dict[str, Network] = Field(min_length=1, description="Networks by name.")
    fabric: Fabric | None = Field(None, description="The InfiniBand fabric and its cabling.")
    hardware: dict[str, HardwareProfile] = Field(
        min_length=1, description="Hardware profiles by name; node groups name them (compute and development "
        "groups must, the others may).")
    nodes: list[NodeGroup] = Field(min_length=1, description="Node groups.")
    services: Services = Field(description="Where each service runs.")
    slurm: Slurm = Field(description="Slurm configuration.")
    swsuite: SwSuite = Field(default_factory=SwSuite, description="Slurm Wrapper Suite.")
    storage: Storage = Field(default_factory=Storage, description="Storage appliances, Spectrum Scale and NFS.")
    software: Software = Field(default_factory=Software, description="Environment modules (Lmod).")
    containers: Containers | None = Field(None, description="Container runtime and fakeroot.")
    portal: Portal | None = Field(None, description="Web portal.")
    monitoring: Monitoring | None = Field(None, description="Monitoring stack.")
    recipes: Recipes | None = Field(None, description="Distributed training recipes and the scaling benchmark.")
    accounts: Accounts | None = Field(None, description="Research groups and users (LDAP directory, Slurm associations).")
    health: Health | None = Field(
        None, description="Node health check run by slurmd (HealthCheckProgram): compares each node with the model.")

    @model_validator(mode="after")
    def _site_defaults(self) -> Cluster:
        """Defaults that come from the cluster's name and install prefix, filled in here once, so
        every renderer reads one value and no site inherits another's paths or names."""
        info = self.cluster
        if self.software.modulefiles_root is None:
            self.software.modulefiles_root = info.under_prefix("modulefiles")
        if self.portal is not None and self.portal.prefix is None:
            self.portal.prefix = info.under_prefix("portal")
        if self.recipes is not None and self.recipes.prefix is None:
            self.recipes.prefix = info.under_prefix("recipes")
        grafana = self.monitoring.grafana if self.monitoring else None
        if grafana is not None and grafana.datasource is None:
            grafana.datasource = f"{info.name.upper()} InfluxDB"
        return self

    # resolved placement hostlist -> the expression with @references it was written as
    _written: dict[str, str] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _resolve_placements(cls, data, handler):
        """Placements (@GROUP, @role:ROLE) resolve against this description's node groups."""
        with resolving(data) as groups:
            cluster = handler(data)
        if isinstance(cluster, Cluster) and groups.written:
            cluster._written = {**cluster._written, **groups.written}
        return cluster

    def written(self, hostlist: str) -> str:
        """A placement as the description wrote it (@compute), for people to read; the
        resolved hostlist when it was written plainly."""
        return self._written.get(hostlist, hostlist)

    # ---- derived views (pure; node groups stay compressed) ----------------------------
    def group_nodeset(self, group: NodeGroup) -> NodeSet:
        return nodeset(group.hosts)

    @cached_property
    def all_hosts(self) -> NodeSet:
        return union_shared(g.hosts for g in self.nodes)

    def groups_with_role(self, *roles: Role) -> list[NodeGroup]:
        return [g for g in self.nodes if g.has(*roles)]

    @cached_property
    def slurm_nodes(self) -> NodeSet:
        """Nodes that run slurmd: every compute group."""
        return union_shared(g.hosts for g in self.groups_with_role(Role.compute))

    def group_of(self, host: str) -> NodeGroup | None:
        for g in self.nodes:
            if host in nodeset(g.hosts):
                return g
        return None

    def profile_of(self, group: NodeGroup) -> HardwareProfile | None:
        """The group's hardware profile; None for a group without one (login, management,
        storage and data transfer nodes may leave it out) or naming an unknown one (a check
        reports that)."""
        return self.hardware.get(group.hardware) if group.hardware is not None else None

    @property
    def home_root(self) -> str:
        """Where the users' home directories are: accounts.home_root, else /home."""
        return self.accounts.home_root if self.accounts is not None else "/home"

    def hosts_mounting(self, path: str) -> NodeSet:
        """Model hosts on which `path` lies on a shared file system: the GPFS cluster's model
        nodes when a GPFS file system is mounted at or above it, the clients of NFS mounts at
        or above it, and the NFS server of such a mount whose export is the mount point itself
        (the server holds the same files at the same path). A new set: the caller may change it."""
        hosts = NodeSet(resolver=RESOLVER_NOGROUP)
        gpfs = self.storage.gpfs
        if gpfs is not None and any(lies_under(path, fs.mount_point) for fs in gpfs.filesystems):
            for node_class in gpfs.node_classes:
                hosts.update(nodeset(node_class.hosts).intersection(self.all_hosts))
        for mount in self.storage.nfs.mounts:
            if lies_under(path, mount.mount_point):
                hosts.update(nodeset(mount.clients))
                export = self.storage.nfs.export(mount.export)
                if export is not None and export.path == mount.mount_point:
                    hosts.update(nodeset(export.server))
        return hosts

    def real_memory_mib(self, profile: HardwareProfile) -> int:
        return profile.memory_gib * 1024 - self.slurm.memory_reserve_mib

    @property
    def def_mem_per_cpu_mib(self) -> int:
        """slurm.def_mem_per_cpu_mib, else the smallest RealMemory per CPU of the compute nodes."""
        if self.slurm.def_mem_per_cpu_mib is not None:
            return self.slurm.def_mem_per_cpu_mib
        shares = [self.real_memory_mib(p) // p.cpus for p in
                  (self.profile_of(g) for g in self.groups_with_role(Role.compute)) if p is not None]
        return max(min(shares, default=1), 1)

    def fair_share_groups(self) -> list[tuple[int, ResearchGroup]]:
        """(index under accounts.groups, group) for each Slurm account with a fair-share of its own."""
        return [] if self.accounts is None else self.accounts.fair_share_groups()

    @property
    def priority_type(self) -> Literal["multifactor", "basic"]:
        """slurm.priority.type, else multifactor when fair-share or a QOS priority asks for it
        (priority/basic would ignore both), else basic."""
        chosen = self.slurm.priority.type
        if chosen is not None:
            return chosen
        return "multifactor" if self.fair_share_groups() or self.slurm.prioritised_qos() else "basic"


__all__ = [
    "Accounts", "Directory", "ResearchGroup", "User", "SCHEMA_VERSION", "Cgroup", "Cluster", "ClusterInfo", "Containers", "Fabric", "FabricLink",
    "ApplianceServer", "GpuDevice", "Gpus", "HardwareProfile", "Health", "IbAdapter", "Module", "Monitoring",
    "Network", "NodeGroup", "Partition", "Placement", "Portal", "Priority", "PortalApp", "Qos", "Recipes", "Role", "Services", "Slurm",
    "Software", "Storage", "StorageArray", "SwSuite", "Switch", "VirtualPartition",
    "Gpfs", "GpfsFilesystem", "GpfsTuning", "Nfs", "NfsExport", "NfsMount", "NfsServer", "NodeClass", "Nsd",
]
