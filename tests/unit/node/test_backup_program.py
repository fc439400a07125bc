"""hal-backup (hal_provision/node/backup.py), the node program that writes the cluster's state
into dated, checksummed, authenticated snapshots, and `hal-provision backup list|verify` that
reads them.

The files kind runs end to end with the real GNU tar in a scratch directory: the snapshot, its
manifest, the archive extracted again, list, verify (and its findings after a byte is changed,
a file deleted, a file added; a payload rewritten with its manifest, a manifest sealed with
another key, a renamed snapshot), the key, retention by the manifests' time (a snapshot dated in
the future and a forged one neither counted nor removed), the modes of a secret job, failures
that leave no complete snapshot (a full destination too), and `age` in both forms. Every test
has its own key (KEY pointed at it). Real slapcat and a real influxd are in
tests/acceptance/test_backup.py. MariaDB is not on this machine: the command line the mariadb
kind builds is checked here, the real dump runs in the sandbox.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hal_provision.node import backup

REPO = Path(__file__).resolve().parents[3]
PROGRAM = REPO / "hal_provision" / "node" / "backup.py"
T0 = dt.datetime(2026, 3, 1, 2, 30, 0, tzinfo=dt.timezone.utc)
ROOT = os.geteuid() == 0


def write_config(tmp_path: Path, jobs: list[dict], keep: int = 7, dest: Path | None = None) -> Path:
    """backup.json for hosts h1, h2 and h3, all with `dest` ("/" its mount point)."""
    dest = dest or tmp_path / "dest"
    dest.mkdir(exist_ok=True)
    path = tmp_path / "backup.json"
    destinations = {host: {"path": str(dest), "mount_point": "/"} for host in ("h1", "h2", "h3")}
    path.write_text(
        json.dumps({"format": 2, "cluster": "hal", "destinations": destinations, "keep": keep, "jobs": jobs})
    )
    return path


@pytest.fixture(autouse=True)
def key(tmp_path, monkeypatch) -> Path:
    """This test's key, where hal-backup looks for it by default."""
    path = tmp_path / "backup-manifest.key"
    assert backup.make_key(path)
    monkeypatch.setattr(backup, "KEY", str(path))
    return path


def files_job(name: str, *paths: Path, secret: bool = False, host: str = "h1") -> dict:
    return {
        "name": name,
        "kind": "files",
        "host": host,
        "paths": [str(p) for p in paths],
        **({"secret": True} if secret else {}),
    }


def hal_backup(capsys, *argv: str) -> tuple[int, str, str]:
    rc = backup.main(list(argv))
    done = capsys.readouterr()
    return rc, done.out, done.err


def run_at(config_path: Path, job: str, *times: dt.datetime) -> list[backup.Result]:
    """Run `job` once at each of `times` (the clock of the stamps)."""
    config = backup.load_config(config_path)
    chosen = next(j for j in config.jobs if j.name == job)
    key = backup.load_key(backup.KEY)
    return [backup.run_job(config, chosen, "h1", key, now=lambda t=t: t) for t in times]


def stamps(jobdir: Path) -> list[str]:
    return sorted(p.name for p in jobdir.iterdir() if p.name != backup.LOCK)


@pytest.fixture
def source(tmp_path) -> Path:
    """A small state directory: files with their own modes (and owner, as root)."""
    src = tmp_path / "state"
    (src / "hash.3").mkdir(parents=True)
    (src / "job_state").write_bytes(b"\x00\x01state" * 100)
    (src / "hash.3" / "script").write_text("#!/bin/sh\nsrun true\n")
    os.chmod(src / "job_state", 0o600)
    os.chmod(src / "hash.3", 0o700)
    if ROOT:
        os.chown(src / "job_state", 64030, 64030)
    return src


# ---- the files kind end to end ---------------------------------------------------------------


def test_files_job_writes_a_snapshot_tar_restores(tmp_path, source, key):
    """The program file itself, as the role installs it (no package around it): run, then the
    archive extracted holds the same bytes, modes and numeric owners."""
    config = write_config(tmp_path, [files_job("slurmctld_state", source)])
    done = subprocess.run(
        [sys.executable, str(PROGRAM), "run", "--config", str(config), "--host", "h1", "--key", str(key)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"]},
    )
    assert done.returncode == 0, done.stderr
    jobdir = tmp_path / "dest" / "slurmctld_state"
    [stamp] = stamps(jobdir)
    assert re.fullmatch(r"\d{8}T\d{6}Z", stamp)
    assert f"slurmctld_state: {jobdir / stamp}, 1 file," in done.stdout
    snap = jobdir / stamp
    manifest = json.loads((snap / "MANIFEST.json").read_text())
    assert set(manifest) == {
        "format",
        "cluster",
        "job",
        "kind",
        "host",
        "created",
        "seconds",
        "secret",
        "files",
        "key_id",
        "hmac",
    }
    assert (
        manifest["format"],
        manifest["cluster"],
        manifest["job"],
        manifest["kind"],
        manifest["host"],
        manifest["secret"],
    ) == (2, "hal", "slurmctld_state", "files", "h1", False)
    assert manifest["key_id"] == backup.key_id(backup.load_key(key)) and re.fullmatch(r"[0-9a-f]{64}", manifest["hmac"])
    assert backup.authenticity(manifest, backup.load_key(key)) is None
    assert key.read_text() not in (snap / "MANIFEST.json").read_text()
    created = dt.datetime.strptime(manifest["created"], "%Y-%m-%dT%H:%M:%SZ")
    assert created.strftime("%Y%m%dT%H%M%SZ") == stamp
    assert isinstance(manifest["seconds"], float)
    data = (snap / "files.tar").read_bytes()
    assert manifest["files"] == [{"name": "files.tar", "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}]
    assert sorted(p.name for p in snap.iterdir()) == ["MANIFEST.json", "files.tar"]

    out = tmp_path / "restored"
    out.mkdir()
    subprocess.run(["tar", "-x", "-p", "--numeric-owner", "-f", str(snap / "files.tar"), "-C", str(out)], check=True)
    back = out / source.relative_to("/")
    assert (back / "job_state").read_bytes() == (source / "job_state").read_bytes()
    assert (back / "hash.3" / "script").read_text() == "#!/bin/sh\nsrun true\n"
    assert stat.S_IMODE((back / "job_state").stat().st_mode) == 0o600
    assert stat.S_IMODE((back / "hash.3").stat().st_mode) == 0o700
    with tarfile.open(snap / "files.tar") as tar:
        names = tar.getnames()
        assert all(not n.startswith("/") for n in names), names  # members relative to /: restore with -C /
        if ROOT:
            assert tar.getmember(f"{source.relative_to('/')}/job_state").uid == 64030
            assert (back / "job_state").stat().st_uid == 64030


def test_list_and_verify_a_good_snapshot(tmp_path, source, capsys):
    config = write_config(tmp_path, [files_job("slurmctld_state", source)])
    [result] = run_at(config, "slurmctld_state", T0)
    rc, out, _ = hal_backup(capsys, "list", "--config", str(config), "--host", "h1")
    assert rc == 0
    header, row = out.splitlines()
    assert header.split() == ["JOB", "SNAPSHOT", "HOST", "KIND", "SIZE", "FILES", "AGE", "NOTE"]
    assert row.split()[:4] == ["slurmctld_state", "20260301T023000Z", "h1", "files"]
    assert row.split()[6] == "1"  # files (size is two words: "10.2 KB")
    rc, out, _ = hal_backup(capsys, "verify", "--dest", str(tmp_path / "dest"))
    assert rc == 0, out
    assert out.splitlines() == [
        f"ok   slurmctld_state/20260301T023000Z (1 file, {backup.human_size(result.bytes)})",
        f"1 snapshot checked, 0 failed ({backup.CHECKSUMS_ONLY})",
    ]
    rc, out, _ = hal_backup(capsys, "verify", "--config", str(config), "--host", "h1")  # the host's own: the key
    assert rc == 0, out
    assert out.splitlines()[-1] == f"1 snapshot checked, 0 failed (authenticated with {backup.KEY})"


def test_verify_names_a_changed_byte_a_deleted_file_and_an_extra_file(tmp_path, source, capsys):
    config = write_config(tmp_path, [files_job("slurmctld_state", source)])
    times = [T0 + dt.timedelta(hours=h) for h in range(4)]
    changed, deleted, extra, intact = (r.path for r in run_at(config, "slurmctld_state", *times))
    with open(changed / "files.tar", "r+b") as f:  # one byte, the size unchanged
        f.seek(600)
        byte = f.read(1)
        f.seek(600)
        f.write(bytes([byte[0] ^ 0xFF]))
    (deleted / "files.tar").unlink()
    (extra / "notes.txt").write_text("not a backup\n")

    rc, out, err = hal_backup(capsys, "verify", "--dest", str(tmp_path / "dest"))
    assert rc == 1
    assert "Traceback" not in out + err
    lines = out.splitlines()
    assert f"FAIL slurmctld_state/{changed.name}: files.tar: SHA-256 differs from the manifest" in lines
    assert f"FAIL slurmctld_state/{deleted.name}: files.tar: missing" in lines
    assert f"FAIL slurmctld_state/{extra.name}: notes.txt: not in the manifest" in lines
    assert any(line.startswith(f"ok   slurmctld_state/{intact.name}") for line in lines)
    assert lines[-1] == f"4 snapshots checked, 3 failed ({backup.CHECKSUMS_ONLY})"

    rc, out, _ = hal_backup(capsys, "verify", "--dest", str(tmp_path / "dest"), f"slurmctld_state/{intact.name}")
    assert rc == 0, out
    rc, out, _ = hal_backup(
        capsys, "verify", "--dest", str(tmp_path / "dest"), "slurmctld_state/20990101T000000Z", "accounting_db"
    )
    assert rc == 1
    assert "FAIL slurmctld_state/20990101T000000Z: no such snapshot under" in out
    assert "FAIL accounting_db: no such snapshot under" in out


def _rewrite(snap: Path, data: bytes) -> None:
    """What whoever can write the destination can do: a new payload, and a manifest whose
    checksums match it (the HMAC left as it was, for want of the key)."""
    (snap / "files.tar").chmod(0o600)
    (snap / "files.tar").write_bytes(data)
    manifest = json.loads((snap / "MANIFEST.json").read_text())
    manifest["files"] = [{"name": "files.tar", "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}]
    (snap / "MANIFEST.json").write_text(json.dumps(manifest))


def test_a_payload_rewritten_with_its_manifest_is_refused_with_the_key(tmp_path, source, key, capsys):
    """Checksums alone cannot tell: without the key verify passes it and says what it did not
    check; with the host's key (its own verify, or --key) the manifest does not authenticate."""
    config = write_config(tmp_path, [files_job("secrets", source, secret=True)])
    [result] = run_at(config, "secrets", T0)
    _rewrite(result.path, b"a forged archive\n")
    dest, name = str(tmp_path / "dest"), f"secrets/{result.path.name}"
    rc, out, _ = hal_backup(capsys, "verify", "--dest", dest)
    assert rc == 0 and out.splitlines()[-1].endswith(f"({backup.CHECKSUMS_ONLY})"), out
    said = f"FAIL {name}: MANIFEST.json does not match its HMAC: changed after the snapshot was written"
    for args in (["--dest", dest, "--key", str(key)], ["--config", str(config), "--host", "h1"]):
        rc, out, err = hal_backup(capsys, "verify", *args)
        assert rc == 1 and said in out.splitlines(), out + err
    done = _cli("verify", dest, "--key", str(key))
    assert done.exit_code == 1 and "does not match its HMAC" in done.stderr, done.output
    done = _cli("verify", dest)
    assert done.exit_code == 0 and f"1 snapshot verified ({backup.CHECKSUMS_ONLY})" in done.stdout, done.output
    rc, out, _ = hal_backup(capsys, "list", "--config", str(config), "--host", "h1")  # the host's key, where readable
    assert rc == 0 and out.splitlines()[1].endswith("secret, NOT AUTHENTIC"), out
    assert "NOT AUTHENTIC" in _cli("list", dest, "--key", str(key)).stdout
    assert "NOT AUTHENTIC" not in _cli("list", dest).stdout


def test_a_manifest_sealed_with_another_key_or_moved_is_refused(tmp_path, source, key, capsys):
    config = write_config(tmp_path, [files_job("slurmctld_state", source)])
    first, second = run_at(config, "slurmctld_state", T0, T0 + dt.timedelta(hours=1))
    other = tmp_path / "other.key"
    backup.make_key(other)
    manifest = json.loads((first.path / "MANIFEST.json").read_text())
    (first.path / "MANIFEST.json").write_text(json.dumps(backup.seal(manifest, backup.load_key(other))))
    # An older snapshot renamed to a later stamp (so that `latest` would restore old state).
    moved = second.path.parent / "20260302T000000Z"
    os.rename(first.path, moved)
    rc, out, _ = hal_backup(capsys, "verify", "--config", str(config), "--host", "h1")
    assert rc == 1
    assert (
        f"FAIL slurmctld_state/20260302T000000Z: MANIFEST.json was sealed with another key "
        f"('{backup.key_id(backup.load_key(other))}', this one is '{backup.key_id(backup.load_key(key))}')"
    ) in out
    assert (
        "FAIL slurmctld_state/20260302T000000Z: MANIFEST.json says it was made at 2026-03-01T02:30:00Z, not at "
        "its directory's stamp"
    ) in out
    assert f"ok   slurmctld_state/{second.path.name}" in out


def test_a_manifest_without_an_hmac_is_listed_never_authenticated(tmp_path, source, key, capsys):
    """Format 1 (before manifests carried an HMAC): listed with a note, refused by verify with
    the key, never counted or removed by a run."""
    config = write_config(tmp_path, [files_job("slurmctld_state", source)], keep=1)
    [old] = run_at(config, "slurmctld_state", T0)
    manifest = json.loads((old.path / "MANIFEST.json").read_text())
    for field in ("hmac", "key_id"):
        manifest.pop(field)
    (old.path / "MANIFEST.json").write_text(json.dumps(dict(manifest, format=1)))
    rc, out, _ = hal_backup(capsys, "list", "--dest", str(tmp_path / "dest"))
    assert rc == 0 and out.splitlines()[1].endswith("no HMAC"), out
    rc, out, _ = hal_backup(capsys, "verify", "--config", str(config), "--host", "h1")
    assert rc == 1 and "MANIFEST.json carries no HMAC (format 1: written before manifests were authenticated)" in out
    [new] = run_at(config, "slurmctld_state", T0 + dt.timedelta(days=1))
    assert new.removed == [] and old.path.exists()
    assert new.warnings == [
        "slurmctld_state/20260301T023000Z: MANIFEST.json carries no HMAC (format 1: written "
        "before manifests were authenticated): not counted among the 1 kept, not removed"
    ]


def test_a_future_dated_snapshot_is_reported_not_kept_as_newest(tmp_path, source, capsys):
    """A snapshot made while the clock was a century ahead: every later run keeps its own
    snapshot (it is not pruned in favour of the future one), the future one is said and left
    alone; `age` counts from the newest snapshot made before now, never a negative or clamped
    age, and says why it passed the other over; list shows its negative age."""
    config = write_config(tmp_path, [files_job("slurmctld_state", source)], keep=1)
    future = T0 + dt.timedelta(days=36500)
    [ahead] = run_at(config, "slurmctld_state", future)
    first, second = run_at(config, "slurmctld_state", T0, T0 + dt.timedelta(hours=1))
    assert first.removed == [] and second.removed == [first.path.name]
    assert first.path.parent == ahead.path.parent and ahead.path.exists() and second.path.exists()
    assert second.warnings == [
        f"slurmctld_state/{ahead.path.name}: dated in the future (made "
        f"{future.strftime('%Y-%m-%dT%H:%M:%SZ')}, now 2026-03-01T03:30:00Z): not counted as "
        "the newest, not removed"
    ]
    now = T0 + dt.timedelta(hours=3)
    warned = []
    [age] = backup.ages(
        tmp_path / "dest", ["slurmctld_state"], now=now, warn=warned.append, key=backup.load_key(backup.KEY)
    )
    assert (age.seconds, age.stamp) == (7200, second.path.name)
    assert warned == [
        f"slurmctld_state/{ahead.path.name}: dated in the future (made "
        f"{future.strftime('%Y-%m-%dT%H:%M:%SZ')}, now 2026-03-01T05:30:00Z): not counted"
    ]
    rows = backup.rows(backup.snapshots(tmp_path / "dest"), now=now)
    assert [(r[1], r[6], r[7]) for r in rows] == [
        (second.path.name, "2h 00m", ""),
        (ahead.path.name, "-36499d 21h", "future"),
    ]
    rc, out, err = hal_backup(capsys, "age", "--config", str(config), "--host", "h1")
    assert rc == 0 and re.fullmatch(r"slurmctld_state \d+\n", out) and "dated in the future" in err


def test_retention_neither_counts_nor_removes_a_forged_snapshot(tmp_path, source):
    """A snapshot put on the destination by someone without the key (a later stamp, checksums
    that match): it would otherwise count as the newest and push the genuine ones out."""
    config = write_config(tmp_path, [files_job("slurmctld_state", source)], keep=1)
    [genuine] = run_at(config, "slurmctld_state", T0)
    forged = genuine.path.parent / "20260301T120000Z"
    shutil.copytree(genuine.path, forged)
    manifest = json.loads((forged / "MANIFEST.json").read_text())
    (forged / "MANIFEST.json").write_text(json.dumps(dict(manifest, created="2026-03-01T12:00:00Z")))
    [later] = run_at(config, "slurmctld_state", T0 + dt.timedelta(days=1))
    assert later.removed == [genuine.path.name] and forged.exists() and later.path.exists()
    assert later.warnings == [
        "slurmctld_state/20260301T120000Z: MANIFEST.json does not match its HMAC: changed after "
        "the snapshot was written: not counted among the 1 kept, not removed"
    ]


def test_the_key_is_made_once_root_only_and_checked(tmp_path, source, capsys):
    path = tmp_path / "k" / "backup-manifest.key"
    path.parent.mkdir()
    rc, out, _ = hal_backup(capsys, "keygen", "--key", str(path))
    assert (rc, out) == (0, f"hal-backup: made {path}\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and re.fullmatch(r"[0-9a-f]{64}\n", path.read_text())
    made = path.read_text()
    rc, out, _ = hal_backup(capsys, "keygen", "--key", str(path))
    assert (rc, out, path.read_text()) == (0, f"hal-backup: {path} is there, kept\n", made)
    config = write_config(tmp_path, [files_job("slurmctld_state", source)])
    path.chmod(0o644)
    rc, _, err = hal_backup(capsys, "run", "--config", str(config), "--host", "h1", "--key", str(path))
    assert (rc, err) == (
        2,
        f"hal-backup: error: the manifest key {path} is open to group or others (mode 0644): chmod 600 {path}\n",
    )
    path.chmod(0o600)
    path.write_text("short\n")
    rc, _, err = hal_backup(capsys, "verify", "--config", str(config), "--host", "h1", "--key", str(path))
    assert (rc, err) == (2, f"hal-backup: error: the manifest key {path} holds 5 bytes, fewer than 32\n")
    path.unlink()
    rc, _, err = hal_backup(capsys, "run", "--config", str(config), "--host", "h1", "--key", str(path))
    assert rc == 2 and err.startswith(f"hal-backup: error: no manifest key at {path}: the backup role makes it")
    assert not (tmp_path / "dest" / "slurmctld_state").exists()


@pytest.mark.parametrize("where", ["payload", "manifest"])
def test_a_full_destination_says_no_space_left_on_device(tmp_path, source, capsys, monkeypatch, where):
    """tar's last line on a full disk is "Error is not recoverable" and mariadb-dump's "Got errno
    28 on write": the error names the cause. No partial snapshot is left."""
    config = write_config(tmp_path, [files_job("slurmctld_state", source)])
    if where == "payload":
        fake = tmp_path / "bin" / "tar"
        fake.parent.mkdir()
        fake.write_text(
            "#!/bin/sh\necho 'tar: /b/files.tar: Cannot write: No space left on device' >&2\n"
            "echo 'tar: Error is not recoverable: exiting now' >&2\nexit 2\n"
        )
        fake.chmod(0o755)
        monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    else:

        def full(snapshot, record):
            raise OSError(28, os.strerror(28), str(snapshot / "MANIFEST.json"))

        monkeypatch.setattr(backup, "_write_manifest", full)
    rc, _, err = hal_backup(capsys, "run", "--config", str(config), "--host", "h1")
    assert rc == 1 and len(err.splitlines()) == 1 and "No space left on device" in err, err
    assert err.startswith("hal-backup: error: job slurmctld_state: No space left on device")
    assert _leftovers(tmp_path / "dest" / "slurmctld_state") == []


def test_age_reports_this_host_s_jobs(tmp_path, source, capsys):
    """Each host its own destination: a job of another host is not this host's to report."""
    config = write_config(tmp_path, [files_job("slurmctld_state", source), files_job("other", source, host="h2")])
    run_at(config, "slurmctld_state", T0)
    rc, out, _ = hal_backup(capsys, "age", "--config", str(config), "--host", "h1")
    assert rc == 0 and re.fullmatch(r"slurmctld_state \d+\n", out), out
    rc, out, _ = hal_backup(capsys, "age", "--config", str(config), "--host", "h2")
    assert (rc, out) == (0, "other none\n")


def test_retention_keeps_the_newest_and_clears_what_runs_left_behind(tmp_path, source):
    config = write_config(tmp_path, [files_job("slurmctld_state", source)], keep=2)
    jobdir = tmp_path / "dest" / "slurmctld_state"
    jobdir.mkdir()
    stale = jobdir / ".partial-20260227T000000Z"  # a killed run, two days before
    recent = jobdir / ".partial-20260301T043000Z"  # started after T0: may still be running
    cut_short = jobdir / ".removing-20260101T000000Z"  # a removal that was interrupted
    for d in (stale, recent, cut_short):
        d.mkdir()
        (d / "files.tar").write_text("x")
    results = run_at(config, "slurmctld_state", T0, T0 + dt.timedelta(days=1), T0 + dt.timedelta(days=2))
    assert [r.removed for r in results] == [[], [], ["20260301T023000Z"]]
    assert stamps(jobdir) == ["20260302T023000Z", "20260303T023000Z"]  # the partial of 03-01 04:30 went too: a day old


def test_a_stale_partial_goes_only_after_a_day(tmp_path, source):
    config = write_config(tmp_path, [files_job("slurmctld_state", source)], keep=2)
    jobdir = tmp_path / "dest" / "slurmctld_state"
    jobdir.mkdir()
    young, old = jobdir / ".partial-20260301T010000Z", jobdir / ".partial-20260228T020000Z"
    young.mkdir()
    old.mkdir()
    run_at(config, "slurmctld_state", T0)
    assert stamps(jobdir) == [young.name, "20260301T023000Z"]


def test_two_runs_in_one_second_get_two_snapshots(tmp_path, source, capsys):
    config = write_config(tmp_path, [files_job("slurmctld_state", source)])
    for _ in range(2):
        rc, _out, err = hal_backup(capsys, "run", "--config", str(config), "--host", "h1")
        assert rc == 0, err
    first, second = stamps(tmp_path / "dest" / "slurmctld_state")
    assert first < second


def test_a_secret_job_is_root_only(tmp_path, source):
    key = tmp_path / "munge.key"
    key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o400)
    config = write_config(tmp_path, [files_job("secrets", key, source, secret=True)])
    [result] = run_at(config, "secrets", T0)
    snap = result.path
    for path in (snap.parent, snap):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    for path in (snap / "files.tar", snap / "MANIFEST.json"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    if ROOT:
        assert {(p.stat().st_uid, p.stat().st_gid) for p in (snap, *snap.iterdir())} == {(0, 0)}
    assert json.loads((snap / "MANIFEST.json").read_text())["secret"] is True


# ---- failures: one line naming the job, no complete snapshot -----------------------------------


def _leftovers(jobdir: Path) -> list[str]:
    return [p.name for p in jobdir.iterdir() if p.name != backup.LOCK] if jobdir.exists() else []


FAILURES = [
    pytest.param(
        {"name": "secrets", "kind": "files", "host": "h1", "paths": ["/nonexistent/munge.key"]},
        "job secrets: /nonexistent/munge.key: no such file or directory",
        None,
        id="files-missing-path",
    ),
    pytest.param(
        {
            "name": "directory",
            "kind": "slapd",
            "host": "h1",
            "suffix": "dc=hal,dc=example",
            "config_dir": "/nonexistent/slapd.d",
        },
        "job directory: slapcat failed (exit 1): slapcat: bad configuration directory!",
        "slapcat",
        id="slapcat-fails",
    ),
    pytest.param(
        {"name": "accounting_db", "kind": "mariadb", "host": "h1", "databases": ["slurm_acct_db"]},
        "job accounting_db: mariadb-dump not found (Debian package mariadb-client)",
        "!mariadb-dump",
        id="mariadb-dump-missing",
    ),
]


@pytest.mark.parametrize(("job", "said", "needs"), FAILURES)
def test_a_failing_job_says_why_in_one_line_and_leaves_no_snapshot(tmp_path, source, capsys, job, said, needs):
    if needs and needs.startswith("!") and shutil.which(needs[1:], path="/usr/sbin:/usr/bin:/sbin:/bin"):
        pytest.skip(f"{needs[1:]} is installed here")
    if needs and not needs.startswith("!") and not shutil.which(needs, path="/usr/sbin:/usr/bin"):
        pytest.skip(f"needs {needs}")
    config = write_config(tmp_path, [job, files_job("slurmctld_state", source)])
    rc, out, err = hal_backup(capsys, "run", "--config", str(config), "--host", "h1")
    assert rc == 1
    assert err.splitlines() == [f"hal-backup: error: {said}"]
    assert _leftovers(tmp_path / "dest" / job["name"]) == []
    assert "slurmctld_state:" in out  # the host's other job still ran
    assert len(stamps(tmp_path / "dest" / "slurmctld_state")) == 1


def test_a_mount_point_that_is_not_mounted_is_refused(tmp_path, source, capsys):
    config = write_config(tmp_path, [files_job("slurmctld_state", source)])
    doc = json.loads(config.read_text())
    doc["destinations"]["h1"]["mount_point"] = str(tmp_path)
    config.write_text(json.dumps(doc))
    rc, _, err = hal_backup(capsys, "run", "--config", str(config), "--host", "h1")
    assert (rc, err) == (
        1,
        f"hal-backup: error: {tmp_path} is not a mount point: the file system of the destination "
        f"{tmp_path / 'dest'} is not mounted (hal-backup writes nothing there)\n",
    )


def test_a_destination_not_mounted_is_not_created(tmp_path, source, capsys):
    config = write_config(tmp_path, [files_job("slurmctld_state", source)])
    dest = tmp_path / "dest"
    dest.rmdir()
    rc, out, err = hal_backup(capsys, "run", "--config", str(config), "--host", "h1")
    assert rc == 1
    assert err.splitlines() == [
        f"hal-backup: error: destination {dest} does not exist: is its file system mounted? "
        "(hal-backup does not create it)"
    ]
    assert not dest.exists()


def test_run_chooses_this_hosts_jobs(tmp_path, source, capsys):
    config = write_config(
        tmp_path, [files_job("slurmctld_state", source, host="h1"), files_job("other", source, host="h2")]
    )
    rc, out, _ = hal_backup(capsys, "run", "--config", str(config), "--host", "h3")
    assert (rc, out.strip()) == (0, f"hal-backup: {config} has no job for host h3")
    rc, _, err = hal_backup(capsys, "run", "--config", str(config), "--host", "h1", "--job", "other")
    assert (rc, err.strip()) == (
        2,
        "hal-backup: error: job other runs on h2, not on h1 (--host h2 runs it here all the same)",
    )
    rc, _, err = hal_backup(capsys, "run", "--config", str(config), "--job", "nope")
    assert (rc, err.strip()) == (2, f"hal-backup: error: {config} has no job 'nope' (its jobs: slurmctld_state, other)")
    rc, out, _ = hal_backup(capsys, "run", "--config", str(config), "--host", "h1")
    assert rc == 0 and "slurmctld_state:" in out and "other" not in out
    assert not (tmp_path / "dest" / "other").exists()


# ---- the configuration -----------------------------------------------------------------------

# The contract's example of backup.json (docs: the model renders files/etc/hal-provision/backup.json).
CONTRACT_EXAMPLE = {
    "format": 2,
    "cluster": "hal",
    "destinations": {"hal-mgmt1": {"path": "/backup/hal", "mount_point": "/backup"}},
    "keep": 7,
    "jobs": [
        {"name": "accounting_db", "kind": "mariadb", "host": "hal-mgmt1", "databases": ["slurm_acct_db"]},
        {"name": "directory", "kind": "slapd", "host": "hal-mgmt1", "suffix": "dc=hal,dc=example"},
        {"name": "monitoring", "kind": "influxdb", "host": "hal-mgmt1", "databases": ["telegraf"]},
        {"name": "slurmctld_state", "kind": "files", "host": "hal-mgmt1", "paths": ["/var/spool/slurmctld"]},
        {
            "name": "secrets",
            "kind": "files",
            "host": "hal-mgmt1",
            "secret": True,
            "paths": ["/etc/munge/munge.key", "/etc/hal-provision/secrets"],
        },
    ],
}


def test_the_contracts_example_parses():
    config = backup.parse_config(CONTRACT_EXAMPLE)
    assert (config.cluster, config.keep) == ("hal", 7)
    assert config.destination("hal-mgmt1") == backup.Destination(Path("/backup/hal"), Path("/backup"))
    assert [(j.name, j.kind, j.host, j.secret) for j in config.jobs] == [
        ("accounting_db", "mariadb", "hal-mgmt1", False),
        ("directory", "slapd", "hal-mgmt1", False),
        ("monitoring", "influxdb", "hal-mgmt1", False),
        ("slurmctld_state", "files", "hal-mgmt1", False),
        ("secrets", "files", "hal-mgmt1", True),
    ]


RENDERED = sorted((REPO / "tests" / "golden").glob("*/files/etc/hal-provision/backup.json"))


@pytest.mark.parametrize("path", RENDERED, ids=lambda p: p.relative_to(REPO / "tests" / "golden").parts[0])
def test_every_rendered_backup_json_is_read_by_hal_backup(path):
    """The renderer's side of the contract: each golden backup.json is a configuration hal-backup
    accepts, and each job's commands can be built."""
    config = backup.load_config(path)
    for job in config.jobs:
        assert backup.commands(job, Path("/snapshot"))


def _edit(change) -> dict:
    doc = json.loads(json.dumps(CONTRACT_EXAMPLE))
    change(doc)
    return doc


CONFIG_ERRORS = [
    ("format", lambda d: d.update(format=1), "format: 1: this hal-backup reads format 2"),
    ("unknown-top", lambda d: d.update(retention=3), "retention: unknown key"),
    ("destinations", lambda d: d.pop("destinations"), "destinations: missing or not an object"),
    (
        "destination-path",
        lambda d: d["destinations"]["hal-mgmt1"].update(path="backup"),
        "destinations.hal-mgmt1.path: 'backup' is not an absolute path",
    ),
    (
        "destination-outside-its-mount",
        lambda d: d["destinations"]["hal-mgmt1"].update(path="/srv/hal"),
        "destinations.hal-mgmt1.path: /srv/hal does not lie under its mount point /backup",
    ),
    (
        "destination-keys",
        lambda d: d["destinations"].update(h2="/backup"),
        "destinations.h2: not an object of exactly path and mount_point",
    ),
    (
        "host-without-destination",
        lambda d: d["jobs"][2].update(host="hal-mgmt2"),
        "jobs[2].host: 'hal-mgmt2' has no entry in destinations",
    ),
    ("keep-zero", lambda d: d.update(keep=0), "keep: 0 is not a whole number of at least 1"),
    ("keep-bool", lambda d: d.update(keep=True), "keep: True is not a whole number of at least 1"),
    ("jobs", lambda d: d.pop("jobs"), "jobs: missing or not a list"),
    ("name", lambda d: d["jobs"][0].update(name="../x"), "jobs[0].name: '../x' is not a name"),
    ("kind", lambda d: d["jobs"][1].update(kind="ldap"), "jobs[1].kind: 'ldap' is not one of mariadb, slapd"),
    ("host", lambda d: d["jobs"][2].pop("host"), "jobs[2].host: missing or not a host name"),
    ("secret", lambda d: d["jobs"][4].update(secret="yes"), "jobs[4].secret: 'yes' is not true or false"),
    ("suffix", lambda d: d["jobs"][1].pop("suffix"), "jobs[1].suffix: missing: slapd jobs need an LDAP suffix"),
    ("databases", lambda d: d["jobs"][0].update(databases=[]), "jobs[0].databases: []: mariadb jobs need a non-empty"),
    (
        "paths",
        lambda d: d["jobs"][3].update(paths=["var/spool"]),
        "jobs[3].paths: ['var/spool']: files jobs need a non-empty list of absolute paths",
    ),
    ("option", lambda d: d["jobs"][3].update(databases=["x"]), "jobs[3].databases: not a key of a files job"),
    (
        "address",
        lambda d: d["jobs"][2].update(address="localhost"),
        "jobs[2].address: 'localhost': influxdb jobs need host:port",
    ),
    ("twice", lambda d: d["jobs"][4].update(name="directory"), "jobs[4].name: job 'directory' is named twice"),
]


@pytest.mark.parametrize(("change", "said"), [r[1:] for r in CONFIG_ERRORS], ids=[r[0] for r in CONFIG_ERRORS])
def test_a_bad_configuration_names_its_field(change, said):
    with pytest.raises(backup.ConfigError) as raised:
        backup.parse_config(_edit(change), "backup.json")
    assert str(raised.value).startswith(f"backup.json: {said}"), str(raised.value)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (None, "cannot read {path}: No such file or directory"),
        ("{not json", "{path}: not JSON: "),
        ('{"format": 2}', "{path}: cluster: missing or not a name"),
    ],
)
@pytest.mark.parametrize("command", ["run", "list", "verify", "age"])
def test_an_unusable_configuration_exits_2_in_one_line(tmp_path, capsys, command, text, said):
    path = tmp_path / "backup.json"
    if text is not None:
        path.write_text(text)
    rc, out, err = hal_backup(capsys, command, "--config", str(path))
    assert rc == 2
    assert len(err.splitlines()) == 1 and err.startswith("hal-backup: error: " + said.format(path=path)), err


# ---- each kind's commands --------------------------------------------------------------------


def _job(**entry) -> backup.Job:
    doc = _edit(lambda d: d.update(jobs=[{"name": "j", "host": "hal-mgmt1", **entry}]))
    return backup.parse_config(doc).jobs[0]


def _argvs(job: backup.Job) -> list[list[str]]:
    return [list(c.argv) for c in backup.commands(job, Path("/b/j/.partial-S"))]


def test_the_mariadb_dump_command_line():
    """Root's unix-socket login (Debian's MariaDB default) unless the job names a defaults file,
    which mariadb-dump wants first; stdout is the payload."""
    job = _job(kind="mariadb", databases=["slurm_acct_db", "other"])
    [command] = backup.commands(job, Path("/b/j/.partial-S"))
    assert list(command.argv) == [
        "mariadb-dump",
        "--single-transaction",
        "--routines",
        "--events",
        "--databases",
        "slurm_acct_db",
        "other",
    ]
    assert command.stdout == "accounting_db.sql"
    job = _job(kind="mariadb", databases=["slurm_acct_db"], defaults_file="/etc/mysql/debian.cnf")
    assert _argvs(job) == [
        [
            "mariadb-dump",
            "--defaults-file=/etc/mysql/debian.cnf",
            "--single-transaction",
            "--routines",
            "--events",
            "--databases",
            "slurm_acct_db",
        ]
    ]


def test_the_slapcat_command_lines():
    assert _argvs(_job(kind="slapd", suffix="dc=hal,dc=example")) == [
        ["slapcat", "-n", "0", "-l", "/b/j/.partial-S/config.ldif"],
        ["slapcat", "-b", "dc=hal,dc=example", "-l", "/b/j/.partial-S/data.ldif"],
    ]
    assert _argvs(_job(kind="slapd", suffix="dc=x", config_dir="/srv/slapd.d"))[1] == [
        "slapcat",
        "-F",
        "/srv/slapd.d",
        "-b",
        "dc=x",
        "-l",
        "/b/j/.partial-S/data.ldif",
    ]


def test_the_influxd_backup_command_lines():
    assert _argvs(_job(kind="influxdb", databases=["telegraf", "other"])) == [
        ["influxd", "backup", "-portable", "-database", db, "-host", "localhost:8088", f"/b/j/.partial-S/influxdb/{db}"]
        for db in ("telegraf", "other")
    ]
    assert _argvs(_job(kind="influxdb", databases=["t"], address="10.0.0.5:8089"))[0][6] == "10.0.0.5:8089"


def test_the_tar_command_line():
    assert _argvs(_job(kind="files", paths=["/var/spool/slurmctld", "/etc/munge/munge.key"])) == [
        [
            "tar",
            "--create",
            "--file",
            "/b/j/.partial-S/files.tar",
            "--numeric-owner",
            "-C",
            "/",
            "--",
            "var/spool/slurmctld",
            "etc/munge/munge.key",
        ]
    ]


# ---- age -------------------------------------------------------------------------------------


def test_age_of_the_newest_good_snapshot(tmp_path, source, capsys):
    config = write_config(tmp_path, [files_job("slurmctld_state", source), files_job("secrets", source, secret=True)])
    older, newest = run_at(config, "slurmctld_state", T0, T0 + dt.timedelta(hours=1))
    now = T0 + dt.timedelta(hours=3)
    dest = tmp_path / "dest"
    assert [a.text() for a in backup.ages(dest, ["slurmctld_state", "secrets"], now=now)] == [
        "slurmctld_state 7200",
        "secrets none",
    ]
    assert [a.line_protocol() for a in backup.ages(dest, ["slurmctld_state", "secrets"], now=now)] == [
        f"hal_backup,job=slurmctld_state age_s=7200.0,bytes={newest.bytes}i",
        "hal_backup,job=secrets bytes=0i",
    ]
    with open(newest.path / "files.tar", "ab") as f:  # the newest no longer verifies by size: the older counts
        f.write(b"x")
    assert backup.ages(dest, ["slurmctld_state"], now=now)[0].text() == "slurmctld_state 10800"

    rc, out, _ = hal_backup(capsys, "age", "--config", str(config), "--host", "h1")
    assert rc == 0
    assert re.fullmatch(r"slurmctld_state \d+\nsecrets none\n", out), out
    rc, out, _ = hal_backup(capsys, "age", "--config", str(config), "--host", "h1", "--influx")
    assert rc == 0
    assert re.fullmatch(
        rf"hal_backup,job=slurmctld_state age_s=\d+\.\d,bytes={older.bytes}i\n"
        r"hal_backup,job=secrets bytes=0i\n",
        out,
    ), out
    rc, out, _ = hal_backup(capsys, "age", "--dest", str(dest))  # without the configuration: the job directories
    assert rc == 0 and re.fullmatch(r"slurmctld_state \d+\n", out), out


@pytest.mark.skipif(
    not (ROOT and Path("/usr/bin/python3").exists() and shutil.which("runuser")),
    reason="needs root, runuser and Debian's python3",
)
def test_age_as_another_user_than_root_reports_what_it_can_read(tmp_path, source):
    """Telegraf runs its exec inputs as its own user: a secret job's directory (0700, root's)
    counts as none with a warning, the other jobs are reported, and the exit status stays 0."""
    shared = Path(tempfile.mkdtemp(prefix="hal-backup-"))  # pytest's tmp_path is root's alone
    try:
        os.chmod(shared, 0o755)
        program = shared / "hal-backup"
        shutil.copy(PROGRAM, program)  # as the role installs it: the one file, run by the node's python3
        os.chmod(program, 0o755)
        config = write_config(
            tmp_path,
            [files_job("slurmctld_state", source), files_job("secrets", source, secret=True)],
            dest=shared / "dest",
        )
        os.chmod(shared / "dest", 0o755)
        run_at(config, "slurmctld_state", T0)
        run_at(config, "secrets", T0)
        done = subprocess.run(
            [
                "runuser",
                "-u",
                "nobody",
                "--",
                "/usr/bin/python3",
                str(program),
                "age",
                "--dest",
                str(shared / "dest"),
                "--influx",
            ],
            capture_output=True,
            text=True,
            cwd=shared,
        )
    finally:
        shutil.rmtree(shared)
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(
        r"hal_backup,job=secrets bytes=0i\nhal_backup,job=slurmctld_state age_s=\d+\.\d,bytes=\d+i\n", done.stdout
    ), done.stdout
    assert done.stderr == f"hal-backup: warning: cannot read {shared}/dest/secrets: Permission denied\n"


def test_list_shows_an_unfinished_run(tmp_path, source, capsys):
    config = write_config(tmp_path, [files_job("slurmctld_state", source)])
    run_at(config, "slurmctld_state", T0)
    (tmp_path / "dest" / "slurmctld_state" / ".partial-20260301T033000Z").mkdir()
    (tmp_path / "dest" / "slurmctld_state" / "20260301T040000Z").mkdir()  # no manifest: not complete
    rc, out, _ = hal_backup(capsys, "list", "--dest", str(tmp_path / "dest"))
    assert rc == 0
    rows = [line.split() for line in out.splitlines()[1:]]
    assert [r[1] for r in rows] == ["20260301T023000Z", ".partial-20260301T033000Z", "20260301T040000Z"]
    assert rows[1][-1] == "unfinished" and rows[2][-2:] == ["no", "MANIFEST.json"]
    rc, out, _ = hal_backup(capsys, "verify", "--dest", str(tmp_path / "dest"))
    assert rc == 1 and "FAIL slurmctld_state/20260301T040000Z: no MANIFEST.json" in out
    assert ".partial-" not in out  # an unfinished run may still be running: not verified


# ---- hal-provision backup list|verify ---------------------------------------------------------


def _cli(*args: str):
    from hal_provision.cli.main import app

    return CliRunner().invoke(app, ["backup", *args])


def test_hal_provision_backup_list_and_verify(tmp_path, source):
    config = write_config(tmp_path, [files_job("slurmctld_state", source), files_job("secrets", source, secret=True)])
    [state] = run_at(config, "slurmctld_state", T0)
    [secret] = run_at(config, "secrets", T0)
    dest = tmp_path / "dest"
    done = _cli("list", str(dest))
    assert done.exit_code == 0, done.output
    for word in ("slurmctld_state", "secrets", "20260301T023000Z", "h1", "files", "secret"):
        assert word in done.stdout, word
    done = _cli("verify", str(dest))
    assert done.exit_code == 0, done.output
    assert "ok secrets/20260301T023000Z (1 file," in done.stdout and "2 snapshots verified" in done.stdout

    (secret.path / "files.tar").unlink()
    (state.path / "stray").write_text("?")
    done = _cli("verify", str(dest))
    assert done.exit_code == 1
    assert "error: secrets/20260301T023000Z: files.tar: missing" in done.stderr
    assert "error: slurmctld_state/20260301T023000Z: stray: not in the manifest" in done.stderr
    assert "Traceback" not in done.output
    done = _cli("verify", str(dest), "nothing/20260301T023000Z")
    assert done.exit_code == 1 and "error: nothing/20260301T023000Z: no such snapshot under" in done.stderr


def test_hal_provision_backup_on_a_missing_directory_exits_2(tmp_path):
    for command in ("list", "verify"):
        done = _cli(command, str(tmp_path / "nowhere"))
        assert done.exit_code == 2
        assert done.stderr.strip() == f"error: {tmp_path / 'nowhere'}: no such directory"
