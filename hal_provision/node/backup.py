#!/usr/bin/env python3
"""hal-backup: consistent, dated, checksummed snapshots of a host's lasting state on a shared file system.

It reads the rendered job list (/etc/hal-provision/backup.json, the same on every host) and runs
the jobs whose "host" is this host's short name, each with the consistent dump of its service:

    mariadb   mariadb-dump --single-transaction --routines --events --databases DB...  -> accounting_db.sql
    slapd     slapcat -n 0 -> config.ldif, slapcat -b SUFFIX -> data.ldif
    influxdb  influxd backup -portable -database DB -host ADDRESS                -> influxdb/DB/
    files     tar --numeric-owner -C / of the paths (modes and owners kept)       -> files.tar

Each job writes DEST/JOB/STAMP (STAMP: UTC %Y%m%dT%H%M%SZ). The payload goes into
DEST/JOB/.partial-STAMP; every file and directory is fsynced, MANIFEST.json (each file's size
and SHA-256) is written last, and only then is the directory renamed to STAMP: a directory named
STAMP with a MANIFEST.json is a complete snapshot, anything else is not. A failed job removes its
partial directory (one left by a killed run is removed a day later). A secret job's snapshot is
a 0700 directory of 0600 files owned by root. After a good run the newest `keep` complete
snapshots of the job are kept and older ones removed (renamed to .removing-STAMP first, so a
removal cut short never leaves a complete-looking snapshot with files missing).

    hal-backup run [--config F] [--host H] [--job NAME]
    hal-backup list [--config F | --dest DIR]
    hal-backup verify [--config F | --dest DIR] [JOB[/STAMP] ...]
    hal-backup age [--config F | --dest DIR] [--influx]

Exit status: 0 fine; 1 a job or a verification failed; 2 a usage or configuration error. Every
failure is one line on stderr naming the job, never a traceback. `age` exits 0 whenever it can
read the destination (Telegraf's exec input drops the output of a failed run): a job without a
good snapshot is printed as `JOB none` (line protocol: no age_s, bytes=0i).

Standard library only: a role copies this file onto the hosts; `hal-provision backup list|verify`
imports the same code on the controller.
"""

from __future__ import annotations

import argparse
import datetime as dt
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

FORMAT = 1
CONFIG = "/etc/hal-provision/backup.json"
MANIFEST = "MANIFEST.json"
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
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) and v and not v.startswith("-")
                                                           for v in value)


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
class Config:
    source: str
    cluster: str
    destination: Path
    keep: int
    jobs: tuple[Job, ...]


def parse_config(doc, source: str = CONFIG) -> Config:
    """The configuration in `doc` (backup.json's JSON); ConfigError naming the first bad field."""
    def fail(where: str, why: str) -> ConfigError:
        return ConfigError(f"{source}: {where}: {why}")

    if not isinstance(doc, dict):
        raise fail("(top)", "not a JSON object")
    unknown = sorted(set(doc) - {"format", "cluster", "destination", "keep", "jobs"})
    if unknown:
        raise fail(unknown[0], "unknown key")
    if doc.get("format") != FORMAT:
        raise fail("format", f"{doc.get('format')!r}: this hal-backup reads format {FORMAT}")
    cluster, destination, keep, jobs = (doc.get(k) for k in ("cluster", "destination", "keep", "jobs"))
    if not isinstance(cluster, str) or not cluster:
        raise fail("cluster", "missing or not a name")
    if not _abs(destination):
        raise fail("destination", f"{destination!r} is not an absolute path")
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
        if not isinstance(secret, bool):
            raise fail(f"{where}.secret", f"{secret!r} is not true or false")
        required, optional = KIND_KEYS[kind]
        unknown = sorted(set(entry) - set(COMMON_KEYS) - set(required) - set(optional))
        if unknown:
            raise fail(f"{where}.{unknown[0]}", f"not a key of a {kind} job "
                       f"(its keys: {', '.join(COMMON_KEYS + required + optional)})")
        for key in required + optional:
            if key not in entry and key in optional:
                continue
            ok, what = _CHECKS[key]
            if not ok(entry.get(key)):
                raise fail(f"{where}.{key}", f"{'missing' if key not in entry else repr(entry[key])}: "
                           f"{kind} jobs need {what}")
        if name in {job.name for job in parsed}:
            raise fail(f"{where}.name", f"job {name!r} is named twice")
        parsed.append(Job(name, kind, host, secret, {k: entry[k] for k in required + optional if k in entry}))
    return Config(source, cluster, Path(destination), keep, tuple(parsed))


def load_config(path: str | os.PathLike = CONFIG) -> Config:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigError(f"{path}: not JSON: {exc}") from None
    return parse_config(doc, str(path))


# ---- the payload of each kind ----------------------------------------------------------------

@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]           # argv[0] a bare tool name, found at run time (tool())
    stdout: str | None = None       # the payload file stdout goes to, relative to the snapshot
    mkdir: str | None = None        # a directory (relative) the command writes into, made first
    warn_codes: tuple[int, ...] = ()  # exit statuses that are a warning, not a failure
    hint: str | None = None         # said after a failure's message


def commands(job: Job, snapshot: Path) -> list[Command]:
    """The commands that write `job`'s payload into the directory `snapshot`, in order."""
    o = job.options
    if job.kind == "mariadb":
        # --defaults-file must come first; without it root logs in through the unix socket.
        first = (f"--defaults-file={o['defaults_file']}",) if "defaults_file" in o else ()
        return [Command(("mariadb-dump", *first, "--single-transaction", "--routines", "--events",
                         "--databases", *o["databases"]), stdout=SQL_FILE)]
    if job.kind == "slapd":
        conf = ("-F", o["config_dir"]) if "config_dir" in o else ()
        return [Command(("slapcat", *conf, "-n", "0", "-l", str(snapshot / "config.ldif"))),
                Command(("slapcat", *conf, "-b", o["suffix"], "-l", str(snapshot / "data.ldif")))]
    if job.kind == "influxdb":
        address = o.get("address", INFLUXDB_ADDRESS)
        return [Command(("influxd", "backup", "-portable", "-database", db, "-host", address,
                         str(snapshot / "influxdb" / db)), mkdir="influxdb",
                        hint=f"does {address} answer, and has it a database {db}?")  # influxd says just "EOF"
                for db in o["databases"]]
    # files: member names relative to / (no "Removing leading '/'" noise; restore with -C /).
    # GNU tar's exit status 1 on --create means a file changed while it was read (slurmctld
    # renames its state files into place): kept, with tar's line printed as a warning.
    members = [p.strip("/") or "." for p in o["paths"]]
    return [Command(("tar", "--create", "--file", str(snapshot / "files.tar"), "--numeric-owner",
                     "-C", "/", "--", *members), warn_codes=(1,))]


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
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=out or subprocess.DEVNULL,
                              stderr=subprocess.PIPE, check=False)
    except OSError as exc:
        raise BackupError(f"{name}: {exc.strerror or exc}") from None
    finally:
        if out is not None:
            out.close()
    if done.returncode in command.warn_codes:
        return f"{name}: {_why(done.stderr)}"
    if done.returncode != 0:
        how = f"killed by signal {-done.returncode}" if done.returncode < 0 else f"exit {done.returncode}"
        hint = f" ({command.hint})" if command.hint else ""
        raise BackupError(f"{name} failed ({how}): {_why(done.stderr)}{hint}")
    return None


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
                    raise BackupError(f"cannot make {path} owned by root (a file system that squashes root? "
                                      "the backup destination must keep root's ownership)") from None


def _write_manifest(snapshot: Path, record: dict) -> None:
    path = snapshot / MANIFEST
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(record, indent=1, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
    if record["secret"]:
        os.chmod(path, 0o600)


def check_destination(dest: Path) -> None:
    """BackupError unless `dest` is an existing, writable directory. It is never created here:
    a missing destination is most often a shared file system that is not mounted."""
    if not dest.exists():
        raise BackupError(f"destination {dest} does not exist: is its file system mounted? "
                          "(hal-backup does not create it)")
    if not dest.is_dir():
        raise BackupError(f"destination {dest} is not a directory")
    if not os.access(dest, os.W_OK | os.X_OK):
        raise BackupError(f"destination {dest} is not writable (mounted read-only, or a file system "
                          "that squashes root?)")


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


def run_job(config: Config, job: Job, host: str, now: Callable[[], dt.datetime] = _utcnow,
            clock: Callable[[], float] = time.monotonic, sleep=time.sleep) -> Result:
    """Write one snapshot of `job` under config.destination, then prune; BackupError (not
    naming the job: the caller does) on any failure, with the partial directory removed."""
    check_destination(config.destination)
    mode = 0o700 if job.secret else 0o755
    jobdir = config.destination / job.name
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
            record = {"format": FORMAT, "cluster": config.cluster, "job": job.name, "kind": job.kind, "host": host,
                      "created": when.strftime("%Y-%m-%dT%H:%M:%SZ"), "seconds": round(clock() - start, 3),
                      "secret": job.secret, "files": files}
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
            removed = prune(jobdir, config.keep, when)
        except OSError as exc:
            raise BackupError(f"{final} is written, but pruning {jobdir} failed: {exc.strerror or exc}") from None
    return Result(job.name, final, len(files), sum(f["bytes"] for f in files), record["seconds"], removed, warnings)


def _fill(job: Job, partial: Path) -> list[str]:
    check_paths(job)
    warnings = []
    for command in commands(job, partial):
        warning = execute(command, partial)
        if warning:
            warnings.append(warning)
    return warnings


def prune(jobdir: Path, keep: int, now: dt.datetime) -> list[str]:
    """Keep the newest `keep` complete snapshots; remove older ones, .removing-* left by a cut
    short removal, and .partial-* started more than a day before `now`. The stamps removed."""
    complete = [s.stamp for s in job_snapshots(jobdir) if s.complete]
    removed = []
    for stamp in complete[:-keep]:
        os.rename(jobdir / stamp, jobdir / f"{REMOVING}{stamp}")
        removed.append(stamp)
    for entry in sorted(jobdir.iterdir()):
        name = entry.name
        stale = False
        if name.startswith(REMOVING):
            stale = True
        elif name.startswith(PARTIAL) and STAMP_RE.fullmatch(name[len(PARTIAL):]):
            started = parse_stamp(name[len(PARTIAL):])
            stale = (now - started).total_seconds() > STALE_PARTIAL_S
        if stale:
            shutil.rmtree(entry, ignore_errors=True)
    return removed


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
    def created(self) -> dt.datetime | None:
        if self.manifest:
            try:
                return dt.datetime.strptime(self.manifest["created"], "%Y-%m-%dT%H:%M:%SZ").replace(
                    tzinfo=dt.timezone.utc)
            except (KeyError, TypeError, ValueError):
                pass
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
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return None, f"{MANIFEST} is not of format {FORMAT}"
    files = doc.get("files")
    good = isinstance(files, list) and all(
        isinstance(f, dict) and isinstance(f.get("name"), str) and isinstance(f.get("bytes"), int)
        and isinstance(f.get("sha256"), str) and not f["name"].startswith("/") and ".." not in f["name"].split("/")
        for f in files)
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
        elif entry.name.startswith(PARTIAL) and STAMP_RE.fullmatch(entry.name[len(PARTIAL):]):
            found.append(Snapshot(jobdir.name, entry.name[len(PARTIAL):], entry, None, "unfinished", partial=True))
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


def verify(snapshot: Snapshot, by_size: bool = False) -> list[str]:
    """What is wrong with a snapshot, each problem naming its file (empty: it verifies). by_size:
    only that each listed file is there with its size (cheap: no reading, no search for extras)."""
    if snapshot.manifest is None:
        return [snapshot.problem or "not a snapshot"]
    problems = []
    if snapshot.manifest.get("job") != snapshot.job:
        problems.append(f"{MANIFEST} names job {snapshot.manifest.get('job')!r}")
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


def ages(dest: Path, jobs: Iterable[str] | None = None, now: dt.datetime | None = None,
         warn: Callable[[str], None] = lambda _line: None) -> list[Age]:
    """Per job (those given, else every job directory under `dest`), the age of its newest
    complete snapshot whose files are all there at their size. A job directory that cannot be
    read counts as none, and is said through `warn`."""
    now = now or _utcnow()
    found = snapshots(dest)
    names = list(jobs) if jobs is not None else sorted({s.job for s in found})
    result = []
    for job in names:
        good = next((s for s in reversed(found) if s.job == job and s.complete and not verify(s, by_size=True)), None)
        if good is None:
            result.append(Age(job, None, 0, None))
        else:
            result.append(Age(job, max(0.0, (now - good.created).total_seconds()), good.bytes, good.stamp))
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
    s = int(max(seconds, 0))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600:02d}h"


def rows(found: list[Snapshot], now: dt.datetime | None = None) -> list[tuple[str, ...]]:
    """The list's rows: job, snapshot, host, kind, size, files, age, note."""
    now = now or _utcnow()
    out = []
    for s in found:
        age = human_age((now - s.created).total_seconds()) if s.created else "-"
        if s.complete:
            note = "secret" if s.get("secret") else ""
            out.append((s.job, s.stamp, str(s.get("host", "?")), str(s.get("kind", "?")), human_size(s.bytes),
                        str(len(s.files)), age, note))
        else:
            out.append((s.job, s.path.name if s.stamp else "-", "-", "-", "-", "-", age, s.problem or ""))
    return out


HEADER = ("JOB", "SNAPSHOT", "HOST", "KIND", "SIZE", "FILES", "AGE", "NOTE")


# ---- the command line ------------------------------------------------------------------------

def _destination(args) -> tuple[Path, Config | None]:
    if args.dest is not None:
        return Path(args.dest), None
    config = load_config(args.config)
    return config.destination, config


def cmd_run(args) -> int:
    config = load_config(args.config)
    host = args.host or socket.gethostname().split(".")[0]
    jobs = [job for job in config.jobs if job.host == host]
    if args.job:
        named = [job for job in config.jobs if job.name == args.job]
        if not named:
            raise ConfigError(f"{config.source} has no job {args.job!r} "
                              f"(its jobs: {', '.join(j.name for j in config.jobs) or 'none'})")
        if named[0].host != host:
            raise ConfigError(f"job {args.job} runs on {named[0].host}, not on {host} (--host {named[0].host} "
                              "runs it here all the same)")
        jobs = named
    if not jobs:
        print(f"hal-backup: {config.source} has no job for host {host}")
        return EXIT_OK
    try:
        check_destination(config.destination)
    except BackupError as exc:
        print(f"hal-backup: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    failed = 0
    for job in jobs:
        try:
            result = run_job(config, job, host)
        except BackupError as exc:
            print(f"hal-backup: error: job {job.name}: {exc}", file=sys.stderr)
            failed += 1
            continue
        for warning in result.warnings:
            print(f"hal-backup: warning: job {job.name}: {warning}", file=sys.stderr)
        print(f"hal-backup: {result.summary()}")
    return EXIT_FAILED if failed else EXIT_OK


def cmd_list(args) -> int:
    dest, _config = _destination(args)
    table = [HEADER, *rows(snapshots(dest))]
    if len(table) == 1:
        print(f"no snapshots under {dest}")
        return EXIT_OK
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADER))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    return EXIT_OK


def cmd_verify(args) -> int:
    dest, _config = _destination(args)
    chosen, unknown = select(snapshots(dest), args.snapshots)
    failed = 0
    for spec in unknown:
        print(f"FAIL {spec}: no such snapshot under {dest}")
        failed += 1
    for snap in chosen:
        problems = verify(snap)
        if problems:
            failed += 1
            for problem in problems:
                print(f"FAIL {snap.name}: {problem}")
        else:
            print(f"ok   {snap.name} ({count(len(snap.files), 'file')}, {human_size(snap.bytes)})")
    if not chosen and not unknown:
        print(f"FAIL no snapshots under {dest}")
        return EXIT_FAILED
    print(f"{count(len(chosen), 'snapshot')} checked, {failed} failed")
    return EXIT_FAILED if failed else EXIT_OK


def cmd_age(args) -> int:
    dest, config = _destination(args)
    result = ages(dest, [job.name for job in config.jobs] if config else None,
                  warn=lambda line: print(f"hal-backup: warning: {line}", file=sys.stderr))
    lines = [a.line_protocol() if args.influx else a.text() for a in result]
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")
    return EXIT_OK


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hal-backup", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="{run,list,verify,age}")

    def where(p: argparse.ArgumentParser, dest_too: bool = True) -> None:
        group = p.add_mutually_exclusive_group() if dest_too else p
        group.add_argument("--config", default=CONFIG, help=f"the job list (default {CONFIG})")
        if dest_too:
            group.add_argument("--dest", default=None,
                               help="read this destination directory instead of the configuration's")

    run = sub.add_parser("run", help="write a snapshot of each job of this host, then prune old ones")
    where(run, dest_too=False)
    run.add_argument("--host", default=None, help="run the jobs of this host (default: this host's short name)")
    run.add_argument("--job", default=None, help="run only this job")
    run.set_defaults(func=cmd_run)
    lister = sub.add_parser("list", help="the snapshots under the destination")
    where(lister)
    lister.set_defaults(func=cmd_list)
    verifier = sub.add_parser("verify", help="re-hash every file against its manifest; exit 1 on any difference")
    where(verifier)
    verifier.add_argument("snapshots", nargs="*", metavar="JOB[/STAMP]", help="what to verify (default: all)")
    verifier.set_defaults(func=cmd_verify)
    ager = sub.add_parser("age", help="per job, seconds since its newest good snapshot")
    where(ager)
    ager.add_argument("--influx", action="store_true", help="print InfluxDB line protocol (Telegraf's exec input)")
    ager.set_defaults(func=cmd_age)
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
