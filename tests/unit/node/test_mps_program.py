"""hal-mps (hal_provision/node/mps.py), Prolog, Epilog and TaskProlog of MPS jobs, run against
a fake nvidia-cuda-mps-control on PATH that records its arguments, environment and input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hal_provision.node import mps

FAKE = """#!/bin/sh
stdin=""
[ "$1" = "-d" ] || stdin=$(cat)
printf '{"args": "%s", "gpus": "%s", "pipe": "%s", "log": "%s", "stdin": "%s"}\\n' \\
    "$*" "$CUDA_VISIBLE_DEVICES" "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY" "$stdin" >> "$FAKE_CALLS"
exit "${FAKE_RC:-0}"
"""


@pytest.fixture
def node(tmp_path, monkeypatch):
    """(run(context, **env) -> exit code, calls() -> what the fake daemon was asked, state root)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    control = bin_dir / mps.CONTROL
    control.write_text(FAKE)
    control.chmod(0o755)
    calls = tmp_path / "calls"
    monkeypatch.setenv("FAKE_CALLS", str(calls))
    root = tmp_path / "run"

    def run(context: str, **env: str) -> int:
        base = {"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_CALLS": str(calls), "SLURM_SCRIPT_CONTEXT": context}
        return mps.main({**base, **env}, root)

    def recorded() -> list[dict]:
        return [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []

    return run, recorded, root


MPS_JOB = {
    "SLURM_JOB_ID": "42",
    "SLURM_JOB_UID": "1000",
    "CUDA_VISIBLE_DEVICES": "0,1",
    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
}


def test_a_job_with_mps_starts_and_stops_a_daemon_per_gpu(node):
    run, recorded, root = node
    assert run("prolog_slurmd", **MPS_JOB) == 0
    assert recorded() == [
        {"args": "-d", "gpus": gpu, "pipe": f"{root}/gpu{gpu}/pipe", "log": f"{root}/gpu{gpu}/log", "stdin": ""}
        for gpu in ("0", "1")
    ]
    assert run("epilog_slurmd", SLURM_JOB_ID="42") == 0
    assert recorded()[2:] == [
        {"args": "", "gpus": gpu, "pipe": f"{root}/gpu{gpu}/pipe", "log": f"{root}/gpu{gpu}/log", "stdin": "quit"}
        for gpu in ("0", "1")
    ]
    assert not list((root / "gpu0" / "jobs").iterdir())


def test_a_job_without_mps_runs_nothing(node):
    run, recorded, root = node
    whole_gpus = {"SLURM_JOB_ID": "43", "SLURM_JOB_UID": "1000", "CUDA_VISIBLE_DEVICES": "0,1"}
    assert run("prolog_slurmd", **whole_gpus) == 0
    assert run("prolog_task", **whole_gpus) == 0
    assert run("epilog_slurmd", **whole_gpus) == 0
    assert recorded() == [] and not root.exists()


def test_the_gpus_daemon_lives_until_its_last_mps_job_ends(node):
    run, recorded, _root = node
    one = {**MPS_JOB, "CUDA_VISIBLE_DEVICES": "1"}
    assert run("prolog_slurmd", **one) == 0
    assert run("prolog_slurmd", **dict(one, SLURM_JOB_ID="44", SLURM_JOB_UID="1001")) == 0
    assert [c["args"] for c in recorded()] == ["-d"]
    assert run("epilog_slurmd", SLURM_JOB_ID="42") == 0
    assert [c["args"] for c in recorded()] == ["-d"]
    assert run("epilog_slurmd", SLURM_JOB_ID="44") == 0
    assert [(c["gpus"], c["stdin"]) for c in recorded()] == [("1", ""), ("1", "quit")]


def test_the_task_prolog_points_the_job_at_its_gpus_daemon(node, capsys):
    run, _recorded, root = node
    run("prolog_slurmd", **{**MPS_JOB, "CUDA_VISIBLE_DEVICES": "3"})
    capsys.readouterr()
    assert run("prolog_task", SLURM_JOB_ID="42", CUDA_VISIBLE_DEVICES="0") == 0
    assert capsys.readouterr().out.splitlines() == [
        f"export CUDA_MPS_PIPE_DIRECTORY={root}/gpu3/pipe",
        f"export CUDA_MPS_LOG_DIRECTORY={root}/gpu3/log",
    ]
    assert run("prolog_task", SLURM_JOB_ID="99") == 0
    assert capsys.readouterr().out == ""


def test_a_daemon_that_does_not_start_fails_the_prolog(node, capsys):
    """slurmd drains a node whose Prolog fails: better than jobs waiting on a missing daemon."""
    run, _recorded, _root = node
    assert run("prolog_slurmd", FAKE_RC="3", **MPS_JOB) == 3
    assert "nvidia-cuda-mps-control -d (GPU 0) exited 3" in capsys.readouterr().err


def test_without_the_control_program_the_prolog_says_so(tmp_path, capsys):
    env = {**MPS_JOB, "SLURM_SCRIPT_CONTEXT": "prolog_slurmd", "PATH": str(tmp_path)}
    assert mps.main(env, tmp_path / "run") == 1
    assert f"nvidia-cuda-mps-control is not on {tmp_path}" in capsys.readouterr().err


def test_as_a_program_it_does_nothing_outside_slurms_scripts():
    """Run as slurmd runs it (a file, no arguments); here with no Slurm context, so no /run."""
    done = subprocess.run(
        [sys.executable, str(Path(mps.__file__))], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
