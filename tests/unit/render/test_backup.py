"""Backups: the model's section and its derived jobs, the checks (one row per mistake, as an
edit of the embedded HAL description, as in test_checks.py), the systemd calendar validator
(against systemd itself where `systemd-analyze` exists), and the rendered backup.json and
units (loaded by `systemd-analyze verify`)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from hal_provision.checks.backup import backup_not_served_from_a_backed_up_host
from hal_provision.findings import Level
from hal_provision.loader import load_text
from hal_provision.model.oncalendar import calendar_problem
from hal_provision.render import render_all
from hal_provision.render.backup import CONFIG, PROGRAM, SERVICE, TIMER

from tests.conftest import SystemdRoot, hal_with

E, W = Level.error, Level.warning
ROOT = Path(__file__).resolve().parents[3]
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
NO_SYSTEMD = "systemd-analyze is not installed on this machine (Debian: apt-get install systemd)"

SECTION = "  destination: {filesystem: backup}           # [assumed] under /backup/hal (the cluster's name)\n"
SCHEDULE = '  schedule: "*-*-* 02:30:00"  '
KEEP = "  keep: 7    "
BACKUP_EXPORT = "{name: backup, server: hal-data, path: /export/backup, clients: hal-mgmt1,"
BACKUP_MOUNT = "      - {export: backup, mount_point: /backup, clients: hal-mgmt1}"
MGMT2_MOUNT = "      - {export: backup-mgmt2, mount_point: /backup-mgmt2, clients: hal-mgmt2}       # [assumed]\n"
OWN = "    hal-mgmt2: {filesystem: backup-mgmt2}\n"
HOST_DESTINATIONS = (
    "  host_destinations:                          # [assumed] hal-mgmt2's on its own export: /backup-mgmt2/hal\n"
)
# HAL before each management node had an export of its own: one export, both nodes its clients.
SHARED = [
    (HOST_DESTINATIONS + OWN, ""),
    (BACKUP_EXPORT, BACKUP_EXPORT.replace("clients: hal-mgmt1,", 'clients: "hal-mgmt1,hal-mgmt2",')),
    (BACKUP_MOUNT, BACKUP_MOUNT.replace("clients: hal-mgmt1}", 'clients: "hal-mgmt1,hal-mgmt2"}')),
]
NFS_SERVER = "        threads: 32                           # [assumed]\n"


def state(*names: str):
    return (KEEP, KEEP + f"\n  state: [{', '.join(names)}]\n#")


ROWS = [
    (
        "destination-not-a-file-system",
        [(SECTION, "  destination: {filesystem: backups}\n")],
        E,
        "backup.destination.filesystem",
        "'backups' is not a shared file system of the model (an NFS export or a GPFS file system); did you mean 'backup'?",
    ),
    (
        "backed-up-host-does-not-mount",
        [(MGMT2_MOUNT, "")],
        E,
        "backup.host_destinations.hal-mgmt2.filesystem",
        "hal-mgmt2 backs up state (hal-mgmt2: secrets-hal-mgmt2) but does not mount 'backup-mgmt2': add it to the "
        "clients of a storage.nfs.mounts entry of export 'backup-mgmt2'",
    ),
    (
        "backed-up-hosts-outside-gpfs",
        [(SECTION, "  destination: {filesystem: halfs}\n"), (OWN, "    hal-mgmt2: {filesystem: halfs}\n")],
        E,
        "backup.destination.filesystem",
        "hal-mgmt1 backs up state (hal-mgmt1: accounting_db, directory, "
        "monitoring, slurmctld_state, secrets-hal-mgmt1) but does not mount 'halfs': make them members of the GPFS "
        "cluster",
    ),
    (
        "own-destination-not-a-file-system",
        [(OWN, "    hal-mgmt2: {filesystem: backup-mgmt3}\n")],
        E,
        "backup.host_destinations.hal-mgmt2.filesystem",
        "'backup-mgmt3' is not a shared file system of the model",
    ),
    (
        "own-destination-of-no-host",
        [(OWN, OWN + "    hal-mgmt3: {filesystem: backup-mgmt2}\n")],
        E,
        "backup.host_destinations.hal-mgmt3",
        "hal-mgmt3 is no node of the model (the hosts with backup jobs: hal-mgmt1, hal-mgmt2); did you mean",
    ),
    # Secret snapshots on an export another host may mount: its root reads them (no_root_squash).
    (
        "secrets-on-an-export-both-management-nodes-mount",
        SHARED,
        E,
        "backup.destination.filesystem",
        "hal-mgmt2's secret snapshots (secrets-hal-mgmt2) would go to 'backup', "
        "which hal-mgmt1 may mount too (storage.nfs.exports[1].clients): root there reads them",
    ),
    (
        "secrets-on-an-export-another-host-may-mount-unmounted",
        [(BACKUP_EXPORT, BACKUP_EXPORT.replace("clients: hal-mgmt1,", 'clients: "hal-mgmt1,hal-login",'))],
        E,
        "backup.destination.filesystem",
        "hal-mgmt1's secret snapshots (directory, slurmctld_state, "
        "secrets-hal-mgmt1) would go to 'backup', which hal-login may mount too (storage.nfs.exports[1].clients)",
    ),
    (
        "secrets-on-an-export-a-network-may-mount",
        [(BACKUP_EXPORT, BACKUP_EXPORT.replace("clients: hal-mgmt1,", "clients: hal-mgmt1, networks: [mgmt],"))],
        E,
        "backup.destination.filesystem",
        "which any host of network mgmt (storage.nfs.exports[1].networks) may mount "
        "too (storage.nfs.exports[1].clients and .networks)",
    ),
    (
        "secrets-on-gpfs",
        [
            (SECTION, "  destination: {filesystem: halfs}\n"),
            (OWN, ""),
            (HOST_DESTINATIONS, ""),
            ('hosts: "hal-login,hal-dtn"', 'hosts: "hal-login,hal-dtn,hal-mgmt[1-2]"'),
        ],
        E,
        "backup.destination.filesystem",
        "hal-mgmt1's secret snapshots (directory, slurmctld_state, secrets-hal-mgmt1) "
        "would go to 'halfs', which hal[01-16],hal-dev,hal-dtn,hal-login,hal-mgmt2 (20 hosts) may mount too (every "
        "member of the GPFS cluster mounts it)",
    ),
    (
        "destination-served-by-a-backed-up-host",
        [
            (NFS_SERVER, NFS_SERVER + "      - {host: hal-mgmt1, volumes: [/srv]}\n"),
            (
                "{name: backup, server: hal-data, path: /export/backup,",
                "{name: backup, server: hal-mgmt1, path: /srv/backup,",
            ),
        ],
        W,
        "backup.destination.filesystem",
        "NFS export 'backup' is served by hal-mgmt1, which it backs up "
        "(hal-mgmt1: accounting_db, directory, monitoring, slurmctld_state, secrets-hal-mgmt1): a dead disk there loses "
        "the backup with the data",
    ),
    (
        "state-the-cluster-lacks",
        [("  monitoring_db: hal-mgmt1\n", ""), state("accounting_db", "monitoring")],
        E,
        "backup.state[1]",
        "'monitoring': the cluster has no monitoring to back up: it needs a monitoring database "
        "(services.monitoring_db and a monitoring section)",
    ),
    (
        "state-twice",
        [state("secrets", "accounting_db", "secrets")],
        E,
        "backup.state[2]",
        "'secrets' is listed twice (first at [0])",
    ),
    (
        "state-unknown",
        [state("accounting_db", "homes")],
        E,
        "backup.state[1]",
        "Input should be 'accounting_db', 'directory', 'monitoring', 'slurmctld_state' or 'secrets'",
    ),
    (
        "schedule-hour-25",
        [(SCHEDULE, '  schedule: "*-*-* 25:00"  ')],
        E,
        "backup.schedule",
        "'*-*-* 25:00' is not a calendar expression: '25:00': hour 25 is outside 0..23; write a "
        "shorthand (minutely, hourly, daily",
    ),
    (
        "schedule-cron-syntax",
        [(SCHEDULE, '  schedule: "30 2 * * *"  ')],
        E,
        "backup.schedule",
        "'30 2 * * *' is not a calendar expression",
    ),
    ("keep-none", [(KEEP, "  keep: 0    ")], E, "backup.keep", "greater than or equal to 1"),
    (
        "subdirectory-leaves-the-file-system",
        [(SECTION, "  destination: {filesystem: backup, subdirectory: ../etc}\n")],
        E,
        "backup.destination.subdirectory",
        "'../etc' is not a relative directory",
    ),
    (
        "destination-squashes-root",
        [
            (
                BACKUP_EXPORT + "\n         options: [rw, sync, no_subtree_check, no_root_squash]}",
                BACKUP_EXPORT + "\n         options: [rw, sync, no_subtree_check, root_squash]}",
            )
        ],
        W,
        "storage.nfs.exports[1].options",
        "export 'backup' holds the backups but maps root to nobody (root_squash, "
        "exports(5)'s default): hal-backup runs as root",
    ),
]


@pytest.mark.parametrize(("mutation", "level", "path", "message"), [pytest.param(*r[1:], id=r[0]) for r in ROWS])
def test_backup_mistake_is_found(finds, mutation, level, path, message):
    finds(mutation, level, path, message)


ACCEPTED = [
    ("some-state-only", [state("accounting_db", "secrets")]),
    ("daily", [(SCHEDULE, "  schedule: daily  ")]),
    ("weekdays-at-night-utc", [(SCHEDULE, '  schedule: "Mon..Fri *-*-* 01:15 UTC"  ')]),
    ("every-six-hours", [(SCHEDULE, '  schedule: "*-*-* 00/6:00:00"  ')]),
    ("own-subdirectory", [(SECTION, "  destination: {filesystem: backup, subdirectory: nightly/hal}\n")]),
    # Jobs without secrets may share an export: only the secret ones need one of their host's own.
    (
        "a-shared-export-for-state-without-secrets",
        SHARED + [(KEEP, KEEP + "\n  state: [accounting_db, monitoring]\n#")],
    ),
    ("no-backup-section", [lambda text: text[: text.index("\nbackup:")] + "\n"]),
]


@pytest.mark.parametrize("mutation", [pytest.param(m, id=name) for name, m in ACCEPTED])
def test_valid_backup_variation_is_accepted(check_file, edited, mutation):
    _file, loaded = check_file(edited(*mutation))
    assert loaded.model is not None
    assert [f.format() for f in loaded.findings if f.level is not Level.info] == []


# ---- the model's jobs ---------------------------------------------------------------------


def test_hal_backs_up_every_state_from_the_host_that_holds_it():
    hal = hal_with()
    assert hal.backup.destination.subdirectory == "hal"  # the cluster's name, filled in once
    assert hal.backup.host_destinations["hal-mgmt2"].subdirectory == "hal"
    # Each management node its own export, mounted there alone.
    assert hal.backup_destinations == {
        "hal-mgmt1": ("/backup/hal", "/backup"),
        "hal-mgmt2": ("/backup-mgmt2/hal", "/backup-mgmt2"),
    }
    assert {h: (m.name, str(m.hosts)) for h, m in hal.backup_mounts.items()} == {
        "hal-mgmt1": ("backup", "hal-mgmt1"),
        "hal-mgmt2": ("backup-mgmt2", "hal-mgmt2"),
    }
    assert [(e.name, e.clients, e.networks) for e in hal.storage.nfs.exports if e.name.startswith("backup")] == [
        ("backup", "hal-mgmt1", []),
        ("backup-mgmt2", "hal-mgmt2", []),
    ]
    assert [(j.name, j.host) for j in hal.backup_jobs] == [
        ("accounting_db", "hal-mgmt1"),
        ("directory", "hal-mgmt1"),
        ("monitoring", "hal-mgmt1"),
        ("slurmctld_state", "hal-mgmt1"),
        ("secrets-hal-mgmt1", "hal-mgmt1"),
        ("secrets-hal-mgmt2", "hal-mgmt2"),
    ]
    assert hal.secret_holders == {
        "hal-mgmt1": ("slurmctld", "accounting_db", "monitoring_db", "ldap"),
        "hal-mgmt2": ("portal",),
    }


def test_one_secrets_host_gives_one_secrets_job():
    model = hal_with(("  portal: hal-mgmt2\n", "  portal: hal-mgmt1\n"))
    assert [j.name for j in model.backup_jobs if j.state == "secrets"] == ["secrets"]


def test_default_state_is_what_the_cluster_has():
    model = hal_with(("  monitoring_db: hal-mgmt1\n", ""), ("  ldap: hal-mgmt1\n", ""))
    assert model.backup_states == ["accounting_db", "slurmctld_state", "secrets"]


def test_gpfs_served_from_a_backed_up_host_is_reported():
    """The GPFS side of the served-from check (HAL's NSD servers are the arrays')."""
    model = hal_with(
        (SECTION, "  destination: {filesystem: halfs}\n"),
        ("servers: [ddn1-a, ddn1-b], failure_group: 1}", "servers: [ddn1-a, hal-mgmt1], failure_group: 1}"),
    )
    [found] = list(backup_not_served_from_a_backed_up_host(model))
    assert found.level is W and "the NSDs of GPFS file system 'halfs' are served by hal-mgmt1" in found.message


# ---- the calendar validator ---------------------------------------------------------------

GOOD = [
    "daily",
    "Weekly",
    "hourly",
    "minutely",
    "monthly",
    "quarterly",
    "semiannually",
    "semi-annually",
    "yearly",
    "annually",
    "daily UTC",
    "Mon",
    "monday",
    "Mon..Fri",
    "mon..FRI",
    "Mon,Wed..Fri",
    "Mon..Sun",
    "02:30",
    "2:30",
    "23:59:59",
    "*:0/15",
    "*-*-* *:00/15:00",
    "*-*-* 02:30:00",
    "*-*-*  02:30",
    "*-*-* 02,14:30",
    "*-*-* 2..4:00",
    "*-*-* 0..23/2:00",
    "*-*-01 00:00",
    "*-1-1",
    "*-01,07-01",
    "2024-01-01",
    "24-01-01",
    "99-01-01",
    "2199-12-31",
    "2020/2-*-*",
    "*-*-1..10/2",
    "Mon *-*-* 02:30:00",
    "Mon..Fri *-*-* 02:30 UTC",
    "*-*-* 02:30:00.5",
    "*-*-* 02:30:59.999999",
    "*-*-* 02:30:00.5..10",
    "*-02-30 00:00",
]
BAD = [
    "",
    " daily",
    "daily ",
    "biweekly",
    "now",
    "UTC",
    "Fri..Mon",
    "Mon..",
    "Mon Tue",
    "02:30 Mon",
    "* 02:30",
    "* *",
    "24:00",
    "02:30:60",
    "*-13-01",
    "*-0-1",
    "*-*-0",
    "*-*-32",
    "1969-01-01",
    "2200-01-01",
    "100-01-01",
    "*-*-* 4..2:00",
    "*-*-*/0",
    "*-*-* 2/0:00",
    "*-*/2-01",
    "*/2-*-*",
    "*-*-* :30",
    "*-*-* 02:",
    "*-*-* -1:00",
    "*-*-* 0x10:00",
    "*-*-* \u0661:00",
    "*-*-* 02:30:00.",
    "*-*-*T02:30",
    "30 2 * * *",
    "*-*-* 02:30:00 02:30",
]
# Valid for systemd, refused here (the module text says so and what to write instead).
SYSTEMD_ONLY = ["*-*~01", "@1700000000", "Mon-Fri", "*-*-* 02:30:00 Europe/Berlin"]


@pytest.mark.parametrize("expression", GOOD)
def test_calendar_accepts(expression):
    assert calendar_problem(expression) is None


@pytest.mark.parametrize("expression", BAD + SYSTEMD_ONLY)
def test_calendar_refuses_with_the_forms(expression):
    problem = calendar_problem(expression)
    assert problem is not None and problem.startswith(f"{expression!r} is not a calendar expression: ")
    assert problem.endswith("e.g. '*-*-* 02:30:00' or 'Mon..Fri 02:30'")


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason=NO_SYSTEMD)
def test_calendar_agrees_with_systemd():
    """Every expression accepted here systemd accepts; every one refused here but SYSTEMD_ONLY
    systemd refuses too."""

    def systemd_takes(expression: str) -> bool:
        return subprocess.run([SYSTEMD_ANALYZE, "calendar", expression], capture_output=True).returncode == 0

    assert [e for e in GOOD if not systemd_takes(e)] == []
    assert [e for e in BAD if systemd_takes(e)] == []
    assert [e for e in SYSTEMD_ONLY if not systemd_takes(e)] == []


# ---- the rendered files -------------------------------------------------------------------


def test_backup_json_takes_its_values_from_the_other_renderers(files):
    """The database, suffix and state directory are those slurmdbd.conf, the directory, the
    monitoring facts and slurm.conf name."""
    doc = json.loads(files[CONFIG])
    assert (doc["format"], doc["cluster"], doc["keep"]) == (2, "hal", 7)
    assert doc["destinations"] == {
        "hal-mgmt1": {"path": "/backup/hal", "mount_point": "/backup"},
        "hal-mgmt2": {"path": "/backup-mgmt2/hal", "mount_point": "/backup-mgmt2"},
    }
    assert set(doc) == {"format", "cluster", "destinations", "keep", "jobs"}
    jobs = {job["name"]: job for job in doc["jobs"]}
    assert [(j["name"], j["kind"], j["host"], j["secret"]) for j in doc["jobs"]] == [
        ("accounting_db", "mariadb", "hal-mgmt1", False),
        ("directory", "slapd", "hal-mgmt1", True),
        ("monitoring", "influxdb", "hal-mgmt1", False),
        ("slurmctld_state", "files", "hal-mgmt1", True),
        ("secrets-hal-mgmt1", "files", "hal-mgmt1", True),
        ("secrets-hal-mgmt2", "files", "hal-mgmt2", True),
    ]
    storage_loc = re.search(r"^StorageLoc=(\S+)$", files["files/etc/slurm/slurmdbd.conf"], re.M)[1]
    state_save = re.search(r"^StateSaveLocation=(\S+)$", files["files/etc/slurm/slurm.conf"], re.M)[1]
    assert jobs["accounting_db"]["databases"] == [storage_loc]
    assert jobs["directory"]["suffix"] == json.loads(files["files/etc/hal-provision/ldap-directory.json"])["base_dn"]
    assert jobs["monitoring"]["databases"] == [json.loads(files["files/etc/hal-provision/monitoring.json"])["database"]]
    assert jobs["slurmctld_state"]["paths"] == [state_save]
    hub = files["files/etc/jupyterhub/jupyterhub_config.py"]
    portal = json.loads(files["files/etc/hal-provision/portal.json"])["tls"]
    cookie = re.search(r'^c\.JupyterHub\.cookie_secret_file = "(\S+)"$', hub, re.M)[1]
    assert jobs["secrets-hal-mgmt2"]["paths"] == [portal["key"], portal["certificate"], cookie]


def _role_values(role: str) -> dict:
    values: dict = {}
    for sub in ("defaults", "vars"):
        for path in sorted((ROOT / "roles" / role / sub).glob("*.yml")):
            values.update(yaml.safe_load(path.read_text(encoding="utf-8")) or {})
    return values


def test_secret_files_are_where_the_roles_generate_them(files):
    """Each path of the secrets jobs is a file a role makes (its variable's default)."""
    munge, mariadb, influxdb, ldap = (_role_values(r) for r in ("munge", "mariadb", "influxdb", "ldap_server"))
    made = {
        munge["__munge_key_path"],
        mariadb["mariadb_slurm_password_file"],
        *(
            f"{influxdb['influxdb_secrets_dir']}/influxdb_{user}_pass"
            for user in influxdb["__influxdb_vault_passwords"]
        ),
        *(
            ldap[key]
            for key in (
                "ldap_server_admin_password_file",
                "ldap_server_ca_key_file",
                "ldap_server_ca_cert_file",
                "ldap_server_tls_key_file",
                "ldap_server_tls_cert_file",
            )
        ),
    }
    [job] = [j for j in json.loads(files[CONFIG])["jobs"] if j["name"] == "secrets-hal-mgmt1"]
    assert set(job["paths"]) == made and len(job["paths"]) == len(made)


def test_units_run_hal_backup_on_the_schedule(files):
    service, timer = files[SERVICE], files[TIMER]
    assert f"ExecStart={PROGRAM} run\n" in service and "RequiresMountsFor=/backup/hal /backup-mgmt2/hal\n" in service
    assert "Type=oneshot\n" in service and "IOSchedulingClass=idle\n" in service
    assert "ReadWritePaths=-/backup -/backup-mgmt2\n" in service  # each host's own; '-': not there, skipped
    assert "OnCalendar=*-*-* 02:30:00\n" in timer and "Persistent=true\n" in timer
    assert "RandomizedDelaySec=15min\n" in timer


def test_nothing_rendered_without_a_backup_section():
    for name in ("examples/campus.yml", "tests/data/clusters/x86-twogen.yml"):
        files = render_all(load_text((ROOT / name).read_text(encoding="utf-8"), name).model)
        assert not {CONFIG, SERVICE, TIMER} & set(files), name


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason=NO_SYSTEMD)
def test_systemd_verifies_the_units(files, tmp_path):
    """systemd-analyze verify loads both units as systemd would, in a root that holds the
    system's units and a stand-in hal-backup (verify checks that ExecStart is executable).
    The controls: a timer with a bad calendar, and a root without the program, are refused."""
    root = SystemdRoot(tmp_path, SYSTEMD_ANALYZE)
    root.unit("hal-backup.service", files[SERVICE])
    root.unit("hal-backup.timer", files[TIMER])
    missing = root.verify("hal-backup.service", "hal-backup.timer")
    assert missing.returncode != 0 and f"Command {PROGRAM} is not executable" in missing.stderr, missing.stderr
    root.program(PROGRAM)
    ok = root.verify("hal-backup.service", "hal-backup.timer")
    assert ok.returncode == 0 and not ok.stderr.strip(), ok.stderr
    root.unit("hal-backup.timer", files[TIMER].replace("OnCalendar=*-*-* 02:30:00", "OnCalendar=nightly"))
    bad = root.verify("hal-backup.service", "hal-backup.timer")
    assert "Failed to parse calendar specification" in bad.stderr, bad.stderr
