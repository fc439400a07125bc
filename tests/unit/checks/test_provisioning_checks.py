"""Bare metal: the provisioning section's checks, one row per mistake (an edit of the embedded HAL
description with a provisioning section and its x86-64 data transfer node booted from the
network), the credentials the model refuses, and the model's views of boot entries and BMCs."""

from __future__ import annotations

import pytest

from hal_provision.findings import Level, has_errors
from hal_provision.loader import validate_text

from tests.conftest import HAL_TEXT, _apply, hal_with

E = Level.error

PROVISIONING = """
provisioning:
  network: mgmt
  boot_server: hal-mgmt1
  images:
    dtn:
      roles: [common]
      packages: [rsync]
"""
DTN = "    addresses: {mgmt: 172.22.0.21, bmc: 172.23.0.21, ib: 172.24.0.21}\n"
DTN_BOOTED = (
    DTN + "    image: dtn\n"
    '    boot_macs: {hal-dtn: "0c:42:a1:00:00:21"}\n'
    "    bmc: {protocol: redfish, credentials: {file: /etc/hal-provision/bmc/hal.yml}}\n"
)


def _with_provisioning(text: str) -> str:
    return text + PROVISIONING


ROWS_START = [_with_provisioning, (DTN, DTN_BOOTED)]


def bmc(line: str):
    return ("    bmc: {protocol: redfish, credentials: {file: /etc/hal-provision/bmc/hal.yml}}\n", f"    bmc: {line}\n")


ROWS = [
    (
        "boot-network-unknown",
        [("  network: mgmt\n  boot_server", "  network: mgnt\n  boot_server")],
        E,
        "provisioning.network",
        "'mgnt' is not a network of the model; did you mean 'mgmt'?",
    ),
    (
        "gateway-outside-the-boot-network",
        [("  boot_server: hal-mgmt1\n", "  boot_server: hal-mgmt1\n  gateway: 10.0.0.1\n")],
        E,
        "provisioning.gateway",
        "the gateway 10.0.0.1 is outside mgmt (172.22.0.0/16)",
    ),
    (
        "boot-server-not-management",
        [("  boot_server: hal-mgmt1\n", "  boot_server: hal-login\n")],
        E,
        "provisioning.boot_server",
        "hal-login is a login node: the boot server is a management host",
    ),
    (
        "image-not-defined",
        [("    image: dtn\n", "    image: dnt\n")],
        E,
        "nodes[4].image",
        "'dnt' is not an image under provisioning.images; did you mean 'dtn'?",
    ),
    (
        "image-on-openpower-nodes",
        [
            (
                "    addresses: {mgmt: 172.22.1.1, bmc: 172.23.1.1, ib: 172.24.1.1}\n",
                "    addresses: {mgmt: 172.22.1.1, bmc: 172.23.1.1, ib: 172.24.1.1}\n    image: dtn\n",
            )
        ],
        E,
        "nodes[6].image",
        "compute nodes are ppc64le machines: network boot serves x86-64 nodes",
    ),
    (
        "booted-host-without-mac",
        [('    boot_macs: {hal-dtn: "0c:42:a1:00:00:21"}\n', "    boot_macs: {}\n")],
        E,
        "nodes[4].boot_macs",
        "hal-dtn boots image dtn but has no boot MAC",
    ),
    (
        "mac-of-another-groups-host",
        [('{hal-dtn: "0c:42:a1:00:00:21"}', '{hal-dtn: "0c:42:a1:00:00:21", hal01: "0c:42:a1:00:00:01"}')],
        E,
        "nodes[4].boot_macs",
        "hal01 is not a host of group dtn",
    ),
    (
        "duplicate-mac",
        [
            (
                "    addresses: {mgmt: 172.22.0.3, bmc: 172.23.0.3}\n",
                '    addresses: {mgmt: 172.22.0.3, bmc: 172.23.0.3}\n    boot_macs: {hal-mgmt2: "0C-42-A1-00-00-21"}\n',
            )
        ],
        E,
        "nodes[4].boot_macs.hal-dtn",
        "MAC 0c:42:a1:00:00:21 is also hal-mgmt2's (group mgmt-aux): each boot MAC belongs to one host",
    ),
    (
        "boot-network-not-ethernet",
        [("  network: mgmt\n  boot_server: hal-mgmt1\n", "  network: ib\n  boot_server: hal-mgmt1\n")],
        E,
        "provisioning.network",
        "ib is a infiniband network: nodes boot over an ethernet network",
    ),
    (
        "static-lease-without-address",
        [(DTN_BOOTED, DTN_BOOTED.replace("{mgmt: 172.22.0.21, ", "{"))],
        E,
        "nodes[4].addresses",
        "dtn boots from the network with static leases (provisioning.dhcp: static) but has no address on mgmt",
    ),
    (
        "bmc-endpoint-outside-its-network",
        [bmc('{protocol: redfish, endpoint: "http://10.9.9.9:8000", system: "{host}", credentials: {file: /c.yml}}')],
        E,
        "nodes[4].bmc.endpoint",
        "the BMC endpoint 10.9.9.9 is outside its network bmc (172.23.0.0/16)",
    ),
    (
        "bmc-network-not-kind-bmc",
        [bmc("{protocol: ipmi, network: mgmt, credentials: {file: /c.yml}}")],
        E,
        "nodes[4].bmc.network",
        "mgmt is a ethernet network, not a network of kind bmc",
    ),
    (
        "ipmi-behind-one-endpoint",
        [bmc('{protocol: ipmi, endpoint: "http://172.23.0.1", system: "{host}", credentials: {file: /c.yml}}')],
        E,
        "nodes[4].bmc.endpoint",
        "an endpoint serves many nodes over Redfish only",
    ),
    (
        "bmc-password-in-the-model",
        [bmc("{protocol: redfish, credentials: {username: admin, password: calvin}}")],
        E,
        "nodes[4].bmc.credentials",
        "`username` writes a credential into the model: BMC credentials are never kept in cluster.yml",
    ),
    (
        "bmc-password-beside-the-protocol",
        [bmc("{protocol: ipmi, password: calvin, credentials: {file: /c.yml}}")],
        E,
        "nodes[4].bmc",
        "`password` writes a credential into the model",
    ),
    (
        "mac-not-a-mac",
        [('{hal-dtn: "0c:42:a1:00:00:21"}', '{hal-dtn: "0c:42:a1:00:21"}')],
        E,
        "nodes[4].boot_macs.hal-dtn",
        "'0c:42:a1:00:21' is not a MAC address",
    ),
]


@pytest.mark.parametrize(("steps", "level", "path", "message"), [pytest.param(*r[1:], id=r[0]) for r in ROWS])
def test_mistake_is_found(finds, steps, level, path, message):
    finds([*ROWS_START, *steps], level, path, message)


def test_the_booted_description_is_valid_and_its_views():
    loaded = validate_text(_apply(HAL_TEXT, ROWS_START), "c.yml")
    assert not has_errors(loaded.findings), [f.format() for f in loaded.findings]
    c = loaded.model
    (entry,) = c.boot_entries()
    assert entry == ("hal-dtn", "0c:42:a1:00:00:21", "172.22.0.21", "dtn", "dtn")
    target = c.bmc_of("hal-dtn")
    assert (target.protocol, target.address, target.system, target.verify_tls) == (
        "redfish",
        "https://172.23.0.21",
        None,
        True,
    )
    assert c.bmc_of("hal01") is None


def test_without_provisioning_nothing_boots():
    c = hal_with()
    assert c.provisioning is None and c.boot_entries() == [] and c.booted_groups == []
