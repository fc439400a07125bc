"""Where hal-provision keeps what it builds once per machine and user (the parsed inventory, the
sandbox's wheelhouse, Slurm's second-major root), and the one way it writes a single file so that
a reader never sees half of it.

The node programs (hal_provision/node/) import nothing of the controller and keep their own
writers; everything else that writes one file at a time writes it with `write_atomic`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

# Names the caches' directory outright: `./bootstrap.sh test` runs with a HOME that starts
# empty and keeps these caches where the user's own home has them.
CACHE_ENV = "HAL_PROVISION_CACHE"


def cache_dir(name: str) -> Path:
    """$HAL_PROVISION_CACHE/NAME, else $XDG_CACHE_HOME/hal-provision/NAME, else
    ~/.cache/hal-provision/NAME (not created)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]) / name
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "hal-provision" / name


def write_atomic(target: Path, data: bytes | str, mode: int = 0o644, durable: bool = True) -> None:
    """TARGET holds DATA (str: UTF-8), or is as it was: a temporary file beside it, written, with
    MODE set before it has any content a reader could see, flushed to disk (`durable`: also the
    directory's entry after the rename, so a crash right after leaves the new file or the old one),
    then renamed over it. The directory is created if missing. Raises OSError; leaves no temporary
    file behind."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as stream:  # owns fd from here: closed on any failure below
            os.fchmod(stream.fileno(), mode)
            stream.write(data.encode("utf-8") if isinstance(data, str) else data)
            if durable:
                stream.flush()
                os.fsync(stream.fileno())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    if durable:
        _fsync_dir(target.parent)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return  # a directory that cannot be opened for reading: the rename stands, unsynced
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on a directory
    finally:
        os.close(fd)
