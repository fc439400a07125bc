"""`hal-provision power on|off|cycle|status HOSTLIST`: nodes' power through the BMCs the model
describes (each node group's `bmc`: Redfish or IPMI), every node at once, the answers folded into
hostlists. Exit 0: every BMC did what was asked; 1: some failed (their lines say why); 2: unusable
input (a host unknown or without a BMC, credentials that cannot be read). What is not printing
lives in hal_provision.bmc.power."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from .common import EXIT_FINDINGS, EXIT_OK, EXIT_UNUSABLE, checked, err, out

app = typer.Typer(
    no_args_is_help=True,
    help="Nodes' power through their BMCs (Redfish or IPMI, as each node group's `bmc` says): on, off, cycle, status.",
)

HOSTLIST = typer.Argument(..., metavar="HOSTLIST", help="The nodes, a hostlist (bm[01-04]).", show_default=False)
FILE = typer.Option(
    None, "-f", "--file", help="cluster.yml to use; the embedded HAL description if omitted.", show_default=False
)
AS_JSON = typer.Option(False, "--json", help="Print each host's result and the folded lines as JSON.")
FANOUT = typer.Option(64, "--fanout", min=1, help="BMCs asked at once.")
TIMEOUT = typer.Option(10, "--timeout", min=1, help="Seconds to wait for a BMC's connection and each answer.")
WAIT = typer.Option(
    0,
    "--wait",
    min=0,
    metavar="SECONDS",
    help="Wait up to SECONDS for each node to reach the state asked for (on; off for `off`) and print the "
    "state reached; 0: print what was sent and return.",
)


def _fail(message: str) -> None:
    for line in message.splitlines():
        err.print(f"error: {line}", style="bold red", markup=False)
    raise typer.Exit(EXIT_UNUSABLE)


def _power(action: str, hosts: str, file: Optional[Path], as_json: bool, fanout: int, timeout: int, wait: int) -> None:
    from ..bmc import credentials
    from ..bmc import power as lib
    from ..hostlist import HostlistError, expand

    _loaded, model = checked(file)
    try:
        chosen = expand(hosts)
    except HostlistError as exc:
        _fail(f"HOSTLIST: {exc}")
    if not chosen:
        _fail("HOSTLIST names no node")
    try:
        found = lib.targets(model, chosen)
        creds = lib.load_credentials(found)
    except (lib.TargetError, credentials.CredentialsError) as exc:
        _fail(str(exc))
    results = lib.run(found, creds, action, wait_s=wait, fanout=fanout, timeout=timeout)
    if as_json:
        print(json.dumps(lib.report(action, results), indent=2, sort_keys=True))
    else:
        for group in lib.folded(results):
            out.print(group.line, style=None if group.ok else "bold red", markup=False)
        failed = sum(1 for r in results if not r.ok)
        if failed:
            err.print(f"{failed} of {len(results)} BMCs failed", style="bold red", markup=False)
    raise typer.Exit(EXIT_FINDINGS if any(not r.ok for r in results) else EXIT_OK)


def _action(name: str, doc: str) -> None:
    """Register `power NAME`: on, off and cycle take the same options."""

    def command(
        hosts: str = HOSTLIST,
        file: Optional[Path] = FILE,
        wait: int = WAIT,
        as_json: bool = AS_JSON,
        fanout: int = FANOUT,
        timeout: int = TIMEOUT,
    ) -> None:
        _power(name, hosts, file, as_json, fanout, timeout, wait)

    command.__doc__ = doc
    app.command(name)(command)


_action("on", "Power the nodes on.")
_action("off", "Power the nodes off at once (forced: the OS is not asked to shut down).")
_action("cycle", "Power the nodes off and on again (forced); a node that is off is powered on.")


@app.command()
def status(
    hosts: str = HOSTLIST,
    file: Optional[Path] = FILE,
    as_json: bool = AS_JSON,
    fanout: int = FANOUT,
    timeout: int = TIMEOUT,
) -> None:
    """Each node's power state as its BMC reports it, folded: `bm[01-02]: on`."""
    _power("status", hosts, file, as_json, fanout, timeout, 0)
