"""Hostlist expressions (``hal[01-16]``) through ClusterShell's NodeSet.

Node groups stay compressed: callers get NodeSets and only expand them where an output
needs one line per host.
"""

from __future__ import annotations

import re
from functools import lru_cache

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetError


class HostlistError(ValueError):
    """A hostlist expression that ClusterShell cannot parse."""


_ALLOWED = re.compile(r"^[A-Za-z0-9][A-Za-z0-9\-\[\],.]*$")


@lru_cache(maxsize=4096)
def nodeset(expr: str) -> NodeSet:
    """Parse a hostlist expression; raise HostlistError with a readable reason."""
    if not isinstance(expr, str) or not _ALLOWED.match(expr):
        raise HostlistError(
            f"not a valid hostlist expression: {expr!r} (host names use letters, digits and '-'; "
            "ranges look like hal[01-16])"
        )
    try:
        # No group resolution: '@name' must not silently expand from /etc/clustershell.
        ns = NodeSet(expr, resolver=RESOLVER_NOGROUP)
    except (NodeSetError, ValueError) as exc:
        raise HostlistError(f"not a valid hostlist expression: {expr!r} ({exc})") from None
    if len(ns) == 0:
        raise HostlistError(f"hostlist expression {expr!r} names no host")
    return ns


def fold(names) -> str:
    """Compress host names (an iterable or NodeSet) into one hostlist expression."""
    ns = names if isinstance(names, NodeSet) else NodeSet.fromlist(list(names), resolver=RESOLVER_NOGROUP)
    return str(ns)


def union(exprs) -> NodeSet:
    out = NodeSet(resolver=RESOLVER_NOGROUP)
    for expr in exprs:
        out.update(nodeset(expr) if isinstance(expr, str) else expr)
    return out
