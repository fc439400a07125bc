"""The one place that writes a rendered tree, atomically.

Files are written into a temporary directory beside the target, which is then swapped in
with renames; a failure at any point leaves the previous output untouched. Each file is
encoded and written a slice at a time: a 100,000-node /etc/hosts (16 MB) is never held a
second time as bytes.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

MARKER = ".hal-provision-render"


class WriteError(Exception):
    """The output directory cannot be used; the message says why."""


def write_tree(files: dict[str, str], out_dir: str | os.PathLike) -> Path:
    out = Path(out_dir)
    if out.exists():
        if not out.is_dir():
            raise WriteError(f"{out} exists and is not a directory")
        if any(out.iterdir()) and not (out / MARKER).is_file():
            raise WriteError(
                f"{out} is not empty and was not written by hal-provision; choose an empty or new directory"
            )
    parent = out.resolve().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=parent))
    except OSError as exc:
        raise WriteError(f"cannot create {parent}: {exc.strerror}") from None
    try:
        for rel, text in files.items():
            target = _inside(staging, rel, out)
            target.parent.mkdir(parents=True, exist_ok=True)
            write_file(target, text)
        write_file(
            staging / MARKER, "This directory is written by `hal-provision render`; it is replaced as a whole.\n"
        )
        for d in [staging, *(p for p in staging.rglob("*") if p.is_dir())]:
            d.chmod(0o755)
        _swap_in(staging, out)
    except WriteError:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise WriteError(f"cannot write {out}: {exc}") from None
    return out


def _inside(staging: Path, rel: str, out: Path) -> Path:
    """STAGING/REL, refused (WriteError, nothing written) unless it lies inside STAGING: the last
    guard should a path from the description get past the model's checks."""
    parts = Path(rel).parts
    if not parts or Path(rel).is_absolute() or any(p in (".", "..") for p in rel.split("/")):
        raise WriteError(f"refusing to write {rel!r}: it does not name a file inside {out}")
    target = staging.joinpath(*parts)
    if not target.resolve().is_relative_to(staging.resolve()):
        raise WriteError(f"refusing to write {rel!r}: it resolves outside {out}")
    return target


SLICE = 1 << 20
"""Characters encoded and written at a time."""


def write_file(target: Path, text: str) -> None:
    """`text` into `target` as UTF-8, SLICE characters at a time."""
    with open(target, "w", encoding="utf-8", newline="") as stream:
        for start in range(0, len(text), SLICE):
            stream.write(text[start : start + SLICE])


def _swap_in(staging: Path, out: Path) -> None:
    if not out.exists():
        staging.rename(out)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=staging.parent))
    old.rmdir()
    out.rename(old)
    try:
        staging.rename(out)
    except OSError:
        old.rename(out)
        raise
    shutil.rmtree(old, ignore_errors=True)
