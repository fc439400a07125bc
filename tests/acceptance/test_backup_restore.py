"""playbooks/restore.yml (the backup role's tasks_from: restore) run by a real ansible-playbook on
this machine (connection local) against snapshots the real hal-backup wrote:

- files: a state directory and a secret file are damaged; the restore moves the directory aside
  and extracts the snapshot's files.tar (contents, modes and numeric owners back).
- slapd: HAL's rendered directory in a scratch cn=config and mdb database (ldap_harness); the
  database is emptied; the restore moves it aside and loads data.ldif with slapadd (cn=config
  stays: it is there), owned by openldap again.
- influxdb: a scratch InfluxDB 1.6 whose database is dropped after the backup; the restore
  drops it again if it is there, restores it with influxd restore -portable and the points
  answer again.

And around them: --check reports each job as changed and changes nothing; a second restore of
the same snapshot changes nothing (the per-job record); an unknown job name and a snapshot that
does not verify fail with one clear message, restoring nothing; so does a snapshot whose
payload and manifest were both rewritten (checksums that match, an HMAC that does not), and
one that carries more than the job's paths gives back those paths only; `latest` passes over a
snapshot dated in the future. playbooks/backup.yml (the role's main entry point) in --check on a
fresh host says what it would install (the key it would make too) and writes nothing; both
playbooks refuse a destination whose file system is not mounted.

What this machine lacks is not run: MariaDB (the mariadb kind's two commands), and systemd
(`systemctl is-active` finds no service running, so nothing is stopped or started here; the
sandbox drill exercises those). Every path is under the test's scratch directory: the role's
node paths (the program, the job list, the records, slapd's database) are given to it as
extra variables, and the destination's mount point is "/" (the unit's ReadWritePaths=).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from hal_provision.loader import load
from hal_provision.node import backup
from hal_provision.render import accounts, render_all
from hal_provision.render.backup import SERVICE, TIMER

from .influx_harness import INFLUXD, Influxd
from .ldap_harness import SLAPADD, make_config

pytestmark = pytest.mark.acceptance
REPO = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
needs = pytest.mark.skipif(
    INFLUXD is None or not ANSIBLE_PLAYBOOK.exists() or os.geteuid() != 0,
    reason="needs root, ansible-playbook beside this Python and InfluxDB 1.x's influxd",
)
POINTS = [("gpu", "hal01", 71.5), ("gpu", "hal02", 68.0), ("cpu", "hal01", 12.25)]


class Site:
    """A rendered tree for one host (hal-mgmt1) whose jobs read and write under `root`."""

    def __init__(self, root: Path, influxd: Influxd):
        self.root = root
        self.influxd = influxd
        cluster = load(None).model
        self.suffix = accounts.tree(cluster, cluster.accounts)["base"]
        self.conf, self.db = make_config(root / "ldap", self.suffix)
        ldif = root / "hal.ldif"
        ldif.write_text(accounts.render(cluster)[accounts.LDIF])
        subprocess.run(
            [SLAPADD, "-F", str(self.conf), "-b", self.suffix, "-l", str(ldif)], check=True, capture_output=True
        )
        self.state = root / "live" / "slurmctld"
        self.state.mkdir(parents=True)
        (self.state / "job_state").write_text("queue v1\n")
        os.chown(self.state / "job_state", 64030, 64030)
        self.secret = root / "live" / "munge.key"
        self.secret.write_text("key v1\n")
        self.secret.chmod(0o400)
        influxd.create("telegraf")
        now = int(time.time())
        influxd.write("telegraf", [f"{m},host={h} value={v} {now - 10 * k}" for k, (m, h, v) in enumerate(POINTS)])

        self.dest = root / "dest"
        self.dest.mkdir()
        self.program = root / "sbin" / "hal-backup"
        self.config = root / "etc" / "backup.json"
        self.key = root / "etc" / "backup-manifest.key"  # the host's: the role's __backup_key_path
        self.key.parent.mkdir()
        backup.make_key(self.key)
        self.records = root / "records"
        files = root / "rendered" / "files"
        (files / "etc/hal-provision").mkdir(parents=True)
        (files / "etc/systemd/system").mkdir(parents=True)
        self.jobs = [
            {
                "name": "directory",
                "kind": "slapd",
                "host": "hal-mgmt1",
                "suffix": self.suffix,
                "config_dir": str(self.conf),
                "secret": True,
            },
            {
                "name": "monitoring",
                "kind": "influxdb",
                "host": "hal-mgmt1",
                "databases": ["telegraf"],
                "address": influxd.rpc_address,
                "secret": False,
            },
            {
                "name": "slurmctld_state",
                "kind": "files",
                "host": "hal-mgmt1",
                "paths": [str(self.state)],
                "secret": True,
            },
            {"name": "secrets", "kind": "files", "host": "hal-mgmt1", "paths": [str(self.secret)], "secret": True},
            # Another host's job: hal-mgmt2 (in the inventory) has none, and is left alone.
            {"name": "elsewhere", "kind": "files", "host": "hal-mgmt3", "paths": ["/nonexistent"], "secret": True},
        ]
        self.files = files
        self.destinations = {host: {"path": str(self.dest), "mount_point": "/"} for host in ("hal-mgmt1", "hal-mgmt3")}
        (files / "etc/hal-provision/backup.json").write_text(
            json.dumps({"format": 2, "cluster": "hal", "destinations": self.destinations, "keep": 7, "jobs": self.jobs})
        )
        # HAL's rendered units, with this scratch program and "/" as the destination's mount point.
        hal = render_all(cluster)
        (files / "etc/systemd/system/hal-backup.service").write_text(
            hal[SERVICE]
            .replace(backup.CONFIG, str(self.config))
            .replace("/usr/local/sbin/hal-backup", str(self.program))
            .replace("ReadWritePaths=-/backup -/backup-mgmt2\n", "ReadWritePaths=-/\n")
        )
        (files / "etc/systemd/system/hal-backup.timer").write_text(hal[TIMER])
        monitoring = json.loads(hal["files/etc/hal-provision/monitoring.json"])
        # The scratch influxd speaks plain HTTP (HAL's HTTPS is the sandbox's: tests/infra/test_monitoring.py).
        (files / "etc/hal-provision/monitoring.json").write_text(
            json.dumps(dict(monitoring, port=influxd.port, tls=False))
        )
        (root / "password").write_text("unused: the scratch influxd has no authentication\n")

        inventory = root / "inventory.yml"
        inventory.write_text(
            yaml.safe_dump(
                {
                    "all": {
                        "vars": {
                            "hal_rendered_dir": str(files),
                            "ansible_connection": "local",
                            "ansible_python_interpreter": sys.executable,
                        },
                        "hosts": {"hal-mgmt1": None, "hal-mgmt2": None},
                        "children": {
                            "service_slurmctld": {"hosts": {"hal-mgmt1": None}},
                            "service_slurmdbd": {"hosts": {"hal-mgmt1": None}},
                        },
                    }
                }
            )
        )
        self.units = root / "systemd"
        self.extra = {
            "__backup_config_path": str(self.config),
            "__backup_key_path": str(self.key),
            "backup_restore_state_dir": str(self.records),
            "__backup_unit_dir": str(self.units),
            "__backup_unit_checker": str(root / "sbin" / "unit-verify"),
            "__backup_slapd_db_dir": str(self.db),
            "backup_influxdb_admin_password_file": str(root / "password"),
        }

    def backup(self) -> None:
        """A snapshot of each of hal-mgmt1's jobs, by the real hal-backup, each a second apart:
        every job's newest snapshot has its own stamp, as when jobs take a while."""
        config = self.root / "run.json"
        config.write_text(
            json.dumps(
                {"format": 2, "cluster": "hal", "destinations": self.destinations, "keep": 7, "jobs": self.jobs[:-1]}
            )
        )
        for job in self.jobs[:-1]:
            assert (
                backup.main(
                    [
                        "run",
                        "--config",
                        str(config),
                        "--host",
                        "hal-mgmt1",
                        "--job",
                        job["name"],
                        "--key",
                        str(self.key),
                    ]
                )
                == 0
            )
            time.sleep(1.1)  # the next snapshot gets the next second's stamp

    def restore(self, *args: str) -> subprocess.CompletedProcess:
        return self.playbook("restore.yml", *args)

    def playbook(self, name: str, *args: str) -> subprocess.CompletedProcess:
        env = {
            **os.environ,
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_STDOUT_CALLBACK": "default",
        }
        return subprocess.run(
            [
                str(ANSIBLE_PLAYBOOK),
                "-i",
                str(self.root / "inventory.yml"),
                "-e",
                json.dumps(self.extra),
                *args,
                str(REPO / "playbooks" / name),
            ],
            capture_output=True,
            text=True,
            cwd=REPO,
            env=env,
            timeout=300,
        )

    def damage(self) -> None:
        (self.state / "job_state").write_text("queue v2\n")
        (self.state / "newer").write_text("made after the backup\n")
        self.secret.chmod(0o600)
        self.secret.write_text("key v2\n")
        shutil.rmtree(self.db)
        self.db.mkdir()
        self.influxd.query("telegraf", 'DROP DATABASE "telegraf"')

    def entries(self) -> list[str]:
        """The directory's DNs; none where slapcat finds no database (an emptied directory)."""
        done = subprocess.run(["slapcat", "-F", str(self.conf), "-b", self.suffix], capture_output=True, text=True)
        return [line for line in done.stdout.splitlines() if line.startswith("dn: ")] if done.returncode == 0 else []

    def points(self) -> set:
        got: set = set()
        deadline = time.monotonic() + 20  # a restored shard opens a moment later
        while len(got) < len(POINTS) and time.monotonic() < deadline:
            try:
                for measurement in ("gpu", "cpu"):
                    for s in self.influxd.query("telegraf", f'SELECT "value", "host" FROM "{measurement}"'):
                        got.update((measurement, host, value) for _t, value, host in s["values"])
            except (AssertionError, OSError):
                pass
            time.sleep(0.2)
        return got


def recap(result: subprocess.CompletedProcess, host: str = "hal-mgmt1") -> dict[str, int]:
    line = re.search(rf"^{host}\s*:\s*(.*)$", result.stdout, re.M)
    assert line, result.stdout[-3000:] + result.stderr[-2000:]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line[1])}


@pytest.fixture
def site(tmp_path):
    (tmp_path / "influx").mkdir()
    influxd = Influxd(tmp_path / "influx")
    try:
        yield Site(tmp_path, influxd)
    finally:
        influxd.close()


@needs
def test_restore_brings_back_each_kind_once_and_check_mode_changes_nothing(site):
    entries = site.entries()
    assert len(entries) > 3
    site.backup()
    site.damage()
    assert site.entries() == [] and not (site.points())

    checked = site.restore("-e", "snapshot=latest", "--check")
    assert checked.returncode == 0, checked.stdout[-4000:]
    assert recap(checked)["changed"] >= 4 and recap(checked, "hal-mgmt2")["changed"] == 0
    for job in ("directory", "monitoring", "slurmctld_state", "secrets"):
        assert f"would restore {job} from {site.dest}/{job}/" in checked.stdout
    assert (site.state / "job_state").read_text() == "queue v2\n" and site.entries() == []
    assert not site.records.exists() or not any(site.records.iterdir())

    done = site.restore("-e", "snapshot=latest")
    assert done.returncode == 0, done.stdout[-4000:]
    assert site.entries() == entries
    assert {p.owner() for p in [site.db, *site.db.iterdir()]} == {"openldap"}
    assert site.points() == {(m, h, v) for m, h, v in POINTS}
    assert (site.state / "job_state").read_text() == "queue v1\n" and not (site.state / "newer").exists()
    assert (site.state / "job_state").stat().st_uid == 64030
    aside = [p for p in site.state.parent.iterdir() if p.name.startswith("slurmctld.before-restore-")]
    assert len(aside) == 1 and (aside[0] / "newer").exists()
    assert site.secret.read_text() == "key v1\n" and site.secret.stat().st_mode & 0o777 == 0o400
    records = {p.name: p.read_text() for p in site.records.iterdir()}
    assert set(records) == {f"restored-{job}" for job in ("directory", "monitoring", "slurmctld_state", "secrets")}
    assert all(re.fullmatch(r"[0-9a-f]{64}  \S+/\d{8}T\d{6}Z\n", text) for text in records.values())
    # The secrets ran first.
    order = [m[1] for m in re.finditer(r"TASK \[backup : Record what it holds now: ([^/\s]+)/", done.stdout)]
    assert order[0] == "secrets", order

    again = site.restore("-e", "snapshot=latest")
    assert again.returncode == 0 and recap(again)["changed"] == 0, again.stdout[-4000:]
    checked_again = site.restore("-e", "snapshot=latest", "--check")
    assert checked_again.returncode == 0 and recap(checked_again)["changed"] == 0, checked_again.stdout[-4000:]


@needs
def test_restore_refuses_an_unknown_job_and_a_snapshot_that_does_not_verify(site):
    site.backup()
    unknown = site.restore("-e", "snapshot=latest", "-e", "jobs=secrets,acounting_db")
    assert unknown.returncode != 0
    assert (
        "jobs=acounting_db: no such job in " in unknown.stdout
        and "(its jobs: directory, monitoring, slurmctld_state, secrets, elsewhere)" in unknown.stdout
    ), unknown.stdout
    bad_name = site.restore("-e", "snapshot=yesterday")
    assert bad_name.returncode != 0 and "snapshot=yesterday is neither a snapshot stamp" in bad_name.stdout

    [snapshot] = [p for p in (site.dest / "secrets").iterdir() if backup.STAMP_RE.fullmatch(p.name)]
    tar = snapshot / "files.tar"
    tar.chmod(0o600)
    tar.write_bytes(tar.read_bytes()[:-512] + b"\0" * 511 + b"x")
    site.secret.write_text("key v2\n")
    refused = site.restore("-e", f"snapshot={snapshot.name}", "-e", "jobs=secrets")
    assert refused.returncode != 0
    assert (
        f"secrets/{snapshot.name} does not verify, nothing restored: FAIL secrets/{snapshot.name}: "
        "files.tar: SHA-256 differs from the manifest"
    ) in refused.stdout, refused.stdout[-3000:]
    assert site.secret.read_text() == "key v2\n" and not (site.records / "restored-secrets").exists()
    missing = site.restore("-e", "snapshot=20000101T000000Z", "-e", "jobs=directory")
    assert missing.returncode != 0
    assert (
        f"directory: no complete snapshot 20000101T000000Z under {site.dest}/directory (complete ones there: "
        f"{next((site.dest / 'directory').glob('2*')).name}); nothing restored."
    ) in missing.stdout, missing.stdout[-3000:]


def rewrite(snapshot: Path, payload: dict[str, bytes]) -> None:
    """What whoever can write the destination (root on another client, or on the file server)
    can do without the host's key: new files, and a manifest whose checksums are theirs."""
    manifest = json.loads((snapshot / "MANIFEST.json").read_text())
    for name, data in payload.items():
        (snapshot / name).write_bytes(data)
    manifest["files"] = [
        {"name": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()} for name, data in payload.items()
    ]
    (snapshot / "MANIFEST.json").write_text(json.dumps(manifest, indent=1))


def tar_of(*members: tuple[str, bytes]) -> bytes:
    """A tar archive of `members` (name relative to /, content), as GNU tar writes one."""
    import io
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o600
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@needs
def test_restore_refuses_a_payload_rewritten_with_its_manifest(site):
    """The secrets' files.tar replaced by one that also writes outside the job's paths, its
    manifest's checksums made to match: hal-backup's checksums alone pass it, the host's key
    does not; restore.yml refuses it and restores nothing (nor writes its record)."""
    site.backup()
    [snapshot] = [p for p in (site.dest / "secrets").iterdir() if backup.STAMP_RE.fullmatch(p.name)]
    elsewhere = site.root / "planted"
    rewrite(
        snapshot,
        {"files.tar": tar_of((str(site.secret).lstrip("/"), b"key v3\n"), (str(elsewhere).lstrip("/"), b"planted\n"))},
    )
    assert backup.main(["verify", "--dest", str(site.dest), f"secrets/{snapshot.name}"]) == 0  # checksums only
    site.secret.write_text("key v2\n")
    refused = site.restore("-e", f"snapshot={snapshot.name}", "-e", "jobs=secrets")
    assert refused.returncode != 0
    assert (
        f"secrets/{snapshot.name} does not verify, nothing restored: FAIL secrets/{snapshot.name}: MANIFEST.json "
        "does not match its HMAC: changed after the snapshot was written"
    ) in refused.stdout, refused.stdout[-3000:]
    assert site.secret.read_text() == "key v2\n" and not elsewhere.exists()
    assert not (site.records / "restored-secrets").exists()


@needs
def test_restore_extracts_the_job_s_paths_only_and_latest_is_never_in_the_future(site):
    """A genuine snapshot whose archive holds a path beyond the job's (sealed with the host's
    key, as a job whose paths were narrowed since would leave): the restore gives back the job's
    paths, not the other. A genuine snapshot dated a century ahead is not `latest`."""
    site.backup()
    [snapshot] = [p for p in (site.dest / "secrets").iterdir() if backup.STAMP_RE.fullmatch(p.name)]
    elsewhere = site.root / "beyond"
    data = tar_of((str(site.secret).lstrip("/"), b"key v1\n"), (str(elsewhere).lstrip("/"), b"beyond\n"))
    rewrite(snapshot, {"files.tar": data})
    manifest = json.loads((snapshot / "MANIFEST.json").read_text())
    (snapshot / "MANIFEST.json").write_text(json.dumps(backup.seal(manifest, backup.load_key(site.key))))
    ahead = site.dest / "secrets" / "21000101T000000Z"
    shutil.copytree(snapshot, ahead)
    manifest = json.loads((ahead / "MANIFEST.json").read_text())
    (ahead / "MANIFEST.json").write_text(
        json.dumps(backup.seal(dict(manifest, created="2100-01-01T00:00:00Z"), backup.load_key(site.key)))
    )
    site.secret.write_text("key v2\n")
    done = site.restore("-e", "snapshot=latest", "-e", "jobs=secrets")
    assert done.returncode == 0, done.stdout[-4000:]
    assert f"secrets/{snapshot.name}" in (site.records / "restored-secrets").read_text()
    assert site.secret.read_text() == "key v1\n" and not elsewhere.exists()


@needs
def test_backup_check_on_a_fresh_host_says_what_it_would_install_and_changes_nothing(site):
    """The main entry point in --check (systemd does not run here, so only --check can run):
    hal-mgmt1 would get the program, the job list, the units and the timer (the destination is there);
    hal-mgmt2, without a job, is not touched; nothing is written (nor the key it would make)."""
    site.key.unlink()
    checked = site.playbook("backup.yml", "--check", "--diff")
    assert checked.returncode == 0, checked.stdout[-4000:]
    assert "would enable and start hal-backup.timer (its unit is not installed yet)" in checked.stdout
    assert recap(checked)["changed"] >= 5 and recap(checked, "hal-mgmt2")["changed"] == 0
    for task in (
        "Install hal-backup",
        "Install the job list",
        "Make the manifests' key on the host, once",
        "Install the service and the timer",
    ):
        assert re.search(
            rf"TASK \[backup : {task}\][^\n]*\n(?:(?!TASK).*\n)*?changed: \[hal-mgmt1\]", checked.stdout
        ), task
    assert not site.program.exists() and not site.config.exists() and not site.units.exists()
    assert not site.key.exists()


@needs
def test_backup_refuses_a_destination_whose_file_system_is_not_mounted(site):
    unmounted = site.root / "backup"
    unmounted.mkdir()
    service = site.files / "etc/systemd/system/hal-backup.service"
    service.write_text(service.read_text().replace("ReadWritePaths=-/\n", f"ReadWritePaths=-{unmounted}\n"))
    doc = json.loads((site.files / "etc/hal-provision/backup.json").read_text())
    doc["destinations"]["hal-mgmt1"] = {"path": f"{unmounted}/hal", "mount_point": str(unmounted)}
    (site.files / "etc/hal-provision/backup.json").write_text(json.dumps(doc))
    for playbook, args in (("backup.yml", ["--check"]), ("restore.yml", ["-e", "snapshot=latest"])):
        refused = site.playbook(playbook, *args)
        assert refused.returncode != 0, refused.stdout[-3000:]
        assert (
            f"{unmounted} is not a mount point on hal-mgmt1: the backup destination {unmounted}/hal lies on the "
            "shared file system mounted there"
        ) in refused.stdout, refused.stdout[-3000:]
    assert not (unmounted / "hal").exists()
