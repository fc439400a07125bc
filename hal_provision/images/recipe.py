"""What goes into a node image, and its version.

An image is Debian (the release its `os` names) from debootstrap, the packages every stateless
node needs (kernel, live-boot's initramfs, systemd, sshd, Python for Ansible), the distribution
packages of the roles it names (read from the roles' own vars files, as the sandbox's packages
image reads them) and its further packages. Its version is a hash of all of that and of how it
is built (RECIPE_REVISION), so the renderer knows, from the model alone, which version each node
boots; a changed image is a new version and never overwrites the one nodes run. Standard library
and PyYAML only: the sandbox's image builder imports it under the system's Python.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

ROLES = Path(__file__).resolve().parents[2] / "roles"
# Bumped whenever build.py makes a different image from the same inputs.
RECIPE_REVISION = "2"
# The Debian releases an image can be, by cluster.os name (model/slurm_versions.py's
# OPERATING_SYSTEMS; tests/unit/images/test_recipe.py keeps the two equal).
RELEASES = {"debian12": "bookworm", "debian13": "trixie"}
# Every stateless node: a kernel, live-boot (its initramfs fetches the root over HTTP and holds
# it in memory), systemd (networkd: DHCP on the boot interface),
# sshd (the enrolling push and Ansible reach the node over SSH), Python for Ansible.
BASE_PACKAGES = (
    "linux-image-amd64",
    "live-boot",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "python3",
    "python3-apt",
    "sudo",
    "procps",
    "iproute2",
    "ca-certificates",
    "curl",
)
# Packages a role installs itself from site input it prepares first (ldap_server preseeds slapd).
NOT_IN_IMAGE = frozenset({"slapd"})
# What a node's image says of itself, read by hal-converge into its record.
IMAGE_RECORD = "/etc/hal-provision/image.json"


def role_vars(roles_dir: Path, family: str, pattern: str, only: frozenset[str] | None = None) -> set[str]:
    """Plain names in the roles' `vars/<family>*.yml` under keys matching `pattern` (string
    values, lists, or dicts of either), for the roles in `only` (None: every role). Templated
    values (a vendor's download URL) are not distribution names and are left out."""
    import yaml

    found: set[str] = set()

    def add(value) -> None:
        if isinstance(value, str):
            if "{{" not in value and "/" not in value:
                found.add(value)
        elif isinstance(value, list):
            for item in value:
                add(item)
        elif isinstance(value, dict):
            for item in value.values():
                add(item)

    for path in sorted(roles_dir.glob(f"*/vars/{family}*.yml")):
        if only is not None and path.parent.parent.name not in only:
            continue
        data = yaml.safe_load(path.read_text()) or {}
        for key, value in data.items():
            if re.fullmatch(pattern, key):
                add(value)
    return found


def role_packages(roles: list[str] | None = None, roles_dir: Path = ROLES, family: str = "Debian") -> list[str]:
    """The distribution packages the named roles (None: all) install on `family`
    (`__<role>_<what>_packages`, `__<role>_<what>_package`)."""
    only = None if roles is None else frozenset(roles)
    return sorted(role_vars(roles_dir, family, r"__\w+_packages?", only))


def role_services(roles_dir: Path = ROLES, family: str = "Debian") -> list[str]:
    """The services the roles enable and start where a node runs them (`__<role>_service`,
    `__<role>_services`): an image leaves them disabled."""
    return sorted(role_vars(roles_dir, family, r"__\w+_services?"))


def unknown_roles(roles: list[str], roles_dir: Path = ROLES) -> list[str]:
    """The names in `roles` that are not roles of this tree."""
    return [r for r in roles if not (roles_dir / r / "tasks").is_dir()]


def image_packages(roles: list[str], packages: list[str], roles_dir: Path = ROLES) -> list[str]:
    """Everything installed on top of debootstrap's minbase: the base, the roles' packages (but
    those a role installs itself), the image's own; sorted, each once."""
    from_roles = [p for p in role_packages(roles, roles_dir) if p not in NOT_IN_IMAGE]
    return sorted(set(BASE_PACKAGES) | set(from_roles) | set(packages))


def recipe(
    os: str,
    roles: list[str],
    packages: list[str],
    kernel_args: list[str],
    mode: str = "stateless",
    authorized_keys: list[str] = (),
) -> dict:
    """The image's inputs as data: what the version hashes and what the build reads."""
    return {
        "revision": RECIPE_REVISION,
        "release": RELEASES[os],
        "mode": mode,
        "packages": image_packages(roles, packages),
        "kernel_args": list(kernel_args),
        "authorized_keys": list(authorized_keys),
    }


def version(recipe_data: dict) -> str:
    """The image version: the first 12 hex digits of the recipe's canonical JSON's sha256."""
    text = json.dumps(recipe_data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def of_model(provisioning, name: str) -> dict:
    """The recipe of the model's image NAME (provisioning.images.NAME)."""
    image = provisioning.images[name]
    return recipe(
        image.os, image.roles, image.packages, image.kernel_args, image.mode, provisioning.ssh_authorized_keys
    )
