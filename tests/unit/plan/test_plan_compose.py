"""`hal-provision plan` on a recomposition: x86-composable's layout even (4 + 4) ->
training (6 + 2). The steps in compose.yml's order, the Slurm and health files owned by the
recomposition alone (no restart counted twice), and a running job holding GPUs on the host that
loses GPUs blocking, named. Goldens: tests/golden/plan/recompose-*.{txt,json}; regenerate with

    HAL_UPDATE_GOLDEN=1 python3 -m pytest tests/unit/plan/test_plan_compose.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hal_provision.plan import build
from hal_provision.plan.jobs import parse_jobs

from test_plan import GOLDEN, SQUEUE, plan_golden, tree

CLUSTERS = Path(__file__).resolve().parents[2] / "data" / "clusters"
EVEN = (CLUSTERS / "x86-composable.yml").read_text(encoding="utf-8")
TRAINING = EVEN.replace("\n  active: even\n", "\n  active: training\n")
assert TRAINING != EVEN


def recorded_jobs(running_on: str = "hal02", gpus: str = "gres:gpu:v100:1") -> str:
    """The recorded squeue (tests/data/plan/squeue.json), its running job moved to x86-composable
    as job 123 of alice holding `gpus` on `running_on`; the pending job (4 x gpu:v100:4) kept."""
    doc = json.loads(SQUEUE.read_text())
    doc["jobs"][0].update(job_id=123, user_name="alice", nodes=running_on, tres_per_node=gpus)
    return json.dumps(doc)


@pytest.fixture(scope="module")
def trees() -> dict[str, dict[str, str]]:
    return {"even": tree(EVEN), "training": tree(TRAINING)}


def steps(plan) -> list[tuple[str, str]]:
    [component] = [c for c in plan.components if c.name == "recomposition"]
    return [(q.action, q.hosts) for q in component.consequences]


def test_the_steps_in_order(trees) -> None:
    plan = build(trees["even"], trees["training"])
    assert plan.components[0].name == "recomposition"
    assert steps(plan) == [
        ("drain", "hal[01-02]"),
        ("wait for jobs", "hal[01-02]"),
        ("detach", "hal02"),
        ("attach", "hal01"),
        ("restart slurmctld", "comp-mgmt"),
        ("restart slurmd", "hal[01-02]"),
        ("health check", "hal[01-02]"),
        ("resume", "hal[01-02]"),
    ]
    [detach] = [q for q in plan.components[0].consequences if q.action == "detach"]
    assert detach.commands == (
        "python -m hal_provision.compose.driver --driver sandbox --pool chassis1 detach hal02 2",
    )
    assert "pool chassis1: loses hal02 (2); gains hal01 (2)" in plan.components[0].notes
    assert "recompose: ansible-playbook -i INVENTORY playbooks/compose.yml -e layout=training" in plan.advice[0]
    assert plan.exit_code == 2


def with_backup_controller(rendered: dict[str, str]) -> dict[str, str]:
    """The tree as services.slurmctld "comp-mgmt,comp-mgmt2" renders it for the plan: both
    SlurmctldHost lines in every slurm.conf (the layouts' copies too), both hosts in the group."""
    out = {
        path: text.replace("SlurmctldHost=comp-mgmt\n", "SlurmctldHost=comp-mgmt\nSlurmctldHost=comp-mgmt2\n")
        if path.endswith("/slurm.conf")
        else text
        for path, text in rendered.items()
    }
    inventory = yaml.safe_load(out["inventory/hosts.yml"])
    inventory["all"]["children"]["service_slurmctld"]["hosts"]["comp-mgmt2"] = None
    out["inventory/hosts.yml"] = yaml.safe_dump(inventory)
    return out


def test_with_a_backup_controller_the_backup_restarts_first(trees) -> None:
    """As every other restart of slurmctld (the slurm role's handlers, which compose.yml runs)."""
    plan = build(with_backup_controller(trees["even"]), with_backup_controller(trees["training"]))
    assert [c.name for c in plan.components][0] == "recomposition" and "slurm" not in [c.name for c in plan.components]
    assert [s for s in steps(plan) if s[0] == "restart slurmctld"] == [
        ("restart slurmctld", "comp-mgmt2"),
        ("restart slurmctld", "comp-mgmt"),
    ]
    backup, primary = [q for q in plan.components[0].consequences if q.action == "restart slurmctld"]
    assert backup.detail.startswith("backup controller, first: the NodeName Gres lines")
    assert primary.detail.startswith("primary controller, once `scontrol ping` shows comp-mgmt2 UP")


def test_back_again_is_the_mirror(trees) -> None:
    plan = build(trees["training"], trees["even"])
    assert ("detach", "hal01") in steps(plan) and ("attach", "hal02") in steps(plan)


def test_no_restart_counts_twice(trees) -> None:
    plan = build(trees["even"], trees["training"])
    names = [c.name for c in plan.components]
    assert "slurm" not in names and "health" not in names, names
    owned = {f.path for f in plan.components[0].files}
    assert {
        "files/etc/slurm/slurm.conf",
        "files/etc/slurm/gres.conf",
        "files/etc/hal-provision/composable.json",
    } <= owned
    restarts = [(c.name, q.action) for c in plan.components for q in c.consequences if q.action.startswith("restart")]
    assert restarts == [("recomposition", "restart slurmctld"), ("recomposition", "restart slurmd")]
    # the wrapper suite's table follows the layout (gpux6 shown, gpux8 hidden): compose.yml does
    # not install it, so the plan advises site.yml for it, a file only, restarting nothing
    swsuite = next(c for c in plan.components if c.name == "swsuite")
    assert [f.path for f in swsuite.files] == ["files/etc/swsuite/virtual-partitions.json"]
    assert [q.action for q in swsuite.consequences] == ["file only"]
    assert any("playbooks/site.yml" in line for line in plan.advice)


def test_a_change_beyond_the_layout_still_shows_as_itself(trees) -> None:
    longer = TRAINING.replace('max_time: "2-00:00:00"', 'max_time: "3-00:00:00"')
    plan = build(trees["even"], tree(longer))
    slurm = next(c for c in plan.components if c.name == "slurm")
    assert [q.action for q in slurm.consequences][0] == "scontrol reconfigure"  # MaxTime only, not the Gres lines
    assert not any("Gres" in note for note in slurm.notes)
    assert any(line.startswith("apply: ansible-playbook -i INVENTORY playbooks/site.yml") for line in plan.advice)


@pytest.mark.parametrize(
    "host, gpus, blocking",
    [
        ("hal02", "gres:gpu:v100:1", True),  # loses 2: its GPU could be the one detached
        ("hal01", "gres:gpu:v100:1", False),  # gains
        ("hal02", "", False),  # holds no GPU
    ],
)
def test_a_running_job_blocks_only_holding_gpus_on_a_losing_host(trees, host, gpus, blocking) -> None:
    plan = build(trees["even"], trees["training"], jobs=parse_jobs(recorded_jobs(host, gpus), "squeue"))
    held = [(i.job.job_id, i.why) for i in plan.blocking]
    assert held == ([(123, "holds 1 GPU on hal02, which loses 2")] if blocking else [])
    assert plan.exit_code == (1 if blocking else 2)
    assert all(not i.blocking for i in plan.impacts if i.job.job_id == 2)  # pending: never blocking here


CASES = {  # case -> (OLD, NEW, jobs given, exit code)
    "recompose-even-to-training": (EVEN, TRAINING, False, 2),
    "recompose-job-on-losing-host": (EVEN, TRAINING, True, 1),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("output", ["txt", "json"])
def test_plan_golden(tmp_path, monkeypatch, case, output) -> None:
    old, new, with_jobs, exit_code = CASES[case]
    monkeypatch.chdir(tmp_path)
    plan_golden(case, output, old, new, recorded_jobs() if with_jobs else None, exit_code)


def test_the_blocking_golden_names_the_job_and_the_command() -> None:
    text = (GOLDEN / "recompose-job-on-losing-host.txt").read_text()
    assert "job 123 (alice) holds 1 GPU on hal02, which loses 2" in text
    assert "playbooks/compose.yml -e layout=training" in text
