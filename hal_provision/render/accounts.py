"""The directory and its clients: LDAP entries, their LDIF, and sssd.conf.

- ``files/etc/hal-provision/ldap-directory.json``: the tree the ldap_server role makes the
  directory equal to (entries under ou=People and ou=Groups; attributes as lists of strings).
  It is not copied to the nodes.
- ``files/etc/ldap/hal-directory.ldif``: the same tree with its base entry as LDIF content
  (RFC 2849, written by ldap3), for `slapadd -u` and for people; not copied either.
- ``files/etc/sssd/sssd.conf``: every node's sssd, LDAPS to the directory host, trusting the
  cluster CA the ldap_server role generates at deploy time.

No password or key is rendered: the admin password and the TLS keys exist only on the nodes.
"""

from __future__ import annotations

import json
import unicodedata

from ldap3.protocol.rfc2849 import operation_to_ldif
from ldap3.utils.dn import escape_rdn

from ..hostlist import nodeset
from ..model import Cluster
from ..model.accounts import Accounts, User, base_dn
from .common import header, json_comment

DIRECTORY = "files/etc/hal-provision/ldap-directory.json"
LDIF = "files/etc/ldap/hal-directory.ldif"
SSSD = "files/etc/sssd/sssd.conf"
CA_CERT = "/etc/ssl/hal-provision/cluster-ca.crt"
NOLOGIN = "/usr/sbin/nologin"
# Attributes the directory holds but the model does not: the role never touches them.
IGNORED = ["pwdChangedTime", "shadowLastChange", "userPassword"]


def render(cluster: Cluster) -> dict[str, str]:
    a = cluster.accounts
    if a is None or cluster.services.ldap is None:
        return {}
    return {DIRECTORY: directory_json(cluster, a), LDIF: ldif(cluster, a), SSSD: sssd_conf(cluster, a)}


def server_fqdn(cluster: Cluster) -> str:
    return f"{nodeset(cluster.services.ldap)[0]}.{cluster.cluster.domain}"


def tree(cluster: Cluster, a: Accounts) -> dict[str, str]:
    base = base_dn(a, cluster.cluster.domain)
    return {"base": base, "people": f"ou=People,{base}", "groups": f"ou=Groups,{base}"}


def entries(cluster: Cluster, a: Accounts) -> list[tuple[str, dict[str, list[str]]]]:
    """(dn, attributes) of every entry below the base, parents first, in the model's order."""
    dns = tree(cluster, a)
    out: list[tuple[str, dict[str, list[str]]]] = [
        (dns["people"], {"objectClass": ["organizationalUnit"], "ou": ["People"]}),
        (dns["groups"], {"objectClass": ["organizationalUnit"], "ou": ["Groups"]}),
    ]
    for group in a.groups:
        attrs = {"objectClass": ["posixGroup"], "cn": [group.name], "gidNumber": [str(group.gid)]}
        if group.description:
            attrs["description"] = [group.description]
        members = sorted({u.name for u in a.members(group.name)})
        if members:
            attrs["memberUid"] = members
        out.append((f"cn={escape_rdn(group.name)},{dns['groups']}", dict(sorted(attrs.items()))))
    for user in a.users:
        out.append((f"uid={escape_rdn(user.name)},{dns['people']}", dict(sorted(user_attributes(a, user).items()))))
    return out


def user_attributes(a: Accounts, user: User) -> dict[str, list[str]]:
    group = a.group(user.group)
    keys = user.ssh_keys if user.active else []
    classes = ["inetOrgPerson", "posixAccount", "shadowAccount"] + (["ldapPublicKey"] if keys else [])
    attrs = {
        "objectClass": sorted(classes),
        "uid": [user.name],
        "cn": [user.full_name],
        "sn": [user.full_name.split()[-1]],
        "gecos": [_ascii(user.full_name)],
        "uidNumber": [str(user.uid)],
        "gidNumber": [str(group.gid if group is not None else 0)],
        "homeDirectory": [f"{a.home_root.rstrip('/')}/{user.name}"],
        "loginShell": [user.shell if user.active else NOLOGIN],
    }
    if keys:
        attrs["sshPublicKey"] = [" ".join(k.split()) for k in keys]
    if not user.active:
        attrs["shadowExpire"] = ["1"]  # expired on 1970-01-02: sssd's shadow expire policy denies access
    return attrs


def _ascii(text: str) -> str:
    """gecos is an IA5 (ASCII) string: 'Zoë Müller' -> 'Zoe Muller'."""
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return folded or "-"


def directory_json(cluster: Cluster, a: Accounts) -> str:
    dns = tree(cluster, a)
    body = {
        "_comment": json_comment(cluster),
        "base_dn": dns["base"],
        "organization": a.directory.organization or cluster.cluster.name,
        "admin_dn": f"cn=admin,{dns['base']}",
        "people_dn": dns["people"],
        "groups_dn": dns["groups"],
        "ignored_attributes": IGNORED,
        "entries": [{"dn": dn, "attributes": attrs} for dn, attrs in entries(cluster, a)],
    }
    return json.dumps(body, indent=2, sort_keys=True) + "\n"


def ldif(cluster: Cluster, a: Accounts) -> str:
    dns = tree(cluster, a)
    first_rdn = dns["base"].split(",")[0]
    kind, _, value = first_rdn.partition("=")
    base_attrs = {
        "objectClass": ["dcObject", "organization"] if kind.lower() == "dc" else ["organization"],
        "o": [a.directory.organization or cluster.cluster.name],
    }
    if kind.lower() == "dc":
        base_attrs["dc"] = [value]
    records = [(dns["base"], base_attrs), *entries(cluster, a)]
    lines = operation_to_ldif(
        "searchResponse",
        [
            {
                "type": "searchResEntry",
                "dn": dn,
                "raw_attributes": {k: [v.encode() for v in vs] for k, vs in attrs.items()},
            }
            for dn, attrs in records
        ],
    )
    body = "\n".join(line for line in lines if not line.startswith("# total number"))
    # No "version: 1" line: after the header comments slapadd would read it as an entry.
    return header(cluster) + "\n" + body.rstrip("\n") + "\n"


def sssd_conf(cluster: Cluster, a: Accounts) -> str:
    dns = tree(cluster, a)
    port = "" if a.directory.port == 636 else f":{a.directory.port}"
    domain = cluster.cluster.name
    return (
        header(cluster) + "# sssd reads only root-owned files of mode 0600.\n"
        "[sssd]\n"
        "services = nss, pam, ssh\n"
        f"domains = {domain}\n"
        "\n[nss]\n"
        "filter_users = root\n"
        "filter_groups = root\n"
        "\n[pam]\n"
        "\n[ssh]\n"
        f"\n[domain/{domain}]\n"
        "id_provider = ldap\n"
        "auth_provider = ldap\n"
        "chpass_provider = ldap\n"
        "# Disabled accounts carry shadowExpire in the past: the expire policy denies them.\n"
        "access_provider = ldap\n"
        "ldap_access_order = expire\n"
        "ldap_account_expire_policy = shadow\n"
        "ldap_schema = rfc2307\n"
        f"ldap_uri = ldaps://{server_fqdn(cluster)}{port}\n"
        f"ldap_search_base = {dns['base']}\n"
        f"ldap_user_search_base = {dns['people']}\n"
        f"ldap_group_search_base = {dns['groups']}\n"
        "ldap_tls_reqcert = demand\n"
        f"ldap_tls_cacert = {CA_CERT}\n"
        "ldap_user_ssh_public_key = sshPublicKey\n"
        "enumerate = false\n"
        "cache_credentials = false\n"
        f"min_id = {a.id_range.first}\n"
        f"max_id = {a.id_range.last}\n"
    )
