"""The one place that writes a rendered tree, atomically.

Files are written into a temporary directory beside the target, which is then swapped in
with renames; a failure at any point leaves the previous output untouched.
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
                f"{out} is not empty and was not written by hal-provision; "
                "choose an empty or new directory"
            )
    parent = out.resolve().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.new-", dir=parent))
    except OSError as exc:
        raise WriteError(f"cannot create {parent}: {exc.strerror}") from None
    try:
        for rel, text in files.items():
            target = staging / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        (staging / MARKER).write_text(
            "This directory is written by `hal-provision render`; it is replaced as a whole.\n",
            encoding="utf-8",
        )
        for d in [staging, *(p for p in staging.rglob("*") if p.is_dir())]:
            d.chmod(0o755)
        _swap_in(staging, out)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise WriteError(f"cannot write {out}: {exc}") from None
    return out


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
