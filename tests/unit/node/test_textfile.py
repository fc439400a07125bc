"""The Prometheus backend's node side: the textfile runner and the collectors it adds.

The runner (hal_provision/node/monitoring/textfile.py) runs real collector programs, small
shell scripts written here, and its files are read by Debian's promtool and by a real
prometheus-node-exporter, whose /metrics must serve the converted samples. The health and
pull collectors read records written by the real hal-healthcheck and hal-converge code; the
nvidia_smi collector runs a stand-in nvidia-smi answering with the XML recorded on an H100.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.request
from argparse import Namespace
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hal_provision.node import converge
from hal_provision.node.health import healthcheck
from hal_provision.node.monitoring import healthstate, lineprotocol as lp, pullstate, textfile
from tests.unit.node.test_openmetrics import needs_promtool, parsed, promtool_problems

PACKAGE = Path(textfile.__file__).parent
H100_XML = Path(__file__).resolve().parents[2] / "data" / "hardware" / "h100-x1" / "nvidia-smi-q.xml"
NODE_EXPORTER = Path("/usr/bin/prometheus-node-exporter")
NODE_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
GOOD_OUTPUT = (
    'hal_demo,host=n1,job=train,sensor=Inlet\\ Temp value=23.5,ok=true,readings=7i,note="text" 1700000000000000000\n'
    "hal_demo,host=n1,job=eval,sensor=Inlet\\ Temp value=-1.25,ok=false,readings=0i\n"
)


def program(directory: Path, name: str, body: str) -> Path:
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def config(tmp_path: Path, collectors: list[dict], **changes) -> Path:
    textfiles = tmp_path / "textfiles"
    textfiles.mkdir(exist_ok=True)
    doc = {
        "interval_seconds": 60,
        "timeout_seconds": 5,
        "textfile_dir": str(textfiles),
        "collectors": collectors,
        "hosts": {},
        **changes,
    }
    path = tmp_path / "textfile.json"
    path.write_text(json.dumps(doc))
    return path


def hal_monitoring(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hal_provision.node.monitoring", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def three(tmp_path):
    """Collectors as the task names them: one printing line protocol, one failing, one printing
    garbage; and the runner's configuration for them."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    good = program(bin_dir, "good", f"cat <<'EOF'\n{GOOD_OUTPUT}EOF\n")
    failing = program(bin_dir, "failing", "echo 'ipmitool: cannot open /dev/ipmi0' >&2\necho second >&2\nexit 3\n")
    garbage = program(bin_dir, "garbage", "echo 'this is not line protocol'\n")
    return config(
        tmp_path,
        [
            {"name": "good", "argv": [str(good), "--flag"]},
            {"name": "failing", "argv": [str(failing)]},
            {"name": "garbage", "argv": [str(garbage)]},
        ],
    )


# ---- one run ---------------------------------------------------------------------------------------


def test_once_writes_each_collector_file_and_the_status(three, tmp_path):
    textfiles = tmp_path / "textfiles"
    (textfiles / "hal_failing.prom").write_text("hal_stale 1\n")  # last run's values: must go
    (textfiles / "hal_retired.prom").write_text("hal_old 1\n")  # a collector no longer configured
    (textfiles / "node_debian.prom").write_text("node_debian 1\n")  # not ours
    (textfiles / "hal_notes.txt").write_text("x")  # not a .prom file

    done = hal_monitoring("textfile", "--config", str(three), "--host", "n1", "--once")

    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in textfiles.iterdir()) == [
        "hal_collectors.prom",
        "hal_good.prom",
        "hal_notes.txt",
        "node_debian.prom",
    ]
    assert (textfiles / "hal_good.prom").read_text() == (
        "# HELP hal_demo_ok hal_demo ok, from hal-collect good\n"
        "# TYPE hal_demo_ok gauge\n"
        'hal_demo_ok{job_name="eval",sensor="Inlet Temp"} 0\n'
        'hal_demo_ok{job_name="train",sensor="Inlet Temp"} 1\n'
        "# HELP hal_demo_readings hal_demo readings, from hal-collect good\n"
        "# TYPE hal_demo_readings gauge\n"
        'hal_demo_readings{job_name="eval",sensor="Inlet Temp"} 0\n'
        'hal_demo_readings{job_name="train",sensor="Inlet Temp"} 7\n'
        "# HELP hal_demo_value hal_demo value, from hal-collect good\n"
        "# TYPE hal_demo_value gauge\n"
        'hal_demo_value{job_name="eval",sensor="Inlet Temp"} -1.25\n'
        'hal_demo_value{job_name="train",sensor="Inlet Temp"} 23.5\n'
    )
    status = parsed((textfiles / "hal_collectors.prom").read_text())
    assert {k[1][0][1]: v for k, v in status.items() if k[0] == "hal_collector_success"} == {
        "good": 1,
        "failing": 0,
        "garbage": 0,
    }
    durations = {k[1][0][1]: v for k, v in status.items() if k[0] == "hal_collector_duration_seconds"}
    assert set(durations) == {"good", "failing", "garbage"} and all(0 <= d < 5 for d in durations.values())
    last = {k[1][0][1]: v for k, v in status.items() if k[0] == "hal_collector_last_success_timestamp_seconds"}
    assert set(last) == {"good"} and abs(last["good"] - time.time()) < 60
    for path in textfiles.glob("hal_*.prom"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644

    log = done.stderr.splitlines()
    assert "hal_monitoring textfile: failing: ipmitool: cannot open /dev/ipmi0" in log  # the first line only
    assert not any("second" in line for line in log)
    assert any(line.startswith("hal_monitoring textfile: garbage: its output is not line protocol") for line in log)
    assert "hal_monitoring textfile: removed hal_retired.prom: no such collector in the configuration" in log
    assert len(log) == 3 and "Traceback" not in done.stderr


@needs_promtool
def test_every_file_passes_promtool(three, tmp_path):
    assert hal_monitoring("textfile", "--config", str(three), "--host", "n1", "--once").returncode == 0
    for path in (tmp_path / "textfiles").glob("hal_*.prom"):
        assert promtool_problems(path.read_text()) == [], path.name


def test_a_host_runs_the_common_collectors_and_its_own(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    up = program(bin_dir, "up", "echo 'slurm_daemons,daemon=slurmctld up=1i'\n")
    path = config(
        tmp_path,
        [{"name": "common", "argv": [str(up)]}],
        hosts={"fl-mgmt": [{"name": "slurm", "argv": [str(up)]}], "other": [{"name": "x", "argv": [str(up)]}]},
    )
    textfiles = tmp_path / "textfiles"
    assert hal_monitoring("textfile", "--config", str(path), "--host", "fl-mgmt", "--once").returncode == 0
    assert sorted(p.name for p in textfiles.iterdir()) == ["hal_collectors.prom", "hal_common.prom", "hal_slurm.prom"]
    # the same directory on a host without a list of its own: the host-only file goes
    assert hal_monitoring("textfile", "--config", str(path), "--host", "n7", "--once").returncode == 0
    assert sorted(p.name for p in textfiles.iterdir()) == ["hal_collectors.prom", "hal_common.prom"]
    assert 'collector="slurm"' not in (textfiles / "hal_collectors.prom").read_text()


def test_a_collector_that_prints_nothing_succeeds_with_an_empty_file(tmp_path):
    quiet = program(tmp_path, "quiet", "exit 0\n")
    path = config(tmp_path, [{"name": "health", "argv": [str(quiet)]}])
    assert hal_monitoring("textfile", "--config", str(path), "--host", "n1", "--once").returncode == 0
    assert (tmp_path / "textfiles" / "hal_health.prom").read_text() == ""
    assert 'hal_collector_success{collector="health"} 1' in (tmp_path / "textfiles" / "hal_collectors.prom").read_text()


def test_a_collector_past_its_timeout_is_killed_with_its_children(tmp_path):
    pid_file = tmp_path / "child.pid"
    slow = program(tmp_path, "slow", f"sleep 300 &\necho $! > {pid_file}\nwait\n")
    path = config(tmp_path, [{"name": "slow", "argv": [str(slow)]}], timeout_seconds=1)
    start = time.monotonic()
    done = hal_monitoring("textfile", "--config", str(path), "--host", "n1", "--once")
    assert done.returncode == 0 and time.monotonic() - start < 20
    assert done.stderr == "hal_monitoring textfile: slow: no answer within 1 s (killed)\n"
    child = int(pid_file.read_text())
    for _ in range(50):  # the child was SIGKILLed with its group; it may linger a moment as a zombie
        try:
            os.kill(child, 0)
            state = Path(f"/proc/{child}/stat").read_text().split(")")[-1].split()[0]
            if state == "Z":
                break
        except (ProcessLookupError, FileNotFoundError):
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the collector's child {child} outlived the timeout")
    assert 'hal_collector_success{collector="slow"} 0' in (tmp_path / "textfiles" / "hal_collectors.prom").read_text()


def test_a_missing_program_is_a_failed_collector(tmp_path):
    path = config(tmp_path, [{"name": "gone", "argv": [str(tmp_path / "nothing-here")]}])
    done = hal_monitoring("textfile", "--config", str(path), "--host", "n1", "--once")
    assert done.returncode == 0
    assert done.stderr == f"hal_monitoring textfile: gone: {tmp_path / 'nothing-here'}: command not found\n"


def test_an_unwritable_directory_fails_the_run(tmp_path):
    path = config(tmp_path, [], textfile_dir=str(tmp_path / "absent"))
    done = hal_monitoring("textfile", "--config", str(path), "--host", "n1", "--once")
    assert done.returncode == 1
    assert done.stderr == f"hal_monitoring textfile: {tmp_path / 'absent'}: No such file or directory\n"


def test_the_last_success_is_kept_across_runs(tmp_path):
    flag = tmp_path / "fail"
    flaky = program(tmp_path, "flaky", f"[ -e {flag} ] && exit 1\necho 'hal_x v=1i'\n")
    cfg = textfile.load_config(str(config(tmp_path, [{"name": "flaky", "argv": [str(flaky)]}])), "n1")
    clock = iter([1000.0, 2000.0, 3000.0])
    logged: list[str] = []
    runner = textfile.Runner(cfg, logged.append, now=lambda: next(clock))
    status = tmp_path / "textfiles" / "hal_collectors.prom"
    key = ("hal_collector_last_success_timestamp_seconds", (("collector", "flaky"),))

    assert runner.run_once()
    assert parsed(status.read_text())[key] == 1000.0
    flag.touch()
    assert runner.run_once()
    values = parsed(status.read_text())
    assert values[key] == 1000.0 and values[("hal_collector_success", (("collector", "flaky"),))] == 0
    assert not (tmp_path / "textfiles" / "hal_flaky.prom").exists()
    flag.unlink()
    assert runner.run_once()
    assert parsed(status.read_text())[key] == 2000.0
    assert logged == ["hal_monitoring textfile: flaky: exit status 1"]


# ---- the loop --------------------------------------------------------------------------------------


def test_the_loop_keeps_its_schedule_and_ends_on_sigterm(tmp_path):
    """Runs start a fixed interval apart although each takes most of one (a loop that slept
    an interval after each run would start them 1.6 s apart)."""
    starts = tmp_path / "starts"
    slow = program(
        tmp_path, "slow", f"{sys.executable} -c 'import time; print(time.monotonic())' >> {starts}\nsleep 0.6\n"
    )
    path = config(tmp_path, [{"name": "slow", "argv": [str(slow)]}], interval_seconds=1)
    runner = subprocess.Popen(
        [sys.executable, "-m", "hal_provision.node.monitoring", "textfile", "--config", str(path), "--host", "n1"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(_lines(starts)) < 4:
            time.sleep(0.1)
    finally:
        runner.send_signal(signal.SIGTERM)
        _, stderr = runner.communicate(timeout=30)
    assert runner.returncode == 0, stderr
    assert stderr.splitlines()[0].startswith("hal_monitoring textfile: every 1 s into ")
    assert "Traceback" not in stderr
    times = [float(t) for t in _lines(starts)]
    assert len(times) >= 4
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert all(0.8 < gap < 1.4 for gap in gaps), gaps
    assert (tmp_path / "textfiles" / "hal_collectors.prom").exists()


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


# ---- the configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change,message",
    [
        ({"interval_seconds": None}, "interval_seconds: missing"),
        ({"interval_seconds": 0}, "interval_seconds: must be a positive integer, not 0"),
        ({"timeout_seconds": True}, "timeout_seconds: must be a positive integer, not True"),
        ({"timeout_seconds": "30"}, "timeout_seconds: must be a positive integer, not '30'"),
        ({"textfile_dir": "var/lib"}, "textfile_dir: must be an absolute path, not 'var/lib'"),
        ({"collectors": {"bmc": []}}, "collectors: must be a list of {name, argv}"),
        ({"collectors": ["bmc"]}, "collectors[0]: must be an object with name and argv"),
        ({"collectors": [{"name": "b-mc", "argv": ["x"]}]}, "collectors[0].name: must be letters, digits and _"),
        ({"collectors": [{"name": "collectors", "argv": ["x"]}]}, "collectors[0].name: 'collectors' is taken"),
        ({"collectors": [{"name": "bmc", "argv": []}]}, "collectors[0].argv: must be a non-empty list"),
        ({"collectors": [{"name": "bmc", "argv": "hal-collect bmc"}]}, "collectors[0].argv: must be a non-empty"),
        ({"collectors": [{"name": "bmc", "argv": ["x"], "shell": True}]}, "collectors[0].shell: unknown key"),
        ({"hosts": []}, "hosts: must be an object of host name -> collectors"),
        ({"hosts": {"fl-mgmt": [{"name": "slurm", "argv": [1]}]}}, "hosts.fl-mgmt[0].argv: must be a non-empty"),
        (
            {"hosts": {"n1": [{"name": "bmc", "argv": ["y"]}]}},
            "collectors and hosts.n1: collector 'bmc' is named twice",
        ),
        ({"intervall_seconds": 5}, "intervall_seconds: unknown key"),
    ],
)
def test_a_bad_configuration_is_one_line_naming_the_key_and_exit_2(tmp_path, change, message):
    doc = {
        "interval_seconds": 60,
        "timeout_seconds": 30,
        "textfile_dir": str(tmp_path),
        "collectors": [{"name": "bmc", "argv": ["/usr/local/bin/hal-collect", "bmc"]}],
        "hosts": {},
        "_comment": "generated by hal-provision; do not edit",
    }
    doc.update(change)
    doc = {k: v for k, v in doc.items() if v is not None}
    path = tmp_path / "textfile.json"
    path.write_text(json.dumps(doc))
    done = hal_monitoring("textfile", "--config", str(path), "--host", "n1", "--once")
    assert done.returncode == 2
    assert done.stderr.startswith(f"hal_monitoring textfile: {path}: {message}")
    assert len(done.stderr.splitlines()) == 1 and done.stdout == ""
    assert not list(tmp_path.glob("*.prom"))


@pytest.mark.parametrize("text,message", [(None, "cannot read it: No such file"), ("{", "not JSON: ")])
def test_an_unreadable_configuration_is_exit_2(tmp_path, text, message):
    path = tmp_path / "textfile.json"
    if text is not None:
        path.write_text(text)
    done = hal_monitoring("textfile", "--config", str(path), "--host", "n1", "--once")
    assert done.returncode == 2 and done.stderr.startswith(f"hal_monitoring textfile: {path}: {message}")
    assert len(done.stderr.splitlines()) == 1


# ---- a real node exporter --------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.read().decode()


@pytest.fixture
def node_exporter(tmp_path):
    """prometheus-node-exporter with its textfile collector alone, on tmp_path/textfiles; its
    /metrics URL."""
    if not NODE_EXPORTER.exists():
        pytest.skip("prometheus-node-exporter is not installed (Debian package; ./bootstrap.sh installs it)")
    textfiles = tmp_path / "textfiles"
    textfiles.mkdir(exist_ok=True)
    port = _free_port()
    process = subprocess.Popen(
        [
            str(NODE_EXPORTER),
            f"--web.listen-address=127.0.0.1:{port}",
            "--collector.disable-defaults",
            "--collector.textfile",
            f"--collector.textfile.directory={textfiles}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                _get(url)
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"node exporter did not start: {process.stderr.read() if process.poll() else ''}")
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_node_exporter_serves_what_the_runner_wrote(three, tmp_path, node_exporter):
    """The runner as a node runs it (the package copied alone, no hal_provision, system Python),
    read by a real node exporter."""
    lib = tmp_path / "lib" / "hal_monitoring"
    lib.mkdir(parents=True)
    for source in PACKAGE.glob("*.py"):
        shutil.copy(source, lib / source.name)
    done = subprocess.run(
        [NODE_PYTHON, "-S", "-m", "hal_monitoring", "textfile", "--config", str(three), "--host", "n1", "--once"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path / "lib")},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr

    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(_get(node_exporter))
        for s in family.samples
    }
    assert samples[("node_textfile_scrape_error", ())] == 0
    for job, value, ok, readings in (("train", 23.5, 1, 7), ("eval", -1.25, 0, 0)):
        labels = (("job_name", job), ("sensor", "Inlet Temp"))
        assert samples[("hal_demo_value", labels)] == value
        assert samples[("hal_demo_ok", labels)] == ok
        assert samples[("hal_demo_readings", labels)] == readings
    assert not any(dict(k[1]).keys() & {"host", "job"} for k in samples if k[0].startswith("hal_demo"))
    success = {dict(k[1])["collector"]: v for k, v in samples.items() if k[0] == "hal_collector_success"}
    assert success == {"good": 1, "failing": 0, "garbage": 0}
    assert ("hal_collector_last_success_timestamp_seconds", (("collector", "good"),)) in samples
    assert not any(k[0] == "hal_stale" for k in samples)


# ---- the health collector --------------------------------------------------------------------------


def saved_health_record(tmp_path: Path, monkeypatch, results: dict) -> Path:
    """last.json as hal-healthcheck writes it (its record, its _save)."""
    monkeypatch.setattr(healthcheck, "STATE_DIR", str(tmp_path / "run"))
    reason = healthcheck.drain_reason("hal-healthcheck", results)
    record = {"time": 1_700_000_123, "host": "hal01", "results": results, "reason": reason}
    record["slurm"] = {"state": "idle", "reason": "", "action": "drain" if reason else "none", "detail": ""}
    healthcheck._save(record)
    return tmp_path / "run" / "last.json"


def test_health_reports_each_check_and_the_drain(tmp_path, monkeypatch):
    state = saved_health_record(tmp_path, monkeypatch, {"cpus": [], "gpus": ["/dev/nvidia3 missing"], "mounts": []})
    done = hal_monitoring("health", "--state", str(state))
    assert done.returncode == 0 and done.stderr == ""
    lines = lp.parse_lines(done.stdout)
    assert [(line.measurement, line.tags, line.fields()) for line in lines] == [
        ("hal_healthcheck", {"check": "cpus"}, {"failed": 0}),
        ("hal_healthcheck", {"check": "gpus"}, {"failed": 1}),
        ("hal_healthcheck", {"check": "mounts"}, {"failed": 0}),
        ("hal_healthcheck_run", {}, {"drain": 1, "time": 1_700_000_123}),
    ]
    assert len({line.timestamp_ns for line in lines}) == 1


def test_health_of_a_healthy_node(tmp_path, monkeypatch):
    state = saved_health_record(tmp_path, monkeypatch, {"cpus": [], "memory": []})
    [*checks, run] = lp.parse_lines(hal_monitoring("health", "--state", str(state)).stdout)
    assert [c.fields() for c in checks] == [{"failed": 0}, {"failed": 0}]
    assert run.fields() == {"drain": 0, "time": 1_700_000_123}


def test_health_before_the_first_check_prints_nothing(tmp_path):
    done = hal_monitoring("health", "--state", str(tmp_path / "last.json"))
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


@pytest.mark.parametrize(
    "text,message",
    [
        ("{", "not JSON"),
        ('{"time": 1, "results": []}', "results: not an object of check -> problems"),
        ('{"time": "today", "results": {}}', "time: 'today' is not a Unix time"),
    ],
)
def test_a_broken_health_record_is_one_line_and_exit_1(tmp_path, text, message):
    state = tmp_path / "last.json"
    state.write_text(text)
    done = hal_monitoring("health", "--state", str(state))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(f"hal_monitoring health: {state}: {message}")
    assert len(done.stderr.splitlines()) == 1


def test_health_default_is_the_health_checks_state_file():
    assert healthstate.STATE == os.path.join(healthcheck.STATE_DIR, "last.json")


# ---- the pull collector ----------------------------------------------------------------------------


def deploy_json(tmp_path: Path) -> Path:
    path = tmp_path / "deploy.json"
    path.write_text(
        json.dumps(
            {
                "version_file": str(tmp_path / "converge" / "last.json"),
                "nodes": {"hal01": "http://127.0.0.1:9/"},
                "drain_wait_s": 1,
                "release_key": str(tmp_path / "release.pub"),
                "cluster": "hal",
            }
        )
    )
    return path


def converged(tmp_path: Path, monkeypatch, **result) -> dict:
    """A converge record written by hal-converge's own run() (its converge step replaced)."""
    deploy = deploy_json(tmp_path)
    base = {"host": "hal01", "changed": 0, "failed_task": None, "drained": False, "serial": 3, "expires": None}
    monkeypatch.setattr(converge, "converge", lambda *a, **k: {**base, **result})
    args = Namespace(config=str(deploy), host="hal01", bundles=str(tmp_path / "bundles"), force=False, poll_s=0.1)
    converge.run(args)
    return json.loads((tmp_path / "converge" / "last.json").read_text())


def pull_line(tmp_path: Path) -> lp.Line:
    done = hal_monitoring("pull", "--deploy", str(tmp_path / "deploy.json"))
    assert done.returncode == 0 and done.stderr == "", done.stderr
    [line] = lp.parse_lines(done.stdout)
    return line


@pytest.mark.parametrize(
    "state,version,previous,failed,changed,drift",
    [
        ("current", "v2", "v2", 0, 0, 0),
        ("changed", "v3", "v2", 0, 1, 0),  # a new release
        ("changed", "v2", "v2", 0, 1, 1),  # the same release changed the node: changed by hand
        ("waiting", "v3", "v2", 0, 0, 0),
        ("failed", "v3", "v2", 1, 0, 0),
        ("refused", "v2", "v2", 1, 0, 0),
        ("unreachable-source", "v2", "v2", 1, 0, 0),
    ],
)
def test_pull_reports_the_last_converge(tmp_path, monkeypatch, state, version, previous, failed, changed, drift):
    record = converged(tmp_path, monkeypatch, state=state, version=version, previous=previous)
    line = pull_line(tmp_path)
    finished = dt.datetime.strptime(record["finished"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
    assert line.measurement == "hal_converge" and line.tags == {"state": state}
    assert line.fields() == {
        "finished": int(finished.timestamp()),
        "seconds": float(record["seconds"]),
        "failed": failed,
        "changed": changed,
        "drift": drift,
    }
    assert isinstance(line.fields()["seconds"], float)  # InfluxDB keeps a field's first type


def test_pull_reads_epoch_and_iso_times():
    assert pullstate.epoch_seconds(1714557603) == 1714557603
    assert pullstate.epoch_seconds(1714557603.9) == 1714557603
    assert pullstate.epoch_seconds("1714557603") == 1714557603
    assert pullstate.epoch_seconds("2024-05-01T10:00:03Z") == 1714557603
    assert pullstate.epoch_seconds("2024-05-01T12:00:03+02:00") == 1714557603
    assert pullstate.epoch_seconds("2024-05-01T10:00:03") == 1714557603  # no zone: UTC, as converge writes
    with pytest.raises(ValueError):
        pullstate.epoch_seconds(None)


def test_pull_record_named_directly(tmp_path):
    record = tmp_path / "last.json"
    record.write_text(json.dumps({"state": "current", "finished": 1714557603, "seconds": 2, "version": "v1"}))
    done = hal_monitoring("pull", "--record", str(record), "--deploy", str(tmp_path / "absent.json"))
    assert done.returncode == 0, done.stderr
    [line] = lp.parse_lines(done.stdout)
    assert line.fields() == {"finished": 1714557603, "seconds": 2.0, "failed": 0, "changed": 0, "drift": 0}


def test_pull_before_the_first_converge_prints_nothing(tmp_path):
    deploy_json(tmp_path)
    done = hal_monitoring("pull", "--deploy", str(tmp_path / "deploy.json"))
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


@pytest.mark.parametrize(
    "deploy,record,message",
    [
        (None, None, "No such file or directory: {tmp}/deploy.json"),
        ("[]", None, "{tmp}/deploy.json: no version_file"),
        ("{", None, "{tmp}/deploy.json: not JSON"),
        ("ok", "{", "{tmp}/last.json: not JSON"),
        ("ok", '{"state": "changed", "finished": "soon", "seconds": 1}', "{tmp}/last.json: finished: 'soon' is not"),
        ("ok", '{"state": "changed", "finished": 1, "seconds": "1"}', "{tmp}/last.json: seconds: '1' is not a number"),
        ("ok", '{"state": "", "finished": 1, "seconds": 1}', "{tmp}/last.json: state: '' is not a converge state"),
    ],
)
def test_a_broken_pull_record_is_one_line_and_exit_1(tmp_path, deploy, record, message):
    if deploy is not None:
        text = json.dumps({"version_file": str(tmp_path / "last.json")}) if deploy == "ok" else deploy
        (tmp_path / "deploy.json").write_text(text)
    if record is not None:
        (tmp_path / "last.json").write_text(record)
    done = hal_monitoring("pull", "--deploy", str(tmp_path / "deploy.json"))
    assert done.returncode == 1 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("hal_monitoring pull: ")
    assert message.format(tmp=tmp_path) in done.stderr


def test_pull_failed_states_are_converges_unsuccessful_ones_but_waiting():
    assert set(pullstate.FAILED) == set(converge.STATES) - set(converge.SUCCESSFUL) - {"waiting"}
    assert pullstate.DEPLOY == converge.CONFIG


# ---- the nvidia_smi collector ----------------------------------------------------------------------


def test_nvidia_smi_runs_the_xml_query_and_prints_telegrafs_names(tmp_path):
    args = tmp_path / "args"
    fake = program(tmp_path, "nvidia-smi", f"printf '%s\\n' \"$@\" > {args}\ncat {H100_XML}\n")
    done = hal_monitoring("nvidia_smi", "--bin-path", str(fake))
    assert done.returncode == 0, done.stderr
    assert args.read_text().split() == ["-q", "-x"]
    [line] = lp.parse_lines(done.stdout)
    assert line.measurement == "nvidia_smi" and line.tags["name"] == "NVIDIA H100 80GB HBM3"
    assert line.fields()["memory_total"] == 81559 and line.timestamp_ns is not None


def test_nvidia_smi_without_the_tool_is_one_line_and_exit_1(tmp_path):
    done = hal_monitoring("nvidia_smi", "--bin-path", str(tmp_path / "nvidia-smi"))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == f"hal_monitoring nvidia_smi: {tmp_path / 'nvidia-smi'}: command not found\n"
