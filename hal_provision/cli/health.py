"""`hal-provision health deep HOSTLIST`: NVIDIA DCGM's active diagnostic on Slurm nodes taken
out of service for it. Slurm commands run on the first slurmctld host of the rendered inventory
and the diagnostic on the nodes, both through Ansible's command module, as `plan --live` does;
what is Slurm-facing and pure lives in hal_provision.health_deep."""

from __future__ import annotations

import shlex
from pathlib import Path

import typer

from .common import EXIT_FINDINGS, EXIT_OK, EXIT_UNUSABLE, InventoryDirError, err, out, rendered_inventory

app = typer.Typer(
    no_args_is_help=True,
    help="Node health beyond the periodic check: NVIDIA DCGM's active diagnostic on nodes taken out of service (deep).",
)

DEFAULT_INVENTORY = Path("rendered/inventory")


def _fail(message: str) -> None:
    err.print(f"error: {message}", style="bold red", markup=False)
    raise typer.Exit(EXIT_UNUSABLE)


def _table(report) -> None:
    from rich import box
    from rich.table import Table

    table = Table(title=f"dcgmi diag -r {report.level}", title_justify="left", box=box.SIMPLE_HEAD)
    for header in ("node", "test", "GPU", "result", "message"):
        table.add_column(header, no_wrap=header != "message")
    for node in report.nodes:
        if node.error:
            table.add_row(node.host, "-", "-", "NO RESULT", node.error, style="bold red")
        for r in node.results:
            if r.status in ("Pass", "Skip") and not r.message:
                continue  # a pass is counted below; the table shows what needs a look
            table.add_row(
                node.host,
                r.test,
                "-" if r.gpu is None else str(r.gpu),
                r.status,
                r.message or "-",
                style="bold red" if r.status == "Fail" else "yellow" if r.status == "Warn" else None,
            )
    out.print(table)
    for node in report.nodes:
        counts: dict[str, int] = {}
        for r in node.results:
            counts[r.status] = counts.get(r.status, 0) + 1
        summary = ", ".join(f"{n} {status.lower()}" for status, n in sorted(counts.items())) or "no result"
        out.print(f"{node.host}: {summary}" + (f"; drained: {node.drained}" if node.drained else ""), markup=False)


@app.command()
def deep(
    hosts: str = typer.Argument(..., metavar="HOSTLIST", help="The Slurm nodes to test, a hostlist (gpu[01-04])."),
    inventory: Path = typer.Option(
        DEFAULT_INVENTORY, "-i", "--inventory", help="The rendered inventory directory (RENDERED/inventory)."
    ),
    level: int = typer.Option(
        2,
        "--level",
        min=1,
        max=4,
        help="dcgmi diag's level: 2 about 2 minutes, 3 about 15 minutes per node (NVIDIA's figures).",
    ),
    max_wait: int = typer.Option(
        1440,
        "--max-wait",
        min=0,
        help="Minutes to wait for running jobs to end "
        "(0: no limit); the reservation lasts this plus the diagnostic's time.",
    ),
) -> None:
    """Run NVIDIA DCGM's diagnostic (dcgmi diag -r LEVEL) on HOSTLIST: a maintenance reservation
    keeps new jobs off the nodes while running jobs finish, then each node is tested, every node
    with a failed test is drained with a reason starting "hal-deep:" (the periodic health check
    never resumes it), and the reservation is deleted, also on an error or Ctrl-C. Exit 0: every
    test passed; 1: a test failed or a node gave no result; 2: unusable input."""
    from .. import health_deep as lib
    from ..hostlist import HostlistError, expand, fold
    from ..plan.jobs import run_ad_hoc, run_on_controller
    from ..plan.sources import PlanError

    try:
        chosen = expand(hosts)
    except HostlistError as exc:
        _fail(f"HOSTLIST: {exc}")
    if not chosen:
        _fail("HOSTLIST names no node")
    try:
        inv = rendered_inventory(inventory)
    except InventoryDirError as exc:
        _fail(str(exc))
    what = "health deep"

    def controller(argv: list[str]) -> str:
        return run_on_controller(inv, shlex.join(argv), what=what)

    def diag(argv: list[str], nodes: list[str]) -> dict[str, str | None]:
        timeout = lib.DIAG_MINUTES[level] * 60
        results = run_ad_hoc(inv, ",".join(nodes), shlex.join(argv), timeout=timeout, what=what, forks=len(nodes))
        # dcgmi exits non-zero when a test fails: its JSON is the answer all the same.
        return {
            h: r.get("stdout") if not r.get("unreachable") and (r.get("stdout") or "").strip() else None
            for h, r in results.items()
        }

    def show(line: str) -> None:
        err.print(line, markup=False)

    try:
        report = lib.run_deep(controller, diag, chosen, level, show, max_wait_s=max_wait * 60)
    except KeyboardInterrupt:
        err.print(f"interrupted: the reservation on {fold(chosen)} was deleted", style="bold red", markup=False)
        raise typer.Exit(EXIT_FINDINGS) from None
    except (lib.DeepError, PlanError) as exc:
        err.print(f"error: {exc}", style="bold red", markup=False)
        raise typer.Exit(EXIT_FINDINGS) from None
    _table(report)
    raise typer.Exit(EXIT_OK if report.passed else EXIT_FINDINGS)
