"""Bare metal: the node images the management node keeps, the network boot it serves, and each
node's BMC.

A node group that names an `image` boots from the network: the boot server (a management host)
answers its boot MACs with DHCP (dnsmasq: static leases from the model's addresses, or proxy-DHCP
beside the site's own DHCP server), hands iPXE a script chosen by MAC, and serves the image's
kernel, initramfs and squashfs root over HTTP (nginx). The image is built from the model
(`hal-provision image build`: debootstrap, the packages of the roles it names, a stateless root
held in memory); its version is a hash of what goes into it, so a changed image is a new version
and `plan` names the nodes that boot it. A group's `bmc` says how to reach its nodes' baseboard
management controllers (Redfish or IPMI) for `hal-provision power` and `reimage`; the
credentials are never written here, only where they are (an Ansible Vault file or a plain file
on the controller, mode 0600). The files are the renderer's (render/provisioning.py).
"""

from __future__ import annotations

import re
from ipaddress import IPv4Address
from typing import Literal

from pydantic import Field, field_validator, model_validator

from .base import AbsolutePath, Name, Strict
from .bmc import Bmc, BmcCredentials, Mac, refuse_secrets
from .slurm_versions import DEFAULT_OS, OS_NAMES

DEFAULT_HTTP_PORT = 8182
DEFAULT_IMAGE_STORE = "/var/lib/hal-provision/images"

__all__ = ["Bmc", "BmcCredentials", "Image", "Mac", "Provisioning"]


class Image(Strict):
    os: Literal[OS_NAMES] = Field(  # type: ignore[valid-type]
        DEFAULT_OS, description="The Debian release of the image (as cluster.os names them)."
    )
    roles: list[Name] = Field(
        default_factory=list,
        description="Roles whose distribution packages are baked into the image (their vars files' package "
        "lists), so the first converge installs nothing; their services stay off until the roles configure them.",
    )
    packages: list[str] = Field(
        default_factory=list, description="Further Debian packages in the image (names, no versions)."
    )
    mode: Literal["stateless"] = Field(
        "stateless",
        description="stateless: the root is a squashfs the node downloads at boot and holds in memory (a reboot "
        "is a clean node); nothing is written to its disks.",
    )
    kernel_args: list[str] = Field(
        default_factory=list, description="Further kernel command-line arguments, e.g. console=ttyS0,115200."
    )


class Provisioning(Strict):
    network: Name = Field(description="The network (kind ethernet) the nodes boot on; the boot server answers there.")
    boot_server: str = Field(
        description="The management host that serves the network boot: DHCP and TFTP (dnsmasq), the iPXE "
        "scripts and the images over HTTP (nginx)."
    )
    dhcp: Literal["static", "proxy"] = Field(
        "static",
        description="static: the boot server hands each known boot MAC its model address (and nothing to other "
        "MACs); proxy: the site's DHCP server hands addresses and the boot server only the boot (proxy-DHCP).",
    )
    gateway: IPv4Address | None = Field(
        None,
        description="The default route dnsmasq hands the booted nodes with their static leases (an address in "
        "`network`). None: none is handed out (a node then reaches its own network only).",
    )
    dns_servers: list[IPv4Address] = Field(
        default_factory=list,
        description="Name servers dnsmasq hands the booted nodes with their static leases (the cluster's own names "
        "come from /etc/hosts). Empty: none.",
    )
    http_port: int = Field(DEFAULT_HTTP_PORT, ge=1, le=65535, description="TCP port of the boot server's HTTP site.")
    image_store: AbsolutePath = Field(
        DEFAULT_IMAGE_STORE,
        description="Where `hal-provision image build` keeps the images, one directory per image and version, on "
        "the host it runs on (the management node).",
    )
    reboot_timeout_s: int = Field(
        1800,
        ge=60,
        description="How long a node rebooted through Slurm (`hal-provision reimage`) has to boot its image, be "
        "enrolled and converge before slurmctld marks it DOWN (slurm.conf's ResumeTimeout).",
    )
    ssh_authorized_keys: list[str] = Field(
        default_factory=list,
        description="Public SSH keys baked into every image as root's authorized_keys: the controller's, whose "
        "enrolling push brings a booted node its secrets (public keys only; a private key is refused).",
    )
    images: dict[Name, Image] = Field(
        min_length=1, description="The node images by name; a node group boots the one its `image` names."
    )

    @model_validator(mode="before")
    @classmethod
    def _no_secrets(cls, data):
        return refuse_secrets(data, "secrets")

    @field_validator("ssh_authorized_keys")
    @classmethod
    def _public_keys_only(cls, keys: list[str]) -> list[str]:
        for key in keys:
            if "PRIVATE KEY" in key:
                raise ValueError("a private key is never written into the model: give the public key (the .pub file)")
            if not re.fullmatch(
                r"(ssh-(ed25519|rsa)|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/=]+( \S.*)?", key.strip()
            ):
                raise ValueError(f"{key[:40]!r}... is not an OpenSSH public key (TYPE BASE64 [COMMENT])")
        return [k.strip() for k in keys]
