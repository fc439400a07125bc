"""Checks: storage appliances, the Spectrum Scale cluster and its file systems, NFS.

Host sets stay compressed: class memberships, quorum and client lists are NodeSets combined
with the helpers of checks.common, never walked host by host.
"""

from __future__ import annotations

import functools

from ClusterShell.NodeSet import NodeSet

from ..findings import dotted, error, warning
from ..hostlist import empty, nodeset, outside, overlap, union, union_shared
from ..model import Cluster, Role
from ..model.storage import Gpfs, GpfsFilesystem, lies_under, size_bytes
from ..model.gpfs_tuning import DEFAULTS, cache_memory, effective, member_memory, tuning_values
from ..model.naming import nsd_names
from . import check
from .common import did_you_mean, nearest_host, plural, repeated_hosts, shown, unique

GPFS = ("storage", "gpfs")
NFS = ("storage", "nfs")
BLOCK_SIZES = ("64K", "128K", "256K", "512K", "1M", "2M", "4M", "8M", "16M")
LOG_SIZE_RANGE = ("256K", "1024M")
MAX_QUORUM_WITH_TIEBREAKERS = 8
GIB = 1 << 30


def gpfs_check(fn):
    """A check of the Spectrum Scale cluster: runs with it as `g`, and only when there is one."""

    @functools.wraps(fn)
    def run(c: Cluster):
        if c.storage.gpfs is not None:
            yield from fn(c, c.storage.gpfs)

    return check(run)


def _gib(n_bytes: int) -> str:
    return f"{n_bytes / GIB:.1f} GiB"


def _appliance(c: Cluster) -> NodeSet:
    names = list(c.storage.appliance_servers)
    return nodeset(",".join(names)) if names else empty()


def _known(c: Cluster) -> NodeSet:
    """Every host GPFS may name: model nodes and appliance servers."""
    known = empty()
    known.update(c.all_hosts)
    known.update(_appliance(c))
    return known


def _nsd_names(fs: GpfsFilesystem) -> list[str]:
    return [name for run in fs.nsds for name in nsd_names(run)]


def _gpfs_members(g: Gpfs) -> list[tuple[tuple, NodeSet]]:
    """(path, hosts) of every place the GPFS section names cluster members."""
    places: list[tuple[tuple, NodeSet]] = [
        ((*GPFS, "admin_host"), nodeset(g.admin_host)),
        ((*GPFS, "quorum"), nodeset(g.quorum)),
        ((*GPFS, "managers"), nodeset(g.managers)),
    ]
    for i, fs in enumerate(g.filesystems):
        for j, run in enumerate(fs.nsds):
            places.append(((*GPFS, "filesystems", i, "nsds", j, "servers"), nodeset(",".join(run.servers))))
    return places


# ---- names and hosts ------------------------------------------------------------------------
@check
def storage_names_unique(c: Cluster):
    s = c.storage
    yield from unique(s.arrays, ("storage", "arrays"), "array name")
    seen: dict[str, tuple] = {}
    for i, array in enumerate(s.arrays):
        for j, server in enumerate(array.servers):
            path = ("storage", "arrays", i, "servers", j, "name")
            if server.name in seen:
                yield error(
                    path,
                    f"appliance server {server.name!r} is already declared at "
                    f"storage.arrays[{seen[server.name][2]}].servers[{seen[server.name][4]}]",
                )
            else:
                seen[server.name] = path
    yield from unique(s.nfs.exports, (*NFS, "exports"), "export name")
    if s.gpfs:
        yield from unique(s.gpfs.node_classes, (*GPFS, "node_classes"), "node class name")
        yield from unique(s.gpfs.filesystems, (*GPFS, "filesystems"), "file system name")
        owner: dict[str, tuple] = {}
        for i, fs in enumerate(s.gpfs.filesystems):
            for j, run in enumerate(fs.nsds):
                for name in nsd_names(run):
                    if name in owner and owner[name] != (i, j):
                        yield error(
                            (*GPFS, "filesystems", i, "nsds", j, "name"),
                            f"NSD {name} is already named by storage.gpfs.filesystems[{owner[name][0]}]"
                            f".nsds[{owner[name][1]}]",
                        )
                        break
                    owner[name] = (i, j)
    mounts = [
        ((*GPFS, "filesystems", i, "mount_point"), fs.mount_point)
        for i, fs in enumerate(s.gpfs.filesystems if s.gpfs else [])
    ]
    mounts += [((*NFS, "mounts", i, "mount_point"), m.mount_point) for i, m in enumerate(s.nfs.mounts)]
    first: dict[str, tuple] = {}
    for path, point in mounts:
        if point in first:
            yield error(path, f"mount point {point!r} is already used by {dotted(first[point][:-1])}")
        else:
            first[point] = path


@check
def storage_hosts_in_model(c: Cluster):
    """GPFS may name model nodes and appliance servers; NFS names model nodes only."""
    s = c.storage
    clash = overlap(_appliance(c), c.all_hosts)
    if len(clash):
        yield error(
            ("storage", "arrays"),
            f"appliance servers {shown(clash)} are also model nodes: "
            "declare each host once, as a node group or as an appliance server",
        )
    if s.gpfs:
        known = _known(c)
        places = _gpfs_members(s.gpfs) + [
            ((*GPFS, "node_classes", i, "hosts"), nodeset(nc.hosts)) for i, nc in enumerate(s.gpfs.node_classes)
        ]
        appliance = list(s.appliance_servers)
        for path, hosts in places:
            unknown = outside(hosts, known)
            if len(unknown):
                yield error(
                    path,
                    f"names {shown(unknown)}, neither a model node nor an appliance server"
                    + nearest_host(c, unknown, appliance),
                )
        admin = nodeset(s.gpfs.admin_host)
        if len(admin) != 1:
            yield error((*GPFS, "admin_host"), f"name one host, not {shown(admin)}")
        elif len(overlap(admin, _appliance(c))):
            yield error(
                (*GPFS, "admin_host"), f"{admin} is an appliance server; Ansible runs mm commands on a model node"
            )
    single = [((*NFS, "servers", i, "host"), srv.host) for i, srv in enumerate(s.nfs.servers)]
    single += [((*NFS, "exports", i, "server"), e.server) for i, e in enumerate(s.nfs.exports)]
    many = [((*NFS, "exports", i, "clients"), e.clients) for i, e in enumerate(s.nfs.exports) if e.clients]
    many += [((*NFS, "mounts", i, "clients"), m.clients) for i, m in enumerate(s.nfs.mounts)]
    for path, expr in single + many:
        unknown = outside(nodeset(expr), c.all_hosts)
        if len(unknown):
            yield error(path, f"names {shown(unknown)}, not in any node group" + nearest_host(c, unknown))
    for path, expr in single:
        if len(nodeset(expr)) != 1:
            yield error(path, f"name one host, not {shown(nodeset(expr))}")


# ---- Spectrum Scale -------------------------------------------------------------------------
@gpfs_check
def gpfs_node_in_one_class(c: Cluster, g: Gpfs):
    """Every cluster member is in exactly one node class: `mmchconfig -N <class>` then reaches
    each node once, and no node silently takes whichever of two classes' values GPFS applies last."""
    classes = [nodeset(nc.hosts) for nc in g.node_classes]
    for i, j, hosts in repeated_hosts(classes):
        yield error(
            (*GPFS, "node_classes", i, "hosts"),
            f"{shown(hosts)} already in node class {g.node_classes[j].name!r}; a node belongs to one class",
        )
    known = _known(c)
    if any(len(outside(hosts, known)) for hosts in classes):
        return  # a class naming an unknown host is most likely a misspelt member: one error says so
    in_a_class = g.members
    for path, hosts in _gpfs_members(g):
        orphans = outside(overlap(hosts, known), in_a_class)  # unknown ones have their error
        if len(orphans):
            yield error(path, f"{shown(orphans)} in no node class; add them to one under storage.gpfs.node_classes")


@check
def gpfs_daemon_network_reaches_members(c: Cluster):
    g = c.storage.gpfs
    if g is None or g.daemon_network is None:
        return
    if g.daemon_network not in c.networks:
        yield error(
            (*GPFS, "daemon_network"),
            f"unknown network {g.daemon_network!r}" + did_you_mean(g.daemon_network, c.networks),
        )
        return
    on_network = union(grp.hosts for grp in c.nodes if g.daemon_network in grp.addresses)
    for i, nc in enumerate(g.node_classes):
        if nodeset(nc.hosts).issubset(on_network):  # the usual case, without two 100,000-host copies
            continue
        missing = outside(overlap(nodeset(nc.hosts), c.all_hosts), on_network)
        if len(missing):
            yield error(
                (*GPFS, "node_classes", i, "hosts"),
                f"{shown(missing)} have no address on the daemon network {g.daemon_network!r}, so their "
                "GPFS node names would not resolve",
            )


@gpfs_check
def gpfs_quorum_odd(c: Cluster, g: Gpfs):
    n = len(nodeset(g.quorum))
    if g.tiebreaker_disks:
        if n > MAX_QUORUM_WITH_TIEBREAKERS:
            yield error(
                (*GPFS, "quorum"),
                f"{n} quorum nodes with tiebreaker disks; GPFS allows at most "
                f"{MAX_QUORUM_WITH_TIEBREAKERS} (drop the tiebreaker disks or quorum nodes)",
            )
        known = {name for fs in g.filesystems for name in _nsd_names(fs)}
        for k, disk in enumerate(g.tiebreaker_disks):
            if disk not in known:
                yield error(
                    (*GPFS, "tiebreaker_disks", k), f"tiebreaker disk {disk!r} is not an NSD of any file system"
                )
        if len(g.tiebreaker_disks) not in (1, 3):
            yield error((*GPFS, "tiebreaker_disks"), f"{len(g.tiebreaker_disks)} tiebreaker disks; GPFS takes 1 or 3")
    elif n % 2 == 0:
        yield warning(
            (*GPFS, "quorum"),
            f"{plural(n, 'quorum node')}: an even number survives no more failures than {n - 1} would "
            f"(a majority of {n} is {n // 2 + 1}); add or drop one, or declare tiebreaker_disks",
        )


@gpfs_check
def gpfs_worker_threads_ordered(c: Cluster, g: Gpfs):
    for i, nc in enumerate(g.node_classes):
        values = effective(g, nc)
        low, low_from = values["nsdMinWorkerThreads"]
        high, high_from = values["nsdMaxWorkerThreads"]
        if int(low) > int(high):
            at = (
                (*GPFS, "node_classes", i, "tuning", "nsdMinWorkerThreads")
                if low_from == "class"
                else (
                    (*GPFS, "tuning", "nsdMinWorkerThreads")
                    if low_from == "cluster"
                    else (*GPFS, "node_classes", i, "tuning")
                )
            )
            yield error(
                at,
                f"node class {nc.name!r}: nsdMinWorkerThreads {low} ({low_from}) is above "
                f"nsdMaxWorkerThreads {high} ({high_from}); GPFS never starts more than the maximum",
            )


@gpfs_check
def gpfs_caches_fit_memory(c: Cluster, g: Gpfs):
    """pagepool + maxFilesToCache x 3 KiB + maxStatCache x 400 B (IBM's rule of thumb) must fit
    the smallest member of each class; a pagepool above pagepoolMaxPhysMemPct of memory is cut."""
    for i, nc in enumerate(g.node_classes):
        values = {k: v for k, (v, _src) in effective(g, nc).items()}
        mem = cache_memory(values)
        path = (*GPFS, "node_classes", i, "tuning")
        members = member_memory(c, nodeset(nc.hosts))
        if not members:
            continue
        gib, what, hosts = min(members, key=lambda m: m[0])
        ram = gib * GIB
        if mem.total > ram:
            yield error(
                path,
                f"node class {nc.name!r}: pagepool {values['pagepool']} + maxFilesToCache "
                f"{values['maxFilesToCache']} x 3 KiB + maxStatCache {values['maxStatCache']} x 400 B = "
                f"{_gib(mem.total)}, above the {gib} GiB of {what} {shown(hosts)}",
            )
            continue
        pct = int(values.get("pagepoolMaxPhysMemPct", DEFAULTS["pagepoolMaxPhysMemPct"]))
        if mem.pagepool > ram * pct // 100:
            yield warning(
                path,
                f"node class {nc.name!r}: pagepool {values['pagepool']} is above {pct}% of the "
                f"{gib} GiB of {what} {shown(hosts)} (pagepoolMaxPhysMemPct); GPFS starts with a "
                "smaller pagepool",
            )


@gpfs_check
def gpfs_block_size_supported(c: Cluster, g: Gpfs):
    supported = {size_bytes(s): s for s in BLOCK_SIZES}
    maxblock = tuning_values(g.tuning).get("maxblocksize", DEFAULTS["maxblocksize"])
    for i, fs in enumerate(g.filesystems):
        path = (*GPFS, "filesystems", i)
        for key in ("block_size", "metadata_block_size"):
            value = getattr(fs, key)
            if value is not None and size_bytes(value) not in supported:
                yield error((*path, key), f"{key} {value} is not one Spectrum Scale supports: {', '.join(BLOCK_SIZES)}")
        if size_bytes(fs.block_size) > size_bytes(maxblock):
            yield error(
                (*path, "block_size"),
                f"block_size {fs.block_size} is above the cluster's maxblocksize "
                f"{maxblock}; raise storage.gpfs.tuning.maxblocksize first",
            )
        if fs.metadata_block_size is not None and not any(
            run.usage == "metadataOnly" and run.pool == "system" for run in fs.nsds
        ):
            yield error(
                (*path, "metadata_block_size"),
                "a separate metadata block size needs metadataOnly NSDs in the system pool",
            )
        if fs.log_size is not None:
            meta = size_bytes(fs.metadata_block_size or fs.block_size)
            log = size_bytes(fs.log_size)
            low, high = (size_bytes(s) for s in LOG_SIZE_RANGE)
            if not low <= log <= high:
                yield error(
                    (*path, "log_size"), f"log_size {fs.log_size} is outside {LOG_SIZE_RANGE[0]}-{LOG_SIZE_RANGE[1]}"
                )
            elif log % meta:
                yield error(
                    (*path, "log_size"),
                    f"log_size {fs.log_size} is not a multiple of the metadata block "
                    f"size {fs.metadata_block_size or fs.block_size}",
                )


@gpfs_check
def gpfs_replicas_have_failure_groups(c: Cluster, g: Gpfs):
    for i, fs in enumerate(g.filesystems):
        path = (*GPFS, "filesystems", i)
        for kind, holds in (
            ("data", ("dataAndMetadata", "dataOnly")),
            ("metadata", ("dataAndMetadata", "metadataOnly")),
        ):
            default, most = getattr(fs, f"{kind}_replicas"), getattr(fs, f"max_{kind}_replicas")
            if default > most:
                yield error(
                    (*path, f"{kind}_replicas"), f"{kind}_replicas {default} is above max_{kind}_replicas {most}"
                )
            groups = {run.failure_group for run in fs.nsds if run.usage in holds}
            if default > len(groups):
                yield error(
                    (*path, f"{kind}_replicas"),
                    f"{default} {kind} replicas need NSDs for {kind} in {default} failure groups; "
                    f"{fs.name!r} has {plural(len(groups), 'failure group')} ({', '.join(map(str, sorted(groups)))})",
                )


# ---- NFS ------------------------------------------------------------------------------------
@check
def nfs_export_path_and_clients(c: Cluster):
    """An export's path lies in a volume its server declares (or a GPFS file system the server
    mounts), and its clients are model nodes or declared networks."""
    nfs = c.storage.nfs
    servers = {srv.host: srv for srv in nfs.servers}
    g = c.storage.gpfs
    gpfs_members = g.members if g else empty()
    for i, e in enumerate(nfs.exports):
        path = (*NFS, "exports", i)
        server = servers.get(e.server)
        if server is None:
            # An unknown host (here or in a server's declaration) has its own error already.
            if e.server in c.all_hosts and all(srv.host in c.all_hosts for srv in nfs.servers):
                yield error((*path, "server"), f"{e.server} is not declared under storage.nfs.servers")
        else:
            volumes = list(server.volumes)
            if g and e.server in gpfs_members:
                volumes += [fs.mount_point for fs in g.filesystems]
            if not any(lies_under(e.path, v) for v in volumes):
                yield error((*path, "path"), f"{e.path} is on none of {e.server}'s volumes ({', '.join(volumes)})")
        for k, net in enumerate(e.networks):
            if net not in c.networks:
                yield error((*path, "networks", k), f"unknown network {net!r}" + did_you_mean(net, c.networks))
        if not e.clients and not e.networks:
            yield error(path, f"export {e.name!r} names no clients and no networks; nobody could mount it")


def _allowed(c: Cluster, e) -> NodeSet:
    hosts = empty()
    if e.clients:
        hosts.update(nodeset(e.clients))
    for net in e.networks:
        hosts.update(union(grp.hosts for grp in c.nodes if net in grp.addresses))
    return hosts


@check
def nfs_mounts_allowed(c: Cluster):
    nfs = c.storage.nfs
    exports = {e.name: e for e in nfs.exports}
    for i, m in enumerate(nfs.mounts):
        path = (*NFS, "mounts", i)
        e = exports.get(m.export)
        if e is None:
            yield error((*path, "export"), f"unknown export {m.export!r}" + did_you_mean(m.export, exports))
            continue
        allowed = _allowed(c, e)
        if nodeset(m.clients).issubset(allowed):  # the usual case, without two 100,000-host copies
            continue
        refused = outside(overlap(nodeset(m.clients), c.all_hosts), allowed)
        if len(refused) and not (e.clients and len(outside(nodeset(e.clients), c.all_hosts))):
            # (an export naming unknown hosts most likely misspells the refused ones: its error says so)
            yield error(
                (*path, "clients"),
                f"{shown(refused)} would mount {e.server}:{e.path}, but export {e.name!r} does not allow them",
            )


@check
def login_and_compute_nodes_mount_home(c: Cluster):
    """Users log in and run jobs in their home directories: a login or compute node without a
    shared file system at the home path (accounts.home_root, else /home) gives them an empty
    local one. Warned once per node group, at the home's NFS mount when there is one (its
    clients are what to extend: @GROUP or @role:ROLE keep up with the groups). Not where one host
    is every login and compute node (a deskside server): its local home is the users' only one."""
    users_hosts = union_shared(g.hosts for g in c.groups_with_role(Role.login, Role.compute))
    if len(users_hosts) <= 1:
        return
    home = c.home_root
    mounted = c.hosts_mounting(home)
    home_mounts = [i for i, m in enumerate(c.storage.nfs.mounts) if lies_under(home, m.mount_point)]
    gpfs = c.storage.gpfs
    on_gpfs = gpfs is not None and any(lies_under(home, fs.mount_point) for fs in gpfs.filesystems)
    if any(len(outside(nodeset(c.storage.nfs.mounts[i].clients), c.all_hosts)) for i in home_mounts):
        return  # a home mount naming unknown hosts: those errors come first, and explain the gap
    for i, group in enumerate(c.nodes):
        if not group.has(Role.login, Role.compute):
            continue
        missing = outside(nodeset(group.hosts), mounted)
        if not len(missing):
            continue
        roles = "/".join(r.value for r in group.roles if r in (Role.login, Role.compute))
        where = "accounts.home_root" if c.accounts is not None else "the default home path"
        them = "it" if len(missing) == 1 else "them"
        if home_mounts:
            path = (*NFS, "mounts", home_mounts[0], "clients")
            fix = f"add {them} to this mount's clients, e.g. as @{group.name}"
        elif on_gpfs:
            path = (*GPFS, "node_classes")
            fix = f"add {them} to a node class (every member mounts the GPFS file systems), e.g. as @{group.name}"
        else:
            path = ("nodes", i)
            fix = f"mount a shared file system at {home} there (storage.nfs.mounts, clients @{group.name})"
        verb = "mounts" if len(missing) == 1 else "mount"
        yield warning(
            path,
            f"{shown(missing)} of node group {group.name!r} ({roles}) {verb} no file system at "
            f"{home} ({where}), where the users' homes are: {fix}",
        )
