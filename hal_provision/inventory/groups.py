"""The one group tree of a rendered inventory: its groups with their hosts, children and
variables, each host's variables merged as Ansible merges them, and the listing
`ansible-inventory --list` prints. Built from the parsed documents (documents.py), in the order
Ansible reads the directory, for the plain groups the renderers write: what Ansible's yaml
plugin and inventory do with them (tests/unit/pull/test_bundle.py compares the listing with real
`ansible-inventory`).

Not Ansible's own InventoryManager: it reads files, not parsed data, and takes seconds where
this takes a fraction of one at 100,000 hosts; and the plan and the bundle must not need
Ansible installed. Hosts and children are dicts used as ordered sets: a group of 100,000 hosts
is built in linear time, and the order is the inventory's (`groups[name] | first`).
"""

from __future__ import annotations

from ..hostlist import HostlistError, expand


class Group:
    __slots__ = ("name", "vars", "hosts", "children", "parents", "depth")

    def __init__(self, name: str):
        self.name = name
        self.vars: dict = {}
        self.hosts: dict[str, None] = {}
        self.children: dict[str, Group] = {}
        self.parents: dict[str, Group] = {}
        self.depth = 0

    def ancestors(self) -> list[Group]:
        out: dict[str, Group] = {}
        for parent in self.parents.values():
            out.setdefault(parent.name, parent)
            for g in parent.ancestors():
                out.setdefault(g.name, g)
        return list(out.values())

    def deepen(self, depth: int) -> None:
        if depth > self.depth:
            self.depth = depth
        for child in self.children.values():
            child.deepen(self.depth + 1)


class GroupTree:
    """The groups of the parsed inventory DOCUMENTS. `all` holds `ungrouped` first, then every
    group no other group holds; a document that is no mapping of groups (an inventory plugin's
    source) adds nothing."""

    def __init__(self, documents: list[dict]):
        self.groups: dict[str, Group] = {}
        self.declared: dict[str, None] = {}  # the groups the documents name, in their order
        self.host_vars: dict[str, dict] = {}  # each host's own variables
        self.host_groups: dict[str, dict[str, None]] = {}  # each host's groups that list it
        self.top = self._group("all")
        self._add_child(self.top, self._group("ungrouped"))
        for document in documents:
            if isinstance(document, dict) and document.get("plugin") is None:
                for name, data in document.items():
                    self._parse(name, data)
        for g in list(self.groups.values()):
            if g is not self.top and not g.ancestors():
                self._add_child(self.top, g)

    def _group(self, name: str) -> Group:
        if name not in self.groups:
            self.groups[name] = Group(name)
        return self.groups[name]

    @staticmethod
    def _add_child(parent: Group, child: Group) -> None:
        if child.name not in parent.children:
            parent.children[child.name] = child
            child.deepen(parent.depth + 1)
        child.parents.setdefault(parent.name, parent)

    def _parse(self, name: str, data) -> Group:
        g = self._group(name)
        self.declared[name] = None
        if not isinstance(data, dict):
            return g
        for key, section in data.items():
            if key == "vars":
                g.vars.update(section or {})
            elif key == "children":
                for child, child_data in (section or {}).items():
                    self._add_child(g, self._parse(child, child_data))
            elif key == "hosts":
                for host, values in (section or {}).items():
                    for h in _names(host):
                        self.host_vars.setdefault(h, {}).update(values or {})
                        g.hosts[h] = None
                        self.host_groups.setdefault(h, {})[name] = None
        return g

    # ---- as the plan asks ----------------------------------------------------------------

    def all_hosts(self) -> set[str]:
        return set(self.host_groups)

    def hosts(self, name: str, _seen: frozenset = frozenset()) -> set[str]:
        """Hosts of group `name` (with its children's); 'all' is every host; a name that is no
        group but a host is that host; anything else is empty."""
        if name == "all":
            return self.all_hosts()
        if name not in self.declared:
            return {name} if name in self.host_groups else set()
        g = self.groups[name]
        out = set(g.hosts)
        for child in g.children:
            if child not in _seen:
                out |= self.hosts(child, _seen | {name})
        return out

    def first(self, name: str) -> str | None:
        """The first host of a group as Ansible lists it (`groups[name] | first`): first in file order."""
        for host in self._ordered(name, frozenset()):
            return host
        return None

    def _ordered(self, name: str, seen: frozenset):
        if name not in self.declared:
            return
        g = self.groups[name]
        yield from g.hosts
        for child in g.children:
            if child not in seen:
                yield from self._ordered(child, seen | {name})

    # ---- as `ansible-inventory --list` prints it -----------------------------------------

    def host_variables(self, host: str) -> dict:
        """The host's variables: its groups' (with their ancestors' and all's), merged by depth,
        then ansible_group_priority, then name, its own last."""
        top = self.top
        member_of: dict[str, Group] = {"all": top}
        for name in self.host_groups[host]:
            member_of[name] = self.groups[name]
            member_of.update((a.name, a) for a in self.groups[name].ancestors())
        merged: dict = {}
        for g in sorted(member_of.values(), key=_merge_order):
            merged.update(g.vars)
        merged.update(self.host_vars[host])
        return merged

    def listing(self) -> dict:
        """`_meta.hostvars` (each host's merged variables), `all` with its children
        (`ungrouped` first), and every non-empty group's hosts and children, in the order
        `ansible-inventory --list` prints them."""
        hostvars = {}
        for host in self.host_groups:
            merged = self.host_variables(host)
            if merged:
                hostvars[host] = merged
        out: dict = {"_meta": {"hostvars": hostvars}}
        seen: set[str] = set()
        top = self.top

        def emit(g: Group) -> None:
            seen.add(g.name)
            entry: dict = {}
            if g is not top and g.hosts:
                entry["hosts"] = list(g.hosts)
            if g.children:
                entry["children"] = list(g.children)
            if entry:
                out[g.name] = entry
            for child in g.children.values():
                if child.name not in seen:
                    emit(child)

        emit(top)
        return out


def _merge_order(g: Group) -> tuple:
    return g.depth, int(g.vars.get("ansible_group_priority", 1)), g.name


def _names(host: str) -> list[str]:
    """A host entry's names: a hostlist range expanded (the renderers write none), anything else
    as it is."""
    if "[" not in host:
        return [host]
    try:
        return expand(host)
    except HostlistError:
        return [host]


def list_inventory(documents: list[dict]) -> dict:
    """The parsed rendered inventory documents as `ansible-inventory --list` prints them."""
    return GroupTree(documents).listing()
