"""`hal-provision fleet status|converge`: the pull-mode compute nodes seen from the controller.

`status` reads what each distribution point publishes (its current.json) and what each pull
node last did (its last.json), both over SSH with ClusterShell (a point's web server answers
only the nodes it serves), checks each point's release against the cluster's public release key
on this controller, folds the nodes into hostlists by version and state, and exits 0 when every
node is current, 1 on drift, 2 on unusable input.
`converge` starts hal-converge.service on the nodes now instead of at their timer's next run.

The nodes are reached as the rendered inventory says (address, port, user, key, common SSH
arguments), through an ssh_config written for the run and passed with -F. What is pure (the
folding, the drift rules, the ssh_config) lives in hal_provision.pull.fleet.
"""

from __future__ import annotations

import json
import shlex
import tempfile
from pathlib import Path
from typing import Optional

import typer

from ..pull import fleet as lib
from ..hostlist import HostlistError, expand, fold
from .common import (
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_UNUSABLE,
    InventoryDirError,
    err,
    list_inventory,
    out,
    rendered_inventory,
)

app = typer.Typer(
    no_args_is_help=True,
    help="The pull-mode compute nodes: what each runs against what is published "
    "(status), and converging them now (converge).",
)

# Where `hal-provision render` writes by default (its -o rendered).
DEFAULT_INVENTORY = Path("rendered/inventory")
TIMEOUT = typer.Option(10, "--timeout", min=1, help="Seconds to wait for each node's and point's SSH connection.")


class Fleet:
    """The pull cluster of one rendered tree: deploy.json and each pull node's inventory variables."""

    def __init__(self, inventory: Path, deploy: lib.Deploy, hostvars: dict[str, dict]) -> None:
        self.inventory, self.deploy, self.hostvars = inventory, deploy, hostvars

    @property
    def nodes(self) -> list[str]:
        return sorted(self.deploy.nodes)


def load(inventory: Path) -> Fleet:
    """The fleet of a rendered inventory; FleetError or InventoryDirError naming what is wrong."""
    inventory = rendered_inventory(inventory)
    path = inventory.parent / "files" / lib.DEPLOY_JSON
    if not path.is_file():
        raise lib.FleetError(
            f"{path} does not exist: deploy.mode is push (the default); `fleet` reads pull-mode "
            "nodes (set deploy.mode: pull in cluster.yml and render)"
        )
    deploy = lib.parse_deploy(path.read_text(), str(path))
    hostvars = list_inventory(inventory).get("_meta", {}).get("hostvars", {})
    missing = [host for host in [*deploy.nodes, *(p.host for p in deploy.points)] if host not in hostvars]
    if missing:
        raise lib.FleetError(f"{path}: nodes {fold(sorted(set(missing)))} are not in the inventory {inventory}")
    return Fleet(inventory, deploy, hostvars)


def fan_out(
    fleet: Fleet, hosts: list[str], command: str, timeout: int, command_timeout: int = 0
) -> dict[str, str | None]:
    """Run `command` on `hosts` over SSH (ClusterShell): each host's stdout when the command
    exited 0, None when it did not (or the host did not answer). command_timeout 0: no limit."""
    from ClusterShell.NodeSet import NodeSet
    from ClusterShell.Task import task_self

    if not hosts:
        return {}
    with tempfile.TemporaryDirectory(prefix="hal-fleet-") as tmp:
        config = Path(tmp) / "ssh_config"
        config.write_text(lib.ssh_config({h: fleet.hostvars[h] for h in hosts}))
        task = task_self()
        task.set_info("ssh_options", f"-F {config}")
        task.set_info("connect_timeout", timeout)
        worker = task.shell(command, nodes=NodeSet.fromlist(hosts), stderr=True, timeout=command_timeout or None)
        task.run()
        codes = {str(node): rc for rc, nodes in worker.iter_retcodes() for node in nodes}
        texts = {
            str(node): bytes(buf).decode(errors="replace") for buf, nodes in worker.iter_buffers() for node in nodes
        }
    return {h: texts.get(h, "") if codes.get(h) == 0 else None for h in hosts}


def read_last(fleet: Fleet, hosts: list[str], timeout: int) -> dict[str, str | None]:
    """Each node's last.json text ('' when it has none; None when it did not answer)."""
    return fan_out(fleet, hosts, lib.last_json_command(fleet.deploy.version_file), timeout, command_timeout=timeout * 3)


def read_published(fleet: Fleet, timeout: int) -> dict[str, str | None]:
    """Each point's current.json text, read on the point over SSH (None: no answer, or no file)."""
    hosts = sorted({p.host for p in fleet.deploy.points})
    command = f"cat {shlex.quote(fleet.deploy.bundle_root.rstrip('/') + '/current.json')}"
    return fan_out(fleet, hosts, command, timeout, command_timeout=timeout * 3)


def signature(text: str, cluster: str) -> str:
    """Whether a point's release verifies with this controller's public key of the cluster."""
    from .. import release

    _key, pub = release.key_paths(cluster)
    if not pub.is_file():
        return f"not checked: no release key {pub} on this controller"
    try:
        doc = release.verify(text, pub)
    except release.ReleaseError as exc:
        return f"DOES NOT VERIFY: {exc}"
    return f"verified, serial {doc.get('serial')}, expires {doc.get('expires')}"


def survey(fleet: Fleet, hosts: list[str], timeout: int) -> tuple[list[dict], list[lib.NodeResult]]:
    """What the points publish and each of `hosts`' result."""
    points, published = [], {}
    texts = read_published(fleet, timeout)
    for point in fleet.deploy.points:
        text = texts.get(point.host)
        version = lib.published_version(text)
        problem = (
            None
            if version
            else (
                f"cannot read {fleet.deploy.bundle_root}/current.json over SSH"
                if text is None
                else "current.json is no release (unsigned or malformed)"
            )
        )
        published[point.url] = version
        points.append(
            {
                "host": point.host,
                "url": point.url,
                "version": version,
                "error": problem,
                "signature": signature(text, fleet.deploy.cluster) if version else None,
            }
        )
    last = read_last(fleet, hosts, timeout)
    results = [lib.classify(h, last.get(h), published.get(fleet.deploy.nodes[h])) for h in hosts]
    return points, results


def _fail(message: str) -> None:
    err.print(f"error: {message}", style="bold red", markup=False)
    raise typer.Exit(EXIT_UNUSABLE)


def _loaded(inventory: Path) -> Fleet:
    try:
        return load(inventory)
    except (lib.FleetError, InventoryDirError) as exc:
        _fail(str(exc))


def _print(points: list[dict], results: list[lib.NodeResult]) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    wide = out if out.is_terminal else Console(width=max(out.width, 120), highlight=False, emoji=False)
    published = Table(title="published", title_justify="left", box=box.SIMPLE_HEAD)
    for header in ("point", "url", "version", "signature"):
        published.add_column(header, no_wrap=header != "signature")
    for p in points:
        published.add_row(
            p["host"],
            p["url"],
            p["version"] or f"unreadable: {p['error']}",
            p["signature"] or "-",
            style=None if p["version"] and (p["signature"] or "").startswith("verified") else "bold red",
        )
    nodes = Table(title="pull nodes", title_justify="left", box=box.SIMPLE_HEAD)
    for header in ("version", "state", "drift", "last run (UTC)", "count", "nodes"):
        nodes.add_column(header, no_wrap=header != "nodes")
    for row in lib.rows(results):
        nodes.add_row(
            row.version,
            row.state,
            row.drift or "-",
            row.last_run,
            str(row.count),
            row.nodes,
            style=None
            if row.drift is None
            else "bold red"
            if row.drift in ("failed", "refused", "unreachable")
            else "yellow",
        )
    wide.print(published)
    wide.print(nodes)
    reasons: dict[str, list[str]] = {}  # why the drifted nodes' last runs did not converge, as they said
    for r in results:
        if r.drift and r.last and isinstance(r.last.get("failed_task"), str):
            reasons.setdefault(r.last["failed_task"], []).append(r.host)
    for why, hosts in reasons.items():
        wide.print(f"{fold(hosts)}: {why}", markup=False)
    n = lib.drifted(results)
    wide.print(f"{len(results) - n} of {len(results)} nodes current" + (f", {n} drifted" if n else ""), markup=False)


def _exit(results: list[lib.NodeResult]) -> None:
    raise typer.Exit(EXIT_FINDINGS if lib.drifted(results) else EXIT_OK)


@app.command()
def status(
    inventory: Path = typer.Argument(
        DEFAULT_INVENTORY, help="The rendered inventory directory (RENDERED/inventory).", show_default=True
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the points, the rows and each node's detail as JSON."),
    timeout: int = TIMEOUT,
) -> None:
    """Each pull node's version and last run against what its point publishes, folded into
    hostlists. Exit 0: every node current; 1: drift (failed, behind, never ran, unreachable, ...);
    2: unusable input."""
    fleet = _loaded(inventory)
    points, results = survey(fleet, fleet.nodes, timeout)
    if as_json:
        print(json.dumps(lib.report(points, results), indent=2, sort_keys=True))
    else:
        _print(points, results)
    _exit(results)


@app.command()
def converge(
    hosts: Optional[str] = typer.Argument(
        None, help="A hostlist of pull nodes (default: every one).", show_default=False
    ),
    inventory: Path = typer.Option(
        DEFAULT_INVENTORY, "-i", "--inventory", help="The rendered inventory directory (RENDERED/inventory)."
    ),
    wait: bool = typer.Option(
        False,
        "--wait",
        help="Wait for each node's run to finish, then print the status of those nodes and exit as `status` does.",
    ),
    timeout: int = TIMEOUT,
) -> None:
    """Start hal-converge.service on the pull nodes now. Without --wait: exit 0 when it started on
    every node, 1 when some did not answer or refused."""
    fleet = _loaded(inventory)
    try:
        chosen = expand(hosts) if hosts else fleet.nodes
    except HostlistError as exc:
        _fail(f"HOSTS: {exc}")
    strangers = [h for h in chosen if h not in fleet.deploy.nodes]
    if strangers:
        _fail(f"HOSTS: {fold(strangers)} are not pull nodes (deploy.json's nodes: {fold(fleet.nodes)})")
    started = fan_out(fleet, chosen, lib.converge_command(wait), timeout)
    ok = [h for h in chosen if started[h] is not None]
    failed = [h for h in chosen if started[h] is None]
    if ok:
        out.print(f"{'ran' if wait else 'started'} {lib.UNIT} on {fold(ok)}", markup=False)
    if failed:
        err.print(
            f"{lib.UNIT} did not {'run' if wait else 'start'} on {fold(failed)} (no answer, or systemctl "
            "failed: see `fleet status` and the node's journal)",
            style="bold red",
            markup=False,
        )
    if not wait:
        raise typer.Exit(EXIT_FINDINGS if failed else EXIT_OK)
    points, results = survey(fleet, chosen, timeout)
    _print(points, results)
    _exit(results)
