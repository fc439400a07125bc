"""What a component's changed files do on the nodes, per the update policy's action.

Simple actions (restart, reload, command, file-only, none) are the policy entry applied to the
hosts that get the files. The rest follow the roles: Slurm's restart-or-reconfigure rule,
the accounting plan's sacctmgr commands, the GPFS tuning plan; and a Slurm upgrade, in the
order Slurm requires, within its upgrade window (model/slurm_versions.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from ..model.slurm_versions import WINDOW_WIDENED_IN, shipped, upgrade_path, upgrades_from
from .. import update_policy
from ..render.slurm_version import SLURM_VERSION_JSON
from ..update_policy import Component, json_key
from .accounting import sacctmgr_changes
from ..hostlist import fold_or_dash
from .inventory import Inventory
from ..render.deploy import PULL_GROUP
from .slurm import SlurmConf, changed_keys, definition_changes, restart_required
from .tuning import tuning_changes

NOTHING = "nothing on the nodes"
BLOCKED = "blocked"
ROLLING = "ansible-playbook -i {inventory} playbooks/rolling.yml -e 'hosts={hosts}'"
ROLLING_DOES = "drains, waits for their jobs without cancelling any, converges, resumes"
# What the daemons of these components get at their step of a Slurm upgrade (slurm_upgrade), which
# restarts each of them once: a change of their files restarts nothing beside it.
UPGRADE_TAKES = ("slurm", "slurmd_configless", "slurmdbd")
AT_UPGRADE = "at its upgrade step"


@dataclass(frozen=True)
class FileChange:
    path: str
    change: str  # added, removed, modified
    diff: str | None = None


@dataclass(frozen=True)
class Consequence:
    action: str
    hosts: str  # folded hostlist; '-' for none
    detail: str = ""
    commands: tuple[str, ...] = ()


@dataclass
class SlurmEffect:
    """Slurm's part of the plan, which the job impact reads."""

    restart: bool
    restarting: set[str]  # hosts whose slurmctld or slurmd restarts
    old: SlurmConf
    new: SlurmConf
    removed: set[str] = field(default_factory=set)
    added: set[str] = field(default_factory=set)
    redefined: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class Effect:
    consequences: list[Consequence] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    slurm: SlurmEffect | None = None
    blocking: list[str] = field(default_factory=list)  # why the change cannot be applied at all
    advice: list[str] = field(default_factory=list)  # what to do, before the plan's usual lines


class Sides:
    """Both rendered trees, and their inventories, parsed only when a consequence needs hosts
    (a 100,000-node inventory is seconds of YAML)."""

    def __init__(self, old: dict[str, str], new: dict[str, str], inventory: str = "INVENTORY"):
        self.old, self.new, self.inventory = old, new, inventory

    @cached_property
    def new_hosts(self) -> set[str]:
        """Hosts NEW's inventory adds: they get their first deployment (every tier of site.yml),
        so no other consequence names them (a daemon never started cannot restart)."""
        inventories = {p for p in self.old.keys() | self.new.keys() if p.startswith("inventory/")}
        if all(self.old.get(p) == self.new.get(p) for p in inventories):
            return set()  # a host can only arrive through a changed inventory
        return self.new_inventory.all_hosts() - self.old_inventory.all_hosts()

    @cached_property
    def pull_nodes(self) -> set[str]:
        """NEW's pull nodes (deploy.mode pull) that run already: they converge themselves from the
        published bundle; every other host is the control plane, pushed. Empty in push mode."""
        return self.new_inventory.hosts(PULL_GROUP) - self.new_hosts

    @cached_property
    def old_inventory(self) -> Inventory:
        return Inventory(self.old)

    @cached_property
    def new_inventory(self) -> Inventory:
        return Inventory(self.new)


def effect(component: Component, files: list[FileChange], sides: Sides) -> Effect:
    if not component.deployed(sides.new):
        cond = component.deployed_when
        return Effect(
            [Consequence(NOTHING, "-", f"not deployed: {cond['key']} in {cond['file']} is not {cond['equals']}")]
        )
    special = {"slurm": _slurm, "sacctmgr": _accounting, "mmchconfig": _tuning, "upgrade": _upgrade}.get(
        component.action
    )
    if special is not None:
        return special(component, files, sides)
    return Effect(
        [Consequence(_simple_action(component), fold_or_dash(_hosts(component, files, sides)), component.detail)]
    )


def _simple_action(component: Component) -> str:
    return {
        "restart": f"restart {component.service}",
        "reload": f"reload {component.service}",
        "command": component.command,
        "file-only": "file only",
        "none": NOTHING,
    }[component.action]


def _hosts(component: Component, files: list[FileChange], sides: Sides) -> set[str]:
    """Hosts that get the changed files: from NEW's inventory, OLD's for a removed file."""
    hosts: set[str] = set()
    for f in files:
        tree, inventory = (
            (sides.old, sides.old_inventory) if f.change == "removed" else (sides.new, sides.new_inventory)
        )
        groups = component.groups_for(component.match(f.path) or {}) + component.groups_from_files(tree)
        for group in groups:
            hosts |= inventory.hosts(group)
    return hosts - sides.new_hosts


# ---- Slurm ---------------------------------------------------------------------------------------
def _slurm(component: Component, files: list[FileChange], sides: Sides) -> Effect:
    rule = component.extra
    conf_path = rule["reconfigure_file"]
    changed = [f.path for f in files]
    others = [p.rsplit("/", 1)[-1] for p in changed if p != conf_path]
    keys = changed_keys(sides.old.get(conf_path, ""), sides.new.get(conf_path, "")) if conf_path in changed else []
    restart = restart_required(keys, bool(others), rule["reconfigure_keys"])
    controller = sides.new_inventory.hosts(rule["controller_group"]) - sides.new_hosts
    computes = sides.new_inventory.hosts(rule["compute_group"]) - sides.new_hosts
    clients = _hosts(component, files, sides) - controller - computes
    # Configless nodes get no file: slurmctld sends them the configuration (slurm.configless).
    configless = computes & sides.new_inventory.hosts(rule.get("configless_group", ""))
    pushed = computes - configless

    allowed = {k.lower() for k in rule["reconfigure_keys"]}
    old_conf, new_conf = SlurmConf.parse(sides.old.get(conf_path, "")), SlurmConf.parse(sides.new.get(conf_path, ""))
    if restart:
        outside = [k for k in keys if k not in allowed]
        why = "; ".join(
            filter(
                None,
                [
                    f"{', '.join(others)} changed: read only at start" if others else "",
                    f"keys outside reconfigure_keys: {', '.join(outside)}" if outside else "",
                ],
            )
        )
        out = [*controller_restarts(controller, new_conf.controllers, why, rule["backup_ready"])]
        if pushed or not configless:
            out.append(Consequence("restart slurmd", fold_or_dash(pushed), "running jobs survive a slurmd restart"))
        if configless:
            out.append(
                Consequence(
                    "restart slurmd",
                    fold_or_dash(configless),
                    "configless: no file copied; slurmd fetches the configuration from slurmctld as it "
                    "starts; running jobs survive a slurmd restart",
                )
            )
    else:
        out = [
            Consequence(
                "scontrol reconfigure",
                fold_or_dash(controller),
                f"reconfigurable keys only: {', '.join(keys) or '(comments)'}",
            )
        ]
        if pushed or not configless:
            out.append(Consequence("reload slurmd", fold_or_dash(pushed), "SIGHUP: slurmd re-reads slurm.conf"))
        if configless:
            out.append(
                Consequence(
                    "reached by scontrol reconfigure",
                    fold_or_dash(configless),
                    "configless: no file copied; the reconfigure sends slurmd the new configuration",
                )
            )
    if clients:
        out.append(Consequence("file only", fold_or_dash(clients), component.detail))

    slurm = SlurmEffect(
        restart,
        (controller | computes) if restart else set(),
        old_conf,
        new_conf,
        removed=old_conf.nodes.keys() - new_conf.nodes.keys(),
        added=new_conf.nodes.keys() - old_conf.nodes.keys(),
        redefined=definition_changes(old_conf, new_conf),
    )
    return Effect(out, _slurm_notes(slurm, json_key(sides.new, SLURM_VERSION_JSON, "version")), slurm)


def controller_restarts(
    hosts: set[str], order: list[str], why: str, ready: str, action: str = "restart slurmctld"
) -> list[Consequence]:
    """slurmctld restarted (or upgraded: `action`) on `hosts`: at once with one controller; with
    a backup (slurm.conf's SlurmctldHost lines, in `order`) the backup first, then the primary
    once `ready` (the policy's `backup_ready`) shows the backup UP, each its own consequence, in
    that order."""
    primary, backups = (order[0], [h for h in order[1:] if h in hosts]) if order else (None, [])
    if primary not in hosts or not backups:
        return [Consequence(action, fold_or_dash(hosts), why)]
    shown = ", ".join(backups)
    return [
        Consequence(action, fold_or_dash(backups), f"backup controller, first{': ' + why if why else ''}"),
        Consequence(
            action,
            primary,
            f"primary controller, once `{ready}` shows {shown} UP: one controller always runs, "
            f"and {shown} takes over should {primary} not come back",
        ),
    ]


def _slurm_notes(s: SlurmEffect, version: str | None) -> list[str]:
    """Notes on the Slurm change; `version`: the major NEW is written for (None: NEW records none)."""
    notes = []
    if s.old.controllers != s.new.controllers:
        notes.append(
            f"controllers (primary first): {', '.join(s.old.controllers) or '-'} -> "
            f"{', '.join(s.new.controllers) or '-'}"
        )
    if s.added:
        slurm = f"Slurm {version}: " if version else ""
        notes.append(f"nodes added: {fold_or_dash(s.added)} ({slurm}slurmctld and every slurmd restart to learn them)")
    if s.removed:
        notes.append(
            f"nodes removed: {fold_or_dash(s.removed)} (site.yml no longer manages them: "
            "drain them, then stop their slurmd)"
        )
    by_change: dict[str, set[str]] = {}
    for host, diffs in s.redefined.items():
        by_change.setdefault(", ".join(diffs), set()).add(host)
    notes += [f"node definition of {fold_or_dash(hosts)}: {change}" for change, hosts in sorted(by_change.items())]
    for name in sorted(s.old.partitions.keys() | s.new.partitions.keys()):
        a, b = s.old.partitions.get(name), s.new.partitions.get(name)
        if a is None or b is None:
            notes.append(f"partition {name} {'added' if a is None else 'removed'}")
        elif a != b:
            diffs = [
                f"{k} {a.get(k, '-')} -> {b.get(k, '-')}" for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)
            ]
            notes.append(f"partition {name}: {', '.join(diffs)}")
    return notes


# ---- a Slurm upgrade ----------------------------------------------------------------------------
def _upgrade(component: Component, files: list[FileChange], sides: Sides) -> Effect:
    """slurm.version changed: slurmdbd, then slurmctld, then slurmd rolling, then the clients;
    blocked outside Slurm's upgrade window and for a downgrade."""
    path = files[0].path
    old, new = json_key(sides.old, path, "version"), json_key(sides.new, path, "version")
    if old is None or new is None:
        return Effect(
            [
                Consequence(
                    NOTHING,
                    "-",
                    f"{'OLD' if old is None else 'NEW'} records no Slurm version "
                    "(rendered before hal-provision wrote it): compare by hand",
                )
            ]
        )
    if old == new:
        return Effect([Consequence(NOTHING, "-", f"Slurm {new} on both sides")])
    steps = upgrade_path(old, new)
    if steps is None:
        why = (
            f"Slurm {old} -> {new} is a downgrade, which Slurm does not support: slurmdbd {old} has converted "
            f"the accounting database, and slurmctld {old} its saved state, to formats {new} cannot read"
        )
        return Effect(
            [Consequence(BLOCKED, "-", why)],
            blocking=[why],
            advice=[
                f"keep slurm.version {old}, or go back to {new} by restoring the snapshots taken before the upgrade "
                f"to {old} (playbooks/restore.yml) with {new}'s packages"
            ],
        )
    if len(steps) > 2:
        route = " -> ".join(steps)
        why = (
            f"Slurm {new} takes the state of {', '.join(upgrades_from(new))} only, not {old}'s (Slurm's upgrade "
            f"window: the two previous majors, the three previous from {WINDOW_WIDENED_IN}): upgrade through "
            f"{route}"
        )
        return Effect(
            [Consequence(BLOCKED, "-", why)],
            blocking=[why],
            advice=[
                f"upgrade in steps, {route}: set slurm.version to {steps[1]}, plan and converge as this plan would, "
                f"then the next" + (" and the next" if len(steps) > 3 else "")
            ],
        )
    return Effect(
        _upgrade_steps(component, sides, old, new),
        [
            f"Slurm {old} -> {new}: each host's package source must offer {new} ({shipped()}); the slurm role installs "
            "what it offers and upgrades nothing",
            f"the Slurm files of NEW are written for {new}: each daemon gets them at its step, not before",
        ],
        advice=[
            f"upgrade Slurm {old} -> {new} in the order of slurm_upgrade, each step once the one before "
            "answers; nothing else meanwhile"
        ],
    )


def _upgrade_steps(component: Component, sides: Sides, old: str, new: str) -> list[Consequence]:
    rule, inventory = component.extra, sides.new_inventory
    slurm = update_policy.load().component("slurm").extra  # its groups and controller order, not a copy
    dbd = inventory.hosts(rule["dbd_group"]) - sides.new_hosts
    controller = inventory.hosts(slurm["controller_group"]) - sides.new_hosts
    computes = inventory.hosts(slurm["compute_group"]) - sides.new_hosts
    clients = {h for g in component.hosts for h in inventory.hosts(g)} - dbd - controller - computes - sides.new_hosts
    order = SlurmConf.parse(sides.new.get(slurm["reconfigure_file"], "")).controllers
    backup_host = next(
        (
            j.get("host")
            for j in json_key(sides.new, "files/etc/hal-provision/backup.json", "jobs") or []
            if isinstance(j, dict) and j.get("name") == rule["backup_job"]
        ),
        None,
    )
    if backup_host:
        backup = Consequence(
            "back up",
            backup_host,
            "the accounting database as it is now, before slurmdbd stops",
            (
                rule["backup"].format(inventory=sides.inventory),
                f"hal-backup run --job {rule['backup_job']}",
                f"hal-backup verify {rule['backup_job']}",
            ),
        )
    else:
        backup = Consequence(
            "back up",
            fold_or_dash(dbd),
            "the accounting database, by hand: no backup section "
            "backs it up (mariadb-dump of slurm.accounting_database)",
        )
    pushed, pulled = computes - sides.pull_nodes, computes & sides.pull_nodes
    rolling = ROLLING.format(inventory=sides.inventory, hosts=fold_or_dash(pushed))
    slurmd = []
    if pushed or not pulled:
        slurmd.append(
            Consequence(
                "upgrade slurmd",
                fold_or_dash(pushed),
                f"then rolling, a part of the nodes per run ({ROLLING_DOES}): running jobs are never cancelled",
                (rolling,),
            )
        )
    if pulled:  # rolling.yml would push to them: their own converge takes the bundle instead
        slurmd.append(
            Consequence(
                "upgrade slurmd",
                fold_or_dash(pulled),
                "then pull nodes, at their own converge once the bundle of NEW is published: each "
                "drains itself, waits for its jobs without cancelling any, converges, resumes",
            )
        )
    return [
        backup,
        Consequence(
            "upgrade slurmdbd",
            fold_or_dash(dbd),
            f"first, alone, the rest of Slurm left running: at its first start slurmdbd {new} converts the "
            f"accounting database of {old}; how long that takes cannot be known in advance (it grows with "
            "the job and step tables): wait until it answers (sacctmgr show cluster), stop nothing meanwhile",
        ),
        *controller_restarts(
            controller,
            order,
            f"then, once slurmdbd answers: slurmctld {new} converts the saved state of {old} at "
            "its first start; jobs keep running",
            slurm["backup_ready"],
            action="upgrade slurmctld",
        ),
        *slurmd,
        *(
            [
                Consequence(
                    "upgrade Slurm clients",
                    fold_or_dash(clients),
                    f"last: {old}'s commands talk to slurmctld {new}; {new}'s would not talk to {old}'s",
                )
            ]
            if clients
            else []
        ),
    ]


# ---- accounting and GPFS -------------------------------------------------------------------------
def _accounting(component: Component, files: list[FileChange], sides: Sides) -> Effect:
    path = files[0].path
    cluster = SlurmConf.cluster_name(sides.new.get("files/etc/slurm/slurm.conf", ""))
    changes = sacctmgr_changes(sides.old.get(path), sides.new.get(path), cluster)
    dbd = sides.new_inventory.first(component.hosts[0]) if component.hosts else None
    if not changes.commands:
        out = [Consequence(NOTHING, "-", "no sacctmgr command: Slurm's listings already match")]
    else:
        out = [
            Consequence(
                "sacctmgr",
                fold_or_dash([dbd] if dbd else []),
                f"first {component.hosts[0]} host",
                tuple(changes.lines()),
            )
        ]
    if changes.reconfigure:
        out.append(
            Consequence(
                "scontrol reconfigure",
                fold_or_dash(sides.new_inventory.hosts("service_slurmctld")),
                "a QOS was added: partitions find it after a reconfigure",
            )
        )
    return Effect(out, changes.notes)


def _tuning(component: Component, files: list[FileChange], sides: Sides) -> Effect:
    changes = tuning_changes(sides.old, sides.new)
    admin = sides.new_inventory.first(component.hosts[0]) if component.hosts else None
    out = []
    if changes.commands:
        out.append(
            Consequence(
                "mmchconfig",
                fold_or_dash([admin] if admin else []),
                component.detail,
                tuple(" ".join(argv) for argv in changes.commands),
            )
        )
    for scope, hosts in changes.restart.items():
        where = "every node" if scope == "cluster" else f"node class {scope}"
        out.append(
            Consequence(
                "restart GPFS",
                fold_or_dash(hosts),
                f"{where}: mmshutdown, mmstartup, one class at a time (the role only names it)",
            )
        )
    if not out:
        out.append(Consequence(NOTHING, "-", "no mmchconfig: the settings already match"))
    return Effect(out, changes.notes)
