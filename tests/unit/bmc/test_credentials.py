"""The BMC credentials a group's `bmc.credentials` points at: a plain file only its owner can
read, or an Ansible Vault file made by the real ansible-vault and opened with the password file
ANSIBLE_VAULT_PASSWORD_FILE names; and `power` reading a vault file end to end."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from realbmc import EXIT_OK, EXIT_UNUSABLE, PASSWORD, USER, baremetal, credentials_file, hal_provision

from hal_provision.bmc import credentials
from hal_provision.bmc.credentials import CredentialsError, VAULT_PASSWORD_ENV
from hal_provision.model.bmc import BmcCredentials


def ansible_vault() -> str:
    program = Path(sys.executable).with_name("ansible-vault")
    if not program.is_file():
        program = shutil.which("ansible-vault")
        if program is None:
            pytest.skip("ansible-vault is not installed (Ansible is in the sandbox extra)")
    return str(program)


@pytest.fixture
def vault(tmp_path, monkeypatch):
    """A vault file of the credentials, its password file, and ANSIBLE_VAULT_PASSWORD_FILE set."""
    secret = tmp_path / "vault-password"
    secret.write_text("open sesame\n")
    secret.chmod(0o600)
    path = tmp_path / "bmc.vault.yml"
    path.write_text(f"username: {USER}\npassword: {PASSWORD}\n")
    subprocess.run(
        [ansible_vault(), "encrypt", "--vault-password-file", str(secret), str(path)], check=True, capture_output=True
    )
    assert path.read_text().startswith("$ANSIBLE_VAULT;")
    monkeypatch.setenv(VAULT_PASSWORD_ENV, str(secret))
    return path


def test_a_file_only_its_owner_reads(tmp_path):
    for mode in (0o600, 0o400):
        path = credentials_file(tmp_path / f"bm-{mode:o}.yml", mode=mode)
        assert credentials.load(BmcCredentials(file=str(path))) == credentials.Credentials(USER, PASSWORD)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_a_file_others_can_read_is_refused(tmp_path, mode):
    path = credentials_file(tmp_path / "bm.yml", mode=mode)
    with pytest.raises(
        CredentialsError, match=rf"^{path}: .* has mode 0{mode:o}, readable by others: chmod 600 {path}"
    ):
        credentials.load(BmcCredentials(file=str(path)))


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user")
def test_a_file_of_another_user_is_refused(tmp_path):
    path = credentials_file(tmp_path / "bm.yml")
    os.chown(path, 65534, -1)
    with pytest.raises(CredentialsError, match=rf"^{path}: .* belongs to uid 65534, not to the user"):
        credentials.read_file(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("username: admin\n", "no `password`"),
        ("password: hunter2\n", "no `username`"),
        ("username: ''\npassword: hunter2\n", "no `username`"),
        ("- admin\n- hunter2\n", "expected a mapping"),
        ("username: admin\npassword: hunter2\ntoken: y\n", "unknown keys token"),
        ("username: [admin\npassword: hunter2\n", "not YAML"),
    ],
)
def test_a_file_that_is_not_a_username_and_a_password(tmp_path, text, message):
    path = tmp_path / "bm.yml"
    path.write_text(text)
    path.chmod(0o600)
    with pytest.raises(CredentialsError, match=rf"^{path}: .*{message}") as caught:
        credentials.read_file(path)
    assert "hunter2" not in str(caught.value)  # the file's text is never shown


def test_a_missing_file_is_named(tmp_path):
    path = tmp_path / "nowhere.yml"
    with pytest.raises(CredentialsError, match=rf"^{path}: cannot read the BMC credentials: No such file"):
        credentials.load(BmcCredentials(file=str(path)))


def test_a_vault_file_is_decrypted_with_ansibles_password_file(vault):
    assert credentials.load(BmcCredentials(vault_file=str(vault))) == credentials.Credentials(USER, PASSWORD)


def test_a_vault_file_without_the_variable_names_it(vault, monkeypatch):
    monkeypatch.delenv(VAULT_PASSWORD_ENV)
    with pytest.raises(CredentialsError, match=rf"^{vault}: .* {VAULT_PASSWORD_ENV} is not set"):
        credentials.load(BmcCredentials(vault_file=str(vault)))


def test_a_vault_file_with_the_wrong_password(vault, tmp_path, monkeypatch):
    wrong = tmp_path / "wrong-password"
    wrong.write_text("not it\n")
    monkeypatch.setenv(VAULT_PASSWORD_ENV, str(wrong))
    with pytest.raises(
        CredentialsError, match=rf"^{vault}: cannot decrypt with the vault password of {VAULT_PASSWORD_ENV}="
    ):
        credentials.load(BmcCredentials(vault_file=str(vault)))


def test_a_plain_file_given_as_vault_file(tmp_path, monkeypatch):
    path = credentials_file(tmp_path / "bm.yml")
    monkeypatch.setenv(VAULT_PASSWORD_ENV, str(path))
    with pytest.raises(CredentialsError, match=rf"^{path}: not an Ansible Vault file"):
        credentials.load(BmcCredentials(vault_file=str(path)))


def test_power_reads_a_vault_file(vault, tmp_path, redfish):
    cluster = baremetal(tmp_path / "cluster.yml", f"{{vault_file: {vault}}}", endpoint=redfish.url)
    result = hal_provision("power", "status", "bm[01-03]", "-f", str(cluster))
    assert (result.returncode, result.stdout) == (EXIT_OK, "bm[01-02]: on\nbm03: off\n"), result.stderr
    result = hal_provision("power", "status", "bm[01-03]", "-f", str(cluster), env={VAULT_PASSWORD_ENV: ""})
    assert result.returncode == EXIT_UNUSABLE
    assert f"{VAULT_PASSWORD_ENV} is not set" in result.stderr
