"""Checks: the InfiniBand fabric (switches, uplinks and the cabling of node ports).

A link cables the hosts of a hostlist to consecutive switch ports, so each link occupies one
interval of switch ports (one per switch, for a link over several `switches`); checks compare
intervals and NodeSets, never individual hosts. An entry naming many switches is checked as a
whole and its findings name the switches folded (leaf[01-56]), at the entry's own line.
"""

from __future__ import annotations

from ..findings import error, warning
from ..hostlist import fold, nodeset, outside, overlap, union
from ..model import Cluster
from . import check
from .common import (
    compute_hosts_outside,
    did_you_mean,
    hosts_by_profile,
    nearest_host,
    overlapping_intervals,
    plural,
    repeated_hosts,
    shown,
)


def _switches(c: Cluster) -> dict:
    """Switch name -> its entry in fabric.switches, for every switch."""
    return {name: sw for _i, name, sw in c.fabric.every_switch()} if c.fabric else {}


def _links(c: Cluster):
    return enumerate(c.fabric.links) if c.fabric else iter(())


def _name_key(sw) -> str:
    """The key an entry names its switches with: `name` or `names`."""
    return "name" if sw.name is not None else "names"


def _switch_key(link) -> str:
    return "switch" if link.switch is not None else "switches"


def _which(names: list[str]) -> str:
    """'switch 'leaf01'' or 'switches leaf[01-56] (56 switches)'."""
    if len(names) == 1:
        return f"switch {names[0]!r}"
    return f"switches {fold(names)} ({len(names)} switches)"


@check
def switch_names_unique(c: Cluster):
    if c.fabric is None:
        return
    first: dict[str, int] = {}  # switch name -> index of the entry that names it first
    for i, sw in enumerate(c.fabric.switches):
        repeats: dict[int, list[str]] = {}
        for name in sw.members:
            j = first.setdefault(name, i)
            if j != i:
                repeats.setdefault(j, []).append(name)
        for j, names in repeats.items():
            what = f"switch name {names[0]!r} is" if len(names) == 1 else f"switch names {fold(names)} are"
            yield error(
                ("fabric", "switches", i, _name_key(sw)),
                f"{what} already used by fabric.switches[{j}]; topology.conf names each once",
            )


@check
def uplinks_known(c: Cluster):
    switches = _switches(c)
    for i, sw in enumerate(c.fabric.switches if c.fabric else ()):
        members = set(sw.members)
        for k, up in enumerate(sw.uplinks):
            if up in members:
                yield error(("fabric", "switches", i, "uplinks", k), f"switch {up!r} cannot uplink to itself")
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
    every = c.fabric.every_switch()
    ups = {name: [u for u in sw.uplinks if u != name] for _i, name, sw in every}
    done: set[str] = set()
    reported: set[frozenset[str]] = set()
    for i, name, _sw in every:
        cycle = _find_cycle(name, ups, [], set(), done)
        if cycle and name in cycle and frozenset(cycle) not in reported:
            reported.add(frozenset(cycle))
            cycle = cycle[cycle.index(name) :] + cycle[: cycle.index(name)]
            yield error(
                ("fabric", "switches", i, "uplinks"),
                "uplinks form a loop: " + " -> ".join(cycle + [cycle[0]]) + "; uplinks must lead upwards only",
            )


def _find_cycle(name: str, ups: dict, path: list[str], on_path: set[str], done: set[str]) -> list[str] | None:
    if name in on_path:
        return path[path.index(name) :]
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
        unknown = [name for name in link.switch_names if name not in switches]
        if unknown:
            yield error(
                ("fabric", "links", i, _switch_key(link)),
                f"link to unknown {_which(unknown)}" + did_you_mean(unknown[0], switches),
            )


@check
def link_switches_take_every_host(c: Cluster):
    """A link over several switches fills them in turn: every host needs a switch, and every
    switch named should get a host (a spare one is more likely a typo than a plan)."""
    for i, link in _links(c):
        if link.switches is None:
            continue
        total, per, names = link.host_count, link.hosts_per_switch, link.switch_names
        need = -(-total // per)
        if len(names) == need:
            continue
        counts = f"{plural(total, 'host')} at {per} per switch take {need} switch{'es' if need != 1 else ''}"
        if len(names) < need:
            yield error(
                ("fabric", "links", i, "switches"),
                f"{counts}, but {link.switches!r} names {len(names)}; the last "
                f"{plural(total - len(names) * per, 'host')} would have no switch: "
                "name more switches or raise hosts_per_switch",
            )
        else:
            yield error(
                ("fabric", "links", i, "switches"),
                f"{counts}; {_which(names[need:])} would get no host: name fewer switches or lower hosts_per_switch",
            )


@check
def link_hosts_in_model(c: Cluster):
    for i, link in _links(c):
        unknown = outside(nodeset(link.hosts), c.all_hosts)
        if len(unknown):
            yield error(
                ("fabric", "links", i, "hosts"),
                f"{shown(unknown)} not in any node group; cable only hosts the model describes"
                + nearest_host(c, unknown),
            )


@check
def switch_ports_in_range(c: Cluster):
    switches = _switches(c)
    for i, link in _links(c):
        first = link.first_switch_port
        too_small: dict[tuple[int, int], list[str]] = {}  # (switch ports, hosts cabled) -> switches
        for name, _start, count in link.segments():
            sw = switches.get(name)
            if sw is not None and first + count - 1 > sw.ports:
                too_small.setdefault((sw.ports, count), []).append(name)
        for (ports, count), names in too_small.items():
            last = first + count - 1
            has = f"{_which(names)} {'has' if len(names) == 1 else 'have'} {ports} ports"
            yield error(
                ("fabric", "links", i, "first_switch_port"),
                f"cabling {plural(count, 'host')} from port {first} takes "
                + (f"port {first}" if first == last else f"ports {first}-{last}")
                + f", but {has}; "
                + (f"start at port {ports - (last - first)} or lower, or " if last - first < ports else "")
                + ("use another switch for some of them" if link.switch is not None else "lower hosts_per_switch"),
            )


@check
def switch_ports_wired_once(c: Cluster):
    by_switch: dict[str, list[tuple[int, int, int]]] = {}
    for i, link in _links(c):
        first = link.first_switch_port
        for name, _start, count in link.segments():
            by_switch.setdefault(name, []).append((first, first + count - 1, i))
    clashes: dict[tuple[int, int], list[tuple[str, int, int]]] = {}  # (link, earlier link) -> where
    for switch, spans in by_switch.items():
        for i, j, lo, hi in overlapping_intervals(spans):
            clashes.setdefault((i, j), []).append((switch, lo, hi))
    for (i, j), where in clashes.items():
        spans = {(lo, hi) for _switch, lo, hi in where}
        lo, hi = min(s[0] for s in spans), max(s[1] for s in spans)
        ports = f"port {lo}" if lo == hi else f"ports {lo}-{hi}"
        yield error(
            ("fabric", "links", i, "first_switch_port"),
            f"{ports} of {_which([w[0] for w in where])} already cabled by fabric.links[{j}]; "
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
def link_devices_known(c: Cluster):
    """A link naming its port by device: every profile of its hosts has that port, at one number."""
    for i, link in _links(c):
        if link.device is None:
            continue
        ports = c.link_device_ports(link)
        where = ("fabric", "links", i, "device")
        if not ports:
            yield error(
                where,
                f"device {link.device} of {shown(nodeset(link.hosts))}: these hosts have no hardware "
                "profile to name it in (give `port`, or the hosts' node group a `hardware`)",
            )
            continue
        for name, number in ports.items():
            if number is None:
                have = ", ".join(str(p) for p in c.hardware[name].ib_ports()) or "none"
                yield error(where, f"hardware {name!r} has no InfiniBand port {link.device} (its ports: {have})")
        found = {name: n for name, n in ports.items() if n is not None}
        if "port" in link.model_fields_set and set(found.values()) - {link.port}:
            yield error(
                where,
                f"port {link.port} is not {link.device}, which is port "
                f"{'/'.join(str(n) for n in sorted(set(found.values())))} of the hosts' profile: give "
                "one of them",
            )
        elif len(set(found.values())) > 1:
            shown_ports = ", ".join(f"{name!r}: port {n}" for name, n in found.items())
            yield error(
                where,
                f"{link.device} is a different port in the hosts' profiles ({shown_ports}): cable "
                "the hosts of each profile in a link of their own",
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
    every = c.fabric.every_switch()
    children: dict[str, list[str]] = {}
    for _i, name, sw in every:
        for up in sw.uplinks:
            children.setdefault(up, []).append(name)
    slurm_nodes = c.slurm_nodes
    links_of: dict[str, list[str]] = {}  # switch with children -> hostlists cabled to it
    for link in c.fabric.links:  # group once: scanning every link per switch is quadratic
        if any(name in children for name in link.switch_names):
            for name, hosts in link.runs():
                if name in children:
                    links_of.setdefault(name, []).append(hosts)
    for i, name, sw in every:
        if name not in children or name not in links_of:
            continue
        on_it = overlap(union(links_of[name]), slurm_nodes)
        if len(on_it):
            yield error(
                ("fabric", "switches", i, _name_key(sw)),
                f"switch {name!r} has compute nodes {shown(on_it)} and child switches "
                f"{', '.join(children[name])}; Slurm's topology/tree needs nodes on leaf switches "
                "only: cable these nodes to a leaf switch",
            )
