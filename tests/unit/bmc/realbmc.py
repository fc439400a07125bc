"""Real BMCs for `hal-provision power`: sushy-tools' Redfish emulator with its fake driver and
HTTP basic authentication (a bcrypt htpasswd file, the only digest it accepts), and pyghmi's
IPMI-over-LAN BMCs (ipmi_bmc.py) for ipmitool; both in their own processes on loopback
addresses. The cluster is tests/data/clusters/baremetal.yml pointed at them, with a credentials
file in the test's temporary directory. conftest.py makes the fixtures here the directory's."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
BAREMETAL = REPO / "tests" / "data" / "clusters" / "baremetal.yml"
USER, PASSWORD = "admin", "correct horse"
EXIT_OK, EXIT_FAILED, EXIT_UNUSABLE = 0, 1, 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(ready, proc: subprocess.Popen, what: str, log: Path, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited with {proc.returncode}:\n{log.read_text()}")
        if ready():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} did not start within {seconds} s:\n{log.read_text()}")


def credentials_file(path: Path, username: str = USER, password: str = PASSWORD, mode: int = 0o600) -> Path:
    path.write_text(f"username: {username}\npassword: {password}\n")
    path.chmod(mode)
    return path


def baremetal(path: Path, credentials: str, endpoint: str | None = None, ipmi_net: str | None = None) -> Path:
    """baremetal.yml with its compute BMCs at `endpoint` (Redfish), or on IPMI at `ipmi_net`.21
    and up (bm01 ...), their credentials reference `credentials` (YAML flow text)."""
    text = BAREMETAL.read_text()

    def once(text: str, old: str, new: str) -> str:
        assert text.count(old) == 1, f"expected one {old!r} in {BAREMETAL}"  # the fixture changed: say so
        return text.replace(old, new)

    text = once(text, "credentials: {file: /etc/hal-provision/bmc/bm.yml}", f"credentials: {credentials}")
    if endpoint is not None:  # a check holds the endpoint to the BMC network
        text = once(text, "endpoint: http://10.89.82.1:8000", f"endpoint: {endpoint}")
        text = once(text, "cidr: 10.89.82.0/24", "cidr: 127.0.0.0/24")
    if ipmi_net is not None:
        text = once(text, "cidr: 10.89.82.0/24", f"cidr: {ipmi_net}.0/24")
        text = once(text, "addresses: {mgmt: 10.89.81.21}", f"addresses: {{mgmt: 10.89.81.21, bmc: {ipmi_net}.21}}")
        text, n = re.subn(
            r"      protocol: redfish\n.*?verify_tls: false\n", "      protocol: ipmi\n", text, flags=re.S
        )
        assert n == 1
    assert credentials in text
    path.write_text(text)
    return path


def hal_provision(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """The command as users run it: its own process, this checkout's package first."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    result = subprocess.run(
        [sys.executable, "-m", "hal_provision.cli", *args],
        env=dict(os.environ, PYTHONPATH=path, COLUMNS="200", **(env or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert "Traceback" not in result.stdout + result.stderr, result.stdout + result.stderr
    return result


# ---- Redfish: sushy-tools' emulator ---------------------------------------------------------

# bm04 is in the model but not behind the emulator: a system the service does not have.
SYSTEMS = {"bm01": "On", "bm02": "On", "bm03": "Off"}


@dataclass
class Redfish:
    url: str
    log: Path

    def system(self, name: str) -> dict:
        """The system as the emulator serves it, read with plain HTTP (not through the code under test)."""
        import requests

        answer = requests.get(f"{self.url}/redfish/v1/Systems/{name}", auth=(USER, PASSWORD), timeout=10)
        answer.raise_for_status()
        return answer.json()


@pytest.fixture
def redfish(tmp_path) -> Redfish:
    pytest.importorskip("sushy_tools", reason="sushy-tools (the test extra) runs the Redfish emulator")
    import bcrypt

    work = tmp_path / "emulator"
    work.mkdir()
    htpasswd = work / "htpasswd"
    # 4 rounds: each request checks the password, and the default 12 take a quarter second each
    htpasswd.write_text(f"{USER}:{bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()}\n")
    systems = [
        {"uuid": f"0000000{i}-0000-4000-8000-000000000000", "name": name, "power_state": state, "nics": []}
        for i, (name, state) in enumerate(SYSTEMS.items(), start=1)
    ]
    port = free_port()
    config = work / "emulator.conf"
    config.write_text(
        f"SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\n"
        f"SUSHY_EMULATOR_LISTEN_PORT = {port}\n"
        f"SUSHY_EMULATOR_FAKE_DRIVER = True\n"
        f"SUSHY_EMULATOR_FAKE_SYSTEMS = {systems!r}\n"
        f"SUSHY_EMULATOR_AUTH_FILE = {str(htpasswd)!r}\n"
        f"SUSHY_EMULATOR_STATE_DIR = {str(work / 'state')!r}\n"
    )
    log = work / "emulator.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from sushy_tools.emulator.main import main; main()", "--config", str(config)],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            return False

    try:
        wait_for(answers, proc, "sushy-emulator", log)
        yield Redfish(url, log)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# ---- IPMI: pyghmi's BMC server, driven by ipmitool --------------------------------------------


@dataclass
class Ipmi:
    net: str  # bm01's BMC is NET.21, bm02's NET.22, ...
    states: Path  # bm01's state is STATES/bm01.json

    def board(self, host: str) -> dict:
        return json.loads((self.states / f"{host}.json").read_text())


@pytest.fixture
def ipmi(tmp_path) -> Ipmi:
    pytest.importorskip("pyghmi", reason="pyghmi (the test extra) runs the IPMI BMCs")
    if shutil.which("ipmitool") is None:
        pytest.skip("ipmitool is not installed (Debian: apt-get install ipmitool; bootstrap.sh installs it)")
    if os.geteuid() != 0:
        pytest.skip("the IPMI BMCs listen on port 623, which only root may bind (ipmitool cannot be given a port)")
    # a /24 of the loopback network of this test's own: bm01..bm04 at .21 to .24
    net = f"127.{random.randint(100, 254)}.{random.randint(1, 254)}"
    states = tmp_path / "ipmi"
    states.mkdir()
    procs = []
    try:
        for n in range(1, 5):
            host, log = f"bm{n:02d}", states / f"bm{n:02d}.log"
            with log.open("w") as sink:
                proc = subprocess.Popen(
                    [sys.executable, str(Path(__file__).with_name("ipmi_bmc.py")), str(states / f"{host}.json")]
                    + [USER, PASSWORD, f"{net}.{20 + n}"],
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                )
            procs.append(proc)
            wait_for(lambda: "ready" in log.read_text(), proc, f"{host}'s IPMI BMC", log)
        yield Ipmi(net, states)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=10)
