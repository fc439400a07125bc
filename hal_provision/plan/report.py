"""A plan for people (Rich tables) and for programs (one JSON document, keys sorted)."""

from __future__ import annotations

import re

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from .core import Plan
from .inventory import hostlist


def to_json(plan: Plan) -> dict:
    """The whole plan as plain data; `json.dumps(..., sort_keys=True)` makes it stable."""
    return {
        "old": plan.old,
        "new": plan.new,
        "changed": plan.changed,
        "exit_code": plan.exit_code,
        "components": [
            {
                "name": c.name,
                "files": [{"path": f.path, "change": f.change, **({"diff": f.diff} if f.diff is not None else {})}
                          for f in c.files],
                "consequences": [{"action": q.action, "hosts": q.hosts, "detail": q.detail, "commands": list(q.commands)}
                                 for q in c.consequences],
                "notes": c.notes,
            }
            for c in plan.components
        ],
        "jobs": None if plan.impacts is None else [
            {"job_id": i.job.job_id, "user": i.job.user, "state": i.job.state, "partition": i.job.partition,
             "nodes": i.job.nodes, "slurm_reason": i.job.reason, "blocking": i.blocking, "why": i.why}
            for i in plan.impacts
        ],
        "node_states": plan.node_states,
        "summary": plan.summary,
        "advice": plan.advice,
    }


def renderables(plan: Plan) -> list[RenderableType]:
    """What `hal-provision plan` prints: the components, the jobs, a summary, the advice."""
    out: list[RenderableType] = [Text(f"OLD: {plan.old}\nNEW: {plan.new}")]
    if plan.changed:
        out.append(_components(plan))
    out += _jobs(plan)
    out.append(Text(plan.summary, style="bold"))
    out += [Text(f"  {line}") for line in plan.advice]
    return out


def diffs(plan: Plan) -> list[str]:
    """The unified diffs of the changed files, component by component (with --diff)."""
    return [f.diff for c in plan.components for f in c.files if f.diff]


MARK = {"added": "+", "removed": "-", "modified": "~"}


def _components(plan: Plan) -> Table:
    table = Table(title="Changes by component (files: + added, - removed, ~ modified)", title_justify="left")
    table.add_column("Component", no_wrap=True)
    table.add_column("Action", max_width=20, overflow="fold")
    table.add_column("Hosts", max_width=22, overflow="fold")
    table.add_column("Files / detail", overflow="fold")
    for index, component in enumerate(plan.components):
        if index:
            table.add_section()
        for n, q in enumerate(component.consequences):
            detail = "\n".join(filter(None, [q.detail, *q.commands]))
            table.add_row(component.name if n == 0 else "", q.action, _wrappable(q.hosts), detail)
        for f in component.files:  # the change's mark in the Action column keeps long paths whole
            table.add_row("", Text(MARK[f.change], style="dim"), "", Text(_node_path(f.path), style="dim"))
        for note in component.notes:
            table.add_row("", "", "", Text(note, style="italic"))
    return table


def _wrappable(hosts: str) -> str:
    """A hostlist with a space after each top-level comma, so a table cell wraps between hosts."""
    return re.sub(r",(?![^\[]*\])", ", ", hosts)


def _node_path(path: str) -> str:
    """files/etc/hosts -> /etc/hosts (where the node has it); inventory files as they are."""
    return path.removeprefix("files") if path.startswith("files/") else path


def _jobs(plan: Plan) -> list[RenderableType]:
    if plan.impacts is None:
        return []
    if not plan.impacts and not plan.node_states:
        return [Text("Jobs: none affected.")]
    out: list[RenderableType] = []
    if plan.impacts:
        table = Table(title="Job impact", title_justify="left")
        for column in ("", "Job", "User", "State", "Partition", "Nodes", "Why"):
            table.add_column(column, overflow="fold")
        for i in plan.impacts:
            j = i.job
            table.add_row(Text("BLOCKS", style="bold red") if i.blocking else Text("note", style="dim"),
                          str(j.job_id), j.user, f"{j.state} ({j.reason})" if j.reason and j.reason != "None" else j.state,
                          j.partition, hostlist(j.hosts()), i.why)
        out.append(table)
    if plan.node_states:
        out.append(Group(Text("Node states (sinfo):"), *(Text(f"  {s}") for s in plan.node_states)))
    return out
