"""The `hal-provision` command line: thin; every command calls library functions.

Exit codes: 0 success (warnings allowed); 1 the description has findings at error level;
2 unusable input or output (missing file, YAML syntax, unknown keys, wrong types, an
output directory that cannot be written).

Start-up is part of the interface: `validate` must not wait for the renderers, the Grafana
SDK or ldap3. This module imports typer and nothing else of weight; each command imports what
it needs when it runs, and the sub-commands that live in their own modules (LAZY) are imported
only when one of them is run or asked for its own --help (bench/cli_startup.py measures it).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Optional

import typer
from typer.core import TyperCommand, TyperGroup

from .. import __version__

# Sub-commands kept in their own modules: name -> (module, attribute: a command function or a
# Typer app, the line `hal-provision --help` shows for it). The line stands in for the
# command's own help so that listing the commands imports none of them;
# tests/unit/cli/test_cli.py holds each line to the first paragraph of the loaded command's help.
LAZY: dict[str, tuple[str, str, str]] = {
    "init": (
        "hal_provision.cli.init",
        "init",
        "Write a starter cluster.yml: the required sections filled from the options (or from `discover` "
        "records), every optional section commented out with what it brings in and what it needs.",
    ),
    "verify": (
        "hal_provision.cli.verify",
        "command",
        "Check the deployed cluster against its rendered tree (testinfra suite tests/infra).",
    ),
    "dashboards": (
        "hal_provision.cli.dashboards",
        "panels",
        "List each dashboard's panels: title, kind, unit and every query in the language of "
        "monitoring.backend: InfluxQL (Grafana's macros $timeFilter and $__interval left in) or PromQL "
        "($__interval, $__rate_interval and $__range left in).",
    ),
    "discover": (
        "hal_provision.cli.discover",
        "discover",
        "Print this node's (or a records directory's) hardware as a profile ready to paste under "
        "`hardware:`, then every difference from the host's profile in the model, located in the file.",
    ),
    "diagram": (
        "hal_provision.cli.diagram",
        "diagram",
        "Draw the cluster's architecture: users, login, compute, the InfiniBand fabric and storage "
        "top down, management, services and networks on the side.",
    ),
    "plan": (
        "hal_provision.cli.plan",
        "plan",
        "Compare NEW with what is deployed: each changed file, what its change does on which hosts "
        "(restart, reconfigure, sacctmgr, mmchconfig, file only), and the jobs it would lose or "
        "strand. Exit 0: no change; 2: changes; 1: blocking jobs, or an error.",
    ),
    "sandbox": (
        "hal_provision.cli.sandbox",
        "app",
        "A scaled-down copy of the cluster in podman containers, on this machine.",
    ),
    "storage": (
        "hal_provision.cli.storage",
        "app",
        "Spectrum Scale tuning plans, the DL-style storage benchmarks (fio; small files in Python), "
        "the responsiveness probe.",
    ),
    "recipes": (
        "hal_provision.cli.recipes",
        "app",
        "Training recipes (ResNet-50 with PyTorch DDP) and the scaling benchmark.",
    ),
    "bundle": (
        "hal_provision.cli.bundle",
        "bundle",
        "Build the node bundle of a pull-mode cluster (deploy.mode pull) into DIR: <version>.tar.gz, its "
        "manifest <version>.json and current.json (the release, signed with the cluster's key), for "
        "playbooks/publish.yml to publish on the distribution points.",
    ),
    "backup": (
        "hal_provision.cli.backup",
        "app",
        "The snapshots of the cluster's state that hal-backup wrote: list them, verify their checksums.",
    ),
    "health": (
        "hal_provision.cli.health",
        "app",
        "Node health beyond the periodic check: NVIDIA DCGM's active diagnostic on nodes taken out of service (deep).",
    ),
    "image": (
        "hal_provision.cli.image",
        "app",
        "Node images for network boot: build them from the model (debootstrap, the roles' packages, a "
        "squashfs root), list the store, prune old versions.",
    ),
    "reimage": (
        "hal_provision.cli.reimage",
        "reimage",
        "Reboot network-booted nodes into the image version the model names, through Slurm (`scontrol "
        "reboot ASAP`: after their jobs, none killed), enrol them, and wait until they are back in service.",
    ),
    "fleet": (
        "hal_provision.cli.fleet",
        "app",
        "The pull-mode compute nodes: what each runs against what is published (status), and converging "
        "them now (converge).",
    ),
    "power": (
        "hal_provision.cli.power",
        "app",
        "Nodes' power through their BMCs (Redfish or IPMI, as each node group's `bmc` says): on, off, cycle, status.",
    ),
}


class _Unloaded(TyperCommand):
    """A LAZY sub-command before its module is imported: its name and help line, for listing."""


class LazyGroup(TyperGroup):
    """The top-level group: LAZY sub-commands are listed from their help lines, after the
    commands defined here and in LAZY's order (commands, then sub-apps, as Typer lists them),
    and imported when resolved to run.

    Click's documented LazyGroup imports a command in `get_command`, which help calls for every
    command it lists; here listing gets the stand-in and only `resolve_command` (running a
    command, or its own --help) imports."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for name, (_module, _attribute, line) in LAZY.items():
            self.commands.setdefault(name, _Unloaded(name=name, callback=None, help=line))

    def resolve_command(self, ctx, args):
        name, command, rest = super().resolve_command(ctx, args)
        if isinstance(command, _Unloaded):
            command = self.commands[name] = import_command(name)
        return name, command, rest


def import_command(name: str):
    """The click command of LAZY sub-command NAME, built as `app.command`/`app.add_typer` would."""
    module, attribute, _line = LAZY[name]
    target = getattr(importlib.import_module(module), attribute)
    holder = typer.Typer(rich_markup_mode=app.rich_markup_mode, pretty_exceptions_short=app.pretty_exceptions_short)
    if isinstance(target, typer.Typer):
        holder.add_typer(target, name=name)
    else:
        holder.command(name=name)(target)
    return typer.main.get_group(holder).commands[name]


app = typer.Typer(
    cls=LazyGroup,
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
    from .common import checked

    loaded, model = checked(file)
    print(f"{loaded.file}: cluster '{model.cluster.name}' is valid")  # plain: no rich to import


@app.command()
def render(
    file: Optional[Path] = FileArg,
    output: Path = typer.Option(Path("rendered"), "-o", "--output", help="Directory to write (replaced as a whole)."),
) -> None:
    """Render the inventory and every config into DIR, atomically."""
    from .common import EXIT_UNUSABLE, checked, err, out
    from ..render import render_all
    from ..render.writer import WriteError, write_tree

    _loaded, model = checked(file)
    files = render_all(model)
    try:
        write_tree(files, output)
    except WriteError as exc:
        err.print(f"error: {exc}", style="bold red", markup=False)
        raise typer.Exit(EXIT_UNUSABLE) from None
    out.print(f"rendered {len(files)} files for cluster '{model.cluster.name}' into {output}", markup=False)
    out.print("  " + ", ".join(f"{area} {n}" for area, n in areas(files).items()), markup=False)


def areas(files: dict[str, str]) -> dict[str, int]:
    """How many rendered files each part of the tree holds: the inventory, then each place on
    the nodes (files/etc/slurm, files/opt/hal/portal, ...) and the trees beside them (gpfs, nfs)."""
    counts: dict[str, int] = {}
    for path in files:
        parts = path.split("/")
        if parts[0] == "files" and len(parts) > 2:
            depth = 4 if parts[1] in ("opt", "var") and len(parts) > 4 else 3
            key = "/".join(parts[1:depth]) if len(parts) > depth else "/".join(parts[1:-1]) or parts[1]
        else:
            key = parts[0]
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))


@app.command()
def show(file: Optional[Path] = FileArg) -> None:
    """Print the cluster as tables: node groups, hardware, partitions, totals."""
    from .common import checked, out
    from .show import tables

    _loaded, model = checked(file)
    for table in tables(model):
        out.print(table)


@app.command()
def schema(
    markdown: bool = typer.Option(
        False,
        "--markdown",
        help="Print the reference docs/cluster-yml.md instead: each "
        "section and key with type, default, description and the checks that concern it.",
    ),
) -> None:
    """Print the JSON Schema of cluster.yml (for editors' YAML language servers)."""
    if markdown:
        from .reference import reference_markdown

        print(reference_markdown(), end="")
        return
    import json

    from ..model import Cluster

    doc = Cluster.model_json_schema()
    doc["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    doc["title"] = "hal-provision cluster description"
    print(json.dumps(doc, indent=2, sort_keys=True))


@app.command()
def version() -> None:
    """Print the version."""
    print(__version__)


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
