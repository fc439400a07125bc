"""What every `hal-provision` sub-command shares: consoles, exit codes, and loading a
description with its findings printed. Sub-command modules import these from here, never
from `cli.py` (which imports them).

The consoles `out` and `err` are made when first asked for: rich takes about 30 ms to import,
which `validate` of a description without findings (one plain line) does not pay."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from ..findings import Finding, Level, has_errors
from ..loader import Loaded, validate
from ..model import Cluster

if TYPE_CHECKING:
    from rich.console import Console

EXIT_OK, EXIT_FINDINGS, EXIT_UNUSABLE = 0, 1, 2


class InventoryDirError(RuntimeError):
    """A path given as a rendered inventory directory that is not one."""


def rendered_inventory(inventory: Path) -> Path:
    """The rendered tree's inventory directory as an absolute path (its files/ beside it), or an
    InventoryDirError saying what is wrong (`verify`, `fleet`)."""
    if not inventory.exists():
        raise InventoryDirError(f"{inventory} does not exist")
    if not inventory.is_dir():
        raise InventoryDirError(f"{inventory} is not a directory: give the rendered tree's inventory/ directory")
    if not (inventory / "hosts.yml").is_file() or not (inventory.parent / "files").is_dir():
        raise InventoryDirError(
            f"{inventory} is not a rendered inventory: expected hosts.yml in it and files/ "
            "beside it (written by `hal-provision render` or `hal-provision sandbox up`)"
        )
    return inventory.resolve()


def list_inventory(inventory: Path) -> dict:
    """`ansible-inventory --list` of a rendered inventory directory (every source in it merged:
    hosts.yml, then sandbox.yml's or a site's SSH settings); InventoryDirError when it fails.
    Real Ansible, because a site's own sources (a plugin, a script) count here; the rendered
    files alone list the same in-process through hal_provision.inventory.groups."""
    import json
    import subprocess

    from .. import tools

    program = tools.find("ansible-inventory") or "ansible-inventory"
    try:
        proc = subprocess.run(
            [program, "-i", str(inventory), "--list"],
            capture_output=True,
            text=True,
            check=False,
            env=tools.child_env(),
        )
    except OSError as exc:
        raise InventoryDirError(f"cannot run ansible-inventory: {exc}") from None
    if proc.returncode != 0:
        raise InventoryDirError(f"ansible-inventory -i {inventory} --list failed: {proc.stderr.strip()}")
    return json.loads(proc.stdout)


@cache
def console(stderr: bool = False) -> Console:
    """The console for stdout (`out`) or stderr (`err`)."""
    from rich.console import Console

    # emoji=False: "cluster.yml:100:5" must not print as "cluster.yml💯5" (Rich's :100: code).
    return Console(stderr=stderr, highlight=False, soft_wrap=True, emoji=False)


def __getattr__(name: str) -> Console:
    if name in ("out", "err"):
        return console(stderr=name == "err")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_STYLE = {Level.error: "bold red", Level.warning: "yellow", Level.info: "cyan"}


def print_findings(findings: list[Finding]) -> None:
    if not findings:
        return
    err = console(stderr=True)
    for f in findings:
        err.print(f.format(), style=_STYLE[f.level], markup=False)
    counts = {lvl: sum(1 for f in findings if f.level is lvl) for lvl in Level}
    err.print(", ".join(f"{n} {lvl.value}{'s' if n != 1 else ''}" for lvl, n in counts.items()), markup=False)


def checked(file: Optional[Path]) -> tuple[Loaded, Cluster]:
    loaded = validate(file)
    print_findings(loaded.findings)
    if loaded.model is None:
        raise typer.Exit(EXIT_UNUSABLE)
    if has_errors(loaded.findings):
        raise typer.Exit(EXIT_FINDINGS)
    return loaded, loaded.model
