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

from . import __version__
from .clitools import EXIT_FINDINGS, EXIT_OK, EXIT_UNUSABLE, checked, err, out
from .model import Cluster

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Describe a HAL-class GPU cluster once (cluster.yml); validate it, render every config "
    "and the Ansible inventory from it. Without FILE, commands use the embedded HAL description.",
)

FileArg = typer.Argument(None, help="cluster.yml to use; the embedded HAL description if omitted.", show_default=False)


@app.command()
def validate(file: Optional[Path] = FileArg) -> None:
    """Check the description; list every finding with file, line and column."""
    loaded, model = checked(file)
    out.print(f"{loaded.file}: cluster '{model.cluster.name}' is valid", markup=False)


@app.command()
def render(
    file: Optional[Path] = FileArg,
    output: Path = typer.Option(Path("rendered"), "-o", "--output", help="Directory to write (replaced as a whole)."),
) -> None:
    """Render the inventory and every config into DIR, atomically."""
    from .render import render_all
    from .render.writer import WriteError, write_tree

    _loaded, model = checked(file)
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

    _loaded, model = checked(file)
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
    from .dashboards_cli import panels as dashboards_command
    from .diagram_cli import diagram as diagram_command
    from .discover_cli import discover as discover_command
    from .plan_cli import plan as plan_command
    from .recipes_cli import app as recipes_app
    from .sandbox.cli import app as sandbox_app
    from .storage.cli import app as storage_app
    from .verify import command as verify_command

    app.add_typer(sandbox_app, name="sandbox")
    app.add_typer(storage_app, name="storage")
    app.command(name="verify")(verify_command)
    app.command(name="dashboards")(dashboards_command)
    app.command(name="discover")(discover_command)
    app.command(name="diagram")(diagram_command)
    app.command(name="plan")(plan_command)
    app.add_typer(recipes_app, name="recipes")


_register_subcommands()


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
