"""Backups of the cluster's lasting state: where the snapshots go, when and how many are kept,
and which state is backed up.

A cluster's lasting state is a few things on its management hosts: the accounting database,
the LDAP directory, the monitoring database, slurmctld's state directory and the secrets the
roles generate on the nodes (munge key, database and directory passwords, the cluster CA).
Each is backed up by the host that holds it, as a dated, checksummed and authenticated snapshot
on a shared file system of the model that the host mounts (a systemd timer runs `hal-backup
run` there): `destination`, or the host's own in `host_destinations`. A host whose jobs hold
secrets needs one only it mounts (a check refuses another), since root on any client of an
export without root squashing reads everything on it. Which host holds what is a derived view
of the Cluster (`backup_jobs`, `backup_destinations`); what each job reads is the renderer's
(render/backup.py).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from .base import Name, Strict
from .oncalendar import FORMS

# Every kind of state, in the order the jobs run.
STATES = ("accounting_db", "directory", "monitoring", "slurmctld_state", "secrets")
State = Literal["accounting_db", "directory", "monitoring", "slurmctld_state", "secrets"]
# State that holds secrets: the directory holds password hashes (userPassword, the rootdn's in
# cn=config); slurmctld's state the batch scripts and environments of queued jobs; secrets the
# generated keys and passwords. Their snapshots are root's alone, on a file system only their
# host mounts.
SECRET_STATES = ("directory", "slurmctld_state", "secrets")

DEFAULT_SCHEDULE = "*-*-* 02:30:00"

_SEGMENT = re.compile(r"[A-Za-z0-9_.-]+", re.ASCII)


def _check_subdirectory(value: str) -> str:
    segments = value.split("/")
    if not all(_SEGMENT.fullmatch(s) and s not in (".", "..") for s in segments):
        raise ValueError(
            f"{value!r} is not a relative directory: write names of letters, digits, '_', '.' and '-' "
            "joined by '/', without '.' or '..' and without a leading or trailing '/' (e.g. hal)"
        )
    return value


Subdirectory = Annotated[str, AfterValidator(_check_subdirectory)]


class BackupDestination(Strict):
    filesystem: Name = Field(
        description="The shared file system the snapshots go to: an NFS export (storage.nfs.exports[].name) or a "
        "GPFS file system (storage.gpfs.filesystems[].name), mounted on every host whose state is backed up, at "
        "the same mount point. Best served from a host it does not back up (a check warns otherwise)."
    )
    subdirectory: Subdirectory | None = Field(
        None,
        description="Directory under the file system's mount point that holds the snapshots (relative); "
        "None: the cluster's name.",
    )


class Backup(Strict):
    destination: BackupDestination = Field(
        description="Where the snapshots go: of every host with backup jobs but those host_destinations names."
    )
    host_destinations: dict[Name, BackupDestination] = Field(
        default_factory=dict,
        description="Per host with backup jobs, where its snapshots go instead of destination: a host whose jobs "
        "hold secrets (the directory, slurmctld's state, the generated secrets) needs a file system no other host "
        "mounts, so that no other host's root can read them (a check refuses one that others mount).",
    )
    schedule: str = Field(
        DEFAULT_SCHEDULE,
        description="When the backups run: the OnCalendar= expression of the hal-backup timer on each host that "
        f"holds state (systemd.time(7); the timer adds up to 15 minutes of random delay). Accepted: {FORMS}.",
    )
    keep: int = Field(7, ge=1, description="Complete snapshots kept per job; older ones are removed after each run.")
    state: list[State] | None = Field(
        None,
        min_length=1,
        description="What is backed up: accounting_db (the Slurm accounting database, mariadb-dump), directory "
        "(the LDAP directory, slapcat), monitoring (the InfluxDB database, influxd backup), slurmctld_state "
        "(slurmctld's StateSaveLocation: the queue and running jobs), secrets (the files the roles generate on "
        "each host: munge key, database and directory passwords, the cluster CA and TLS keys). None: every one "
        "of these the cluster has.",
    )
