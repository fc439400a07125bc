"""The Spectrum Scale tuning a converge applies: model/gpfs_plan.py's plan, OLD's tuning as current.

The gpfs role reads `mmlsconfig -Y` and runs the plan of hal_provision.model.gpfs_plan. On a
cluster that runs OLD, the managed settings are OLD's tuning.json, so the plan here is that same
function with OLD's scopes standing in for mmlsconfig's listing: the same mmchconfig commands,
the same split between `-i` (at once) and a daemon restart per node class.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from ..model import gpfs_tuning
from ..model import gpfs_plan as gpfs

TUNING = "files/gpfs/tuning.json"
NODE_FILE = "files/gpfs/nodes.list"


def _scopes(text: str | None) -> dict[str, dict[str, str]] | None:
    try:
        return json.loads(text)["scopes"] if text else None
    except (ValueError, KeyError, TypeError):
        return None


def settings(scopes: dict[str, dict[str, str]]) -> list[gpfs.Setting]:
    """A tuning's scopes as mmlsconfig would list them once applied."""
    return [
        gpfs.Setting(attribute, value, () if scope == gpfs_tuning.CLUSTER else (scope,))
        for scope, values in scopes.items()
        for attribute, value in values.items()
    ]


def class_members(node_file: str | None) -> dict[str, list[str]]:
    """Node class -> its hosts' admin names (the model's host names), from the rendered node
    file's '# node class NAME: ...' sections and NodeName:Designation[:AdminNodeName] lines."""
    out: dict[str, list[str]] = {}
    current = None
    for line in (node_file or "").splitlines():
        header = re.match(r"# node class (\S+):", line)
        if header:
            current = out.setdefault(header[1], [])
        elif current is not None and line and not line.startswith("#"):
            fields = line.split(":")
            current.append(fields[2] if len(fields) > 2 and fields[2] else fields[0])
    return out


@dataclass
class TuningChanges:
    commands: list[list[str]] = field(default_factory=list)
    restart: dict[str, list[str]] = field(default_factory=dict)  # scope -> hosts whose GPFS restarts
    notes: list[str] = field(default_factory=list)


def tuning_changes(old: dict[str, str], new: dict[str, str]) -> TuningChanges:
    out = TuningChanges()
    desired = _scopes(new.get(TUNING))
    if desired is None:
        out.notes.append("GPFS tuning left the model: settings stay as they are")
        return out
    plan = gpfs.plan(desired, settings(_scopes(old.get(TUNING)) or {}))
    out.commands = plan.commands()
    members = class_members(new.get(NODE_FILE))
    for scope in plan.restart():
        hosts = (
            sorted({h for m in members.values() for h in m}) if scope == gpfs_tuning.CLUSTER else members.get(scope, [])
        )
        out.restart[scope] = hosts
    out.notes += [f"not applied, needs GPFS down everywhere: {c.describe()}" for c in plan.deferred]
    return out
