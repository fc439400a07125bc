"""Hosts of the inventory groups of a rendered tree, read from its inventory/*.yml.

The plan names hosts as the roles reach them: through the rendered inventory's groups
(service_slurmctld, slurm_nodes, role_login, nfs_mount_sw, ...), with children resolved as
Ansible resolves them: hal_provision.inventory's group tree, of the files Ansible's yaml
inventory plugin reads in the directory (one it could not read adds no group). What is the
plan's own is the `--limit` that names a set of hosts.
"""

from __future__ import annotations

import re
import shlex

from ..hostlist import expand, fold, pieces
from ..inventory.documents import tree_documents
from ..inventory.groups import GroupTree


class Inventory(GroupTree):
    def __init__(self, tree: dict[str, str]):
        super().__init__(tree_documents(tree, skip_unreadable=True))

    def limit(self, hosts) -> str:
        """The shortest `--limit` that Ansible reads as exactly `hosts`, quoted for a shell.

        Ansible reads neither a Slurm hostlist nor a range of its own there: `hal[17-18]` and
        `hal[17:18]` are read as subscripts, the 18th and 19th hosts of a group or host named `hal`
        (Ansible's `[01:16]` ranges exist only where an inventory file defines hosts). What it
        does read: a group of this inventory that holds exactly these hosts; names separated by
        commas; a regular expression after `~`, which it matches from the first character of
        each name (hence the `$`). The comma list is the answer for a few hosts, a group or one
        expression per folded range for many (`~hal(49|5[0-9]|6[0-4])$` for hal[49-64])."""
        wanted = set(hosts)
        folded = fold(sorted(wanted))
        candidates = [",".join(expand(folded))]  # first: the plainest wins a tie
        candidates += sorted(g for g in self.declared if self.hosts(g) == wanted)
        expressions = [_expression(piece) for piece in pieces(folded)]
        if all(expressions):
            candidates.append(shlex.quote(",".join(expressions)))
        return min(candidates, key=len)


_RANGE = re.compile(r"^(?P<prefix>[^\[\]]*)\[(?P<runs>[0-9,\-]+)\](?P<suffix>[^\[\]]*)$")


def _expression(piece: str) -> str | None:
    """One folded hostlist piece as an Ansible host pattern: a plain name as it is, a range as
    `~` and a regular expression anchored at the end (hal[49-64] -> ~hal(49|5[0-9]|6[0-4])$);
    None for a piece of several ranges (su[1-2]-leaf[01-04])."""
    if "[" not in piece:
        return piece
    found = _RANGE.match(piece)
    if found is None:
        return None
    alternatives = []
    for run in found["runs"].split(","):
        first, _sep, last = run.partition("-")
        alternatives += _numbers(first, last or first)
    inner = alternatives[0] if len(alternatives) == 1 else f"({'|'.join(alternatives)})"
    return f"~{_literal(found['prefix'])}{inner}{_literal(found['suffix'])}$"


def _literal(text: str) -> str:
    return text.replace(".", "\\.")  # the one character of a host name a regular expression reads otherwise


def _numbers(first: str, last: str) -> list[str]:
    """Regular expressions matching the index texts first..last exactly (padded as the hostlist
    pads them: one width when the first is zero-padded, else each number's own width)."""
    if len(first) == len(last):
        return _same_width(first, last)
    out, low = [], int(first)
    for width in range(len(first), len(last) + 1):  # unpadded: one run per number of digits
        high = min(int(last), 10**width - 1)
        out += _same_width(str(low), str(high))
        low = high + 1
    return out


def _same_width(low: str, high: str) -> list[str]:
    """low..high, texts of one width, as digit-by-digit patterns (49..64 -> 49, 5[0-9], 6[0-4])."""
    if low == high:
        return [low]
    if low[0] == high[0]:
        return [low[0] + rest for rest in _same_width(low[1:], high[1:])]
    rest = len(low) - 1
    out, start, end = [], int(low[0]), int(high[0])
    if low[1:] != "0" * rest:
        out += [low[0] + tail for tail in _same_width(low[1:], "9" * rest)]
        start += 1
    if high[1:] != "9" * rest:
        end -= 1
    if start <= end:
        out.append((str(start) if start == end else f"[{start}-{end}]") + "[0-9]" * rest)
    if high[1:] != "9" * rest:
        out += [high[0] + tail for tail in _same_width("0" * rest, high[1:])]
    return out
