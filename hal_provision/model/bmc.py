"""A node's baseboard management controller (Redfish or IPMI) and its boot MAC: what a node
group says of its machines for `hal-provision power` and `reimage` and for the boot server. The
credentials are never written here, only where they are (provisioning.py has the rest)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from .base import AbsolutePath, Name, Strict

MAC_PATTERN = r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$"

# Keys that carry a secret: refused wherever a BMC is described, with the reason, rather than
# pydantic's bare "extra inputs are not permitted".
_SECRET_KEYS = ("password", "passwd", "pass", "secret", "username", "user", "token", "key")


def _mac(value: str) -> str:
    text = str(value).strip().lower().replace("-", ":")
    if not re.fullmatch(MAC_PATTERN, text):
        raise ValueError(f"{value!r} is not a MAC address (six hexadecimal pairs, e.g. 52:54:00:12:34:56)")
    return text


Mac = Annotated[str, AfterValidator(_mac)]


def refuse_secrets(data, where: str):
    """A mapping that writes a credential into the model is refused with where it belongs."""
    if isinstance(data, dict):
        for key in data:
            if str(key).lower() in _SECRET_KEYS:
                raise ValueError(
                    f"`{key}` writes a credential into the model: {where} are never kept in cluster.yml "
                    "(it is in git and in every rendered tree); name where they are instead: "
                    "credentials: {vault_file: PATH} (an Ansible Vault file with username and password) or "
                    "{file: PATH} (a plain YAML file of the two, mode 0600, on the controller)"
                )
    return data


class BmcCredentials(Strict):
    vault_file: AbsolutePath | None = Field(
        None,
        description="An Ansible Vault-encrypted YAML file on the controller with `username` and `password`, "
        "decrypted with the vault password Ansible is given (ANSIBLE_VAULT_PASSWORD_FILE).",
    )
    file: AbsolutePath | None = Field(
        None,
        description="A plain YAML file on the controller with `username` and `password`; refused at use unless "
        "only its owner can read it (mode 0600 or stricter).",
    )

    @model_validator(mode="before")
    @classmethod
    def _no_secrets(cls, data):
        return refuse_secrets(data, "BMC credentials")

    @model_validator(mode="after")
    def _one(self) -> BmcCredentials:
        if (self.vault_file is None) == (self.file is None):
            raise ValueError("give either `vault_file` or `file`" + (", not both" if self.file else ""))
        return self


class Bmc(Strict):
    protocol: Literal["redfish", "ipmi"] = Field(
        description="redfish: the BMC's Redfish service over HTTPS (or HTTP where `endpoint` says so); ipmi: IPMI "
        "over LAN (ipmitool -I lanplus)."
    )
    network: Name | None = Field(
        None,
        description="The network (kind bmc) the BMCs answer on; each node's BMC is its address there (the group's "
        "`addresses`). None: the model's one network of kind bmc.",
    )
    endpoint: str | None = Field(
        None,
        description="One Redfish service for every node of the group instead of one BMC each (a chassis manager, "
        "an aggregator, or the sandbox's emulator): http(s)://ADDRESS[:PORT], its address in `network`. Each "
        "node is then the system named by `system`.",
        pattern=r"^https?://[0-9.]+(:[0-9]{1,5})?/?$",
    )
    system: str | None = Field(
        None,
        description="The Redfish system of a node, `{host}` standing for its name, e.g. System.Embedded.1, or "
        "{host} behind an `endpoint`. None: the one system the BMC lists.",
        pattern=r"^[A-Za-z0-9_.{}-]+$",
    )
    verify_tls: bool = Field(True, description="Check the BMC's TLS certificate (Redfish over HTTPS).")
    credentials: BmcCredentials = Field(
        description="Where the BMC user and password are: never in this file (a check refuses them here)."
    )

    @model_validator(mode="before")
    @classmethod
    def _no_secrets(cls, data):
        return refuse_secrets(data, "BMC credentials")
