"""Checks: backups (where the snapshots go, from which hosts, when, of what)."""

from __future__ import annotations

from ..findings import error, warning
from ..hostlist import nodeset, outside, overlap, union
from ..model import Cluster
from ..model.oncalendar import calendar_problem
from . import check
from .common import did_you_mean, duplicates, shown

BACKUP = ("backup",)
FILESYSTEM = (*BACKUP, "destination", "filesystem")

# Why the cluster has no such state: what a `backup.state` entry needs.
NEEDS = {
    "directory": "an LDAP directory (services.ldap and an accounts section)",
    "monitoring": "a monitoring database (services.monitoring_db and a monitoring section)",
}


def _destination_known(c: Cluster) -> bool:
    return c.backup is not None and c.backup.destination.filesystem in c.storage.filesystem_names()


def _hosts_with_jobs(c: Cluster) -> dict[str, list[str]]:
    """Each host that runs backup jobs -> the names of its jobs."""
    out: dict[str, list[str]] = {}
    for job in c.backup_jobs:
        out.setdefault(job.host, []).append(job.name)
    return out


@check
def backup_destination_is_a_shared_filesystem(c: Cluster):
    """The snapshots go to a shared file system the model describes."""
    if c.backup is None or _destination_known(c):
        return
    name = c.backup.destination.filesystem
    yield error(FILESYSTEM, f"{name!r} is not a shared file system of the model (an NFS export or a GPFS file system)"
                + did_you_mean(name, c.storage.filesystem_names()))


@check
def backed_up_hosts_mount_the_destination(c: Cluster):
    """Every host that runs a backup job mounts the destination, at one mount point (the
    snapshots' directory in backup.json is the same on every host)."""
    if not _destination_known(c):
        return
    name = c.backup.destination.filesystem
    mounts = [m for m in c.shared_mounts if m.name == name]
    jobs = _hosts_with_jobs(c)
    hosts = union(jobs)
    missing = outside(hosts, union(m.hosts for m in mounts))
    if len(missing):
        held = "; ".join(f"{host}: {', '.join(jobs[host])}" for host in missing)
        how = (f"add {'it' if len(missing) == 1 else 'them'} to the clients of a storage.nfs.mounts entry of export "
               f"{name!r}" if c.storage.nfs.export(name) is not None else "make them members of the GPFS cluster")
        yield error(FILESYSTEM, f"{shown(missing)} back{'s' if len(missing) == 1 else ''} up state ({held}) but "
                    f"{'does' if len(missing) == 1 else 'do'} not mount {name!r}: {how}")
    first = c.backup_mount
    if first is None:
        return
    for mount in mounts:
        elsewhere = overlap(mount.hosts, hosts)
        if mount.mount_point != first.mount_point and len(elsewhere):
            yield error(FILESYSTEM, f"{name!r} is mounted at {first.mount_point} on {c.backup_jobs[0].host} but at "
                        f"{mount.mount_point} on {shown(elsewhere)}: the hosts it backs up share one snapshot "
                        "directory, so mount it at the same place on all of them")


@check
def backup_not_served_from_a_backed_up_host(c: Cluster):
    """A backup on a disk of the host it backs up dies with that host's disk."""
    if not _destination_known(c):
        return
    name = c.backup.destination.filesystem
    jobs = _hosts_with_jobs(c)
    export = c.storage.nfs.export(name)
    if export is not None:
        servers, what = nodeset(export.server), f"NFS export {name!r} is served by"
    else:
        fs = next(f for f in c.storage.gpfs.filesystems if f.name == name)
        servers, what = union([",".join(n.servers) for n in fs.nsds]), f"the NSDs of GPFS file system {name!r} are served by"
    both = overlap(servers, union(jobs))
    if len(both):
        held = "; ".join(f"{host}: {', '.join(jobs[host])}" for host in both)
        yield warning(FILESYSTEM, f"{what} {shown(both)}, which {'it backs' if len(both) == 1 else 'they back'} up "
                      f"({held}): a dead disk there loses the backup with the data; send the snapshots to a file "
                      "system served from elsewhere")


@check
def backup_states_exist(c: Cluster):
    """Each `backup.state` entry names state the cluster has, once."""
    if c.backup is None or c.backup.state is None:
        return
    for i, state in enumerate(c.backup.state):
        if state != "secrets" and state not in c.backup_sources:
            yield error((*BACKUP, "state", i), f"{state!r}: the cluster has no {state} to back up: it needs "
                        f"{NEEDS.get(state, state)}; remove the entry, or describe what it needs")
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
    if c.backup is None:
        return
    name = c.backup.destination.filesystem
    for i, export in enumerate(c.storage.nfs.exports):
        if export.name == name and ("all_squash" in export.options or "no_root_squash" not in export.options):
            squash = "all_squash" if "all_squash" in export.options else "root_squash, exports(5)'s default"
            yield warning(("storage", "nfs", "exports", i, "options"),
                          f"export {name!r} holds the backups but maps root to nobody ({squash}): hal-backup runs "
                          "as root and keeps secret snapshots readable by root only; export it with no_root_squash "
                          "to the hosts it backs up only")
