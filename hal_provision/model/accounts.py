"""Accounts: research groups and users, held in the cluster's LDAP directory and mirrored into
Slurm's associations and the fakeroot sub-ID ranges.

One list of people serves every consumer: the directory (posixAccount/posixGroup entries and
SSH keys), sssd on every node, sacctmgr (accounts, users, default account, QOS, fair-share)
and /etc/subuid. No secret lives here: the directory's admin password is generated on the
LDAP host or comes from Ansible Vault; users set their own passwords.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from .base import AbsolutePath, IdRange, Name, Strict

# POSIX portable user names, as Debian's adduser accepts them by default (NAME_REGEX), at most
# 32 characters (utmp's limit).
UserName = Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_-]*$", max_length=32)]

# Debian's system ranges (base-passwd, login.defs): 0-999 for system users and groups,
# 60000-65535 for packages' own fixed IDs (slurm is 64030) and nobody/nogroup.
DEFAULT_SYSTEM_IDS = [
    IdRange(first=0, last=999, description="system accounts (Debian login.defs SYS_UID_MAX 999)"),
    IdRange(first=60000, last=65535, description="packages' fixed IDs and nobody (Debian base-passwd)"),
]


class ResearchGroup(Strict):
    name: Name = Field(description="Group name (posixGroup cn), e.g. a faculty member's research group.")
    gid: int = Field(ge=0, description="gidNumber; inside accounts.id_range.")
    description: str = Field("", description="Free text; the directory's and Slurm's description.")
    slurm_account: Name | None = Field(
        None,
        description="Slurm account of its members; None: a group that only grants access (e.g. fakeroot), "
        "with no account of its own.",
    )
    qos: list[Name] = Field(
        default_factory=list,
        description="QOS the account may use (slurm.qos names); empty: Slurm's default (normal).",
    )
    default_qos: Name | None = Field(None, description="The account's default QOS; one of `qos`.")
    fairshare: int = Field(
        1, ge=0, description="Fair-share shares of the account (sacctmgr Fairshare); 1 is sacctmgr's default."
    )

    @property
    def sets_fair_share(self) -> bool:
        """The group's Slurm account has shares other than sacctmgr's default 1: a fair-share policy
        that only priority/multifactor (with a PriorityWeightFairshare) puts into effect."""
        return bool(self.slurm_account) and self.fairshare != 1


class User(Strict):
    name: UserName = Field(description="Login name (uid).")
    uid: int = Field(ge=0, description="uidNumber; inside accounts.id_range.")
    group: Name = Field(description="Primary group (accounts.groups name): gidNumber and default Slurm account.")
    groups: list[Name] = Field(
        default_factory=list, description="Other groups (accounts.groups names): memberships and more Slurm accounts."
    )
    full_name: str = Field(min_length=1, description="Full name (cn, gecos).")
    shell: AbsolutePath = Field("/bin/bash", description="Login shell.")
    ssh_keys: list[str] = Field(
        default_factory=list, description="OpenSSH public keys (one line each), served to sshd by sssd."
    )
    admin: bool = Field(
        False, description="Member of accounts.admin_group (sudo on every node) and Slurm AdminLevel=Administrator."
    )
    state: Literal["active", "disabled"] = Field(
        "active",
        description="disabled: the entry stays (files keep their owner) but the account is expired, its keys "
        "are removed and its Slurm associations deleted.",
    )

    @property
    def active(self) -> bool:
        return self.state == "active"


class Directory(Strict):
    base_dn: str | None = Field(
        None,
        pattern=r"^[A-Za-z]+=[^,]+(,[A-Za-z]+=[^,]+)*$",
        description="Base DN of the tree; None: dc= components of cluster.domain.",
    )
    organization: str | None = Field(None, description="o= of the base entry; None: the cluster name.")
    port: int = Field(636, ge=1, le=65535, description="LDAPS port the clients use.")


class Accounts(Strict):
    directory: Directory = Field(default_factory=Directory, description="The LDAP directory itself.")
    id_range: IdRange = Field(
        default_factory=lambda: IdRange(first=100000, last=199999, description="directory accounts"),
        description="UIDs and GIDs the directory owns; sssd ignores IDs outside it.",
    )
    system_ids: list[IdRange] = Field(
        default_factory=lambda: list(DEFAULT_SYSTEM_IDS),
        description="IDs of the nodes' own system accounts; no directory account may take one.",
    )
    home_root: AbsolutePath = Field("/home", description="Home directories are HOME_ROOT/NAME (on the shared home).")
    admin_group: Name | None = Field(
        None, description="Group (accounts.groups name) whose members get sudo; admin users are added to it."
    )
    groups: list[ResearchGroup] = Field(default_factory=list, description="Research and access groups.")
    users: list[User] = Field(default_factory=list, description="People with a login.")

    def group(self, name: str) -> ResearchGroup | None:
        return next((g for g in self.groups if g.name == name), None)

    def fair_share_groups(self) -> list[tuple[int, ResearchGroup]]:
        """(index, group) for each group whose Slurm account sets a fair-share."""
        return [(i, g) for i, g in enumerate(self.groups) if g.sets_fair_share]

    def members(self, group: str) -> list[User]:
        """Users whose primary or other groups include `group` (admins too, for the admin group),
        in declaration order."""
        return [
            u for u in self.users if u.group == group or group in u.groups or (u.admin and group == self.admin_group)
        ]

    def slurm_accounts_of(self, user: User) -> list[str]:
        """The Slurm accounts a user belongs to: the primary group's first, then the others'."""
        names = [user.group, *user.groups]
        found = (self.group(n) for n in names)
        return list(dict.fromkeys(g.slurm_account for g in found if g is not None and g.slurm_account))


def base_dn(accounts: Accounts, domain: str) -> str:
    return accounts.directory.base_dn or ",".join(f"dc={part}" for part in domain.split("."))
