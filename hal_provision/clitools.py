"""What every `hal-provision` sub-command shares: consoles, exit codes, and loading a
description with its findings printed. Sub-command modules import these from here, never
from `cli.py` (which imports them)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from .findings import Finding, Level, has_errors
from .loader import Loaded
from .model import Cluster
from .validate import validate as load_and_check

EXIT_OK, EXIT_FINDINGS, EXIT_UNUSABLE = 0, 1, 2

# emoji=False: "cluster.yml:100:5" must not print as "cluster.yml💯5" (Rich's :100: code).
out = Console(highlight=False, soft_wrap=True, emoji=False)
err = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)

_STYLE = {Level.error: "bold red", Level.warning: "yellow", Level.info: "cyan"}


def print_findings(findings: list[Finding]) -> None:
    for f in findings:
        err.print(f.format(), style=_STYLE[f.level], markup=False)
    if findings:
        counts = {lvl: sum(1 for f in findings if f.level is lvl) for lvl in Level}
        err.print(", ".join(f"{n} {lvl.value}{'s' if n != 1 else ''}" for lvl, n in counts.items()), markup=False)


def checked(file: Optional[Path]) -> tuple[Loaded, Cluster]:
    loaded = load_and_check(file)
    print_findings(loaded.findings)
    if loaded.model is None:
        raise typer.Exit(EXIT_UNUSABLE)
    if has_errors(loaded.findings):
        raise typer.Exit(EXIT_FINDINGS)
    return loaded, loaded.model
