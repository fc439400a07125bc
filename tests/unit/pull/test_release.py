"""Signed releases (hal_provision/release.py) with the real minisign: the controller's key pair,
the signed current.json `hal-provision bundle` writes, and what verifies and what does not.
What a node then refuses is tests/unit/node/test_converge.py's; the fleet scenario forges releases on
a real distribution point (tests/infra/test_pull.py)."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hal_provision import release

REPO = Path(__file__).resolve().parents[3]
FLEET = REPO / "tests/data/clusters/fleet.yml"
pytestmark = pytest.mark.skipif(
    shutil.which("minisign") is None,
    reason="minisign is not installed (Debian package minisign; ./bootstrap.sh installs it)",
)
CURRENT = {"version": "0123456789abcdef", "bundle": "0123456789abcdef.tar.gz", "sha256": "ab" * 32, "size": 1234}


def test_the_key_pair_is_made_once_private_part_0600_in_a_0700_directory(tmp_path):
    keys = tmp_path / "keys"
    key, pub = release.ensure_key("fl", keys)
    assert (key, pub) == (keys / "fl.key", keys / "fl.pub")
    assert stat.S_IMODE(keys.stat().st_mode) == 0o700 and stat.S_IMODE(key.stat().st_mode) == 0o600
    first = key.read_bytes()
    release.ensure_key("fl", keys)
    assert key.read_bytes() == first  # made once: the nodes keep trusting it


def test_a_key_others_can_read_is_refused(tmp_path):
    key, _pub = release.ensure_key("fl", tmp_path)
    key.chmod(0o640)
    with pytest.raises(release.ReleaseError, match=r"mode 0640: group or others can read .* chmod 600"):
        release.ensure_key("fl", tmp_path)


def test_a_key_directory_inside_the_repository_is_refused():
    with pytest.raises(release.ReleaseError, match="outside the repository"):
        release.ensure_key("fl", REPO / "keys")
    assert not (REPO / "keys").exists()


def test_the_default_key_directory_is_the_users_and_can_be_named(tmp_path):
    assert release.key_dir({"HOME": str(tmp_path)}) == tmp_path / ".config/hal-provision/release-keys"
    assert release.key_dir({"HOME": "/h", "XDG_CONFIG_HOME": str(tmp_path)}) == tmp_path / "hal-provision/release-keys"
    assert release.key_dir({"HOME": "/h", release.KEYS_ENV: str(tmp_path / "k")}) == tmp_path / "k"


def test_serials_only_grow(tmp_path):
    release.ensure_key("fl", tmp_path)
    first = release.sign_outputs({"current.json": json.dumps(CURRENT).encode()}, "fl", directory=tmp_path)
    second = release.sign_outputs({"current.json": json.dumps(CURRENT).encode()}, "fl", directory=tmp_path)
    a, b = (release.open_envelope(o["current.json"])["serial"] for o in (first, second))
    assert b > a
    # A serial recorded in the future (a clock set back since) still grows.
    (tmp_path / "fl.serial").write_text(f"{b + 10_000_000}\n")
    assert release.next_serial("fl", tmp_path) == b + 10_000_001


def test_a_signed_release_verifies_with_its_key_and_says_what_it_publishes(tmp_path):
    outputs = release.sign_outputs(
        {"x.tar.gz": b"x", "current.json": json.dumps(CURRENT).encode()}, "fl", valid_days=7, directory=tmp_path
    )
    text = outputs["current.json"]
    doc = release.verify(text, tmp_path / "fl.pub")
    assert {k: doc[k] for k in CURRENT} == CURRENT and doc["cluster"] == "fl"
    assert doc["expires"] > doc["signed"] and doc["expires"].endswith("Z")
    assert release.open_envelope(text) == doc
    envelope = json.loads(text)
    assert envelope["format"] == release.FORMAT and "trusted comment: hal-provision release fl" in envelope["signature"]
    assert outputs["x.tar.gz"] == b"x"


def test_another_key_a_rewritten_release_and_no_signature_do_not_verify(tmp_path):
    release.ensure_key("other", tmp_path)
    text = release.sign_outputs({"current.json": json.dumps(CURRENT).encode()}, "fl", directory=tmp_path)[
        "current.json"
    ]
    with pytest.raises(release.ReleaseError, match="does not verify"):
        release.verify(text, tmp_path / "other.pub")
    envelope = json.loads(text)
    envelope["release"] = envelope["release"].replace(CURRENT["sha256"], "cd" * 32)
    with pytest.raises(release.ReleaseError, match="does not verify"):
        release.verify(json.dumps(envelope), tmp_path / "fl.pub")
    with pytest.raises(release.ReleaseError, match="not a signed release"):
        release.verify(json.dumps(CURRENT), tmp_path / "fl.pub")
    assert release.open_envelope(json.dumps(CURRENT)) is None


def test_without_minisign_the_error_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(release.ReleaseError, match="minisign is not installed"):
        release.ensure_key("fl", tmp_path / "keys")


def _bundle(out: Path, keys: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(keys.parent),
        "HAL_RELEASE_KEYS": str(keys),
    }
    return subprocess.run(
        [sys.executable, "-m", "hal_provision.cli", "bundle", str(FLEET), "--out", str(out), *extra],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


def test_bundle_signs_current_json_and_no_private_key_leaves_the_key_directory(tmp_path):
    keys = tmp_path / "keys"
    done = _bundle(tmp_path / "out", keys)
    assert done.returncode == 0, done.stderr
    assert "release serial" in done.stdout and "Traceback" not in done.stderr
    doc = release.verify((tmp_path / "out/current.json").read_text(), keys / "fl.pub")
    tarball = tmp_path / "out" / doc["bundle"]
    import hashlib

    assert doc["sha256"] == hashlib.sha256(tarball.read_bytes()).hexdigest() and doc["size"] == tarball.stat().st_size
    private = (keys / "fl.key").read_text().splitlines()[1].encode()
    for path in (tmp_path / "out").iterdir():  # the key is in no output, not even compressed in the bundle
        data = path.read_bytes()
        if path.suffix == ".gz":
            import gzip

            data = gzip.decompress(data)
        assert private not in data, path


def test_bundle_with_a_readable_key_fails_with_one_error_and_writes_nothing(tmp_path):
    keys = tmp_path / "keys"
    release.ensure_key("fl", keys)
    (keys / "fl.key").chmod(0o644)
    done = _bundle(tmp_path / "out", keys)
    assert done.returncode == 2 and "cannot sign the release" in done.stderr and "chmod 600" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()
