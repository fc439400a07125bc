"""Day-2 changes on the running cluster, with a job running through each: the plan
printed before a change says what the converge then does, and the job survives.

Each change is made to the sandbox's derived model (WORKDIR/model.json), planned with
`hal-provision plan NEW --from OLD` (both model files: the sandbox's own render adds its
harness settings to slurm.conf on both sides alike, so the model's difference is the plan's),
rendered into a temporary tree as `sandbox up` renders and applied by the Slurm tiers of
site.yml (slurm-controller, slurm-compute, slurm-login: the one component the plan names). The
handlers that ran are compared with the plan's actions.

Then the sandbox scales out by one compute node (`hal-provision sandbox up --computes N+1`
starts its container and renders; site.yml converges everything, which also puts the limit and
reserve back) and in again through playbooks/rolling.yml, which waits for a job on the node
that goes; the node's container is removed at the end. The model as deployed is applied again
should a test stop half way.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from deployed import deployed, retry, run_playbook, sandbox_render, tail
from hal_provision import tools
from hal_provision.hostlist import expand

D = deployed()
HV = D.hostvars[D.login]
WORKDIR = Path(HV["hal_sandbox_workdir"]) if HV.get("hal_sandbox_workdir") else None
SLURM_TIERS = ("slurm-controller.yml", "slurm-compute.yml", "slurm-login.yml")
# The plan's Slurm actions -> the slurm role's handlers that carry them out.
HANDLERS = {
    "scontrol reconfigure": "Reconfigure slurmctld",
    "reload slurmd": "Reload slurmd",
    "restart slurmctld": "Restart slurmctld",
    "restart slurmd": "Restart slurmd",
}
# With a backup controller the plan's "restart slurmctld" is carried out by two handlers: the
# backup's first, then the primary's (roles/slurm/handlers/main.yml).
SAME_HANDLER = {"Restart the backup slurmctld": "Restart slurmctld"}

pytestmark = [
    pytest.mark.changes,
    pytest.mark.skipif(
        WORKDIR is None or not (WORKDIR / "model.json").is_file(),
        reason="only the sandbox's model can be changed and put back",
    ),
]


def load_model() -> dict:
    return json.loads((WORKDIR / "model.json").read_text())


def compute_partition(model: dict) -> dict:
    return next(p for p in model["slurm"]["partitions"] if p["name"] in D.compute_partitions())


def render(model: dict, into: Path) -> Path:
    """The sandbox's rendered tree for `model` (its files/ and inventory/), as `sandbox up` writes it."""
    from hal_provision.render.writer import write_tree

    write_tree(sandbox_render(WORKDIR, model)[1], into)
    return into


def plan(new: Path, old: Path) -> tuple[int, dict]:
    proc = subprocess.run(
        [tools.self_command(), "plan", str(new), "--from", str(old), "--json"],
        env=tools.child_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 2), f"plan exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.returncode, json.loads(proc.stdout)


def slurm_actions(doc: dict) -> dict[str, set[str]]:
    """The plan's Slurm actions -> the hosts they name (expanded)."""
    actions: dict[str, set[str]] = {}
    for component in doc["components"]:
        if component["name"] != "slurm":
            continue
        for c in component["consequences"]:
            if c["action"] in HANDLERS:
                actions.setdefault(c["action"], set()).update(expand(c["hosts"]))
    return actions


def apply(rendered: Path) -> str:
    """The Slurm tiers on `rendered`'s files, as the sandbox runs playbooks; their output. Their
    inventory is the deployed tree's inventory/ as it is (hosts.yml, then sandbox.yml)."""
    return "\n".join(
        run_playbook(D.inventory, playbook, "-e", f"hal_rendered_dir={rendered / 'files'}", inventories=[D.inventory])
        for playbook in SLURM_TIERS
    )


HANDLER_RE = re.compile(r"^RUNNING HANDLER \[slurm : (?P<name>[^\]]+)\]", re.M)
RESULT_RE = re.compile(r"^(changed|ok): \[(?P<host>[^\]\s]+)", re.M)


def handlers_run(output: str) -> dict[str, set[str]]:
    """slurm role handler (of those HANDLERS names) -> the hosts it ran on (skipped hosts left out)."""
    ran: dict[str, set[str]] = {}
    blocks = HANDLER_RE.split(output)
    for name, body in zip(blocks[1::2], blocks[2::2]):
        body = body.split("\nTASK [", 1)[0].split("\nRUNNING HANDLER [", 1)[0].split("\nPLAY ", 1)[0]
        hosts = {m["host"] for m in RESULT_RE.finditer(body)}
        name = SAME_HANDLER.get(name, name)
        if hosts and name in HANDLERS.values():
            ran.setdefault(name, set()).update(hosts)
    return ran


def expected_handlers(actions: dict[str, set[str]]) -> dict[str, set[str]]:
    return {HANDLERS[a]: hosts for a, hosts in actions.items()}


def pid(host: str, unit: str) -> str:
    return D.host(host).check_output(f"systemctl show -p MainPID --value {unit}").strip()


def started(host: str, unit: str) -> str:
    """systemd's id of the unit's current run: new at every start or restart by systemd, kept
    when the daemon replaces its own process (Slurm 24.11's slurmctld does on a reconfigure)."""
    return D.host(host).check_output(f"systemctl show -p InvocationID --value {unit}").strip()


# The Slurm majors whose slurmctld keeps its process through `scontrol reconfigure` (seen here:
# 22.05); 24.11's starts a new one in the same systemd run (its MainPID changes), so there the
# run, not the process, shows that nothing restarted it.
KEEPS_PROCESS_ON_RECONFIGURE = {"22.05"}
SLURM_VERSION = json.loads(D.rendered("etc/hal-provision/slurm-version.json") or '{"version": "22.05"}')["version"]


def job_state(job_id: str) -> str:
    return D.host(D.controller).check_output(f"squeue -h -j {job_id} -o %T").strip()


@pytest.fixture(scope="module")
def running_job():
    """A job of the test user on a compute node, running through every change."""
    node = D.partitions()[D.compute_partitions()[0]][0]
    job_id = D.sbatch(
        f"-p {D.compute_partitions()[0]} -w {node} -N1 -t 60 --chdir=/tmp -o /dev/null --wrap 'sleep 3000'"
    )
    assert retry(lambda: job_state(job_id) == "RUNNING", 60), f"job {job_id}: {job_state(job_id)}"
    yield job_id
    D.host(D.controller).run(f"scancel {job_id}")


def source() -> dict:
    """What `sandbox up` was given (WORKDIR/sandbox.json): description, compute nodes, subnet,
    caches, whether the compute group was made CPU-only."""
    return json.loads((WORKDIR / "sandbox.json").read_text())


def sandbox_up(computes: int) -> str:
    """`hal-provision sandbox up --no-converge` with `computes` compute nodes: new containers
    start, the tree and model.json are rendered again; nothing is converged or removed."""
    src = source()
    argv = [
        tools.self_command(),
        "sandbox",
        "up",
        *([src["file"]] if src["file"] else []),
        "--computes",
        str(computes),
        "--subnet",
        src["subnet"],
        "--workdir",
        str(WORKDIR),
        "--no-converge",
        "--caches" if src.get("caches", True) else "--no-caches",
        *(["--cpu-only"] if src.get("cpu_only") else []),
        "--release",
        src.get("release", "bookworm"),
    ]
    proc = subprocess.run(argv, env=tools.child_env(), capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    return proc.stdout


def converge(playbook: str, *extra: str) -> str:
    """A playbook over the sandbox's current tree, exactly as `sandbox up` runs site.yml."""
    return run_playbook(D.inventory, playbook, *extra, timeout=1800)


@pytest.fixture(scope="module")
def changes():
    """A directory for the changed models (deployed.json: the model as deployed). Should a test
    stop half way, the sandbox is put back: its compute nodes as before and the model applied."""
    with tempfile.TemporaryDirectory(prefix="hal-changes-") as tmp:
        deployed_model = load_model()
        (Path(tmp) / "deployed.json").write_text(json.dumps(deployed_model))
        computes = source()["computes"]
        (Path(tmp) / "computes").write_text(str(computes))
        yield Path(tmp)
        if (
            load_model() != deployed_model
            or len(list(Path(tmp).glob("*.json"))) > 1
            and not (Path(tmp) / "done").exists()
        ):
            sandbox_up(computes)
            converge("site.yml")
        from hal_provision.sandbox import lifecycle

        for stray in lifecycle.strays(lifecycle.load(WORKDIR)):
            subprocess.run(["podman", "rm", "-f", "-t", "2", stray], capture_output=True, check=False)


def test_plan_of_no_change_is_empty(changes):
    code, doc = plan(changes / "deployed.json", WORKDIR / "model.json")
    assert code == 0 and not doc["components"], json.dumps(doc, indent=1)[:3000]


def test_raised_limit_reconfigures_and_the_job_survives(running_job, changes):
    model = load_model()
    compute_partition(model)["max_time"] = "3-00:00:00"
    new = changes / "limit.json"
    new.write_text(json.dumps(model))
    code, doc = plan(new, changes / "deployed.json")
    actions = slurm_actions(doc)
    assert code == 2 and set(actions) == {"scontrol reconfigure", "reload slurmd"}, json.dumps(doc, indent=1)[:3000]

    ctld, run = pid(D.controller, "slurmctld"), started(D.controller, "slurmctld")
    output = apply(render(model, changes / "limit"))
    assert handlers_run(output) == expected_handlers(actions), tail(output, 120)
    assert started(D.controller, "slurmctld") == run, "slurmctld restarted for a limit change"
    if SLURM_VERSION in KEEPS_PROCESS_ON_RECONFIGURE:
        assert pid(D.controller, "slurmctld") == ctld, "slurmctld restarted for a limit change"
    assert job_state(running_job) == "RUNNING"
    part = D.host(D.controller).check_output(f"scontrol show partition {compute_partition(model)['name']}")
    assert "MaxTime=3-00:00:00" in part, part


def test_memory_reserve_restarts_and_the_job_survives(running_job, changes):
    model = load_model()
    compute_partition(model)["max_time"] = "3-00:00:00"  # the change above stays
    # Less reserve, more RealMemory: a larger reserve can leave a virtual partition's memory
    # per CPU above the node's (the checks refuse it, rightly, on the workstation).
    model["slurm"]["memory_reserve_mib"] = model["slurm"]["memory_reserve_mib"] - 1024
    new = changes / "reserve.json"
    new.write_text(json.dumps(model))
    code, doc = plan(new, changes / "limit.json")
    actions = slurm_actions(doc)
    assert code == 2 and set(actions) == {"restart slurmctld", "restart slurmd"}, json.dumps(doc, indent=1)[:3000]
    assert actions["restart slurmd"] == set(D.hosts_in("slurm_nodes"))

    ctld, run = pid(D.controller, "slurmctld"), started(D.controller, "slurmctld")
    output = apply(render(model, changes / "reserve"))
    assert handlers_run(output) == expected_handlers(actions), tail(output, 120)
    assert pid(D.controller, "slurmctld") != ctld and started(D.controller, "slurmctld") != run, (
        "slurmctld was not restarted"
    )
    assert job_state(running_job) == "RUNNING"
    node = D.partitions()[D.compute_partitions()[0]][0]
    shown = D.host(D.controller).check_output(f"scontrol show node {node}")
    want = int(re.search(r"RealMemory=(\d+)", D.rendered("etc/slurm/slurm.conf") or "").group(1)) + 1024
    assert f"RealMemory={want}" in shown, shown


def can_scale_out() -> bool:
    """The description has a compute node the sandbox does not run yet (a workstation has none)."""
    if WORKDIR is None or not (WORKDIR / "sandbox.json").is_file():
        return False
    from hal_provision.loader import validate

    src = source()
    loaded = validate(Path(src["file"]) if src["file"] else None)
    return loaded.model is not None and len(list(loaded.model.slurm_nodes)) > src["computes"]


needs_spare_node = pytest.mark.skipif(
    not can_scale_out(), reason="the description has no compute node beyond the sandbox's"
)


def sinfo_nodes() -> set[str]:
    return set(D.host(D.controller).check_output("sinfo -h -N -o %N").split())


@needs_spare_node
def test_scale_out_adds_an_idle_node_and_the_job_survives(running_job, changes):
    n = source()["computes"]
    sandbox_up(n + 1)  # the new machine: its container runs, the tree names it; nothing converged
    scaled = load_model()
    (changes / "scaled.json").write_text(json.dumps(scaled))
    scaled_hosts = {h for g in scaled["nodes"] for h in expand(g["hosts"])}
    before = {h for g in json.loads((changes / "deployed.json").read_text())["nodes"] for h in expand(g["hosts"])}
    new_node = sorted(scaled_hosts - before)
    assert len(new_node) == 1, new_node
    # What runs now is the reserve change: plan from there.
    code, doc = plan(changes / "scaled.json", changes / "reserve.json")
    actions = slurm_actions(doc)
    assert code == 2 and set(actions) == {"restart slurmctld", "restart slurmd"}, json.dumps(doc, indent=1)[:3000]
    # The running nodes restart slurmd to learn the new one; the new node gets its first
    # deployment (every tier of site.yml), not a restart.
    assert set(D.hosts_in("slurm_nodes")) <= actions["restart slurmd"] and new_node[0] not in actions["restart slurmd"]
    first = {
        h
        for c in doc["components"]
        if c["name"] == "new hosts"
        for x in c["consequences"]
        if x["action"] == "first deployment"
        for h in expand(x["hosts"])
    }
    assert first == set(new_node), json.dumps(doc, indent=1)[:3000]

    output = converge("site.yml")
    # On the running nodes exactly the handlers the plan named; what the new node runs is its
    # first deployment.
    ran = {name: hosts - set(new_node) for name, hosts in handlers_run(output).items()}
    assert {name: hosts for name, hosts in ran.items() if hosts} == expected_handlers(actions), tail(output, 120)
    assert job_state(running_job) == "RUNNING"
    state = retry(lambda: D.host(D.controller).check_output(f"sinfo -h -n {new_node[0]} -o %t").strip() == "idle", 120)
    assert state, D.host(D.controller).check_output("sinfo -N")
    assert set(new_node) | set(D.hosts_in("slurm_nodes")) == sinfo_nodes()


@needs_spare_node
def test_node_removal_waits_for_its_job_through_rolling(running_job, changes):
    scaled = json.loads((changes / "scaled.json").read_text())
    deployed_model = json.loads((changes / "deployed.json").read_text())
    gone = sorted(
        {h for g in scaled["nodes"] for h in expand(g["hosts"])}
        - {h for g in deployed_model["nodes"] for h in expand(g["hosts"])}
    )[0]
    partition = D.compute_partitions()[0]
    job = D.sbatch(f"-p {partition} -w {gone} -N1 -t 5 --chdir=/tmp -o /dev/null --wrap 'sleep 40'")
    assert retry(lambda: job_state(job) == "RUNNING", 60), f"job {job}: {job_state(job)}"

    # The plan, with the jobs read live on the controller: removing the node loses the job.
    proc = subprocess.run(
        [
            tools.self_command(),
            "plan",
            str(changes / "deployed.json"),
            "--from",
            str(changes / "scaled.json"),
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
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and proc.stdout.strip(), proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    blocking = [j for j in doc["jobs"] or [] if j.get("blocking")]
    assert [str(j["job_id"]) for j in blocking] == [job], json.dumps(doc["jobs"], indent=1)
    actions = slurm_actions(doc)

    sandbox_up(int((changes / "computes").read_text()))  # renders the model without it; its container stays
    output = converge("rolling.yml", "-e", f"hosts={gone}", "-e", "rolling_poll=5", "-e", "rolling_wait_timeout=600")
    assert "FAILED - RETRYING: [" in output and "Wait for the jobs to end, nothing cancelled, on" in output, (
        "rolling.yml did not wait"
    )
    ran = handlers_run(output)
    assert ran == expected_handlers(actions), tail(output, 120)
    assert gone not in sinfo_nodes()
    final = D.host(D.controller).check_output(f"sacct -X -n -P -j {job} -o State").strip()
    assert final == "COMPLETED", f"job {job} on {gone}: {final} (rolling.yml must not cancel it)"
    assert job_state(running_job) == "RUNNING"
    (changes / "done").touch()
