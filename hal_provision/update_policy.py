"""The update policy (update_policy.yml), typed: which rendered files belong to which component,
which hosts get them, and what a change of them does on those hosts.

It is data rather than code because two readers must agree on it: the roles (through the
rendered files/etc/hal-provision/update-policy.json) and `hal-provision plan`. This module only
loads and matches it; what the actions mean is the plan's business (hal_provision/plan/).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import yaml

from .hostlist import ansible_name

POLICY_FILE = Path(__file__).resolve().with_name("update_policy.yml")

ACTIONS = ("upgrade", "slurm", "sacctmgr", "mmchconfig", "restart", "reload", "command", "file-only", "none")
"""Consequence kinds, from the most to the least disruptive family (the plan's order)."""

HOST_PLACEHOLDER = "host"
"""The one placeholder filled in as a host name; every other one is an Ansible group name part."""


class PolicyError(ValueError):
    """update_policy.yml is malformed; the message names the entry."""


@dataclass(frozen=True)
class Pattern:
    """A path pattern: `*` within a segment, `**` across segments, `{name}` one captured segment."""

    text: str
    regex: re.Pattern = field(repr=False, compare=False)

    @classmethod
    def compile(cls, text: str) -> "Pattern":
        parts = []
        for token in re.split(r"(\*\*|\*|\{[a-z_]+\})", text):
            if token == "**":
                parts.append(".+")
            elif token == "*":
                parts.append("[^/]*")
            elif token.startswith("{") and token.endswith("}"):
                parts.append(f"(?P<{token[1:-1]}>[^/]+)")
            else:
                parts.append(re.escape(token))
        return cls(text, re.compile("".join(parts) + r"\Z"))

    def match(self, path: str) -> dict[str, str] | None:
        found = self.regex.match(path)
        return None if found is None else found.groupdict()


@dataclass(frozen=True)
class Component:
    """One entry of the policy (see the field list at the top of update_policy.yml)."""

    name: str
    paths: tuple[Pattern, ...]
    action: str
    hosts: tuple[str, ...] = ()
    hosts_from: dict | None = None
    service: str | None = None
    command: str | None = None
    deployed_when: dict | None = None
    handler: str = ""
    detail: str = ""
    extra: dict = field(default_factory=dict)  # action-specific settings (slurm's rule)

    def match(self, path: str) -> dict[str, str] | None:
        """The captured placeholders of the first pattern `path` matches; None if none does."""
        for pattern in self.paths:
            found = pattern.match(path)
            if found is not None:
                return found
        return None

    def groups_for(self, captured: dict[str, str]) -> list[str]:
        """The inventory groups (or hosts) of a file whose path captured `captured`: templates
        whose placeholders the path filled; templates needing another placeholder are skipped."""
        out = []
        for template in self.hosts:
            names = re.findall(r"\{([a-z_]+)\}", template)
            if not all(n in captured for n in names):
                continue
            out.append(
                re.sub(
                    r"\{([a-z_]+)\}",
                    lambda m: captured[m[1]] if m[1] == HOST_PLACEHOLDER else ansible_name(captured[m[1]]),
                    template,
                )
            )
        return out

    def groups_from_files(self, tree: dict[str, str]) -> list[str]:
        """The groups `hosts_from` names in the rendered JSON file of `tree` (none without it)."""
        if not self.hosts_from:
            return []
        value = json_key(tree, self.hosts_from["file"], self.hosts_from["key"])
        if isinstance(value, dict):
            value = list(value)
        if not isinstance(value, list):
            return []
        return [self.hosts_from["group"].replace("{}", ansible_name(str(v))) for v in value]

    def deployed(self, tree: dict[str, str]) -> bool:
        """Whether the roles deploy this component's files for the cluster of `tree`."""
        if not self.deployed_when:
            return True
        cond = self.deployed_when
        return json_key(tree, cond["file"], cond["key"]) == cond["equals"]


def json_key(tree: dict[str, str], path: str, dotted: str):
    """The value at `dotted` in the JSON file `path` of a rendered tree; None when absent."""
    try:
        value = json.loads(tree[path])
    except (KeyError, ValueError):
        return None
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


_COMMON = {"paths", "action", "hosts", "hosts_from", "service", "command", "deployed_when", "handler", "detail"}


def _component(name: str, entry: dict) -> Component:
    if not isinstance(entry, dict) or not entry.get("paths") or entry.get("action") not in ACTIONS:
        raise PolicyError(f"{POLICY_FILE.name}: {name}: needs paths and an action out of {', '.join(ACTIONS)}")
    if entry["action"] in ("restart", "reload") and not entry.get("service"):
        raise PolicyError(f"{POLICY_FILE.name}: {name}: a {entry['action']} needs a service")
    if entry["action"] == "command" and not entry.get("command"):
        raise PolicyError(f"{POLICY_FILE.name}: {name}: a command action needs a command")
    return Component(
        name=name,
        paths=tuple(Pattern.compile(p) for p in entry["paths"]),
        action=entry["action"],
        hosts=tuple(entry.get("hosts") or ()),
        hosts_from=entry.get("hosts_from"),
        service=entry.get("service"),
        command=entry.get("command"),
        deployed_when=entry.get("deployed_when"),
        handler=" ".join(str(entry.get("handler", "")).split()),
        detail=entry.get("detail", ""),
        extra={k: v for k, v in entry.items() if k not in _COMMON},
    )


@dataclass(frozen=True)
class Policy:
    components: tuple[Component, ...]
    data: dict = field(repr=False, compare=False)  # the table as written, for the rendered copy

    def component(self, name: str) -> Component:
        return next(c for c in self.components if c.name == name)

    def owners(self, path: str) -> list[Component]:
        """Every component whose patterns match `path` (exactly one, for a well-formed table)."""
        return [c for c in self.components if c.match(path) is not None]

    @property
    def reconfigure_keys(self) -> list[str]:
        """slurm.conf keys that `scontrol reconfigure` applies (the slurm role's list)."""
        return list(self.component("slurm").extra["reconfigure_keys"])


@lru_cache(maxsize=1)
def load() -> Policy:
    """The policy shipped with this package (read once)."""
    data = yaml.safe_load(POLICY_FILE.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise PolicyError(f"{POLICY_FILE.name}: not a mapping of components")
    return Policy(tuple(_component(name, entry) for name, entry in data.items()), data)
