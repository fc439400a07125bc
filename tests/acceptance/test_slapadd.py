"""The rendered directory is loadable by a real OpenLDAP: `slapadd -u` (dry run: every entry is
parsed and checked against the schema, nothing is written) under a scratch cn=config holding
the schemas the ldap_server role gives slapd (Debian's core, cosine, nis, inetorgperson, and the
role's openssh-lpk for sshPublicKey).

Needs Debian's slapd (bootstrap.sh installs it; its daemon is not started).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from hal_provision.loader import load
from hal_provision.render import accounts

from .ldap_harness import SLAPADD, make_config

pytestmark = pytest.mark.acceptance


@pytest.fixture(scope="module")
def slapd_config(tmp_path_factory):
    cluster = load(None).model
    base = accounts.tree(cluster, cluster.accounts)["base"]
    root = tmp_path_factory.mktemp("slapd")
    conf, _db = make_config(root, base)
    return cluster, base, conf, root


def slapadd_dry_run(conf: Path, base: str, ldif: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SLAPADD, "-u", "-F", str(conf), "-b", base, "-l", str(ldif)], capture_output=True, text=True, check=False
    )


def test_rendered_hal_directory_passes_slapadd_dry_run(slapd_config):
    cluster, base, conf, root = slapd_config
    ldif = root / "hal.ldif"
    ldif.write_text(accounts.render(cluster)[accounts.LDIF])
    out = slapadd_dry_run(conf, base, ldif)
    assert out.returncode == 0, out.stderr
    entries = ldif.read_text().count("\ndn: ")
    assert entries == 3 + len(cluster.accounts.groups) + len(cluster.accounts.users)


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        ("\nuidNumber: 100200\n", "\n", "uidNumber"),  # posixAccount MUST
        ("\nobjectClass: ldapPublicKey\n", "\n", "sshPublicKey"),  # key without its class
        ("\nobjectClass: posixGroup\n", "\nobjectClass: posixGroups\n", "posixGroups"),
    ],
)
def test_slapadd_refuses_an_entry_the_schema_forbids(slapd_config, old, new, said):
    """The dry run is a real schema check: the same LDIF with one entry broken is refused."""
    cluster, base, conf, root = slapd_config
    text = accounts.render(cluster)[accounts.LDIF]
    assert old in text
    ldif = root / "broken.ldif"
    ldif.write_text(text.replace(old, new, 1))
    out = slapadd_dry_run(conf, base, ldif)
    assert out.returncode != 0, f"slapadd accepted an LDIF without {said}"
    assert said.lower() in out.stderr.lower() or "objectclass" in out.stderr.lower(), out.stderr
