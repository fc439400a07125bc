"""`hal-provision power` against a real Redfish service: sushy-tools' emulator (fake driver, HTTP
basic authentication), reached through baremetal.yml's endpoint. bm01 and bm02 start on, bm03
off; bm04 is in the model but the service has no such system. The fake driver applies a power
change 1 to 11 s after it is asked, as hardware does: the tests that change power wait for it
(--wait)."""

from __future__ import annotations

import json
import time

import pytest
from realbmc import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNUSABLE,
    baremetal,
    credentials_file,
    free_port,
    hal_provision,
)

WAIT = "30"  # the fake driver's longest delay is 11 s


@pytest.fixture
def cluster(tmp_path, redfish):
    creds = credentials_file(tmp_path / "bm.yml")
    return str(baremetal(tmp_path / "cluster.yml", f"{{file: {creds}}}", endpoint=redfish.url))


def power(*args: str, **kwargs):
    return hal_provision("power", *args, **kwargs)


def test_status_folds_hosts_with_the_same_state(cluster, redfish):
    result = power("status", "bm[01-04]", "--file", cluster)
    assert result.stdout == (f"bm[01-02]: on\nbm03: off\nbm04: error: {redfish.url} has no system 'bm04'\n")
    assert result.returncode == EXIT_FAILED
    assert result.stderr == "1 of 4 BMCs failed\n"


def test_status_as_json(cluster):
    result = power("status", "bm[01-03]", "-f", cluster, "--json")
    assert result.returncode == EXIT_OK, result.stderr
    doc = json.loads(result.stdout)
    assert doc["hosts"] == {
        "bm01": {"ok": True, "result": "on"},
        "bm02": {"ok": True, "result": "on"},
        "bm03": {"ok": True, "result": "off"},
    }
    assert doc["folded"] == [
        {"hosts": "bm[01-02]", "count": 2, "ok": True, "result": "on"},
        {"hosts": "bm03", "count": 1, "ok": True, "result": "off"},
    ]
    assert doc["action"] == "status" and doc["failed"] == 0


def test_on_and_off_reach_the_state_asked_for(cluster, redfish):
    result = power("on", "bm03", "-f", cluster, "--wait", WAIT)
    assert (result.returncode, result.stdout) == (EXIT_OK, "bm03: on\n"), result.stderr
    assert redfish.system("bm03")["PowerState"] == "On"
    result = power("off", "bm[01-02]", "-f", cluster, "--wait", WAIT)
    assert (result.returncode, result.stdout) == (EXIT_OK, "bm[01-02]: off\n"), result.stderr
    assert power("status", "bm[01-03]", "-f", cluster).stdout == "bm[01-02]: off\nbm03: on\n"


def test_without_wait_prints_what_was_sent(cluster, redfish):
    result = power("on", "bm03", "-f", cluster)
    assert (result.returncode, result.stdout) == (EXIT_OK, "bm03: power on sent\n")
    result = power("off", "bm01", "-f", cluster)
    assert (result.returncode, result.stdout) == (EXIT_OK, "bm01: power off sent\n")


def test_cycle_restarts_a_node_that_is_on_and_starts_one_that_is_off(cluster, redfish):
    result = power("cycle", "bm[02-03]", "-f", cluster)
    assert result.returncode == EXIT_OK, result.stderr
    assert result.stdout == "bm02: power cycle sent\nbm03: was off: power on sent\n"
    result = power("cycle", "bm02", "-f", cluster, "--wait", WAIT)
    assert (result.returncode, result.stdout) == (EXIT_OK, "bm02: on\n"), result.stderr
    assert redfish.system("bm02")["PowerState"] == "On"


def test_next_boot_from_the_network(cluster, redfish):
    """What `reimage` asks first: a one-time PXE boot override (the emulator keeps the target and
    reports every override as Continuous: it ignores BootSourceOverrideEnabled)."""
    from hal_provision.bmc import credentials, power as lib
    from hal_provision.loader import validate

    model = validate(cluster).model
    target = model.bmc_of("bm01")
    assert redfish.system("bm01")["Boot"]["BootSourceOverrideTarget"] == "Hdd"
    said = lib.set_next_boot_network(target, credentials.load(target.credentials))
    assert said == "next boot: network (PXE), once"
    assert redfish.system("bm01")["Boot"]["BootSourceOverrideTarget"] == "Pxe"
    assert redfish.system("bm02")["Boot"]["BootSourceOverrideTarget"] == "Hdd"


def test_wrong_password_is_refused_readably(tmp_path, redfish):
    creds = credentials_file(tmp_path / "wrong.yml", password="battery staple")
    cluster = baremetal(tmp_path / "cluster.yml", f"{{file: {creds}}}", endpoint=redfish.url)
    result = power("on", "bm[01-03]", "-f", str(cluster))
    assert result.returncode == EXIT_FAILED
    assert result.stdout == "bm[01-03]: error: refused the credentials (HTTP 401): wrong username or password?\n"
    assert redfish.system("bm03")["PowerState"] == "Off"  # nothing was done


def test_an_unreachable_bmc_fails_in_seconds(tmp_path):
    creds = credentials_file(tmp_path / "bm.yml")
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    cluster = baremetal(tmp_path / "cluster.yml", f"{{file: {creds}}}", endpoint=endpoint)
    started = time.monotonic()
    result = power("status", "bm[01-04]", "-f", str(cluster), "--timeout", "2")
    assert result.returncode == EXIT_FAILED
    assert result.stdout == f"bm[01-04]: error: cannot reach {endpoint}: connection refused\n"
    assert time.monotonic() - started < 20


# ---- refused before any BMC is asked ---------------------------------------------------------


def test_credentials_readable_by_others_are_refused(tmp_path, redfish):
    creds = credentials_file(tmp_path / "bm.yml", mode=0o644)
    cluster = baremetal(tmp_path / "cluster.yml", f"{{file: {creds}}}", endpoint=redfish.url)
    result = power("on", "bm03", "-f", str(cluster))
    assert result.returncode == EXIT_UNUSABLE
    assert result.stdout == ""
    assert f"error: {creds}: the BMC credentials file has mode 0644, readable by others: chmod 600 {creds}" in (
        result.stderr.replace("\n", " ")
    )
    assert redfish.system("bm03")["PowerState"] == "Off"


def test_a_host_without_a_bmc_is_refused(cluster):
    result = power("status", "bm-mgmt,bm01", "-f", cluster)
    assert result.returncode == EXIT_UNUSABLE
    assert result.stdout == ""
    assert "error: bm-mgmt: node group 'mgmt' has no `bmc`" in result.stderr


def test_an_unknown_host_is_refused_with_the_nearest_name(cluster):
    result = power("off", "bn01", "-f", cluster)
    assert result.returncode == EXIT_UNUSABLE
    assert result.stderr == "error: bn01: not a host of cluster 'bm'; did you mean 'bm01'?\n"


def test_every_problem_is_named_at_once(cluster):
    result = power("status", "bm-mgmt,bm[01-02],x[1-3]", "-f", cluster)
    assert result.returncode == EXIT_UNUSABLE
    assert result.stderr.splitlines()[:2] == [
        "error: x[1-3]: not a host of cluster 'bm'",
        "error: bm-mgmt: node group 'mgmt' has no `bmc` (say how to reach its BMCs: protocol, credentials)",
    ]


def test_a_bad_hostlist_is_refused(cluster):
    result = power("status", "bm[01-", "-f", cluster)
    assert result.returncode == EXIT_UNUSABLE
    assert result.stderr.startswith("error: HOSTLIST: ")


def test_the_embedded_hal_description_has_no_bmc():
    result = power("status", "hal01")
    assert result.returncode == EXIT_UNUSABLE
    assert "has no `bmc`" in result.stderr
