"""Checks: the InfiniBand fabric (switches, uplinks and the cabling of node ports).

A link cables the hosts of a hostlist to consecutive switch ports, so each link occupies one
interval of switch ports; checks compare intervals and NodeSets, never individual hosts.
"""

from __future__ import annotations

from ..findings import error, warning
from ..hostlist import nodeset, union
from ..model import Cluster
from . import check
from .common import (
    compute_hosts_outside,
    did_you_mean,
    group_size,
    hosts_by_profile,
    outside,
    overlap,
    overlapping_intervals,
    plural,
    repeated_hosts,
    shown,
    unique,
)


def _switches(c: Cluster) -> dict:
    return {sw.name: sw for sw in c.fabric.switches} if c.fabric else {}


def _links(c: Cluster):
    return enumerate(c.fabric.links) if c.fabric else iter(())


def _port_span(link) -> tuple[int, int]:
    return link.first_switch_port, link.first_switch_port + group_size(link.hosts) - 1


@check
def switch_names_unique(c: Cluster):
    if c.fabric is not None:
        yield from unique(c.fabric.switches, ("fabric", "switches"), "switch name", why="topology.conf names each once")


@check
def uplinks_known(c: Cluster):
    switches = _switches(c)
    for i, sw in enumerate(c.fabric.switches if c.fabric else ()):
        for k, up in enumerate(sw.uplinks):
            if up == sw.name:
                yield error(("fabric", "switches", i, "uplinks", k), f"switch {sw.name!r} cannot uplink to itself")
            elif up not in switches:
                yield error(
                    ("fabric", "switches", i, "uplinks", k),
                    f"uplink to unknown switch {up!r}" + did_you_mean(up, switches),
                )


@check
def uplinks_acyclic(c: Cluster):
    """topology.conf is a tree: a switch must not end up above itself through its uplinks."""
    if c.fabric is None:
        return
    ups = {sw.name: [u for u in sw.uplinks if u != sw.name] for sw in c.fabric.switches}
    done: set[str] = set()
    reported: set[frozenset[str]] = set()
    for i, sw in enumerate(c.fabric.switches):
        cycle = _find_cycle(sw.name, ups, [], set(), done)
        if cycle and sw.name in cycle and frozenset(cycle) not in reported:
            reported.add(frozenset(cycle))
            cycle = cycle[cycle.index(sw.name):] + cycle[: cycle.index(sw.name)]
            yield error(
                ("fabric", "switches", i, "uplinks"),
                "uplinks form a loop: " + " -> ".join(cycle + [cycle[0]]) + "; uplinks must lead upwards only",
            )


def _find_cycle(name: str, ups: dict, path: list[str], on_path: set[str], done: set[str]) -> list[str] | None:
    if name in on_path:
        return path[path.index(name):]
    if name in done or name not in ups:
        return None
    path.append(name)
    on_path.add(name)
    for up in ups[name]:
        cycle = _find_cycle(up, ups, path, on_path, done)
        if cycle:
            return cycle
    path.pop()
    on_path.discard(name)
    done.add(name)
    return None


@check
def links_to_known_switches(c: Cluster):
    switches = _switches(c)
    for i, link in _links(c):
        if link.switch not in switches:
            yield error(
                ("fabric", "links", i, "switch"),
                f"link to unknown switch {link.switch!r}" + did_you_mean(link.switch, switches),
            )


@check
def link_hosts_in_model(c: Cluster):
    for i, link in _links(c):
        unknown = outside(nodeset(link.hosts), c.all_hosts)
        if len(unknown):
            yield error(
                ("fabric", "links", i, "hosts"),
                f"{shown(unknown)} not in any node group; cable only hosts the model describes",
            )


@check
def switch_ports_in_range(c: Cluster):
    switches = _switches(c)
    for i, link in _links(c):
        sw = switches.get(link.switch)
        first, last = _port_span(link)
        if sw is not None and last > sw.ports:
            yield error(
                ("fabric", "links", i, "first_switch_port"),
                f"cabling {plural(last - first + 1, 'host')} from port {first} takes "
                + (f"port {first}" if first == last else f"ports {first}-{last}")
                + f", but switch {sw.name!r} has {sw.ports} ports; "
                + (f"start at port {sw.ports - (last - first)} or lower, or " if last - first < sw.ports else "")
                + "use another switch for some of them",
            )


@check
def switch_ports_wired_once(c: Cluster):
    by_switch: dict[str, list[tuple[int, int, int]]] = {}
    for i, link in _links(c):
        by_switch.setdefault(link.switch, []).append((*_port_span(link), i))
    for switch, spans in by_switch.items():
        for i, j, lo, hi in overlapping_intervals(spans):
            ports = f"port {lo}" if lo == hi else f"ports {lo}-{hi}"
            yield error(
                ("fabric", "links", i, "first_switch_port"),
                f"{ports} of switch {switch!r} already cabled by fabric.links[{j}]; "
                "each switch port takes one cable",
            )


@check
def node_ports_wired_once(c: Cluster):
    by_port: dict[int, list[int]] = {}  # adapter port number -> indexes of links cabling it
    for i, link in _links(c):
        by_port.setdefault(link.port, []).append(i)
    for port, indexes in by_port.items():
        hosts = [nodeset(c.fabric.links[i].hosts) for i in indexes]
        for i, j, shared in repeated_hosts(hosts):
            yield error(
                ("fabric", "links", indexes[i], "hosts"),
                f"port {port} of {shown(shared)} already cabled by fabric.links[{indexes[j]}]; "
                "a node port takes one cable",
            )


@check
def node_ports_exist(c: Cluster):
    by_profile = hosts_by_profile(c)
    total_ports = {name: sum(a.ports for a in c.hardware[name].ib_adapters) for name in by_profile}
    for i, link in _links(c):
        hosts = nodeset(link.hosts)
        for name, members in by_profile.items():
            if link.port <= total_ports[name]:
                continue
            lacking = overlap(hosts, members)
            if len(lacking):
                has = (
                    f"only {plural(total_ports[name], 'InfiniBand port')}"
                    if total_ports[name]
                    else "no InfiniBand adapter"
                )
                yield error(
                    ("fabric", "links", i, "port"),
                    f"port {link.port} of {shown(lacking)}: hardware {name!r} has {has}",
                )


@check
def compute_nodes_on_fabric(c: Cluster):
    """Warning, not error: a compute node off the fabric still runs single-node jobs, but
    topology.conf cannot place it, MPI and storage over InfiniBand miss it."""
    if c.fabric is None:
        return
    for i, off in compute_hosts_outside(c, union(link.hosts for link in c.fabric.links)):
        yield warning(
            ("nodes", i, "hosts"),
            f"fabric {c.fabric.name!r} has no cable to compute nodes {shown(off)}; "
            "add them to fabric.links (Slurm's topology.conf leaves them out)",
        )


@check
def nodes_only_on_leaf_switches(c: Cluster):
    """Slurm's topology/tree refuses a switch with both nodes and child switches
    ("switch X has both child switches and nodes", then slurmctld exits)."""
    if c.fabric is None:
        return
    children: dict[str, list[str]] = {}
    for sw in c.fabric.switches:
        for up in sw.uplinks:
            children.setdefault(up, []).append(sw.name)
    slurm_nodes = c.slurm_nodes
    links_of: dict[str, list[str]] = {}
    for link in c.fabric.links:  # group once: scanning every link per switch is quadratic
        if link.switch in children:
            links_of.setdefault(link.switch, []).append(link.hosts)
    for i, sw in enumerate(c.fabric.switches):
        if sw.name not in children or sw.name not in links_of:
            continue
        cabled = union(links_of[sw.name])
        on_it = overlap(cabled, slurm_nodes)
        if len(on_it):
            yield error(
                ("fabric", "switches", i, "name"),
                f"switch {sw.name!r} has compute nodes {shown(on_it)} and child switches "
                f"{', '.join(children[sw.name])}; Slurm's topology/tree needs nodes on leaf switches "
                "only: cable these nodes to a leaf switch",
            )
