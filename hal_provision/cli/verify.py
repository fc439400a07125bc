"""`hal-provision verify INVENTORY`: check a deployed cluster against its rendered tree.

Runs the checkout's testinfra suite (tests/infra) with HAL_INVENTORY set to the rendered
inventory; the exit code is pytest's. By default only what reads the cluster: the tests that
change it (markers `changes`, day-2 changes made and undone, and `faults`, destructive fault
injection; sandbox only) run when asked for, as CI's scenarios do.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import List, Optional

import typer

from .. import tools
from .common import EXIT_UNUSABLE, InventoryDirError, err, rendered_inventory

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "tests" / "infra"


class VerifyError(RuntimeError):
    pass


def check_inventory(inventory: Path) -> Path:
    """The inventory directory as an absolute path, or a VerifyError saying what is wrong."""
    try:
        return rendered_inventory(inventory)
    except InventoryDirError as exc:
        raise VerifyError(str(exc)) from None


def marker_expression(faults: bool = False, changes: bool = False) -> str | None:
    """pytest's -m for the tests asked for: every read-only one, plus the mutating kinds named."""
    left_out = [name for name, wanted in (("changes", changes), ("faults", faults)) if not wanted]
    return " and ".join(f"not {name}" for name in left_out) or None


def pytest_cmd(faults: bool = False, extra: list[str] | None = None, changes: bool = False) -> list[str]:
    if not (SUITE / "conftest.py").is_file():
        raise VerifyError(f"{SUITE} not found: verify runs the suite of a hal-provision checkout")
    try:
        import testinfra  # noqa: F401
    except ImportError:
        raise VerifyError("pytest-testinfra is not installed for this Python (pip install pytest-testinfra)") from None
    expression = marker_expression(faults, changes)
    marker = ["-m", expression] if expression else []
    return [sys.executable, "-m", "pytest", str(SUITE), "-p", "no:cacheprovider", *marker, *(extra or [])]


def run(inventory: Path, faults: bool = False, extra: list[str] | None = None, changes: bool = False) -> int:
    inv = check_inventory(inventory)
    cmd = pytest_cmd(faults, extra, changes)
    env = dict(tools.child_env(), HAL_INVENTORY=str(inv))
    return subprocess.run(cmd, env=env, cwd=REPO, check=False).returncode


def command(
    inventory: Path = typer.Argument(
        ..., help="The rendered inventory directory (RENDERED/inventory).", show_default=False
    ),
    faults: bool = typer.Option(False, "--faults", help="Also run the destructive fault tests (sandbox only)."),
    changes: bool = typer.Option(
        False,
        "--changes",
        help="Also run the day-2 change tests, which change the model, converge and put it back (sandbox only).",
    ),
    pytest_args: Optional[List[str]] = typer.Argument(
        None, help="Extra pytest arguments, after --.", show_default=False
    ),
) -> None:
    """Check the deployed cluster against its rendered tree (testinfra suite tests/infra)."""
    try:
        rc = run(inventory, faults, pytest_args, changes)
    except VerifyError as exc:
        err.print(f"error: {exc}", style="bold red", markup=False)
        raise typer.Exit(EXIT_UNUSABLE) from None
    raise typer.Exit(rc)
