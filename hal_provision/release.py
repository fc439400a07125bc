"""Signed releases of pull mode: the controller's signing key and the signed current.json.

A pull node runs as root whatever bundle its distribution point names, so the point's
current.json is signed on the controller with minisign (Debian's package; Ed25519) and each
node verifies it with the cluster's public key, which the enrolling push installed, before it
downloads anything (hal_provision/node/converge.py).

The key pair is made once per cluster on the controller, in the release-key directory
(HAL_RELEASE_KEYS, else ~/.config/hal-provision/release-keys, mode 0700): <cluster>.key (the
private part, 0600, without a passphrase: `bundle` runs unattended; the directory's mode and
the controller's root are what protect it), <cluster>.pub, and <cluster>.serial (the last
serial signed). The fleet_node role makes the same pair at enrolment when there is none
(roles/fleet_node/tasks/release_key.yml); both refuse a private key that group or others can
read, and a directory inside the repository (it would be one `git add` from being public).

current.json is an envelope, one file so that it is replaced atomically:

    {"format": "hal-provision release 1",
     "release": "<the release document, JSON, as a string>",
     "signature": "<minisign's signature file of exactly those bytes>"}

The release document: cluster, version, bundle (file name), sha256 and size of the bundle,
serial (grows with every release this key signs: a node refuses one older than what it runs),
signed and expires (UTC, ISO 8601; a node refuses an expired release). minisign's trusted
comment repeats the cluster, version and serial.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from .files import write_atomic

FORMAT = "hal-provision release 1"
KEYS_ENV = "HAL_RELEASE_KEYS"
DEFAULT_VALID_DAYS = 30
REPO = Path(__file__).resolve().parents[1]


class ReleaseError(RuntimeError):
    """The key or the signature could not be made or read; the message says what to do."""


def key_dir(environ: dict[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    if environ.get(KEYS_ENV):
        return Path(environ[KEYS_ENV])
    home = environ.get("HOME") or str(Path.home())
    return Path(environ.get("XDG_CONFIG_HOME") or Path(home) / ".config") / "hal-provision" / "release-keys"


def key_paths(cluster: str, directory: Path | None = None) -> tuple[Path, Path]:
    """(private key, public key) of a cluster."""
    directory = directory or key_dir()
    return directory / f"{cluster}.key", directory / f"{cluster}.pub"


def _inside_repo(path: Path) -> bool:
    try:
        path.resolve().relative_to(REPO)
    except ValueError:
        return False
    return (REPO / ".git").exists()


def _minisign(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["minisign", *args], input=stdin, capture_output=True, text=True, timeout=60, check=False)
    except FileNotFoundError:
        raise ReleaseError("minisign is not installed (Debian package minisign; ./bootstrap.sh installs it)") from None


def ensure_key(cluster: str, directory: Path | None = None) -> tuple[Path, Path]:
    """The cluster's key pair, made when missing; refused when its private part is readable by
    others or lies inside the repository."""
    directory = directory or key_dir()
    key, pub = key_paths(cluster, directory)
    if _inside_repo(directory):
        raise ReleaseError(
            f"{directory}: the release key must live outside the repository ({REPO}); "
            f"set {KEYS_ENV} to a directory elsewhere"
        )
    if not key.exists():
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o700)
        made = _minisign("-G", "-W", "-p", str(pub), "-s", str(key))
        if made.returncode != 0:
            raise ReleaseError(f"minisign -G: {(made.stderr or made.stdout).strip()}")
        key.chmod(0o600)
    mode = key.stat().st_mode & 0o777
    if mode & 0o077:
        raise ReleaseError(
            f"{key} is mode {mode:04o}: group or others can read the release key; "
            f"chmod 600 {key} (and consider it leaked: make a new one)"
        )
    if not pub.is_file():
        raise ReleaseError(f"{pub} is missing beside {key}")
    return key, pub


def next_serial(cluster: str, directory: Path | None = None, now: float | None = None) -> int:
    """A serial greater than every one this key directory signed before, and at least the time
    (seconds since the epoch), so that it grows across key directories restored from a backup too."""
    path = (directory or key_dir()) / f"{cluster}.serial"
    try:
        last = int(path.read_text().strip())
    except (OSError, ValueError):
        last = 0
    return max(last + 1, int(now if now is not None else time.time()))


def _record_serial(cluster: str, serial: int, directory: Path) -> None:
    write_atomic(directory / f"{cluster}.serial", f"{serial}\n", mode=0o600)


def _iso(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def release_document(
    cluster: str, current: dict, serial: int, valid_days: int = DEFAULT_VALID_DAYS, now: dt.datetime | None = None
) -> dict:
    """What a release says: the bundle's current.json fields, the cluster, serial and validity."""
    now = now or dt.datetime.now(dt.timezone.utc)
    return {
        "cluster": cluster,
        "version": current["version"],
        "bundle": current["bundle"],
        "sha256": current["sha256"],
        "size": current["size"],
        "serial": serial,
        "signed": _iso(now),
        "expires": _iso(now + dt.timedelta(days=valid_days)),
    }


def sign(document: dict, key: Path) -> bytes:
    """The envelope of `document` signed with `key` (current.json's bytes)."""
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    comment = (
        f"hal-provision release {document.get('cluster')} {document.get('version')} serial {document.get('serial')}"
    )
    with tempfile.TemporaryDirectory(prefix="hal-release-") as tmp:
        message, signature = Path(tmp) / "release.json", Path(tmp) / "release.json.minisig"
        message.write_text(text, encoding="utf-8")
        done = _minisign("-S", "-s", str(key), "-m", str(message), "-x", str(signature), "-t", comment)
        if done.returncode != 0:
            raise ReleaseError(f"minisign -S with {key}: {(done.stderr or done.stdout).strip()}")
        envelope = {"format": FORMAT, "release": text, "signature": signature.read_text(encoding="utf-8")}
    return (json.dumps(envelope, indent=1, sort_keys=True) + "\n").encode()


def sign_outputs(
    outputs: dict[str, bytes], cluster: str, valid_days: int = DEFAULT_VALID_DAYS, directory: Path | None = None
) -> dict[str, bytes]:
    """A bundle's outputs (bundle.Bundle.outputs()) with current.json replaced by its signed
    envelope; the key made first when missing, the serial recorded once signed."""
    directory = directory or key_dir()
    key, _pub = ensure_key(cluster, directory)
    current = json.loads(outputs["current.json"])
    serial = next_serial(cluster, directory)
    signed = sign(release_document(cluster, current, serial, valid_days), key)
    _record_serial(cluster, serial, directory)
    return {**outputs, "current.json": signed}


def open_envelope(text: str | bytes) -> dict | None:
    """The release document of a current.json, unverified (publish.yml and `fleet status` read
    which version a point publishes; the nodes verify); None when it is no envelope."""
    try:
        envelope = json.loads(text)
        if not isinstance(envelope, dict) or envelope.get("format") != FORMAT:
            return None
        document = json.loads(envelope["release"])
    except (ValueError, KeyError, TypeError):
        return None
    return document if isinstance(document, dict) else None


def verify(text: str | bytes, pub: Path) -> dict:
    """The release document of a current.json whose signature `pub` verifies; ReleaseError otherwise."""
    try:
        envelope = json.loads(text)
        release, signature = envelope["release"], envelope["signature"]
    except (ValueError, KeyError, TypeError):
        raise ReleaseError("current.json is not a signed release") from None
    with tempfile.TemporaryDirectory(prefix="hal-release-") as tmp:
        message, sig = Path(tmp) / "release.json", Path(tmp) / "release.json.minisig"
        message.write_text(release, encoding="utf-8")
        sig.write_text(signature, encoding="utf-8")
        done = _minisign("-V", "-q", "-p", str(pub), "-m", str(message), "-x", str(sig))
    if done.returncode != 0:
        raise ReleaseError(f"the signature does not verify with {pub}: {(done.stderr or done.stdout).strip()}")
    return json.loads(release)
