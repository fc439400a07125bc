"""Checks: networks and per-group addressing.

A group's addresses on a network form one interval: the first host's address plus the
group's size. Checks compare intervals, never individual hosts.
"""

from __future__ import annotations

from ipaddress import IPv4Network

from ..findings import error
from ..model import Cluster
from . import check
from .common import address, did_you_mean, group_size, overlapping_intervals


def _usable(cidr: IPv4Network) -> tuple[int, int]:
    """First and last address a host may take: not the network or broadcast address
    (except /31 point-to-point links and /32 single hosts, which have neither)."""
    first, last = int(cidr.network_address), int(cidr.broadcast_address)
    return (first, last) if cidr.prefixlen >= 31 else (first + 1, last - 1)


def _address_intervals(c: Cluster):
    """(network, start, end, group index) for each address a group has on a declared network."""
    for i, group in enumerate(c.nodes):
        size = group_size(group.hosts)
        for net, first in group.addresses.items():
            if net in c.networks:
                yield net, int(first), int(first) + size - 1, i


@check
def primary_network_declared(c: Cluster):
    primary = c.cluster.primary_network
    if primary not in c.networks:
        yield error(
            ("cluster", "primary_network"),
            f"primary network {primary!r} is not declared under networks" + did_you_mean(primary, c.networks),
        )


@check
def networks_disjoint(c: Cluster):
    spans = [(int(n.cidr.network_address), int(n.cidr.broadcast_address), name) for name, n in c.networks.items()]
    for name, other, _lo, _hi in overlapping_intervals(spans):
        yield error(
            ("networks", name, "cidr"),
            f"{c.networks[name].cidr} overlaps network {other!r} ({c.networks[other].cidr}); "
            "give each network its own subnet so every address has one meaning",
        )


@check
def addresses_on_declared_networks(c: Cluster):
    for i, group in enumerate(c.nodes):
        for net in group.addresses:
            if net not in c.networks:
                yield error(
                    ("nodes", i, "addresses", net),
                    f"address on undeclared network {net!r}" + did_you_mean(net, c.networks),
                )


@check
def primary_addresses_present(c: Cluster):
    primary = c.cluster.primary_network
    if primary not in c.networks:
        return  # primary_network_declared reports it
    for i, group in enumerate(c.nodes):
        if primary not in group.addresses:
            yield error(
                ("nodes", i, "addresses"),
                f"node group {group.name!r} has no address on the primary network {primary!r}; "
                "its hosts would be unreachable by name and by Ansible: add "
                f"addresses.{primary}",
            )


@check
def addresses_inside_cidr(c: Cluster):
    for net, start, end, i in _address_intervals(c):
        cidr = c.networks[net].cidr
        low, high = _usable(cidr)
        if low <= start and end <= high:
            continue
        hosts = c.nodes[i].hosts
        span = address(start) if start == end else f"{address(start)}-{address(end)}"
        yield error(
            ("nodes", i, "addresses", net),
            f"{hosts} would get {span}, outside the usable addresses of {net} ({cidr}: "
            f"{address(low)}-{address(high)}); choose a first address between {address(low)} "
            f"and {address(max(low, high - (end - start)))}",
        )


@check
def addresses_unique(c: Cluster):
    by_net: dict[str, list[tuple[int, int, int]]] = {}
    for net, start, end, i in _address_intervals(c):
        by_net.setdefault(net, []).append((start, end, i))
    for net, intervals in by_net.items():
        for i, j, lo, hi in overlapping_intervals(intervals):
            span = address(lo) if lo == hi else f"{address(lo)}-{address(hi)}"
            yield error(
                ("nodes", i, "addresses", net),
                f"{net} addresses {span} of node group {c.nodes[i].name!r} are also given to "
                f"node group {c.nodes[j].name!r} (nodes[{j}]); each group needs its own range "
                "(first address + number of hosts)",
            )
