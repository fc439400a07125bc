"""What differs between the Slurm majors the model knows (SLURM_VERSIONS): the configuration
keys and plugin values that some major lacks, renamed or removed, and the upgrade window.

One table, read by the renderers (which name to write for the site's version), the checks
(which keys and values of `slurm.extra` a version refuses) and `hal-provision plan` (which upgrades Slurm
supports). Facts from Slurm's own sources of each major (RELEASE_NOTES, the option tables of
src/common/read_config.c, src/plugins/) and its upgrade guide.

Beside it, the operating systems `cluster.os` names and the Slurm major each one's archive ships
(OPERATING_SYSTEMS): slurm.version's default, and what a site that builds no Slurm of its own gets.

A name a later major still reads as a deprecated alias (topology/none in 23.11, JobContainerType
in 25.11, read with a warning) counts as replaced from that major: hal-provision writes the
version's own name, and refuses the old one in `slurm.extra`.
"""

from __future__ import annotations

from dataclasses import dataclass

from .slurm import NAMESPACE_YAML_FROM, SLURM_VERSIONS, version_key


def _before(version: str) -> str:
    """The major before `version` in SLURM_VERSIONS."""
    return SLURM_VERSIONS[SLURM_VERSIONS.index(version) - 1]


@dataclass(frozen=True)
class Versioned:
    """A slurm.conf key (value None) or a key's value that only some majors read."""

    key: str
    value: str | None
    first: str | None  # the first major that reads it; None: every major of SLURM_VERSIONS up to `last`
    last: str | None  # the last major that reads it; None: still read by the newest
    replacement: str = ""  # what a later major reads instead ("" where nothing does)
    why: str = ""  # for a removal without a replacement

    @property
    def name(self) -> str:
        return self.key if self.value is None else self.value

    def read_by(self, version: str) -> bool:
        v = version_key(version)
        return (self.first is None or version_key(self.first) <= v) and (
            self.last is None or v <= version_key(self.last)
        )

    def refusal(self, version: str) -> str:
        """Why `version` does not read it, naming the version and what to write instead."""
        if self.first is not None and version_key(version) < version_key(self.first):
            return f"{self.name} is read from Slurm {self.first} on, not by {version} (slurm.version)"
        gone = SLURM_VERSIONS[SLURM_VERSIONS.index(self.last) + 1]
        if self.replacement:
            return f"{self.name} was replaced by {self.replacement} in {gone} (slurm.version is {version})"
        return f"{self.name} was removed in {gone} (slurm.version is {version}){': ' + self.why if self.why else ''}"


_JOB_CONTAINER_LAST = _before(NAMESPACE_YAML_FROM)
_FIRST, _LAST = "first", "last"


def _keys(which: str, version: str, names: str, why: str = "") -> tuple[Versioned, ...]:
    """Keys that appeared in (which=_FIRST) or were last read by (_LAST) `version`."""
    return tuple(
        Versioned(k, None, version if which == _FIRST else None, version if which == _LAST else None, why=why)
        for k in names.split()
    )


VERSIONED: tuple[Versioned, ...] = (
    # Values of keys hal-provision writes: the renderers write the version's name (name_for).
    # The flat topology: topology/none, renamed topology/default in 23.11, topology/flat in 25.05.
    Versioned("TopologyPlugin", "topology/none", None, "23.02", "topology/default"),
    Versioned("TopologyPlugin", "topology/default", "23.11", "24.11", "topology/flat"),
    Versioned("TopologyPlugin", "topology/flat", "25.05", None),
    # Each job's private /tmp: the job_container interface became namespace in 25.11.
    Versioned("JobContainerType", None, None, _JOB_CONTAINER_LAST, "NamespaceType"),
    Versioned("JobContainerType", "job_container/tmpfs", None, _JOB_CONTAINER_LAST, "namespace/tmpfs"),
    Versioned("NamespaceType", "namespace/tmpfs", NAMESPACE_YAML_FROM, None),
    Versioned("NamespaceType", "namespace/linux", NAMESPACE_YAML_FROM, None),
    # select/cons_tres (what the renderer writes) does all that select/cons_res, removed in 23.11, did.
    Versioned("SelectType", "select/cons_res", None, "23.02", "select/cons_tres"),
    # Keys added and removed (the option table of src/common/read_config.c of each major).
    Versioned("RoutePlugin", None, None, "23.02", "TopologyParam=RouteTree"),
    *_keys(_LAST, "22.05", "SlurmctldPlugstack"),
    *_keys(_FIRST, "23.02", "MaxBatchRequeue PreemptParameters SuspendExcStates"),
    *_keys(_LAST, "23.02", "ExtSensorsFreq ExtSensorsType", why="the external sensors plugins are gone"),
    *_keys(
        _LAST,
        "23.02",
        "JobCredentialPrivateKey JobCredentialPublicCertificate",
        why="job credentials are signed by the CredType plugin",
    ),
    *_keys(_LAST, "23.11", "CoreSpecPlugin PowerParameters PowerPlugin"),
    *_keys(_FIRST, "24.05", "HashPlugin TLSParameters TLSType"),
    *_keys(_FIRST, "24.11", "CertmgrParameters CertmgrType DataParserParameters"),
    *_keys(_LAST, "24.11", "FrontendName GetEnvTimeout"),
    *_keys(_FIRST, "25.05", "CertgenParameters CertgenType EpilogTimeout PrologTimeout"),
    *_keys(_LAST, "25.05", "AccountingStorageLoc AccountingStorageUser"),
    *_keys(
        _FIRST, "25.11", "CliFilterParameters HttpParserType JobCompPassScript MetricsType NamespaceType UrlParserType"
    ),
)

# slurm.conf keys hal-provision writes itself, from the model (tests/unit/model/test_slurm_versions.py
# holds this list to every rendered slurm.conf); slurm.extra may not name them.
RENDERED_KEYS = frozenset(
    k.lower()
    for k in """
    AccountingStorageEnforce AccountingStorageHost AccountingStoragePort AccountingStorageTRES AccountingStorageType
    AuthType ClusterName CredType DefMemPerCPU GresTypes HealthCheckInterval HealthCheckNodeState HealthCheckProgram
    JobAcctGatherType JobContainerType MpiDefault NamespaceType NodeName NodeSet PartitionName PriorityCalcPeriod
    PriorityDecayHalfLife PriorityFavorSmall PriorityMaxAge PriorityType PriorityUsageResetPeriod PriorityWeightAge
    PriorityWeightFairshare PriorityWeightJobSize PriorityWeightPartition PriorityWeightQOS PriorityWeightTRES
    Epilog ProctrackType Prolog PrologFlags ReturnToService SchedulerType SelectType SelectTypeParameters SlurmUser SlurmctldHost
    SlurmctldLogFile SlurmctldParameters SlurmctldPidFile SlurmctldPort SlurmctldTimeout SlurmdLogFile SlurmdPidFile SlurmdPort
    SlurmdSpoolDir SlurmdTimeout StateSaveLocation TaskPlugin TaskProlog TmpFS TopologyPlugin RebootProgram ResumeTimeout""".split()
)
# Keys the renderer writes only where slurm.extra does not name them: the site's own line wins.
# MetricsType: metrics/openmetrics where Prometheus scrapes slurmctld (backend prometheus, 25.11+).
RENDERED_UNLESS_EXTRA = frozenset({"metricstype"})


def versioned(key: str, value: str | None = None) -> Versioned | None:
    """The table's entry for a slurm.conf key (value None) or a key's value; case-insensitive,
    as Slurm reads keys and plugin names."""
    for entry in VERSIONED:
        if entry.key.lower() == key.lower() and (entry.value or "").lower() == (value or "").lower():
            return entry
    return None


def name_for(version: str, key: str, value: str) -> str:
    """The name `version` reads for `value` of `key`, following the table's renames
    (name_for("23.11", "TopologyPlugin", "topology/none") == "topology/default")."""
    entry = versioned(key, value)
    while entry is not None and not entry.read_by(version) and entry.replacement:
        if entry.first is not None and version_key(version) < version_key(entry.first):
            break
        value = entry.replacement
        entry = versioned(key, value)
    return value


# ---- the operating systems ----------------------------------------------------------------------
@dataclass(frozen=True)
class OperatingSystem:
    """A Debian release the nodes run (cluster.os) and the Slurm major its archive ships."""

    name: str  # what cluster.os says
    title: str  # as people write it
    release: str  # Debian's codename: the sandbox's node image
    slurm: str  # the major of its slurmctld, slurmd and slurmdbd packages


# Each tested: its Slurm's daemons load the rendered configs in tests/acceptance.
OPERATING_SYSTEMS = (
    OperatingSystem("debian12", "Debian 12", "bookworm", "22.05"),
    OperatingSystem("debian13", "Debian 13", "trixie", "24.11"),
)
OS_NAMES = tuple(o.name for o in OPERATING_SYSTEMS)
DEFAULT_OS = "debian12"


def operating_system(name: str) -> OperatingSystem:
    """The table's entry for a cluster.os value."""
    return next(o for o in OPERATING_SYSTEMS if o.name == name)


def os_of_release(release: str) -> OperatingSystem:
    """The table's entry for a Debian codename (bookworm)."""
    return next(o for o in OPERATING_SYSTEMS if o.release == release)


def shipped() -> str:
    """Which Slurm each operating system ships, for people: 'Debian 12 ships 22.05, Debian 13 24.11'."""
    first, *rest = OPERATING_SYSTEMS
    return ", ".join([f"{first.title} ships {first.slurm}", *(f"{o.title} {o.slurm}" for o in rest)])


# ---- the upgrade window ------------------------------------------------------------------------
# slurmdbd and slurmctld take the database records and saved state of the two previous majors;
# from 24.11, of the three previous (Slurm's upgrade guide, "Compatibility Window"; each major's
# RELEASE_NOTES: 23.11 from 22.05 or 23.02, 24.11 from 23.02, 23.11 or 24.05).
WINDOW_WIDENED_IN = "24.11"
WINDOW_BEFORE, WINDOW_FROM = 2, 3


def window(version: str) -> int:
    """How many previous majors `version` upgrades from."""
    return WINDOW_FROM if version_key(version) >= version_key(WINDOW_WIDENED_IN) else WINDOW_BEFORE


def upgrades_from(version: str) -> tuple[str, ...]:
    """The majors of SLURM_VERSIONS that `version` upgrades from in one step, oldest first."""
    i = SLURM_VERSIONS.index(version)
    return SLURM_VERSIONS[max(0, i - window(version)) : i]


def upgrade_path(old: str, new: str) -> list[str] | None:
    """The shortest supported path of majors from `old` to `new`, both ends included ([old, new]
    when one step does); None for a downgrade. Among paths of equal length, each step goes to
    the latest major it can reach from which `new` is still that many steps away: the
    intermediate releases are the newest possible (longer supported, and the last jump the
    smallest), e.g. 22.05 -> 23.11 -> 24.11 rather than 22.05 -> 23.02 -> 24.11."""
    if version_key(new) < version_key(old):
        return None
    if new == old or old in upgrades_from(new):
        return [old, new]
    # steps[v]: the fewest upgrades from v to new (breadth first, backwards from new).
    steps, frontier = {new: 0}, [new]
    while frontier and old not in steps:
        nxt = []
        for v in frontier:
            for prev in upgrades_from(v):
                if prev not in steps:
                    steps[prev] = steps[v] + 1
                    nxt.append(prev)
        frontier = nxt
    if old not in steps:
        return None
    path = [old]
    while path[-1] != new:
        here = path[-1]
        reachable = [v for v in SLURM_VERSIONS if here in upgrades_from(v) and steps.get(v) == steps[here] - 1]
        path.append(reachable[-1])
    return path
