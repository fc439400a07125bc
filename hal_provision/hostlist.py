"""Hostlist expressions (``hal[01-16]``) through ClusterShell's NodeSet.

Node groups stay compressed: callers get NodeSets and only expand them (with `expand`) where
an output needs one line per host.

At 100,000 hosts ClusterShell's general parser, iterator and folding cost seconds, because a
RangeSet is a set of index strings that it sorts with a Python key function on every pass.
`nodeset`, `expand` and `fold` therefore build, list and fold the common shapes themselves,
with exactly ClusterShell's results (tests/unit/test_render.py compares them), and hand
every other shape to ClusterShell.
"""

from __future__ import annotations

import re
from functools import lru_cache

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetBase, NodeSetError
from ClusterShell.RangeSet import RangeSet


class HostlistError(ValueError):
    """A hostlist expression that ClusterShell cannot parse."""


_ALLOWED = re.compile(r"^[A-Za-z0-9][A-Za-z0-9\-\[\],.]*$")

# prefix[first-last]suffix: one range, no digit outside the brackets (digits there make
# ClusterShell add index dimensions). Nearly every node group, rack and leaf looks like this.
_SINGLE_RANGE = re.compile(r"^([A-Za-z][A-Za-z\-.]*)\[(\d+)-(\d+)\]([A-Za-z\-.]*)$")


# Unbounded: the model validates every expression once, and checks and renderers ask for the
# same ones again. A 100,000-node fabric has thousands of link expressions; an LRU smaller
# than that re-parsed each of them on every pass.
@lru_cache(maxsize=None)
def nodeset(expr: str) -> NodeSet:
    """Parse a hostlist expression; raise HostlistError with a readable reason.

    The result is shared between callers: combine it into new sets, never change it in place.
    """
    if not isinstance(expr, str) or not _ALLOWED.match(expr):
        raise HostlistError(
            f"not a valid hostlist expression: {expr!r} (host names use letters, digits and '-'; "
            "ranges look like hal[01-16])"
        )
    single = _single_range(expr)
    if single is not None:  # the NodeSet ClusterShell's parser would build, for a third of the cost
        prefix, lo, hi, pad, suffix = single
        indexes = RangeSet()
        indexes.add_range(lo, hi + 1, 1, pad)
        return NodeSet(NodeSetBase(f"{prefix}%s{suffix}", indexes, False), resolver=RESOLVER_NOGROUP)
    try:
        # No group resolution: '@name' must not silently expand from /etc/clustershell.
        ns = NodeSet(expr, resolver=RESOLVER_NOGROUP)
    except (NodeSetError, ValueError) as exc:
        raise HostlistError(f"not a valid hostlist expression: {expr!r} ({exc})") from None
    if len(ns) == 0:
        raise HostlistError(f"hostlist expression {expr!r} names no host")
    return ns


def expand(expr: str) -> list[str]:
    """Every host of a hostlist expression, in NodeSet order (what iterating it yields).

    For output that needs one line per host: iterating a NodeSet costs about 2 us a host,
    several times what formatting the names does.
    """
    ns = nodeset(expr)  # validates; cached, so usually free
    single = _single_range(expr)
    if single is not None:
        prefix, lo, hi, pad, suffix = single
        # '%' cannot occur in a valid expression (_ALLOWED), so the names are safe in a format.
        return list(map(f"{prefix}%0{pad}d{suffix}".__mod__, range(lo, hi + 1)))
    patterns = _one_dimensional(ns)
    if patterns is None:  # several index dimensions (rack[1-2]n[1-4]): ClusterShell's iterator
        return list(ns)
    hosts: list[str] = []
    for pattern, indexes in patterns:
        if indexes is None:
            hosts.append(pattern % ())
        else:
            prefix, suffix = pattern.split("%s")
            hosts.extend([prefix + index + suffix for index in _sorted_indexes(indexes)])
    return hosts


def fold(names) -> str:
    """Compress host names (an iterable or NodeSet) into one hostlist expression.

    Exactly str(NodeSet), and several times faster for large sets whose indexes all have one
    width (hal[000001-075000],halc[00001-25000]).
    """
    ns = names if isinstance(names, NodeSet) else NodeSet.fromlist(list(names), resolver=RESOLVER_NOGROUP)
    folded = _fold_one_width(ns)
    return str(ns) if folded is None else folded


def union(exprs) -> NodeSet:
    out = NodeSet(resolver=RESOLVER_NOGROUP)
    for expr in exprs:
        out.update(nodeset(expr) if isinstance(expr, str) else expr)
    return out


def _single_range(expr: str) -> tuple[str, int, int, int, str] | None:
    """(prefix, first, last, padding, suffix) of a single-range expression ClusterShell accepts.

    None for any other expression, and for ranges ClusterShell rejects (its parser then says
    why). Padding follows ClusterShell: a leading zero on the first index pads every index
    to its width; padded bounds must have the same width.
    """
    match = _SINGLE_RANGE.match(expr)
    if match is None:
        return None
    prefix, first, last, suffix = match.groups()
    lo, hi = int(first), int(last)
    pad = len(first) if len(first) > 1 and first[0] == "0" else 0
    padded_last = len(last) > 1 and last[0] == "0" and hi != 0
    if (pad or padded_last) and len(first) != len(last):
        return None
    if lo > hi or hi - lo >= 10**8:
        return None
    return prefix, lo, hi, pad, suffix


def _one_dimensional(ns: NodeSet) -> list[tuple[str, RangeSet | None]] | None:
    """(pattern, indexes) in NodeSet order, if no pattern has more than one index dimension.

    NodeSet keeps a pattern such as 'hal%s' per name shape, with a RangeSet (a set of index
    strings) or None for a name without index; it iterates and folds patterns sorted.
    """
    patterns = getattr(ns, "_patterns", None)
    if not isinstance(patterns, dict):
        return None
    items = sorted(patterns.items())
    for pattern, indexes in items:
        if indexes is not None and not (
            isinstance(indexes, RangeSet) and isinstance(indexes, set) and pattern.count("%s") == 1
        ):
            return None
    return items


def _sorted_indexes(indexes: RangeSet) -> list[str]:
    """RangeSet.striter()'s order (shorter first, then by text) for a fraction of its cost.

    striter sorts with a Python key function; a plain string sort followed by a stable sort on
    length gives the same order, in C.
    """
    texts = sorted(set.__iter__(indexes))
    if texts and texts[0].startswith("-"):  # negative indexes sort otherwise; never in names
        return list(indexes.striter())
    texts.sort(key=len)
    return texts


def _fold_one_width(ns: NodeSet) -> str | None:
    """str(ns) when all indexes of each pattern have one width (and no autostep); else None.

    With one width, RangeSet order is text order and ClusterShell's padding rules keep each
    index's text, so a folded run is simply 'first-last' of the texts.
    """
    patterns = _one_dimensional(ns)
    if patterns is None or ns.fold_axis is not None:
        return None
    parts = []
    for pattern, indexes in patterns:
        if indexes is None:
            parts.append(pattern % ())
            continue
        if not len(indexes) or indexes.autostep is not None:
            return None
        texts = sorted(set.__iter__(indexes))
        if len(set(map(len, texts))) != 1 or texts[0].startswith("-"):
            return None
        numbers = list(map(int, texts))
        runs = []
        start = 0
        for i in range(1, len(numbers) + 1):
            if i == len(numbers) or numbers[i] != numbers[i - 1] + 1:
                runs.append(texts[start] if start == i - 1 else f"{texts[start]}-{texts[i - 1]}")
                start = i
        ranges = ",".join(runs)
        parts.append(pattern % (f"[{ranges}]" if len(texts) > 1 else ranges))
    return ",".join(parts)
