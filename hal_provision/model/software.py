"""Software environment: Lmod modules (one hierarchy, per-role visibility) and the container
runtime with fakeroot (subordinate UID/GID ranges)."""

from __future__ import annotations

import re
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Literal, NamedTuple

from pydantic import AfterValidator, Field

from .base import AbsolutePath, CleanPath, IdRange, Name, Strict
from .nodes import Role

if TYPE_CHECKING:
    from .accounts import Accounts

# Apptainer refuses fakeroot ranges smaller than this (internal/pkg/fakeroot: validRangeCount)
# and it is what shadow's useradd hands out by default (login.defs SUB_UID_COUNT).
FAKEROOT_MIN_COUNT = 65536
# The highest first ID Apptainer accepts for a range (2**32 - 131072); the highest ID a user
# namespace can map is base.MAX_ID.
FAKEROOT_MAX_START = 2**32 - 131072

DEFAULT_ROLES = [Role.login, Role.development, Role.compute]

Version = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")]


def _check_module_ref(value: str) -> str:
    name, _, version = value.partition("/")
    if (
        not re.fullmatch(r"[A-Za-z][A-Za-z0-9_\-]*", name)
        or (version and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+-]*", version))
        or value.count("/") > 1
    ):
        raise ValueError(f"{value!r} is not a module reference: give NAME or NAME/VERSION, e.g. cuda/10.2")
    return value


ModuleRef = Annotated[str, AfterValidator(_check_module_ref)]
"""A module named by NAME (any version; its default) or NAME/VERSION."""


class ModuleKind(str, Enum):
    compiler = "compiler"
    mpi = "mpi"
    framework = "framework"
    library = "library"
    tool = "tool"


class PipEnvironment(Strict):
    """A module whose software hal-provision installs: a Python virtualenv at the module's prefix,
    made by the lmod role on one node of the module's roles (the prefix is on the shared tree)."""

    packages: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._+\-\[\],<>=!~ ]*$")]] = Field(
        min_length=1,
        description="Requirements pip installs into it, pinned where it matters, e.g. "
        "torch==2.13.0 for a CPU build that the site's wheelhouse holds.",
    )
    python: str = Field(
        "python3",
        pattern=r"^\S+$",
        description="The nodes' Python that makes the virtualenv (its version decides which wheels fit).",
    )


class Module(Strict):
    name: Name = Field(description="Module name, e.g. wmlce; what users type in `module load NAME`.")
    version: Version = Field(description="Module version, e.g. 1.7.0-py3.7; NAME/VERSION must be unique.")
    kind: ModuleKind = Field(
        description="compiler, mpi, framework (a framework environment such as WMLCE), library or tool. "
        "Compilers open a level of the hierarchy; compiler and mpi modules are families of their kind."
    )
    description: str = Field("", description="One line shown by `module whatis` and `module spider`.")
    compiler: ModuleRef | None = Field(
        None,
        description="NAME/VERSION of the compiler module this one is built with: it is then only visible "
        "after that compiler is loaded (Lmod hierarchy level Compiler/NAME/VERSION). None: a Core module.",
    )
    family: Name | None = Field(
        None,
        description="Lmod family: two modules of one family are never loaded together. Default: the kind "
        "for compilers and MPI, else the module name (so two versions never mix).",
    )
    prefix: AbsolutePath | None = Field(
        None,
        description="Installation prefix. Default: software.prefix_root/NAME/VERSION (Core) or "
        "software.prefix_root/COMPILER/COMPILER_VERSION/NAME/VERSION (compiler level).",
    )
    paths: dict[Annotated[str, Field(pattern=r"^[A-Z_][A-Z0-9_]*$")], list[CleanPath]] = Field(
        default_factory=lambda: {"PATH": ["bin"]},
        description="Path variables to prepend to, e.g. {PATH: [bin], LD_LIBRARY_PATH: [lib64]}; relative "
        "entries are under the prefix, absolute ones are used as given.",
    )
    variables: dict[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")], str] = Field(
        default_factory=dict,
        description="Variables to set, e.g. {CUDA_HOME: '{prefix}'}; '{prefix}' stands for the prefix.",
    )
    requires: list[ModuleRef] = Field(
        default_factory=list,
        description="Prerequisites (NAME or NAME/VERSION), loaded with this module and unloaded with it "
        "(Lmod depends_on).",
    )
    conflicts: list[ModuleRef] = Field(
        default_factory=list, description="Modules that must not be loaded together with this one."
    )
    roles: list[Role] | None = Field(
        None, description="Node roles that see this module. Default: software.default_roles."
    )
    default: bool = Field(
        False,
        description="The version `module load NAME` picks. At most one per name; without one, the last version listed.",
    )
    pip: PipEnvironment | None = Field(
        None,
        description="Install the module's software as a Python virtualenv at its prefix (e.g. a CPU "
        "build of PyTorch), from software.wheelhouse where set. None: hal-provision writes the modulefile "
        "only; the site installs what is behind it.",
    )

    @property
    def full_name(self) -> str:
        return f"{self.name}/{self.version}"


class Software(Strict):
    modulefiles_root: AbsolutePath | None = Field(
        None,
        description="Root of the rendered module tree on the nodes; each node role gets ROOT/ROLE/Core "
        "(and ROOT/ROLE/Compiler/...), and a node carries only its own role's tree. Default: "
        "cluster.prefix/modulefiles.",
    )
    prefix_root: AbsolutePath = Field("/sw", description="Default root of the modules' installation prefixes.")
    default_roles: list[Role] = Field(
        default_factory=lambda: list(DEFAULT_ROLES),
        description="Node roles that see a module whose `roles` is not given.",
    )
    on_conflict: Literal["swap", "refuse"] = Field(
        "swap",
        description="Loading a module whose family (or name) is already loaded: swap replaces the loaded "
        "one (Lmod's default); refuse fails and asks for `module swap`.",
    )
    spider_cache_dir: AbsolutePath = Field(
        "/var/cache/lmod", description="Lmod system spider cache, rebuilt on the node whenever its tree changes."
    )
    modules: list[Module] = Field(default_factory=list, description="Environment modules.")
    wheelhouse: AbsolutePath | None = Field(
        None,
        description="A directory of wheels on the nodes (the site's wheelhouse): the modules' pip "
        "environments are installed from it alone (pip --no-index). None: from the package index, as pip is "
        "configured on the nodes.",
    )

    def resolve(self, ref: str) -> list[Module]:
        """The modules a NAME or NAME/VERSION reference can load."""
        name, _, version = ref.partition("/")
        return [m for m in self.modules if m.name == name and (not version or m.version == version)]

    def known_refs(self) -> list[str]:
        """Every NAME and NAME/VERSION the modules answer to, for 'did you mean'."""
        return list(dict.fromkeys(r for m in self.modules for r in (m.name, m.full_name)))

    def loadable_on(self, ref: str, role: Role) -> bool:
        """A module a NAME or NAME/VERSION reference names is in the Core tree of `role`'s
        nodes: `module load REF` works there without loading a compiler first."""
        return any(role in self.roles_of(m) and m.compiler is None for m in self.resolve(ref))

    def roles_of(self, module: Module) -> list[Role]:
        return list(module.roles if module.roles is not None else self.default_roles)

    def family_of(self, module: Module) -> str:
        if module.family:
            return module.family
        return module.kind.value if module.kind in (ModuleKind.compiler, ModuleKind.mpi) else module.name

    def prefix_of(self, module: Module) -> str:
        if module.prefix:
            return module.prefix
        level = f"{module.compiler}/" if module.compiler else ""
        return f"{self.prefix_root.rstrip('/')}/{level}{module.name}/{module.version}"


class FakerootUser(Strict):
    name: Name = Field(description="User name as /etc/passwd or the directory knows it.")
    first_subid: int | None = Field(
        None,
        ge=0,
        description="Pin this user's range to start here (e.g. to keep an allocation that images already "
        "use). None: the next free slot from fakeroot.first_subid.",
    )


class FakerootGroup(Strict):
    name: Name = Field(description="Group name (local or in the directory).")
    members: list[Name] = Field(
        default_factory=list,
        description="Its members as the model knows them: /etc/subuid names users, not groups, so each "
        "member listed here gets a range. Members only in the directory get none until listed.",
    )
    description: str = Field("", description="Free text.")


class Fakeroot(Strict):
    enabled: bool = Field(False, description="Let the users below be root inside their containers.")
    users: list[FakerootUser] = Field(default_factory=list, description="Users who get a subordinate ID range.")
    groups: list[FakerootGroup] = Field(
        default_factory=list, description="Groups whose listed members get a subordinate ID range."
    )
    first_subid: int = Field(
        1_000_000,
        ge=0,
        description="Where automatic ranges start. Slots are handed out in declaration order (users, then "
        "each group's members), so appending a user never moves another user's range.",
    )
    count: int = Field(FAKEROOT_MIN_COUNT, ge=1, description="IDs per user; Apptainer needs at least 65536.")
    real_ids: list[IdRange] = Field(
        default_factory=lambda: [IdRange(first=0, last=65535, description="system and local accounts")],
        description="UID/GID ranges real accounts use (local, LDAP); no subordinate range may touch them.",
    )


class Containers(Strict):
    runtime: Literal["apptainer", "singularity"] = Field(description="Container runtime.")
    version: str = Field(
        "", description="Runtime version to install from the vendor's packages; empty: what the repository has."
    )
    roles: list[Role] = Field(
        default_factory=lambda: list(DEFAULT_ROLES), description="Node roles on which the runtime is installed."
    )
    bind_filesystems: list[Name] | None = Field(
        None,
        description="Shared filesystems whose mount points every container gets: GPFS file systems by name, NFS "
        "mounts by export name. None: all of them.",
    )
    bind_paths: list[AbsolutePath] = Field(
        default_factory=lambda: ["/etc/localtime", "/etc/hosts"],
        description="Other host paths bound into every container.",
    )
    gpu: bool = Field(True, description="Pass the NVIDIA GPUs into every container (always use nv).")
    fakeroot: Fakeroot = Field(default_factory=Fakeroot, description="Fakeroot: root inside the container.")

    @property
    def config_path(self) -> str:
        return f"/etc/{self.runtime}/{self.runtime}.conf"


class SubidRange(NamedTuple):
    """One user's subordinate IDs (the same numbers serve as UIDs and GIDs)."""

    user: str
    first: int
    count: int
    path: tuple  # where the user is declared, e.g. ("containers", "fakeroot", "users", 0)
    pinned: bool
    active: bool = True  # False: a disabled directory user; the slot stays reserved, unwritten

    @property
    def last(self) -> int:
        return self.first + self.count - 1


def fakeroot_ranges(fakeroot: Fakeroot, accounts: "Accounts | None" = None) -> list[SubidRange]:
    """Every fakeroot user's range, in declaration order (users, then each group's members).

    A group's members are those it lists, then the directory users (`accounts`) who belong to
    the directory group of the same name, in the order accounts.users declares them. A user
    declared twice keeps the first declaration. Pinned ranges stay where they are; the others
    take consecutive slots of `count` IDs from `first_subid`, skipping any slot a pinned range
    touches. Nothing is sorted, so appending a user never moves another's range, and a
    disabled directory user keeps a reserved slot (`active` False) that /etc/subuid leaves out.
    """
    if not fakeroot.enabled:
        return []
    base = ("containers", "fakeroot")
    subjects: dict[str, tuple[tuple, int | None, bool]] = {}
    for i, user in enumerate(fakeroot.users):
        subjects.setdefault(user.name, ((*base, "users", i), user.first_subid, True))
    for g, group in enumerate(fakeroot.groups):
        for m, member in enumerate(group.members):
            subjects.setdefault(member, ((*base, "groups", g, "members", m), None, True))
        if accounts is not None:
            members = {user.name for user in accounts.members(group.name)}
            for u, user in enumerate(accounts.users):
                if user.name in members:
                    subjects.setdefault(user.name, (("accounts", "users", u), None, user.active))
    count = fakeroot.count
    pinned = sorted((start, start + count - 1) for _path, start, _a in subjects.values() if start is not None)
    out: list[SubidRange] = []
    slot = fakeroot.first_subid
    for name, (path, start, active) in subjects.items():
        if start is not None:
            out.append(SubidRange(name, start, count, path, True, active))
            continue
        moved = True
        while moved:  # skip past every pinned range this slot would touch
            moved = False
            for first, last in pinned:
                if first <= slot + count - 1 and slot <= last:
                    slot, moved = last + 1, True
        out.append(SubidRange(name, slot, count, path, False, active))
        slot += count
    return out
