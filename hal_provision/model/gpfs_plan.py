"""Spectrum Scale tuning: the plan that reaches the settings the model asks for.

The desired state (hal_provision/model/gpfs_tuning.py) is one mapping per scope: the cluster-wide settings (mmchconfig without -N)
and one per node class (mmchconfig ... -N <class>). The current state comes from
`mmlsconfig -Y`, which lists only the values that differ from GPFS's defaults, each with the
node list it applies to (empty: cluster-wide). `plan` compares the two and returns the
changes, grouped into mmchconfig commands: changes mmchconfig accepts with -i (immediate and
permanent) in one command, the rest, which take effect at the next daemon start, in another;
the plan names the classes that then need a restart. Nothing here runs a command.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import unquote

from .gpfs_tuning import CLUSTER, DEFAULTS, IMMEDIATE, OFFLINE, same_value


class MmlsconfigError(ValueError):
    """Output that is not `mmlsconfig -Y`."""


# ---- current state --------------------------------------------------------------------------
@dataclass(frozen=True)
class Setting:
    attribute: str
    value: str
    nodes: tuple[str, ...]  # node classes or nodes it applies to; () = cluster-wide


def parse_mmlsconfig(text: str) -> list[Setting]:
    """The settings of `mmlsconfig -Y` output, in the order listed.

    Records look like `mmlsconfig::0:1:::pagepool:4G:computeNodes:`; fields are
    percent-encoded (`:` inside a value is `%3A`). Lines of any other kind are ignored, so a
    stray warning in the output cannot become a setting.
    """
    settings: list[Setting] = []
    seen_header = False
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) < 9 or fields[0] != "mmlsconfig":
            continue
        if fields[2] == "HEADER":
            if fields[6:9] != ["configParameter", "value", "nodeList"]:
                raise MmlsconfigError(f"unexpected mmlsconfig -Y header: {line!r}")
            seen_header = True
            continue
        attribute, value, nodes = (unquote(f) for f in fields[6:9])
        settings.append(Setting(attribute, value, tuple(n for n in nodes.split(",") if n)))
    if not seen_header:
        raise MmlsconfigError("no mmlsconfig -Y header line: is this the output of `mmlsconfig -Y`?")
    return settings


def current_state(settings: list[Setting]) -> dict[str, dict[str, str]]:
    """Scope -> attribute -> value as listed (later entries win, as in GPFS's own lookup)."""
    out: dict[str, dict[str, str]] = {CLUSTER: {}}
    for s in settings:
        for scope in s.nodes or (CLUSTER,):
            out.setdefault(scope, {})[s.attribute] = s.value
    return out


# ---- the plan -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Change:
    scope: str
    attribute: str
    current: str | None  # None: GPFS's default, which this module does not know
    desired: str
    source: str  # where `current` comes from: "set" for the scope, "cluster" (inherited) or "default"

    @property
    def immediate(self) -> bool:
        return self.attribute in IMMEDIATE

    @property
    def offline(self) -> bool:
        return self.attribute in OFFLINE

    def describe(self) -> str:
        was = {"set": "{}", "cluster": "{} (cluster-wide)", "default": "{} (GPFS default)"}[self.source].format(
            "unset" if self.current is None else self.current
        )
        when = "offline only" if self.offline else "now (-i)" if self.immediate else "after a restart"
        return f"{self.scope}: {self.attribute} {was} -> {self.desired} [{when}]"


def _command_order(attribute: str) -> tuple[int, str]:
    # mmchconfig: "specify maxblocksize first if you are decreasing the values", "pagepool
    # first if you are increasing" them; the rest in name order, so commands are stable.
    return ({"maxblocksize": 0, "pagepool": 1}.get(attribute, 2), attribute)


@dataclass
class Plan:
    changes: list[Change] = field(default_factory=list)
    current: dict[str, dict[str, str]] = field(default_factory=dict)
    desired: dict[str, dict[str, str]] = field(default_factory=dict)
    overrides: list[Setting] = field(default_factory=list)  # managed attributes set for other node lists

    @property
    def applicable(self) -> list[Change]:
        return [c for c in self.changes if not c.offline]

    @property
    def deferred(self) -> list[Change]:
        return [c for c in self.changes if c.offline]

    def commands(self) -> list[list[str]]:
        """mmchconfig argument vectors: per scope, the immediate changes (-i), then the rest."""
        out: list[list[str]] = []
        for scope in self.desired:
            for immediate in (True, False):
                batch = sorted(
                    (c for c in self.applicable if c.scope == scope and c.immediate is immediate),
                    key=lambda c: _command_order(c.attribute),
                )
                if batch:
                    argv = ["mmchconfig", ",".join(f"{c.attribute}={c.desired}" for c in batch)]
                    argv += ["-i"] if immediate else []
                    argv += [] if scope == CLUSTER else ["-N", scope]
                    out.append(argv)
        return out

    def restart(self) -> list[str]:
        """Scopes whose daemons must restart for a planned change to take effect."""
        scopes = {c.scope for c in self.applicable if not c.immediate}
        return [s for s in self.desired if s in scopes]

    def view(self, which: str) -> str:
        """The managed settings as mmlsconfig groups them, before or after the plan.

        Only planned changes differ between the two views: a value listed in another spelling
        (65536M for 64G) shows as the model writes it, so a diff shows real changes only."""
        planned = {(c.scope, c.attribute): c for c in self.changes}
        lines = []
        for scope, wanted in self.desired.items():
            lines.append(f"[{'common' if scope == CLUSTER else scope}]")
            for attribute in sorted(wanted):
                change = planned.get((scope, attribute))
                value = wanted[attribute]
                if which == "before" and change is not None:
                    value = change.current if change.current is not None else "(default)"
                lines.append(f"{attribute} {value}")
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict:
        return {
            "changed": bool(self.applicable),
            "changes": [
                {
                    "scope": c.scope,
                    "attribute": c.attribute,
                    "current": c.current,
                    "desired": c.desired,
                    "immediate": c.immediate,
                    "offline": c.offline,
                    "text": c.describe(),
                }
                for c in self.changes
            ],
            "commands": self.commands(),
            "restart": self.restart(),
            "deferred": [c.describe() for c in self.deferred],
            "overrides": [f"{s.attribute} {s.value} on {','.join(s.nodes)}" for s in self.overrides],
            "diff": {"before": self.view("before"), "after": self.view("after")},
        }


def plan(desired: dict[str, dict[str, str]], settings: list[Setting]) -> Plan:
    """What mmchconfig must change so that every scope has its desired values.

    A class's current value is its own entry, else the cluster-wide one (after this plan's
    cluster-wide changes, which run first), else GPFS's default. Entries for node lists the
    model does not name stay as they are: they are the administrator's.
    """
    current = current_state(settings)
    changes: list[Change] = []
    cluster_after = {**current[CLUSTER], **desired.get(CLUSTER, {})}
    for scope, wanted in desired.items():
        own = current.get(scope, {})
        for attribute, value in wanted.items():
            if attribute in own:
                was, source = own[attribute], "set"
            elif scope != CLUSTER and attribute in cluster_after:
                was, source = cluster_after[attribute], "cluster"
            else:
                was, source = DEFAULTS.get(attribute), "default"
            if not same_value(attribute, was, value):
                changes.append(Change(scope, attribute, was, value, source))
    managed = {a for wanted in desired.values() for a in wanted}
    overrides = [s for s in settings if s.nodes and s.attribute in managed and not set(s.nodes) <= set(desired)]
    return Plan(changes=changes, current=current, desired=desired, overrides=overrides)
