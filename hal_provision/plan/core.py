"""Compare two rendered trees and say, per component, what a converge would do and to which jobs.

Exit codes as `terraform plan -detailed-exitcode`: 0 nothing changes, 2 changes, 1 a change
would lose or strand jobs, or cannot be applied at all (a Slurm upgrade outside Slurm's window,
a downgrade), or the plan could not be made.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from .. import update_policy
from . import compose, pull
from .advice import Line
from .effects import (
    AT_UPGRADE,
    NOTHING,
    ROLLING,
    ROLLING_DOES,
    UPGRADE_TAKES,
    Consequence,
    Effect,
    FileChange,
    Sides,
    SlurmEffect,
    effect,
)
from .impact import Impact, assess
from ..hostlist import expand, fold_or_dash
from .jobs import Job, NodeState
from .pull import SITE
from .sources import compared

EXIT_NO_CHANGES, EXIT_BLOCKING, EXIT_CHANGES = 0, 1, 2
FIRST_DEPLOYMENT = "first deployment"
NEW_HOSTS = "new hosts"  # the plan's entry for them: no update-policy component owns a host


@dataclass
class ComponentPlan:
    name: str
    files: list[FileChange]
    consequences: list[Consequence]
    notes: list[str] = field(default_factory=list)
    blocking: list[str] = field(default_factory=list)  # why this component's change cannot be applied
    advice: list[str] = field(default_factory=list)


@dataclass
class Plan:
    components: list[ComponentPlan]
    impacts: list[Impact] | None  # None: no jobs were given
    node_states: list[str] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)
    old: str = ""  # where each side came from, for the reader
    new: str = ""

    @property
    def changed(self) -> bool:
        return bool(self.components)

    @property
    def blocking(self) -> list[Impact]:
        return [i for i in self.impacts or [] if i.blocking]

    @property
    def blocked(self) -> list[str]:
        """Why a change cannot be applied at all, whatever the jobs (a Slurm upgrade outside the window)."""
        return [why for c in self.components for why in c.blocking]

    @property
    def exit_code(self) -> int:
        if self.blocking or self.blocked:
            return EXIT_BLOCKING
        return EXIT_CHANGES if self.changed else EXIT_NO_CHANGES

    @property
    def summary(self) -> str:
        if not self.changed:
            return "No changes: NEW renders exactly the deployed files."
        files = sum(len(c.files) for c in self.components)
        owning = sum(1 for c in self.components if c.files)
        text = f"{files} changed file{'s' if files != 1 else ''} in {owning} component{'s' if owning != 1 else ''}"
        restarts = [
            f"{c.action} on {c.hosts}"
            for comp in self.components
            for c in comp.consequences
            if c.action.startswith(("restart", "upgrade", FIRST_DEPLOYMENT)) and c.hosts != "-"
        ]
        text += f"; {'; '.join(restarts)}" if restarts else "; no daemon restarts"
        if self.blocked:
            text += f"; BLOCKED: {len(self.blocked)} change{'s' if len(self.blocked) != 1 else ''} cannot be applied"
        if self.impacts is None:
            return text + ". Jobs not checked."
        blocking = len(self.blocking)
        return text + (
            f". {blocking} job{'s' if blocking != 1 else ''} would be lost or stranded."
            if blocking
            else ". No job is lost or stranded."
        )


def build(
    old: dict[str, str],
    new: dict[str, str],
    *,
    jobs: list[Job] | None = None,
    nodes: dict[str, NodeState] | None = None,
    with_diff: bool = False,
    inventory: str = "INVENTORY",
    render: str | None = None,
    bundle_dir: str = "BUNDLE_DIR",
    bundle: str | None = None,
) -> Plan:
    """The plan for converging NEW onto a cluster that runs OLD (both rendered trees);
    `inventory` is the Ansible inventory the advice's commands name, `render` the command that
    puts NEW's tree there when it is not there yet; on a pull cluster `bundle` the command that
    builds NEW's bundle into `bundle_dir`, which publish.yml publishes."""
    policy = update_policy.load()
    old, new = compared(old), compared(new)
    recompose = compose.find(old, new)
    # Beyond a recomposition, NEW is compared with the deployed tree as recomposed (plan/compose.py).
    base = recompose.base if recompose else old
    sides = Sides(base, new, inventory)
    by_component: dict[str, list[FileChange]] = {}
    unowned, recomposed = [], []
    for path in sorted(old.keys() | new.keys()):
        if old.get(path) == new.get(path):
            continue
        change = "added" if path not in old else "removed" if path not in new else "modified"
        diff = _diff(path, old.get(path, ""), new.get(path, "")) if with_diff else None
        if recompose and compose.explains(recompose, old, new, path):
            recomposed.append(FileChange(path, change, diff))
            continue
        owners = policy.owners(path)
        if not owners:
            unowned.append(FileChange(path, change))
            continue
        by_component.setdefault(owners[0].name, []).append(FileChange(path, change, diff))

    components, slurm = [], None
    for component in policy.components:
        files = by_component.get(component.name)
        if files:
            result: Effect = effect(component, files, sides)
            slurm = result.slurm or slurm
            components.append(
                ComponentPlan(component.name, files, result.consequences, result.notes, result.blocking, result.advice)
            )
    _absorb_into_upgrade(components)
    if sides.new_hosts:  # first, as they are the largest change: everything, not a restart
        components.insert(
            0,
            ComponentPlan(
                NEW_HOSTS,
                [],
                [
                    Consequence(
                        FIRST_DEPLOYMENT,
                        fold_or_dash(sides.new_hosts),
                        "nothing runs there yet: every tier of site.yml",
                    )
                ],
            ),
        )
    if unowned:  # only a tree from elsewhere (a hand-edited record) can hold such files
        components.append(
            ComponentPlan("unknown", unowned, [Consequence("unknown", "-", "no update-policy entry names these files")])
        )
    impacts = assess(jobs, base, new, slurm) if jobs is not None else None
    if recompose:  # before the others: compose.yml applies it, site.yml the rest
        steps, notes = compose.consequences(recompose, sides)
        components.insert(0, ComponentPlan(compose.COMPONENT, recomposed, steps, notes))
        if impacts is not None:
            impacts = compose.impacts(recompose, jobs) + impacts
    plan = Plan(components, impacts)
    plan.node_states = _node_states(nodes, slurm)
    plan.advice = _advice(
        plan, slurm, sides, recompose, bundle or f"hal-provision bundle NEW --out {bundle_dir}", bundle_dir
    )
    if render and plan.advice and not plan.blocked:
        plan.advice.insert(
            0,
            Line(
                f"render first: {render} ({inventory} does not hold NEW yet, and the commands below "
                "converge what it holds)",
                [render],
            ),
        )
    return plan


def _absorb_into_upgrade(components: list[ComponentPlan]) -> None:
    """Beside a Slurm upgrade, the changed files of the daemons it upgrades go in at their steps,
    which restart each daemon once: listed as such, not as restarts of their own."""
    upgrade = next((c for c in components if c.name == "slurm_upgrade"), None)
    if upgrade is None or not any(q.action.startswith("upgrade") for q in upgrade.consequences):
        return
    for component in components:
        if component.name in UPGRADE_TAKES:
            hosts = {h for q in component.consequences if q.hosts != "-" for h in expand(q.hosts)}
            component.consequences = [
                Consequence(
                    AT_UPGRADE,
                    fold_or_dash(hosts),
                    "each daemon and client takes these files at its step of "
                    "slurm_upgrade, which restarts it: once, not again here",
                )
            ]


def _diff(path: str, old: str, new: str) -> str:
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            fromfile=f"deployed/{path}",
            tofile=f"new/{path}",
        )
    )


def _node_states(nodes: dict[str, NodeState] | None, slurm: SlurmEffect | None) -> list[str]:
    """What sinfo says about the nodes the change removes or redefines."""
    if not nodes or slurm is None:
        return []
    affected = sorted(slurm.removed | set(slurm.redefined))
    return [
        f"{h}: {nodes[h].state}" + (f" ({nodes[h].reason})" if nodes[h].reason else "") for h in affected if h in nodes
    ]


def _advice(
    plan: Plan,
    slurm: SlurmEffect | None,
    sides: Sides,
    recompose: compose.Recomposition | None,
    bundle: str,
    bundle_dir: str,
) -> list[str]:
    """What to do: drain and wait (or roll) for blocking running jobs, per stranded job its way
    out, otherwise how to apply; a recomposition first, with compose.yml, site.yml after it only
    for what changes on the nodes beyond the layout. On a pull cluster the bundle, the control
    plane and the publish instead of site.yml and rolling.yml (plan/pull.py)."""
    if not plan.changed:
        return []
    out = [line for c in plan.components for line in c.advice]
    if plan.blocked:  # nothing of NEW can be applied as it stands
        return out
    inventory = sides.inventory
    pulling = pull.is_pull(sides)
    if recompose:
        held = [i for i in plan.blocking if i.kind == "recomposition"]
        others = [
            c
            for c in plan.components
            if c.name != compose.COMPONENT and any(q.action != NOTHING for q in c.consequences)
        ]
        out += compose.advice(recompose, held, inventory, pulling)  # first; the lines below follow it
        if len(held) == len(plan.blocking) and not others and not pulling:  # (pulling: the bundle must follow)
            if plan.impacts is None:
                out.append("jobs not checked: give --jobs FILE (squeue --json) or --live INVENTORY")
            return out
    removed = sorted(slurm.removed) if slurm else []
    lost = sorted({h for i in plan.blocking for h in i.hosts if h in removed})
    redefined = sorted({h for i in plan.blocking for h in i.hosts if h not in lost})
    jobs = _job_lines(plan.blocking)
    if pulling:
        out += pull.advice(
            plan.components,
            sides,
            bundle=bundle,
            bundle_dir=bundle_dir,
            removed=removed,
            redefined=redefined,
            jobs=jobs,
            blocking=bool(plan.blocking),
            recompose=bool(recompose),
            skip=(compose.COMPONENT, NEW_HOSTS),
        )
    else:
        out += _push(plan, sides, removed, lost, redefined, jobs)
    if plan.impacts is None:
        out.append("jobs not checked: give --jobs FILE (squeue --json) or --live INVENTORY")
    elif not plan.blocking and slurm and slurm.restart:
        out.append("running jobs survive the slurmd restarts")
    return out


def _push(
    plan: Plan, sides: Sides, removed: list[str], lost: list[str], redefined: list[str], jobs: list[str]
) -> list[str]:
    """site.yml on the whole inventory, or rolling.yml where nodes must be idle first."""
    inventory, new_hosts = sides.inventory, sorted(sides.new_hosts)
    site = SITE.format(inventory=inventory)
    out: list[str] = []
    for hosts, why in ((lost, "leaving the cluster"), (redefined, "redefined")):
        if hosts:
            drain = f'scontrol update nodename={fold_or_dash(hosts)} state=drain reason="hal-provision plan: {why}"'
            out.append(Line(f"drain: {drain}", [drain]))
    if lost or redefined:
        drained = fold_or_dash(lost + redefined)
        out.append(Line(f"wait: until `squeue -w {drained}` lists no job, then {site}", [f"squeue -w {drained}", site]))
        rolling = ROLLING.format(inventory=inventory, hosts=drained)
        out.append(Line(f"or roll: {rolling} ({ROLLING_DOES})", [rolling]))
    out += jobs
    if not plan.blocking:
        if removed:
            rolling = ROLLING.format(inventory=inventory, hosts=fold_or_dash(removed))
            out.append(
                Line(
                    f"roll: {rolling} (drains the leaving nodes and waits for their jobs before the converge)",
                    [rolling],
                )
            )
        else:
            out.append(Line(f"apply: {site}", [site]))
    if new_hosts:
        first = f"{site} --limit {sides.new_inventory.limit(new_hosts)}"
        out.append(
            Line(
                f"{FIRST_DEPLOYMENT}: {first} (the new hosts alone; the whole-cluster converge includes them)", [first]
            )
        )
    if removed:
        out.append(f"after the converge: stop slurmd on {fold_or_dash(removed)} (site.yml no longer manages them)")
    return out


def _job_lines(blocking: list[Impact]) -> list[str]:
    """Per pending job a lowered limit strands: its way out."""
    out: list[str] = []
    for impact in blocking:
        job = impact.job
        if impact.kind == "time":
            command = f"scontrol update jobid={job.job_id} timelimit={impact.limit}"
            out.append(
                Line(
                    f"job {job.job_id} ({job.user}): {command}, or wait until it has started (a running job "
                    "keeps its limit)",
                    [command],
                )
            )
        elif impact.kind in ("partition", "qos", "memory", "gpus", "nodes"):
            out.append(
                f"job {job.job_id} ({job.user}): wait until it has started, or ask {job.user} to resubmit "
                "within the new limits"
            )
    return out
