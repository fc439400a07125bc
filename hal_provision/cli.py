"""The `hal-provision` command line: thin; every command calls library functions.

Exit codes: 0 success (warnings allowed); 1 the description has findings at error level;
2 unusable input or output (missing file, YAML syntax, unknown keys, wrong types, an
output directory that cannot be written).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from . import __version__
from .findings import Finding, Level, has_errors
from .loader import Loaded
from .model import Cluster
from .validate import validate as load_and_check

EXIT_OK, EXIT_FINDINGS, EXIT_UNUSABLE = 0, 1, 2

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Describe a HAL-class GPU cluster once (cluster.yml); validate it, render every config "
    "and the Ansible inventory from it. Without FILE, commands use the embedded HAL description.",
)
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

FileArg = typer.Argument(None, help="cluster.yml to use; the embedded HAL description if omitted.", show_default=False)

_STYLE = {Level.error: "bold red", Level.warning: "yellow", Level.info: "cyan"}


def _print_findings(findings: list[Finding]) -> None:
    for f in findings:
        err.print(f.format(), style=_STYLE[f.level], markup=False)
    if findings:
        counts = {lvl: sum(1 for f in findings if f.level is lvl) for lvl in Level}
        err.print(", ".join(f"{n} {lvl.value}{'s' if n != 1 else ''}" for lvl, n in counts.items()), markup=False)


def _checked(file: Optional[Path]) -> tuple[Loaded, Cluster]:
    loaded = load_and_check(file)
    _print_findings(loaded.findings)
    if loaded.model is None:
        raise typer.Exit(EXIT_UNUSABLE)
    if has_errors(loaded.findings):
        raise typer.Exit(EXIT_FINDINGS)
    return loaded, loaded.model


@app.command()
def validate(file: Optional[Path] = FileArg) -> None:
    """Check the description; list every finding with file, line and column."""
    loaded, model = _checked(file)
    out.print(f"{loaded.file}: cluster '{model.cluster.name}' is valid", markup=False)


@app.command()
def render(
    file: Optional[Path] = FileArg,
    output: Path = typer.Option(Path("rendered"), "-o", "--output", help="Directory to write (replaced as a whole)."),
) -> None:
    """Render the inventory and every config into DIR, atomically."""
    from .render import render_all
    from .render.writer import WriteError, write_tree

    _loaded, model = _checked(file)
    files = render_all(model)
    try:
        write_tree(files, output)
    except WriteError as exc:
        err.print(f"error: {exc}", style="bold red", markup=False)
        raise typer.Exit(EXIT_UNUSABLE) from None
    out.print(f"rendered {len(files)} files for cluster '{model.cluster.name}' into {output}", markup=False)


@app.command()
def show(file: Optional[Path] = FileArg) -> None:
    """Print the cluster as tables: node groups, hardware, partitions, totals."""
    from .show import tables

    _loaded, model = _checked(file)
    for table in tables(model):
        out.print(table)


@app.command()
def schema() -> None:
    """Print the JSON Schema of cluster.yml (for editors' YAML language servers)."""
    doc = Cluster.model_json_schema()
    doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    doc["title"] = "hal-provision cluster description"
    print(json.dumps(doc, indent=2, sort_keys=True))


@app.command()
def version() -> None:
    """Print the version."""
    print(__version__)


def _register_subcommands() -> None:
    from .sandbox.cli import app as sandbox_app
    from .storage.cli import app as storage_app
    from .verify import command as verify_command

    app.add_typer(sandbox_app, name="sandbox")
    app.add_typer(storage_app, name="storage")
    app.command(name="verify")(verify_command)


_register_subcommands()


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
