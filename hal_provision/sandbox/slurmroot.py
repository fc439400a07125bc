"""A Debian 13 (trixie) root holding Slurm 24.11's daemons, for the acceptance tests.

The host is Debian 12 and runs Slurm 22.05; this root lets the same tests run a second major
for real: tests/acceptance runs its slurmctld, slurmd, slurmdbd, scontrol and munged with
``chroot`` inside the harness's private namespaces, on trees rendered for ``slurm.version``
24.11. Nothing here starts a daemon or a container.

The root is debootstrap's minbase of trixie, from the host's own Debian mirror (read from its
apt sources, as the node image does, so no registry is named here), plus the packages below.
It lives in the user's cache directory beside the wheelhouse and is built only when missing or
when its recipe (suite, packages, this module's build steps) changed: a file in the root names
the recipe it was built from. A build goes to a temporary directory beside the target, renamed
into place when complete, so a half-built root is never seen; a lock file held during the build
lets the tests wait for a build running beside them (tests/run-all.sh starts one).

Usage: ``python3 -m hal_provision.sandbox.slurmroot [--force] [--print-path]``.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..files import cache_dir
from .image import RELEASE_SLURM, ImageError, host_mirror

SUITE = "trixie"
SLURM_MAJOR = RELEASE_SLURM[SUITE]  # what trixie ships (one table: image.py); the tests render for it
# hwloc: lstopo makes the synthetic topologies slurmd -C/-G read in the tests.
PACKAGES = ["slurmctld", "slurmd", "slurmdbd", "slurm-client", "munge", "hwloc"]
# Bumped whenever the build steps change, so an older root is rebuilt.
REVISION = "2"
RECIPE_FILE = ".hal-provision-recipe"
BUILD_COMMAND = "python3 -m hal_provision.sandbox.slurmroot"


class SlurmRootError(RuntimeError):
    pass


def recipe() -> str:
    """What the root is built from, in one line; a root holding another recipe is rebuilt."""
    text = " ".join([REVISION, SUITE, *sorted(PACKAGES)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def default_dir() -> Path:
    """One root per machine and user, beside the other caches."""
    return cache_dir(f"slurm-root-{SUITE}")


def lock_path(root: Path) -> Path:
    return root.with_name(root.name + ".lock")


def is_current(root: Path) -> bool:
    """The root is complete (renamed into place) and built from this recipe."""
    marker = root / RECIPE_FILE
    return marker.is_file() and marker.read_text().strip() == recipe()


def build_running(root: Path) -> bool:
    """A build holds the root's lock now (a non-blocking try to take it fails)."""
    path = lock_path(root)
    if not path.exists():
        return False
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
    return False


def wait_for_build(root: Path, timeout: float, poll: float = 2.0) -> bool:
    """While a build runs, wait for it (at most `timeout` seconds); then: is the root current?"""
    deadline = time.monotonic() + timeout
    while build_running(root) and time.monotonic() < deadline:
        time.sleep(poll)
    return is_current(root)


def _run(cmd: list[str], **kw) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, **kw)


def _size_bytes(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                total += os.lstat(p).st_size
    return total


def build(root: Path | None = None, force: bool = False) -> Path:
    """The root at `root` (default_dir()), built unless current; returns its path."""
    root = root or default_dir()
    if is_current(root) and not force:
        print(f"{root} is current (recipe {recipe()})")
        return root
    if os.geteuid() != 0:
        raise SlurmRootError("debootstrap and chroot need root")
    if shutil.which("debootstrap") is None:
        raise SlurmRootError("debootstrap is not installed (apt-get install debootstrap)")
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path(root), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time; the tests wait on it
        if is_current(root) and not force:  # another build finished while we waited
            return root
        started = time.monotonic()
        mirror = host_mirror()
        tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.build-", dir=root.parent))
        try:
            tmp.chmod(0o755)  # munged wants o+x on every directory above its socket
            _run(
                ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(tmp), mirror],
                stdout=subprocess.DEVNULL,
            )
            # What the tests never use: downloaded packages, the package lists, documentation.
            for rel in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man"):
                shutil.rmtree(tmp / rel, ignore_errors=True)
            # The package's munge key would be one more secret in a cache; each run makes its own.
            (tmp / "etc/munge/munge.key").unlink(missing_ok=True)
            # Mount points the tests bind the rendered configs and /etc/hosts on.
            (tmp / "etc/slurm").mkdir(exist_ok=True)
            (tmp / "etc/hosts").touch()
            (tmp / RECIPE_FILE).write_text(recipe() + "\n")
            old = None
            if root.exists():
                old = root.with_name(f".{root.name}.old-{os.getpid()}")
                root.rename(old)
            tmp.rename(root)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        print(
            f"built {root} in {time.monotonic() - started:.0f} s, {_size_bytes(root) / 2**20:.0f} MiB, "
            f"recipe {recipe()}",
            flush=True,
        )
    return root


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--force", action="store_true", help="rebuild even if the root is current")
    ap.add_argument("--print-path", action="store_true", help="print where the root lives and exit")
    args = ap.parse_args(argv)
    if args.print_path:
        print(default_dir())
        return 0
    try:
        build(force=args.force)
    except (SlurmRootError, ImageError, subprocess.CalledProcessError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
