"""testinfra suite for a deployed cluster, derived from its rendered inventory and files.

Run against any rendered inventory (the sandbox's or a real cluster's):

    HAL_INVENTORY=.hal-sandbox/rendered/inventory python3 -m pytest tests/infra
    hal-provision verify .hal-sandbox/rendered/inventory          # the same, -m "not faults"

Everything expected here comes from `ansible-inventory --list` of HAL_INVENTORY and from the
rendered files beside it (HAL_INVENTORY/../files): nothing is hard-coded for HAL. Hosts are
reached as the inventory says, over SSH in the sandbox as on a real cluster: testinfra's
ansible backend turns the inventory's user, key and known_hosts plus the repository's
ansible.cfg (ControlPersist) into its ssh backend. Hosts whose ansible_connection is podman
are reached with `podman exec`.

Without HAL_INVENTORY nothing here is collected, so a plain `pytest` never reaches for hosts.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

INVENTORY_ENV = "HAL_INVENTORY"
# testinfra reads the SSH settings (ControlPersist, ...) from the ansible.cfg Ansible would use.
os.environ.setdefault("ANSIBLE_CONFIG", str(Path(__file__).resolve().parents[2] / "ansible.cfg"))

if not os.environ.get(INVENTORY_ENV):
    collect_ignore_glob = ["*"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "faults: destructive fault injection (sandbox only); runs last")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Destructive tests run after every read-only one, whatever their file names."""
    items.sort(key=lambda item: item.get_closest_marker("faults") is not None)


@pytest.fixture(scope="session")
def cluster():
    from deployed import InventoryError, deployed

    try:
        return deployed()
    except InventoryError as exc:
        pytest.exit(str(exc), returncode=4)
