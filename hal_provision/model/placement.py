"""Placements: the hostlists that say where something runs or who gets it.

Every such field (services, partitions, NFS servers, exports and mounts, GPFS members and node
classes, Grafana) takes, besides a hostlist, references to node groups mixed with it by commas:

    @GROUP        the hosts of node group GROUP
    @role:ROLE    the hosts of every node group that plays ROLE (its `role`, or under `also`)

e.g. `clients: "@login,@role:compute,hal-dev"`. A group that grows (its `hosts` and `count`)
then grows every place that names it, and nothing else needs an edit.

This module is the one resolver. The references resolve while the Cluster is validated,
against the node groups of the same description, to one plain folded hostlist: checks,
renderers and plans only ever see hostlists. An unknown group or role is a schema error at the
field that names it, with the nearest known name. A reference to a group whose own `hosts` is
invalid stays unresolved without a second error: that group's error is the one to fix.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Annotated, Iterator

from pydantic import AfterValidator

from ..findings import did_you_mean
from ..hostlist import HostlistError, fold_hostlists, pieces
from ..hostlist import check as check_hostlist
from .nodes import Role

PLACED = (
    " Takes a hostlist, node groups as @GROUP and roles as @role:ROLE (every group playing the role, "
    "also under `also`), mixed with commas: @login,@role:compute,hal-dev."
)
"""How a placement is written: the end of every placement field's description (the schema and the
generated docs show it)."""

ROLE_PREFIX = "role:"


@dataclass
class NodeGroups:
    """What references resolve against: each group's hostlist, and who plays each role."""

    hosts: dict[str, str | None] = field(default_factory=dict)  # None: the group's own hosts are invalid
    roles: dict[str, list[str]] = field(default_factory=dict)  # role -> group names, in file order
    written: dict[str, str] = field(default_factory=dict)  # resolved hostlist -> the expression written

    @classmethod
    def of(cls, data) -> "NodeGroups":
        """From the description as given to Cluster validation (a mapping, or a Cluster): read
        leniently, since the node groups themselves have not been validated yet."""
        groups = cls()
        entries = data.get("nodes") if isinstance(data, dict) else getattr(data, "nodes", None)
        for entry in entries if isinstance(entries, list) else []:
            get = entry.get if isinstance(entry, dict) else (lambda key, default=None: getattr(entry, key, default))
            name, hosts = get("name"), get("hosts")
            if not isinstance(name, str) or name in groups.hosts:
                continue  # nameless or repeated: the node group checks report it
            groups.hosts[name] = hosts if _valid(hosts) else None
            also = get("also", [])
            for role in [get("role"), *(also if isinstance(also, list) else [])]:
                value = role.value if isinstance(role, Role) else role
                if isinstance(value, str) and name not in groups.roles.setdefault(value, []):
                    groups.roles[value].append(name)
        return groups

    def resolve(self, expr: str) -> str:
        """`expr` with its references replaced, folded; unchanged when it has none."""
        parts = pieces(expr)
        if not any(part.startswith("@") for part in parts):
            return _checked(expr)
        hostlists = []
        for piece in parts:
            if not piece.startswith("@"):
                hostlists.append(_checked(piece, expr))
                continue
            for name in self._groups(piece):
                if self.hosts[name] is None:
                    return expr  # that group's own error says what is wrong; the model is not built
                hostlists.append(self.hosts[name])
        resolved = fold_hostlists(hostlists)
        self.written.setdefault(resolved, expr)
        return resolved

    def _groups(self, piece: str) -> list[str]:
        name = piece[1:]
        if name.startswith(ROLE_PREFIX):
            role = name[len(ROLE_PREFIX) :]
            if role not in {r.value for r in Role}:
                raise ValueError(
                    f"unknown role in {piece!r}" + did_you_mean(piece, (f"@{ROLE_PREFIX}{r.value}" for r in Role))
                )
            if not self.roles.get(role):
                raise ValueError(f"{piece!r} names no host: no node group plays role {role!r}")
            return self.roles[role]
        if name not in self.hosts:
            raise ValueError(f"unknown node group {piece!r}" + did_you_mean(piece, (f"@{g}" for g in self.hosts)))
        return [name]


def _valid(hosts) -> bool:
    try:
        check_hostlist(hosts)
    except HostlistError:
        return False
    return True


def _checked(piece: str, expr: str | None = None) -> str:
    try:
        check_hostlist(piece)
    except HostlistError as exc:
        if expr is None or piece == expr:
            raise ValueError(f"{exc}; {_REFERENCES_HINT}" if "@" in piece else str(exc)) from None
        raise ValueError(f"in {expr!r}: {exc}") from None
    return piece


_REFERENCES_HINT = "@GROUP and @role:ROLE name node groups"

_CURRENT: ContextVar[NodeGroups | None] = ContextVar("hal_provision_node_groups", default=None)


@contextmanager
def resolving(data) -> Iterator[NodeGroups]:
    """While a Cluster is validated from `data`: placements resolve against its node groups."""
    groups = NodeGroups.of(data)
    token = _CURRENT.set(groups)
    try:
        yield groups
    finally:
        _CURRENT.reset(token)


def _resolve(value: str) -> str:
    groups = _CURRENT.get()
    if groups is None:
        if any(piece.startswith("@") for piece in pieces(value)):
            raise ValueError("@GROUP and @role:ROLE references resolve only within a whole cluster description")
        return _checked(value)
    return groups.resolve(value)


Placement = Annotated[str, AfterValidator(_resolve)]
"""A hostlist that may name node groups (@GROUP) and roles (@role:ROLE); see the module text."""
