"""Checks: backups (where the snapshots go, from which hosts, when, of what)."""

from __future__ import annotations

from ..findings import error, warning
from ..hostlist import nodeset, outside, overlap, union
from ..model import Cluster
from ..model.oncalendar import calendar_problem
from ..model.storage import lies_under
from . import check
from .common import did_you_mean, duplicates, shown

BACKUP = ("backup",)
FILESYSTEM = (*BACKUP, "destination", "filesystem")

# Why the cluster has no such state: what a `backup.state` entry needs.
NEEDS = {
    "directory": "an LDAP directory (services.ldap and an accounts section)",
    "monitoring": "a monitoring database (services.monitoring_db and a monitoring section)",
}


def _hosts_with_jobs(c: Cluster) -> dict[str, list[str]]:
    """Each host that runs backup jobs -> the names of its jobs."""
    out: dict[str, list[str]] = {}
    for job in c.backup_jobs:
        out.setdefault(job.host, []).append(job.name)
    return out


def _destinations(c: Cluster) -> list[tuple[tuple, str, list[str]]]:
    """Each destination the section names: (the path of its `filesystem` field, the file system,
    the hosts with jobs whose snapshots go there), `destination` first."""
    if c.backup is None:
        return []
    jobs = _hosts_with_jobs(c)
    own = c.backup.host_destinations
    out = [(FILESYSTEM, c.backup.destination.filesystem, [h for h in jobs if h not in own])]
    out += [
        ((*BACKUP, "host_destinations", host, "filesystem"), d.filesystem, [host] if host in jobs else [])
        for host, d in own.items()
    ]
    return out


def _known(c: Cluster, name: str) -> bool:
    return name in c.storage.filesystem_names()


def _held(jobs: dict[str, list[str]], hosts) -> str:
    return "; ".join(f"{host}: {', '.join(jobs[host])}" for host in hosts)


@check
def backup_destination_is_a_shared_filesystem(c: Cluster):
    """The snapshots go to shared file systems the model describes."""
    for path, name, _hosts in _destinations(c):
        if not _known(c, name):
            yield error(
                path,
                f"{name!r} is not a shared file system of the model (an NFS export or a GPFS file system)"
                + did_you_mean(name, c.storage.filesystem_names()),
            )


@check
def backup_host_destinations_name_model_hosts(c: Cluster):
    """Each host of `backup.host_destinations` is a node of the model (a misspelt name would
    leave the host's snapshots on `destination`). One that runs no job (`state` leaves its state
    out) is let be."""
    if c.backup is None:
        return
    jobs = _hosts_with_jobs(c)
    for host in c.backup.host_destinations:
        if host not in c.all_hosts:
            yield error(
                (*BACKUP, "host_destinations", host),
                f"{host} is no node of the model (the hosts with backup "
                f"jobs: {', '.join(jobs) or 'none'})" + did_you_mean(host, list(jobs)),
            )


@check
def backed_up_hosts_mount_the_destination(c: Cluster):
    """Every host that runs a backup job mounts its destination's file system."""
    jobs = _hosts_with_jobs(c)
    for path, name, hosts in _destinations(c):
        if not _known(c, name) or not hosts:
            continue
        mounted = union(m.hosts for m in c.shared_mounts if m.name == name)
        missing = outside(union(hosts), mounted)
        if len(missing):
            how = (
                f"add {'it' if len(missing) == 1 else 'them'} to the clients of a storage.nfs.mounts entry of export "
                f"{name!r}"
                if c.storage.nfs.export(name) is not None
                else "make them members of the GPFS cluster"
            )
            yield error(
                path,
                f"{shown(missing)} back{'s' if len(missing) == 1 else ''} up state "
                f"({_held(jobs, missing)}) but {'does' if len(missing) == 1 else 'do'} not mount {name!r}: {how}",
            )


def _servers(c: Cluster, name: str) -> tuple:
    """The hosts that serve a shared file system, and how to say it."""
    export = c.storage.nfs.export(name)
    if export is not None:
        return nodeset(export.server), f"NFS export {name!r} is served by"
    fs = next(f for f in c.storage.gpfs.filesystems if f.name == name)
    return union([",".join(n.servers) for n in fs.nsds]), f"the NSDs of GPFS file system {name!r} are served by"


@check
def backup_not_served_from_a_backed_up_host(c: Cluster):
    """A backup on a disk of the host it backs up dies with that host's disk."""
    jobs = _hosts_with_jobs(c)
    for path, name, hosts in _destinations(c):
        if not _known(c, name) or not hosts:
            continue
        servers, what = _servers(c, name)
        both = overlap(servers, union(hosts))
        if len(both):
            yield warning(
                path,
                f"{what} {shown(both)}, which {'it backs' if len(both) == 1 else 'they back'} up "
                f"({_held(jobs, both)}): a dead disk there loses the backup with the data; send the snapshots "
                "to a file system served from elsewhere",
            )


@check
def slurmctld_state_and_its_backup_not_on_one_server(c: Cluster):
    """slurmctld's state directory on a shared file system (two controllers) and the snapshots of
    it on a file system served by the same host: that host's disks lost, both are."""
    job = next((j for j in c.backup_jobs if j.state == "slurmctld_state"), None)
    if job is None:
        return
    path = c.slurm.state_save_location
    holders = [m.name for m in c.shared_mounts if lies_under(path, m.mount_point) and _known(c, m.name)]
    if not holders:
        return
    state_servers, state_what = _servers(c, holders[0])
    for where, name, hosts in _destinations(c):
        if job.host not in hosts or not _known(c, name):
            continue
        servers, what = _servers(c, name)
        both = overlap(servers, state_servers)
        if len(both):
            yield warning(
                where,
                f"slurmctld's state {path} lies on {holders[0]!r}, and its snapshots (job "
                f"{job.name}, on {job.host}) go to {name!r}: both served by {shown(both)}; losing "
                f"{'its disks' if len(both) == 1 else 'their disks'} loses the queue and its backup at once: "
                "send the snapshots to a file system served from elsewhere",
            )


@check
def secret_backups_reach_no_other_host(c: Cluster):
    """A host's secret snapshots (the directory, slurmctld's state, the generated secrets) go to a
    file system no other host may mount: hal-backup needs root kept (no_root_squash), and then
    root on every client of the export reads every file on it, whatever its owner and mode. The
    export's client list (exports(5): its clients and networks) is what counts, not who mounts it
    today."""
    secret = {}
    for job in c.backup_jobs:
        if job.secret:
            secret.setdefault(job.host, []).append(job.name)
    for path, name, hosts in _destinations(c):
        if not _known(c, name):
            continue
        for host in (h for h in hosts if h in secret):
            export = c.storage.nfs.export(name)
            if export is not None:
                i = c.storage.nfs.exports.index(export)
                others = outside(nodeset(export.clients) if export.clients else nodeset(""), nodeset(host))
                where = f"storage.nfs.exports[{i}].clients"
                reach = [shown(others)] if len(others) else []
                if export.networks:
                    reach.append(
                        f"any host of network{'s' if len(export.networks) > 1 else ''} "
                        f"{', '.join(export.networks)} (storage.nfs.exports[{i}].networks)"
                    )
                    where = f"storage.nfs.exports[{i}].clients and .networks"
            else:
                others = outside(c.gpfs_nodes, nodeset(host))
                reach = [shown(others)] if len(others) else []
                where = "every member of the GPFS cluster mounts it"
            if reach:
                yield error(
                    path,
                    f"{host}'s secret snapshots ({', '.join(secret[host])}) would go to {name!r}, which "
                    f"{' and '.join(reach)} may mount too ({where}): root there reads them, whatever their "
                    f"owner and mode. Give {host} a file system only it mounts (an export whose clients are "
                    f"{host} alone) in backup.host_destinations",
                )


@check
def backup_states_exist(c: Cluster):
    """Each `backup.state` entry names state the cluster has, once."""
    if c.backup is None or c.backup.state is None:
        return
    for i, state in enumerate(c.backup.state):
        if state != "secrets" and state not in c.backup_sources:
            yield error(
                (*BACKUP, "state", i),
                f"{state!r}: the cluster has no {state} to back up: it needs "
                f"{NEEDS.get(state, state)}; remove the entry, or describe what it needs",
            )
    for again, first in duplicates(c.backup.state):
        yield error((*BACKUP, "state", again), f"{c.backup.state[again]!r} is listed twice (first at [{first}])")


@check
def backup_schedule_is_a_calendar(c: Cluster):
    """The schedule is an OnCalendar= expression systemd takes (the forms model/oncalendar.py
    accepts, checked without systemd)."""
    if c.backup is None:
        return
    problem = calendar_problem(c.backup.schedule)
    if problem is not None:
        yield error((*BACKUP, "schedule"), problem)


@check
def backup_export_keeps_root(c: Cluster):
    """hal-backup runs as root and keeps secret snapshots root-only: an NFS server that maps
    root to nobody (root_squash, exports(5)'s default, or all_squash) refuses or misowns them."""
    used = {name for _path, name, _hosts in _destinations(c)}
    for i, export in enumerate(c.storage.nfs.exports):
        if export.name in used and ("all_squash" in export.options or "no_root_squash" not in export.options):
            squash = "all_squash" if "all_squash" in export.options else "root_squash, exports(5)'s default"
            yield warning(
                ("storage", "nfs", "exports", i, "options"),
                f"export {export.name!r} holds the backups but maps root to nobody ({squash}): hal-backup "
                "runs as root and keeps secret snapshots readable by root only; export it with "
                "no_root_squash to the host it backs up only",
            )
