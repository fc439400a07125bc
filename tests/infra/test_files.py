"""Deployed files are the rendered ones, byte for byte; secrets are private and never rendered."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from deployed import FILE_GROUPS, MUNGE_GROUPS, SLURMDBD_CONF, deployed

D = deployed()

RENDERED_ON_HOSTS = [
    pytest.param(host, rel, id=f"{host}:/{rel}")
    for rel, groups in FILE_GROUPS.items()
    if D.rendered(rel) is not None
    for host in D.hosts_in(*groups)
]
DBD_HOSTS = D.hosts_in("service_slurmdbd") if D.rendered(SLURMDBD_CONF) is not None else []
MUNGE_HOSTS = D.hosts_in(*MUNGE_GROUPS)
LDAP_HOSTS = D.hosts_in("service_ldap") if D.rendered("etc/hal-provision/ldap-directory.json") is not None else []
_PORTAL = json.loads(D.rendered("etc/hal-provision/portal.json") or "{}")
# The portal's TLS key when the role made it from the cluster CA (no site certificate).
PORTAL_HOSTS = D.hosts_in("service_portal") if _PORTAL and not _PORTAL["tls"]["site"] else []
STORAGE_PASS = re.compile(r"^StoragePass=(.*)$", re.M)


def _read(host: str, path: str) -> bytes:
    f = D.host(host).file(path)
    assert f.exists, f"{host}: {path} is missing"
    return f.content


@pytest.mark.parametrize(("host", "rel"), RENDERED_ON_HOSTS)
def test_deployed_file_equals_rendered(host, rel):
    rendered = (D.files / rel).read_bytes()
    deployed_bytes = _read(host, f"/{rel}")
    if deployed_bytes != rendered:
        import difflib

        diff = "".join(
            difflib.unified_diff(
                rendered.decode(errors="replace").splitlines(True),
                deployed_bytes.decode(errors="replace").splitlines(True),
                f"rendered/{rel}",
                f"{host}:/{rel}",
            )
        )
        pytest.fail(f"{host}:/{rel} differs from the rendered file:\n{diff}")


def _storage_pass(host: str, text: str) -> str:
    """The one StoragePass= value of a deployed slurmdbd.conf; the message never shows it."""
    found = STORAGE_PASS.findall(text)
    near = [re.sub(r"=.*", "=<hidden>", ln) for ln in text.splitlines() if "storagepass" in ln.lower()]
    if len(found) != 1 or not found[0].strip():  # no assert: its introspection would print the secret
        pytest.fail(f"{host}: expected exactly one non-empty StoragePass= line; lines naming it: {near}")
    return found[0].strip()


@pytest.mark.parametrize("host", DBD_HOSTS)
def test_slurmdbd_conf_is_rendered_text_plus_one_storage_pass(host):
    text = _read(host, f"/{SLURMDBD_CONF}").decode()
    _storage_pass(host, text)
    without = "".join(ln for ln in text.splitlines(True) if not STORAGE_PASS.match(ln.rstrip("\n")))
    assert without == D.rendered(SLURMDBD_CONF), (
        f"{host}: /{SLURMDBD_CONF} minus its StoragePass= line is not the rendered file"
    )


@pytest.mark.parametrize("host", DBD_HOSTS)
def test_storage_pass_never_in_rendered_tree(host):
    secret = _storage_pass(host, _read(host, f"/{SLURMDBD_CONF}").decode())
    leaks = [
        str(p.relative_to(D.inventory.parent))
        for p in D.inventory.parent.rglob("*")
        if p.is_file() and secret.encode() in p.read_bytes()
    ]
    assert not leaks, f"the slurmdbd StoragePass of {host} appears in the rendered tree: {leaks}"


SECRETS = [
    *(pytest.param(h, "/etc/munge/munge.key", 0o400, "munge", "munge", id=f"{h}:munge.key") for h in MUNGE_HOSTS),
    *(pytest.param(h, f"/{SLURMDBD_CONF}", 0o600, "slurm", None, id=f"{h}:slurmdbd.conf") for h in DBD_HOSTS),
    # The directory host's: its admin password, the cluster CA's key, slapd's TLS key (slapd
    # reads it after dropping to openldap); the portal's TLS key (the hub's group reads it).
    *(
        pytest.param(h, path, mode, "root", group, id=f"{h}:{path.rsplit('/', 1)[1]}")
        for h in LDAP_HOSTS
        for path, mode, group in (
            ("/etc/hal-provision/secrets/ldap_admin_pass", 0o600, "root"),
            ("/etc/hal-provision/ca/cluster-ca.key", 0o600, "root"),
            ("/etc/ldap/tls/ldap-server.key", 0o640, "openldap"),
        )
    ),
    *(
        pytest.param(
            h,
            _PORTAL["tls"]["key"],
            0o640,
            "root",
            D.hostvars[h].get("portal_hub_user", "jupyterhub") if _PORTAL["front_end"] == "jupyterhub" else "root",
            id=f"{h}:portal.key",
        )
        for h in PORTAL_HOSTS
    ),
]


@pytest.mark.parametrize(("host", "path", "mode", "owner", "group"), SECRETS)
def test_secret_mode_and_owner(host, path, mode, owner, group):
    f = D.host(host).file(path)
    assert f.exists, f"{host}: {path} is missing"
    got = (oct(f.mode), f.user, f.group if group else None)
    assert got == (oct(mode), owner, group), f"{host}: {path} is mode/owner/group {got}"


def _munge_key_digest(host: str) -> str:
    return hashlib.sha256(_read(host, "/etc/munge/munge.key")).hexdigest()


@pytest.mark.parametrize("host", MUNGE_HOSTS)
def test_munge_key_same_as_controller(host):
    assert _munge_key_digest(host) == _munge_key_digest(D.controller), (
        f"{host}: /etc/munge/munge.key differs from the one on {D.controller}"
    )
