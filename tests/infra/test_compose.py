"""Composable GPUs on the running cluster: a pool of eight GPUs cabled to two compute
nodes, moved from four each to six and two and back by playbooks/compose.yml, never under a job.

The sandbox's derived model (WORKDIR/model.json) gets a `composable` section: the two GPU nodes'
profile loses its own GPUs and a pool of eight of the same kind (the sandbox driver: a pool GPU is
a /dev/nvidia<k> character device that the driver makes or removes in the node's container) is
cabled to both, with layouts `even` (4 + 4: what the nodes hold already) and `training` (6 + 2).
Each layout is rendered into a temporary tree as `sandbox up` renders, and compose.yml runs on it
(its driver state under the same temporary directory):

1. the driver's state starts from `even`, the layout the nodes hold (the driver finds their
   device files): from there nothing moves to `even`, two GPUs to `training`;
2. with a job of the test user holding one GPU on the second node, `hal-provision plan training
   --from even --live` is blocking and names the job;
3. once the job has ended, compose.yml at `training`: `sinfo` shows 6 and 2 GPUs, a 6-GPU job runs
   on the first node with six distinct devices, the health check passes on both;
4. `even` again: 4 and 4.

The deployed tree is applied again at the end (the Slurm tiers), so the cluster is as before.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from deployed import JOB_TIMEOUT, TEST_USER, deployed, retry, run_playbook, sandbox_render
from hal_provision import tools
from hal_provision.hostlist import ansible_name

D = deployed()
HV = D.hostvars[D.login]
WORKDIR = Path(HV["hal_sandbox_workdir"]) if HV.get("hal_sandbox_workdir") else None
SLURM_TIERS = ("slurm-controller.yml", "slurm-compute.yml", "slurm-login.yml")
POOL = "chassis1"
LAYOUTS = ("even", "training")


def load_model() -> dict | None:
    return json.loads((WORKDIR / "model.json").read_text()) if WORKDIR and (WORKDIR / "model.json").is_file() else None


def pool_hosts(model: dict | None) -> tuple[str, str, str] | None:
    """(profile, first host, second host): the first node group with GPUs, when it is exactly two
    nodes of one profile that has four GPUs (the sandbox's default compute group); else None."""
    if model is None:
        return None
    for group in model["nodes"]:
        profile = model["hardware"].get(group.get("hardware", ""), {})
        if not profile.get("gpus"):
            continue
        users = [g for g in model["nodes"] if g.get("hardware") == group["hardware"]]
        hosts = [h for g in users for h in D.hosts_in(f"nodes_{ansible_name(g['name'])}")]
        if len(profile["gpus"]["devices"]) == 4 and len(hosts) == 2:
            return group["hardware"], hosts[0], hosts[1]
        return None
    return None


MODEL = load_model()
HOSTS = pool_hosts(MODEL)
pytestmark = [
    pytest.mark.changes,
    pytest.mark.skipif(MODEL is None, reason="only the sandbox's model can be changed and put back"),
    pytest.mark.skipif(
        MODEL is not None and HOSTS is None, reason="the pool needs the sandbox's compute group: two nodes of four GPUs"
    ),
]


def pooled(model: dict, active: str) -> dict:
    """The model with the two GPU nodes' GPUs in a pool of eight, at layout `active`."""
    profile, first, second = HOSTS
    out = copy.deepcopy(model)
    gpus = out["hardware"][profile].pop("gpus")
    out["composable"] = {
        "pools": [
            {
                "name": POOL,
                "description": "the sandbox's eight GPUs, moved as device files",
                "driver": "sandbox",
                "hosts": f"{first},{second}",
                "slots_per_host": 6,
                "socket": 1,
                "gpus": {"type": gpus["type"], "model": gpus["model"], "memory_gib": gpus["memory_gib"], "count": 8},
            }
        ],
        "layouts": [
            {"name": "even", "gpus": {first: 4, second: 4}},
            {"name": "training", "gpus": {first: 6, second: 2}},
        ],
        "active": active,
    }
    return out


def render(model: dict, into: Path) -> Path:
    """The sandbox's rendered tree for `model` (files/ and inventory/), as `sandbox up` writes it."""
    from hal_provision.render.writer import write_tree

    write_tree(sandbox_render(WORKDIR, model)[1], into)
    return into


@pytest.fixture(scope="module")
def work():
    """The rendered layouts (WORK/<layout>/) and the model files the plan compares; the deployed
    tree applied again at the end, after the layout that holds what it held (even)."""
    with tempfile.TemporaryDirectory(prefix="hal-compose-") as tmp:
        tmp = Path(tmp)
        for layout in LAYOUTS:
            model = pooled(MODEL, layout)
            (tmp / f"{layout}.json").write_text(json.dumps(model))
            render(model, tmp / layout)
        yield tmp
        state = tmp / "compose-state" / f"{POOL}.json"
        if state.is_file() and json.loads(state.read_text())["hosts"] != {HOSTS[1]: 4, HOSTS[2]: 4}:
            compose(tmp, "even")
        for playbook in SLURM_TIERS:
            run_playbook(D.inventory, playbook, timeout=900)


def compose(work: Path, layout: str) -> str:
    """playbooks/compose.yml on the layout's tree: its inventory (hosts.yml, the same hosts and
    groups as the plugin's source, which reads the sandbox's own model; then sandbox.yml) and its
    files as the desired state."""
    tree = work / layout
    return run_playbook(
        tree / "inventory",
        "compose.yml",
        "-e",
        f"hal_rendered_dir={tree / 'files'}",
        "-e",
        f"compose_state_dir={work / 'compose-state'}",
        "-e",
        "compose_poll=2",
        "-e",
        "compose_wait_timeout=120",
        timeout=1200,
        inventories=[tree / "inventory" / "hosts.yml", tree / "inventory" / "sandbox.yml"],
    )


def sinfo_gres(host: str) -> str:
    return D.host(D.controller).check_output(f"sinfo -h -N -n {host} -o %G").strip()


def device_files(host: str) -> list[str]:
    out = D.host(host).check_output("find /dev -maxdepth 1 -name 'nvidia[0-9]*' | sort -V")
    return out.split()


def node_states(*hosts: str) -> set[str]:
    out = D.host(D.controller).check_output(f"sinfo -h -N -n {','.join(hosts)} -o %T")
    return {line.strip() for line in out.splitlines()}


def held(work: Path) -> dict[str, int]:
    return json.loads((work / "compose-state" / f"{POOL}.json").read_text())["hosts"]


def job_state(job_id: str) -> str:
    return D.host(D.controller).check_output(f"squeue -h -j {job_id} -o %T").strip()


def wait_idle(host: str) -> None:
    assert retry(lambda: not D.host(D.controller).check_output(f"squeue -h -w {host} -o %i").strip(), JOB_TIMEOUT, 2), (
        f"jobs still on {host}"
    )


def plan(work: Path, new: str, old: str) -> tuple[int, dict, str]:
    proc = subprocess.run(
        [
            tools.self_command(),
            "plan",
            str(work / f"{new}.json"),
            "--from",
            str(work / f"{old}.json"),
            "--live",
            str(D.inventory),
            "--json",
        ],
        env=tools.child_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout or "{}"), proc.stderr


def test_the_pool_starts_at_the_deployed_even_layout(work):
    """The sandbox driver's first `list` takes the active layout (even) as what the hosts hold,
    after finding their device files; from there nothing moves to `even`, two GPUs to `training`."""
    from hal_provision.compose.moves import driver_argv, moves

    config = json.loads((work / "even" / "files" / "etc/hal-provision/composable.json").read_text())
    [pool] = config["pools"]
    argv = driver_argv(
        pool,
        sys.executable,
        str(work / "even" / "files" / "etc/hal-provision/composable.json"),
        str(work / "compose-state"),
    ) + ["list"]
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=120, check=False, cwd=Path(__file__).resolve().parents[2]
    )
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(proc.stdout)
    _, first, second = HOSTS
    assert listed["hosts"] == {first: 4, second: 4} and held(work) == {first: 4, second: 4}, listed
    assert moves(config, "even", [listed]) == {"hosts": [], "steps": []}
    assert moves(config, "training", [listed])["steps"] == [
        {"action": "detach", "pool": POOL, "host": second, "count": 2},
        {"action": "attach", "pool": POOL, "host": first, "count": 2},
    ]
    for host in (first, second):
        assert len(device_files(host)) == 4, device_files(host)
        assert re.fullmatch(r"gpu:\w+:4(\(S:[\d,-]+\))?", sinfo_gres(host)), sinfo_gres(host)


def test_a_job_on_a_losing_host_blocks_the_plan(work):
    _, first, second = HOSTS
    wait_idle(second)
    job = D.sbatch(f"-w {second} -N1 --gres=gpu:1 -t 10 --chdir=/tmp -o /dev/null --wrap 'sleep 600'")
    try:
        assert retry(lambda: job_state(job) == "RUNNING", 60, 1), f"job {job}: {job_state(job)}"
        code, doc, err = plan(work, "training", "even")
        assert code == 1, f"plan exit {code}: {err}\n{json.dumps(doc, indent=1)[:3000]}"
        assert [c["name"] for c in doc["components"]][0] == "recomposition", doc["components"]
        blocking = [j for j in doc["jobs"] if j["blocking"]]
        assert [(str(j["job_id"]), j["user"]) for j in blocking] == [(job, TEST_USER)], json.dumps(
            doc["jobs"], indent=1
        )
        assert blocking[0]["why"] == f"holds 1 GPU on {second}, which loses 2", blocking[0]
        assert any(job in line for line in doc["advice"]), doc["advice"]
    finally:
        D.host(D.controller).run(f"scancel {job}")  # the user ends it
    assert retry(lambda: job_state(job) == "", 60, 1), f"job {job} still {job_state(job)}"


def test_training_layout_moves_two_gpus_and_a_six_gpu_job_runs(work):
    _, first, second = HOSTS
    wait_idle(second)
    output = compose(work, "training")
    assert re.search(rf"detach {second} 2 \(pool {POOL}\)", output) and re.search(
        rf"attach {first} 2 \(pool {POOL}\)", output
    ), output[-4000:]
    assert held(work) == {first: 6, second: 2}
    assert len(device_files(first)) == 6 and len(device_files(second)) == 2, (device_files(first), device_files(second))
    assert retry(lambda: re.fullmatch(r"gpu:\w+:6(\(S:[\d,-]+\))?", sinfo_gres(first)), 30, 2), sinfo_gres(first)
    assert re.fullmatch(r"gpu:\w+:2(\(S:[\d,-]+\))?", sinfo_gres(second)), sinfo_gres(second)

    # slurmd registered its new GPUs with the restarted slurmctld, and compose.yml resumed both
    assert retry(lambda: node_states(first, second) == {"idle"}, 60, 2), node_states(first, second)
    script = 'echo GPUS=${SLURM_STEP_GPUS:-$SLURM_JOB_GPUS}; for d in /dev/nvidia[0-9]*; do stat -c "%n %F %T" $d; done'
    out = D.user_ok(f"srun -w {first} -N1 --gres=gpu:6 -t 5 bash -c '{script}'", timeout=JOB_TIMEOUT)
    ids = re.search(r"^GPUS=([\d,]+)$", out, re.M)
    assert ids, out
    ids = ids.group(1).split(",")
    assert len(set(ids)) == 6, out
    devices = {m[1]: int(m[2], 16) for m in re.finditer(r"^/dev/nvidia(\d+) character special file (\w+)$", out, re.M)}
    assert all(int(i) in devices.values() for i in ids), (ids, devices)

    health = json.loads((work / "training" / "files" / "etc/hal-provision/health.json").read_text())
    for host, count in ((first, 6), (second, 2)):
        expected = json.loads(D.host(host).check_output(f"cat {health['node_expectation']}"))
        assert len(expected["checks"]["gpus"]["files"]) == count, expected["checks"]["gpus"]
        run = D.host(host).run(f"{health['path']} --no-slurm")
        assert run.rc == 0, f"{host}: health check failed:\n{run.stdout}{run.stderr}"


def test_even_layout_restores_four_and_four(work):
    _, first, second = HOSTS
    wait_idle(first)
    output = compose(work, "even")
    assert re.search(rf"detach {first} 2 \(pool {POOL}\)", output), output[-4000:]
    assert held(work) == {first: 4, second: 4}
    for host in (first, second):
        assert len(device_files(host)) == 4, device_files(host)
        assert retry(lambda: re.fullmatch(r"gpu:\w+:4(\(S:[\d,-]+\))?", sinfo_gres(host)), 30, 2), sinfo_gres(host)
