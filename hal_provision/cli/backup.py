"""`hal-provision backup list|verify DIR`: the snapshots hal-backup wrote, read on the controller
from an admin's copy or mount of the backup destination, with the node program's own code
(hal_provision.node.backup): the same manifests, the same checks.

The controller does not hold the hosts' keys (each manifest's HMAC key is made on its host and
stays there): without `--key` verify checks each file against its manifest (missing, extra,
changed), which a payload rewritten together with its manifest passes, and says so; authenticity
is checked by the host's own `hal-backup verify`, or here with `--key` and a copy of that key."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..node import backup as lib
from .common import EXIT_UNUSABLE, err, out

app = typer.Typer(
    no_args_is_help=True,
    help="The snapshots of the cluster's state that hal-backup wrote: list them, verify their checksums.",
)

DirArg = typer.Argument(
    ..., help="The backup destination (a copy or mount of it): one directory per job.", show_default=False
)
KeyOpt = typer.Option(
    None,
    "--key",
    help="A copy of the key of the host that wrote the snapshots "
    f"({lib.KEY} there): its manifests' HMAC is checked too. Without it: checksums only.",
    show_default=False,
)


def _found(directory: Path) -> list[lib.Snapshot]:
    try:
        return lib.snapshots(directory)
    except lib.ConfigError as exc:
        err.print(f"error: {exc}", style="bold red", markup=False)
        raise typer.Exit(EXIT_UNUSABLE) from None


def _key(path: Optional[Path]) -> Optional[bytes]:
    if path is None:
        return None
    try:
        return lib.load_key(path)
    except lib.ConfigError as exc:
        err.print(f"error: {exc}", style="bold red", markup=False)
        raise typer.Exit(EXIT_UNUSABLE) from None


@app.command("list")
def list_snapshots(directory: Path = DirArg, key: Optional[Path] = KeyOpt) -> None:
    """Each job's snapshots: stamp, host, kind, size, files, age (negative: dated in the future),
    a note (secret, future, NOT AUTHENTIC with --key); unfinished ones with why."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    secret = _key(key)
    found = _found(directory)
    if not found:
        out.print(f"no snapshots under {directory}", markup=False)
        return
    table = Table(title=f"snapshots under {directory}", title_justify="left", box=box.SIMPLE_HEAD)
    for i, header in enumerate(lib.HEADER):
        table.add_column(header.lower(), no_wrap=i < 2)  # a job's name and its stamp stay whole
    for row, snap in zip(lib.rows(found, key=secret), found):
        table.add_row(*row, style=None if snap.complete else "yellow")
    # Piped or captured, the table is not folded into Rich's default 80 columns: a snapshot a line.
    wide = out if out.is_terminal else Console(width=max(out.width, 120), highlight=False, emoji=False)
    wide.print(table)


@app.command()
def verify(
    directory: Path = DirArg,
    snapshots: Optional[List[str]] = typer.Argument(
        None, metavar="[JOB[/STAMP]]...", help="What to verify (default: every snapshot).", show_default=False
    ),
    key: Optional[Path] = KeyOpt,
) -> None:
    """Re-hash every file of the snapshots against their manifests; exit 1 naming each missing,
    extra or changed file. With --key, first that each manifest authenticates (its HMAC): the
    only check that finds a payload rewritten together with its manifest."""
    secret = _key(key)
    chosen, unknown = lib.select(_found(directory), snapshots or [])
    failures = [f"{spec}: no such snapshot under {directory}" for spec in unknown]
    for snap in chosen:
        problems = lib.verify(snap, key=secret)
        failures.extend(f"{snap.name}: {problem}" for problem in problems)
        if not problems:
            out.print(
                f"ok {snap.name} ({lib.count(len(snap.files), 'file')}, {lib.human_size(snap.bytes)})", markup=False
            )
    if not chosen and not unknown:
        failures.append(f"no snapshots under {directory}")
    for failure in failures:
        err.print(f"error: {failure}", style="bold red", markup=False)
    if failures:
        raise typer.Exit(lib.EXIT_FAILED)
    checked = f"authenticated with {key}" if secret is not None else lib.CHECKSUMS_ONLY
    out.print(f"{lib.count(len(chosen), 'snapshot')} verified ({checked})", markup=False)
