"""Checks: research groups and users (names, IDs, groups, Slurm accounts, SSH keys)."""

from __future__ import annotations

from cryptography.hazmat.primitives.serialization import load_ssh_public_key

from ..findings import error, warning
from ..model import Cluster
from ..model.software import fakeroot_ranges
from . import check
from .common import did_you_mean, duplicates, unique

ACCOUNTS = ("accounts",)
USERS = ("accounts", "users")
GROUPS = ("accounts", "groups")


@check
def accounts_have_a_directory_host(c: Cluster):
    if c.accounts is not None and c.services.ldap is None:
        yield error(
            ("services",),
            "accounts are configured but services.ldap names no host for the directory; "
            "set services.ldap (a management node)",
        )


@check
def account_names_and_ids_unique(c: Cluster):
    a = c.accounts
    if a is None:
        return
    yield from unique(a.users, USERS, "user name")
    yield from unique(a.users, USERS, "uid", key="uid", why="two names would own the same files")
    yield from unique(a.groups, GROUPS, "group name")
    yield from unique(a.groups, GROUPS, "gid", key="gid", why="two groups would own the same files")
    indices = [i for i, g in enumerate(a.groups) if g.slurm_account]
    for k, first in duplicates([a.groups[i].slurm_account for i in indices]):
        i = indices[k]
        yield error(
            (*GROUPS, i, "slurm_account"),
            f"Slurm account {a.groups[i].slurm_account!r} is already used by accounts.groups[{indices[first]}]; "
            "one group per account, so its QOS and fair-share have one source",
        )


@check
def account_groups_known(c: Cluster):
    a = c.accounts
    if a is None:
        return
    known = [g.name for g in a.groups]
    if a.admin_group is not None and a.admin_group not in known:
        yield error(
            (*ACCOUNTS, "admin_group"),
            f"admin group {a.admin_group!r} is not in accounts.groups" + did_you_mean(a.admin_group, known),
        )
    for i, user in enumerate(a.users):
        if user.group not in known:
            yield error(
                (*USERS, i, "group"),
                f"{user.name}'s primary group {user.group!r} is not in accounts.groups"
                + did_you_mean(user.group, known),
            )
        for k, name in enumerate(user.groups):
            if name not in known:
                yield error(
                    (*USERS, i, "groups", k),
                    f"{user.name} is in group {name!r}, which is not in accounts.groups" + did_you_mean(name, known),
                )
    if a.admin_group is None:
        for i, user in enumerate(a.users):
            if user.admin:
                yield error(
                    (*USERS, i, "admin"),
                    f"{user.name} is an admin, but accounts.admin_group names no "
                    "group to give admins sudo: set accounts.admin_group",
                )


def _ids(c: Cluster):
    """(path, what, id) for every uid and gid of the directory."""
    a = c.accounts
    for i, user in enumerate(a.users):
        yield (*USERS, i, "uid"), f"{user.name}'s uid", user.uid
    for i, group in enumerate(a.groups):
        yield (*GROUPS, i, "gid"), f"group {group.name}'s gid", group.gid


@check
def account_ids_in_their_range(c: Cluster):
    """Every ID inside the directory's range, outside the system ranges and every fakeroot
    sub-ID range (a subordinate ID that is also a real user's would give a container's root the
    files of that user)."""
    a = c.accounts
    if a is None:
        return
    r = a.id_range
    if r.first > r.last:
        yield error((*ACCOUNTS, "id_range"), f"ID range {r.first}-{r.last} ends before it starts")
    subids = fakeroot_ranges(c.containers.fakeroot, a) if c.containers is not None else []
    for path, what, value in _ids(c):
        if value not in r:
            yield error(path, f"{what} {value} is outside accounts.id_range {r.first}-{r.last}: sssd ignores it")
        for s in a.system_ids:
            if value in s:
                label = f" ({s.description})" if s.description else ""
                yield error(path, f"{what} {value} is in the system range {s.first}-{s.last}{label}")
        for s in subids:
            if s.first <= value <= s.last:
                yield error(
                    path,
                    f"{what} {value} is inside {s.user}'s fakeroot sub-ID range {s.first}-{s.last}: "
                    "that user's containers would own this account's files",
                )


@check
def account_qos_known(c: Cluster):
    a = c.accounts
    if a is None:
        return
    known = [q.name for q in c.slurm.qos]
    for i, group in enumerate(a.groups):
        path = (*GROUPS, i)
        if not group.slurm_account and (group.qos or group.default_qos):
            yield warning(path, f"group {group.name} sets QOS but has no slurm_account: they apply to nobody")
        for k, name in enumerate(group.qos):
            if name not in known:
                yield error(
                    (*path, "qos", k),
                    f"account {group.slurm_account or group.name!r} allows QOS {name!r}, "
                    "which is not in slurm.qos" + did_you_mean(name, known),
                )
        if group.default_qos is not None:
            if group.default_qos not in known:
                yield error(
                    (*path, "default_qos"),
                    f"default QOS {group.default_qos!r} is not in slurm.qos" + did_you_mean(group.default_qos, known),
                )
            elif group.qos and group.default_qos not in group.qos:
                yield error(
                    (*path, "default_qos"),
                    f"default QOS {group.default_qos!r} is not among the QOS the "
                    f"account may use ({', '.join(group.qos)}): sacctmgr refuses it",
                )


def _has_limits(c: Cluster, group) -> bool:
    qos = {q.name: q for q in c.slurm.qos}
    limited = any(
        q.max_wall or q.max_gpus_per_user is not None or q.max_jobs_per_user is not None
        for name in group.qos
        if (q := qos.get(name)) is not None
    )
    return limited or group.sets_fair_share


@check
def account_kept_for_disabled_users_only(c: Cluster):
    """A Slurm account with limits whose only members are disabled users: the account and its
    limits stay in slurmdbd for nobody."""
    a = c.accounts
    if a is None:
        return
    for i, group in enumerate(a.groups):
        if not group.slurm_account or not _has_limits(c, group):
            continue
        members = [u for u in a.users if group.slurm_account in a.slurm_accounts_of(u)]
        if members and not any(u.active for u in members):
            names = ", ".join(u.name for u in members)
            yield warning(
                (*GROUPS, i, "slurm_account"),
                f"account {group.slurm_account!r} keeps its QOS and fair-share for disabled users only "
                f"({names}); remove the account or give it an active member",
            )


@check
def account_users_can_submit(c: Cluster):
    a = c.accounts
    if a is None or "associations" not in c.slurm.accounting_enforce:
        return
    for i, user in enumerate(a.users):
        if user.active and not a.slurm_accounts_of(user) and a.group(user.group) is not None:
            yield warning(
                (*USERS, i),
                f"{user.name} is in no group with a slurm_account: with "
                "AccountingStorageEnforce=associations they cannot run jobs",
            )


@check
def account_ssh_keys_parse(c: Cluster):
    a = c.accounts
    if a is None:
        return
    for i, user in enumerate(a.users):
        for k, key in enumerate(user.ssh_keys):
            reason = _ssh_key_problem(key)
            if reason:
                yield error((*USERS, i, "ssh_keys", k), f"{user.name}'s SSH key does not parse: {reason}")


def _ssh_key_problem(line: str) -> str:
    """Why an OpenSSH public key line is unusable, or '' when it loads."""
    fields = line.split()
    if len(fields) < 2:
        return "expected 'TYPE BASE64 [COMMENT]' on one line"
    if "\n" in line.strip():
        return "one key per entry, on one line"
    try:
        load_ssh_public_key(" ".join(fields[:2]).encode())
    except (ValueError, TypeError) as exc:
        return str(exc) or type(exc).__name__
    except Exception as exc:  # cryptography raises UnsupportedAlgorithm for unknown key types
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return ""
