"""The cluster model: one pydantic tree for the whole cluster description (cluster.yml)."""

from __future__ import annotations

from functools import cached_property
from typing import Literal, NamedTuple

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet
from pydantic import Field, PrivateAttr, field_validator, model_validator

from ..hostlist import (
    MAX_HOSTS,
    common_count,
    count_bound,
    empty,
    expand,
    fold,
    nodeset,
    outside,
    overlap,
    overlaps,
    pieces,
    union_shared,
)
from ..node.swsuite.translate import JobShape, SwError, job_shape
from .accounts import Accounts, Directory, ResearchGroup, User
from .backup import SECRET_STATES as BACKUP_SECRET_STATES, STATES as BACKUP_STATES, Backup, BackupDestination
from .base import Strict
from .deploy import Deploy, DistributionPoint
from .composable import Composable, GpuPool, Layout, PoolGpus
from .identity import ClusterInfo
from .hardware import GpuDevice, Gpus, HardwareProfile, IbAdapter
from .health import Health
from .network import Fabric, FabricLink, Network, Switch
from .nodes import NodeGroup, Role
from .sharing import GpuSharing, MigInstances
from .placement import NodeGroups, Placement, resolving
from .services import Services
from .portal import Portal, PortalApp
from .provisioning import Bmc, Image, Provisioning
from .monitoring import Monitoring
from .recipes import Recipes
from .slurm import Cgroup, Partition, Priority, Qos, Slurm, SwSuite, VirtualPartition
from .slurm_versions import operating_system
from .software import Containers, Module, Software
from .storage import (
    ApplianceServer,
    Gpfs,
    GpfsFilesystem,
    GpfsTuning,
    Nfs,
    NfsExport,
    NfsMount,
    NfsServer,
    NodeClass,
    Nsd,
    Storage,
    StorageArray,
    lies_under,
)

SCHEMA_VERSION = 1


class MountedFilesystem(NamedTuple):
    """A shared file system where it is mounted, and the model nodes that mount it there."""

    name: str  # the GPFS file system's, or the NFS export's
    mount_point: str
    hosts: NodeSet  # shared: never change it


class BackupJob(NamedTuple):
    """One backup job: which state it backs up and the host that holds it (and runs it)."""

    name: str  # in backup.json: the state's, or secrets-<host> where secrets lie on several hosts
    state: str  # one of model.backup.STATES
    host: str
    sources: tuple[str, ...] = ()  # a secrets job's: the services (Services' keys) whose secrets it holds

    @property
    def secret(self) -> bool:
        """Its snapshots are root's alone, on a file system only its host mounts (SECRET_STATES)."""
        return self.state in BACKUP_SECRET_STATES


class DeployPoint(NamedTuple):
    """A distribution point as deployed: its host and the pull nodes it serves."""

    host: str
    serves: NodeSet  # shared: never change it


class PartitionBuild(NamedTuple):
    """One node build (hardware profile) behind a Slurm partition."""

    name: str  # the hardware profile's
    profile: HardwareProfile
    count: int  # the partition's compute nodes of this build


class NodeBuild(NamedTuple):
    """Hosts of one compute group that share one build: the profile as the active layout
    composes it (its own GPUs, then the pool's) and the pool features it adds."""

    profile: HardwareProfile
    features: tuple[str, ...]  # pool_<name> on hosts cabled to a pool
    hosts: str  # a hostlist


class BootEntry(NamedTuple):
    """A host the boot server answers: its boot MAC, its address on the provisioning network
    (None where its group has none there), its group and the image it boots."""

    host: str
    mac: str
    address: str | None
    group: str
    image: str


class BmcTarget(NamedTuple):
    """How to reach one host's BMC: Redfish base URL (or IPMI address), the system (None: the
    only one), whether TLS is verified, where the credentials are."""

    host: str
    protocol: str
    address: str
    system: str | None
    verify_tls: bool
    credentials: object


class Cluster(Strict):
    """A HAL-class cluster, described once."""

    schema_version: int = Field(SCHEMA_VERSION, ge=1, le=SCHEMA_VERSION, description="Format version of this file.")
    cluster: ClusterInfo = Field(description="Name, DNS domain, primary network and operating system.")
    networks: dict[str, Network] = Field(min_length=1, description="Networks by name.")
    fabric: Fabric | None = Field(None, description="The InfiniBand fabric and its cabling.")
    hardware: dict[str, HardwareProfile] = Field(
        min_length=1,
        description="Hardware profiles by name; node groups name them (compute and development "
        "groups must, the others may).",
    )
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
    accounts: Accounts | None = Field(
        None, description="Research groups and users (LDAP directory, Slurm associations)."
    )
    health: Health | None = Field(
        None, description="Node health check run by slurmd (HealthCheckProgram): compares each node with the model."
    )
    backup: Backup | None = Field(
        None,
        description="Backups of the cluster's lasting state (accounting database, directory, monitoring "
        "database, slurmctld's state, generated secrets) to a shared file system, on a schedule.",
    )
    composable: Composable | None = Field(
        None,
        description="Composable GPUs: pools of GPUs in expansion chassis attached to the hosts cabled to "
        "them, named layouts of how many each host holds, and the active layout (the one deployed).",
    )
    deploy: Deploy = Field(
        default_factory=Deploy,
        description="How the nodes are converged: pushed from the controller (default), or pulled by the compute "
        "nodes from a bundle published on distribution points (mode pull).",
    )
    provisioning: Provisioning | None = Field(
        None,
        description="Bare metal: the node images, the network boot the management node serves (DHCP, iPXE, "
        "HTTP) and, with each node group's `bmc`, power and reimaging. None: the nodes' OS is installed by other "
        "means.",
    )

    @field_validator("nodes", mode="before")
    @classmethod
    def _hosts_within_bounds(cls, groups):
        """All node groups together name at most MAX_HOSTS hosts, counted from their text
        before any group's hosts are built."""
        if isinstance(groups, list):
            texts = [g["hosts"] for g in groups if isinstance(g, dict) and isinstance(g.get("hosts"), str)]
            counts = [count_bound(t) for t in texts]
            # One expression over the bound is reported at its own line, by the Hostlist type.
            if sum(counts) > MAX_HOSTS and max(counts) <= MAX_HOSTS:
                count = sum(counts)
                raise ValueError(
                    f"the node groups name {count:,} hosts together, more than the {MAX_HOSTS:,} a description may"
                )
        return groups

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
            kind = "Prometheus" if self.monitoring.backend == "prometheus" else "InfluxDB"
            grafana.datasource = f"{info.name.upper()} {kind}"
        if self.backup is not None:
            for destination in (self.backup.destination, *self.backup.host_destinations.values()):
                if destination.subdirectory is None:
                    destination.subdirectory = info.name
        return self

    @model_validator(mode="after")
    def _link_devices(self) -> Cluster:
        """A fabric link that names its port by device (mlx5_3) gets that port's number in the
        hosts' hardware profile, the one every consumer of the fabric reads; where the profiles
        do not have it, or disagree, the link keeps port 1 and the check link_devices_known says
        what is wrong. A link that gives `port` as well (as a dumped model does) keeps it: the
        check says when the two differ."""
        if self.fabric is None:
            return self
        for link in self.fabric.links:
            if link.device is not None and "port" not in link.model_fields_set:
                numbers = set(self.link_device_ports(link).values())
                if len(numbers) == 1 and None not in numbers:
                    link.port = numbers.pop()
        return self

    def link_device_ports(self, link) -> dict[str, int | None]:
        """Hardware profile -> the port number its ib_adapters give `link.device` (None: no such
        port), for each profile of the link's hosts."""
        want = link.device if ":" in link.device else f"{link.device}:1"
        hosts = nodeset(link.hosts)
        out: dict[str, int | None] = {}
        for group in self.nodes:
            profile = self.hardware.get(group.hardware) if group.hardware else None
            if profile is None or not overlaps(nodeset(group.hosts), hosts):
                continue
            names = [str(p) for p in profile.ib_ports()]
            out[group.hardware] = names.index(want) + 1 if want in names else None
        return out

    @model_validator(mode="after")
    def _slurm_of_the_os(self) -> Cluster:
        """slurm.version left out: the major cluster.os ships (the checks refuse another one unless
        slurm.build_own says the site provides its own packages)."""
        if self.slurm.version is None:
            self.slurm.version = operating_system(self.cluster.os).slurm
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

    @cached_property
    def slurmctld_named(self) -> tuple[str, ...]:
        """The hosts services.slurmctld names, in the order written (a hostlist range or an
        @GROUP / @role:ROLE reference in its own, sorted, order), a host named twice kept twice."""
        groups = NodeGroups.of(self)
        written = self.written(self.services.slurmctld)
        return tuple(host for piece in pieces(written) for host in expand(groups.resolve(piece)))

    @cached_property
    def controllers(self) -> tuple[str, ...]:
        """slurmctld's hosts, each once: the primary, then the backup where there is one
        (slurm.conf's SlurmctldHost lines in this order; a sorted hostlist would lose it)."""
        return tuple(dict.fromkeys(self.slurmctld_named))

    @cached_property
    def configless_hosts(self) -> NodeSet:
        """Slurm nodes whose slurmd fetches its configuration from slurmctld (slurm.configless):
        every Slurm node but the controllers (slurmctld reads the files it serves) and the hosts
        where users run Slurm commands (login, development, portal), which keep pushed files.
        Empty without slurm.configless."""
        if not self.slurm.configless:
            return empty()
        keep = union_shared(
            [
                *(g.hosts for g in self.groups_with_role(Role.login, Role.development)),
                ",".join(self.controllers),
                *([self.services.portal] if self.services.portal else []),
            ]
        )
        return outside(self.slurm_nodes, keep)

    def group_of(self, host: str) -> NodeGroup | None:
        for g in self.nodes:
            if host in nodeset(g.hosts):
                return g
        return None

    # ---- composable GPUs (not cached: with_layout's copy must not keep another layout's) ----
    def with_layout(self, name: str) -> Cluster:
        """This cluster with composable.active set to layout `name` (renderers render it as the
        deployed one); the cluster itself without a composable section."""
        if self.composable is None:
            return self
        return self.model_copy(update={"composable": self.composable.model_copy(update={"active": name})})

    def pool_gpus(self, host: str) -> tuple[GpuPool, int] | None:
        """The pool `host` is cabled to and the GPUs it holds from it in the active layout; None
        for a host cabled to no pool."""
        comp = self.composable
        pool = comp.pool_of(host) if comp is not None else None
        if pool is None:
            return None
        layout = comp.active_layout
        return pool, (layout.per_host.get(host, 0) if layout is not None else 0)

    @staticmethod
    def composed_profile(profile: HardwareProfile, pool: GpuPool, count: int) -> HardwareProfile:
        """`profile` with `count` GPUs of `pool` after its own: the pool's type, model and memory,
        on the pool's socket, device files numbered on (/dev/nvidia<own + i>); an NVLink matrix
        is widened with zeros (pool GPUs have no NVLink). A profile whose own GPUs are of
        another type keeps its own (a check refuses the combination)."""
        own = profile.gpus
        if count == 0 or (own is not None and own.type != pool.gpus.type):
            return profile
        devices = [*(own.devices if own else []), *[GpuDevice(socket=pool.socket)] * count]
        n = len(devices)
        nvlink = [[*row, *[0] * count] for row in own.nvlink] + [[0] * n] * count if own and own.nvlink else []
        base = own or pool.gpus
        gpus = Gpus(type=base.type, model=base.model, memory_gib=base.memory_gib, devices=devices, nvlink=nvlink)
        return profile.model_copy(update={"gpus": gpus})

    def node_builds(self, group: NodeGroup) -> list[NodeBuild]:
        """The group's hosts by build under the active layout, in host order of each build's
        first host: one build (the profile's) for a group no pool is cabled to."""
        profile = self.hardware[group.hardware]
        comp = self.composable
        hosts = nodeset(group.hosts)
        if comp is None or not overlaps(hosts, nodeset(",".join(comp.cabled_hosts))):
            return [NodeBuild(profile, (), group.hosts)]
        builds: dict[tuple, list[str]] = {}
        for host in hosts:
            held = self.pool_gpus(host)
            key = (held[0].name, held[1]) if held else None
            builds.setdefault(key, []).append(host)
        out = []
        for key, members in builds.items():
            if key is None:
                out.append(NodeBuild(profile, (), fold(members)))
                continue
            pool = next(p for p in comp.pools if p.name == key[0])
            out.append(NodeBuild(self.composed_profile(profile, pool, key[1]), (f"pool_{pool.name}",), fold(members)))
        return out

    def host_profile(self, host: str) -> HardwareProfile | None:
        """The host's profile as the active layout composes it; None for a host without one."""
        group = self.group_of(host)
        profile = self.profile_of(group) if group is not None else None
        if profile is None:
            return None
        held = self.pool_gpus(host)
        return self.composed_profile(profile, *held) if held else profile

    def profile_of(self, group: NodeGroup) -> HardwareProfile | None:
        """The group's hardware profile; None for a group without one (login, management,
        storage and data transfer nodes may leave it out) or naming an unknown one (a check
        reports that)."""
        return self.hardware.get(group.hardware) if group.hardware is not None else None

    @cached_property
    def compute_hosts_by_profile(self) -> dict[str, NodeSet]:
        """Compute hosts per known hardware profile, profiles in node-group order. The sets
        are shared (hostlist.union_shared): read them, never change them."""
        exprs: dict[str, list[str]] = {}
        for group in self.groups_with_role(Role.compute):
            if group.hardware in self.hardware:
                exprs.setdefault(group.hardware, []).append(group.hosts)
        return {name: union_shared(hostlists) for name, hostlists in exprs.items()}

    @cached_property
    def partition_builds(self) -> dict[str, list[PartitionBuild]]:
        """Partition name (its first definition) -> the node builds behind it, each with how
        many of its compute nodes have it, in the order of the first compute group that brings
        one; empty for a partition without compute nodes."""
        out: dict[str, list[PartitionBuild]] = {}
        by_profile = self.compute_hosts_by_profile
        for part in self.slurm.partitions:
            if part.name in out:
                continue
            members = nodeset(part.nodes)
            builds = out[part.name] = []
            for group in self.groups_with_role(Role.compute):
                name = group.hardware
                if (
                    name in by_profile
                    and all(b.name != name for b in builds)
                    and overlaps(nodeset(group.hosts), members)
                ):
                    builds.append(PartitionBuild(name, self.hardware[name], common_count(by_profile[name], members)))
        return out

    def partition_hardware(self, partition: str) -> list[PartitionBuild]:
        """partition_builds of one partition; empty for an unknown one."""
        return self.partition_builds.get(partition, [])

    def _composed_partition_nodes(self, partition: str) -> NodeSet | None:
        """The nodes of `partition` (its first definition) when a pool is cabled to one of them;
        None otherwise (no composable section, an unknown partition, none cabled)."""
        part = next((p for p in self.slurm.partitions if p.name == partition), None)
        if self.composable is None or part is None:
            return None
        members = nodeset(part.nodes)
        return members if overlaps(members, nodeset(",".join(self.composable.cabled_hosts))) else None

    def composed_partition_hardware(self, partition: str) -> list[PartitionBuild]:
        """partition_hardware as the active layout composes it: a build per node build
        (Cluster.node_builds) with compute nodes in the partition, named by its profile; the
        same as partition_hardware for a partition no pool is cabled to (not cached: it follows
        composable.active)."""
        members = self._composed_partition_nodes(partition)
        if members is None:
            return self.partition_hardware(partition)
        out = []
        for group in self.groups_with_role(Role.compute):
            if group.hardware not in self.hardware:
                continue
            for build in self.node_builds(group):
                count = common_count(nodeset(build.hosts), members)
                if count:
                    out.append(PartitionBuild(group.hardware, build.profile, count))
        return out

    def partition_build(self, partition: str) -> PartitionBuild | None:
        """The build a virtual partition's jobs are shaped for: the partition's one offering the
        most GPUs per node, then CPUs, then nodes (the first such on a tie), as the active
        layout composes it. Under a layout its count is every node of the partition with that
        build's profile, whatever pool GPUs each holds: a CPU job spans them all, and a GPU job
        that spans nodes is hidden (layout_hides) where too few hold its GPUs."""
        builds = self.composed_partition_hardware(partition)
        best = max(builds, key=lambda b: (b.profile.gpu_count, b.profile.cpus, b.count), default=None)
        if best is None or self._composed_partition_nodes(partition) is None:
            return best
        return best._replace(count=sum(b.count for b in builds if b.name == best.name))

    def layout_hides(self, vp: VirtualPartition) -> str | None:
        """Why the active layout cannot satisfy gpu virtual partition `vp`, None when it can:
        its job (shaped for the partition's build with the most GPUs per node under the layout,
        as swrun shapes it) needs more nodes with that many GPUs than the layout gives, or no
        job can be shaped (GPUs that span nodes other than as whole nodes, no GPU at all).
        None too where the layout decides nothing: no composable section, a cpu virtual
        partition, an unknown partition or one no pool is cabled to (the swsuite checks judge
        those). The wrapper suite and the portal leave a hidden one out; a check warns."""
        comp = self.composable
        if vp.kind != "gpu" or self._composed_partition_nodes(vp.partition) is None:
            return None
        where = f"in layout {comp.active}"
        build = self.partition_build(vp.partition)
        per_node = build.profile.gpu_count if build is not None else 0
        if per_node == 0:
            return f"{vp.name}: no node of {vp.partition} has GPUs {where}"
        if vp.gpus <= per_node:
            return None
        if vp.gpus % per_node:
            return (
                f"{vp.name}: no node of {vp.partition} has {vp.gpus} GPUs {where} (the most is {per_node}, and "
                f"jobs span nodes only as whole nodes of {per_node})"
            )
        need = vp.gpus // per_node
        have = sum(b.count for b in self.composed_partition_hardware(vp.partition) if b.profile.gpu_count >= per_node)
        if have < need:
            return (
                f"{vp.name}: needs {need} nodes of {vp.partition} with {per_node} GPUs, layout {comp.active} "
                f"gives {have}"
            )
        return None

    @property
    def hidden_virtual_partitions(self) -> dict[str, str]:
        """Virtual partition name -> why the active layout hides it (layout_hides), in
        swsuite.virtual_partitions order; empty without composable GPUs."""
        if self.composable is None:
            return {}
        return {vp.name: why for vp in self.swsuite.virtual_partitions if (why := self.layout_hides(vp))}

    def job_node(self, partition: str) -> dict | None:
        """The partition_build as the wrapper suite's table gives it to swrun (translate's
        `node`); None for a partition without compute nodes."""
        build = self.partition_build(partition)
        if build is None:
            return None
        p = build.profile
        return {
            "sockets": p.sockets,
            "cores_per_socket": p.cores_per_socket,
            "threads_per_core": p.threads_per_core,
            "real_memory_mib": self.real_memory_mib(p),
            "gpu_type": p.gpus.type if p.gpus else None,
            "gpu_sockets": [d.socket for d in p.gpus.devices] if p.gpus else [],
            "count": build.count,
            **({"shards_per_gpu": shards} if (shards := self.partition_shards(partition, build.name)) else {}),
        }

    def partition_shards(self, partition: str, hardware: str) -> int | None:
        """Shards per GPU the partition's compute nodes of profile `hardware` offer: the fewest
        among their groups; None when any of those groups offers none (gpu_sharing)."""
        part = next((p for p in self.slurm.partitions if p.name == partition), None)
        if part is None:
            return None
        groups = [
            g
            for g in self.groups_with_role(Role.compute)
            if g.hardware == hardware and overlaps(nodeset(g.hosts), nodeset(part.nodes))
        ]
        counts = [g.gpu_sharing.shards_per_gpu if g.gpu_sharing else None for g in groups]
        return min(counts) if counts and None not in counts else None

    def job_shape(self, vp: VirtualPartition) -> JobShape | None:
        """The shape of a job of virtual partition `vp` with the defaults (swsuite's
        translate.job_shape, the resolver swrun uses); None where swrun would have none: its
        partition has no compute nodes, or no job can be shaped (translate says why)."""
        node = self.job_node(vp.partition)
        if node is None:
            return None
        try:
            return job_shape(vp.name, vp.model_dump(include={"kind", "gpus", "nodes", "shards", "partition"}), node)
        except SwError:
            return None

    @property
    def home_root(self) -> str:
        """Where the users' home directories are: accounts.home_root, else /home."""
        return self.accounts.home_root if self.accounts is not None else "/home"

    @cached_property
    def gpfs_nodes(self) -> NodeSet:
        """The GPFS cluster's model nodes (its members but the appliance servers): each mounts
        every GPFS file system. Empty without GPFS. Shared: never change it."""
        gpfs = self.storage.gpfs
        return empty() if gpfs is None else overlap(gpfs.members, self.all_hosts)

    @cached_property
    def shared_mounts(self) -> tuple[MountedFilesystem, ...]:
        """Each shared file system's mount and who mounts it, in description order: every GPFS
        file system on the GPFS cluster's model nodes, each NFS mount on its clients."""
        out = []
        if self.storage.gpfs is not None:
            out += [MountedFilesystem(fs.name, fs.mount_point, self.gpfs_nodes) for fs in self.storage.gpfs.filesystems]
        out += [MountedFilesystem(m.export, m.mount_point, nodeset(m.clients)) for m in self.storage.nfs.mounts]
        return tuple(out)

    def hosts_mounting(self, path: str) -> NodeSet:
        """Model hosts on which `path` lies on a shared file system: the hosts of each shared
        mount at or above it (shared_mounts), and the NFS server of such a mount whose export
        is the mount point itself (the server holds the same files at the same path). A new
        set: the caller may change it."""
        hosts = NodeSet(resolver=RESOLVER_NOGROUP)
        for mount in self.shared_mounts:
            if lies_under(path, mount.mount_point):
                hosts.update(mount.hosts)
        for mount in self.storage.nfs.mounts:
            if lies_under(path, mount.mount_point):
                export = self.storage.nfs.export(mount.export)
                if export is not None and export.path == mount.mount_point:
                    hosts.update(nodeset(export.server))
        return hosts

    def mount_points_on(self, hosts: NodeSet) -> list[str]:
        """The mount points of the shared file systems every host of `hosts` mounts, sorted."""
        return sorted({m.mount_point for m in self.shared_mounts if hosts.issubset(m.hosts)})

    # ---- backups (properties, not cached: a handful of hosts, and a model_copy stays right) ----
    @property
    def backup_sources(self) -> dict[str, str]:
        """Each kind of state the cluster has but its secrets (model.backup.STATES) -> the host
        that holds it: the accounting database and slurmctld's state always; the directory
        where an LDAP host serves an accounts section, the InfluxDB database where a
        monitoring section of that backend has its database host (without the section the
        roles deploy neither; Prometheus' samples are not backed up: what it scrapes is there
        again at the next scrape, and its configuration is the model's). The first host where a
        service names several."""
        s = self.services
        out = {"accounting_db": nodeset(s.accounting_db)[0]}
        if s.ldap is not None and self.accounts is not None:
            out["directory"] = nodeset(s.ldap)[0]
        if s.monitoring_db is not None and self.monitoring is not None and self.monitoring.backend == "influxdb":
            out["monitoring"] = nodeset(s.monitoring_db)[0]
        out["slurmctld_state"] = self.controllers[0]  # the primary, as slurm.conf names it
        return out

    @property
    def secret_holders(self) -> dict[str, tuple[str, ...]]:
        """Host -> the services (Services' keys) whose secrets the roles generate there, hosts
        in the order of their first service: the munge key on the first controller (the munge
        role's key host), the database password on the accounting database host, the InfluxDB
        passwords on the monitoring database host, the directory's admin password, the cluster
        CA and slapd's key on the LDAP host, and the portal's key (when the site brings no
        certificate) and JupyterHub's cookie secret on the portal host."""
        s = self.services
        holders = [("slurmctld", s.slurmctld), ("accounting_db", s.accounting_db)]
        if "monitoring" in self.backup_sources:
            holders.append(("monitoring_db", s.monitoring_db))
        if "directory" in self.backup_sources:
            holders.append(("ldap", s.ldap))
        p = self.portal
        if p is not None and s.portal is not None and (p.tls.certificate is None or p.front_end == "jupyterhub"):
            holders.append(("portal", s.portal))
        out: dict[str, list[str]] = {}
        for service, hosts in holders:
            out.setdefault(nodeset(hosts)[0], []).append(service)
        return {host: tuple(services) for host, services in out.items()}

    @property
    def backup_states(self) -> list[str]:
        """backup.state, else every kind of state the cluster has (STATES order); empty without
        a backup section."""
        if self.backup is None:
            return []
        if self.backup.state is not None:
            return list(dict.fromkeys(self.backup.state))
        return [state for state in BACKUP_STATES if state in self.backup_sources or state == "secrets"]

    @property
    def backup_jobs(self) -> tuple[BackupJob, ...]:
        """The backup jobs, in backup_states order: one per kind of state, on the host that holds
        it; secrets one per host that holds some (named secrets-<host> when there are several).
        A state the cluster does not have has no job (a check reports it)."""
        jobs = []
        for state in self.backup_states:
            if state == "secrets":
                several = len(self.secret_holders) > 1
                jobs += [
                    BackupJob(f"secrets-{host}" if several else "secrets", state, host, services)
                    for host, services in self.secret_holders.items()
                ]
            elif state in self.backup_sources:
                jobs.append(BackupJob(state, state, self.backup_sources[state]))
        return tuple(jobs)

    def backup_destination_of(self, host: str) -> BackupDestination:
        """Where `host`'s snapshots go: its backup.host_destinations entry, else backup.destination."""
        return self.backup.host_destinations.get(host, self.backup.destination)

    @property
    def backup_mounts(self) -> dict[str, MountedFilesystem | None]:
        """Each host with backup jobs (jobs' order) -> the shared mount of its destination's file
        system on that host; None where it does not mount it (a check reports it)."""
        if self.backup is None:
            return {}
        out: dict[str, MountedFilesystem | None] = {}
        for host in dict.fromkeys(job.host for job in self.backup_jobs):
            name = self.backup_destination_of(host).filesystem
            out[host] = next((m for m in self.shared_mounts if m.name == name and host in m.hosts), None)
        return out

    @property
    def backup_destinations(self) -> dict[str, tuple[str, str]]:
        """Each host with backup jobs -> (the directory its snapshots go to, the mount point it
        lies on): the mount point of its destination's file system there and the destination's
        subdirectory. Empty without a backup section, or where a host's is not resolved (a
        check reports it): no backup.json is rendered then."""
        mounts = self.backup_mounts
        if not mounts or None in mounts.values():
            return {}
        return {
            host: (
                f"{mount.mount_point.rstrip('/')}/{self.backup_destination_of(host).subdirectory}",
                mount.mount_point,
            )
            for host, mount in mounts.items()
        }

    # ---- deploy (properties, not cached: a model_copy with another deploy stays right) ----
    @property
    def deploy_pull(self) -> bool:
        return self.deploy.mode == "pull"

    @property
    def deploy_pull_nodes(self) -> NodeSet:
        """The nodes that converge themselves: the Slurm nodes (every compute group) in pull
        mode; empty in push mode. Shared: never change it."""
        return self.slurm_nodes if self.deploy_pull else empty()

    @property
    def deploy_default_point(self) -> str:
        """The host of the one distribution point deploy.distribution defaults to: the first
        management host, else the first slurmctld host."""
        managers = self.groups_with_role(Role.management)
        return expand(managers[0].hosts)[0] if managers else self.controllers[0]

    @property
    def deploy_points(self) -> tuple[DeployPoint, ...]:
        """The distribution points as deployed, in deploy.distribution order; empty in push
        mode. A point without `serves` serves every pull node (one point only: a check)."""
        if not self.deploy_pull:
            return ()
        written = self.deploy.distribution or [DistributionPoint(host=self.deploy_default_point)]
        return tuple(
            DeployPoint(p.host, nodeset(p.serves) if p.serves is not None else self.deploy_pull_nodes) for p in written
        )

    def host_address(self, host: str) -> str | None:
        """The host's address on the primary network (the inventory's ansible_host); None for a
        host the model does not have, or one without an address there."""
        group = self.group_of(host)
        primary = self.cluster.primary_network
        if group is None or primary not in group.addresses:
            return None
        return str(group.addresses[primary] + expand(group.hosts).index(host))

    def address_on(self, host: str, network: str) -> str | None:
        """The host's address on `network` (its group's first address there plus its place in
        the group); None where the group has none there."""
        group = self.group_of(host)
        if group is None or network not in group.addresses:
            return None
        return str(group.addresses[network] + expand(group.hosts).index(host))

    @property
    def booted_groups(self) -> list[NodeGroup]:
        """The node groups that boot an image from the network (provisioning set and `image` named)."""
        if self.provisioning is None:
            return []
        return [g for g in self.nodes if g.image is not None]

    def boot_entries(self) -> list[BootEntry]:
        """Every network-booted host with a boot MAC, in model order: what the boot server answers."""
        out = []
        prov = self.provisioning
        if prov is None:
            return out
        for group in self.booted_groups:
            for host in expand(group.hosts):
                mac = group.boot_macs.get(host)
                if mac is not None:
                    out.append(BootEntry(host, mac, self.address_on(host, prov.network), group.name, group.image))
        return out

    def bmc_network(self, group: NodeGroup) -> str | None:
        """The network a group's BMCs answer on: its `bmc.network`, else the model's one network of
        kind bmc (None where there is none or several)."""
        if group.bmc is None:
            return None
        if group.bmc.network is not None:
            return group.bmc.network
        kinds = [name for name, net in self.networks.items() if net.kind == "bmc"]
        return kinds[0] if len(kinds) == 1 else None

    def bmc_of(self, host: str) -> BmcTarget | None:
        """Where a host's BMC answers: protocol, base URL or address, system, credentials; None
        for a host without a `bmc` (or without an address on the BMC network)."""
        group = self.group_of(host)
        if group is None or group.bmc is None:
            return None
        bmc = group.bmc
        if bmc.endpoint is not None:
            address = bmc.endpoint.rstrip("/")
        else:
            network = self.bmc_network(group)
            ip = self.address_on(host, network) if network else None
            if ip is None:
                return None
            address = f"https://{ip}" if bmc.protocol == "redfish" else ip
        system = bmc.system.replace("{host}", host) if bmc.system else None
        return BmcTarget(host, bmc.protocol, address, system, bmc.verify_tls, bmc.credentials)

    def real_memory_mib(self, profile: HardwareProfile) -> int:
        return profile.memory_gib * 1024 - self.slurm.memory_reserve_mib

    @property
    def def_mem_per_cpu_mib(self) -> int:
        """slurm.def_mem_per_cpu_mib, else the smallest RealMemory per CPU of the compute nodes."""
        if self.slurm.def_mem_per_cpu_mib is not None:
            return self.slurm.def_mem_per_cpu_mib
        shares = [
            self.real_memory_mib(p) // p.cpus
            for p in (self.profile_of(g) for g in self.groups_with_role(Role.compute))
            if p is not None
        ]
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
    "Accounts",
    "Bmc",
    "BmcTarget",
    "BootEntry",
    "Image",
    "Provisioning",
    "Backup",
    "Deploy",
    "DeployPoint",
    "DistributionPoint",
    "Composable",
    "GpuPool",
    "Layout",
    "NodeBuild",
    "PoolGpus",
    "BackupDestination",
    "BackupJob",
    "Directory",
    "ResearchGroup",
    "User",
    "SCHEMA_VERSION",
    "Cgroup",
    "Cluster",
    "ClusterInfo",
    "Containers",
    "Fabric",
    "FabricLink",
    "ApplianceServer",
    "GpuDevice",
    "GpuSharing",
    "Gpus",
    "MigInstances",
    "HardwareProfile",
    "Health",
    "IbAdapter",
    "Module",
    "Monitoring",
    "Network",
    "NodeGroup",
    "Partition",
    "Placement",
    "Portal",
    "Priority",
    "PortalApp",
    "Qos",
    "Recipes",
    "Role",
    "Services",
    "Slurm",
    "Software",
    "Storage",
    "StorageArray",
    "SwSuite",
    "Switch",
    "VirtualPartition",
    "Gpfs",
    "GpfsFilesystem",
    "GpfsTuning",
    "MountedFilesystem",
    "PartitionBuild",
    "Nfs",
    "NfsExport",
    "NfsMount",
    "NfsServer",
    "NodeClass",
    "Nsd",
]
