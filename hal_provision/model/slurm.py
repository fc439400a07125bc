"""Slurm: partitions, QOS, defaults and the Slurm Wrapper Suite's virtual partitions."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from . import slurmtime
from .base import AbsolutePath, Name, Strict
from .placement import PLACED, Placement

SlurmTime = Annotated[str, AfterValidator(slurmtime.check)]
FiniteSlurmTime = Annotated[str, AfterValidator(slurmtime.check), AfterValidator(slurmtime.check_finite)]
slurm_minutes = slurmtime.minutes  # the checks' and the tests' name for it


def slurm_clock(value: str | None) -> str:
    """A time limit as sacctmgr prints it (slurmtime.clock: whole minutes, D-HH:MM:SS from one
    day on); empty for no limit."""
    minutes = slurmtime.minutes(value) if value is not None else None
    return "" if minutes is None else slurmtime.clock(minutes)


class Partition(Strict):
    name: Name = Field(description="Partition name.")
    nodes: Placement = Field(description="Nodes of the partition." + PLACED)
    default: bool = Field(False, description="The partition jobs go to when none is named.")
    max_time: SlurmTime = Field("UNLIMITED", description="MaxTime of the partition.")
    default_time: SlurmTime | None = Field(None, description="DefaultTime of the partition.")
    def_mem_per_cpu_mib: int | None = Field(
        None, gt=0, description="DefMemPerCPU for this partition (overrides the cluster default)."
    )
    max_nodes: int | None = Field(None, ge=1, description="MaxNodes per job.")
    qos: Name | None = Field(None, description="Partition QOS (must exist under slurm.qos).")
    priority_tier: int | None = Field(
        None,
        ge=0,
        le=65533,
        description="PriorityTier: pending jobs of a partition with a higher tier are scheduled before those of "
        "partitions with a lower one, whatever their job priority (under priority/basic too). None: not rendered "
        "(Slurm's default, 1).",
    )
    state: Literal["UP", "DOWN", "DRAIN", "INACTIVE"] = Field("UP", description="Initial state.")
    description: str = Field("", description="Free text.")


class Qos(Strict):
    name: Name = Field(description="QOS name.")
    priority: int = Field(0, ge=0, description="QOS priority.")
    max_wall: SlurmTime | None = Field(None, description="MaxWall of a job under this QOS.")
    max_gpus_per_user: int | None = Field(None, ge=0, description="MaxTRESPerUser gres/gpu.")
    max_jobs_per_user: int | None = Field(None, ge=0, description="MaxJobsPerUser.")
    description: str = Field("", description="Free text.")


# Slurm's job priority is an unsigned 32-bit number; a larger sum of weighted factors is cut to it.
PRIORITY_MAX = 2**32 - 1

PriorityWeight = Annotated[int, Field(ge=0, le=PRIORITY_MAX)]

# TRES a PriorityWeightTRES may weigh: those slurmctld tracks. The first eight are always tracked;
# GRES/gpu because slurm.conf names it in AccountingStorageTRES. slurmctld stops on any other
# ("TRES weight '...' is not a configured TRES type"). In the order slurm.conf lists them.
WeightedTres = Literal["CPU", "Mem", "Energy", "Node", "Billing", "FS/Disk", "VMem", "Pages", "GRES/gpu"]


class Priority(Strict):
    """How Slurm orders pending jobs (slurm.conf Priority*). Cluster.priority_type is the type in force."""

    type: Literal["multifactor", "basic"] | None = Field(
        None,
        description="PriorityType: multifactor (priority/multifactor: a weighted sum of the factors below) or "
        "basic (priority/basic: first in, first out; fair-share and QOS priorities do nothing). None: "
        "multifactor when any Slurm account sets a fair-share (other than 1) or any QOS a priority above 0, "
        "else basic (Slurm 22.05's default).",
    )
    weight_age: PriorityWeight = Field(
        1000, description="PriorityWeightAge: weight of the time a job has waited (up to max_age)."
    )
    weight_fairshare: PriorityWeight = Field(
        10000,
        description="PriorityWeightFairshare: weight of the account's fair-share factor "
        "(accounts.groups[].fairshare against its recent usage).",
    )
    weight_job_size: PriorityWeight = Field(
        0, description="PriorityWeightJobSize: weight of the job's size (larger jobs first unless favor_small)."
    )
    weight_partition: PriorityWeight = Field(
        0,
        description="PriorityWeightPartition: weight of the partition's PriorityJobFactor (the model sets "
        "none, so every partition's is 1 and this weight adds the same to every job).",
    )
    weight_qos: PriorityWeight = Field(
        10000,
        description="PriorityWeightQOS: weight of the job's QOS priority (slurm.qos[].priority, "
        "normalised to the highest).",
    )
    weight_tres: dict[WeightedTres, int] = Field(
        default_factory=dict,
        description="PriorityWeightTRES: weight per TRES the job asks for, e.g. {CPU: 1000, Mem: 2000, "
        "GRES/gpu: 3000} (negative values lower the priority). Empty: not rendered.",
    )
    decay_half_life: FiniteSlurmTime = Field(
        "7-00:00:00",
        description="PriorityDecayHalfLife: recorded usage halves over this time; 0: no decay "
        "(usage_reset_period must then clear it).",
    )
    max_age: FiniteSlurmTime = Field(
        "7-00:00:00", description="PriorityMaxAge: the wait after which the age factor is at its maximum."
    )
    favor_small: bool = Field(False, description="PriorityFavorSmall: smaller jobs get the larger job-size factor.")
    usage_reset_period: Literal["NONE", "NOW", "DAILY", "WEEKLY", "MONTHLY", "QUARTERLY", "YEARLY"] = Field(
        "NONE",
        description="PriorityUsageResetPeriod: when recorded usage is cleared (NONE: never, usage only "
        "decays; NOW: at every slurmctld start and reconfigure).",
    )
    calc_period_minutes: int = Field(
        5,
        ge=1,
        description="PriorityCalcPeriod: minutes between recalculations of decayed usage and fair-share "
        "(also done at slurmctld's start). An account added or changed later, as a first deployment's accounts "
        "are, has a fair-share factor of 0 (sshare, sprio) until the next recalculation.",
    )

    @property
    def highest_priority(self) -> int:
        """The highest job priority these weights can give: every factor at 1 (TRES weights below 0 lower it)."""
        weights = (self.weight_age, self.weight_fairshare, self.weight_job_size, self.weight_partition, self.weight_qos)
        return sum(weights) + sum(w for w in self.weight_tres.values() if w > 0)


class Cgroup(Strict):
    constrain_cores: bool = Field(True, description="cgroup.conf ConstrainCores.")
    constrain_devices: bool = Field(True, description="cgroup.conf ConstrainDevices (GPU isolation).")
    constrain_ram_space: bool = Field(True, description="cgroup.conf ConstrainRAMSpace.")
    constrain_swap_space: bool = Field(False, description="cgroup.conf ConstrainSwapSpace.")


# Slurm majors (YY.MM) whose configs the renderers know how to write, oldest first.
SLURM_VERSIONS = ("22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11")
# From this major, job_container/tmpfs and job_container.conf give way to NamespaceType with
# namespace/linux and namespace.yaml (slurm.conf(5) and namespace.yaml(5) of 25.11).
NAMESPACE_YAML_FROM = "25.11"


def version_key(version: str) -> tuple[int, int]:
    """A Slurm major "YY.MM" as a comparable pair."""
    year, month = version.split(".")
    return int(year), int(month)


# slurm.extra: a slurm.conf key (letters and digits, as Slurm's) and a one-line value.
SlurmConfKey = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9]*$")]
SlurmConfValue = Annotated[str, Field(min_length=1, pattern=r"^[^\n#]+$")]


class Slurm(Strict):
    version: Literal[SLURM_VERSIONS] | None = Field(  # type: ignore[valid-type]
        None,
        description="The Slurm major the site runs (YY.MM): the renderers write the options that version "
        "reads (job_container.conf before 25.11, namespace.yaml from it). Left out: the major cluster.os ships; "
        "another one is refused unless build_own is set. An upgrade goes "
        "through Slurm's window: a major takes the state of the two previous ones, from 24.11 of the three "
        "previous (24.11 takes 23.02, 23.11, 24.05); `hal-provision plan` refuses a longer jump and names the "
        "path, and any downgrade.",
    )
    build_own: bool = Field(
        False,
        description="The site builds (or otherwise provides) its own Slurm packages and puts them in its "
        "nodes' package source: slurm.version may then be a major cluster.os does not ship. The roles install "
        "whatever that source offers; each host's must offer slurm.version.",
    )
    configless: bool = Field(
        False,
        description="Configless compute nodes: slurmctld serves slurm.conf and the files it names (gres.conf, "
        "cgroup.conf, topology.conf, the job namespace file) to slurmd, started with --conf-server naming the "
        "controllers, primary first; `scontrol reconfigure` sends them a changed configuration. Controllers, login, "
        "development and portal nodes keep the pushed files (users' commands read slurm.conf there).",
    )
    nvml: bool = Field(
        False,
        description="The site's slurmd is built with NVIDIA's NVML (the gpu/nvml plugin): gres.conf may "
        "then say AutoDetect=nvml, which MIG instances need. Debian's slurm-wlm packages (Debian 12's 22.05, "
        "Debian 13's 24.11) ship no gpu/nvml plugin, so theirs is without it; sites that build their own Slurm against CUDA have it.",
    )
    controller_port: int = Field(6817, ge=1, le=65535, description="SlurmctldPort.")
    slurmd_port: int = Field(6818, ge=1, le=65535, description="SlurmdPort.")
    dbd_port: int = Field(6819, ge=1, le=65535, description="DbdPort of slurmdbd.")
    slurmctld_timeout_s: int = Field(
        120,
        ge=1,
        le=65533,
        description="SlurmctldTimeout: seconds a backup controller waits for the primary before "
        "taking over (it asks every third of it).",
    )
    state_save_location: AbsolutePath = Field(
        "/var/lib/slurm/slurmctld",
        description="StateSaveLocation: where slurmctld keeps the queue, the running "
        "jobs and the nodes' states (Debian's default here). With a backup controller both controllers read and "
        "write it, so it must lie on a shared file system of `storage` mounted on both controller hosts.",
    )
    slurmd_timeout_s: int = Field(
        300,
        ge=1,
        description="SlurmdTimeout: seconds slurmctld waits for a slurmd to answer before it sets "
        "the node DOWN (a health check interval beyond it is reported).",
    )
    accounting_database: Name = Field("slurm_acct_db", description="MariaDB database for accounting (StorageLoc).")
    accounting_user: Name = Field("slurm", description="MariaDB user of slurmdbd (StorageUser).")
    memory_reserve_mib: int = Field(
        8192,
        ge=0,
        description="Memory kept back for the OS and daemons: RealMemory = installed memory "
        "minus this. Slurm drains a node whose real memory is below RealMemory.",
    )
    def_mem_per_cpu_mib: int | None = Field(
        None,
        gt=0,
        description="Cluster-wide DefMemPerCPU in MiB (per hardware thread); None: what the hardware gives, the "
        "smallest RealMemory / CPUs of the compute profiles (a job asking for nothing gets its CPUs' share).",
    )
    cgroup: Cgroup = Field(default_factory=Cgroup, description="cgroup.conf settings.")
    accounting_enforce: list[Literal["associations", "limits", "qos", "safe", "wckeys", "nojobs", "nosteps"]] = Field(
        default_factory=list,
        description="AccountingStorageEnforce: associations (only users with an association may run jobs), "
        "limits and qos (their limits bite). Empty: not rendered (Slurm enforces nothing).",
    )
    partitions: list[Partition] = Field(min_length=1, description="Slurm partitions.")
    qos: list[Qos] = Field(default_factory=list, description="Quality-of-service levels.")
    priority: Priority = Field(
        default_factory=Priority, description="Job priority: PriorityType, the factors' weights, usage decay."
    )
    extra: dict[SlurmConfKey, SlurmConfValue] = Field(
        default_factory=dict,
        description="slurm.conf options the model does not cover, written as Key=Value at the end of its general "
        "part, in key order, e.g. {SchedulerParameters: bf_continue}. Keys hal-provision writes itself and names "
        "or values slurm.version does not read are refused.",
    )

    def at_least(self, version: str) -> bool:
        """The site's Slurm is `version` (YY.MM) or later."""
        return version_key(self.version) >= version_key(version)

    @property
    def namespace_yaml(self) -> bool:
        """Job namespaces through NamespaceType and namespace.yaml (25.11 on), not job_container.conf."""
        return self.at_least(NAMESPACE_YAML_FROM)

    def prioritised_qos(self) -> list[tuple[int, Qos]]:
        """(index, QOS) for each QOS with a priority above 0: what PriorityWeightQOS weighs."""
        return [(i, q) for i, q in enumerate(self.qos) if q.priority > 0]


class VirtualPartition(Strict):
    name: Name = Field(description="What users type: swrun -p <name>, e.g. gpux4 or cpun2.")
    kind: Literal["gpu", "cpu", "shard"] = Field(
        description="gpu: a number of GPUs with their share of the node; cpu: whole nodes; shard: shares of "
        "one GPU that other jobs use at the same time (Slurm's shard GRES: the partition's nodes set "
        "gpu_sharing.shards_per_gpu), with the CPUs of that share."
    )
    partition: Name = Field(description="Real Slurm partition the job goes to.")
    gpus: int | None = Field(None, ge=1, description="GPUs in all (kind gpu).")
    nodes: int | None = Field(None, ge=1, description="Whole nodes (kind cpu).")
    shards: int | None = Field(None, ge=1, description="Shards on one node (kind shard): --gres=shard:N.")
    mem_per_cpu_mib: int = Field(gt=0, description="--mem-per-cpu given to every job.")
    max_time_hours: int = Field(gt=0, description="Longest time a user may ask for, in hours.")
    default_time_hours: int = Field(1, gt=0, description="Time when the user gives none.")
    description: str = Field("", description="Free text for swrun --help.")

    @model_validator(mode="after")
    def _kind_fields(self):
        sizes = {"gpu": "gpus", "cpu": "nodes", "shard": "shards"}
        own = sizes[self.kind]
        others = [name for name in sizes.values() if name != own and getattr(self, name) is not None]
        if getattr(self, own) is None or others:
            raise ValueError(
                f"a {self.kind} virtual partition sets `{own}` and not "
                + " or ".join(f"`{n}`" for n in sizes.values() if n != own)
            )
        return self


class SwSuite(Strict):
    virtual_partitions: list[VirtualPartition] = Field(
        default_factory=list, description="The Slurm Wrapper Suite's virtual partitions."
    )
