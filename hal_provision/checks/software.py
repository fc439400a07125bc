"""Checks: Lmod modules (prerequisites, hierarchy, defaults, login/compute in sync) and the
container runtime (bind filesystems, fakeroot subordinate ID ranges)."""

from __future__ import annotations

from ..findings import error, warning
from ..model import Cluster, Role
from ..model.base import MAX_ID
from ..model.software import FAKEROOT_MAX_START, FAKEROOT_MIN_COUNT, fakeroot_ranges
from . import check
from .common import did_you_mean, duplicates, overlapping_intervals, unique

MODULES = ("software", "modules")
FAKEROOT = ("containers", "fakeroot")


def _modules(c: Cluster):
    for i, m in enumerate(c.software.modules):
        yield i, m, (*MODULES, i)


def _role_names(roles) -> str:
    return ", ".join(r.value for r in roles)


@check
def module_names_unique(c: Cluster):
    keys = [(m.compiler, m.full_name) for m in c.software.modules]
    for i, first in duplicates(keys):
        where = f" under compiler {keys[i][0]}" if keys[i][0] else ""
        yield error(
            (*MODULES, i, "version"), f"module {keys[i][1]!r}{where} is already declared by software.modules[{first}]"
        )


@check
def module_defaults_unique(c: Cluster):
    marked = [(m.compiler, m.name) for m in c.software.modules if m.default]
    indices = [i for i, m in enumerate(c.software.modules) if m.default]
    for k, first in duplicates(marked):
        m = c.software.modules[indices[k]]
        yield error(
            (*MODULES, indices[k], "default"),
            f"{m.full_name!r} is a second default of {m.name!r} (software.modules[{indices[first]}] is one); "
            "`module load` picks one version per name: keep default on one",
        )


@check
def module_compilers_exist(c: Cluster):
    sw = c.software
    for _i, m, path in _modules(c):
        if not m.compiler:
            continue
        found = c.software.resolve(m.compiler) if "/" in m.compiler else []
        compilers = [x for x in found if x.kind.value == "compiler" and not x.compiler]
        if not compilers:
            known = [x.full_name for x in sw.modules if x.kind.value == "compiler" and not x.compiler]
            yield error(
                (*path, "compiler"),
                f"{m.full_name!r} is built with {m.compiler!r}, which is not a Core "
                "compiler module NAME/VERSION of the model" + did_you_mean(m.compiler, known),
            )
            continue
        hidden = [r for r in sw.roles_of(m) if r not in sw.roles_of(compilers[0])]
        if hidden:
            yield error(
                (*path, "compiler"),
                f"{m.full_name!r} is visible on {_role_names(hidden)} nodes, where its "
                f"compiler {m.compiler!r} is not: nobody there can reach it",
            )


@check
def module_prerequisites_exist(c: Cluster):
    sw = c.software
    for _i, m, path in _modules(c):
        for k, ref in enumerate(m.requires):
            where = (*path, "requires", k)
            found = c.software.resolve(ref)
            if not found:
                yield error(
                    where,
                    f"prerequisite {ref!r} of {m.full_name!r} is not a module of the model"
                    + did_you_mean(ref, c.software.known_refs()),
                )
                continue
            reachable = [x for x in found if x.compiler is None or x.compiler == m.compiler]
            if not reachable:
                yield error(
                    where,
                    f"prerequisite {ref!r} of {m.full_name!r} is only visible after loading "
                    f"{found[0].compiler!r}; require that compiler too, or build both with it",
                )
                continue
            if ref.partition("/")[0] == m.name:
                yield error(where, f"{m.full_name!r} requires its own name {ref!r}: one name loads one version")
                continue
            missing = [r for r in sw.roles_of(m) if not any(r in sw.roles_of(x) for x in reachable)]
            if missing:
                yield error(
                    where,
                    f"prerequisite {ref!r} of {m.full_name!r} is not visible on "
                    f"{_role_names(missing)} nodes: loading {m.full_name!r} there fails",
                )


@check
def module_conflicts_exist(c: Cluster):
    for _i, m, path in _modules(c):
        for k, ref in enumerate(m.conflicts):
            if not c.software.resolve(ref):
                yield warning(
                    (*path, "conflicts", k),
                    f"{m.full_name!r} conflicts with {ref!r}, which is not a "
                    "module of the model" + did_you_mean(ref, c.software.known_refs()),
                )


@check
def modules_on_compute_also_on_login(c: Cluster):
    """HAL keeps the login node's environment in sync with the compute nodes'."""
    present = {r for g in c.nodes for r in g.roles}
    if Role.login not in present or Role.compute not in present:
        return
    sw = c.software
    defaults = sw.default_roles
    if sw.modules and Role.compute in defaults and Role.login not in defaults:
        yield warning(
            ("software", "default_roles"),
            "modules are visible on compute nodes by default but not on "
            "login nodes: add login, so users see where they build what "
            "their jobs load",
        )
    for _i, m, path in _modules(c):
        if m.roles is None:
            continue
        if Role.compute in m.roles and Role.login not in m.roles:
            yield warning(
                (*path, "roles"),
                f"{m.full_name!r} is visible on compute nodes but not on login nodes; keep the two in sync: add login",
            )


@check
def container_bind_filesystems_exist(c: Cluster):
    ct = c.containers
    if ct is None or ct.bind_filesystems is None:
        return
    known = c.storage.filesystem_mounts()
    for k, name in enumerate(ct.bind_filesystems):
        if name not in known:
            yield error(
                ("containers", "bind_filesystems", k),
                f"{name!r} is not a shared filesystem of the model "
                "(GPFS file system or NFS export)" + did_you_mean(name, known),
            )


@check
def fakeroot_names_unique(c: Cluster):
    if c.containers is None:
        return
    fr = c.containers.fakeroot
    yield from unique(fr.users, (*FAKEROOT, "users"), "fakeroot user")
    yield from unique(fr.groups, (*FAKEROOT, "groups"), "fakeroot group")


@check
def fakeroot_ranges_valid(c: Cluster):
    """Ranges of at least 65,536 IDs, inside what Apptainer and the kernel accept, disjoint from
    each other and from every real UID/GID range of the model."""
    if c.containers is None:
        return
    fr = c.containers.fakeroot
    for k, real in enumerate(fr.real_ids):
        if real.first > real.last:
            yield error((*FAKEROOT, "real_ids", k), f"real ID range {real.first}-{real.last} ends before it starts")
    if not fr.enabled:
        return
    if fr.count < FAKEROOT_MIN_COUNT:
        yield error(
            (*FAKEROOT, "count"),
            f"{fr.count} subordinate IDs per user is too few: a user namespace "
            f"needs {FAKEROOT_MIN_COUNT} (IDs 0-65535), and Apptainer refuses smaller "
            "ranges",
        )
    ranges = fakeroot_ranges(fr, c.accounts)
    if not ranges:
        yield warning(FAKEROOT, "fakeroot is enabled, but no user gets a range: list users, or group members")

    def at(r):
        return (*r.path, "first_subid") if r.pinned else (*FAKEROOT, "first_subid")

    for r in ranges:
        if r.first > FAKEROOT_MAX_START or r.last > MAX_ID:
            yield error(
                at(r),
                f"{r.user}'s range {r.first}-{r.last} ends beyond what Apptainer maps (first ID at "
                f"most {FAKEROOT_MAX_START})",
            )
    for key, earlier, lo, hi in overlapping_intervals((r.first, r.last, n) for n, r in enumerate(ranges)):
        a, b = ranges[key], ranges[earlier]
        later = a if a.pinned else b
        other = b if later is a else a
        yield error(
            at(later),
            f"{later.user}'s range {later.first}-{later.last} overlaps {other.user}'s "
            f"{other.first}-{other.last} (IDs {lo}-{hi}): both could own the same files",
        )
    for r in ranges:  # users x real ranges: a few real ranges, so linear in users
        for x in fr.real_ids:
            lo, hi = max(r.first, x.first), min(r.last, x.last)
            if lo <= hi:
                label = f" ({x.description})" if x.description else ""
                yield error(
                    at(r),
                    f"{r.user}'s range {r.first}-{r.last} takes real IDs {lo}-{hi} of "
                    f"{x.first}-{x.last}{label}; start subordinate ranges above {x.last}",
                )
