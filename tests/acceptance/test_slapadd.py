"""The rendered directory is loadable by a real OpenLDAP: `slapadd -u` (dry run: every entry is
parsed and checked against the schema, nothing is written) under a scratch cn=config holding
the schemas the ldap_server role gives slapd (Debian's core, cosine, nis, inetorgperson, and the
role's openssh-lpk for sshPublicKey).

Needs Debian's slapd (bootstrap.sh installs it; its daemon is not started).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from hal_provision.loader import load
from hal_provision.render import accounts

REPO = Path(__file__).resolve().parents[2]
SCHEMA = Path("/etc/ldap/schema")
LPK = REPO / "roles" / "ldap_server" / "files" / "openssh-lpk.ldif"

pytestmark = pytest.mark.acceptance


def _config_ldif(base: str, db: Path) -> str:
    includes = "".join(f"include: file://{SCHEMA / name}.ldif\n" for name in ("core", "cosine", "nis", "inetorgperson"))
    return (
        "dn: cn=config\nobjectClass: olcGlobal\ncn: config\n\n"
        "dn: cn=module{0},cn=config\nobjectClass: olcModuleList\ncn: module{0}\n"
        "olcModulePath: /usr/lib/ldap\nolcModuleLoad: back_mdb\n\n"
        "dn: cn=schema,cn=config\nobjectClass: olcSchemaConfig\ncn: schema\n\n"
        f"{includes}include: file://{LPK}\n\n"
        "dn: olcDatabase={1}mdb,cn=config\nobjectClass: olcDatabaseConfig\nobjectClass: olcMdbConfig\n"
        f"olcDatabase: {{1}}mdb\nolcSuffix: {base}\nolcDbDirectory: {db}\n"
    )


@pytest.fixture(scope="module")
def slapd_config(tmp_path_factory):
    missing = [tool for tool in ("slapadd",) if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists()]
    assert not missing, "slapd is not installed: run ./bootstrap.sh"
    assert LPK.is_file(), f"{LPK} is missing"
    cluster = load(None).model
    base = accounts.tree(cluster, cluster.accounts)["base"]
    root = tmp_path_factory.mktemp("slapd")
    conf, db = root / "slapd.d", root / "db"
    conf.mkdir()
    db.mkdir()
    (root / "config.ldif").write_text(_config_ldif(base, db))
    made = subprocess.run(["/usr/sbin/slapadd", "-n0", "-F", str(conf), "-l", str(root / "config.ldif")],
                          capture_output=True, text=True, check=False)
    assert made.returncode == 0, made.stderr
    return cluster, base, conf, root


def slapadd_dry_run(conf: Path, base: str, ldif: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["/usr/sbin/slapadd", "-u", "-F", str(conf), "-b", base, "-l", str(ldif)],
                          capture_output=True, text=True, check=False)


def test_rendered_hal_directory_passes_slapadd_dry_run(slapd_config):
    cluster, base, conf, root = slapd_config
    ldif = root / "hal.ldif"
    ldif.write_text(accounts.render(cluster)[accounts.LDIF])
    out = slapadd_dry_run(conf, base, ldif)
    assert out.returncode == 0, out.stderr
    entries = ldif.read_text().count("\ndn: ")
    assert entries == 3 + len(cluster.accounts.groups) + len(cluster.accounts.users)


@pytest.mark.parametrize(("old", "new", "said"), [
    ("\nuidNumber: 100200\n", "\n", "uidNumber"),                       # posixAccount MUST
    ("\nobjectClass: ldapPublicKey\n", "\n", "sshPublicKey"),             # key without its class
    ("\nobjectClass: posixGroup\n", "\nobjectClass: posixGroups\n", "posixGroups"),
])
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
