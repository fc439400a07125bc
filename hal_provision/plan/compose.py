"""A recomposition: the active layout's pool GPU counts differ between the deployed and the new
composable.json. It is planned as one component, `recomposition`, in the order
playbooks/compose.yml applies it: drain the hosts involved, wait for their jobs (bounded),
detach on the hosts that lose GPUs, attach on those that gain (the pool's driver), restart
slurmctld (the NodeName Gres lines and gres.conf change) and slurmd on the hosts involved, run
the health check there, resume them.

No double count: the deployed tree holds every layout's slurm.conf, gres.conf and health
expectations (files/etc/hal-provision/layouts/<name>/). Where the deployed copy of the NEW
layout is NEW's main file byte for byte, that file's change is the recomposition's alone and the
recomposition owns it; the rest of the plan compares NEW with the deployed tree as recomposed
(`Recomposition.base`), so the slurm component shows only what changes beyond the layout. A
layout the deployed tree has no copy of leaves the files to the slurm component as usual.

A running job holding GPUs on a host that loses GPUs blocks (detaching them would take its
devices away); pending jobs, and jobs on hosts that gain GPUs, do not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from .. import update_policy
from ..compose.moves import moves
from ..hostlist import fold_or_dash
from .advice import Line
from .effects import Consequence, Sides, controller_restarts
from .slurm import SlurmConf
from .impact import Impact
from .jobs import Job

COMPOSABLE = "files/etc/hal-provision/composable.json"
LAYOUTS = "files/etc/hal-provision/layouts"
COMPONENT = "recomposition"
COMPOSE = "ansible-playbook -i {inventory} playbooks/compose.yml -e layout={layout}"
DRIVER = "python -m hal_provision.compose.driver --driver {driver} --pool {pool}{url} {command} {host} {count}"
HEALTH = "hal-healthcheck"


@dataclass(frozen=True)
class PoolMove:
    """One pool's part: host -> GPUs it loses (detach) and gains (attach)."""

    name: str
    gpu_type: str
    driver: str
    driver_url: str | None
    loses: dict[str, int]
    gains: dict[str, int]

    def command(self, action: str, host: str, count: int) -> str:
        url = f" --url {self.driver_url}" if self.driver_url else ""
        return DRIVER.format(driver=self.driver, pool=self.name, url=url, command=action, host=host, count=count)


@dataclass
class Recomposition:
    old_layout: str
    layout: str
    pools: list[PoolMove]
    base: dict[str, str] = field(default_factory=dict)  # the deployed tree as recomposed to NEW's layout

    @property
    def loses(self) -> dict[str, int]:
        return {h: n for p in self.pools for h, n in p.loses.items()}

    @property
    def hosts(self) -> list[str]:
        """The hosts involved: those that lose or gain GPUs, sorted."""
        return sorted({h for p in self.pools for h in (*p.loses, *p.gains)})


def _document(tree: dict[str, str]) -> dict | None:
    try:
        doc = json.loads(tree[COMPOSABLE])
    except (KeyError, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("layouts"), dict) else None


def find(old: dict[str, str], new: dict[str, str]) -> Recomposition | None:
    """The recomposition from OLD's active layout to NEW's; None when the counts are the same or
    either side has no composable.json (then composable GPUs arrive or leave with the rest)."""
    before, after = _document(old), _document(new)
    if before is None or after is None:
        return None
    old_counts = before["layouts"].get(before.get("active"), {})
    new_counts = after["layouts"].get(after.get("active"), {})
    if old_counts == new_counts:
        return None
    # What compose.yml would move with the drivers answering OLD's counts (the same rule: a host
    # takes its GPUs from the first pool cabled to it).
    held = [
        {"pool": pool["name"], "hosts": {h: old_counts.get(h, 0) for h in pool.get("hosts", [])}}
        for pool in after.get("pools", [])
    ]
    steps = moves(after, str(after.get("active")), held)["steps"]
    pools = []
    for pool in after.get("pools", []):
        mine = [s for s in steps if s["pool"] == pool["name"]]
        loses = {s["host"]: s["count"] for s in mine if s["action"] == "detach"}
        gains = {s["host"]: s["count"] for s in mine if s["action"] == "attach"}
        if loses or gains:
            pools.append(
                PoolMove(
                    pool["name"], pool.get("gpu_type", ""), pool.get("driver", ""), pool.get("driver_url"), loses, gains
                )
            )
    if not pools:
        return None
    found = Recomposition(str(before.get("active")), str(after.get("active")), pools)
    found.base = _recomposed(old, found.layout)
    return found


def _recomposed(old: dict[str, str], layout: str) -> dict[str, str]:
    """OLD with its main-tree Slurm and health files replaced by its own copies of `layout`: a
    main file some layout copies and `layout` does not (a group's health expectation that
    becomes per host) is left out."""
    copied: dict[str, dict[str, str]] = {}
    for path, text in old.items():
        if path.startswith(LAYOUTS + "/"):
            name, _sep, rel = path.removeprefix(LAYOUTS + "/").partition("/")
            copied.setdefault(name, {})["files/" + rel] = text
    if layout not in copied:
        return dict(old)
    covered = {p for files in copied.values() for p in files}
    return {**{p: t for p, t in old.items() if p not in covered}, **copied[layout]}


def explains(recompose: Recomposition, old: dict[str, str], new: dict[str, str], path: str) -> bool:
    """Whether `path`'s change is the recomposition's alone."""
    return path == COMPOSABLE or (
        old.get(path) != recompose.base.get(path) and recompose.base.get(path) == new.get(path)
    )


def consequences(recompose: Recomposition, sides: Sides) -> tuple[list[Consequence], list[str]]:
    """The steps in order, and per pool a note of who loses and who gains."""
    slurm = update_policy.load().component("slurm").extra
    controller = sides.new_inventory.hosts(slurm["controller_group"]) - sides.new_hosts
    involved = fold_or_dash(recompose.hosts)
    reason = f'reason="hal-provision compose: layout {recompose.layout}"'
    out = [
        Consequence(
            "drain", involved, "no new job starts there", (f"scontrol update nodename={involved} state=drain {reason}",)
        ),
        Consequence(
            "wait for jobs",
            involved,
            "bounded: compose.yml stops, cancelling nothing, if a job outlasts the wait",
            (f"squeue -w {involved} lists no job",),
        ),
    ]
    # Every pool's detaches first, then the attaches: a GPU leaves one host before another takes it.
    for action, verb in (("detach", "loses"), ("attach", "gains")):
        for pool in recompose.pools:
            moved = getattr(pool, verb)
            if moved:
                out.append(
                    Consequence(
                        action,
                        fold_or_dash(moved),
                        f"pool {pool.name} ({pool.gpu_type}), driver {pool.driver}: "
                        + ", ".join(f"{h} {verb} {n}" for h, n in moved.items()),
                        tuple(pool.command(action, h, n) for h, n in moved.items()),
                    )
                )
    # With a backup controller, the backup first, as every restart of slurmctld (the slurm role's handlers).
    order = SlurmConf.parse(sides.new.get(slurm["reconfigure_file"], "")).controllers
    out += controller_restarts(
        controller,
        order,
        f"the NodeName Gres lines and gres.conf of layout {recompose.layout}: read only at start",
        slurm["backup_ready"],
    )
    out += [
        Consequence("restart slurmd", involved, "finds the GPUs the layout gives each host (gres.conf)"),
        Consequence("health check", involved, "the GPUs of the layout are there, on the pool's socket", (HEALTH,)),
        Consequence(
            "resume", involved, "once the health check passes", (f"scontrol update nodename={involved} state=resume",)
        ),
    ]
    notes = [f"layout {recompose.old_layout} -> {recompose.layout}"]
    for pool in recompose.pools:
        loses = ", ".join(f"{h} ({n})" for h, n in pool.loses.items()) or "-"
        gains = ", ".join(f"{h} ({n})" for h, n in pool.gains.items()) or "-"
        notes.append(f"pool {pool.name}: loses {loses}; gains {gains}")
    return out, notes


def gpus_held(job: Job, host: str) -> int:
    """The GPUs a job holds on one of its hosts: per node, else its per-job count spread evenly."""
    if job.gpus_per_node:
        return job.gpus_per_node
    hosts = job.hosts()
    return -(-job.gpus_per_job // len(hosts)) if job.gpus_per_job and host in hosts else 0


def impacts(recompose: Recomposition, jobs: list[Job]) -> list[Impact]:
    """Running jobs holding GPUs on a host that loses GPUs: blocking."""
    loses = recompose.loses
    out = []
    for job in sorted(jobs, key=lambda j: j.job_id):
        if not job.active:
            continue
        for host in job.hosts():
            held = gpus_held(job, host)
            if host in loses and held:
                out.append(
                    Impact(
                        job,
                        True,
                        f"holds {held} GPU{'s' if held != 1 else ''} on {host}, which loses {loses[host]}",
                        "recomposition",
                    )
                )
                break
    return out


def advice(recompose: Recomposition, blocking: list[Impact], inventory: str, pull: bool = False) -> list[str]:
    """The command that applies it, or, with blocking jobs, what to wait for. On a pull cluster
    compose.yml reaches the pull nodes over SSH too, as their enrolment did: the pool's driver and
    the drain are the controller's, and no converge of a node's own can move GPUs."""
    command = COMPOSE.format(inventory=inventory, layout=recompose.layout)
    does = (
        f"drains {fold_or_dash(recompose.hosts)}, waits for their jobs without cancelling any, detaches, attaches, "
        "restarts, checks, resumes" + ("; it pushes to the pull nodes too, over SSH" if pull else "")
    )
    if blocking:
        out = [
            f"job {i.job.job_id} ({i.job.user}) {i.why}: wait until it ends, or ask {i.job.user} to end it"
            for i in blocking
        ]
        return out + [Line(f"then recompose: {command} ({does})", [command])]
    return [Line(f"recompose: {command} ({does})", [command])]
