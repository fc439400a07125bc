"""hal-stage: copy a data set from the shared file system to the job's node-local scratch, once per node.

Inside a Slurm job /tmp is the job's private directory on the node's local NVMe scratch
(job_container/tmpfs under the node group's job_tmp_base), removed when the job ends. Reading
a training set from there instead of the shared file system takes the many small random reads
of every epoch off NFS or GPFS. Every task of a job may call this; on each node the first one
copies and the others wait for it:

    hal-stage /home/me/datasets/imagenet-mini          # -> $TMPDIR/hal-stage/imagenet-mini
    DATA=$(hal-stage --print-path /home/me/datasets/imagenet-mini)
    hal-stage --dest /tmp/ds /home/me/datasets/imagenet-mini

How "once per node" holds: the tasks take an exclusive flock on a lock file beside the
destination (flock, not POSIX record locks, so even two opens in one process exclude each
other; the kernel drops the lock when a task dies, so a crashed copier never blocks the
others). The holder copies the tree, then writes a completion marker (JSON: files, bytes,
seconds) into the destination, atomically; a task that gets the lock and finds the marker
returns at once. A destination without a marker is a copy that did not finish: it is removed
and copied again. Before copying, the source's size is compared with the destination's free
space (shutil.disk_usage) and its file count with the free inodes.

Standard library only: the recipes role copies this file beside the recipe programs and
installs /usr/local/bin/hal-stage, which runs it with the node's python3. Mistakes (a missing
source, too little space) are one line on stderr and exit status 1, never a traceback.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

MARKER = ".hal-stage-complete"  # in the destination's top directory; ImageFolder ignores files there
UNFINISHED = ".hal-stage-unfinished"  # there while a copy runs: what lets a retry remove the remains
STAGE_DIR = "hal-stage"


class StageError(Exception):
    """A mistake the user can fix; printed as one line."""


@dataclass(frozen=True)
class Staged:
    path: Path  # the staged copy
    files: int
    bytes: int
    seconds: float  # the copy's duration, whichever task made it
    copied: bool  # this call made the copy
    waited: float  # seconds this call waited for the lock

    @property
    def mb_per_s(self) -> float:
        return self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def summary(self) -> str:
        size = f"{self.files} files, {self.bytes / 1e6:.1f} MB"
        if self.copied:
            return f"hal-stage: copied {size} in {self.seconds:.2f} s ({self.mb_per_s:.1f} MB/s) to {self.path}"
        how = f"another task copied it, waited {self.waited:.2f} s" if self.waited >= 0.05 else "nothing copied"
        return f"hal-stage: {self.path} is already staged ({size}, copied in {self.seconds:.2f} s); {how}"


def default_dest(source: Path, environ=None) -> Path:
    """$TMPDIR (else /tmp) /hal-stage/<the source's name>: the job's private /tmp in a job."""
    environ = os.environ if environ is None else environ
    return Path(environ.get("TMPDIR") or "/tmp") / STAGE_DIR / source.name


def tree_size(source: Path) -> tuple[int, int]:
    """Files and bytes under `source` (symbolic links followed, as the copy follows them)."""
    files = size = 0
    for root, _dirs, names in os.walk(source, followlinks=True):
        for name in names:
            size += os.stat(os.path.join(root, name)).st_size
            files += 1
    return files, size


def check_space(dest_parent: Path, files: int, size: int) -> None:
    """StageError unless the destination's file system has room for `size` bytes and `files` inodes."""
    free = shutil.disk_usage(dest_parent).free
    if size > free:
        raise StageError(
            f"not enough space in {dest_parent}: the data set needs {size / 1e9:.2f} GB, {free / 1e9:.2f} GB free"
        )
    st = os.statvfs(dest_parent)
    if st.f_files and files > st.f_favail:  # f_files 0: the file system has no inode limit
        raise StageError(
            f"not enough inodes in {dest_parent}: the data set has {files} files, {st.f_favail} inodes free"
        )


def _read_marker(dest: Path) -> dict | None:
    try:
        record = json.loads((dest / MARKER).read_text())
    except (OSError, ValueError):
        return None
    fields = ("files", "bytes", "seconds")
    ok = isinstance(record, dict) and all(isinstance(record.get(k), (int, float)) for k in fields)
    return record if ok else None


def _clear(dest: Path) -> None:
    """Make way for the copy: remove an unfinished one (its task died); refuse anything else."""
    if not (dest.exists() or dest.is_symlink()):
        return
    if dest.is_dir() and not dest.is_symlink():
        if (dest / UNFINISHED).exists():
            shutil.rmtree(dest)
            return
        if not any(dest.iterdir()):
            dest.rmdir()
            return
    raise StageError(f"{dest} exists and is not a copy hal-stage made: remove it or give another --dest")


def _copy(source: Path, dest: Path, clock) -> tuple[int, int, float]:
    counted = [0, 0]

    def copy_counting(src: str, dst: str) -> None:
        shutil.copyfile(src, dst)
        counted[0] += 1
        counted[1] += os.stat(dst).st_size

    start = clock()
    dest.mkdir()
    (dest / UNFINISHED).touch()
    shutil.copytree(source, dest, symlinks=False, copy_function=copy_counting, dirs_exist_ok=True)
    return counted[0], counted[1], clock() - start


def stage(source: str | Path, dest: str | Path | None = None, environ=None, clock=time.monotonic) -> Staged:
    """Copy the directory `source` to `dest` (default: default_dest) once; see the module's doc."""
    source = Path(source).expanduser()
    if not source.exists():
        raise StageError(f"{source}: no such directory")
    if not source.is_dir():
        raise StageError(f"{source}: not a directory (hal-stage copies a data set's directory)")
    source = source.resolve()
    dest = Path(dest).expanduser() if dest is not None else default_dest(source, environ)
    dest = dest.parent.resolve() / dest.name if dest.parent.exists() else dest.absolute()
    if dest == source or source in dest.parents or dest in source.parents:
        raise StageError(f"{dest} and {source} overlap: stage to a directory outside the data set")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        lock = open(dest.parent / f".{dest.name}.lock", "a")
    except OSError as exc:
        raise StageError(
            f"cannot use {dest.parent}: {exc.strerror or exc}{': ' + str(exc.filename) if exc.filename else ''}"
        ) from None
    with lock:
        asked = clock()
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        waited = clock() - asked
        done = _read_marker(dest)
        if done is not None:
            return Staged(dest, done["files"], done["bytes"], done["seconds"], copied=False, waited=waited)
        try:
            _clear(dest)
            check_space(dest.parent, *tree_size(source))
            files, size, seconds = _copy(source, dest, clock)
        except shutil.Error as exc:  # copytree gathers per-file failures: (source, destination, why) each
            failures = exc.args[0] if exc.args and isinstance(exc.args[0], list) else []
            why = f"{failures[0][2]} ({len(failures)} file(s))" if failures else str(exc)
            raise StageError(f"copying {source} to {dest} failed: {why}") from None
        except OSError as exc:
            raise StageError(
                f"copying {source} to {dest} failed: {exc.strerror or exc}{': ' + exc.filename if exc.filename else ''}"
            ) from None
        record = {"source": str(source), "files": files, "bytes": size, "seconds": round(seconds, 3)}
        part = dest / (MARKER + ".part")
        part.write_text(json.dumps(record, sort_keys=True) + "\n")
        os.replace(part, dest / MARKER)
        (dest / UNFINISHED).unlink()
        return Staged(dest, files, size, round(seconds, 3), copied=True, waited=waited)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="hal-stage",
        description="Copy a data set from the shared file system to this node's local scratch, once per node "
        "per job: the first task copies, the others wait and find the copy.",
    )
    parser.add_argument("source", help="the data set's directory on the shared file system")
    parser.add_argument(
        "--dest",
        default=None,
        help=f"where the copy goes (default: $TMPDIR or /tmp, then /{STAGE_DIR}/<source's name>)",
    )
    parser.add_argument(
        "--print-path",
        action="store_true",
        help="print only the staged path on stdout (the summary goes to stderr): DATA=$(hal-stage --print-path SOURCE)",
    )
    args = parser.parse_args(argv)
    try:
        staged = stage(args.source, args.dest)
    except StageError as exc:
        print(f"hal-stage: error: {exc}", file=sys.stderr)
        return 1
    if args.print_path:
        print(staged.summary(), file=sys.stderr)
        print(staged.path)
    else:
        print(staged.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
