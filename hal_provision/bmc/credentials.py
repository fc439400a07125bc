"""The BMC user and password a group's `bmc.credentials` refers to, read on the controller.

cluster.yml names where they are, never what they are: `file` (a plain YAML file of `username`
and `password`, which only its owner may read) or `vault_file` (the same YAML encrypted with
Ansible Vault, decrypted by Ansible's own library with the password file Ansible is given,
ANSIBLE_VAULT_PASSWORD_FILE). Every error names the file and says what would be right."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from . import BmcError

VAULT_PASSWORD_ENV = "ANSIBLE_VAULT_PASSWORD_FILE"


class CredentialsError(BmcError):
    """A credentials file that cannot be used: missing, readable by others, not owned by the
    user, not YAML of username and password, or not decryptable."""


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)


def load(reference) -> Credentials:
    """The credentials a `BmcCredentials` (its `file` or `vault_file`) points at."""
    if getattr(reference, "file", None) is not None:
        return read_file(Path(reference.file))
    if getattr(reference, "vault_file", None) is not None:
        return read_vault(Path(reference.vault_file))
    raise CredentialsError("the BMC credentials name neither `file` nor `vault_file`")


def key(reference) -> tuple[str | None, str | None]:
    """What identifies a reference, so that hosts sharing one read it once."""
    return (
        str(reference.file) if getattr(reference, "file", None) else None,
        str(reference.vault_file) if getattr(reference, "vault_file", None) else None,
    )


def read_file(path: Path) -> Credentials:
    """A plain credentials file: owned by the user running hal-provision and readable by no one
    else (mode 0600 or stricter), as ssh treats a private key."""
    try:
        info = path.stat()
    except OSError as exc:
        raise CredentialsError(f"{path}: cannot read the BMC credentials: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise CredentialsError(f"{path}: the BMC credentials must be a regular file")
    if info.st_uid != os.geteuid():
        raise CredentialsError(
            f"{path}: the BMC credentials file belongs to uid {info.st_uid}, not to the user running "
            f"hal-provision (uid {os.geteuid()}): chown it"
        )
    if info.st_mode & 0o077:
        raise CredentialsError(
            f"{path}: the BMC credentials file has mode {stat.S_IMODE(info.st_mode):04o}, readable by others: "
            f"chmod 600 {path} (or keep them in an Ansible Vault file, `vault_file`)"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CredentialsError(f"{path}: cannot read the BMC credentials: {exc}") from None
    return parse(text, str(path))


def read_vault(path: Path, password_file: str | None = None) -> Credentials:
    """An Ansible Vault file of the same YAML, decrypted with `password_file` (default: what
    ANSIBLE_VAULT_PASSWORD_FILE names, as ansible-playbook reads it: a file or a script)."""
    password_file = password_file or os.environ.get(VAULT_PASSWORD_ENV)
    if not password_file:
        raise CredentialsError(
            f"{path}: the BMC credentials are an Ansible Vault file and {VAULT_PASSWORD_ENV} is not set: "
            f"export {VAULT_PASSWORD_ENV}=/path/to/the/vault/password/file"
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CredentialsError(f"{path}: cannot read the BMC credentials: {exc.strerror}") from None
    try:
        from ansible.errors import AnsibleError
        from ansible.parsing.dataloader import DataLoader
        from ansible.parsing.vault import VaultLib, get_file_vault_secret, is_encrypted
    except ImportError:
        raise CredentialsError(
            f"{path}: an Ansible Vault file, and Ansible is not installed beside hal-provision"
        ) from None

    if not is_encrypted(data):
        raise CredentialsError(f"{path}: not an Ansible Vault file (encrypt it with `ansible-vault encrypt {path}`)")
    try:
        secret = get_file_vault_secret(filename=password_file, vault_id="default", loader=DataLoader())
        secret.load()
        text = VaultLib([("default", secret)]).decrypt(data)
    except AnsibleError as exc:
        raise CredentialsError(
            f"{path}: cannot decrypt with the vault password of {VAULT_PASSWORD_ENV}={password_file}: {exc.message}"
        ) from None
    return parse(text.decode("utf-8", errors="replace"), str(path))


def parse(text: str, where: str) -> Credentials:
    """YAML of `username` and `password` (both strings), from `where`; the error never shows
    the file's text, which holds the password."""
    import yaml

    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        raise CredentialsError(f"{where}: not YAML (expected `username: ...` and `password: ...`)") from None
    if not isinstance(doc, dict):
        raise CredentialsError(f"{where}: expected a mapping with `username` and `password`")
    missing = [k for k in ("username", "password") if not isinstance(doc.get(k), (str, int)) or str(doc[k]) == ""]
    if missing:
        raise CredentialsError(f"{where}: no {' and no '.join(f'`{k}`' for k in missing)} (a non-empty string each)")
    unknown = sorted(str(k) for k in doc if k not in ("username", "password"))
    if unknown:
        raise CredentialsError(f"{where}: unknown keys {', '.join(unknown)} (only `username` and `password`)")
    return Credentials(str(doc["username"]), str(doc["password"]))
