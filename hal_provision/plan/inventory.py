"""Hosts of the inventory groups of a rendered tree, read from its inventory/*.yml.

The plan names hosts as the roles reach them: through the rendered inventory's groups
(service_slurmctld, slurm_nodes, role_login, nfs_mount_sw, ...), with children resolved as
Ansible resolves them. Files are read in name order with the safe loader, as Ansible's yaml
inventory plugin reads a directory.
"""

from __future__ import annotations

import yaml

from ..hostlist import fold


class Inventory:
    def __init__(self, tree: dict[str, str]):
        # Insertion-ordered (dicts as ordered sets): `first` must answer as Ansible does.
        self.direct: dict[str, dict[str, None]] = {}
        self.children: dict[str, dict[str, None]] = {}
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        for path in sorted(p for p in tree if p.startswith("inventory/") and p.endswith((".yml", ".yaml"))):
            try:
                doc = yaml.load(tree[path], Loader=loader)  # noqa: S506 - safe loader
            except yaml.YAMLError:
                continue  # not an inventory Ansible could read either; its groups stay unknown
            if isinstance(doc, dict) and doc.get("plugin") is None:
                for name, body in doc.items():
                    self._group(name, body)

    def _group(self, name: str, body) -> None:
        body = body if isinstance(body, dict) else {}
        self.direct.setdefault(name, {}).update(dict.fromkeys(body.get("hosts") or {}))
        kids = body.get("children") or {}
        self.children.setdefault(name, {}).update(dict.fromkeys(kids))
        for child, child_body in kids.items():
            self._group(child, child_body)

    def all_hosts(self) -> set[str]:
        return {host for hosts in self.direct.values() for host in hosts}

    def hosts(self, name: str, _seen: frozenset = frozenset()) -> set[str]:
        """Hosts of group `name` (with its children's); 'all' is every host; a name that is no
        group but a host is that host; anything else is empty."""
        if name == "all":
            return self.all_hosts()
        if name not in self.direct and name not in self.children:
            return {name} if name in self.all_hosts() else set()
        out = set(self.direct.get(name, ()))
        for child in self.children.get(name, ()):
            if child not in _seen:
                out |= self.hosts(child, _seen | {name})
        return out

    def first(self, name: str) -> str | None:
        """The first host of a group as Ansible lists it (`groups[name] | first`): first in file order."""
        for host in self._ordered(name, frozenset()):
            return host
        return None

    def _ordered(self, name: str, seen: frozenset):
        yield from self.direct.get(name, ())
        for child in self.children.get(name, ()):
            if child not in seen:
                yield from self._ordered(child, seen | {name})

