"""`hal-provision discover`: a node's real hardware as a profile in cluster.yml's shape, and
how it differs from the profile the model assigns to the host.

Exit codes: 0 no difference (or no profile to compare with); 1 differences (findings at error
or warning level); 2 unusable input: a missing or malformed records directory, a cluster file
that does not load, a --host the model does not have.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Optional

import typer

from ..discovery import DiscoveryError, discover as discover_hardware, profile_name, read_live, read_records
from ..discovery import to_json, to_yaml
from ..discovery.compare import UnknownHost, compare, group_of
from ..findings import Level
from .common import EXIT_FINDINGS, EXIT_OK, EXIT_UNUSABLE, checked, err, out, print_findings


def discover(
    file: Optional[Path] = typer.Argument(
        None, help="cluster.yml to compare with; the embedded HAL description if omitted.", show_default=False
    ),
    host: Optional[str] = typer.Option(
        None,
        "--host",
        show_default=False,
        help="The host whose profile to compare with (default: this machine's short "
        "host name; with --records, the records directory's name).",
    ),
    records: Optional[Path] = typer.Option(
        None,
        "--records",
        show_default=False,
        help="Read the raw outputs a records directory holds (playbooks/discover.yml "
        "writes bench/out/discovery/HOST/) instead of this machine.",
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print JSON (the profile, notes and differences) instead of YAML."
    ),
) -> None:
    """Print this node's (or a records directory's) hardware as a profile ready to paste under
    `hardware:`, then every difference from the host's profile in the model, located in the file."""
    try:
        found = discover_hardware(read_records(records) if records else read_live())
    except DiscoveryError as exc:
        err.print(f"error: {exc}", style="bold red", markup=False)
        raise typer.Exit(EXIT_UNUSABLE) from None
    loaded, model = checked(file)
    target = host or (records.resolve().name if records else socket.gethostname().split(".")[0])
    try:
        group = group_of(model, target)
    except UnknownHost as exc:
        _show(found, profile_name(target), target, as_json, [])
        if host is not None:
            err.print(f"error: {exc}", style="bold red", markup=False)
            raise typer.Exit(EXIT_UNUSABLE) from None
        err.print(f"'{target}' is not a host of {loaded.file}: nothing to compare with", style="cyan", markup=False)
        raise typer.Exit(EXIT_OK) from None
    name = group.hardware
    if name is None:
        _show(found, profile_name(target), target, as_json, [])
        err.print(
            f"'{target}' is in node group '{group.name}' of {loaded.file}, which names no hardware profile: "
            "nothing to compare with (paste the profile above under `hardware:` and name it in the group "
            "to have one)",
            style="cyan",
            markup=False,
        )
        raise typer.Exit(EXIT_OK)
    findings = compare(found, model, target, loaded.locator)
    _show(found, name, target, as_json, findings)
    print_findings(findings)
    if not any(f.level in (Level.error, Level.warning) for f in findings):
        err.print(f"{target}: the hardware matches profile '{name}' of {loaded.file}", markup=False)
        raise typer.Exit(EXIT_OK)
    raise typer.Exit(EXIT_FINDINGS)


def _show(found, name: str, host: str, as_json: bool, findings) -> None:
    if as_json:
        doc = {
            "host": host,
            **to_json(found, name),
            "differences": [
                {
                    "level": f.level.value,
                    "path": f.dotted,
                    "message": f.message,
                    "file": f.file,
                    "line": f.line,
                    "column": f.column,
                }
                for f in findings
            ],
        }
        out.print(json.dumps(doc, indent=2), markup=False, highlight=False, emoji=False)
    else:
        out.print(
            to_yaml(found, name, f"{host}: hardware read from {found.origin}"),
            end="",
            markup=False,
            highlight=False,
            emoji=False,
        )
