"""NVIDIA DCGM: the health check's `dcgm` (a fake dcgmi on PATH answering with the fixtures of
tests/data/dcgm/, written from DCGM's sources: its README says from which), and the pure side
of `hal-provision health deep` (hal_provision.health_deep: the reservation, the wait, the diag
parser, the drain reasons, the whole run on fake commands)."""

from __future__ import annotations

import json
import shlex
from datetime import datetime
from pathlib import Path

import pytest

from hal_provision import health_deep as deep
from hal_provision.loader import load_text
from hal_provision.model.health import CHECKS
from hal_provision.node.health import healthcheck as hc
from hal_provision.render import health

DATA = Path(__file__).resolve().parents[2] / "data" / "dcgm"
WANT = {"watches": "a", "warnings": "drain"}  # health.dcgm_warnings: drain; report in its own test


@pytest.fixture
def dcgmi(tmp_path, monkeypatch):
    """A fake dcgmi: `health --check --json` prints a file (or the watches-off answer until
    `health --set` was called), every call is logged. Returns a function that points it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "dcgmi.log"
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")

    def point(check: str, watches_set: bool = True) -> Path:
        marker = tmp_path / "watches"
        if watches_set:
            marker.write_text("a")
        script = bin_dir / "dcgmi"
        script.write_text(
            "#!/bin/sh\n"
            f'echo "$*" >> {log}\n'
            'case "$*" in\n'
            f'  "health --set a") echo a > {marker}; echo "Health monitor systems set successfully.";;\n'
            f'  "health --check --json") if [ -s {marker} ]; then cat {check}; else '
            f"cat {DATA / 'health-watches-off.txt'}; exit 255; fi;;\n"
            '  *) echo "no fixture for $*" >&2; exit 2;;\nesac\n'
        )
        script.chmod(0o755)
        return log

    return point


def dcgm_problems() -> list[str]:
    return hc.run_checks({"checks": {"dcgm": WANT}}, "/")["dcgm"]


def test_no_dcgmi_passes_with_nothing_to_say(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing there
    assert dcgm_problems() == []


def test_healthy(dcgmi):
    log = dcgmi(DATA / "health-healthy.json")
    assert dcgm_problems() == []
    assert log.read_text().splitlines() == ["health --check --json"]  # watches set: not set again


def test_a_warning_is_reported_and_a_failure_drains(dcgmi, capsys):
    """By default (health.dcgm_warnings: report) the PCIe warning is a note in the check's
    output, the node stays in service; the memory failure drains it."""
    dcgmi(DATA / "health-pcie-warning-memory-failure.json")
    assert hc.run_checks({"checks": {"dcgm": dict(WANT, warnings="report")}}, "/")["dcgm"] == [
        "GPU 1 Memory system: Failure: Detected 1 volatile double-bit ECC error(s) in GPU 1."
    ]
    assert "note dcgm: GPU 0 PCIe system: Warning: Detected more than 8 PCIe replays" in capsys.readouterr().out


def test_pcie_warning_and_memory_failure_one_line_each(dcgmi):
    """health.dcgm_warnings: drain: the warning drains too."""
    dcgmi(DATA / "health-pcie-warning-memory-failure.json")
    assert dcgm_problems() == [
        "GPU 0 PCIe system: Warning: Detected more than 8 PCIe replays per minute for GPU 0 : 13 Reconnect PCIe "
        "card. Run system side PCIE diagnostic utilities to verify hops off the GPU board. If issue is on the "
        "board, run the field diagnostic.",
        "GPU 1 Memory system: Failure: Detected 1 volatile double-bit ECC error(s) in GPU 1.",
    ]
    reason = hc.drain_reason("hal-health", hc.run_checks({"checks": {"dcgm": WANT}}, "/"))
    assert reason.startswith("hal-health: dcgm: GPU 0 PCIe system: Warning: Detected more than 8 PCIe replays")
    assert reason.endswith(" (+1 more)") or len(reason) == hc.REASON_MAX


def test_watches_off_are_set_then_checked(dcgmi):
    log = dcgmi(DATA / "health-pcie-warning-memory-failure.json", watches_set=False)
    assert len(dcgm_problems()) == 2
    assert log.read_text().splitlines() == ["health --check --json", "health --set a", "health --check --json"]


def test_dcgmi_without_hostengine_is_a_problem(tmp_path, monkeypatch):
    (tmp_path / "dcgmi").write_text(
        "#!/bin/sh\necho 'Error: unable to establish a connection to the specified host: localhost'\nexit 255\n"
    )
    (tmp_path / "dcgmi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert dcgm_problems() == [
        "dcgmi health --check failed (exit 255): Error: unable to establish a connection to "
        "the specified host: localhost"
    ]


def test_dcgm_is_a_default_check_after_gpu_faults_for_gpu_groups(hal):
    assert CHECKS.index("dcgm") == CHECKS.index("gpu_faults") + 1
    assert "dcgm" in hal.health.checks
    gpu_group = next(g for g in hal.nodes if hal.node_builds(g)[0].profile.gpus)
    checks = list(health.expectation(hal, gpu_group)["checks"])
    assert checks[checks.index("gpu_faults") + 1] == "dcgm"
    assert health.expectation(hal, gpu_group)["checks"]["dcgm"] == {"watches": "a", "warnings": "report"}


def test_no_gpus_no_dcgm_entry(hal_text):
    start = hal_text.index("    gpus:\n      type: v100")
    end = hal_text.index("    ib_adapters:", start)
    model = load_text(hal_text[:start] + hal_text[end:], "hal.yml").model
    exp = json.loads(health.render(model)["files/etc/hal-provision/health/compute.json"])
    assert "dcgm" not in exp["checks"]


# ---- health deep: the diag parser -----------------------------------------------------------------


def test_diag_r2_all_pass():
    results = deep.parse_diag((DATA / "diag-r2-pass.json").read_text())
    assert {r.status for r in results} == {"Pass"}
    assert sorted({r.test for r in results}) == ["memory", "pcie", "software", "targeted_power"]
    assert sorted({r.gpu for r in results}) == [0, 1]
    assert deep.failures(results) == []


def test_diag_r3_one_failed_test_on_one_gpu():
    results = deep.parse_diag((DATA / "diag-r3-one-failed.json").read_text())
    assert deep.failures(results) == [deep.DiagResult("memory", 1, "Fail", "Found 2 faulty memory elements on GPU 1")]
    assert len([r for r in results if r.status == "Pass"]) == len(results) - 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "not the JSON of dcgmi diag: no output"),
        ("Error: unable to establish a connection", "not the JSON of dcgmi diag: Error: unable to establish"),
        ('{"DCGM Diagnostic": {"runtime_error": "No GPUs found", "version": "4.2.3"}}', "dcgmi diag: No GPUs found"),
        ('{"something": {}}', "no test_categories"),
    ],
)
def test_diag_without_results_is_an_error(text, message):
    with pytest.raises(deep.DeepError, match=message):
        deep.parse_diag(text)


def test_dcgm3_gpu_ids_and_a_summary_only_failure():
    doc = {
        "DCGM GPU Diagnostic": {
            "test_categories": [
                {
                    "category": "Hardware",
                    "tests": [
                        {"name": "Diagnostic", "results": [{"gpu_ids": "0,1", "status": "Pass"}]},
                        {
                            "name": "PCIe",
                            "results": [],
                            "test_summary": {"status": "Fail", "warnings": [{"warning": "bus gone"}]},
                        },
                    ],
                }
            ]
        }
    }
    results = deep.parse_diag(json.dumps(doc))
    assert results == [
        deep.DiagResult("Diagnostic", 0, "Pass", ""),
        deep.DiagResult("Diagnostic", 1, "Pass", ""),
        deep.DiagResult("PCIe", None, "Fail", "bus gone"),
    ]
    assert deep.drain_reason(2, deep.failures(results)) == "hal-deep: dcgm diag -r 2: PCIe failed on the node: bus gone"


# ---- health deep: the Slurm commands ---------------------------------------------------------------


def test_reservation_command():
    name = deep.reservation_name(datetime(2026, 11, 28, 14, 5, 9))
    assert name == "hal-deep-20261128T140509"
    assert deep.reservation_command(name, ["gpu02", "gpu01", "gpu03"], 80) == [
        "scontrol",
        "create",
        "reservation",
        "ReservationName=hal-deep-20261128T140509",
        "Nodes=gpu[01-03]",
        "StartTime=now",
        "Duration=80",
        "Users=root",
        "Flags=MAINT,IGNORE_JOBS",
    ]
    assert deep.delete_command(name) == ["scontrol", "delete", "ReservationName=hal-deep-20261128T140509"]


def test_drain_reason_and_command():
    failed = deep.failures(deep.parse_diag((DATA / "diag-r3-one-failed.json").read_text()))
    reason = deep.drain_reason(3, failed)
    assert reason == "hal-deep: dcgm diag -r 3: memory failed on GPU 1: Found 2 faulty memory elements on GPU 1"
    assert deep.drain_command("gpu01", reason)[-1] == f"Reason={reason}"
    # not the health check's prefix: the periodic check never resumes it
    assert hc.decide("drained", reason, None, "hal-health")[0] == "none"
    long = deep.drain_reason(3, [deep.DiagResult("memory", 0, "Fail", "x " * 200)] * 3)
    assert len(long) == deep.REASON_MAX and long.endswith(" (+2 more)")


def test_wait_shows_the_jobs_until_none(monkeypatch):
    answers = iter(["17|alice|gpu01|1:00:00\n18|bob|gpu[01-02]|5:00\n", "18|bob|gpu[01-02]|4:30\n", ""])
    commands, shown, slept = [], [], []
    deep.wait_for_idle(
        lambda argv: (commands.append(argv), next(answers))[1],
        ["gpu01", "gpu02"],
        shown.append,
        max_wait_s=0,
        poll_s=30,
        sleep=slept.append,
    )
    assert commands[0] == [
        "squeue",
        "--noheader",
        "--nodelist=gpu[01-02]",
        "--states=RUNNING,SUSPENDED,COMPLETING,CONFIGURING",
        "--format=%i|%u|%N|%L",
    ]
    assert shown == [
        "waiting for 2 jobs to end: 17 (alice) on gpu01, 1:00:00 left; 18 (bob) on gpu[01-02], 5:00 left",
        "waiting for 1 job to end: 18 (bob) on gpu[01-02], 4:30 left",
    ]
    assert slept == [30, 30]


def test_wait_gives_up_after_max_wait():
    clock = iter([0.0, 100.0])
    with pytest.raises(deep.DeepError, match="jobs still running on gpu01 after 2 min: 17"):
        deep.wait_for_idle(
            lambda argv: "17|alice|gpu01|1:00:00\n",
            ["gpu01"],
            print,
            max_wait_s=90,
            sleep=lambda s: None,
            clock=lambda: next(clock),
        )


class FakeSlurm:
    """The controller side: records each command, answers squeue with `jobs` in turn."""

    def __init__(self, jobs=("",), fail_on: str | None = None):
        self.commands: list[str] = []
        self.jobs = list(jobs)
        self.fail_on = fail_on

    def __call__(self, argv: list[str]) -> str:
        self.commands.append(shlex.join(argv))
        if self.fail_on and argv[0] == self.fail_on:
            raise deep.DeepError(f"{argv[0]} failed")
        return self.jobs.pop(0) if argv[0] == "squeue" else ""


def test_run_deep_drains_only_the_failed_node_and_deletes_the_reservation():
    slurm = FakeSlurm()
    texts = {
        "gpu01": (DATA / "diag-r3-one-failed.json").read_text(),
        "gpu02": (DATA / "diag-r2-pass.json").read_text(),
        "gpu03": None,
    }
    report = deep.run_deep(
        slurm,
        lambda argv, hosts: {h: texts[h] for h in hosts},
        ["gpu01", "gpu02", "gpu03"],
        3,
        lambda line: None,
        now=datetime(2026, 1, 2, 3, 4, 5),
        sleep=lambda s: None,
    )
    assert slurm.commands == [
        "scontrol create reservation ReservationName=hal-deep-20260102T030405 'Nodes=gpu[01-03]' StartTime=now "
        "Duration=60 Users=root Flags=MAINT,IGNORE_JOBS",
        "squeue --noheader '--nodelist=gpu[01-03]' --states=RUNNING,SUSPENDED,COMPLETING,CONFIGURING '--format=%i|%u|%N|%L'",
        "scontrol update NodeName=gpu01 State=DRAIN 'Reason=hal-deep: dcgm diag -r 3: memory failed on GPU 1: Found 2 "
        "faulty memory elements on GPU 1'",
        "scontrol delete ReservationName=hal-deep-20260102T030405",
    ]
    assert [(n.host, n.passed, n.error) for n in report.nodes] == [
        ("gpu01", False, None),
        ("gpu02", True, None),
        ("gpu03", False, "no answer (dcgmi missing or the node unreachable)"),
    ]
    assert not report.passed


@pytest.mark.parametrize("stop", [deep.DeepError("squeue failed"), KeyboardInterrupt()])
def test_reservation_deleted_on_error_and_ctrl_c(stop):
    slurm = FakeSlurm()

    def diag(argv, hosts):
        raise stop

    with pytest.raises(type(stop)):
        deep.run_deep(slurm, diag, ["gpu01"], 2, lambda line: None, now=datetime(2026, 1, 2, 3, 4, 5))
    assert slurm.commands[-1] == "scontrol delete ReservationName=hal-deep-20260102T030405"


# ---- health deep: the command ----------------------------------------------------------------------


@pytest.fixture
def inventory(tmp_path):
    (tmp_path / "inventory").mkdir()
    (tmp_path / "inventory" / "hosts.yml").write_text("all: {}\n")
    (tmp_path / "files").mkdir()
    return tmp_path / "inventory"


def fake_ansible(monkeypatch, diag_files: dict[str, str]) -> list[tuple[str, str]]:
    """run_ad_hoc answering squeue with no job, scontrol with success and dcgmi diag on each
    host with its fixture (dcgmi exits 1 when a test failed: Ansible reports it failed)."""
    from hal_provision.plan import jobs

    calls: list[tuple[str, str]] = []

    def run_ad_hoc(inventory, pattern, command, timeout=300, what="--live", forks=None):
        calls.append((pattern, command))
        if command.startswith("dcgmi"):
            out = {}
            for host in pattern.split(","):
                text = (DATA / diag_files[host]).read_text()
                failed = '"Fail"' in text
                out[host] = {"rc": 1 if failed else 0, "failed": failed, "stdout": text}
            return out
        return {"ctl": {"rc": 0, "stdout": ""}}

    monkeypatch.setattr(jobs, "run_ad_hoc", run_ad_hoc)
    return calls


def test_command_drains_a_failed_node_and_exits_1(monkeypatch, inventory):
    from typer.testing import CliRunner

    from hal_provision.cli.main import app

    calls = fake_ansible(monkeypatch, {"gpu01": "diag-r3-one-failed.json", "gpu02": "diag-r2-pass.json"})
    result = CliRunner().invoke(app, ["health", "deep", "gpu[01-02]", "-i", str(inventory), "--level", "3"])
    assert result.exit_code == 1, result.output
    commands = [c for _p, c in calls]
    assert commands[0].startswith("scontrol create reservation ReservationName=hal-deep-")
    assert commands[2] == "dcgmi diag -r 3 --json" and calls[2][0] == "gpu01,gpu02"
    assert commands[3].startswith("scontrol update NodeName=gpu01 State=DRAIN 'Reason=hal-deep: dcgm diag -r 3: memory")
    assert commands[-1].startswith("scontrol delete ReservationName=hal-deep-")
    assert "memory" in result.output and "Found 2 faulty memory elements on GPU 1" in result.output


def test_command_all_passed_exits_0(monkeypatch, inventory):
    from typer.testing import CliRunner

    from hal_provision.cli.main import app

    calls = fake_ansible(monkeypatch, {"gpu01": "diag-r2-pass.json"})
    result = CliRunner().invoke(app, ["health", "deep", "gpu01", "-i", str(inventory)])
    assert result.exit_code == 0, result.output
    assert not any("DRAIN" in c for _p, c in calls)
    assert "gpu01: 8 pass" in result.output


@pytest.mark.parametrize("args", [["gpu[01"], ["gpu01", "--level", "7"], ["gpu01", "-i", "/nonexistent"]])
def test_command_usage_errors_exit_2(args):
    from typer.testing import CliRunner

    from hal_provision.cli.main import app

    assert CliRunner().invoke(app, ["health", "deep", *args]).exit_code == 2
