"""The sacctmgr commands the slurm role will run for a changed accounting plan.

roles/slurm/tasks/accounting.yml compares the rendered plan (slurm-accounting.json) with what
`sacctmgr list` prints. On a cluster that runs OLD, that listing is OLD's plan: each object
carries the exact listing line that proves it is in place (`listed`, `association`), so
comparing the two plans' lines decides each task's `when:` as the converge will.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

from ..model.slurmtime import limit_minutes


def _plan(text: str | None) -> dict:
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return {}


@dataclass
class AccountingChanges:
    commands: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    reconfigure: bool = False  # a QOS was added: the role runs `scontrol reconfigure` after it

    def lines(self) -> list[str]:
        return [shlex.join(argv) for argv in self.commands]


def sacctmgr_changes(old_text: str | None, new_text: str | None, cluster: str) -> AccountingChanges:
    """The commands in the role's order: its tasks each loop over the whole plan in turn."""
    old, new = _plan(old_text), _plan(new_text)
    out = AccountingChanges()
    run = lambda *argv: out.commands.append(["sacctmgr", "--immediate", *argv])  # noqa: E731

    old_qos = {q["name"]: q for q in old.get("qos", [])}
    new_qos = new.get("qos", [])
    for q in new_qos:
        if q["name"] not in old_qos:
            run("add", "qos", q["name"], *q["add"])
            out.reconfigure = True
    for q in new_qos:
        if q["name"] in old_qos and q["listed"] != old_qos[q["name"]]["listed"]:
            run("modify", "qos", "where", f"name={q['name']}", "set", *q["modify"])
    gone = sorted(old_qos.keys() - {q["name"] for q in new_qos})
    if gone:
        out.notes.append(f"QOS {', '.join(gone)} left the model: kept in Slurm (the role deletes no QOS)")

    old_accounts = {a["name"]: a for a in old.get("accounts", [])}
    new_accounts = new.get("accounts", [])
    for a in new_accounts:
        if a["name"] not in old_accounts:
            run("add", "account", a["name"], *a["add"])
    for a in new_accounts:
        before = old_accounts.get(a["name"])
        if before is not None and (a["listed"] != before["listed"] or a["association"] != before["association"]):
            run("modify", "account", "where", f"name={a['name']}", f"cluster={cluster}", "set", *a["modify"])

    old_users = {u["name"]: u for u in old.get("users", [])}
    new_users = new.get("users", [])
    present = {assoc for u in old.get("users", []) for assoc in u.get("associations", [])}
    for u in new_users:
        missing = [assoc.split("|")[0] for assoc in u.get("associations", []) if assoc not in present]
        if missing:
            run(
                "add",
                "user",
                u["name"],
                f"Account={','.join(missing)}",
                f"DefaultAccount={u['default_account']}",
                f"AdminLevel={u['admin_level']}",
                f"Cluster={cluster}",
            )
    for u in new_users:
        if u["name"] in old_users and u["listed"] != old_users[u["name"]]["listed"]:
            run(
                "modify",
                "user",
                "where",
                f"name={u['name']}",
                "set",
                f"DefaultAccount={u['default_account']}",
                f"AdminLevel={u['admin_level']}",
            )

    managed = set(new.get("managed_accounts", []))
    wanted = {assoc for u in new_users for assoc in u.get("associations", [])}
    for assoc in sorted(present - wanted):
        account, user = assoc.split("|", 1)
        if account in managed:
            run("delete", "user", "where", f"name={user}", f"account={account}", f"cluster={cluster}")
    return out


@dataclass(frozen=True)
class QosLimits:
    max_wall: float | None  # minutes
    max_gpus_per_user: int | None


def qos_limits(text: str | None) -> dict[str, QosLimits]:
    """QOS name -> the limits its `add` arguments set (what a job's time and GPUs meet)."""
    out = {}
    for q in _plan(text).get("qos", []):
        args = dict(a.split("=", 1) for a in q.get("add", []) if "=" in a)
        gpus = re.search(r"gres/gpu=(-?\d+)", args.get("MaxTRESPerUser", ""))
        out[q["name"]] = QosLimits(
            max_wall=limit_minutes(args.get("MaxWall")),
            max_gpus_per_user=int(gpus[1]) if gpus and int(gpus[1]) >= 0 else None,
        )
    return out
