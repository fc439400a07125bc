"""Whose drain is it (hal_provision/node/drains.py): one table of `sinfo -o '%T|%E'` lines that
the node module, the two node programs using it (hal-converge, hal-healthcheck) and the
playbooks' task file (playbooks/tasks/resume-ours.yml, run with ansible-playbook against this
machine, sinfo and scontrol faked on PATH) all answer alike."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hal_provision.node import converge, drains
from hal_provision.node.health import healthcheck

REPO = Path(__file__).resolve().parents[3]
RESUME_OURS = REPO / "playbooks" / "tasks" / "resume-ours.yml"
ANSIBLE_PLAYBOOK = shutil.which("ansible-playbook") or str(Path(sys.executable).parent / "ansible-playbook")
needs_ansible = pytest.mark.skipif(not Path(ANSIBLE_PLAYBOOK).exists(), reason="ansible-playbook is not installed")

CONVERGE, HEALTH = converge.DRAIN_REASON, "hal-health"
ROLLING, COMPOSE = "hal-provision rolling apply", "hal-provision compose"
GRES_REWRITTEN = "gres/gpu count reported lower than configured (0 < 2)"

# (sinfo's %T|%E, the prefix of the program asking, drained, ours: resumed by that program)
TABLE = [
    pytest.param("drained|hal-provision converge: version 2024-05-02.1", CONVERGE, True, True, id="converge"),
    pytest.param(
        "drained|hal-provision converge failed: version 2024-05-02.1: Install slurmd",
        CONVERGE,
        True,
        True,
        id="converge-failed",
    ),
    pytest.param("draining|hal-provision converge: version 2024-05-02.1", CONVERGE, True, True, id="converge-draining"),
    pytest.param("drained|hal-provision converged by hand, keep", CONVERGE, True, False, id="converge-lookalike"),
    pytest.param("drained|hal-health: gpus: /dev/nvidia3 missing", CONVERGE, True, False, id="health-not-converge"),
    pytest.param("drained|hal-health: gpus: /dev/nvidia3 missing", HEALTH, True, True, id="health"),
    pytest.param("drained*|hal-health: mounts: /sw not mounted", HEALTH, True, True, id="health-not-responding"),
    pytest.param("drained|hal-healthy admin note", HEALTH, True, False, id="health-lookalike"),
    pytest.param("drained|hal-provision rolling apply", ROLLING, True, True, id="rolling"),
    pytest.param("draining|hal-provision rolling apply", ROLLING, True, True, id="rolling-draining"),
    pytest.param("drained|after hal-provision rolling apply: swap DIMM 3", ROLLING, True, False, id="rolling-quoted"),
    pytest.param("drained|hal-provision compose: layout training", COMPOSE, True, True, id="compose"),
    pytest.param("drained~|hal-provision compose: layout inference", COMPOSE, True, True, id="compose-powered-off"),
    pytest.param(f"drained|{GRES_REWRITTEN}", COMPOSE, True, False, id="compose-rewritten-by-slurmctld"),
    pytest.param("drained|replace DIMM 3 (ticket 4411)", CONVERGE, True, False, id="admin"),
    pytest.param("drained|none", HEALTH, True, False, id="no-reason"),
    pytest.param("mixed+drain|hal-health: gpus: x", HEALTH, True, True, id="scontrol-style-state"),
    pytest.param("idle|none", ROLLING, False, False, id="idle"),
    pytest.param("mixed|hal-provision rolling apply", ROLLING, False, False, id="resumed-reason-left"),
    pytest.param("down*|Not responding", COMPOSE, False, False, id="down"),
]


@pytest.mark.parametrize(("line", "prefix", "drained", "resumed"), TABLE)
def test_the_node_module(line, prefix, drained, resumed):
    state, reason = drains.parse(line)
    assert state == line.split("|")[0].rstrip("*~").lower() and "none" not in (state, reason)
    assert drains.is_drained(state) is drained
    assert (drained and drains.ours(reason, prefix)) is resumed


def test_a_line_without_a_reason_column_is_not_parsed():
    assert drains.parse("") is None and drains.parse("idle") is None
    assert drains.parse("  drained | none \n") == ("drained", "")


@pytest.mark.parametrize(("line", "prefix", "drained", "resumed"), [p for p in TABLE if p.values[1] == CONVERGE])
def test_hal_converge(monkeypatch, line, prefix, drained, resumed):
    monkeypatch.setattr(
        converge, "run_command", lambda argv, **_: subprocess.CompletedProcess(argv, 0, line + "\n", "")
    )
    node = converge.slurm_node("hal16")
    assert converge.drained_by_us(node) is resumed
    assert converge.drained_by_others(node) is (drained and not resumed)


@pytest.mark.parametrize(("line", "prefix", "drained", "resumed"), [p for p in TABLE if p.values[1] == HEALTH])
def test_hal_healthcheck(monkeypatch, line, prefix, drained, resumed):
    monkeypatch.setattr(healthcheck, "_run", lambda cmd, errors=True: (0, line + "\n"))
    state, reason = healthcheck.node_state("hal16")
    action, _ = healthcheck.decide(state, reason, None, prefix)
    assert action == ("resume" if resumed else "none")


# ---- the playbooks' task file --------------------------------------------------------------------


def fake_slurm(tmp_path: Path) -> tuple[Path, Path]:
    """sinfo prints $SINFO_ANSWER ('%N|%T|%E' lines) and records its arguments; scontrol records."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    for name, body in (
        ("sinfo", f'echo "sinfo $*" >> {calls}\ncat "$SINFO_ANSWER"\n'),
        ("scontrol", f'echo "scontrol $*" >> {calls}\n'),
    ):
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    return bin_dir, calls


def play(name: str, prefix: str, answer: Path, also: list[str] | None = None) -> dict:
    return {
        "name": name,
        "hosts": "localhost",
        "gather_facts": False,
        "environment": {"SINFO_ANSWER": str(answer)},
        "tasks": [
            {
                "name": "Resume ours",
                "ansible.builtin.import_tasks": str(RESUME_OURS),
                "vars": {
                    "resume_hosts": "n[01-99]",
                    "resume_reason": prefix,
                    **({"resume_also": also} if also is not None else {}),
                },
            }
        ],
    }


def run_playbook(tmp_path: Path, plays: list[dict], *extra: str) -> list[str]:
    bin_dir, calls = fake_slurm(tmp_path)
    playbook = tmp_path / "resume.yml"
    playbook.write_text(json.dumps(plays))  # YAML's superset
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "PYTHONPATH": str(REPO),
    }
    done = subprocess.run(
        [
            ANSIBLE_PLAYBOOK,
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
            *extra,
            str(playbook),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return calls.read_text().splitlines() if calls.exists() else []


def answers(tmp_path: Path) -> tuple[list[dict], list[str]]:
    """One play per prefix, its sinfo listing the table's lines for that prefix as nodes nNN."""
    by_prefix: dict[str, list[tuple[str, str, bool]]] = {}
    for number, param in enumerate(TABLE, 1):
        line, prefix, _, resumed = param.values
        by_prefix.setdefault(prefix, []).append((f"n{number:02d}", line, resumed))
    plays, expected = [], []
    for index, (prefix, rows) in enumerate(by_prefix.items()):
        answer = tmp_path / f"sinfo-{index}"
        answer.write_text("".join(f"{node}|{line}\n" for node, line, _ in rows))
        plays.append(play(prefix, prefix, answer))
        expected += ["sinfo --noheader --Node --nodes n[01-99] --states drain,drng --format %N|%T|%E"]
        expected += [f"scontrol update nodename={node} state=resume" for node, _, resumed in rows if resumed]
    return plays, expected


@needs_ansible
def test_the_task_file_resumes_what_the_table_says(tmp_path):
    plays, expected = answers(tmp_path)
    assert run_playbook(tmp_path, plays) == expected


@needs_ansible
def test_the_task_file_changes_nothing_in_check_mode(tmp_path):
    plays, expected = answers(tmp_path)
    assert run_playbook(tmp_path, plays, "--check", "--diff") == [c for c in expected if c.startswith("sinfo ")]


@needs_ansible
def test_also_resumes_the_caller_s_own_hosts_whatever_their_reason(tmp_path):
    """compose.yml's case: slurmctld rewrote the reason of a host this run drained (n01); an
    administrator's drain (n02) and a host not drained (n03) are left alone; the sinfo line
    repeated (one per partition) resumes once."""
    answer = tmp_path / "sinfo"
    answer.write_text(
        f"n01|drained|{GRES_REWRITTEN}\nn01|drained|{GRES_REWRITTEN}\nn02|drained|replace DIMM 3\n"
        "n03|idle|none\nn04|drained|hal-provision compose: layout training\n"
    )
    calls = run_playbook(tmp_path, [play("compose", COMPOSE, answer, also=["n01", "n03"])])
    assert [c for c in calls if c.startswith("scontrol")] == [
        "scontrol update nodename=n01 state=resume",
        "scontrol update nodename=n04 state=resume",
    ]


@needs_ansible
@pytest.mark.parametrize("playbook", ["rolling.yml", "compose.yml"])
def test_playbook_syntax(playbook):
    done = subprocess.run(
        [ANSIBLE_PLAYBOOK, "-i", "localhost,", "--syntax-check", str(REPO / "playbooks" / playbook)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")},
    )
    assert done.returncode == 0, done.stdout + done.stderr
