"""`hal-provision power` over IPMI: Debian's ipmitool (-I lanplus) against pyghmi's BMC server
(ipmi_bmc.py), one BMC per node of baremetal.yml at its address on a loopback BMC network. The
BMCs start off and keep their state; a cycle of a machine that is off is refused by them, as by
real ones."""

from __future__ import annotations

import json

import pytest
from realbmc import EXIT_FAILED, EXIT_OK, PASSWORD, USER, baremetal, credentials_file, hal_provision


@pytest.fixture
def cluster(tmp_path, ipmi):
    creds = credentials_file(tmp_path / "bm.yml")
    return str(baremetal(tmp_path / "cluster.yml", f"{{file: {creds}}}", ipmi_net=ipmi.net))


def power(*args: str):
    return hal_provision("power", *args)


def test_status_on_off_and_cycle(cluster, ipmi):
    assert power("status", "bm[01-04]", "-f", cluster).stdout == "bm[01-04]: off\n"
    result = power("on", "bm[01-02]", "-f", cluster)
    assert (result.returncode, result.stdout) == (EXIT_OK, "bm[01-02]: power on sent\n"), result.stderr
    assert [ipmi.board(h)["power"] for h in ("bm01", "bm02", "bm03")] == ["on", "on", "off"]
    assert power("status", "bm[01-04]", "-f", cluster).stdout == "bm[01-02]: on\nbm[03-04]: off\n"
    result = power("cycle", "bm[02-03]", "-f", cluster)
    assert (result.returncode, result.stdout) == (EXIT_OK, "bm02: power cycle sent\nbm03: was off: power on sent\n")
    result = power("off", "bm01", "-f", cluster, "--wait", "10")
    assert (result.returncode, result.stdout) == (EXIT_OK, "bm01: off\n")
    result = power("status", "bm[01-04]", "-f", cluster, "--json")
    assert json.loads(result.stdout)["folded"] == [
        {"hosts": "bm[01,04]", "count": 2, "ok": True, "result": "off"},
        {"hosts": "bm[02-03]", "count": 2, "ok": True, "result": "on"},
    ]


def test_next_boot_from_the_network_once(cluster, ipmi):
    from hal_provision.bmc import credentials, power as lib
    from hal_provision.loader import validate

    target = validate(cluster).model.bmc_of("bm03")
    assert target.protocol == "ipmi" and target.address == f"{ipmi.net}.23"
    assert lib.set_next_boot_network(target, credentials.load(target.credentials)) == "next boot: network (PXE), once"
    assert ipmi.board("bm03") == {"power": "off", "bootdev": "network", "persistent": False}
    assert ipmi.board("bm04")["bootdev"] is None


def test_wrong_password_is_refused_readably(tmp_path, ipmi):
    creds = credentials_file(tmp_path / "wrong.yml", password="battery staple")
    cluster = baremetal(tmp_path / "cluster.yml", f"{{file: {creds}}}", ipmi_net=ipmi.net)
    result = power("on", "bm01", "-f", str(cluster))
    assert result.returncode == EXIT_FAILED
    assert result.stdout == (
        f"bm01: error: no IPMI session with {ipmi.net}.21: wrong username or password, IPMI over LAN off, "
        "or no answer\n"
    )
    assert ipmi.board("bm01")["power"] == "off"


def test_the_password_is_never_on_the_command_line():
    from hal_provision.bmc import credentials, ipmi as lib
    from hal_provision.model import BmcTarget

    creds = credentials.Credentials(USER, PASSWORD)
    argv = lib.command(BmcTarget("bm01", "ipmi", "127.0.0.1", None, True, None), creds, "chassis", "power", "status")
    assert PASSWORD not in " ".join(argv) and "-E" in argv  # ipmitool reads it from IPMI_PASSWORD
    assert PASSWORD not in repr(creds)
