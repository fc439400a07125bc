"""Backups: what each host backs up, where to, and the systemd units that run it on schedule.

- ``files/etc/hal-provision/backup.json``: the jobs (the model's `backup_jobs`), each with what
  `hal-backup run` reads: the accounting database slurmdbd.conf names (StorageLoc), the
  directory's suffix, the InfluxDB database Telegraf writes into, slurmctld's
  StateSaveLocation, and the secret files the roles generate on each host; and each host's
  destination (model.backup_destinations: the directory and the mount point it lies on). The
  same file on every host; each host runs the jobs whose "host" is its own name. No secret is in
  it, nor the manifests' key (made on each host).
- ``files/etc/systemd/system/hal-backup.service`` and ``hal-backup.timer``: `hal-backup run`
  at `backup.schedule`, idle priority, after the destination is mounted (the same unit on every
  host: it names every host's destination, and each host mounts its own).

Its layout is the contract with hal-backup (hal_provision/node/backup.py), which refuses keys
it does not know: so, unlike the other JSON files, no "_comment" header key.
Nothing is rendered without a backup section.
"""

from __future__ import annotations

import json

from ..model import BackupJob, Cluster
from ..model.accounts import base_dn
from .common import header
from .portal import CA_SIGNED_CERT, CA_SIGNED_KEY, COOKIE_SECRET

CONFIG = "files/etc/hal-provision/backup.json"
SERVICE = "files/etc/systemd/system/hal-backup.service"
TIMER = "files/etc/systemd/system/hal-backup.timer"
FORMAT = 2
PROGRAM = "/usr/local/sbin/hal-backup"

# The secret files each service's role generates on its host (the role variable named with
# each; tests/unit/render/test_backup.py compares them with the roles).
SECRETS_DIR = "/etc/hal-provision/secrets"
SECRET_FILES = {
    "slurmctld": ["/etc/munge/munge.key"],  # munge: __munge_key_path, made on munge_key_host
    "accounting_db": [f"{SECRETS_DIR}/slurm_dbd_storage_pass"],  # mariadb: mariadb_slurm_password_file
    # influxdb: influxdb_secrets_dir/influxdb_<user>_pass, one per user of __influxdb_vault_passwords
    "monitoring_db": [f"{SECRETS_DIR}/influxdb_{user}_pass" for user in ("admin", "telegraf", "grafana")],
    "ldap": [
        f"{SECRETS_DIR}/ldap_admin_pass",  # ldap_server_admin_password_file
        "/etc/hal-provision/ca/cluster-ca.key",  # ldap_server_ca_key_file
        "/etc/hal-provision/ca/cluster-ca.crt",  # ldap_server_ca_cert_file
        "/etc/ldap/tls/ldap-server.key",  # ldap_server_tls_key_file
        "/etc/ldap/tls/ldap-server.crt",  # ldap_server_tls_cert_file
    ],
}


def render(cluster: Cluster) -> dict[str, str]:
    destinations = cluster.backup_destinations
    if not destinations:
        return {}
    return {
        CONFIG: config_json(cluster, destinations),
        SERVICE: service_unit(cluster, destinations),
        TIMER: timer_unit(cluster),
    }


def secret_files(cluster: Cluster, services: tuple[str, ...]) -> list[str]:
    """The secret files of `services` (secret_holders' names) on their host, in that order."""
    paths: list[str] = []
    for service in services:
        if service == "portal":
            p = cluster.portal
            paths += [CA_SIGNED_KEY, CA_SIGNED_CERT] if p.tls.certificate is None else []
            paths += [COOKIE_SECRET] if p.front_end == "jupyterhub" else []
        else:
            paths += SECRET_FILES[service]
    return list(dict.fromkeys(paths))


def job_entry(cluster: Cluster, job: BackupJob) -> dict:
    entry: dict = {"name": job.name, "host": job.host, "secret": job.secret}
    if job.state == "accounting_db":
        entry.update(kind="mariadb", databases=[cluster.slurm.accounting_database])
    elif job.state == "directory":
        entry.update(kind="slapd", suffix=base_dn(cluster.accounts, cluster.cluster.domain))
    elif job.state == "monitoring":
        entry.update(kind="influxdb", databases=[cluster.monitoring.influxdb.database])
    elif job.state == "slurmctld_state":
        entry.update(kind="files", paths=[cluster.slurm.state_save_location])
    else:
        entry.update(kind="files", paths=secret_files(cluster, job.sources))
    return entry


def config_json(cluster: Cluster, destinations: dict[str, tuple[str, str]]) -> str:
    body = {
        "format": FORMAT,
        "cluster": cluster.cluster.name,
        "destinations": {
            host: {"path": path, "mount_point": mount_point} for host, (path, mount_point) in destinations.items()
        },
        "keep": cluster.backup.keep,
        "jobs": [job_entry(cluster, job) for job in cluster.backup_jobs],
    }
    return json.dumps(body, indent=2, sort_keys=True) + "\n"


def service_unit(cluster: Cluster, destinations: dict[str, tuple[str, str]]) -> str:
    paths = list(dict.fromkeys(path for path, _mount_point in destinations.values()))
    mount_points = list(dict.fromkeys(mount_point for _path, mount_point in destinations.values()))
    return (
        header(cluster)
        + f"""\
# One run of this host's backup jobs (backup.json); started by hal-backup.timer. The same unit on
# every host: it names each host's destination; a host mounts only its own, and a path that is
# no mount there adds no dependency (RequiresMountsFor=) and is skipped ('-', ReadWritePaths=).
[Unit]
Description=hal-provision backup of this host's state (to {" or ".join(paths)})
Documentation=file:/etc/hal-provision/backup.json
RequiresMountsFor={" ".join(paths)}
Wants=network-online.target
After=network-online.target mariadb.service slapd.service influxdb.service

[Service]
Type=oneshot
ExecStart={PROGRAM} run
# Out of the way of the daemons it reads: the lowest CPU and I/O priority.
Nice=19
CPUSchedulingPolicy=batch
IOSchedulingClass=idle
# Root, to read the databases (their local sockets and directories) and the secrets, and to
# write root-owned snapshots (hal-backup makes the secret ones root-only); the rest of the
# system it may read, not change (the manifests' key in /etc too).
CapabilityBoundingSet=CAP_DAC_OVERRIDE CAP_DAC_READ_SEARCH CAP_CHOWN CAP_FOWNER
NoNewPrivileges=true
ProtectSystem=full
ProtectHome=read-only
ReadWritePaths={" ".join("-" + m for m in mount_points)}
PrivateTmp=true
PrivateDevices=true
ProtectKernelTunables=true
ProtectKernelModules=true
ProtectKernelLogs=true
ProtectControlGroups=true
ProtectClock=true
ProtectHostname=true
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6
RestrictNamespaces=true
RestrictRealtime=true
RestrictSUIDSGID=true
LockPersonality=true
SystemCallArchitectures=native
"""
    )


def timer_unit(cluster: Cluster) -> str:
    return (
        header(cluster)
        + f"""\
[Unit]
Description=hal-provision backups of this host's state ({cluster.backup.schedule})

[Timer]
OnCalendar={cluster.backup.schedule}
# A run missed while the host was off starts at boot; hosts do not all start at once.
Persistent=true
RandomizedDelaySec=15min

[Install]
WantedBy=timers.target
"""
    )
