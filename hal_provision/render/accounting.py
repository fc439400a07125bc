"""Accounting objects that live in slurmdbd, not in a file: the model's QOS, and the accounts,
users and associations of its research groups (accounts section).

``files/etc/hal-provision/slurm-accounting.json`` is the plan the slurm role applies with
sacctmgr on the first slurmdbd host (and tests/infra checks): per QOS the arguments that add
or modify it, and the exact line ``sacctmgr --noheader --parsable2 list qos format=...``
prints once it is in place, so the role changes a QOS only when that line differs. Accounts and users work
the same way: each carries the listing lines that prove it is in place, and the role deletes
the user associations of the accounts it manages (``managed_accounts``) that the model no
longer has (a removed or disabled user). It is not copied to the nodes.
"""

from __future__ import annotations

import json

from ..model import Cluster
from ..model.accounts import Accounts, ResearchGroup, User
from ..model.slurm import Qos, slurm_clock
from .common import json_comment

PLAN = "files/etc/hal-provision/slurm-accounting.json"
# The columns of the listing the role compares, in this order.
LIST_FORMAT = "Name,Priority,MaxWall,MaxTRESPU,MaxJobsPU,Description"
ACCOUNT_FORMAT = "Account,Description,Organization"
ASSOCIATION_FORMAT = "Account,User,Fairshare,QOS,DefaultQOS"
USER_FORMAT = "User,DefaultAccount,AdminLevel"


def render(cluster: Cluster) -> dict[str, str]:
    body = {
        "_comment": json_comment(cluster),
        "list_format": LIST_FORMAT,
        "qos": [qos_plan(q) for q in cluster.slurm.qos],
        "formats": {"account": ACCOUNT_FORMAT, "association": ASSOCIATION_FORMAT, "user": USER_FORMAT},
        **association_plan(cluster.accounts, cluster.cluster.name),
    }
    return {PLAN: json.dumps(body, indent=2, sort_keys=True) + "\n"}


def qos_plan(q: Qos) -> dict:
    """Arguments for `sacctmgr add qos NAME ...` and `... modify qos where name=NAME set ...`,
    and the listing line that proves it is in place. -1 clears a limit the model leaves out."""
    wall = slurm_clock(q.max_wall)
    gpus = "" if q.max_gpus_per_user is None else f"gres/gpu={q.max_gpus_per_user}"
    jobs = "" if q.max_jobs_per_user is None else str(q.max_jobs_per_user)
    # sacctmgr stores QOS names and descriptions in lower case (a converge comparing the
    # model's "Short test jobs" with the listed "short test jobs" would modify it every time).
    name = q.name.lower()
    description = (q.description or q.name).lower()
    values = {
        "Priority": str(q.priority),
        "MaxWall": wall,
        "MaxTRESPerUser": gpus,
        "MaxJobsPerUser": jobs,
        "Description": description,
    }
    cleared = {"MaxWall": "-1", "MaxTRESPerUser": "gres/gpu=-1", "MaxJobsPerUser": "-1"}
    return {
        "name": name,
        "add": [f"{k}={v}" for k, v in values.items() if v != ""],
        "modify": [f"{k}={v if v != '' else cleared[k]}" for k, v in values.items()],
        "listed": "|".join([name, str(q.priority), wall, gpus, jobs, description]),
    }


def association_plan(accounts: Accounts | None, cluster: str) -> dict:
    """The model's Slurm accounts (one per group with a slurm_account) and its active users."""
    if accounts is None:
        return {"accounts": [], "users": [], "managed_accounts": []}
    groups = [g for g in accounts.groups if g.slurm_account]
    users = [u for u in accounts.users if u.active and accounts.slurm_accounts_of(u)]
    return {
        "accounts": [account_plan(g, cluster) for g in groups],
        "users": [user_plan(accounts, u) for u in users],
        "managed_accounts": [g.slurm_account.lower() for g in groups],
    }


def account_plan(g: ResearchGroup, cluster: str) -> dict:
    # sacctmgr stores account names, descriptions and organisations in lower case, and lists
    # an association's QOS by name in alphabetical order.
    name = g.slurm_account.lower()
    description = (g.description or g.name).lower()
    organization = g.name.lower()
    qos = ",".join(sorted(q.lower() for q in g.qos))
    default_qos = (g.default_qos or "").lower()
    values = {"Description": description, "Organization": organization, "Fairshare": str(g.fairshare)}
    limits = {"QOS": qos, "DefaultQOS": default_qos}
    return {
        "name": name,
        "add": [f"Cluster={cluster}"] + [f"{k}={v}" for k, v in {**values, **limits}.items() if v != ""],
        "modify": [f"{k}={v}" for k, v in values.items()]
        + [f"{k}={v if v != '' else ('normal' if k == 'QOS' else '-1')}" for k, v in limits.items()],
        "listed": "|".join([name, description, organization]),
        "association": "|".join([name, "", str(g.fairshare), qos or "normal", default_qos]),
    }


def user_plan(accounts: Accounts, u: User) -> dict:
    names = [a.lower() for a in accounts.slurm_accounts_of(u)]
    level = "Administrator" if u.admin else "None"
    return {
        "name": u.name,
        "accounts": names,
        "default_account": names[0],
        "admin_level": level,
        "listed": "|".join([u.name, names[0], level]),
        "associations": [f"{a}|{u.name}" for a in names],
    }
