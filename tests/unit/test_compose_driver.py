"""The composable pools' driver contract (issue 33 item 2): the REST driver against a real HTTP
server on 127.0.0.1 replaying tests/data/compose/rest/, the sandbox driver's podman command
lines (a fake runner records them; podman does not run here), a site's own program, and one
contract test that puts every built-in driver through the same sequence."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from hal_provision.compose import contract, driver
from hal_provision.compose.sandbox import SandboxDriver

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "compose"
CONFIG = DATA / "composable.json"


# ---- a real HTTP server replaying a response set --------------------------------------------

class ReplayServer:
    """Serves one response set's exchanges, in order, on 127.0.0.1 (port 0); records every
    request that is not the next one expected."""

    def __init__(self, name: str):
        self.exchanges = json.loads((DATA / "rest" / f"{name}.json").read_text())["exchanges"]
        self.next, self.unexpected = 0, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                got = {"method": self.command, "path": self.path, **({"body": body} if body is not None else {})}
                if outer.next < len(outer.exchanges) and outer.exchanges[outer.next]["request"] == got:
                    response = outer.exchanges[outer.next]["response"]
                    outer.next += 1
                else:
                    outer.unexpected.append(got)
                    response = {"status": 418, "body": {"message": f"unexpected request {got}"}}
                raw = json.dumps(response["body"]).encode()
                self.send_response(response["status"])
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_POST = _serve

            def log_message(self, *args):
                pass

        self.httpd = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    def all_served(self):
        assert not self.unexpected, f"requests not in the response set: {self.unexpected}"
        assert self.next == len(self.exchanges), f"{len(self.exchanges) - self.next} expected request(s) never sent"


def rest(url: str, *command: str) -> tuple[dict, int]:
    return driver.run(["--driver", "rest", "--pool", "chassis1", "--url", url, *command])


# ---- the REST driver ------------------------------------------------------------------------

def test_rest_list():
    with ReplayServer("list") as server:
        answer, code = rest(server.url, "list")
    server.all_served()
    assert code == 0
    assert answer == {"pool": "chassis1", "gpu_type": "v100", "total": 8, "hosts": {"hal01": 4, "hal02": 0}, "free": 4}


@pytest.mark.parametrize("action, after", [("attach", {"hal01": 6, "hal02": 0}), ("detach", {"hal01": 4, "hal02": 0})])
def test_rest_attach_and_detach(action, after):
    with ReplayServer(action) as server:
        answer, code = rest(server.url, action, "hal01", "2")
    server.all_served()
    assert (code, answer) == (0, {"pool": "chassis1", "action": action, "host": "hal01", "count": 2,
                                  "hosts": after, "free": 8 - sum(after.values())})


def test_rest_409_is_a_one_line_refusal():
    with ReplayServer("refused-409") as server:
        answer, code = rest(server.url, "attach", "hal02", "2")
    server.all_served()
    assert code == 1
    assert answer == {"error": f"the fabric manager refused POST {server.url}/v1/pools/chassis1/attach: HTTP 409: "
                               "GPU slot 7 of chassis1 is being reset; try again later"}


def test_rest_500_is_a_one_line_driver_error():
    with ReplayServer("server-error-500") as server:
        answer, code = rest(server.url, "list")
    server.all_served()
    assert code == 2
    assert answer == {"error": f"the fabric manager failed GET {server.url}/v1/pools/chassis1: HTTP 500: "
                               "internal error: fabric switch 2 does not answer"}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_rest_unreachable_server_through_the_command_line():
    """The real entry point in a child process: one JSON line on stdout, exit 2, no traceback."""
    url = f"http://127.0.0.1:{_closed_port()}"
    proc = subprocess.run([sys.executable, "-m", "hal_provision.compose.driver", "--driver", "rest", "--pool", "chassis1",
                           "--url", url, "attach", "hal01", "1"], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == ""
    assert json.loads(proc.stdout) == {"error": f"cannot reach the fabric manager at {url}: Connection refused"}
    assert proc.stdout.count("\n") == 1


def test_rest_needs_a_url():
    assert driver.run(["--driver", "rest", "--pool", "chassis1", "list"]) == (
        {"error": "the rest driver needs --url, the fabric manager's base URL"}, 2)


# ---- the sandbox driver, with a fake podman ----------------------------------------------------

class RecordingFakePodman:
    """Stands in for podman: records each argv list and keeps each container's /dev/nvidia<k>
    as a set, so the command lines can be checked. A test of the command lines, not a claim
    that podman ran."""

    def __init__(self, devices: dict[str, set[int]], fail_on: str | None = None):
        self.devices, self.fail_on, self.calls = devices, fail_on, []

    def __call__(self, argv: list[str]) -> subprocess.CompletedProcess:
        self.calls.append(argv)
        assert argv[:2] == ["podman", "exec"], argv
        host, cmd = argv[2], argv[3:]
        if host not in self.devices:
            return subprocess.CompletedProcess(argv, 125, "", f"Error: no container with name or ID \"{host}\" found\n")
        if self.fail_on and self.fail_on in cmd:
            return subprocess.CompletedProcess(argv, 1, "", f"{cmd[0]}: {self.fail_on}: Operation not permitted\n")
        if cmd[0] == "find":
            return subprocess.CompletedProcess(argv, 0, "".join(f"/dev/nvidia{k}\n" for k in sorted(self.devices[host])), "")
        if cmd[0] == "mknod":
            self.devices[host].add(int(cmd[-1]))
        elif cmd[:2] == ["rm", "-f"]:
            self.devices[host] -= {int(p.removeprefix("/dev/nvidia")) for p in cmd[2:]}
        else:
            raise AssertionError(f"unexpected command {argv}")
        return subprocess.CompletedProcess(argv, 0, "", "")


def sandbox(tmp_path, fake) -> SandboxDriver:
    config = contract.read_config(CONFIG)
    pool = contract.pool_from_config(config, "chassis1")
    return SandboxDriver(pool, contract.active_holding(config, pool), tmp_path / "state.json", runner=fake)


FIND = ["find", "/dev", "-maxdepth", "1", "-name", "nvidia[0-9]*"]


def test_sandbox_state_starts_from_the_active_layout_checked_against_the_devices(tmp_path):
    # hal01: 2 GPUs of its own and the active layout's 4 of the pool
    fake = RecordingFakePodman({"hal01": set(range(6)), "hal02": set()})
    assert sandbox(tmp_path, fake).list()["hosts"] == {"hal01": 4, "hal02": 0}
    assert fake.calls == [["podman", "exec", "hal01", *FIND], ["podman", "exec", "hal02", *FIND]]
    assert json.loads((tmp_path / "state.json").read_text()) == {"pool": "chassis1", "hosts": {"hal01": 4, "hal02": 0}}
    fake.calls.clear()
    sandbox(tmp_path, fake).list()
    assert fake.calls == []  # the state file answers from now on


def test_sandbox_attach_makes_the_next_device_files(tmp_path):
    fake = RecordingFakePodman({"hal01": set(range(6)), "hal02": set()})
    answer = sandbox(tmp_path, fake).attach("hal01", 2)
    assert answer["hosts"] == {"hal01": 6, "hal02": 0} and answer["free"] == 2
    assert fake.calls[2:] == [
        ["podman", "exec", "hal01", *FIND],
        ["podman", "exec", "hal01", "mknod", "-m", "0666", "/dev/nvidia6", "c", "195", "6"],
        ["podman", "exec", "hal01", "mknod", "-m", "0666", "/dev/nvidia7", "c", "195", "7"],
    ]
    assert fake.devices["hal01"] == set(range(8))


def test_sandbox_detach_removes_the_highest(tmp_path):
    fake = RecordingFakePodman({"hal01": set(range(6)), "hal02": set()})
    sandbox(tmp_path, fake).detach("hal01", 3)
    assert fake.calls[-1] == ["podman", "exec", "hal01", "rm", "-f", "/dev/nvidia3", "/dev/nvidia4", "/dev/nvidia5"]
    assert fake.devices["hal01"] == {0, 1, 2}
    assert json.loads((tmp_path / "state.json").read_text())["hosts"] == {"hal01": 1, "hal02": 0}


def test_sandbox_failed_mknod_undoes_and_keeps_the_state(tmp_path):
    fake = RecordingFakePodman({"hal01": set(range(4)), "hal02": set()}, fail_on="/dev/nvidia5")
    d = sandbox(tmp_path, fake)
    d.list()
    with pytest.raises(contract.DriverError, match=r"mknod .*/dev/nvidia5 .* failed: mknod: /dev/nvidia5: Operation not permitted"):
        d.attach("hal01", 2)
    assert fake.calls[-1] == ["podman", "exec", "hal01", "rm", "-f", "/dev/nvidia4"]
    assert fake.devices["hal01"] == set(range(4))
    assert json.loads((tmp_path / "state.json").read_text())["hosts"] == {"hal01": 4, "hal02": 0}


def test_sandbox_refuses_to_start_when_devices_are_missing(tmp_path):
    fake = RecordingFakePodman({"hal01": {0, 1}, "hal02": set()})
    with pytest.raises(contract.DriverError, match="hal01 has 2 /dev/nvidia.* fewer than the 4 pool GPU"):
        sandbox(tmp_path, fake).list()
    assert not (tmp_path / "state.json").exists()


def test_sandbox_missing_container_is_a_one_line_error(tmp_path):
    fake = RecordingFakePodman({"hal01": set(range(4))})
    with pytest.raises(contract.DriverError, match='podman exec hal02 find .* failed: Error: no container with name or ID "hal02" found$'):
        sandbox(tmp_path, fake).list()


def test_sandbox_needs_config_and_state():
    assert driver.run(["--driver", "sandbox", "--pool", "chassis1", "list"]) == (
        {"error": "the sandbox driver needs --config (the rendered composable.json) and --state"}, 2)


def test_sandbox_unknown_pool_names_the_known_ones(tmp_path):
    answer, code = driver.run(["--driver", "sandbox", "--pool", "chassis9", "--config", str(CONFIG),
                               "--state", str(tmp_path / "s.json"), "list"])
    assert (answer, code) == ({"error": f"{CONFIG} has no pool 'chassis9' (pools: chassis1)"}, 2)


# ---- the contract test: every built-in driver, the same sequence, the same answers -------------

def _pool(h1: int, h2: int) -> dict:
    return {"hosts": {"hal01": h1, "hal02": h2}, "free": 8 - h1 - h2}


SEQUENCE = [
    (["list"], 0, {"pool": "chassis1", "gpu_type": "v100", "total": 8, **_pool(4, 0)}),
    (["attach", "hal01", "2"], 0, {"pool": "chassis1", "action": "attach", "host": "hal01", "count": 2, **_pool(6, 0)}),
    (["detach", "hal01", "2"], 0, {"pool": "chassis1", "action": "detach", "host": "hal01", "count": 2, **_pool(4, 0)}),
    (["attach", "hal01", "3"], 1, {"error": "hal01 holds 4 of pool chassis1's GPUs and has 6 slots: 3 more do not fit"}),
    (["attach", "hal02", "5"], 1, {"error": "pool chassis1 has 4 free GPU(s), 5 asked for hal02"}),
    (["attach", "hal03", "1"], 1, {"error": "host hal03 is not cabled to pool chassis1 (its hosts: hal01, hal02)"}),
    (["detach", "hal02", "1"], 1, {"error": "hal02 holds 0 of pool chassis1's GPUs, 1 asked to detach"}),
]


@pytest.mark.parametrize("kind", ["sandbox-with-recording-fake-podman", "rest-against-local-http-server"])
def test_contract_sequence(kind, tmp_path, monkeypatch):
    if kind.startswith("sandbox"):
        fake = RecordingFakePodman({"hal01": set(range(6)), "hal02": set()})
        monkeypatch.setattr("hal_provision.compose.sandbox.podman", fake)
        common = ["--driver", "sandbox", "--config", str(CONFIG), "--state", str(tmp_path / "state.json")]
        server = None
    else:
        server = ReplayServer("contract-sequence").__enter__()
        common = ["--driver", "rest", "--url", server.url]
    try:
        for command, code, expected in SEQUENCE:
            answer, got = driver.run([*common, "--pool", "chassis1", *command])
            assert contract.shape_problems(command[0], answer) == []
            assert (answer, got) == (expected, code), command
    finally:
        if server is not None:
            server.__exit__(None, None, None)
    if server is not None:
        server.all_served()
    else:
        assert any("mknod" in c for c in fake.calls) and any("rm" in c for c in fake.calls)
        assert fake.devices["hal01"] == set(range(6))  # attached and detached again; refusals touched nothing


# ---- a site's own program --------------------------------------------------------------------

def _site_program(tmp_path, body: str) -> Path:
    program = tmp_path / "site-driver"
    program.write_text(f"#!{sys.executable}\nimport json, sys\nargv = sys.argv[1:]\n{body}\n")
    program.chmod(0o755)
    return program


def test_site_program_gets_the_arguments_minus_driver(tmp_path):
    program = _site_program(tmp_path, 'open(sys.argv[0] + ".argv", "w").write(json.dumps(argv))\n'
                                      'print(json.dumps({"pool": "chassis1", "gpu_type": "a100", "total": 2, '
                                      '"hosts": {"n1": 1}, "free": 1}))')
    answer, code = driver.run(["--driver", str(program), "--pool", "chassis1", "--url", "http://x", "list"])
    assert (answer, code) == ({"pool": "chassis1", "gpu_type": "a100", "total": 2, "hosts": {"n1": 1}, "free": 1}, 0)
    assert json.loads(Path(f"{program}.argv").read_text()) == ["--pool", "chassis1", "--url", "http://x", "list"]


def test_site_program_refusal_passes_through(tmp_path):
    program = _site_program(tmp_path, 'print(json.dumps({"error": "chassis offline"})); sys.exit(1)')
    assert driver.run(["--driver", str(program), "--pool", "p", "attach", "n1", "1"]) == ({"error": "chassis offline"}, 1)


@pytest.mark.parametrize("body, message", [
    ('print(json.dumps({"pool": "p", "hosts": {}}))',
     "the driver program {p}'s answer breaks the contract: 'free' is missing; 'action' is missing; 'host' is missing; "
     "'count' is missing"),
    ('print("done")', "the driver program {p} exited 0 without a JSON answer"),
    ('sys.stderr.write("Traceback: boom\\n"); sys.exit(3)', "the driver program {p} exited 3 without a JSON answer: Traceback: boom"),
])
def test_site_program_breaking_the_contract_is_a_driver_error(tmp_path, body, message):
    program = _site_program(tmp_path, body)
    answer, code = driver.run(["--driver", str(program), "--pool", "p", "attach", "n1", "1"])
    assert (answer, code) == ({"error": message.format(p=program)}, 2)


def test_site_program_must_exist(tmp_path):
    assert driver.run(["--driver", str(tmp_path / "nope"), "--pool", "p", "list"]) == (
        {"error": f"the driver program {tmp_path / 'nope'} does not exist or is not executable"}, 2)
