"""How to apply a plan on a pull-mode cluster (deploy.mode pull), in place of site.yml on the
whole inventory and rolling.yml, which push to every host.

The pull nodes converge themselves from the bundle their distribution point serves; the
controller pushes the rest, the control plane, with `--limit 'all:!deploy_pull'`. A change that
reaches pull nodes is applied as: build and sign the bundle, push the control plane where the
change reaches it, publish; each node takes the bundle at its timer's next run and drains itself
around a change (hal_provision/node/converge.py); `hal-provision fleet` follows the nodes or
starts their runs now. A node that leaves is drained with scontrol (rolling.yml would push to
it), its own converge stopped first and its slurmd once slurmctld no longer knows it.

The schedule and the drain wait are read from NEW's rendered timer and deploy.json, as the nodes
will read them.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath

from ..hostlist import expand, fold, fold_or_dash
from ..render.deploy import CONFIG, PULL_GROUP, TIMER
from .advice import Line
from .effects import NOTHING, Consequence, Sides

SITE = "ansible-playbook -i {inventory} playbooks/site.yml"
CONTROL_PLANE = shlex.quote(f"all:!{PULL_GROUP}")  # every host but the pull nodes
# publish.yml reads bundle_dir with Ansible's file lookup and copy, which look for a relative
# path beside the playbook, not in the directory it is run from: a relative one as $PWD gives it.
PUBLISH = 'ansible-playbook -i {inventory} playbooks/publish.yml -e "bundle_dir={bundle_dir}"'
STATUS = "hal-provision fleet status {inventory}"
CONVERGE = "hal-provision fleet converge {hosts} -i {inventory} --wait"
STOP_CONVERGE = f"systemctl disable --now {PurePosixPath(TIMER).name}"
STOP_SLURMD = "systemctl disable --now slurmd"


@dataclass(frozen=True)
class Schedule:
    """When the pull nodes look for a new bundle, and how long one waits for its jobs."""

    calendar: str
    spread: str
    drain_wait_s: str

    @classmethod
    def of(cls, tree: dict[str, str]) -> Schedule:
        timer = dict(re.findall(r"^(OnCalendar|RandomizedDelaySec)=(.*)$", tree.get(TIMER, ""), re.M))
        try:
            wait = json.loads(tree.get(CONFIG, "{}")).get("drain_wait_s")
        except ValueError:
            wait = None
        return cls(
            timer.get("OnCalendar", "?"), timer.get("RandomizedDelaySec", "?"), str(wait if wait is not None else "?")
        )

    def __str__(self) -> str:
        return f"OnCalendar={self.calendar}, RandomizedDelaySec={self.spread}"


def is_pull(sides: Sides) -> bool:
    """Whether NEW is a pull-mode cluster (its inventory has pull nodes)."""
    return bool(sides.new_inventory.hosts(PULL_GROUP))


def advice(
    components,
    sides: Sides,
    *,
    bundle: str,
    bundle_dir: str,
    removed: list[str],
    redefined: list[str],
    jobs: list[str],
    blocking: bool,
    recompose: bool,
    skip: tuple[str, ...],
) -> list[str]:
    """The steps, in order: stop the converge of the nodes that leave, drain what must be idle
    first (leaving nodes always; redefined ones a running job holds), the per-job lines, then
    the apply (`_apply`). With only pending jobs blocking, the per-job lines alone, as in push
    mode. `skip`: the components whose consequences another command applies (compose.yml, the
    first deployment)."""
    out: list[str] = []
    leaving = [h for h in removed if h in sides.old_inventory.hosts(PULL_GROUP)]
    if leaving:
        out.append(
            Line(
                f"first, on {_each(leaving)}: {STOP_CONVERGE} (it leaves the cluster: no converge of its own "
                "from now on)",
                [STOP_CONVERGE],
            )
        )
    for hosts, why in ((removed, "leaving the cluster"), (redefined, "redefined")):
        if hosts:
            drain = f'scontrol update nodename={fold(hosts)} state=drain reason="hal-provision plan: {why}"'
            out.append(Line(f"drain: {drain}", [drain]))
    if removed or redefined:
        idle = f"squeue -w {fold(removed + redefined)}"
        out.append(Line(f"wait: until `{idle}` lists no job (none is cancelled), then go on", [idle]))
    out += jobs
    if blocking and not (removed or redefined):
        return out
    return out + _apply(components, sides, bundle, bundle_dir, removed, redefined, recompose, skip)


def _apply(
    components,
    sides: Sides,
    bundle: str,
    bundle_dir: str,
    removed: list[str],
    redefined: list[str],
    recompose: bool,
    skip: tuple[str, ...],
) -> list[str]:
    """Bundle, push the control plane (where the change reaches it), stop the leaving nodes'
    slurmd, publish, enrol the new pull nodes (and those that did not pull before), what the
    nodes then do, how to follow them or hurry them."""
    inventory, site = sides.inventory, SITE.format(inventory=sides.inventory)
    pulling = sides.new_inventory.hosts(PULL_GROUP)
    enrol = sorted(pulling - sides.old_inventory.hosts(PULL_GROUP))  # by a push of their own
    control, reached = _reach(components, sides, skip)
    control = sorted({*control, *(sides.new_hosts - pulling)})  # a new control-plane host: its first deployment
    reached = sorted(set(reached) - set(enrol))
    publish = bool(reached or recompose or enrol)
    out: list[str] = []
    if publish:
        out.append(
            Line(f"bundle (NEW's, its release signed with the cluster's key; nothing changes yet): {bundle}", [bundle])
        )
    if control or not publish:
        push = f"{site} --limit {CONTROL_PLANE}"
        where = f"the change reaches {fold(control)} there" if control else "nothing of this reaches the pull nodes"
        out.append(Line(f"push the control plane ({where}): {push}", [push]))
    if removed:
        out.append(
            Line(
                f"then, on {_each(removed)}: {STOP_SLURMD} (slurmctld no longer knows it; nothing manages it now)",
                [STOP_SLURMD],
            )
        )
    if not publish:
        return out
    where = bundle_dir if PurePosixPath(bundle_dir).is_absolute() else f"$PWD/{bundle_dir}"
    command = PUBLISH.format(inventory=inventory, bundle_dir=where)
    out.append(Line(f"publish (on every point, current.json last): {command}", [command]))
    if enrol:
        first = f"{site} --limit {sides.new_inventory.limit(enrol)}"
        out.append(
            Line(
                f"first deployment of {fold(enrol)} (their enrolment: every tier once, with the munge key "
                f"and the release key's public part; then they pull): {first}",
                [first],
            )
        )
    schedule = Schedule.of(sides.new)
    if reached:
        out.append(
            f"then {fold(reached)} take it at their timer's next run ({schedule}): each drains itself, waits "
            f"at most {schedule.drain_wait_s} s for its jobs (none is cancelled; still running, it stays "
            "drained for the next run), converges and resumes"
        )
    elif recompose:
        out.append(
            f"then the pull nodes take it at their timer's next run ({schedule}): compose.yml wrote what "
            "changes on them, so their converge finds nothing to change (no drain)"
        )
    if redefined:
        resume = f"scontrol update nodename={fold(redefined)} state=resume"
        out.append(
            Line(
                f"once `fleet status` shows {fold(redefined)} at the new version (a node's converge lifts only "
                f"its own drain): {resume}",
                [resume],
            )
        )
    status = STATUS.format(inventory=inventory)
    out.append(Line(f"follow: {status} (exit 0 once every pull node runs the new version)", [status]))
    if reached:
        converge = CONVERGE.format(hosts=shlex.quote(fold(reached)), inventory=inventory)
        out.append(Line(f"or hurry (their converge now, not at the timer): {converge}", [converge]))
    return out


def _reach(components, sides: Sides, skip: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """The control-plane hosts and the pull nodes where a consequence does something."""
    hosts: set[str] = set()
    for component in components:
        if component.name in skip:
            continue
        for q in component.consequences:
            hosts |= _hosts(q)
    hosts &= sides.new_inventory.all_hosts() - sides.new_hosts  # no removed host; the new ones are enrolled
    return sorted(hosts - sides.pull_nodes), sorted(hosts & sides.pull_nodes)


def _hosts(q: Consequence) -> set[str]:
    return set() if q.action == NOTHING or q.hosts == "-" else set(expand(q.hosts))


def _each(hosts: list[str]) -> str:
    return hosts[0] if len(hosts) == 1 else f"each of {fold_or_dash(hosts)}"
