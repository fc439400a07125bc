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


# The tests that change the cluster, by marker, in the order they run after every read-only
# one: day-2 changes (the model changed and re-converged, put back after), then faults.
# `hal-provision verify` runs neither unless asked (--changes, --faults); CI runs all.
MUTATING = ("changes", "faults")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "changes: day-2 changes made to the model and converged, then undone "
        "(sandbox only); run after the read-only tests",
    )
    config.addinivalue_line("markers", "faults: destructive fault injection (sandbox only); runs last")
    config.addinivalue_line(
        "markers", "pull: pull mode's nodes converging themselves (a sandbox with deploy.mode pull: the fleet scenario)"
    )
    config.addinivalue_line(
        "markers", "prometheus: the Prometheus backend's scrapes, panels and alerts (the fleet scenario)"
    )
    config.addinivalue_line(
        "markers",
        "baremetal: network-booted QEMU guests (sandbox up --bare-metal: the baremetal scenario)",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that change the cluster run after every read-only one, whatever their file names."""

    def rank(item: pytest.Item) -> int:
        return next((i + 1 for i, m in enumerate(MUTATING) if item.get_closest_marker(m)), 0)

    items.sort(key=rank)


@pytest.fixture(scope="session")
def cluster():
    from deployed import InventoryError, deployed

    try:
        return deployed()
    except InventoryError as exc:
        pytest.exit(str(exc), returncode=4)
