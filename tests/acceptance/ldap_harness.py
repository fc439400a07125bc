"""A scratch OpenLDAP configuration (cn=config in a slapd.d directory, one mdb database) holding
the schemas the ldap_server role gives slapd: Debian's core, cosine, nis, inetorgperson, and the
role's openssh-lpk for sshPublicKey. The daemon is never started: slapadd and slapcat work on
the configuration and the database directly."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCHEMA = Path("/etc/ldap/schema")
LPK = REPO / "roles" / "ldap_server" / "files" / "openssh-lpk.ldif"
SLAPADD = "/usr/sbin/slapadd"


def config_ldif(base: str, db: Path) -> str:
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


def make_config(root: Path, base: str) -> tuple[Path, Path]:
    """A slapd.d configuration directory and an empty database directory under `root`, for the
    suffix `base`: (configuration directory, database directory)."""
    missing = [tool for tool in ("slapadd",) if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists()]
    assert not missing, "slapd is not installed: run ./bootstrap.sh"
    assert LPK.is_file(), f"{LPK} is missing"
    conf, db = root / "slapd.d", root / "db"
    conf.mkdir(parents=True)
    db.mkdir()
    (root / "config.ldif").write_text(config_ldif(base, db))
    made = subprocess.run(
        [SLAPADD, "-n0", "-F", str(conf), "-l", str(root / "config.ldif")], capture_output=True, text=True, check=False
    )
    assert made.returncode == 0, made.stderr
    return conf, db
