"""The software environment: Lmod modulefiles and site configuration, the container runtime's
configuration and the fakeroot subordinate ID files.

Module tree: one per node role that has nodes, ``<modulefiles_root>/<role>/Core/NAME/VERSION.lua``
and, for modules built with a compiler, ``<role>/Compiler/CNAME/CVERSION/NAME/VERSION.lua``
(the compiler's modulefile opens that level). A node receives only its own role's tree; the
one /etc/lmod/modulespath lists every role's Core and Lmod's profile script adds only the
directories that exist, so `module avail` on a node shows exactly its role's modules.

``files/etc/hal-provision/software.json`` is the plan the lmod and containers roles and
tests/infra read on the controller: which roles get a tree or the runtime, which files are
cluster-wide, what each role's `module avail` must list. It is not copied to the nodes.
"""

from __future__ import annotations

import json

from ..model import Cluster, Module
from ..model.software import Containers, Software, fakeroot_ranges
from .common import header, json_comment

FILES = "files"
MANIFEST = f"{FILES}/etc/hal-provision/software.json"
MODULESPATH = "/etc/lmod/modulespath"
LMODRC = "/etc/lmod/lmodrc.lua"
PROFILE = "/etc/profile.d/hal-lmod.sh"
SUBUID, SUBGID = "/etc/subuid", "/etc/subgid"


def render(cluster: Cluster) -> dict[str, str]:
    sw, ct = cluster.software, cluster.containers
    if not sw.modules and ct is None:
        return {}
    files: dict[str, str] = {}
    trees = module_trees(cluster)
    for tree in trees.values():
        files.update(tree)
    lmod_files = lmod_site_files(cluster, list(trees)) if sw.modules else {}
    files.update(lmod_files)
    runtime_files = container_files(cluster) if ct is not None else {}
    files.update(runtime_files)
    files[MANIFEST] = manifest(cluster, trees, lmod_files, runtime_files)
    return files


# ---- Lmod ------------------------------------------------------------------------------------


def lua(value: str) -> str:
    """A Lua double-quoted string literal."""
    out = []
    for ch in value:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 32 or ord(ch) == 127:
            out.append(f"\\{ord(ch):03d}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def role_root(sw: Software, role: str) -> str:
    return f"{sw.modulefiles_root.rstrip('/')}/{role}"


def level_dir(sw: Software, role: str, compiler: str | None) -> str:
    """The directory (on the node) holding a module's NAME/ directory."""
    return f"{role_root(sw, role)}/{'Compiler/' + compiler if compiler else 'Core'}"


def roles_with_nodes(cluster: Cluster) -> list[str]:
    return sorted({r.value for g in cluster.nodes for r in g.roles})


def visible_modules(cluster: Cluster) -> dict[str, list[Module]]:
    """Role -> its modules in model order, for the roles that have nodes and see any module."""
    present = set(roles_with_nodes(cluster))
    out: dict[str, list[Module]] = {}
    for module in cluster.software.modules:
        for role in cluster.software.roles_of(module):
            if role.value in present:
                out.setdefault(role.value, []).append(module)
    return dict(sorted(out.items()))


def default_versions(modules: list[Module]) -> dict[tuple[str | None, str], str]:
    """(compiler, name) -> the default version, for each name with a choice: the one marked
    default, else the last listed. A name with one version and no mark needs none."""
    out: dict[tuple[str | None, str], str] = {}
    marked: set[tuple[str | None, str]] = set()
    versions: dict[tuple[str | None, str], int] = {}
    for m in modules:
        key = (m.compiler, m.name)
        versions[key] = versions.get(key, 0) + 1
        if key not in marked:
            out[key] = m.version
        if m.default:
            marked.add(key)
    return {key: v for key, v in out.items() if key in marked or versions[key] > 1}


def module_trees(cluster: Cluster) -> dict[str, dict[str, str]]:
    """Role -> {rendered path: text} of that role's module tree."""
    sw = cluster.software
    trees: dict[str, dict[str, str]] = {}
    for role, modules in visible_modules(cluster).items():
        opened = {m.compiler for m in modules if m.compiler}
        tree: dict[str, str] = {}
        for m in modules:
            path = f"{FILES}{level_dir(sw, role, m.compiler)}/{m.name}/{m.version}.lua"
            tree[path] = modulefile(cluster, m, role, m.full_name in opened)
        for (compiler, name), version in default_versions(modules).items():
            rc = f"{FILES}{level_dir(sw, role, compiler)}/{name}/.modulerc.lua"
            tree[rc] = header(cluster, "--") + f'module_version({lua(f"{name}/{version}")}, "default")\n'
        trees[role] = dict(sorted(tree.items()))
    return trees


def modulefile(cluster: Cluster, m: Module, role: str, opens_level: bool) -> str:
    sw = cluster.software
    prefix = sw.prefix_of(m)
    out = [header(cluster, "--")]
    out.append(f"whatis({lua('Name: ' + m.name)})\n")
    out.append(f"whatis({lua('Version: ' + m.version)})\n")
    out.append(f"whatis({lua('Category: ' + m.kind.value)})\n")
    if m.description:
        out.append(f"whatis({lua('Description: ' + m.description)})\n")
    if m.compiler:
        out.append(f"whatis({lua('Compiler: ' + m.compiler)})\n")
    out.append(f"\nfamily({lua(sw.family_of(m))})\n")
    out.extend(f"conflict({lua(ref)})\n" for ref in m.conflicts)
    out.extend(f"depends_on({lua(ref)})\n" for ref in m.requires)
    out.append(f"\n-- Installed under {prefix}\n")
    for var, entries in m.paths.items():
        parts = [e if e.startswith("/") else f"{prefix}/{e}".rstrip("/") for e in entries]
        out.append(f"prepend_path({lua(var)}, {lua(':'.join(parts))})\n")
    for var, value in m.variables.items():
        out.append(f"setenv({lua(var)}, {lua(value.replace('{prefix}', prefix))})\n")
    if opens_level:
        out.append("\n-- Modules built with this compiler become visible once it is loaded.\n")
        out.append(f'prepend_path("MODULEPATH", {lua(level_dir(sw, role, m.full_name))})\n')
    return "".join(out)


def lmod_site_files(cluster: Cluster, roles: list[str]) -> dict[str, str]:
    sw = cluster.software
    refuse = sw.on_conflict == "refuse"
    cache = sw.spider_cache_dir.rstrip("/")
    modulespath = (
        header(cluster)
        + (
            "# One tree per node role; a node carries only its own role's tree, and Lmod's profile\n"
            "# script adds only directories that exist: `module avail` shows exactly that role's modules.\n"
        )
        + "".join(f"{level_dir(sw, role, None)}\n" for role in roles)
    )
    lmodrc = header(cluster, "--") + (
        "-- The system spider cache; the lmod role rebuilds it whenever the node's tree changes.\n"
        "scDescriptT = {\n"
        f"  {{dir = {lua(cache)}, timestamp = {lua(cache + '/timestamp')}}},\n"
        "}\n"
    )
    profile = header(cluster) + (
        "# Loading a module whose name or family is already loaded: "
        + ("refuse, and ask for `module swap`.\n" if refuse else "swap the loaded one out (Lmod's default).\n")
        + f"export LMOD_AUTO_SWAP={'no' if refuse else 'yes'}\n"
        + f"export LMOD_DISABLE_SAME_NAME_AUTOSWAP={'yes' if refuse else 'no'}\n"
    )
    return {f"{FILES}{MODULESPATH}": modulespath, f"{FILES}{LMODRC}": lmodrc, f"{FILES}{PROFILE}": profile}


# ---- container runtime -----------------------------------------------------------------------


def bind_paths(cluster: Cluster, ct: Containers) -> list[str]:
    mounts = cluster.storage.filesystem_mounts()
    names = list(mounts) if ct.bind_filesystems is None else [n for n in ct.bind_filesystems if n in mounts]
    return list(dict.fromkeys([*ct.bind_paths, *(mounts[n] for n in names)]))


def runtime_conf(cluster: Cluster, ct: Containers) -> str:
    yes = {True: "yes", False: "no"}
    out = [header(cluster)]
    out.append(
        f"# {ct.runtime}.conf: only directives that Singularity 3.5+ and Apptainer 1.x both read.\n"
        "# Setuid flow: fakeroot maps the ranges of /etc/subuid and /etc/subgid.\n"
        "allow setuid = yes\n"
        "max loop devices = 256\n"
        "allow pid ns = yes\n"
        "config passwd = yes\n"
        "config group = yes\n"
        "config resolv_conf = yes\n"
        "mount proc = yes\n"
        "mount sys = yes\n"
        "mount dev = yes\n"
        "mount devpts = yes\n"
        "mount home = yes\n"
        "mount tmp = yes\n"
        "mount hostfs = no\n"
        "\n# The model's shared filesystems and host files, in every container.\n"
    )
    out.extend(f"bind path = {path}\n" for path in bind_paths(cluster, ct))
    out.append(
        "\nuser bind control = yes\n"
        "enable fusemount = yes\n"
        "enable overlay = try\n"
        "enable underlay = yes\n"
        "mount slave = yes\n"
        "sessiondir max size = 16\n"
        "allow container sif = yes\n"
        "allow container encrypted = yes\n"
        "allow container squashfs = yes\n"
        "allow container extfs = yes\n"
        "allow container dir = yes\n"
        f"\n# GPUs: {'every container gets the NVIDIA devices and libraries (--nv)' if ct.gpu else 'only with --nv'}.\n"
        f"always use nv = {yes[ct.gpu]}\n"
        "root default capabilities = full\n"
        "memory fs type = tmpfs\n"
        "shared loop devices = no\n"
    )
    return "".join(out)


def subid_file(cluster: Cluster, ct: Containers) -> str:
    # Header lines have fewer than two ':' so shadow and Apptainer skip them as non-entries.
    lines = [header(cluster)]
    if ct.fakeroot.enabled:
        lines.append(f"# Fakeroot ranges: {ct.fakeroot.count} IDs per user, clear of real IDs.\n")
    else:
        lines.append("# Fakeroot is off: no user has subordinate IDs.\n")
    lines.extend(f"{r.user}:{r.first}:{r.count}\n" for r in fakeroot_ranges(ct.fakeroot, cluster.accounts) if r.active)
    return "".join(lines)


def container_files(cluster: Cluster) -> dict[str, str]:
    ct = cluster.containers
    assert ct is not None
    subids = subid_file(cluster, ct)
    return {
        f"{FILES}{ct.config_path}": runtime_conf(cluster, ct),
        f"{FILES}{SUBUID}": subids,
        f"{FILES}{SUBGID}": subids,
    }


# ---- the plan the roles and tests read -------------------------------------------------------


def _node_path(rendered: str) -> str:
    return rendered[len(FILES) :]


def manifest(
    cluster: Cluster, trees: dict[str, dict[str, str]], lmod_files: dict[str, str], runtime_files: dict[str, str]
) -> str:
    sw, ct = cluster.software, cluster.containers
    visible = visible_modules(cluster)
    lmod = {
        "files": [_node_path(p) for p in lmod_files],
        "modulefiles_root": sw.modulefiles_root.rstrip("/"),
        "on_conflict": sw.on_conflict,
        "spider_cache_dir": sw.spider_cache_dir,
        "roles": {
            role: {
                "tree": role_root(sw, role),
                "modulepath": level_dir(sw, role, None),
                "core": [m.full_name for m in visible[role] if not m.compiler],
                "by_compiler": {
                    c: [m.full_name for m in visible[role] if m.compiler == c]
                    for c in dict.fromkeys(m.compiler for m in visible[role] if m.compiler)
                },
                "defaults": {
                    f"{c}:{n}" if c else n: f"{n}/{v}" for (c, n), v in default_versions(visible[role]).items()
                },
            }
            for role in trees
        },
        "modules": {
            m.full_name if not m.compiler else f"{m.compiler}:{m.full_name}": {
                "compiler": m.compiler,
                "family": sw.family_of(m),
                "requires": m.requires,
                "conflicts": m.conflicts,
                "prefix": sw.prefix_of(m),
                "roles": [r.value for r in sw.roles_of(m)],
            }
            for m in sw.modules
        },
        # Modules whose software the lmod role installs: a virtualenv at the prefix, by pip.
        "environments": [
            {
                "module": m.full_name,
                "prefix": sw.prefix_of(m),
                "python": m.pip.python,
                "packages": list(m.pip.packages),
                "roles": [r.value for r in sw.roles_of(m)],
            }
            for m in sw.modules
            if m.pip is not None
        ],
        "wheelhouse": sw.wheelhouse,
    }
    containers = None
    if ct is not None:
        containers = {
            "runtime": ct.runtime,
            "version": ct.version,
            "roles": sorted(r.value for r in ct.roles),
            "config": ct.config_path,
            "files": [_node_path(p) for p in runtime_files],
            "fakeroot": {
                "enabled": ct.fakeroot.enabled,
                "ranges": [
                    {"user": r.user, "first": r.first, "count": r.count}
                    for r in fakeroot_ranges(ct.fakeroot, cluster.accounts)
                    if r.active
                ],
            },
        }
    body = {
        "_comment": json_comment(cluster),
        "cluster": cluster.cluster.name,
        "lmod": lmod if sw.modules else None,
        "containers": containers,
    }
    return json.dumps(body, indent=2, sort_keys=True) + "\n"
