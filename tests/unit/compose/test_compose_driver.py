"""The composable pools' driver contract: the REST driver against a real HTTP
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

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data" / "compose"
CONFIG = DATA / "composable.json"


# ---- a real HTTP server replaying a response set --------------------------------------------


class ReplayServer:
    """Serves one response set's exchanges, in order, on 127.0.0.1 (port 0); records every
    request that is not the next one expected. A response's "raw" (bytes) is sent as it is,
    for answers json.dumps cannot write (1e999, a bad encoding)."""

    def __init__(self, name: str | None = None, exchanges: list[dict] | None = None):
        self.exchanges = (
            exchanges if name is None else json.loads((DATA / "rest" / f"{name}.json").read_text())["exchanges"]
        )
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
                raw = response["raw"] if "raw" in response else json.dumps(response["body"]).encode()
                self.send_response(response["status"])
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                try:
                    self.wfile.write(raw)
                except (BrokenPipeError, ConnectionResetError):  # a client that stops reading an oversized answer
                    pass

            do_GET = do_POST = _serve

            def log_message(self, *args):
                pass

        self.httpd = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        # shutdown() waits for serve_forever's next poll: 0.5 s by default, for each server
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)

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
    assert (code, answer) == (
        0,
        {
            "pool": "chassis1",
            "action": action,
            "host": "hal01",
            "count": 2,
            "hosts": after,
            "free": 8 - sum(after.values()),
        },
    )


def test_rest_409_is_a_one_line_refusal():
    with ReplayServer("refused-409") as server:
        answer, code = rest(server.url, "attach", "hal02", "2")
    server.all_served()
    assert code == 1
    assert answer == {
        "error": f"the fabric manager refused POST {server.url}/v1/pools/chassis1/attach: HTTP 409: "
        "GPU slot 7 of chassis1 is being reset; try again later"
    }


def test_rest_500_is_a_one_line_driver_error():
    with ReplayServer("server-error-500") as server:
        answer, code = rest(server.url, "list")
    server.all_served()
    assert code == 2
    assert answer == {
        "error": f"the fabric manager failed GET {server.url}/v1/pools/chassis1: HTTP 500: "
        "internal error: fabric switch 2 does not answer"
    }


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_rest_unreachable_server_through_the_command_line():
    """The real entry point in a child process: one JSON line on stdout, exit 2, no traceback."""
    url = f"http://127.0.0.1:{_closed_port()}"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "hal_provision.compose.driver",
            "--driver",
            "rest",
            "--pool",
            "chassis1",
            "--url",
            url,
            "attach",
            "hal01",
            "1",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == ""
    assert json.loads(proc.stdout) == {"error": f"cannot reach the fabric manager at {url}: Connection refused"}
    assert proc.stdout.count("\n") == 1


def test_rest_needs_a_url():
    assert driver.run(["--driver", "rest", "--pool", "chassis1", "list"]) == (
        {"error": "the rest driver needs --url, the fabric manager's base URL"},
        2,
    )


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
            return subprocess.CompletedProcess(argv, 125, "", f'Error: no container with name or ID "{host}" found\n')
        if self.fail_on and self.fail_on in cmd:
            return subprocess.CompletedProcess(argv, 1, "", f"{cmd[0]}: {self.fail_on}: Operation not permitted\n")
        if cmd[0] == "find":
            return subprocess.CompletedProcess(
                argv, 0, "".join(f"/dev/nvidia{k}\n" for k in sorted(self.devices[host])), ""
            )
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
    with pytest.raises(
        contract.DriverError, match=r"mknod .*/dev/nvidia5 .* failed: mknod: /dev/nvidia5: Operation not permitted"
    ):
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
    with pytest.raises(
        contract.DriverError,
        match='podman exec hal02 find .* failed: Error: no container with name or ID "hal02" found$',
    ):
        sandbox(tmp_path, fake).list()


def test_sandbox_needs_config_and_state():
    assert driver.run(["--driver", "sandbox", "--pool", "chassis1", "list"]) == (
        {"error": "the sandbox driver needs --config (the rendered composable.json) and --state"},
        2,
    )


def test_sandbox_unknown_pool_names_the_known_ones(tmp_path):
    answer, code = driver.run(
        [
            "--driver",
            "sandbox",
            "--pool",
            "chassis9",
            "--config",
            str(CONFIG),
            "--state",
            str(tmp_path / "s.json"),
            "list",
        ]
    )
    assert (answer, code) == ({"error": f"{CONFIG} has no pool 'chassis9' (pools: chassis1)"}, 2)


# ---- the contract test: every built-in driver, the same sequence, the same answers -------------


def _pool(h1: int, h2: int) -> dict:
    return {"hosts": {"hal01": h1, "hal02": h2}, "free": 8 - h1 - h2}


SEQUENCE = [
    (["list"], 0, {"pool": "chassis1", "gpu_type": "v100", "total": 8, **_pool(4, 0)}),
    (["attach", "hal01", "2"], 0, {"pool": "chassis1", "action": "attach", "host": "hal01", "count": 2, **_pool(6, 0)}),
    (["detach", "hal01", "2"], 0, {"pool": "chassis1", "action": "detach", "host": "hal01", "count": 2, **_pool(4, 0)}),
    (
        ["attach", "hal01", "3"],
        1,
        {"error": "hal01 holds 4 of pool chassis1's GPUs and has 6 slots: 3 more do not fit"},
    ),
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
    program = _site_program(
        tmp_path,
        'open(sys.argv[0] + ".argv", "w").write(json.dumps(argv))\n'
        'print(json.dumps({"pool": "chassis1", "gpu_type": "a100", "total": 2, '
        '"hosts": {"n1": 1}, "free": 1}))',
    )
    answer, code = driver.run(["--driver", str(program), "--pool", "chassis1", "--url", "http://x", "list"])
    assert (answer, code) == ({"pool": "chassis1", "gpu_type": "a100", "total": 2, "hosts": {"n1": 1}, "free": 1}, 0)
    assert json.loads(Path(f"{program}.argv").read_text()) == ["--pool", "chassis1", "--url", "http://x", "list"]


def test_site_program_refusal_passes_through(tmp_path):
    program = _site_program(tmp_path, 'print(json.dumps({"error": "chassis offline"})); sys.exit(1)')
    assert driver.run(["--driver", str(program), "--pool", "p", "attach", "n1", "1"]) == (
        {"error": "chassis offline"},
        1,
    )


@pytest.mark.parametrize(
    "body, message",
    [
        (
            'print(json.dumps({"pool": "p", "hosts": {}}))',
            "the driver program {p}'s answer breaks the contract: 'free' is missing; 'action' is missing; 'host' is missing; "
            "'count' is missing",
        ),
        ('print("done")', "the driver program {p} exited 0 without a JSON answer (Expecting value at line 1 column 1)"),
        (
            'sys.stderr.write("Traceback: boom\\n"); sys.exit(3)',
            "the driver program {p} exited 3 without a JSON answer (Expecting value at line 1 column 1): Traceback: boom",
        ),
    ],
)
def test_site_program_breaking_the_contract_is_a_driver_error(tmp_path, body, message):
    program = _site_program(tmp_path, body)
    answer, code = driver.run(["--driver", str(program), "--pool", "p", "attach", "n1", "1"])
    assert (answer, code) == ({"error": message.format(p=program)}, 2)


def test_site_program_must_exist(tmp_path):
    assert driver.run(["--driver", str(tmp_path / "nope"), "--pool", "p", "list"]) == (
        {"error": f"the driver program {tmp_path / 'nope'} does not exist or is not executable"},
        2,
    )


# ---- hostile input: every failure an exit 2 with one JSON error, never a traceback ----------
#
# What the driver reads (the fabric manager's answers, the sandbox's state file, composable.json,
# the command line's count, a site program's answer) is crafted here to break the contract:
# numbers JSON cannot hold (1e999, NaN, Infinity), nesting past any use, counts that are not
# whole numbers from 0, holdings beyond the pool. Each must be an exit 2 with one named error on
# stdout and nothing changed: no POST reaches the fabric manager, no state file is written.

LAST_RESORT = "the driver failed:"  # run()'s answer to an exception nothing else caught


def drive(capsys, *argv: str) -> tuple[int, dict]:
    """The entry point in this process: its exit code and its one JSON line."""
    code = driver.main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and err == ""
    assert out.count("\n") == 1
    answer = json.loads(out)
    assert set(answer) == {"error"} or code == 0, answer
    assert code == 0 or not answer["error"].startswith(LAST_RESORT), answer
    return code, answer


def status_text(hal01="4", hal02="0", total="8", slots="6", pool='"chassis1"', extra="") -> bytes:
    """The API's pool status with each value a raw JSON fragment, so 1e999 and NaN can be put in."""
    return (
        f'{{"pool": {pool}, "gpu": {{"type": "v100", "model": "NVIDIA Tesla V100-SXM2-16GB", "total": {total}}}, '
        f'"slots_per_host": {slots}, "hosts": [{{"name": "hal01", "attached": {hal01}}}, '
        f'{{"name": "hal02", "attached": {hal02}}}]{extra}}}'
    ).encode()


GET = {"method": "GET", "path": "/v1/pools/chassis1"}
NOT_JSON = "GET {url}/v1/pools/chassis1 answered something that is not JSON"
STATUS = "the fabric manager's pool status"
NOT_A_COUNT = "not a number of GPUs (a whole number from 0)"

HOSTILE_STATUS = [
    ("total-1e999", status_text(total="1e999"), f"{NOT_JSON} (1e999 is too large a number)"),
    ("attached-1E400", status_text(hal01="1E400"), f"{NOT_JSON} (1E400 is too large a number)"),
    ("attached-NaN", status_text(hal01="NaN"), f"{NOT_JSON} (NaN is not a JSON number)"),
    ("total-Infinity", status_text(total="Infinity"), f"{NOT_JSON} (Infinity is not a JSON number)"),
    ("attached-minus-Infinity", status_text(hal02="-Infinity"), f"{NOT_JSON} (-Infinity is not a JSON number)"),
    ("total-40-digits", status_text(total="9" * 40), f"{NOT_JSON} (a number of 40 digits is too large)"),
    (
        "nested-100000-deep",
        status_text(extra=', "vendor": ' + "[" * 100_000 + "]" * 100_000),
        f"{NOT_JSON} (nested deeper than 32 levels)",
    ),
    (
        "nested-40-deep",
        status_text(extra=', "vendor": ' + "[" * 40 + "]" * 40),
        f"{NOT_JSON} (nested deeper than 32 levels)",
    ),
    ("not-utf8", b'{"pool": "chassis1\xff"}', f"{NOT_JSON} (not UTF-8 (invalid start byte))"),
    ("html", b"<html>busy</html>", f"{NOT_JSON} (Expecting value at line 1 column 1)"),
    (
        "over-1MiB",
        b'{"pool": "' + b"x" * (1 << 20) + b'"}',
        "GET {url}/v1/pools/chassis1 answered more than 1048576 bytes",
    ),
    ("attached-negative", status_text(hal01="-2"), f"{STATUS}: hosts[0].attached is -2, {NOT_A_COUNT}"),
    ("attached-fraction", status_text(hal01="2.5"), f"{STATUS}: hosts[0].attached is 2.5, {NOT_A_COUNT}"),
    ("attached-string", status_text(hal02='"4"'), f'{STATUS}: hosts[1].attached is "4", {NOT_A_COUNT}'),
    ("total-bool", status_text(total="true"), f"{STATUS}: gpu.total is true, {NOT_A_COUNT}"),
    ("slots-negative", status_text(slots="-1"), f"{STATUS}: slots_per_host is -1, {NOT_A_COUNT}"),
    (
        "sum-beyond-the-pool",
        status_text(hal01="6", hal02="4"),
        f"{STATUS}: the hosts hold 10 of pool chassis1's GPUs, more than its 8",
    ),
    (
        "beyond-the-slots",
        status_text(hal01="7"),
        f"{STATUS}: hal01 holds 7 of pool chassis1's GPUs, more than its 6 slots",
    ),
    (
        "attached-20-digits",
        status_text(hal01="99999999999999999999"),
        f"{STATUS}: hal01 holds 99999999999999999999 of pool chassis1's GPUs, more than its 6 slots",
    ),
    ("another-pool", status_text(pool='"chassis2"'), f'{STATUS} is for pool "chassis2", not chassis1'),
    (
        "pool-missing",
        b'{"gpu": {"type": "v100", "total": 8}, "slots_per_host": 6, "hosts": []}',
        f"{STATUS} lacks pool",
    ),
    (
        "total-missing",
        b'{"pool": "chassis1", "gpu": {"type": "v100"}, "slots_per_host": 6, "hosts": []}',
        f"{STATUS} lacks gpu.total",
    ),
    ("a-list", b"[]", f"{STATUS} is not an object with a 'gpu' object and a 'hosts' list"),
    (
        "hosts-a-mapping",
        b'{"pool": "chassis1", "gpu": {"type": "v100", "total": 8}, "slots_per_host": 6, "hosts": {"hal01": 4}}',
        f"{STATUS} is not an object with a 'gpu' object and a 'hosts' list",
    ),
    (
        "host-a-string",
        b'{"pool": "chassis1", "gpu": {"type": "v100", "total": 8}, "slots_per_host": 6, "hosts": ["hal01"]}',
        f"{STATUS}: hosts[0] is not an object with 'name' and 'attached'",
    ),
    ("host-name-empty", status_text().replace(b'"hal02"', b'""'), f'{STATUS}: hosts[1].name is "", not a name'),
    ("host-name-a-number", status_text().replace(b'"hal02"', b"7"), f"{STATUS}: hosts[1].name is 7, not a name"),
    ("host-named-twice", status_text().replace(b'"hal02"', b'"hal01"'), f"{STATUS} names host hal01 twice"),
]


@pytest.mark.parametrize("command", [["list"], ["attach", "hal01", "1"]], ids=["list", "attach"])
@pytest.mark.parametrize("raw, message", [c[1:] for c in HOSTILE_STATUS], ids=[c[0] for c in HOSTILE_STATUS])
def test_a_hostile_pool_status_is_an_exit_2_and_nothing_is_sent_after_it(capsys, raw, message, command):
    with ReplayServer(exchanges=[{"request": GET, "response": {"status": 200, "raw": raw}}]) as server:
        code, answer = drive(capsys, "--driver", "rest", "--pool", "chassis1", "--url", server.url, *command)
    server.all_served()  # the one GET, and no POST after it
    assert (code, answer) == (2, {"error": message.format(url=server.url)})


def test_a_hostile_answer_to_the_post_is_an_exit_2(capsys):
    """After the POST the fabric may have changed: exit 2 (look with `list`), never exit 1."""
    exchanges = [
        {"request": GET, "response": {"status": 200, "raw": status_text()}},
        {
            "request": {"method": "POST", "path": "/v1/pools/chassis1/attach", "body": {"host": "hal01", "count": 1}},
            "response": {"status": 200, "raw": status_text(hal01="NaN")},
        },
    ]
    with ReplayServer(exchanges=exchanges) as server:
        code, answer = drive(
            capsys, "--driver", "rest", "--pool", "chassis1", "--url", server.url, "attach", "hal01", "1"
        )
    server.all_served()
    assert (code, answer) == (
        2,
        {
            "error": f"POST {server.url}/v1/pools/chassis1/attach answered something that is "
            "not JSON (NaN is not a JSON number)"
        },
    )


@pytest.mark.parametrize(
    "raw, shown",
    [
        (b'{"message": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", '{"message": ' + "[" * 288),  # cut at 300 characters
        (b'{"message": 1e999}', '{"message": 1e999}'),
        (b'{"message": "slot 7\\nis\\r\\nresetting"}', "slot 7 is resetting"),
    ],
    ids=["nested-100000-deep", "1e999", "three-lines"],
)
def test_a_hostile_4xx_message_is_still_a_one_line_refusal(capsys, raw, shown):
    """A 4xx is the fabric manager saying nothing changed, whatever its message looks like."""
    exchanges = [{"request": {"method": "GET", "path": "/v1/pools/chassis1"}, "response": {"status": 409, "raw": raw}}]
    with ReplayServer(exchanges=exchanges) as server:
        code, answer = drive(capsys, "--driver", "rest", "--pool", "chassis1", "--url", server.url, "list")
    server.all_served()
    assert (code, answer) == (
        1,
        {"error": f"the fabric manager refused GET {server.url}/v1/pools/chassis1: HTTP 409: {shown}"},
    )


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://fm.example/", "http://[::1", "fm.example:8080"])
def test_the_rest_driver_speaks_only_http(capsys, url):
    code, answer = drive(capsys, "--driver", "rest", "--pool", "chassis1", "--url", url, "list")
    assert (code, answer) == (2, {"error": f"--url {json.dumps(url)} is not an http:// or https:// URL"})


# The command line's count: a whole number from 1 in ASCII digits, at most the pool's GPUs.
BAD_COUNTS = ["-2", "0", "1.5", "1e999", "NaN", "Infinity", " 3", "+3", "\u0663", "0x10", "9" * 40]


def _state(tmp_path, text: str = '{"pool": "chassis1", "hosts": {"hal01": 4, "hal02": 0}}') -> Path:
    state = tmp_path / "state.json"
    state.write_text(text)
    return state


@pytest.mark.parametrize("action", ["attach", "detach"])
@pytest.mark.parametrize(
    "count", BAD_COUNTS, ids=[c if len(c) < 10 and c.isascii() else f"{len(c)}-chars" for c in BAD_COUNTS]
)
def test_a_count_that_is_not_a_whole_number_from_1_is_a_usage_error(capsys, tmp_path, monkeypatch, action, count):
    fake = RecordingFakePodman({"hal01": set(range(6)), "hal02": set()})
    monkeypatch.setattr("hal_provision.compose.sandbox.podman", fake)
    state = _state(tmp_path)
    before = state.read_bytes()
    code, answer = drive(
        capsys,
        "--driver",
        "sandbox",
        "--pool",
        "chassis1",
        "--config",
        str(CONFIG),
        "--state",
        str(state),
        action,
        "hal01",
        count,
    )
    assert (code, answer) == (
        2,
        {"error": f"usage: argument count: {json.dumps(count)} is not a number of GPUs (a whole number from 1)"},
    )
    assert state.read_bytes() == before and fake.calls == []


@pytest.mark.parametrize("count", ["-1e999", "-Infinity", "-1.5e3"])
def test_a_count_argparse_takes_for_an_option_is_a_usage_error(capsys, tmp_path, count):
    state = _state(tmp_path)
    code, answer = drive(
        capsys,
        "--driver",
        "sandbox",
        "--pool",
        "chassis1",
        "--config",
        str(CONFIG),
        "--state",
        str(state),
        "attach",
        "hal01",
        count,
    )
    assert code == 2 and answer["error"].startswith("usage: ")
    assert state.read_text() == '{"pool": "chassis1", "hosts": {"hal01": 4, "hal02": 0}}'


@pytest.mark.parametrize("action, count", [("attach", "9"), ("attach", "99999999999999999999"), ("detach", "9")])
@pytest.mark.parametrize("kind", ["sandbox", "rest"])
def test_a_count_beyond_the_pool_is_a_usage_error_for_every_built_in_driver(
    capsys, tmp_path, monkeypatch, kind, action, count
):
    """No state of the pool could serve it: not a refusal of this moment, a mistake (exit 2)."""
    expected = {"error": f"{action} hal01 {count}: pool chassis1 has 8 GPU(s) in all"}
    if kind == "sandbox":
        fake = RecordingFakePodman({"hal01": set(range(6)), "hal02": set()})
        monkeypatch.setattr("hal_provision.compose.sandbox.podman", fake)
        state = _state(tmp_path)
        before = state.read_bytes()
        assert drive(
            capsys,
            "--driver",
            "sandbox",
            "--pool",
            "chassis1",
            "--config",
            str(CONFIG),
            "--state",
            str(state),
            action,
            "hal01",
            count,
        ) == (2, expected)
        assert state.read_bytes() == before and fake.calls == []
    else:
        with ReplayServer(exchanges=[{"request": GET, "response": {"status": 200, "raw": status_text()}}]) as server:
            assert drive(
                capsys, "--driver", "rest", "--pool", "chassis1", "--url", server.url, action, "hal01", count
            ) == (2, expected)
        server.all_served()  # the status read, no POST


STATE_TEXT = '{{"pool": "chassis1", "hosts": {{"hal01": {hal01}, "hal02": {hal02}}}}}'
UNREADABLE = "the state file {state} is unreadable ({why}): remove it to start again from the active layout"

HOSTILE_STATE = [
    (
        "1e999",
        STATE_TEXT.format(hal01="1e999", hal02=0),
        UNREADABLE.format(state="{state}", why="1e999 is too large a number"),
    ),
    (
        "NaN",
        STATE_TEXT.format(hal01="NaN", hal02=0),
        UNREADABLE.format(state="{state}", why="NaN is not a JSON number"),
    ),
    (
        "nested-100000-deep",
        "[" * 100_000 + "]" * 100_000,
        UNREADABLE.format(state="{state}", why="nested deeper than 32 levels"),
    ),
    (
        "truncated",
        '{"pool": "chassis1", "hosts": {"hal01"',
        UNREADABLE.format(state="{state}", why="Expecting ':' delimiter at line 1 column 39"),
    ),
    ("a-list", "[]", "the state file {state} has no 'hosts' mapping: remove it to start again from the active layout"),
    ("negative", STATE_TEXT.format(hal01=-3, hal02=0), f"the state file {{state}}: hosts[hal01] is -3, {NOT_A_COUNT}"),
    (
        "fraction",
        STATE_TEXT.format(hal01=3.5, hal02=0),
        f"the state file {{state}}: hosts[hal01] is 3.5, {NOT_A_COUNT}",
    ),
    (
        "string",
        STATE_TEXT.format(hal01='"4"', hal02=0),
        f'the state file {{state}}: hosts[hal01] is "4", {NOT_A_COUNT}',
    ),
    (
        "sum-beyond-the-pool",
        STATE_TEXT.format(hal01=6, hal02=6),
        "the state file {state}: the hosts hold 12 of pool chassis1's GPUs, more than its 8",
    ),
    (
        "beyond-the-slots",
        STATE_TEXT.format(hal01=7, hal02=0),
        "the state file {state}: hal01 holds 7 of pool chassis1's GPUs, more than its 6 slots",
    ),
]


@pytest.mark.parametrize(
    "command", [["list"], ["attach", "hal02", "1"], ["detach", "hal01", "1"]], ids=["list", "attach", "detach"]
)
@pytest.mark.parametrize("text, message", [c[1:] for c in HOSTILE_STATE], ids=[c[0] for c in HOSTILE_STATE])
def test_a_hostile_state_file_is_an_exit_2_and_stays_as_it_was(capsys, tmp_path, monkeypatch, text, message, command):
    fake = RecordingFakePodman({"hal01": set(range(6)), "hal02": set()})
    monkeypatch.setattr("hal_provision.compose.sandbox.podman", fake)
    state = _state(tmp_path, text)
    code, answer = drive(
        capsys, "--driver", "sandbox", "--pool", "chassis1", "--config", str(CONFIG), "--state", str(state), *command
    )
    assert (code, answer) == (2, {"error": message.format(state=state)})
    assert state.read_text() == text and fake.calls == []


def _config(tmp_path, **raw: str) -> Path:
    """tests/data/compose/composable.json with raw JSON fragments put in."""
    values = {
        "count": "8",
        "slots": "6",
        "hosts": '["hal01", "hal02"]',
        "active": '"lopsided"',
        "hal01": "4",
        "hal02": "0",
        "gpu_type": '"v100"',
        **raw,
    }
    text = (
        f'{{"active": {values["active"]}, "pools": [{{"name": "chassis1", "gpu_type": {values["gpu_type"]}, '
        f'"count": {values["count"]}, "hosts": {values["hosts"]}, "slots_per_host": {values["slots"]}, '
        f'"driver": "sandbox", "driver_url": null}}], '
        f'"layouts": {{"lopsided": {{"hal01": {values["hal01"]}, "hal02": {values["hal02"]}}}}}}}'
    )
    config = tmp_path / "composable.json"
    config.write_text(raw.get("whole", text))
    return config


POOL = "{config}: pools[chassis1]"
HOSTILE_CONFIG = [
    ("count-1e999", {"count": "1e999"}, "{config} is not JSON: 1e999 is too large a number"),
    ("slots-NaN", {"slots": "NaN"}, "{config} is not JSON: NaN is not a JSON number"),
    (
        "nested-100000-deep",
        {"whole": "[" * 100_000 + "]" * 100_000},
        "{config} is not JSON: nested deeper than 32 levels",
    ),
    ("count-negative", {"count": "-8"}, f"{POOL}.count is -8, {NOT_A_COUNT}"),
    ("count-string", {"count": '"8"'}, f'{POOL}.count is "8", {NOT_A_COUNT}'),
    ("slots-fraction", {"slots": "6.5"}, f"{POOL}.slots_per_host is 6.5, {NOT_A_COUNT}"),
    ("hosts-a-string", {"hosts": '"hal01"'}, f'{POOL}.hosts is "hal01", not a list of host names'),
    ("hosts-a-number", {"hosts": "[1, 2]"}, f"{POOL}.hosts[0] is 1, not a name"),
    ("host-named-twice", {"hosts": '["hal01", "hal01"]'}, f"{POOL}.hosts names a host twice"),
    ("gpu-type-a-list", {"gpu_type": "[]"}, f"{POOL}.gpu_type is [], not a name"),
    ("active-a-list", {"active": '["lopsided"]'}, '{config}: the active layout ["lopsided"] is not among its layouts'),
    ("layout-negative", {"hal01": "-1"}, f"{{config}}: layouts[lopsided][hal01] is -1, {NOT_A_COUNT}"),
    (
        "layout-sum-beyond-the-pool",
        {"hal01": "6", "hal02": "6"},
        "{config}: layouts[lopsided]: the hosts hold 12 of pool chassis1's GPUs, more than its 8",
    ),
    (
        "layout-beyond-the-slots",
        {"hal01": "7"},
        "{config}: layouts[lopsided]: hal01 holds 7 of pool chassis1's GPUs, more than its 6 slots",
    ),
    (
        "pools-of-names",
        {"whole": '{"active": "a", "pools": ["chassis1"], "layouts": {}}'},
        "{config} has no 'pools' list of objects and 'layouts' mapping: is it the rendered composable.json?",
    ),
]


@pytest.mark.parametrize("raw, message", [c[1:] for c in HOSTILE_CONFIG], ids=[c[0] for c in HOSTILE_CONFIG])
def test_a_hostile_composable_json_is_an_exit_2_and_writes_no_state(capsys, tmp_path, monkeypatch, raw, message):
    fake = RecordingFakePodman({"hal01": set(range(6)), "hal02": set()})
    monkeypatch.setattr("hal_provision.compose.sandbox.podman", fake)
    config = _config(tmp_path, **raw)
    state = tmp_path / "state.json"
    code, answer = drive(
        capsys,
        "--driver",
        "sandbox",
        "--pool",
        "chassis1",
        "--config",
        str(config),
        "--state",
        str(state),
        "attach",
        "hal02",
        "1",
    )
    assert (code, answer) == (2, {"error": message.format(config=config)})
    assert not state.exists() and fake.calls == []


BROKEN = "the driver program {p}'s answer breaks the contract: "


@pytest.mark.parametrize(
    "body, message",
    [
        (
            'print("[" * 100000 + "]" * 100000)',
            "the driver program {p} exited 0 without a JSON answer (nested deeper than 32 levels)",
        ),
        (
            'print(\'{"pool": "p", "gpu_type": "a", "total": NaN, "hosts": {}, "free": 0}\')',
            "the driver program {p} exited 0 without a JSON answer (NaN is not a JSON number)",
        ),
        (
            'print(\'{"pool": "p", "gpu_type": "a", "total": 2, "hosts": {"n1": 1e999}, "free": 0}\')',
            "the driver program {p} exited 0 without a JSON answer (1e999 is too large a number)",
        ),
        (
            'print(json.dumps({"pool": "p", "gpu_type": "a", "total": 2, "hosts": {"n1": 3}, "free": -1}))',
            BROKEN + "'free' is negative",
        ),
        (
            'print(json.dumps({"pool": "p", "gpu_type": "a", "total": 2, "hosts": {"n1": 1}, "free": 5}))',
            BROKEN + "'free' is not 'total' less the hosts' GPUs",
        ),
        (
            'print(json.dumps({"pool": "p", "gpu_type": "a", "total": 2, "hosts": {"n1": -1}, "free": 3}))',
            BROKEN + "hosts[n1] is not a count",
        ),
        (
            'print(json.dumps({"error": ["chassis", "offline"]})); sys.exit(1)',
            BROKEN + "'error' is not one line of text",
        ),
    ],
    ids=[
        "nested-100000-deep",
        "NaN",
        "1e999",
        "free-negative",
        "free-not-the-rest",
        "host-negative",
        "error-a-list-exit-1",
    ],
)
def test_a_site_programs_hostile_answer_is_an_exit_2(capsys, tmp_path, body, message):
    program = _site_program(tmp_path, body)
    assert drive(capsys, "--driver", str(program), "--pool", "p", "list") == (2, {"error": message.format(p=program)})


def test_a_fault_of_the_drivers_own_is_an_exit_2_not_a_refusal(capsys, monkeypatch):
    """The last word of the contract: an exit 1 would claim that nothing changed."""

    def broken(self):
        raise KeyError("gpu")

    monkeypatch.setattr("hal_provision.compose.rest.RestDriver.list", broken)
    assert driver.main(["--driver", "rest", "--pool", "chassis1", "--url", "http://127.0.0.1:9", "list"]) == 2
    out, err = capsys.readouterr()
    assert (json.loads(out), err) == ({"error": "the driver failed: KeyError: 'gpu'"}, "")


def test_hostile_input_through_the_real_entry_point(tmp_path):
    """Child processes of `python -m hal_provision.compose.driver`: one JSON line on stdout,
    nothing on stderr, exit 2, for a hostile answer, state file, configuration and count."""
    state = _state(tmp_path, STATE_TEXT.format(hal01="1e999", hal02=0))
    config = _config(tmp_path, whole="[" * 100_000 + "]" * 100_000)
    with ReplayServer(
        exchanges=[{"request": GET, "response": {"status": 200, "raw": status_text(total="NaN")}}]
    ) as server:
        runs = {
            "answer": ["--driver", "rest", "--pool", "chassis1", "--url", server.url, "attach", "hal01", "1"],
            "state": [
                "--driver",
                "sandbox",
                "--pool",
                "chassis1",
                "--config",
                str(CONFIG),
                "--state",
                str(state),
                "list",
            ],
            "config": [
                "--driver",
                "sandbox",
                "--pool",
                "chassis1",
                "--config",
                str(config),
                "--state",
                str(tmp_path / "s"),
                "list",
            ],
            "count": ["--driver", "rest", "--pool", "chassis1", "--url", server.url, "attach", "hal01", "-2"],
        }
        procs = {
            what: subprocess.run(
                [sys.executable, "-m", "hal_provision.compose.driver", *argv],
                capture_output=True,
                text=True,
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                timeout=60,
            )
            for what, argv in runs.items()
        }
    server.all_served()
    for what, proc in procs.items():
        assert (proc.returncode, proc.stderr) == (2, ""), what
        assert proc.stdout.count("\n") == 1 and "Traceback" not in proc.stdout, what
        assert set(json.loads(proc.stdout)) == {"error"}, what
    assert "NaN is not a JSON number" in procs["answer"].stdout
    assert "1e999 is too large a number" in procs["state"].stdout
    assert "nested deeper than 32 levels" in procs["config"].stdout
    assert "argument count" in procs["count"].stdout
    assert state.read_text() == STATE_TEXT.format(hal01="1e999", hal02=0) and not (tmp_path / "s").exists()
