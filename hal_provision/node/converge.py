#!/usr/bin/env python3
"""hal-converge: a pull node converges itself to the bundle its distribution point publishes.

The rendered /etc/hal-provision/deploy.json (the same on every host) names this node's point
(`nodes[<short hostname>]`, a URL). One run:

1. GET <url>current.json: a signed release (hal_provision/release.py: an envelope of the release
   document and minisign's signature of it). The signature must verify with the cluster's
   public key (deploy.json's release_key, installed by the enrolling push), the release must
   be this cluster's, unexpired, and its serial no older than the one this node took last;
   otherwise the run records state "refused" with the reason, downloads nothing and changes
   nothing. When the version is the one this node last converged successfully (and no
   --force), the run records state "current" and stops.
2. Downloads <url><bundle> (streamed to disk, cut off past MAX_BUNDLE_BYTES), checks its SHA-256
   (a mismatch is refused and nothing is unpacked), unpacks it (files and directories under
   bundle/ only, at most MAX_MEMBERS and MAX_UNPACKED_BYTES, owned by root, no setuid/setgid or
   group/other write) into BUNDLES/.unpack-<version> and renames that to
   BUNDLES/<version> (a directory named after a version is always complete); keeps the two
   newest bundles.
3. Runs `ansible-playbook -c local -i bundle/inventory/hosts.json -l HOST bundle/playbooks/pull.yml
   -e hal_rendered_dir=<bundle>/files --check`. No change: state "current" at the new version.
   A change (or a check that fails: the real run decides): drains the node in Slurm
   (reason "hal-provision converge: version V"), waits at most drain_wait_s for its jobs (never
   cancels one; jobs still running: state "waiting", the node stays drained, exit 0, and the next
   run goes on), converges for real, and resumes the node only if hal-converge drained it (its
   reason is its own, by drains.py's rule; an administrator's drain is left alone).
4. A failed converge drains the node with the reason "hal-provision converge failed: version V:
   TASK" and leaves it drained.

The result goes atomically (0644) to deploy.json's version_file:
    {"host", "version", "previous", "state", "changed", "failed_task", "drained",
     "serial", "expires", "image", "started", "finished", "seconds"}
state: current | changed | failed | waiting | refused | unreachable-source. `version` is the
version this run dealt with (the published one; the running one when the source is unreachable
or its release was refused), `serial` and `expires` those of the newest release this node
accepted (a later release must not have a smaller serial), `previous`
the version the node had converged successfully before this run (null: never), `image` the
network-boot image the node runs, NAME@VERSION from /etc/hal-provision/image.json (null on a
node installed by other means). The version a
node runs is therefore `version` when state is current or changed, else `previous`.

A node that Slurm does not know yet (first converge: no Slurm yet, or sinfo does not list the
node) has no jobs to wait for: it converges without a drain; one that has never converged either
(a new node, a stateless node after its boot) skips the check run too.

    hal-converge [--config F] [--host H] [--bundles DIR] [--force] [--poll-s S]

Exit status: 0 current, changed or waiting; 1 failed, refused or source unreachable; 2 a usage or
configuration error. Every failure is one line on stderr, never a traceback. Two runs never
overlap: a run that finds the lock held says so and exits 0.

Standard library only, and Debian's minisign for the signature: the fleet_node role installs
both, and copies this file onto the nodes as
/usr/local/sbin/hal-converge (drains.py, the drain rule it imports, beside it), and every bundle
carries both (bundle/hal_provision/node/) so a node updates its own program. (The host lists it
reads are expanded already in deploy.json: it needs no hal_provision.hostlist.)
"""

from __future__ import annotations

import argparse
import datetime as dt
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

try:
    from . import drains
except ImportError:  # run as a script beside drains.py (the fleet_node role's layout)
    import drains

CONFIG = "/etc/hal-provision/deploy.json"
BUNDLES = "/var/lib/hal-provision/bundles"
KEEP = 2
DRAIN_REASON = "hal-provision converge"
HTTP_TIMEOUT_S = 60
# What a point may send and a bundle may hold: a release is about 10 MB, a few thousand members.
# Past these a download is cut off and an archive refused before it is unpacked, so a hostile
# or broken point can neither fill the node's memory or disk nor unpack a gzip bomb.
MAX_CURRENT_BYTES = 64 << 10
MAX_BUNDLE_BYTES = 256 << 20
MAX_MEMBERS = 50_000
MAX_UNPACKED_BYTES = 1 << 30
CHUNK = 1 << 20
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
# The states a run records in last.json (`hal-provision fleet` reads them from here): the
# successful ones leave the node at `version`.
SUCCESSFUL = ("current", "changed")
STATES = (*SUCCESSFUL, "failed", "waiting", "refused", "unreachable-source")


class ConfigError(Exception):
    """deploy.json or the command line is wrong: nothing was tried."""


class ConvergeError(Exception):
    """A run that could not go on (source, bundle, Slurm)."""


class Refused(ConvergeError):
    """A published release this node must not take: unsigned, signed with another key, another
    cluster's, expired, or older than the one it took last."""


def run_command(
    argv: list[str], *, env: dict | None = None, cwd: str | None = None, timeout: float | None = None
) -> subprocess.CompletedProcess:
    """Every command hal-converge runs goes through here (the tests replace it), but minisign
    (verify_signature): the tests verify real signatures."""
    return subprocess.run(argv, env=env, cwd=cwd, timeout=timeout, capture_output=True, text=True)


sleep = time.sleep  # the tests replace it too


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _iso(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


# ---- configuration and the record ------------------------------------------------------------


def load_config(path: Path) -> dict:
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not JSON: {exc.msg} at line {exc.lineno}") from None
    for key, kind in (
        ("version_file", str),
        ("nodes", dict),
        ("drain_wait_s", int),
        ("release_key", str),
        ("cluster", str),
    ):
        if not isinstance(doc.get(key), kind):
            raise ConfigError(f"{path}: {key} is missing or not a {kind.__name__}")
    return doc


def read_last(path: Path) -> dict:
    """The previous run's result ({} when none, or when it cannot be read)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return doc if isinstance(doc, dict) else {}


def running_version(last: dict) -> str | None:
    """The version this node last converged successfully."""
    if last.get("state") in SUCCESSFUL:
        return last.get("version")
    return last.get("previous")


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ---- the source ------------------------------------------------------------------------------


def _get(url: str, limit: int, into=None):
    """The body of GET URL (at most LIMIT bytes, else refused): returned, or streamed into the
    binary file INTO (then its sha256 is returned)."""
    digest, size, chunks = hashlib.sha256(), 0, []
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as response:
            while True:
                chunk = response.read(min(CHUNK, limit + 1 - size))
                if not chunk:
                    break
                size += len(chunk)
                if size > limit:
                    raise ConvergeError(f"GET {url}: more than {limit:,} bytes: refused")
                digest.update(chunk)
                if into is None:
                    chunks.append(chunk)
                else:
                    into.write(chunk)
        return b"".join(chunks) if into is None else digest.hexdigest()
    except urllib.error.HTTPError as exc:
        raise ConvergeError(f"GET {url}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ConvergeError(f"GET {url}: {reason}") from None


RELEASE_FORMAT = "hal-provision release 1"  # hal_provision/release.py's FORMAT


def verify_signature(message: bytes, signature: bytes, public_key: str) -> str | None:
    """None when minisign verifies `signature` of `message` with `public_key` (a file); else why not."""
    with tempfile.TemporaryDirectory(prefix="hal-release-") as tmp:
        msg, sig = Path(tmp) / "release.json", Path(tmp) / "release.json.minisig"
        msg.write_bytes(message)
        sig.write_bytes(signature)
        try:
            done = subprocess.run(
                ["minisign", "-V", "-q", "-p", public_key, "-m", str(msg), "-x", str(sig)],
                capture_output=True,
                text=True,
                timeout=60,
            )
        except FileNotFoundError:
            return "minisign is not installed"
        except subprocess.TimeoutExpired:
            return "minisign did not answer within 60 s"
    if done.returncode == 0:
        return None
    return " ".join((done.stderr or done.stdout or f"minisign exited {done.returncode}").split())


def check_release(raw: bytes, config: dict, last_serial: int | None, now: dt.datetime | None = None) -> dict:
    """The release document of a published current.json, once its signature verifies with the
    cluster's key and it is this cluster's, unexpired and no older than `last_serial`; Refused
    with the reason otherwise."""
    try:
        envelope = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise Refused("current.json is not JSON") from None
    if (
        not isinstance(envelope, dict)
        or envelope.get("format") != RELEASE_FORMAT
        or not isinstance(envelope.get("release"), str)
        or not isinstance(envelope.get("signature"), str)
    ):
        raise Refused("current.json is not a signed release (no signature): unsigned or forged")
    release = envelope["release"].encode()
    why = verify_signature(release, envelope["signature"].encode(), config["release_key"])
    if why is not None:
        raise Refused(f"the signature does not verify with {config['release_key']}: {why}")
    try:
        doc = json.loads(release)
    except json.JSONDecodeError:
        raise Refused("the signed release is not JSON") from None
    if (
        not isinstance(doc, dict)
        or not all(
            isinstance(doc.get(k), str) and doc[k] for k in ("cluster", "version", "bundle", "sha256", "expires")
        )
        or not isinstance(doc.get("serial"), int)
        or not isinstance(doc.get("size"), int)
    ):
        raise Refused("the signed release lacks cluster, version, bundle, sha256, size, serial or expires")
    if doc["cluster"] != config["cluster"]:
        raise Refused(f"the release is cluster {doc['cluster']!r}'s, this node is {config['cluster']!r}'s")
    if "/" in doc["bundle"] or "/" in doc["version"] or doc["version"].startswith("."):
        raise Refused(f"the release names a path, not a file: {doc['bundle']!r}")
    try:
        expires = dt.datetime.strptime(doc["expires"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
    except ValueError:
        raise Refused(f"the release's expiry {doc['expires']!r} is not a UTC time") from None
    if expires <= (now or _now()):
        raise Refused(f"release {doc['version']} expired at {doc['expires']}: publish a new one")
    if last_serial is not None and doc["serial"] < last_serial:
        raise Refused(
            f"release {doc['version']} has serial {doc['serial']}, older than {last_serial}, the "
            "release this node took last: a rollback, refused (publish the older model as a new release)"
        )
    return doc


def published(url: str, config: dict, last_serial: int | None) -> dict:
    return check_release(_get(url + "current.json", MAX_CURRENT_BYTES), config, last_serial)


def _extract(tar: tarfile.TarFile, into: Path) -> None:
    """Every member under INTO, and only regular files and directories below `bundle/` (a bundle
    holds nothing else), at most MAX_MEMBERS of them and MAX_UNPACKED_BYTES in all (counted from
    the headers as they are read, before anything is unpacked), each owned by root and without
    setuid, setgid, sticky or group/other write bits. That is what tarfile's "data" filter does
    where this Python has it (3.11.4 on; Debian 12 ships 3.11.2): done here by hand, and the
    filter applied as well where it exists."""
    members, total = [], 0
    for member in tar:  # headers one at a time: a bomb is refused at its first member over the cap
        parts = Path(member.name).parts
        if (
            member.name.startswith("/")
            or ".." in parts
            or not parts
            or parts[0] != "bundle"
            or not (member.isfile() or member.isdir())
        ):
            raise tarfile.TarError(f"member {member.name!r} is not a file or directory under bundle/")
        total += member.size
        if len(members) >= MAX_MEMBERS or total > MAX_UNPACKED_BYTES:
            raise tarfile.TarError(f"more than {MAX_MEMBERS:,} members or {MAX_UNPACKED_BYTES:,} bytes unpacked")
        member.mode &= 0o755  # no setuid, setgid or sticky bit; no write for group or others
        member.uid = member.gid = 0
        member.uname = member.gname = "root"
        members.append(member)
    if hasattr(tarfile, "data_filter"):
        tar.extractall(into, members=members, filter="data")
    else:
        tar.extractall(into, members=members)


def fetch_bundle(url: str, current: dict, bundles: Path) -> Path:
    """BUNDLES/<version> (its `bundle/` inside), downloaded, verified and unpacked once."""
    target = bundles / current["version"]
    if (target / "bundle").is_dir():
        os.utime(target)
        return target
    bundles.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".unpack-{current['version']}-", dir=bundles))
    try:
        archive = staging / current["bundle"]
        with open(archive, "wb") as stream:
            digest = _get(url + current["bundle"], min(current["size"], MAX_BUNDLE_BYTES), into=stream)
        if digest != current["sha256"].lower():
            raise ConvergeError(
                f"{current['bundle']}: sha256 {digest} is not the published "
                f"{current['sha256']}: refused, nothing unpacked"
            )
        try:
            with tarfile.open(archive, "r:gz") as tar:
                _extract(tar, staging)
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise ConvergeError(f"{current['bundle']}: cannot unpack: {exc}") from None
        archive.unlink()
        if not (staging / "bundle" / "playbooks" / "pull.yml").is_file():
            raise ConvergeError(f"{current['bundle']}: no bundle/playbooks/pull.yml inside")
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    prune(bundles, keep=KEEP)
    return target


def prune(bundles: Path, keep: int = KEEP) -> list[str]:
    """Removes all but the `keep` most recently used bundles; returns the removed versions."""
    versions = sorted(
        (p for p in bundles.iterdir() if p.is_dir() and not p.name.startswith(".")),
        key=lambda p: (p.stat().st_mtime, p.name),
        reverse=True,
    )
    for old in versions[keep:]:
        shutil.rmtree(old, ignore_errors=True)
    return [p.name for p in versions[keep:]]


# ---- Ansible ---------------------------------------------------------------------------------

MAX_TASKS_SHOWN = 20  # the changed tasks' names last.json keeps, in run order


def ansible(bundle: Path, host: str, check: bool) -> tuple[int, str | None, list[str]]:
    """(changed, failed task or None, the changed tasks' names) of one local run of the bundle's
    pull.yml."""
    argv = [
        "ansible-playbook",
        "-c",
        "local",
        "-i",
        str(bundle / "inventory" / "hosts.json"),
        "-l",
        host,
        str(bundle / "playbooks" / "pull.yml"),
        # Extra variables win over the inventory's: a connection it names (ssh) is not this run's.
        "-e",
        f"hal_rendered_dir={bundle / 'files'}",
        "-e",
        "ansible_connection=local",
    ] + (["--check"] if check else [])
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(bundle / "ansible.cfg"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.json",
        "ANSIBLE_NOCOLOR": "1",
    }
    try:
        done = run_command(argv, env=env, cwd=str(bundle))
    except OSError as exc:
        return 0, f"ansible-playbook: {exc.strerror}", []
    return parse_ansible(done.returncode, done.stdout, done.stderr, host)


def parse_ansible(returncode: int, stdout: str, stderr: str, host: str) -> tuple[int, str | None, list[str]]:
    # The JSON callback's document, then whatever other callbacks print (ansible.posix.timer).
    try:
        doc = json.JSONDecoder().raw_decode(stdout[stdout.index("{") :])[0] if "{" in stdout else None
    except json.JSONDecodeError:
        doc = None
    if not isinstance(doc, dict):
        last = (stderr.strip().splitlines() or stdout.strip().splitlines() or ["no output"])[-1]
        return 0, f"ansible-playbook exited {returncode}: {last.strip()}", []
    stats = doc.get("stats", {}).get(host, {})
    failed, changed_tasks = None, []
    for play in doc.get("plays", []):
        for task in play.get("tasks", []):
            result = task.get("hosts", {}).get(host, {})
            if result.get("changed"):
                changed_tasks.append(task.get("task", {}).get("name") or "unnamed task")
            if (result.get("failed") and not result.get("ignore_errors")) or result.get("unreachable"):
                failed = task.get("task", {}).get("name") or "unnamed task"
    if failed is None and (returncode != 0 or stats.get("failures") or stats.get("unreachable")):
        failed = f"ansible-playbook exited {returncode}"
    return int(stats.get("changed", 0)), failed, changed_tasks[:MAX_TASKS_SHOWN]


# ---- Slurm -----------------------------------------------------------------------------------


def slurm_node(host: str) -> dict | None:
    """{"state": ..., "reason": ...} of the node (as drains.parse reads sinfo), or None when
    Slurm does not know it here (no Slurm yet, or the node is not in slurm.conf)."""
    try:
        done = run_command(["sinfo", "--noheader", "--Node", f"--nodes={host}", "--format=%T|%E"], timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    line = done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else ""
    parsed = drains.parse(line)
    return None if parsed is None else {"state": parsed[0], "reason": parsed[1]}


def drained_by_us(node: dict | None) -> bool:
    return bool(node) and drains.is_drained(node["state"]) and drains.ours(node["reason"], DRAIN_REASON)


def drained_by_others(node: dict | None) -> bool:
    return bool(node) and drains.is_drained(node["state"]) and not drains.ours(node["reason"], DRAIN_REASON)


def scontrol_update(host: str, *settings: str) -> None:
    argv = ["scontrol", "update", f"nodename={host}", *settings]
    try:
        done = run_command(argv, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConvergeError(f"{' '.join(argv[:4])}: {exc}") from None
    if done.returncode != 0:
        raise ConvergeError(f"{' '.join(argv[:4])}: {(done.stderr or done.stdout).strip()}")


def jobs_on(host: str) -> list[str]:
    done = run_command(
        [
            "squeue",
            "--noheader",
            f"--nodelist={host}",
            "--states=RUNNING,SUSPENDED,COMPLETING,CONFIGURING",
            "--format=%i",
        ],
        timeout=60,
    )
    if done.returncode != 0:
        raise ConvergeError(f"squeue --nodelist={host}: {(done.stderr or done.stdout).strip()}")
    return done.stdout.split()


def wait_for_jobs(host: str, wait_s: float, poll_s: float) -> list[str]:
    """The jobs still running on the node after at most wait_s seconds ([] when none)."""
    deadline = time.monotonic() + wait_s
    while True:
        jobs = jobs_on(host)
        left = deadline - time.monotonic()
        if not jobs or left <= 0:
            return jobs
        sleep(min(poll_s, left))


# ---- one run ---------------------------------------------------------------------------------


def short_hostname() -> str:
    done = run_command(["hostname", "--short"])
    name = done.stdout.strip()
    if done.returncode != 0 or not name:
        raise ConfigError("cannot tell this host's short name (hostname --short)")
    return name


IMAGE_RECORD = Path("/etc/hal-provision/image.json")  # images/recipe.py's IMAGE_RECORD, baked into each image


def booted_image(record: Path = IMAGE_RECORD) -> str | None:
    """NAME@VERSION of the network-boot image this node runs; None without one (or unreadable)."""
    try:
        data = json.loads(record.read_text())
        return f"{data['name']}@{data['version']}"
    except (OSError, ValueError, KeyError, TypeError):
        return None


def converge(config: dict, host: str, bundles: Path, force: bool = False, poll_s: float = 10.0) -> dict:
    """One run; returns the result (not yet written)."""
    last = read_last(Path(config["version_file"]))
    before = running_version(last)
    url = config["nodes"].get(host)
    if not url:
        raise ConfigError(f"{host} is not a pull node of deploy.json (nodes)")
    url = url if url.endswith("/") else url + "/"
    last_serial = last.get("serial") if isinstance(last.get("serial"), int) else None
    result = {
        "host": host,
        "version": before,
        "previous": before,
        "state": "current",
        "changed": 0,
        "changed_tasks": [],
        "failed_task": None,
        "drained": False,
        "drained_for_change": False,
        "serial": last_serial,
        "expires": last.get("expires"),
        "image": booted_image(),
    }
    try:
        current = published(url, config, last_serial)
    except Refused as exc:
        result.update(state="refused", failed_task=f"release refused: {exc}", drained=drained_by_us(slurm_node(host)))
        return result
    except ConvergeError as exc:
        result.update(state="unreachable-source", failed_task=str(exc), drained=drained_by_us(slurm_node(host)))
        return result
    version = current["version"]
    result.update(version=version, serial=current["serial"], expires=current["expires"])
    node = slurm_node(host)
    if version == before and not force:
        result["drained"] = drained_by_us(node)
        return result
    try:
        target = fetch_bundle(url, current, bundles)
    except ConvergeError as exc:
        result.update(state="failed", failed_task=f"bundle: {exc}", drained=drained_by_us(node))
        return result
    bundle = target / "bundle"

    # A node that never converged and that Slurm does not know (a new or freshly booted stateless
    # node) has nothing to drain nor keep: the check run, which only spares a drain, is skipped.
    first = before is None and node is None
    changed, failed, _tasks = (1, None, []) if first else ansible(bundle, host, check=True)
    if not changed and not failed:
        # Nothing to change; a drain left by an earlier run (waiting, failed) is ours to lift.
        if drained_by_us(node):
            scontrol_update(host, "state=resume")
        return result

    if node is not None and not drained_by_others(node) and not drained_by_us(node):
        scontrol_update(host, "state=drain", f"reason={DRAIN_REASON}: version {version}")
        result["drained_for_change"] = True
        node = slurm_node(host) or {"state": "drained", "reason": f"{DRAIN_REASON}: version {version}"}
    if node is not None:
        jobs = wait_for_jobs(host, config["drain_wait_s"], poll_s)
        if jobs:
            result.update(
                state="waiting",
                drained=True,
                failed_task=f"{len(jobs)} job(s) still running after {config['drain_wait_s']} s",
            )
            return result

    changed, failed, tasks = ansible(bundle, host, check=False)
    result.update(changed=changed, changed_tasks=tasks)
    if failed:
        result.update(state="failed", failed_task=failed)
        if node is not None and not drained_by_others(node):
            scontrol_update(host, "state=drain", f"reason={DRAIN_REASON} failed: version {version}: {failed}")
        result["drained"] = node is not None
        return result
    result["state"] = "changed"
    if drained_by_us(node):
        scontrol_update(host, "state=resume")
    result["drained"] = drained_by_others(node)
    return result


def run(args: argparse.Namespace) -> int:
    config = load_config(Path(args.config))
    version_file = Path(config["version_file"])
    version_file.parent.mkdir(parents=True, exist_ok=True)
    with open(version_file.parent / ".lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print("hal-converge: another run holds the lock; this one does nothing", file=sys.stderr)
            return EXIT_OK
        started = _now()
        host = args.host or short_hostname()
        previous = read_last(version_file)
        try:
            result = converge(config, host, Path(args.bundles), force=args.force, poll_s=args.poll_s)
        except ConvergeError as exc:
            before = running_version(previous)
            result = {
                "host": host,
                "version": before,
                "previous": before,
                "state": "failed",
                "changed": 0,
                "failed_task": str(exc),
                "drained": False,
                "serial": previous.get("serial"),
                "expires": previous.get("expires"),
            }
        finished = _now()
        result.update(
            started=_iso(started), finished=_iso(finished), seconds=round((finished - started).total_seconds(), 3)
        )
        write_atomic(version_file, json.dumps(result, indent=2, sort_keys=True) + "\n")
    if result["state"] in ("failed", "refused", "unreachable-source"):
        print(
            f"hal-converge: {host}: {result['state']}: version {result['version']}: {result['failed_task']}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    print(
        f"hal-converge: {host}: {result['state']}: version {result['version']}"
        + (f", {result['changed']} changed" if result["state"] == "changed" else "")
        + (f" ({result['failed_task']})" if result["failed_task"] else "")
    )
    return EXIT_OK


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hal-converge", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=CONFIG, help=f"the rendered deploy.json (default {CONFIG})")
    parser.add_argument("--host", help="this node's inventory name (default: hostname --short)")
    parser.add_argument("--bundles", default=BUNDLES, help=f"where bundles are unpacked (default {BUNDLES})")
    parser.add_argument("--force", action="store_true", help="converge even when the version is current")
    parser.add_argument("--poll-s", type=float, default=10.0, help="seconds between job checks while drained")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return run(args)
    except ConfigError as exc:
        print(f"hal-converge: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ConvergeError as exc:
        print(f"hal-converge: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as exc:
        print(f"hal-converge: error: {exc.filename or ''}: {exc.strerror}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
