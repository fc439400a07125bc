"""Helpers shared by the checks. No checks live here.

Host sets stay compressed: a check combines NodeSets (and integer intervals for addresses and
switch ports) and never walks host by host, so a 100,000-node description checks in
milliseconds. Prefer hostlist's `overlap`, `outside` and `common_count` to NodeSet's own
methods: they never copy the larger operand, which is what keeps them fast when one side is huge.
"""

from __future__ import annotations

import difflib
import re
from ipaddress import IPv4Address
from typing import Hashable, Iterable, Iterator, Sequence, TypeVar

from ClusterShell.NodeSet import NodeSet

from ..findings import Finding, did_you_mean, dotted, error  # noqa: F401  (did_you_mean: the checks' import)
from ..hostlist import common_count, empty, expand, nodeset, outside, overlap, union_shared
from ..model import Cluster, Role

K = TypeVar("K")

_SHOWN_CHARS = 60


def repeated_hosts(sets: Sequence[NodeSet]) -> Iterator[tuple[int, int, NodeSet]]:
    """(i, j, hosts) for the hosts of sets[i] that an earlier sets[j] already has.

    One running union finds the repeats; only then are earlier sets searched to name them,
    stopping as soon as every repeated host is attributed.
    """
    seen = empty()
    for i, hosts in enumerate(sets):
        unattributed = overlap(hosts, seen)
        seen.update(hosts)
        for j in range(i):
            if not len(unattributed):
                break
            shared = overlap(unattributed, sets[j])
            if len(shared):
                unattributed.difference_update(shared)
                yield i, j, shared


def compute_hosts_outside(cluster: Cluster, covered: NodeSet) -> Iterator[tuple[int, NodeSet]]:
    """(group index, its hosts that `covered` lacks) for each compute group that has any."""
    for i, group in enumerate(cluster.nodes):
        if group.has(Role.compute):
            missing = outside(nodeset(group.hosts), covered)
            if len(missing):
                yield i, missing


def shown(hosts: NodeSet) -> str:
    """A folded, length-capped hostlist for a message, e.g. 'hal[01-04] (4 hosts)'."""
    text = str(hosts)
    if len(text) > _SHOWN_CHARS:
        text = text[: _SHOWN_CHARS - 3] + "..."
    return text if len(hosts) == 1 else f"{text} ({len(hosts)} hosts)"


def nearest_host(c: Cluster, unknown: NodeSet, also_known: Iterable[str] = ()) -> str:
    """'; did you mean 'x'?' when `unknown` is one misspelt name: the closest model host (or
    one of `also_known`, e.g. appliance servers), or '@group' for a node group's name written
    without its '@'. Empty for several unknown hosts (new hosts, not a typo), for nothing close,
    and for a name that differs from the closest only in its numbers (a range's end).

    Only groups of up to NEAREST_GROUP_HOSTS hosts are listed: a name near one of 100,000
    numbered hosts is a range mistake, which the message's hostlist shows well enough."""
    if len(unknown) != 1:
        return ""
    name = str(unknown)
    if any(group.name == name for group in c.nodes):
        return f"; did you mean '@{name}' (the node group)?"
    candidates = list(also_known)
    for group in c.nodes:
        if len(nodeset(group.hosts)) <= NEAREST_GROUP_HOSTS:
            candidates.extend(expand(group.hosts))
    close = difflib.get_close_matches(name, candidates, n=1)
    if not close or _DIGITS.sub("", close[0]) == _DIGITS.sub("", name):
        return ""  # hal17 beside hal[01-16]: a host beyond a range, not a misspelt name
    return f"; did you mean {close[0]!r}?"


_DIGITS = re.compile(r"\d+")


NEAREST_GROUP_HOSTS = 4096


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def duplicates(names: Sequence[Hashable]) -> Iterator[tuple[int, int]]:
    """(index, index of first occurrence) for every repeat of a name in `names`."""
    first: dict[Hashable, int] = {}
    for i, name in enumerate(names):
        if name in first:
            yield i, first[name]
        else:
            first[name] = i


def unique(items: Sequence, path: tuple, what: str, key: str = "name", why: str = "") -> Iterator[Finding]:
    """An error at each item whose `key` repeats an earlier item's (items live at `path`)."""
    values = [getattr(item, key) for item in items]
    for i, first in duplicates(values):
        yield error(
            (*path, i, key),
            f"{what} {values[i]!r} is already used by {dotted(path)}[{first}]" + (f"; {why}" if why else ""),
        )


def overlapping_intervals(
    intervals: Iterable[tuple[int, int, K]],
) -> Iterator[tuple[K, K, int, int]]:
    """Pairs of overlapping closed intervals (start, end, key), by sorting once.

    Yields (key, earlier key, first shared value, last shared value) for each interval that
    overlaps one starting no later; every overlapping interval is reported at least once.
    """
    reach: tuple[int, K] | None = None  # the furthest end seen so far, and whose it is
    for start, end, key in sorted(intervals, key=lambda t: (t[0], t[1])):
        if reach is not None and start <= reach[0]:
            yield key, reach[1], start, min(end, reach[0])
        if reach is None or end > reach[0]:
            reach = (end, key)


def address(value: int) -> str:
    return str(IPv4Address(value)) if 0 <= value < 2**32 else f"{value} (beyond 255.255.255.255)"


def group_size(expr: str) -> int:
    return len(nodeset(expr))


def hosts_by_role(cluster: Cluster) -> dict[Role, NodeSet]:
    out: dict[Role, NodeSet] = {}
    for group in cluster.nodes:
        for role in group.roles:
            out.setdefault(role, empty()).update(nodeset(group.hosts))
    return out


def hosts_by_profile(cluster: Cluster, *roles: Role) -> dict[str, NodeSet]:
    """Hosts per known hardware profile (of the given roles; all roles when none given).
    The sets are shared (hostlist.union_shared): read them, never change them."""
    exprs: dict[str, list[str]] = {}
    for group in cluster.nodes:
        if group.hardware in cluster.hardware and (not roles or group.has(*roles)):
            exprs.setdefault(group.hardware, []).append(group.hosts)
    return {name: union_shared(hostlists) for name, hostlists in exprs.items()}


def makeup(hosts: NodeSet, by_profile: dict[str, NodeSet]) -> list[tuple[str, int]]:
    """(profile name, how many of `hosts` have it) for each profile present in `hosts`."""
    counts = [(name, common_count(hosts, members)) for name, members in by_profile.items()]
    return [(name, n) for name, n in counts if n]
