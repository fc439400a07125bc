"""Checks: node groups (names, host names, counts, hardware profiles)."""

from __future__ import annotations

from ..findings import error
from ..hostlist import nodeset
from ..model import Cluster
from . import check
from .common import did_you_mean, group_size, repeated_hosts, shown, unique


@check
def node_group_names_unique(c: Cluster):
    yield from unique(c.nodes, ("nodes",), "node group name", why="they become Ansible group names")


@check
def hosts_in_one_group(c: Cluster):
    for i, j, shared in repeated_hosts([nodeset(g.hosts) for g in c.nodes]):
        yield error(
            ("nodes", i, "hosts"),
            f"{shown(shared)} already in node group {c.nodes[j].name!r} (nodes[{j}]); "
            "each host belongs to exactly one node group",
        )


@check
def host_count_matches(c: Cluster):
    for i, group in enumerate(c.nodes):
        size = group_size(group.hosts)
        if group.count is not None and group.count != size:
            yield error(
                ("nodes", i, "count"),
                f"count is {group.count} but hosts {group.hosts!r} names {size}; "
                "fix the hostlist or set count to match",
            )


@check
def hardware_profiles_exist(c: Cluster):
    for i, group in enumerate(c.nodes):
        if group.hardware is not None and group.hardware not in c.hardware:
            yield error(
                ("nodes", i, "hardware"),
                f"unknown hardware profile {group.hardware!r}" + did_you_mean(group.hardware, c.hardware),
            )
