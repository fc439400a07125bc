"""Hostlist expressions (``hal[01-16]``) through ClusterShell's NodeSet.

Node groups stay compressed: callers get NodeSets and only expand them (with `expand`) where
an output needs one line per host.

At 100,000 hosts ClusterShell's general parser, iterator and folding cost seconds, because a
RangeSet is a set of index strings that it sorts with a Python key function on every pass.
`nodeset`, `expand`, `chunks`, `fold` and `fold_hostlists` therefore build, list and fold the
common shapes (ranges, numbered and plain names) themselves, from the text where they can,
with exactly ClusterShell's results (tests/unit/render/test_render.py and test_scale_fabric.py compare
them), and hand every other shape to ClusterShell. Index strings are made once and shared by
every set that holds them, and a list of ranges shares its pieces' sets: a 100,000-node
description names its compute nodes in a dozen places.
"""

from __future__ import annotations

import re
from functools import lru_cache
from itertools import chain, islice

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetError
from ClusterShell.RangeSet import RangeSet


class HostlistError(ValueError):
    """A hostlist expression that ClusterShell cannot parse."""


_ALLOWED = re.compile(r"^[A-Za-z0-9][A-Za-z0-9\-\[\],.]*$")

# prefix[first-last]suffix: one range, no digit outside the brackets (digits there make
# ClusterShell add index dimensions). Nearly every node group, rack and leaf looks like this.
_SINGLE_RANGE = re.compile(r"^([A-Za-z][A-Za-z\-.]*)\[(\d+)-(\d+)\]([A-Za-z\-.]*)$")
# The same with digits outside the brackets (gpu-su001-leaf[01-56]): ClusterShell makes those
# index dimensions of one value each, so listing or slicing the hosts is the same arithmetic,
# but a NodeSet must come from ClusterShell (its patterns differ).
# (A digit next to a bracket joins the range: x9[1-10] is x[91-910].)
_ONE_BRACKET = re.compile(
    r"^([A-Za-z](?:[A-Za-z0-9\-.]*[A-Za-z\-.])?)\[(\d+)-(\d+)\]((?:[A-Za-z\-.][A-Za-z0-9\-.]*)?)$"
)


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
    _check_size(expr)
    single = _single_range(expr)
    if single is not None:  # the NodeSet ClusterShell's parser would build, for a third of the cost
        return _single_range_nodeset(*single)
    pieces = _TOP_LEVEL_COMMA.split(expr)
    shared = _from_pieces(pieces)
    if shared is not None:
        return shared
    # A list whose large members are single ranges (hal[000001-075000],halc[000001-025000],
    # hal-login): those built as above, only the rest through ClusterShell's parser.
    ranges = [_single_range(piece) for piece in pieces]
    rest = ",".join(piece for piece, single in zip(pieces, ranges) if single is None)
    if len(pieces) == 1 or all(single is None for single in ranges) or not all(pieces):
        rest, ranges = expr, []
    try:
        # No group resolution: '@name' must not silently expand from /etc/clustershell.
        ns = NodeSet(rest, resolver=RESOLVER_NOGROUP)
    except (NodeSetError, ValueError) as exc:
        raise HostlistError(f"not a valid hostlist expression: {expr!r} ({exc})") from None
    for single in ranges:
        if single is not None:
            ns.update(_single_range_nodeset(*single))
    if len(ns) == 0:
        raise HostlistError(f"hostlist expression {expr!r} names no host")
    return ns


_TOP_LEVEL_COMMA = re.compile(r",(?![^\[]*\])")


# The most hosts one expression, and one description, may name: ten times the largest cluster
# the toolkit is measured at (docs/benchmarks.md, 100,000 nodes). Counted from the text before
# anything is built: ClusterShell holds every index of a range, so n[0-99999999] alone took
# minutes and gigabytes.
MAX_HOSTS = 1_000_000
_BRACKET = re.compile(r"\[([^\[\]]*)\]")
_RANGE = re.compile(r"^\s*(\d+)(?:-(\d+)(?:/(\d+))?)?\s*$")


def count_bound(expr: str) -> int:
    """An upper bound of the hosts EXPR names, from its text: per comma-separated piece, the
    product of its brackets' sizes (a piece with a malformed bracket counts one: the parser
    reports it)."""
    total = 0
    for piece in _TOP_LEVEL_COMMA.split(expr):
        size = 1
        for group in _BRACKET.findall(piece):
            group_size = 0
            for item in group.split(","):
                m = _RANGE.match(item)
                if not m:
                    continue
                lo, hi, step = int(m.group(1)), int(m.group(2) or m.group(1)), int(m.group(3) or 1)
                group_size += max(0, (hi - lo) // max(step, 1) + 1)
            size *= max(group_size, 1)
        total += size
    return total


def _check_size(expr: str) -> None:
    if isinstance(expr, str) and "[" in expr:
        count = count_bound(expr)
        if count > MAX_HOSTS:
            raise HostlistError(
                f"hostlist expression {expr!r} names {count:,} hosts, more than the {MAX_HOSTS:,} a description may"
            )


def pieces(expr: str) -> list[str]:
    """The comma-separated pieces of an expression, commas inside brackets kept:
    'hal[01-02,05],hal-dev' -> ['hal[01-02,05]', 'hal-dev']."""
    return _TOP_LEVEL_COMMA.split(expr)


def _from_pieces(pieces: list[str]) -> NodeSet | None:
    """A list of ranges and names of distinct patterns (hal[000001-075000],halc[000001-025000],
    hal-dev) made of its pieces' own cached sets, shared rather than copied; else None.

    A 100,000-node description names all its compute nodes in several places, each a slightly
    different list; sharing the pieces' index sets costs each list a dictionary instead of
    100,000 set entries. Safe because cached sets are never changed in place, and ClusterShell
    copies index sets whenever it combines NodeSets into a new one.
    """
    if len(pieces) < 2 or not all(
        _single_range(p) is not None or _PLAIN_NAME.match(p) or _numbered_name(p) for p in pieces
    ):
        return None
    ns = NodeSet(resolver=RESOLVER_NOGROUP)
    for piece in pieces:
        for pattern, indexes in nodeset(piece)._patterns.items():
            if pattern in ns._patterns:  # two pieces of one pattern: ClusterShell merges them
                return None
            ns._add_new(pattern, indexes)
    return ns


def _single_range_nodeset(prefix: str, lo: int, hi: int, pad: int, suffix: str) -> NodeSet:
    """What RangeSet.add_range builds, its index strings shared with every other set of the
    same indexes: a 100,000-node description names its compute nodes in a dozen places (node
    groups, partitions, storage clients, ...), and each would otherwise hold its own 100,000
    strings (about 5 MiB)."""
    indexes = RangeSet()
    set.update(indexes, _index_texts(lo, hi, pad))
    ns = NodeSet(resolver=RESOLVER_NOGROUP)
    ns._add_new(f"{prefix}%s{suffix}", indexes)  # referenced, not copied: the set is new
    return ns


def _names(prefix: str, lo: int, hi: int, pad: int, suffix: str) -> list[str]:
    """prefix + index + suffix for lo..hi, the indexes zero-padded to `pad`: concatenating the
    shared index strings costs half of formatting each name."""
    texts = _index_texts(lo, hi, pad)
    return [prefix + text + suffix for text in texts] if suffix else [prefix + text for text in texts]


def _index_texts(lo: int, hi: int, pad: int):
    """The index strings of lo..hi, zero-padded to `pad`, from the shared blocks (an iterator)."""
    return chain.from_iterable(
        islice(
            _index_block(pad, block),
            max(lo, block * _BLOCK) - block * _BLOCK,
            min(hi, (block + 1) * _BLOCK - 1) - block * _BLOCK + 1,
        )
        for block in range(lo // _BLOCK, hi // _BLOCK + 1)
    )


_BLOCK = 4096
_INDEX_BLOCKS: dict[tuple[int, int], list[str]] = {}


def _index_block(pad: int, block: int) -> list[str]:
    """The index strings of one block of _BLOCK indexes, zero-padded to `pad`, made once."""
    texts = _INDEX_BLOCKS.get((pad, block))
    if texts is None:
        start = block * _BLOCK
        texts = _INDEX_BLOCKS[(pad, block)] = [f"{i:0{pad}d}" for i in range(start, start + _BLOCK)]
    return texts


def check(expr: str) -> None:
    """Raise HostlistError unless `expr` is a valid, non-empty hostlist expression.

    Ranges and plain names are checked from the text (the model validates every hostlist,
    and a set of 100,000 names costs megabytes); anything else is parsed (and kept: `nodeset`
    caches it).
    """
    if isinstance(expr, str) and expr in _CHECKED:
        return
    _check_size(expr)
    if not (isinstance(expr, str) and _ALLOWED.match(expr) and _range_shapes([expr]) is not None):
        nodeset(expr)
    _CHECKED.add(expr)


_CHECKED: set[str] = set()


def expand(expr: str) -> list[str]:
    """Every host of a hostlist expression, in NodeSet order (what iterating it yields).

    For output that needs one line per host: iterating a NodeSet costs about 2 us a host,
    several times what formatting the names does.
    """
    check(expr)
    single = _single_range(expr, constant_digits=True)
    if single is not None:
        prefix, lo, hi, pad, suffix = single
        return _names(prefix, lo, hi, pad, suffix)
    shapes = _range_shapes([expr])
    if shapes is not None:  # hal[000001-075000],halc[000001-025000],hal-login: from the text
        hosts = []
        for _key, shape in shapes:
            if isinstance(shape, str):
                hosts.append(shape)
                continue
            prefix, suffix, pad, runs = shape
            for lo, hi in runs:
                hosts.extend(_names(prefix, lo, hi, pad, suffix))
        return hosts
    ns = nodeset(expr)
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


def fold_hostlists(exprs) -> str:
    """fold(union(exprs)): the hosts of several hostlist expressions as one expression.

    From the text alone where every piece is a plain range or a name without digits (node
    groups nearly always are): a slurm.conf NodeName line over a hundred 1,000-node groups
    then costs no set of 100,000 names.
    """
    exprs = list(exprs)
    for expr in exprs:
        check(expr)
    shapes = _range_shapes(exprs)
    if shapes is None:
        return fold(union(exprs))
    parts = []
    for _key, shape in shapes:
        if isinstance(shape, str):
            parts.append(shape)
            continue
        prefix, suffix, pad, runs = shape
        if len(runs) == 1 and runs[0][0] == runs[0][1]:
            parts.append(f"{prefix}{runs[0][0]:0{pad}d}{suffix}")
            continue
        ranges = ",".join(f"{lo:0{pad}d}" if lo == hi else f"{lo:0{pad}d}-{hi:0{pad}d}" for lo, hi in runs)
        parts.append(f"{prefix}[{ranges}]{suffix}")
    return ",".join(parts)


def _range_shapes(exprs) -> list[tuple[str, object]] | None:
    """The hosts of `exprs` as NodeSet patterns in NodeSet order, read from the text: (pattern,
    name) for a name without digits, (pattern, (prefix, suffix, padding, merged runs)) for the
    ranges of one prefix and suffix. None when a piece has another shape (digits outside
    brackets, several ranges in brackets) or one pattern mixes paddings: ClusterShell decides."""
    ranges: dict[str, tuple[str, str, int, list[tuple[int, int]]]] = {}
    names: set[str] = set()
    for expr in exprs:
        for piece in _TOP_LEVEL_COMMA.split(expr):
            single = _single_range(piece) or _numbered_name(piece)
            if single is None:
                if not _PLAIN_NAME.match(piece):
                    return None
                names.add(piece)
                continue
            prefix, lo, hi, pad, suffix = single
            key = f"{prefix}%s{suffix}"
            known = ranges.setdefault(key, (prefix, suffix, pad, []))
            if known[2] != pad:
                return None
            known[3].append((lo, hi))
    shapes: list[tuple[str, object]] = [(name, name) for name in names]
    for key, (prefix, suffix, pad, spans) in ranges.items():
        spans.sort()
        runs = [list(spans[0])]
        for lo, hi in spans[1:]:
            if lo <= runs[-1][1] + 1:
                runs[-1][1] = max(runs[-1][1], hi)
            else:
                runs.append([lo, hi])
        shapes.append((key, (prefix, suffix, pad, [tuple(run) for run in runs])))
    return sorted(shapes, key=lambda shape: shape[0])


_PLAIN_NAME = re.compile(r"^[A-Za-z][A-Za-z\-.]*$")
_NUMBERED_NAME = re.compile(r"^([A-Za-z][A-Za-z\-.]*)(\d+)([A-Za-z\-.]*)$")


def _numbered_name(piece: str) -> tuple[str, int, int, int, str] | None:
    """A name with one number (hal-mgmt1, ddn1-a, n007) as the one-index range ClusterShell
    makes of it: (prefix, number, number, padding, suffix)."""
    match = _NUMBERED_NAME.match(piece)
    if match is None:
        return None
    prefix, digits, suffix = match.groups()
    pad = len(digits) if len(digits) > 1 and digits[0] == "0" else 0
    return prefix, int(digits), int(digits), pad, suffix


def fold(names) -> str:
    """Compress host names (an iterable or NodeSet) into one hostlist expression.

    Exactly str(NodeSet), and several times faster for large sets whose indexes all have one
    width (hal[000001-075000],halc[00001-25000]).
    """
    if not isinstance(names, NodeSet):
        names = list(names)
        folded = _fold_last_index(names)
        if folded is not None:
            return folded
    ns = names if isinstance(names, NodeSet) else NodeSet.fromlist(names, resolver=RESOLVER_NOGROUP)
    folded = _fold_one_width(ns)
    return str(ns) if folded is None else folded


def chunks(expr: str, size: int) -> list[str]:
    """The hosts of `expr` in runs of `size` (in hostlist order; the last run may be shorter),
    each run folded exactly as `fold` folds it.

    For a single range (a leaf switch's share of a scalable unit) by arithmetic on the bounds:
    no host name is made.
    """
    if size < 1:
        raise ValueError("size must be at least 1")
    check(expr)
    single = _single_range(expr, constant_digits=True)
    if single is None:
        hosts = expand(expr)
        return [fold(hosts[start : start + size]) for start in range(0, len(hosts), size)]
    prefix, lo, hi, pad, suffix = single
    runs = []
    for first in range(lo, hi + 1, size):
        last = min(hi, first + size - 1)
        runs.append(
            f"{prefix}{first:0{pad}d}{suffix}" if first == last else f"{prefix}[{first:0{pad}d}-{last:0{pad}d}]{suffix}"
        )
    return runs


def union_shared(exprs) -> NodeSet:
    """union(exprs) as the cached NodeSet of their folded expression: where the hostlists are
    plain ranges and names, its index sets are those of sets already parsed (a partition's,
    a storage client list's) instead of a new 100,000-entry set. Shared: never change it."""
    exprs = list(exprs)
    if not exprs or _range_shapes(exprs) is None:
        return union(exprs)
    return nodeset(fold_hostlists(exprs))


def overlaps(a: NodeSet, b: NodeSet) -> bool:
    """Whether two NodeSets share a host, without building their intersection."""
    for pattern, indexes in a._patterns.items():
        if pattern not in b._patterns:
            continue
        other = b._patterns[pattern]
        if indexes is None or other is None:
            return True  # a name without index: the pattern is the host
        if not (isinstance(indexes, set) and isinstance(other, set)):
            return bool(len(a.intersection(b)))  # several index dimensions: ClusterShell decides
        # (not set.isdisjoint: for a set subclass it iterates RangeSet's sorted __iter__)
        small, large = (indexes, other) if len(indexes) <= len(other) else (other, indexes)
        if set.issubset(small, large) if small else False:
            return True
        if set.intersection(small, large):
            return True
    return False


def common_count(a: NodeSet, b: NodeSet) -> int:
    """len(a.intersection(b)), without building a NodeSet (a set of index strings at most)."""
    count = 0
    for pattern, indexes in a._patterns.items():
        if pattern not in b._patterns:
            continue
        other = b._patterns[pattern]
        if indexes is None or other is None:
            count += 1
        elif isinstance(indexes, set) and isinstance(other, set):
            small, large = (indexes, other) if len(indexes) <= len(other) else (other, indexes)
            count += len(small) if set.issubset(small, large) else len(set.intersection(small, large))
        else:
            return len(a.intersection(b))  # several index dimensions: ClusterShell decides
    return count


def union(exprs) -> NodeSet:
    out = NodeSet(resolver=RESOLVER_NOGROUP)
    for expr in exprs:
        out.update(nodeset(expr) if isinstance(expr, str) else expr)
    return out


def empty() -> NodeSet:
    return NodeSet(resolver=RESOLVER_NOGROUP)


def overlap(a: NodeSet, b: NodeSet) -> NodeSet:
    """Hosts in both sets (a new set; neither operand changes), without copying the larger."""
    small, large = (a, b) if len(a) <= len(b) else (b, a)
    return small.intersection(large)


def outside(a: NodeSet, b: NodeSet) -> NodeSet:
    """Hosts of `a` that `b` lacks (a new set; neither operand changes)."""
    return empty() if a.issubset(b) else a.difference(b)


def fold_or_dash(names) -> str:
    """Host names as one folded hostlist expression; '-' for none (a report's empty cell)."""
    names = sorted(set(names))
    return fold(names) if names else "-"


def _single_range(expr: str, constant_digits: bool = False) -> tuple[str, int, int, int, str] | None:
    """(prefix, first, last, padding, suffix) of a single-range expression ClusterShell accepts
    (with `constant_digits`, digits may stand outside the brackets too).

    None for any other expression, and for ranges ClusterShell rejects (its parser then says
    why). Padding follows ClusterShell: a leading zero on the first index pads every index
    to its width; padded bounds must have the same width.
    """
    match = (_ONE_BRACKET if constant_digits else _SINGLE_RANGE).match(expr)
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
    run = _one_width_run(indexes)
    if run is not None:  # a node group or a partition: formatted in order, nothing sorted
        low, high, width = run
        return list(map(f"%0{width}d".__mod__, range(low, high + 1)))
    texts = sorted(set.__iter__(indexes))
    if texts and texts[0].startswith("-"):  # negative indexes sort otherwise; never in names
        return list(indexes.striter())
    texts.sort(key=len)
    return texts


def _one_width_run(indexes: RangeSet) -> tuple[int, int, int] | None:
    """(first, last, width) when the index texts all have one width and leave no gap.

    One width makes text order numeric order, so min and max are the ends; as many distinct
    texts as the ends span means no gap; and each text is its number zero-padded to the width.
    """
    if not len(indexes) or len(set(map(len, set.__iter__(indexes)))) != 1:
        return None
    low, high = min(set.__iter__(indexes)), max(set.__iter__(indexes))
    if low.startswith("-") or int(high) - int(low) + 1 != len(indexes):
        return None
    return int(low), int(high), len(low)


_LAST_INDEX = re.compile(r"^([A-Za-z][A-Za-z0-9_\-]*?)(\d+)([A-Za-z_\-]*)$")


def _fold_last_index(names: list[str]) -> str | None:
    """str(NodeSet.fromlist(names)) when the names differ only in their last number, all of
    one width (gpu-su001-leaf01 ... gpu-su001-leaf56: a switch's children); else None.

    ClusterShell parses such names as several index dimensions and folds them in Python, at
    about 20 us a name; here they are one prefix, one suffix and a run of numbers.
    """
    if not names:
        return None
    first = _LAST_INDEX.match(names[0])
    if first is None:
        return None
    prefix, digits, suffix = first.groups()
    width = len(digits)
    texts = set()
    for name in names:
        match = _LAST_INDEX.match(name)
        if match is None or match[1] != prefix or match[3] != suffix or len(match[2]) != width:
            return None
        texts.add(match[2])
    ordered = sorted(texts)
    if len(ordered) == 1:
        return f"{prefix}{ordered[0]}{suffix}"
    return f"{prefix}[{_runs(ordered)}]{suffix}"


def _runs(texts: list[str]) -> str:
    """'01-04,07' for sorted index texts of one width: RangeSet's folding of them."""
    numbers = list(map(int, texts))
    runs = []
    start = 0
    for i in range(1, len(numbers) + 1):
        if i == len(numbers) or numbers[i] != numbers[i - 1] + 1:
            runs.append(texts[start] if start == i - 1 else f"{texts[start]}-{texts[i - 1]}")
            start = i
    return ",".join(runs)


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
        run = _one_width_run(indexes)
        if run is not None:  # a node group or a partition: no sort
            low, high, width = run
            ranges = f"{low:0{width}d}-{high:0{width}d}" if high > low else f"{low:0{width}d}"
            parts.append(pattern % (f"[{ranges}]" if high > low else ranges))
            continue
        texts = sorted(set.__iter__(indexes))
        if len(set(map(len, texts))) != 1 or texts[0].startswith("-"):
            return None
        ranges = _runs(texts)
        parts.append(pattern % (f"[{ranges}]" if len(texts) > 1 else ranges))
    return ",".join(parts)


def ansible_name(name: str) -> str:
    """A name as an Ansible group name part (identifiers only): 'x86-aux' -> 'x86_aux'."""
    return "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name)
