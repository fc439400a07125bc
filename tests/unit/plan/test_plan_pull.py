"""`hal-provision plan` on a pull-mode cluster (deploy.mode pull): the advice builds and signs the
bundle, pushes the control plane alone (`--limit 'all:!deploy_pull'`) where the change reaches it,
publishes, says what the nodes then do and how to follow them or hurry them; a node that leaves
is drained with scontrol and its own converge stopped, never rolled with rolling.yml (which
pushes). The cluster is tests/data/clusters/fleet.yml (fl-mgmt pushed, fl[01-04] pulling), and
x86-composable.yml with a deploy section for a layout switch.

Goldens: tests/golden/plan/pull-*.{txt,json}; regenerate with

    HAL_UPDATE_GOLDEN=1 python3 -m pytest tests/unit/plan/test_plan_pull.py
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hal_provision.plan import build
from hal_provision.plan.jobs import parse_jobs

from test_plan import GOLDEN, SQUEUE, edit, plan_golden, tree

CLUSTERS = Path(__file__).resolve().parents[2] / "data" / "clusters"
FLEET = (CLUSTERS / "fleet.yml").read_text(encoding="utf-8")
COMPOSABLE = (CLUSTERS / "x86-composable.yml").read_text(encoding="utf-8") + "\ndeploy:\n  mode: pull\n"
CONTROL_PLANE = "--limit 'all:!deploy_pull'"

COMPUTE = (
    "    hosts: fl[01-04]                          # the fleet scenario runs two (sandbox up --computes 2),\n"
    "    count: 4 "
)
PARTITION = "      nodes: fl[01-04]\n"


def computes(last: int) -> list[tuple[str, str]]:
    """fl[01-LAST] instead of fl[01-04], in the node group and the partition."""
    return [
        (COMPUTE, f"    hosts: fl[01-{last:02d}]\n    count: {last} "),
        (PARTITION, f"      nodes: fl[01-{last:02d}]\n"),
    ]


MAX_TIME = [('      max_time: "1-00:00:00"                  # [fixture]', '      max_time: "2-00:00:00"')]
# A major beside the one Debian 12 ships: the site's own packages (slurm.build_own).
UPGRADE = [("\nslurm:\n", '\nslurm:\n  version: "23.11"\n  build_own: true\n')]
SIXTEEN_MORE = edit(computes(48), FLEET), edit(computes(64), FLEET)


def job_on(host: str) -> str:
    """The recorded squeue (tests/data/plan/squeue.json), its running job on `host` of partition cpu."""
    doc = json.loads(SQUEUE.read_text())
    doc["jobs"][0].update(nodes=host, partition="cpu", tres_per_node="")
    return json.dumps(doc)


CASES = {  # case -> (OLD, NEW, jobs given, exit code)
    "pull-max-time": (FLEET, edit(MAX_TIME, FLEET), False, 2),
    "pull-grow-48-to-64": (*SIXTEEN_MORE, False, 2),
    "pull-recompose": (COMPOSABLE, COMPOSABLE.replace("\n  active: even\n", "\n  active: training\n"), False, 2),
    "pull-slurm-22.05-to-23.11": (FLEET, edit(UPGRADE, FLEET), False, 2),
    "pull-node-removed-job-running": (FLEET, edit(computes(3), FLEET), True, 1),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("output", ["txt", "json"])
def test_plan_golden(tmp_path, monkeypatch, case, output) -> None:
    old, new, with_jobs, exit_code = CASES[case]
    monkeypatch.chdir(tmp_path)
    plan_golden(case, output, old, new, job_on("fl04") if with_jobs else None, exit_code)


def advice(case: str) -> list[str]:
    return json.loads((GOLDEN / f"{case}.json").read_text())["advice"]


def commands(lines: list[str], head: str) -> list[str]:
    """The commands of `lines` that start with `head` (up to a parenthesis or the line's end)."""
    return [line[line.index(head) :].split(" (")[0] for line in lines if head in line]


@pytest.mark.parametrize("case", list(CASES))
def test_bundle_push_the_control_plane_alone_publish(case) -> None:
    """No pull node is pushed: every site.yml is limited to the control plane (or, once, to the new
    nodes' enrolment), rolling.yml never; the bundle is built before the push and published after it."""
    lines = advice(case)
    assert not any("rolling.yml" in line for line in lines), lines
    sites = commands(lines, "ansible-playbook -i rendered/")
    assert all(c.endswith(CONTROL_PLANE) or "--limit '~fl(" in c for c in sites if "site.yml" in c), sites
    order = [
        next(i for i, line in enumerate(lines) if mark in line)
        for mark in ("hal-provision bundle new.yml --out bundles/", "playbooks/publish.yml")
    ]
    assert order == sorted(order)
    assert any(line.startswith("follow: hal-provision fleet status rendered/") for line in lines)


def test_a_limit_change_is_bundled_pushed_to_the_controller_and_published() -> None:
    """The sequence the fleet scenario can run literally (tests/infra/test_pull.py's MaxTime step)."""
    assert advice("pull-max-time") == [
        "render first: hal-provision render new.yml -o rendered/fl (rendered/fl/inventory does not hold NEW yet, and "
        "the commands below converge what it holds)",
        "bundle (NEW's, its release signed with the cluster's key; nothing changes yet): "
        "hal-provision bundle new.yml --out bundles/fl",
        "push the control plane (the change reaches fl-mgmt there): "
        "ansible-playbook -i rendered/fl/inventory playbooks/site.yml --limit 'all:!deploy_pull'",
        "publish (on every point, current.json last): "
        'ansible-playbook -i rendered/fl/inventory playbooks/publish.yml -e "bundle_dir=$PWD/bundles/fl"',
        "then fl[01-04] take it at their timer's next run (OnCalendar=*:0/30, RandomizedDelaySec=0): each drains "
        "itself, waits at most 120 s for its jobs (none is cancelled; still running, it stays drained for the next "
        "run), converges and resumes",
        "follow: hal-provision fleet status rendered/fl/inventory (exit 0 once every pull node runs the new version)",
        "or hurry (their converge now, not at the timer): "
        "hal-provision fleet converge 'fl[01-04]' -i rendered/fl/inventory --wait",
        "jobs not checked: give --jobs FILE (squeue --json) or --live INVENTORY",
    ]


def test_a_leaving_node_stops_its_converge_is_drained_then_its_slurmd_stops() -> None:
    lines = advice("pull-node-removed-job-running")
    steps = [
        next(i for i, line in enumerate(lines) if line.startswith(head))
        for head in (
            "first, on fl04: systemctl disable --now hal-converge.timer",
            'drain: scontrol update nodename=fl04 state=drain reason="hal-provision plan: leaving the cluster"',
            "wait: until `squeue -w fl04` lists no job",
            "bundle",
            "push the control plane",
            "then, on fl04: systemctl disable --now slurmd",
            "publish",
            "then fl[01-03] take it",
        )
    ]
    assert steps == sorted(steps), lines


def test_new_pull_nodes_are_enrolled_with_a_limit_ansible_reads() -> None:
    """fl[49-64] as Ansible's --limit: neither a Slurm hostlist nor fl[49:64] (both subscripts to
    Ansible), nor sixteen names, but one expression."""
    [enrol] = [line for line in advice("pull-grow-48-to-64") if line.startswith("first deployment of fl[49-64]")]
    assert enrol.endswith("playbooks/site.yml --limit '~fl(49|5[0-9]|6[0-4])$'"), enrol
    assert "fl49,fl50" not in (GOLDEN / "pull-grow-48-to-64.txt").read_text()


def test_a_recomposition_is_composed_then_published() -> None:
    lines = advice("pull-recompose")
    assert lines[1].startswith("recompose: ansible-playbook -i rendered/comp/inventory playbooks/compose.yml")
    assert "it pushes to the pull nodes too, over SSH" in lines[1]
    assert any(line.startswith("push the control plane (the change reaches comp-login there)") for line in lines)
    assert any(
        "compose.yml wrote what changes on them, so their converge finds nothing to change" in line for line in lines
    )


def test_an_upgrade_restarts_each_daemon_once_and_pull_nodes_take_it_from_the_bundle() -> None:
    doc = json.loads((GOLDEN / "pull-slurm-22.05-to-23.11.json").read_text())
    actions = [(c["name"], q["action"], q["hosts"]) for c in doc["components"] for q in c["consequences"]]
    assert [a for a in actions if a[1].startswith("restart")] == []
    assert ("slurm", "at its upgrade step", "fl[01-04],fl-mgmt") in actions
    [slurmd] = [q for c in doc["components"] for q in c["consequences"] if q["action"] == "upgrade slurmd"]
    assert slurmd["commands"] == [] and "once the bundle of NEW is published" in slurmd["detail"]


def test_a_change_of_the_control_plane_alone_publishes_nothing() -> None:
    """A virtual partition of the wrapper suite: login nodes only (fl-mgmt here)."""
    old = tree(FLEET)
    new = tree(edit([("max_time_hours: 24}", "max_time_hours: 12}")], FLEET))
    plan = build(old, new, inventory="inv", bundle_dir="b")
    assert [c.name for c in plan.components] == ["swsuite"]
    assert plan.advice == [
        "push the control plane (the change reaches fl-mgmt there): "
        "ansible-playbook -i inv playbooks/site.yml --limit 'all:!deploy_pull'",
        "jobs not checked: give --jobs FILE (squeue --json) or --live INVENTORY",
    ]


def test_a_redefined_node_with_a_job_is_drained_and_resumed_once_converged() -> None:
    """A running job on a node whose definition changes: drained and waited for before the control
    plane learns the new definition; its converge leaves that drain, so it is resumed by hand."""
    old = tree(FLEET)
    new = tree(edit([("memory_reserve_mib: 4096 ", "memory_reserve_mib: 8192 ")], FLEET))
    plan = build(old, new, jobs=parse_jobs(job_on("fl02"), "squeue"), inventory="inv", bundle_dir="b")
    assert plan.exit_code == 1
    heads = [line.split(":")[0] for line in plan.advice]
    assert heads[:3] == [
        "drain",
        "wait",
        "bundle (NEW's, its release signed with the cluster's key; nothing changes yet)",
    ]
    assert (
        "once `fleet status` shows fl02 at the new version (a node's converge lifts only its own drain): "
        "scontrol update nodename=fl02 state=resume" in plan.advice
    )


def test_commands_wrapped_onto_lines_of_their_own_stay_whole() -> None:
    """Every command of the printed advice stands on one line, or on several joined by ` \\`,
    which a shell reads as one command: none is broken where a paste would run it in pieces."""
    for case in CASES:
        printed = re.sub(r" \\\n +", " ", (GOLDEN / f"{case}.txt").read_text()).splitlines()
        for line in advice(case):
            command = line.split(": ", 1)[-1].split(" (")[0]
            if command.startswith(("hal-provision ", "ansible-playbook ", "scontrol ", "systemctl ")):
                assert any(command in printed_line for printed_line in printed), (case, command)
