"""Accounts: the checks (one row per mistake, as an edit of the embedded HAL description), the
rendered directory (entries, LDIF), sssd.conf, the Slurm association plan and the slurm.conf
enforcement line."""

from __future__ import annotations

import json

import pytest
from ldap3.utils.dn import parse_dn

from hal_provision.checks import run_all
from hal_provision.findings import Level
from hal_provision.loader import load_text
from hal_provision.render import accounting, accounts as acc, render_all

E, W = Level.error, Level.warning

JDOE = "    - name: jdoe\n      uid: 100200\n"
RSMITH = "    - name: rsmith\n      uid: 100201\n"
JDOE_KEY = "AAAAC3NzaC1lZDI1NTE5AAAAIC1/lEEeG7boewKlv2J9HtN2o3MT+FjF2nn6rU3d7DZY"
ASTRO = "      slurm_account: astro\n      qos: [normal, debug]\n      default_qos: normal\n"
BIOML = "      slurm_account: bioml\n      qos: [normal]\n      fairshare: 10\n"
PFORMER_GROUPS = "      group: bio-ml\n      groups: [hal-containers]\n      full_name: Pat Former\n"

ROWS = [
    (
        "duplicate-user-name",
        [(RSMITH, "    - name: jdoe\n      uid: 100201\n")],
        E,
        "accounts.users[1].name",
        "user name 'jdoe' is already used by accounts.users[0]",
    ),
    (
        "duplicate-uid",
        [(RSMITH, "    - name: rsmith\n      uid: 100200\n")],
        E,
        "accounts.users[1].uid",
        "uid 100200 is already used by accounts.users[0]",
    ),
    (
        "duplicate-group-name",
        [("{name: hal-containers, gid: 100002", "{name: hal-admins, gid: 100002")],
        E,
        "accounts.groups[1].name",
        "group name 'hal-admins' is already used by accounts.groups[0]",
    ),
    (
        "duplicate-gid",
        [("{name: hal-containers, gid: 100002", "{name: hal-containers, gid: 100001")],
        E,
        "accounts.groups[1].gid",
        "gid 100001 is already used by accounts.groups[0]",
    ),
    (
        "duplicate-slurm-account",
        [(BIOML, BIOML.replace("bioml", "astro"))],
        E,
        "accounts.groups[3].slurm_account",
        "Slurm account 'astro' is already used by accounts.groups[2]",
    ),
    (
        "unknown-primary-group",
        [("      group: bio-ml\n      full_name: Raj", "      group: bio-m\n      full_name: Raj")],
        E,
        "accounts.users[1].group",
        "primary group 'bio-m' is not in accounts.groups; did you mean 'bio-ml'?",
    ),
    (
        "unknown-other-group",
        [
            (
                "      groups: [hal-containers]\n      full_name: Jane",
                "      groups: [containers]\n      full_name: Jane",
            )
        ],
        E,
        "accounts.users[0].groups[0]",
        "in group 'containers', which is not in accounts.groups",
    ),
    (
        "unknown-admin-group",
        [("  admin_group: hal-admins\n", "  admin_group: admins\n")],
        E,
        "accounts.admin_group",
        "admin group 'admins' is not in accounts.groups",
    ),
    (
        "admin-without-admin-group",
        [("  admin_group: hal-admins\n", "")],
        E,
        "accounts.users[2].admin",
        "halops is an admin, but accounts.admin_group names no group",
    ),
    (
        "uid-in-system-range",
        [(JDOE, "    - name: jdoe\n      uid: 64030\n")],
        E,
        "accounts.users[0].uid",
        "jdoe's uid 64030 is in the system range 60000-65535",
    ),
    (
        "uid-outside-directory-range",
        [(JDOE, "    - name: jdoe\n      uid: 200200\n")],
        E,
        "accounts.users[0].uid",
        "jdoe's uid 200200 is outside accounts.id_range 100000-199999",
    ),
    (
        "uid-in-fakeroot-range",
        [
            (JDOE, "    - name: jdoe\n      uid: 1000042\n"),
            (
                "{first: 100000, last: 199999, description: directory accounts}",
                "{first: 100000, last: 1999999, description: directory accounts}",
            ),
        ],
        E,
        "accounts.users[0].uid",
        "jdoe's uid 1000042 is inside haltest's fakeroot sub-ID range 1000000-1065535",
    ),
    (
        "gid-in-system-range",
        [("{name: hal-admins, gid: 100001", "{name: hal-admins, gid: 27")],
        E,
        "accounts.groups[0].gid",
        "group hal-admins's gid 27 is in the system range 0-999",
    ),
    (
        "unknown-qos",
        [(ASTRO, ASTRO.replace("[normal, debug]", "[normal, debgu]"))],
        E,
        "accounts.groups[2].qos[1]",
        "allows QOS 'debgu', which is not in slurm.qos; did you mean 'debug'?",
    ),
    (
        "unknown-default-qos",
        [(ASTRO, ASTRO.replace("default_qos: normal", "default_qos: high"))],
        E,
        "accounts.groups[2].default_qos",
        "default QOS 'high' is not in slurm.qos",
    ),
    (
        "default-qos-not-allowed",
        [(BIOML, BIOML + "      default_qos: debug\n")],
        E,
        "accounts.groups[3].default_qos",
        "default QOS 'debug' is not among the QOS the account may use (normal)",
    ),
    (
        "qos-without-account",
        [
            (
                "{name: hal-admins, gid: 100001, description: HAL system administrators}",
                "{name: hal-admins, gid: 100001, qos: [debug]}",
            )
        ],
        W,
        "accounts.groups[0]",
        "group hal-admins sets QOS but has no slurm_account",
    ),
    (
        "only-disabled-members",
        [
            (
                "      group: bio-ml\n      full_name: Raj",
                "      group: bio-ml\n      state: disabled\n      full_name: Raj",
            ),
            ("      groups: [bio-ml]\n      full_name: HAL", "      full_name: HAL"),
        ],
        W,
        "accounts.groups[3].slurm_account",
        "account 'bioml' keeps its QOS and fair-share for disabled users only",
    ),
    (
        "user-without-account",
        [("      group: bio-ml\n      full_name: Raj", "      group: hal-containers\n      full_name: Raj")],
        W,
        "accounts.users[1]",
        "rsmith is in no group with a slurm_account",
    ),
    (
        "ssh-key-truncated",
        [(JDOE_KEY, JDOE_KEY[:-12])],
        E,
        "accounts.users[0].ssh_keys[0]",
        "jdoe's SSH key does not parse",
    ),
    (
        "ssh-key-without-type",
        [(f"ssh-ed25519 {JDOE_KEY} jdoe@example", JDOE_KEY)],
        E,
        "accounts.users[0].ssh_keys[0]",
        "expected 'TYPE BASE64 [COMMENT]'",
    ),
    (
        "accounts-without-directory-host",
        [("  ldap: hal-mgmt1\n", "")],
        E,
        "services",
        "accounts are configured but services.ldap names no host",
    ),
]


@pytest.mark.parametrize(("mutation", "level", "path", "message"), [pytest.param(*r[1:], id=r[0]) for r in ROWS])
def test_mistake_is_found(finds, mutation, level, path, message):
    finds(mutation, level, path, message)


ACCEPTED = [
    ("no-accounts", [lambda t: t[: t.index("\naccounts:")] + t[t.index("\nportal:") :]]),
    ("re-enabled-user", [("      state: disabled\n", "")]),
    (
        "own-base-dn",
        [
            (
                "  admin_group: hal-admins\n",
                '  admin_group: hal-admins\n  directory: {base_dn: "ou=hal,o=ncsa", organization: NCSA}\n',
            )
        ],
    ),
    (
        "rsa-key",
        [
            (
                f"ssh-ed25519 {JDOE_KEY}",
                "ssh-rsa "
                "AAAAB3NzaC1yc2EAAAADAQABAAAAgQCzSjhP/d4LTbQbw+iKDujd4ehU2khgBUmJBimf4qsMIlEILiAbP1mjhKKcqH"
                "eci6zm7lWI04XDV/wtPDyIjIMCs/5h2FwZ8ZoNXb16Gbn8ZLQO2nkT4hH+dA6JPozIQorz3AYo9XmZeZ/QJqpjZUQT"
                "SxmGJTiEiorCci+tH0WmZw==",
            )
        ],
    ),
]


@pytest.mark.parametrize("mutation", [pytest.param(m, id=name) for name, m in ACCEPTED])
def test_valid_variation_is_accepted(edited, mutation):
    loaded = load_text(edited(*mutation), "c.yml")
    assert loaded.model is not None, loaded.findings
    ours = [f.format() for f in run_all(loaded.model) if f.path[:1] == ("accounts",) or f.check.startswith("account")]
    assert ours == []


def test_embedded_hal_accounts_are_clean(hal):
    assert [f.format() for f in run_all(hal) if f.path[:1] == ("accounts",)] == []


@pytest.fixture(scope="module")
def directory(files):
    return json.loads(files[acc.DIRECTORY])


def _entry(directory, dn):
    return next(e["attributes"] for e in directory["entries"] if e["dn"] == dn)


def test_tree_is_rooted_at_the_cluster_domain(directory):
    assert directory["base_dn"] == "dc=ncsa,dc=illinois,dc=edu"
    assert directory["people_dn"] == "ou=People,dc=ncsa,dc=illinois,dc=edu"
    assert [e["dn"] for e in directory["entries"]][:2] == [directory["people_dn"], directory["groups_dn"]]
    assert all(parse_dn(e["dn"]) for e in directory["entries"])
    assert "userPassword" in directory["ignored_attributes"]


def test_user_entry_is_a_posix_account_with_its_key(directory):
    jdoe = _entry(directory, "uid=jdoe,ou=People,dc=ncsa,dc=illinois,dc=edu")
    assert jdoe["objectClass"] == ["inetOrgPerson", "ldapPublicKey", "posixAccount", "shadowAccount"]
    assert (jdoe["uidNumber"], jdoe["gidNumber"], jdoe["homeDirectory"], jdoe["loginShell"]) == (
        ["100200"],
        ["100100"],
        ["/home/jdoe"],
        ["/bin/bash"],
    )
    assert jdoe["sshPublicKey"] == [f"ssh-ed25519 {JDOE_KEY} jdoe@example"]
    assert "shadowExpire" not in jdoe and "userPassword" not in jdoe


def test_disabled_user_is_expired_without_keys(directory):
    pformer = _entry(directory, "uid=pformer,ou=People,dc=ncsa,dc=illinois,dc=edu")
    assert pformer["shadowExpire"] == ["1"]
    assert pformer["loginShell"] == ["/usr/sbin/nologin"]
    assert "sshPublicKey" not in pformer and "ldapPublicKey" not in pformer["objectClass"]


def test_groups_list_primary_other_and_admin_members(directory):
    groups = {e["attributes"]["cn"][0]: e["attributes"] for e in directory["entries"] if "cn=" in e["dn"][:3]}
    assert groups["astro-dl"]["memberUid"] == ["halops", "jdoe"]
    assert groups["bio-ml"]["memberUid"] == ["halops", "pformer", "rsmith"]
    assert groups["hal-admins"]["memberUid"] == ["halops"]
    assert groups["hal-containers"]["gidNumber"] == ["100002"]


def test_names_are_escaped_and_gecos_is_ascii(edited):
    text = edited(
        ("      full_name: Jane Doe\n", "      full_name: Zoë Müller-Łukasz\n"),
        ("      description: Gravitational-wave deep learning\n", '      description: "Waves, deep"\n'),
    )
    files = acc.render(load_text(text, "c.yml").model)
    jdoe = _entry(json.loads(files[acc.DIRECTORY]), "uid=jdoe,ou=People,dc=ncsa,dc=illinois,dc=edu")
    assert jdoe["cn"] == ["Zoë Müller-Łukasz"] and jdoe["gecos"] == ["Zoe Muller-ukasz"]
    assert jdoe["sn"] == ["Müller-Łukasz"]
    assert "cn:: " in files[acc.LDIF]  # non-ASCII values are base64 in LDIF


def test_ldif_holds_the_base_entry_and_every_entry(files, directory):
    text = files[acc.LDIF]
    assert text.startswith("# Generated by hal-provision")
    assert (
        "dn: dc=ncsa,dc=illinois,dc=edu\nobjectClass: dcObject\nobjectClass: organization\no: hal\ndc: ncsa\n" in text
    )
    assert text.count("\ndn: ") == len(directory["entries"]) + 1
    assert "userPassword" not in text


def test_no_secret_is_rendered(files):
    for path, text in files.items():
        assert "BEGIN" not in text and "PRIVATE KEY" not in text, path
        assert "olcRootPW" not in text and "userPassword:" not in text, path


def test_sssd_reaches_the_directory_over_ldaps_and_locks_out_expired_accounts(files):
    conf = files[acc.SSSD]
    for line in (
        "services = nss, pam, ssh",
        "[domain/hal]",
        "ldap_uri = ldaps://hal-mgmt1.ncsa.illinois.edu",
        "ldap_tls_reqcert = demand",
        "ldap_tls_cacert = /etc/ssl/hal-provision/cluster-ca.crt",
        "access_provider = ldap",
        "ldap_access_order = expire",
        "ldap_account_expire_policy = shadow",
        "ldap_user_ssh_public_key = sshPublicKey",
        "enumerate = false",
        "min_id = 100000",
        "max_id = 199999",
        "ldap_search_base = dc=ncsa,dc=illinois,dc=edu",
    ):
        assert f"\n{line}\n" in conf, line


def test_nothing_rendered_without_accounts(edited):
    text = edited(lambda t: t[: t.index("\naccounts:")] + t[t.index("\nportal:") :])
    files = render_all(load_text(text, "c.yml").model)
    assert not any(p in files for p in (acc.DIRECTORY, acc.LDIF, acc.SSSD))
    plan = json.loads(files[accounting.PLAN])
    assert plan["accounts"] == plan["users"] == plan["managed_accounts"] == []


def test_association_plan_holds_active_users_with_their_accounts(files):
    plan = json.loads(files[accounting.PLAN])
    assert plan["managed_accounts"] == ["astro", "bioml"]
    astro = plan["accounts"][0]
    assert astro["add"] == [
        "Cluster=hal",
        "Description=gravitational-wave deep learning",
        "Organization=astro-dl",
        "Fairshare=10",
        "QOS=debug,normal",
        "DefaultQOS=normal",
    ]
    assert astro["association"] == "astro||10|debug,normal|normal"
    assert plan["accounts"][1]["modify"][-2:] == ["QOS=normal", "DefaultQOS=-1"]
    users = {u["name"]: u for u in plan["users"]}
    assert set(users) == {"jdoe", "rsmith", "halops"}  # pformer is disabled
    assert users["halops"]["associations"] == ["astro|halops", "bioml|halops"]
    assert users["halops"]["listed"] == "halops|astro|Administrator"
    assert users["jdoe"]["listed"] == "jdoe|astro|None"


def test_slurm_conf_enforces_associations_limits_and_qos(files, edited):
    assert "\nAccountingStorageEnforce=associations,limits,qos\n" in files["files/etc/slurm/slurm.conf"]
    text = edited(("  accounting_enforce: [associations, limits, qos]", "  accounting_enforce: []"))
    assert "AccountingStorageEnforce" not in render_all(load_text(text, "c.yml").model)["files/etc/slurm/slurm.conf"]


def test_broken_accounts_section_is_rejected_with_its_line_and_writes_nothing(render_rejects, edited):
    text = edited(("      full_name: Jane Doe\n", "      full_name: Jane Doe\n      shel: /bin/zsh\n"))
    render_rejects(text, "accounts.users[0].shel")
