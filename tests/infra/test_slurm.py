"""Slurm behaves as the model says: the controller answers, sinfo lists exactly the model's
nodes and partitions idle with their GPUs, jobs of the normal user run, get their GPUs and
only those, are accounted, and ssh to a compute node is allowed only with a job there."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from deployed import FILE_GROUPS, PROBE_DEVICES, SLURM_CONF, TEST_USER, deployed, retry

D = deployed()
PARTITIONS = D.partitions()
# Each node once, with the first partition it is in.
FIRST_PARTITION: dict[str, str] = {}
for _p, _nodes in PARTITIONS.items():
    for _h in _nodes:
        FIRST_PARTITION.setdefault(_h, _p)
NODE_PARAMS = [pytest.param(p, h, id=h) for h, p in FIRST_PARTITION.items()]
GPU_NODE_PARAMS = [param for param in NODE_PARAMS if D.gpus(param.values[1])]
SSH_OPTS = "-o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o ConnectTimeout=10"


def sinfo() -> dict[str, list[tuple[str, str, str]]]:
    """node -> [(partition, state, gres)], one entry per partition the node is in."""
    out = D.host(D.login).check_output("sinfo -h -N -o '%N|%P|%t|%G'")
    rows: dict[str, list[tuple[str, str, str]]] = {}
    for line in out.splitlines():
        node, part, state, gres = line.split("|")
        rows.setdefault(node, []).append((part.rstrip("*"), state, re.sub(r"\(S:[^)]*\)", "", gres)))
    return rows


@pytest.mark.parametrize("host", D.hosts_in(*FILE_GROUPS[SLURM_CONF]))
def test_scontrol_ping_up(host):
    out = D.host(host).run("scontrol ping")
    assert out.rc == 0 and " is UP" in out.stdout and "DOWN" not in out.stdout, (
        f"{host}: scontrol ping\n{out.stdout}{out.stderr}\n{D.journal(D.controller, 'slurmctld')}"
    )


def test_sinfo_lists_exactly_the_model_nodes_and_partitions():
    expected = {(h, p) for p, nodes in PARTITIONS.items() for h in nodes}
    got = {(h, part) for h, rows in sinfo().items() for part, _, _ in rows}
    assert got == expected, (
        f"sinfo (node, partition) pairs: missing {sorted(expected - got)}, unexpected {sorted(got - expected)}"
    )


@pytest.mark.parametrize("node", sorted({h for nodes in PARTITIONS.values() for h in nodes}))
def test_sinfo_node_idle_with_model_gres(node):
    def idle_rows():
        rows = sinfo().get(node, [])
        return rows if rows and all(state == "idle" for _, state, _ in rows) else None

    # A job of an earlier test may still be completing: give the node a few seconds.
    rows = retry(idle_rows, 30) or sinfo().get(node)
    assert rows, f"{node} is not in sinfo"
    states = {s for _, s, _ in rows}
    gres = {g for _, _, g in rows}
    assert states == {"idle"} and gres == {D.gres(node)}, (
        f"{node}: sinfo says state {sorted(states)}, gres {sorted(gres)}; the model says idle, {D.gres(node)}\n"
        + D.host(D.login).run("scontrol show node %s", node).stdout
    )


@pytest.mark.parametrize("partition", [p for p, nodes in PARTITIONS.items() if nodes])
def test_srun_spans_partition_with_all_gpus(partition):
    nodes = PARTITIONS[partition]
    gpus = D.gpus(nodes[0])
    gres = f"--gres={D.gpu_request(nodes)} " if gpus else ""
    out = D.user_ok(
        f"srun -p {partition} -N{len(nodes)} -w {','.join(nodes)} {gres}--chdir=/tmp "
        "bash -c 'echo \"$(hostname -s) ${CUDA_VISIBLE_DEVICES-unset}\"'"
    )
    want = ",".join(str(i) for i in range(gpus)) if gpus else "unset"
    got = dict(line.split(" ", 1) for line in out.splitlines() if line.strip())
    assert got == {h: want for h in nodes}, (
        f"srun on {partition}: got {got}, expected CUDA_VISIBLE_DEVICES={want} on {nodes}"
    )


@pytest.mark.parametrize("partition", [p for p, nodes in PARTITIONS.items() if nodes])
def test_batch_job_completes_and_is_accounted(partition):
    gpus = D.gpus(PARTITIONS[partition][0])
    gres = "--gres=gpu:1 " if gpus else ""
    job_id = D.sbatch(f"--wait -p {partition} -N1 {gres}--chdir=/tmp -o /dev/null --wrap 'sleep 1'")

    def accounted():
        rows = D.as_user(D.login, f"sacct -n -P -X -j {job_id} -o State,AllocTRES", 30).stdout.split()
        return rows and rows[0].startswith("COMPLETED|") and (not gpus or "gres/gpu" in rows[0]) and rows[0]

    row = retry(accounted, 30, 2)  # slurmdbd receives the record a few seconds after the end
    assert row, (
        f"job {job_id} on {partition}: sacct shows "
        f"{D.as_user(D.login, f'sacct -n -P -X -j {job_id} -o State,AllocTRES', 30).stdout!r}; "
        f"expected COMPLETED{' with gres/gpu in AllocTRES' if gpus else ''}\n"
        f"{D.journal(D.controller, 'slurmdbd', 20)}"
    )


@pytest.mark.parametrize(("partition", "node"), GPU_NODE_PARAMS)
def test_one_gpu_job_cannot_open_other_gpus(partition, node):
    devs = D.hardware(node)["gpu_devices"]
    script = PROBE_DEVICES.format(devs=" ".join(devs))
    out = D.user_ok(f"srun -p {partition} -w {node} -N1 --gres=gpu:1 --chdir=/tmp bash -c {shlex.quote(script)}")
    verdicts = dict(reversed(line.split(" ", 1)) for line in out.splitlines() if line.strip())
    assert sorted(verdicts) == sorted(devs) and list(verdicts.values()).count("ok") == 1, (
        f"{node}: a one-GPU job should open exactly one of {devs}; got {verdicts}"
    )


@pytest.fixture(scope="module")
def user_ssh_key():
    """The normal user's key on the login node, authorised on every compute node.

    With a shared home (HAL, and the sandbox) writing it once would do; the loop keeps the
    suite usable where homes are node-local (idempotent)."""
    key = "~/.ssh/id_ed25519"
    if D.host(D.login).run("command -v ssh").rc != 0:
        pytest.fail(f"no ssh client on {D.login}: users cannot reach the nodes of their jobs (install openssh-client)")
    D.user_ok(f"test -f {key} || ssh-keygen -q -t ed25519 -N '' -f {key}")
    pub = D.user_ok(f"cat {key}.pub").strip()
    for node in D.hosts_in("slurm_nodes"):
        D.as_user(
            node,
            f"mkdir -p -m 700 ~/.ssh && (grep -qxF {shlex.quote(pub)} ~/.ssh/authorized_keys 2>/dev/null "
            f"|| echo {shlex.quote(pub)} >> ~/.ssh/authorized_keys) && chmod 600 ~/.ssh/authorized_keys",
            30,
        )
    return key


LOGIN_NODES = set(D.hosts_in("role_login"))


@pytest.mark.parametrize(("partition", "node"), [param for param in NODE_PARAMS if param.values[1] not in LOGIN_NODES])
def test_ssh_to_compute_only_with_a_job(user_ssh_key, partition, node):
    ssh = f"ssh {SSH_OPTS} -i {user_ssh_key} {node} 'hostname -s; cat /proc/self/cgroup'"
    refused = D.as_user(D.login, ssh, 60)
    assert refused.rc != 0 and "pam_slurm_adopt" in refused.stdout + refused.stderr, (
        f"ssh {TEST_USER}@{node} without a job: exit {refused.rc}\n{refused.stdout}{refused.stderr}"
    )
    job_id = D.sbatch(f"-p {partition} -w {node} -N1 --chdir=/tmp -o /dev/null --wrap 'sleep 300'")
    try:
        running = retry(lambda: D.as_user(D.login, f"squeue -h -j {job_id} -o %T", 30).stdout.strip() == "RUNNING", 60)
        assert running, f"job {job_id} on {node} did not start"
        allowed = D.as_user(D.login, ssh, 60)
        # Adopted: the session runs in the job's cgroup (its extern step), so the job's limits apply.
        assert allowed.rc == 0 and allowed.stdout.startswith(f"{node}\n") and f"/job_{job_id}/" in allowed.stdout, (
            f"ssh {TEST_USER}@{node} with job {job_id} running there: exit {allowed.rc}\n{allowed.stdout}{allowed.stderr}"
        )
    finally:
        D.as_user(D.login, f"scancel {job_id}", 30)


@pytest.mark.parametrize("node", sorted(LOGIN_NODES & set(D.hosts_in("slurm_nodes"))))
def test_login_node_that_runs_jobs_admits_users_without_a_job(user_ssh_key, node):
    """A workstation (one node group that is login and compute node at once): no pam_slurm_adopt."""
    out = D.as_user(D.login, f"ssh {SSH_OPTS} -i {user_ssh_key} {node} hostname -s", 60)
    assert out.rc == 0 and out.stdout.strip() == node, (
        f"ssh {TEST_USER}@{node}: exit {out.rc}\n{out.stdout}{out.stderr}"
    )
    assert "pam_slurm_adopt" not in D.host(node).file("/etc/pam.d/sshd").content_string


QOS_PLAN = json.loads(D.rendered("etc/hal-provision/slurm-accounting.json") or '{"qos": []}')


@pytest.mark.parametrize("qos", QOS_PLAN["qos"], ids=lambda q: q["name"])
def test_qos_in_accounting_as_the_model_says(qos):
    """Each QOS of the model is in slurmdbd with its priority and limits, exactly as the plan's
    line (the same line the role compares before it changes anything)."""
    listed = D.host(D.login).check_output(
        f"sacctmgr --noheader --parsable2 list qos name={shlex.quote(qos['name'])} format={QOS_PLAN['list_format']}"
    )
    assert listed.splitlines() == [qos["listed"]], f"sacctmgr list qos {qos['name']}: {listed!r}"
