#!/usr/bin/env python3
"""hal-backup: consistent, dated, checksummed and authenticated snapshots of a host's lasting state on a shared file system.

It reads the rendered job list (/etc/hal-provision/backup.json, the same on every host) and runs
the jobs whose "host" is this host's short name, each with the consistent dump of its service:

    mariadb   mariadb-dump --single-transaction --routines --events --databases DB...  -> accounting_db.sql
    slapd     slapcat -n 0 -> config.ldif, slapcat -b SUFFIX -> data.ldif
    influxdb  influxd backup -portable -database DB -host ADDRESS                -> influxdb/DB/
    files     tar --numeric-owner -C / of the paths (modes and owners kept)       -> files.tar

Each job writes DEST/JOB/STAMP (STAMP: UTC %Y%m%dT%H%M%SZ; DEST: the destination backup.json
names for this host). The payload goes into DEST/JOB/.partial-STAMP; every file and directory is
fsynced, MANIFEST.json (each file's size and SHA-256, and an HMAC-SHA256 of the whole manifest
with this host's key) is written last, and only then is the directory renamed to STAMP: a
directory named STAMP with a MANIFEST.json is a complete snapshot, anything else is not. A failed
job removes its partial directory (one left by a killed run is removed a day later). A secret
job's snapshot is a 0700 directory of 0600 files owned by root. After a good run the newest
`keep` snapshots of the job that authenticate are kept, by the time their manifest says they
were made, and older ones removed (renamed to .removing-STAMP first, so a removal cut short
never leaves a complete-looking snapshot with files missing); one dated after the run, or one
that does not authenticate, is reported and neither counted nor removed.

The key (KEY, made once on the host by `hal-backup keygen` or installed from Ansible Vault by the
role; 0600, root's) never lies on the destination: whoever can write there can change a payload
and its checksums, not the HMAC. Without the key (`--dest DIR` without `--key`, as on the
controller) verify checks the checksums only, and says so.

    hal-backup run [--config F] [--key K] [--host H] [--job NAME]
    hal-backup list [--config F [--host H] | --dest DIR] [--key K]
    hal-backup verify [--config F [--host H] | --dest DIR] [--key K] [JOB[/STAMP] ...]
    hal-backup age [--config F [--host H] | --dest DIR] [--key K] [--influx]
    hal-backup keygen [--key K]

Exit status: 0 fine; 1 a job or a verification failed; 2 a usage or configuration error (a
missing or unreadable key too). Every failure is one line on stderr naming the job, never a
traceback. `age` exits 0 whenever it can read the destination (Telegraf's exec input drops the
output of a failed run): a job without a good snapshot is printed as `JOB none` (line protocol:
no age_s, bytes=0i). Ages are counted from the manifest's creation time and are never clamped: a
snapshot dated in the future is reported on stderr and not taken as the newest.

Standard library only: a role copies this file onto the hosts; `hal-provision backup list|verify`
imports the same code on the controller.
"""

from __future__ import annotations

import argparse
import datetime as dt
import errno
import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

FORMAT = 2  # of backup.json and of the manifests this hal-backup writes
MANIFEST_FORMATS = (1, 2)  # read: format 1 manifests (no HMAC) are listed, never authenticated
CONFIG = "/etc/hal-provision/backup.json"
# The manifests' HMAC key: on the host, never on the destination (nor in a secrets job).
KEY = "/etc/hal-provision/backup-manifest.key"
KEY_MIN_BYTES = 32
MANIFEST = "MANIFEST.json"
CREATED_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
PARTIAL = ".partial-"
REMOVING = ".removing-"
LOCK = ".lock"
STAMP_FORMAT = "%Y%m%dT%H%M%SZ"
STAMP_RE = re.compile(r"\d{8}T\d{6}Z")
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # a job's name is a directory name
STALE_PARTIAL_S = 86400
KINDS = ("mariadb", "slapd", "influxdb", "files")
# influxd's backup and restore service (its bind-address); a job's "address" names another.
# (Not "host": that key names the cluster host that runs the job.)
INFLUXDB_ADDRESS = "localhost:8088"
SQL_FILE = "accounting_db.sql"
# Debian's package of each tool a payload runs: said when the tool is missing.
PACKAGES = {"mariadb-dump": "mariadb-client", "slapcat": "slapd", "influxd": "influxdb", "tar": "tar"}
# Where root's tools are even when the caller's PATH lacks the sbin directories.
TOOL_DIRS = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
CHUNK = 1 << 20


class BackupError(Exception):
    """A job or a verification that failed: one line, exit status 1."""


class ConfigError(Exception):
    """An unusable configuration or destination given by hand: one line, exit status 2."""


# ---- the configuration (rendered from the model: files/etc/hal-provision/backup.json) ----------


# Per kind: required keys (with their type check) and optional ones.
def _str_list(value) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(v, str) and v and not v.startswith("-") for v in value)
    )


def _abs_list(value) -> bool:
    return _str_list(value) and all(v.startswith("/") for v in value)


def _text(value) -> bool:
    return isinstance(value, str) and bool(value) and not value.startswith("-")


def _abs(value) -> bool:
    return _text(value) and value.startswith("/")


_CHECKS: dict[str, tuple[Callable, str]] = {
    "databases": (_str_list, "a non-empty list of names"),
    "paths": (_abs_list, "a non-empty list of absolute paths"),
    "suffix": (_text, "an LDAP suffix such as dc=hal,dc=example"),
    "defaults_file": (_abs, "an absolute path"),
    "config_dir": (_abs, "an absolute path"),
    "address": (lambda v: _text(v) and ":" in v, "host:port"),
}
KIND_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "mariadb": (("databases",), ("defaults_file",)),
    "slapd": (("suffix",), ("config_dir",)),
    "influxdb": (("databases",), ("address",)),
    "files": (("paths",), ()),
}
COMMON_KEYS = ("name", "kind", "host", "secret")


@dataclass(frozen=True)
class Job:
    name: str
    kind: str
    host: str
    secret: bool
    options: dict  # the kind's keys: databases, suffix, paths, defaults_file, config_dir, address


@dataclass(frozen=True)
class Destination:
    path: Path  # where the host's snapshots go: DEST
    mount_point: Path  # the shared file system's mount point DEST lies on


@dataclass(frozen=True)
class Config:
    source: str
    cluster: str
    destinations: dict  # host -> Destination: each host its own (the model's backup.host_destinations)
    keep: int
    jobs: tuple[Job, ...]

    def destination(self, host: str) -> Destination:
        """`host`'s destination; ConfigError where backup.json names none for it."""
        if host not in self.destinations:
            raise ConfigError(
                f"{self.source} names no destination for host {host} (its hosts: "
                f"{', '.join(sorted(self.destinations)) or 'none'}; --host names another)"
            )
        return self.destinations[host]


def parse_config(doc, source: str = CONFIG) -> Config:
    """The configuration in `doc` (backup.json's JSON); ConfigError naming the first bad field."""

    def fail(where: str, why: str) -> ConfigError:
        return ConfigError(f"{source}: {where}: {why}")

    if not isinstance(doc, dict):
        raise fail("(top)", "not a JSON object")
    unknown = sorted(set(doc) - {"format", "cluster", "destinations", "keep", "jobs"})
    if unknown:
        raise fail(unknown[0], "unknown key")
    if doc.get("format") != FORMAT:
        raise fail("format", f"{doc.get('format')!r}: this hal-backup reads format {FORMAT}")
    cluster, given, keep, jobs = (doc.get(k) for k in ("cluster", "destinations", "keep", "jobs"))
    if not isinstance(cluster, str) or not cluster:
        raise fail("cluster", "missing or not a name")
    if not isinstance(given, dict) or not given:
        raise fail("destinations", "missing or not an object of host: {path, mount_point}")
    destinations: dict[str, Destination] = {}
    for host, entry in given.items():
        where = f"destinations.{host}"
        if not _text(host):
            raise fail(where, "not a host name")
        if not isinstance(entry, dict) or set(entry) != {"path", "mount_point"}:
            raise fail(where, "not an object of exactly path and mount_point")
        for key in ("path", "mount_point"):
            if not _abs(entry[key]) or ".." in entry[key].split("/"):
                raise fail(f"{where}.{key}", f"{entry[key]!r} is not an absolute path")
        path, mount_point = Path(entry["path"]), Path(entry["mount_point"])
        if mount_point not in (path, *path.parents):
            raise fail(f"{where}.path", f"{entry['path']} does not lie under its mount point {entry['mount_point']}")
        destinations[host] = Destination(path, mount_point)
    if not isinstance(keep, int) or isinstance(keep, bool) or keep < 1:
        raise fail("keep", f"{keep!r} is not a whole number of at least 1")
    if not isinstance(jobs, list):
        raise fail("jobs", "missing or not a list")
    parsed: list[Job] = []
    for i, entry in enumerate(jobs):
        where = f"jobs[{i}]"
        if not isinstance(entry, dict):
            raise fail(where, "not an object")
        name, kind, host, secret = entry.get("name"), entry.get("kind"), entry.get("host"), entry.get("secret", False)
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            raise fail(f"{where}.name", f"{name!r} is not a name of letters, digits, '_', '.' and '-'")
        if kind not in KINDS:
            raise fail(f"{where}.kind", f"{kind!r} is not one of {', '.join(KINDS)}")
        if not _text(host):
            raise fail(f"{where}.host", "missing or not a host name")
        if host not in destinations:
            raise fail(f"{where}.host", f"{host!r} has no entry in destinations")
        if not isinstance(secret, bool):
            raise fail(f"{where}.secret", f"{secret!r} is not true or false")
        required, optional = KIND_KEYS[kind]
        unknown = sorted(set(entry) - set(COMMON_KEYS) - set(required) - set(optional))
        if unknown:
            raise fail(
                f"{where}.{unknown[0]}",
                f"not a key of a {kind} job (its keys: {', '.join(COMMON_KEYS + required + optional)})",
            )
        for key in required + optional:
            if key not in entry and key in optional:
                continue
            ok, what = _CHECKS[key]
            if not ok(entry.get(key)):
                raise fail(
                    f"{where}.{key}", f"{'missing' if key not in entry else repr(entry[key])}: {kind} jobs need {what}"
                )
        if name in {job.name for job in parsed}:
            raise fail(f"{where}.name", f"job {name!r} is named twice")
        parsed.append(Job(name, kind, host, secret, {k: entry[k] for k in required + optional if k in entry}))
    return Config(source, cluster, destinations, keep, tuple(parsed))


def load_config(path: str | os.PathLike = CONFIG) -> Config:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigError(f"{path}: not JSON: {exc}") from None
    return parse_config(doc, str(path))


# ---- the manifests' key: HMAC-SHA256 (hmac, hashlib) over each manifest --------------------------


def load_key(path: str | os.PathLike = KEY) -> bytes:
    """The key's bytes (surrounding whitespace dropped); ConfigError, one line, where it is
    missing, open to group or others, or too short."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise ConfigError(
            f"no manifest key at {path}: the backup role makes it (hal-backup keygen), or installs "
            "the one Ansible Vault holds (backup_manifest_key); --key names another"
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot read the manifest key {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as f:
        mode = stat.S_IMODE(os.fstat(f.fileno()).st_mode)
        if mode & 0o077:
            raise ConfigError(f"the manifest key {path} is open to group or others (mode {mode:04o}): chmod 600 {path}")
        key = f.read(4096).strip()
    if len(key) < KEY_MIN_BYTES:
        raise ConfigError(f"the manifest key {path} holds {len(key)} bytes, fewer than {KEY_MIN_BYTES}")
    return key


def make_key(path: str | os.PathLike = KEY) -> bool:
    """A new random key at `path` (0600) unless there is one; True where it was made."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        load_key(path)  # an existing key must be usable
        return False
    except OSError as exc:
        raise ConfigError(f"cannot make the manifest key {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)  # O_CREAT's mode passes through the umask
        f.write(secrets.token_hex(32) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return True


def key_id(key: bytes) -> str:
    """A short name of the key, written in each manifest: which key sealed it, the key not shown."""
    return hmac.new(key, b"hal-backup key id", hashlib.sha256).hexdigest()[:16]


def _mac(manifest: dict, key: bytes) -> str:
    """The HMAC of the manifest's content but its "hmac" field, in one canonical JSON form (sorted
    keys, no spaces, ASCII): the MAC covers the values the readers use, however the file is spaced."""
    body = json.dumps(
        {k: v for k, v in manifest.items() if k != "hmac"}, sort_keys=True, separators=(",", ":"), ensure_ascii=True
    )
    return hmac.new(key, b"hal-backup manifest\n" + body.encode(), hashlib.sha256).hexdigest()


def seal(record: dict, key: bytes) -> dict:
    """`record` with the key's id and the HMAC of both."""
    sealed = dict(record, key_id=key_id(key))
    sealed["hmac"] = _mac(sealed, key)
    return sealed


def authenticity(manifest: dict, key: bytes) -> str | None:
    """Why the manifest is not this key's, unchanged; None where it is."""
    mac = manifest.get("hmac")
    if manifest.get("format") == 1 or not isinstance(mac, str):
        return f"{MANIFEST} carries no HMAC (format 1: written before manifests were authenticated)"
    if manifest.get("key_id") != key_id(key):
        return f"{MANIFEST} was sealed with another key ({manifest.get('key_id')!r}, this one is {key_id(key)!r})"
    if not hmac.compare_digest(mac, _mac(manifest, key)):
        return f"{MANIFEST} does not match its HMAC: changed after the snapshot was written"
    return None


# ---- the payload of each kind ----------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]  # argv[0] a bare tool name, found at run time (tool())
    stdout: str | None = None  # the payload file stdout goes to, relative to the snapshot
    mkdir: str | None = None  # a directory (relative) the command writes into, made first
    warn_codes: tuple[int, ...] = ()  # exit statuses that are a warning, not a failure
    hint: str | None = None  # said after a failure's message


def commands(job: Job, snapshot: Path) -> list[Command]:
    """The commands that write `job`'s payload into the directory `snapshot`, in order."""
    o = job.options
    if job.kind == "mariadb":
        # --defaults-file must come first; without it root logs in through the unix socket.
        first = (f"--defaults-file={o['defaults_file']}",) if "defaults_file" in o else ()
        return [
            Command(
                (
                    "mariadb-dump",
                    *first,
                    "--single-transaction",
                    "--routines",
                    "--events",
                    "--databases",
                    *o["databases"],
                ),
                stdout=SQL_FILE,
            )
        ]
    if job.kind == "slapd":
        conf = ("-F", o["config_dir"]) if "config_dir" in o else ()
        return [
            Command(("slapcat", *conf, "-n", "0", "-l", str(snapshot / "config.ldif"))),
            Command(("slapcat", *conf, "-b", o["suffix"], "-l", str(snapshot / "data.ldif"))),
        ]
    if job.kind == "influxdb":
        address = o.get("address", INFLUXDB_ADDRESS)
        return [
            Command(
                ("influxd", "backup", "-portable", "-database", db, "-host", address, str(snapshot / "influxdb" / db)),
                mkdir="influxdb",
                hint=f"does {address} answer, and has it a database {db}?",
            )  # influxd says just "EOF"
            for db in o["databases"]
        ]
    # files: member names relative to / (no "Removing leading '/'" noise; restore with -C /).
    # GNU tar's exit status 1 on --create means a file changed while it was read (slurmctld
    # renames its state files into place): kept, with tar's line printed as a warning.
    members = [p.strip("/") or "." for p in o["paths"]]
    return [
        Command(
            ("tar", "--create", "--file", str(snapshot / "files.tar"), "--numeric-owner", "-C", "/", "--", *members),
            warn_codes=(1,),
        )
    ]


def tool(name: str) -> str:
    """The path of the program `name`: on PATH, else in root's usual directories."""
    found = shutil.which(name) or shutil.which(name, path=os.pathsep.join(TOOL_DIRS))
    if found is None:
        package = PACKAGES.get(name)
        raise BackupError(f"{name} not found" + (f" (Debian package {package})" if package else ""))
    return found


def _why(stderr: bytes) -> str:
    """The last line that says something of a failed command's stderr."""
    lines = [line.strip() for line in stderr.decode(errors="replace").splitlines() if line.strip()]
    lines = [line for line in lines if "Exiting with failure status due to previous errors" not in line] or lines
    return lines[-1] if lines else "no message"


def execute(command: Command, snapshot: Path) -> str | None:
    """Run one payload command; BackupError naming it when it fails; a warning line or None."""
    name = command.argv[0]
    argv = [tool(name), *command.argv[1:]]
    if command.mkdir:
        (snapshot / command.mkdir).mkdir(exist_ok=True)
    out = open(snapshot / command.stdout, "wb") if command.stdout else None
    try:
        done = subprocess.run(
            argv, stdin=subprocess.DEVNULL, stdout=out or subprocess.DEVNULL, stderr=subprocess.PIPE, check=False
        )
    except OSError as exc:
        raise BackupError(f"{name}: {exc.strerror or exc}") from None
    finally:
        if out is not None:
            out.close()
    if done.returncode in command.warn_codes and not _full(snapshot, done.stderr):
        return f"{name}: {_why(done.stderr)}"
    if done.returncode != 0:
        how = f"killed by signal {-done.returncode}" if done.returncode < 0 else f"exit {done.returncode}"
        if _full(snapshot, done.stderr):  # tar's last line is "Error is not recoverable", mariadb-dump's "errno 28"
            raise BackupError(
                f"No space left on device: the destination's file system is full "
                f"({name} failed, {how}: {_why(done.stderr)})"
            )
        hint = f" ({command.hint})" if command.hint else ""
        raise BackupError(f"{name} failed ({how}): {_why(done.stderr)}{hint}")
    return None


def _full(snapshot: Path, stderr: bytes) -> bool:
    """Whether a failed command ran out of room: its stderr says so, or the file system has none."""
    text = stderr.decode(errors="replace")
    if "No space left on device" in text or "errno 28" in text.lower() or "errno: 28" in text.lower():
        return True
    try:
        return os.statvfs(snapshot).f_bavail == 0
    except OSError:
        return False


def check_paths(job: Job) -> None:
    """A files job's paths exist (tar would go on without them and exit 2 at the end)."""
    for path in job.options.get("paths", ()):
        if not os.path.lexists(path):
            raise BackupError(f"{path}: no such file or directory")


# ---- writing a snapshot ----------------------------------------------------------------------


def stamp_of(when: dt.datetime) -> str:
    return when.astimezone(dt.timezone.utc).strftime(STAMP_FORMAT)


def parse_stamp(stamp: str) -> dt.datetime:
    return dt.datetime.strptime(stamp, STAMP_FORMAT).replace(tzinfo=dt.timezone.utc)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _payload_files(root: Path) -> tuple[list[str], list[str]]:
    """Relative names of everything under `root` but MANIFEST.json: (entries that are not
    directories, directories), each sorted. Symbolic links are entries, never followed."""
    entries, dirs = [], []
    for here, subdirs, names in os.walk(root):
        rel = Path(here).relative_to(root)
        for d in list(subdirs):
            if os.path.islink(os.path.join(here, d)):  # walk lists a link to a directory as a directory
                subdirs.remove(d)
                names.append(d)
            else:
                dirs.append((rel / d).as_posix())
        entries.extend((rel / n).as_posix() for n in names if not (rel == Path(".") and n == MANIFEST))
    return sorted(entries), sorted(dirs)


def _hash(path: Path, sync: bool = False) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            digest.update(chunk)
        if sync:
            os.fsync(f.fileno())
    return digest.hexdigest()


def _make_private(root: Path) -> None:
    """A secret snapshot: directories 0700, files 0600, owned by root (when run as root)."""
    chown = os.geteuid() == 0
    for here, dirs, files in os.walk(root):
        for name, mode in [(".", 0o700)] + [(d, 0o700) for d in dirs] + [(f, 0o600) for f in files]:
            path = os.path.join(here, name)
            if os.path.islink(path):
                continue
            os.chmod(path, mode)
            st = os.stat(path)
            if chown and (st.st_uid, st.st_gid) != (0, 0):
                try:
                    os.chown(path, 0, 0)
                except PermissionError:
                    raise BackupError(
                        f"cannot make {path} owned by root (a file system that squashes root? "
                        "the backup destination must keep root's ownership)"
                    ) from None


def _write_manifest(snapshot: Path, record: dict) -> None:
    path = snapshot / MANIFEST
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(record, indent=1, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
    if record["secret"]:
        os.chmod(path, 0o600)


def check_destination(destination: Destination) -> None:
    """BackupError unless the destination is an existing, writable directory on a mounted file
    system. It is never created here: a missing destination is most often a shared file system
    that is not mounted."""
    dest = destination.path
    if not os.path.ismount(destination.mount_point):
        raise BackupError(
            f"{destination.mount_point} is not a mount point: the file system of the destination "
            f"{dest} is not mounted (hal-backup writes nothing there)"
        )
    if not dest.exists():
        raise BackupError(
            f"destination {dest} does not exist: is its file system mounted? (hal-backup does not create it)"
        )
    if not dest.is_dir():
        raise BackupError(f"destination {dest} is not a directory")
    if not os.access(dest, os.W_OK | os.X_OK):
        raise BackupError(
            f"destination {dest} is not writable (mounted read-only, or a file system that squashes root?)"
        )


@dataclass
class Result:
    job: str
    path: Path
    files: int
    bytes: int
    seconds: float
    removed: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> str:
        line = f"{self.job}: {self.path}, {count(self.files, 'file')}, {human_size(self.bytes)} in {self.seconds:.2f} s"
        if self.removed:
            line += f"; removed {count(len(self.removed), 'older snapshot')}"
        return line


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _lock(jobdir: Path):
    """An exclusive lock on the job (one run at a time); the open file holds it."""
    lock = open(jobdir / LOCK, "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise BackupError("another run of this job is in progress") from None
    except OSError as exc:  # a file system without locks: the stamped names still keep runs apart
        if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
            raise
    return lock


def _new_partial(jobdir: Path, mode: int, now: Callable[[], dt.datetime], sleep) -> tuple[str, dt.datetime, Path]:
    """A fresh .partial-STAMP directory; a stamp already taken (two runs in one second) waits
    for the next second."""
    for _ in range(5):
        when = now().astimezone(dt.timezone.utc)
        stamp = stamp_of(when)
        partial = jobdir / f"{PARTIAL}{stamp}"
        if not (jobdir / stamp).exists():
            try:
                partial.mkdir(mode=mode)
                os.chmod(partial, mode)  # mkdir's mode passes through the umask
                return stamp, when, partial
            except FileExistsError:
                pass
        sleep(1.01 - when.microsecond / 1e6)
    raise BackupError(f"no free snapshot name in {jobdir}")


def run_job(
    config: Config,
    job: Job,
    host: str,
    key: bytes,
    now: Callable[[], dt.datetime] = _utcnow,
    clock: Callable[[], float] = time.monotonic,
    sleep=time.sleep,
) -> Result:
    """Write one snapshot of `job` under `host`'s destination, its manifest sealed with `key`,
    then prune; BackupError (not naming the job: the caller does) on any failure, with the
    partial directory removed."""
    destination = config.destination(host)
    check_destination(destination)
    mode = 0o700 if job.secret else 0o755
    jobdir = destination.path / job.name
    try:
        jobdir.mkdir(mode=mode, exist_ok=True)
        if job.secret:
            os.chmod(jobdir, mode)
        lock = _lock(jobdir)
    except OSError as exc:
        raise BackupError(f"cannot use {jobdir}: {exc.strerror or exc}") from None
    with lock:
        stamp, when, partial = _new_partial(jobdir, mode, now, sleep)
        start = clock()
        umask = os.umask(0o077 if job.secret else 0o022)
        try:
            warnings = _fill(job, partial)
            if job.secret:
                _make_private(partial)
            files = []
            entries, dirs = _payload_files(partial)
            for name in entries:
                path = partial / name
                if path.is_symlink() or not path.is_file():
                    raise BackupError(f"{name}: the payload holds something other than a regular file")
                files.append({"name": name, "bytes": path.stat().st_size, "sha256": _hash(path, sync=True)})
            for d in reversed(dirs):
                _fsync_dir(partial / d)
            record = seal(
                {
                    "format": FORMAT,
                    "cluster": config.cluster,
                    "job": job.name,
                    "kind": job.kind,
                    "host": host,
                    "created": when.strftime(CREATED_FORMAT),
                    "seconds": round(clock() - start, 3),
                    "secret": job.secret,
                    "files": files,
                },
                key,
            )
            _write_manifest(partial, record)
            _fsync_dir(partial)
            final = jobdir / stamp
            os.rename(partial, final)
        except BaseException as exc:
            shutil.rmtree(partial, ignore_errors=True)
            if isinstance(exc, OSError):
                where = f": {exc.filename}" if exc.filename else ""
                raise BackupError(f"{exc.strerror or exc}{where}") from None
            raise
        finally:
            os.umask(umask)
        try:
            _fsync_dir(jobdir)
            removed, notes = prune(jobdir, config.keep, when, key, config.cluster)
        except OSError as exc:
            raise BackupError(f"{final} is written, but pruning {jobdir} failed: {exc.strerror or exc}") from None
    return Result(
        job.name, final, len(files), sum(f["bytes"] for f in files), record["seconds"], removed, warnings + notes
    )


def _fill(job: Job, partial: Path) -> list[str]:
    check_paths(job)
    warnings = []
    for command in commands(job, partial):
        warning = execute(command, partial)
        if warning:
            warnings.append(warning)
    return warnings


def prune(
    jobdir: Path, keep: int, now: dt.datetime, key: bytes, cluster: str | None = None
) -> tuple[list[str], list[str]]:
    """Keep the newest `keep` snapshots that authenticate with `key`, newest by the creation time
    their manifests give; remove older ones, .removing-* left by a cut short removal, and
    .partial-* started more than a day before `now`. A snapshot that does not authenticate, or is
    dated after `now` (a clock set wrong then, or a forged name), is neither counted nor removed:
    it is said. (The stamps removed, those lines.)"""
    counted, notes = [], []
    for snap in job_snapshots(jobdir):
        if not snap.complete:
            continue
        problem = trust_problem(snap, key, cluster)
        if problem is not None:
            notes.append(f"{snap.name}: {problem}: not counted among the {keep} kept, not removed")
        elif snap.created > now:
            notes.append(f"{snap.name}: {future(snap, now)}: not counted as the newest, not removed")
        else:
            counted.append(snap)
    counted.sort(key=lambda snap: snap.created)
    removed = []
    for snap in counted[:-keep]:
        os.rename(snap.path, jobdir / f"{REMOVING}{snap.stamp}")
        removed.append(snap.stamp)
    for entry in sorted(jobdir.iterdir()):
        name = entry.name
        stale = False
        if name.startswith(REMOVING):
            stale = True
        elif name.startswith(PARTIAL) and STAMP_RE.fullmatch(name[len(PARTIAL) :]):
            started = parse_stamp(name[len(PARTIAL) :])
            stale = (now - started).total_seconds() > STALE_PARTIAL_S
        if stale:
            shutil.rmtree(entry, ignore_errors=True)
    return removed, notes


# ---- reading snapshots: list, verify, age ------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    job: str
    stamp: str  # "" for a job directory that cannot be read (a secret job's, read by another user)
    path: Path
    manifest: dict | None
    problem: str | None = None  # why it is not complete: unfinished, no or unreadable MANIFEST.json
    partial: bool = False

    @property
    def complete(self) -> bool:
        return self.problem is None

    @property
    def name(self) -> str:
        return f"{self.job}/{self.path.name}" if self.stamp else self.job

    @property
    def files(self) -> list[dict]:
        return self.manifest["files"] if self.manifest else []

    @property
    def bytes(self) -> int:
        return sum(f["bytes"] for f in self.files)

    @property
    def made(self) -> dt.datetime | None:
        """When the manifest says the snapshot was made; None where it says nothing readable."""
        try:
            return dt.datetime.strptime(self.manifest["created"], CREATED_FORMAT).replace(tzinfo=dt.timezone.utc)
        except (KeyError, TypeError, ValueError):
            return None

    @property
    def created(self) -> dt.datetime | None:
        """The manifest's creation time, else the stamp's (an unfinished run's)."""
        if self.made is not None:
            return self.made
        return parse_stamp(self.stamp) if self.stamp else None

    def get(self, key: str, default=None):
        return self.manifest.get(key, default) if self.manifest else default


def read_manifest(path: Path) -> tuple[dict | None, str | None]:
    """(the manifest, None) or (None, why it cannot be used)."""
    try:
        doc = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, f"no {MANIFEST}"
    except OSError as exc:
        return None, f"{MANIFEST}: {exc.strerror or exc}"
    except ValueError as exc:
        return None, f"{MANIFEST} is not JSON: {exc}"
    if not isinstance(doc, dict) or doc.get("format") not in MANIFEST_FORMATS:
        return None, f"{MANIFEST} is not of format {' or '.join(map(str, MANIFEST_FORMATS))}"
    files = doc.get("files")
    good = isinstance(files, list) and all(
        isinstance(f, dict)
        and isinstance(f.get("name"), str)
        and isinstance(f.get("bytes"), int)
        and isinstance(f.get("sha256"), str)
        and not f["name"].startswith("/")
        and ".." not in f["name"].split("/")
        for f in files
    )
    if not good:
        return None, f"{MANIFEST} has no valid list of files"
    return doc, None


def job_snapshots(jobdir: Path) -> list[Snapshot]:
    """The snapshots (complete or not) and unfinished runs in one job's directory, oldest first."""
    found = []
    for entry in sorted(jobdir.iterdir(), key=lambda p: p.name.removeprefix(PARTIAL)):
        if not entry.is_dir() or entry.is_symlink():
            continue
        if STAMP_RE.fullmatch(entry.name):
            manifest, problem = read_manifest(entry)
            found.append(Snapshot(jobdir.name, entry.name, entry, manifest, problem))
        elif entry.name.startswith(PARTIAL) and STAMP_RE.fullmatch(entry.name[len(PARTIAL) :]):
            found.append(Snapshot(jobdir.name, entry.name[len(PARTIAL) :], entry, None, "unfinished", partial=True))
    return found


def snapshots(dest: Path) -> list[Snapshot]:
    """Every job's snapshots under the destination `dest`, by job, oldest first."""
    if not dest.is_dir():
        raise ConfigError(f"{dest}: no such directory" if not dest.exists() else f"{dest}: not a directory")
    found: list[Snapshot] = []
    try:
        jobdirs = sorted(p for p in dest.iterdir() if p.is_dir() and not p.is_symlink() and NAME_RE.fullmatch(p.name))
    except PermissionError as exc:
        raise ConfigError(f"cannot read {dest}: {exc.strerror}") from None
    for jobdir in jobdirs:
        try:
            found.extend(job_snapshots(jobdir))
        except PermissionError as exc:  # a secret job's directory, read by another user than root
            found.append(Snapshot(jobdir.name, "", jobdir, None, f"cannot read {jobdir}: {exc.strerror}"))
    return found


def coherence(snapshot: Snapshot, cluster: str | None = None) -> list[str]:
    """Whether the manifest belongs where it lies: its job is the directory's, its creation time
    the stamp's (a renamed snapshot would reorder the job's snapshots), its cluster this one's."""
    m = snapshot.manifest
    problems = []
    if m.get("job") != snapshot.job:
        problems.append(f"{MANIFEST} names job {m.get('job')!r}")
    if snapshot.made is None:
        problems.append(f"{MANIFEST} has no creation time")
    elif stamp_of(snapshot.made) != snapshot.stamp:
        problems.append(f"{MANIFEST} says it was made at {m['created']}, not at its directory's stamp")
    if cluster is not None and m.get("cluster") != cluster:
        problems.append(f"{MANIFEST} names cluster {m.get('cluster')!r}, not {cluster!r}")
    return problems


def trust_problem(snapshot: Snapshot, key: bytes | None, cluster: str | None = None) -> str | None:
    """Why a complete snapshot's manifest cannot be trusted (does not authenticate with `key`, or
    lies elsewhere than it was written); None where it can (or, without a key, looks coherent)."""
    problems = coherence(snapshot, cluster)
    if key is not None:
        problem = authenticity(snapshot.manifest, key)
        if problem is not None:
            problems.insert(0, problem)
    return "; ".join(problems) or None


def future(snapshot: Snapshot, now: dt.datetime) -> str:
    return f"dated in the future (made {snapshot.created.strftime(CREATED_FORMAT)}, now {now.strftime(CREATED_FORMAT)})"


def verify(
    snapshot: Snapshot, by_size: bool = False, key: bytes | None = None, cluster: str | None = None
) -> list[str]:
    """What is wrong with a snapshot, each problem naming its file (empty: it verifies): with
    `key`, first that its manifest authenticates; that the manifest belongs where it lies; then
    every file against the manifest. by_size: only that each listed file is there with its size
    (cheap: no reading, no search for extras)."""
    if snapshot.manifest is None:
        return [snapshot.problem or "not a snapshot"]
    problems = []
    if key is not None:
        problem = authenticity(snapshot.manifest, key)
        if problem is not None:
            problems.append(problem)
    problems += coherence(snapshot, cluster)
    for entry in snapshot.files:
        name, path = entry["name"], snapshot.path / entry["name"]
        try:
            st = path.lstat()
        except FileNotFoundError:
            problems.append(f"{name}: missing")
            continue
        except OSError as exc:
            problems.append(f"{name}: {exc.strerror}")
            continue
        if not path.is_file() or path.is_symlink():
            problems.append(f"{name}: not a regular file")
        elif st.st_size != entry["bytes"]:
            problems.append(f"{name}: {st.st_size} bytes, the manifest says {entry['bytes']}")
        elif not by_size:
            try:
                if _hash(path) != entry["sha256"]:
                    problems.append(f"{name}: SHA-256 differs from the manifest")
            except OSError as exc:
                problems.append(f"{name}: {exc.strerror}")
    if not by_size:
        listed = {entry["name"] for entry in snapshot.files}
        try:
            entries, _dirs = _payload_files(snapshot.path)
        except OSError as exc:
            return problems + [f"cannot read {exc.filename}: {exc.strerror}"]
        problems.extend(f"{name}: not in the manifest" for name in entries if name not in listed)
    return problems


def select(found: list[Snapshot], specs: Iterable[str]) -> tuple[list[Snapshot], list[str]]:
    """The snapshots JOB or JOB/STAMP names (all but unfinished ones without specs) and the specs
    that name none."""
    specs = list(specs)
    finished = [s for s in found if not s.partial]
    if not specs:
        return finished, []
    chosen: list[Snapshot] = []
    unknown = []
    for spec in specs:
        job, _, stamp = spec.strip("/").partition("/")
        hits = [s for s in finished if s.job == job and (not stamp or s.stamp == stamp)]
        if not hits:
            unknown.append(spec)
        chosen.extend(s for s in hits if s not in chosen)
    return chosen, unknown


@dataclass(frozen=True)
class Age:
    job: str
    seconds: float | None  # since the newest complete snapshot that verifies by size; None: there is none
    bytes: int
    stamp: str | None

    def text(self) -> str:
        return f"{self.job} {'none' if self.seconds is None else format(self.seconds, '.0f')}"

    def line_protocol(self) -> str:
        fields = ([f"age_s={self.seconds:.1f}"] if self.seconds is not None else []) + [f"bytes={self.bytes}i"]
        return f"hal_backup,job={self.job} {','.join(fields)}"


def ages(
    dest: Path,
    jobs: Iterable[str] | None = None,
    now: dt.datetime | None = None,
    warn: Callable[[str], None] = lambda _line: None,
    key: bytes | None = None,
    cluster: str | None = None,
) -> list[Age]:
    """Per job (those given, else every job directory under `dest`), the age of its newest
    complete snapshot, by the creation time its manifest gives, whose manifest authenticates
    with `key` (where there is one) and whose files are all there at their size. A snapshot dated
    after `now` is not taken (an age is never negative, and never clamped to 0): it is said through
    `warn`, as are one that does not authenticate and a job directory that cannot be read (the
    job then counts as none)."""
    now = now or _utcnow()
    found = snapshots(dest)
    names = list(jobs) if jobs is not None else sorted({s.job for s in found})
    result = []
    for job in names:
        good = None
        for snap in (s for s in found if s.job == job and s.complete):
            problem = trust_problem(snap, key, cluster)
            if problem is not None:
                warn(f"{snap.name}: {problem}: not counted")
            elif snap.created > now:
                warn(f"{snap.name}: {future(snap, now)}: not counted")
            elif not verify(snap, by_size=True) and (good is None or snap.created > good.created):
                good = snap
        if good is None:
            result.append(Age(job, None, 0, None))
        else:
            result.append(Age(job, (now - good.created).total_seconds(), good.bytes, good.stamp))
        unreadable = next((s for s in found if s.job == job and not s.stamp), None)
        if unreadable is not None:
            warn(unreadable.problem)
    return result


def count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' if n != 1 else ''}"


def human_size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def human_age(seconds: float) -> str:
    """Rounded down to its unit; a negative age (a snapshot dated in the future) keeps its sign."""
    if seconds < 0:
        return "-" + human_age(-seconds)
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600:02d}h"


def rows(found: list[Snapshot], now: dt.datetime | None = None, key: bytes | None = None) -> list[tuple[str, ...]]:
    """The list's rows: job, snapshot, host, kind, size, files, age, note (secret; dated in the
    future; with `key`, whether it authenticates; without one, a manifest without an HMAC)."""
    now = now or _utcnow()
    out = []
    for s in found:
        age = human_age((now - s.created).total_seconds()) if s.created else "-"
        if s.complete:
            notes = ["secret"] if s.get("secret") else []
            if s.created > now:
                notes.append("future")
            if key is not None and trust_problem(s, key) is not None:
                notes.append("NOT AUTHENTIC")
            elif key is None and s.get("format") == 1:
                notes.append("no HMAC")
            out.append(
                (
                    s.job,
                    s.stamp,
                    str(s.get("host", "?")),
                    str(s.get("kind", "?")),
                    human_size(s.bytes),
                    str(len(s.files)),
                    age,
                    ", ".join(notes),
                )
            )
        else:
            out.append((s.job, s.path.name if s.stamp else "-", "-", "-", "-", "-", age, s.problem or ""))
    return out


HEADER = ("JOB", "SNAPSHOT", "HOST", "KIND", "SIZE", "FILES", "AGE", "NOTE")


# ---- the command line ------------------------------------------------------------------------


@dataclass(frozen=True)
class Where:
    """What a reading command reads: the destination, and what it can check there."""

    dest: Path
    config: Config | None
    host: str
    key: bytes | None  # None: checksums only (no --key beside --dest)
    key_path: str | None


def _host(args) -> str:
    return args.host or socket.gethostname().split(".")[0]


def _where(args, need_key: bool = True) -> Where:
    """--dest DIR (the key only with --key), or the configuration's destination of this host
    (the key at --key, else KEY: needed unless `need_key` is false, then used where readable)."""
    host = _host(args)
    if args.dest is not None:
        key = load_key(args.key) if args.key else None
        return Where(Path(args.dest), None, host, key, args.key)
    config = load_config(args.config)
    dest = config.destination(host).path
    path = args.key or KEY
    try:
        key = load_key(path)
    except ConfigError:
        if need_key:
            raise
        key = None
    return Where(dest, config, host, key, path)


def cmd_run(args) -> int:
    config = load_config(args.config)
    host = _host(args)
    jobs = [job for job in config.jobs if job.host == host]
    if args.job:
        named = [job for job in config.jobs if job.name == args.job]
        if not named:
            raise ConfigError(
                f"{config.source} has no job {args.job!r} "
                f"(its jobs: {', '.join(j.name for j in config.jobs) or 'none'})"
            )
        if named[0].host != host:
            raise ConfigError(
                f"job {args.job} runs on {named[0].host}, not on {host} (--host {named[0].host} "
                "runs it here all the same)"
            )
        jobs = named
    if not jobs:
        print(f"hal-backup: {config.source} has no job for host {host}")
        return EXIT_OK
    key = load_key(args.key or KEY)
    try:
        check_destination(config.destination(host))
    except BackupError as exc:
        print(f"hal-backup: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    failed = 0
    for job in jobs:
        try:
            result = run_job(config, job, host, key)
        except BackupError as exc:
            print(f"hal-backup: error: job {job.name}: {exc}", file=sys.stderr)
            failed += 1
            continue
        for warning in result.warnings:
            print(f"hal-backup: warning: job {job.name}: {warning}", file=sys.stderr)
        print(f"hal-backup: {result.summary()}")
    return EXIT_FAILED if failed else EXIT_OK


def cmd_list(args) -> int:
    where = _where(args, need_key=False)
    table = [HEADER, *rows(snapshots(where.dest), key=where.key)]
    if len(table) == 1:
        print(f"no snapshots under {where.dest}")
        return EXIT_OK
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADER))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    return EXIT_OK


# Said after a verification without the key: what it did not check.
CHECKSUMS_ONLY = (
    "checksums only: without the host's key (--key) a payload rewritten together with its manifest is not detected"
)


def cmd_verify(args) -> int:
    where = _where(args)
    cluster = where.config.cluster if where.config else None
    now = _utcnow()
    chosen, unknown = select(snapshots(where.dest), args.snapshots)
    failed = 0
    for spec in unknown:
        print(f"FAIL {spec}: no such snapshot under {where.dest}")
        failed += 1
    for snap in chosen:
        problems = verify(snap, key=where.key, cluster=cluster)
        if problems:
            failed += 1
            for problem in problems:
                print(f"FAIL {snap.name}: {problem}")
        else:
            later = f"; {future(snap, now)}" if snap.created > now else ""
            print(f"ok   {snap.name} ({count(len(snap.files), 'file')}, {human_size(snap.bytes)}{later})")
    if not chosen and not unknown:
        print(f"FAIL no snapshots under {where.dest}")
        return EXIT_FAILED
    checked = "authenticated with " + (where.key_path or KEY) if where.key is not None else CHECKSUMS_ONLY
    print(f"{count(len(chosen), 'snapshot')} checked, {failed} failed ({checked})")
    return EXIT_FAILED if failed else EXIT_OK


def cmd_age(args) -> int:
    where = _where(args)
    jobs = [job.name for job in where.config.jobs if job.host == where.host] if where.config else None
    result = ages(
        where.dest,
        jobs,
        key=where.key,
        cluster=where.config.cluster if where.config else None,
        warn=lambda line: print(f"hal-backup: warning: {line}", file=sys.stderr),
    )
    lines = [a.line_protocol() if args.influx else a.text() for a in result]
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")
    return EXIT_OK


def cmd_keygen(args) -> int:
    path = args.key or KEY
    print(f"hal-backup: made {path}" if make_key(path) else f"hal-backup: {path} is there, kept")
    return EXIT_OK


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hal-backup", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="{run,list,verify,age,keygen}")

    def where(p: argparse.ArgumentParser, dest_too: bool = True) -> None:
        group = p.add_mutually_exclusive_group() if dest_too else p
        group.add_argument("--config", default=CONFIG, help=f"the job list (default {CONFIG})")
        if dest_too:
            group.add_argument(
                "--dest", default=None, help="read this destination directory instead of the configuration's"
            )
        p.add_argument("--host", default=None, help="this host's jobs and destination (default: its short name)")
        p.add_argument(
            "--key", default=None, help=f"the manifests' HMAC key (default {KEY}; beside --dest: none, checksums only)"
        )

    run = sub.add_parser("run", help="write a snapshot of each job of this host, then prune old ones")
    where(run, dest_too=False)
    run.add_argument("--job", default=None, help="run only this job")
    run.set_defaults(func=cmd_run)
    lister = sub.add_parser("list", help="the snapshots under the destination")
    where(lister)
    lister.set_defaults(func=cmd_list)
    verifier = sub.add_parser(
        "verify", help="authenticate each manifest and re-hash every file against it; exit 1 on any difference"
    )
    where(verifier)
    verifier.add_argument("snapshots", nargs="*", metavar="JOB[/STAMP]", help="what to verify (default: all)")
    verifier.set_defaults(func=cmd_verify)
    ager = sub.add_parser("age", help="per job of this host, seconds since its newest good snapshot")
    where(ager)
    ager.add_argument("--influx", action="store_true", help="print InfluxDB line protocol (Telegraf's exec input)")
    ager.set_defaults(func=cmd_age)
    keygen = sub.add_parser("keygen", help=f"make the manifests' key (default {KEY}) unless there is one")
    keygen.add_argument("--key", default=None, help=f"where (default {KEY})")
    keygen.set_defaults(func=cmd_keygen)
    return parser


def _terminated(signum, _frame) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # systemd stops a run with SIGTERM: unwind, so that run_job removes its partial directory.
    previous = signal.signal(signal.SIGTERM, _terminated) if args.command == "run" else None
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"hal-backup: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BackupError as exc:
        print(f"hal-backup: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except BrokenPipeError:  # `hal-backup list | head`
        return EXIT_OK
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
