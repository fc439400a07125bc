"""hal-backup against the real daemons whose state it dumps (the node program:
hal_provision/node/backup.py; the files kind and the rest are in tests/unit/node/test_backup_program.py).

- slapd: HAL's rendered directory loaded with a real slapadd into a scratch cn=config and mdb
  database (the schemas the ldap_server role gives slapd); the slapd kind's slapcat, pointed at
  that configuration by the job's config_dir, writes config.ldif and data.ldif; data.ldif holds
  every entry, and loads again into a second, empty database.
- influxdb: a scratch InfluxDB 1.6 with points written; the influxdb kind's
  `influxd backup -portable` through the job's address (the scratch server's backup port); the
  snapshot restored with `influxd restore -portable` into a second, fresh influxd returns the
  same points. A database the server lacks fails the job in one line and leaves no snapshot.
- a destination mounted read-only fails the run in one line, and a full one (a small tmpfs) says
  "No space left on device", whichever of the payload and the manifest found it full.

MariaDB is not installed here: the mariadb kind's command line is tested in the unit tests and
its real dump runs in the sandbox.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from hal_provision.loader import load
from hal_provision.node import backup
from hal_provision.render import accounts

from .influx_harness import INFLUXD, Influxd
from .ldap_harness import SLAPADD, make_config

pytestmark = pytest.mark.acceptance
needs_influxd = pytest.mark.skipif(INFLUXD is None, reason="needs InfluxDB 1.x's influxd (Debian package influxdb)")


def write_config(tmp_path: Path, *jobs: dict) -> Path:
    dest = tmp_path / "dest"
    dest.mkdir(exist_ok=True)
    path = tmp_path / "backup.json"
    path.write_text(
        json.dumps(
            {
                "format": 2,
                "cluster": "hal",
                "keep": 3,
                "jobs": list(jobs),
                "destinations": {"hal-mgmt1": {"path": str(dest), "mount_point": "/"}},
            }
        )
    )
    return path


@pytest.fixture(autouse=True)
def key(tmp_path, monkeypatch) -> Path:
    """This test's manifest key, where hal-backup looks for it by default."""
    path = tmp_path / "backup-manifest.key"
    backup.make_key(path)
    monkeypatch.setattr(backup, "KEY", str(path))
    return path


def run(capsys, config: Path, *args: str) -> tuple[int, str, str]:
    rc = backup.main(["run", "--config", str(config), "--host", "hal-mgmt1", *args])
    done = capsys.readouterr()
    return rc, done.out, done.err


def only_snapshot(jobdir: Path) -> Path:
    [snap] = [p for p in jobdir.iterdir() if p.name != backup.LOCK]
    assert backup.STAMP_RE.fullmatch(snap.name), snap.name
    return snap


def dns(ldif: str) -> list[str]:
    """The DNs of an LDIF, its folded lines joined."""
    text = ldif.replace("\n ", "")
    return [line[4:] for line in text.splitlines() if line.startswith("dn: ")]


# ---- slapd ---------------------------------------------------------------------------------------


def test_slapd_job_dumps_the_directory_with_slapcat(tmp_path, capsys):
    cluster = load(None).model
    base = accounts.tree(cluster, cluster.accounts)["base"]
    conf, _db = make_config(tmp_path / "live", base)
    rendered = tmp_path / "hal.ldif"
    rendered.write_text(accounts.render(cluster)[accounts.LDIF])
    loaded = subprocess.run(
        [SLAPADD, "-F", str(conf), "-b", base, "-l", str(rendered)], capture_output=True, text=True, check=False
    )
    assert loaded.returncode == 0, loaded.stderr

    config = write_config(
        tmp_path,
        {
            "name": "directory",
            "kind": "slapd",
            "host": "hal-mgmt1",
            "suffix": base,
            "config_dir": str(conf),
            "secret": True,
        },
    )
    rc, out, err = run(capsys, config)
    assert rc == 0, err
    assert "directory: " in out
    snap = only_snapshot(tmp_path / "dest" / "directory")
    manifest = json.loads((snap / "MANIFEST.json").read_text())
    assert [f["name"] for f in manifest["files"]] == ["config.ldif", "data.ldif"]
    assert (manifest["kind"], manifest["secret"]) == ("slapd", True)
    assert {oct(p.stat().st_mode & 0o777) for p in snap.iterdir()} == {"0o600"}

    data = (snap / "data.ldif").read_text()
    want = dns(rendered.read_text())
    assert len(want) == 3 + len(cluster.accounts.groups) + len(cluster.accounts.users)
    assert sorted(dns(data)) == sorted(want)
    user = cluster.accounts.users[0]
    assert f"uid: {user.name}\n" in data
    config_ldif = (snap / "config.ldif").read_text().replace("\n ", "")
    assert f"olcSuffix: {base}" in config_ldif and "cn: schema" in config_ldif

    # The dump loads again into an empty database under the same schemas: restorable.
    fresh, _db = make_config(tmp_path / "fresh", base)
    again = subprocess.run(
        [SLAPADD, "-F", str(fresh), "-b", base, "-l", str(snap / "data.ldif")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert again.returncode == 0, again.stderr
    assert backup.main(["verify", "--dest", str(tmp_path / "dest")]) == 0


# ---- influxdb ------------------------------------------------------------------------------------

POINTS = [("gpu", "hal01", "0", 71.5), ("gpu", "hal01", "1", 68.0), ("cpu", "hal02", "cpu-total", 12.25)]


@pytest.fixture
def influxd_pair(tmp_path):
    servers = []
    try:
        for name in ("live", "restored"):
            (tmp_path / name).mkdir()
            servers.append(Influxd(tmp_path / name))
        yield servers
    finally:
        for server in servers:
            server.close()


def _series(server: Influxd) -> set[tuple]:
    rows = set()
    for measurement in ("gpu", "cpu"):
        for s in server.query("telegraf", f'SELECT "value", "host", "index" FROM "{measurement}"'):
            rows.update((measurement, host, index, value, t) for t, value, host, index in s["values"])
    return rows


@needs_influxd
def test_influxdb_job_backs_up_and_the_snapshot_restores(tmp_path, capsys, influxd_pair):
    live, restored = influxd_pair
    live.create("telegraf")
    now = int(time.time())
    live.write(
        "telegraf", [f"{m},host={h},index={i} value={v} {now - 10 * k}" for k, (m, h, i, v) in enumerate(POINTS)]
    )
    written = _series(live)
    assert len(written) == len(POINTS)

    config = write_config(
        tmp_path,
        {
            "name": "monitoring",
            "kind": "influxdb",
            "host": "hal-mgmt1",
            "databases": ["telegraf"],
            "address": live.rpc_address,
        },
    )
    rc, out, err = run(capsys, config)
    assert rc == 0, err
    snap = only_snapshot(tmp_path / "dest" / "monitoring")
    manifest = json.loads((snap / "MANIFEST.json").read_text())
    names = [f["name"] for f in manifest["files"]]
    assert names and all(n.startswith("influxdb/telegraf/") for n in names), names
    assert any(n.endswith(".manifest") for n in names) and any(n.endswith(".tar.gz") for n in names), names
    assert sum(f["bytes"] for f in manifest["files"]) == sum((snap / n).stat().st_size for n in names)
    assert backup.main(["verify", "--dest", str(tmp_path / "dest"), f"monitoring/{snap.name}"]) == 0

    done = subprocess.run(
        [
            INFLUXD,
            "restore",
            "-portable",
            "-db",
            "telegraf",
            "-host",
            restored.rpc_address,
            str(snap / "influxdb" / "telegraf"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # The restored shard opens a moment later: "shard is disabled", then for a while only some of
    # its measurements answer.
    deadline = time.monotonic() + 20
    got: set | str = set()
    while got != written and time.monotonic() < deadline:
        try:
            got = _series(restored)
        except AssertionError as exc:
            got = str(exc)
        time.sleep(0.2)
    assert got == written


@needs_influxd
def test_influxdb_job_for_a_missing_database_fails_in_one_line(tmp_path, capsys, influxd_pair):
    live, _restored = influxd_pair
    config = write_config(
        tmp_path,
        {
            "name": "monitoring",
            "kind": "influxdb",
            "host": "hal-mgmt1",
            "databases": ["telegraf"],
            "address": live.rpc_address,
        },
    )
    rc, _out, err = run(capsys, config)
    assert rc == 1
    assert err.splitlines() == [
        f"hal-backup: error: job monitoring: influxd failed (exit 1): backup: EOF "
        f"(does {live.rpc_address} answer, and has it a database telegraf?)"
    ]
    assert [p.name for p in (tmp_path / "dest" / "monitoring").iterdir()] == [backup.LOCK]


# ---- the destination -------------------------------------------------------------------------


@contextlib.contextmanager
def tmpfs(dest: Path, options: str):
    """A tmpfs mounted at `dest` for the block (the test is skipped where mounting is not allowed)."""
    dest.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "hal-backup-test", str(dest)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield dest
    finally:
        subprocess.run(["umount", str(dest)], check=True)


def run_files_job(tmp_path: Path, capsys, data: bytes) -> tuple[int, str, str]:
    """hal-backup run of a files job (hal-mgmt1's slurmctld_state) of one file holding `data`."""
    source = tmp_path / "state"
    source.write_bytes(data)
    config = write_config(
        tmp_path, {"name": "slurmctld_state", "kind": "files", "host": "hal-mgmt1", "paths": [str(source)]}
    )
    return run(capsys, config)


def test_a_read_only_destination_fails_the_run_in_one_line(tmp_path, capsys):
    dest = tmp_path / "dest"
    with tmpfs(dest, "ro,size=1m"):
        rc, _out, err = run_files_job(tmp_path, capsys, b"state\n")
    assert rc == 1
    assert err.splitlines() == [
        f"hal-backup: error: destination {dest} is not writable (mounted read-only, or a "
        "file system that squashes root?)"
    ]


def test_a_full_destination_says_no_space_left_on_device(tmp_path, capsys):
    """A real full file system (a 64 KiB tmpfs, a 1 MiB payload): GNU tar's last words are
    "Error is not recoverable"; the error says what happened, in one line, and no partial
    snapshot is left. (A manifest that finds the disk full: tests/unit/node/test_backup_program.py.)"""
    dest = tmp_path / "dest"
    with tmpfs(dest, "size=64k"):
        rc, _out, err = run_files_job(tmp_path, capsys, os.urandom(1 << 20))
        left = [p.name for p in (dest / "slurmctld_state").iterdir() if p.name != backup.LOCK]
    assert rc == 1 and len(err.splitlines()) == 1, err
    assert err.startswith("hal-backup: error: job slurmctld_state: No space left on device"), err
    assert left == []
