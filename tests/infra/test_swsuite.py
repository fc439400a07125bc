"""The Slurm Wrapper Suite on the login node, as the normal user, on the real cluster:
the deployed table is the rendered one, swrun -p gpux1 sees exactly one GPU, swbatch jobs
complete and are accounted, swqueue shows running jobs and their GPU use."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from deployed import PROBE_DEVICES, TEST_USER, deployed, retry

D = deployed()
TABLE = "etc/swsuite/virtual-partitions.json"
RENDERED = D.rendered(TABLE)
VPS = json.loads(RENDERED)["virtual_partitions"] if RENDERED else {}
SMALLEST_GPU = min((n for n, v in VPS.items() if v["kind"] == "gpu" and v["gpus"] == 1), default=None)
# A CPU-only cluster (sandbox up --cpu-only) has cpu virtual partitions only: the batch and
# queue tests run there on the one-node cpu partition; the one-GPU test has nothing to run on.
SMALLEST_CPU = min((n for n, v in VPS.items() if v["kind"] == "cpu" and v.get("nodes", 1) == 1), default=None)
SMALLEST = SMALLEST_GPU or SMALLEST_CPU
needs_gpu = pytest.mark.skipif(SMALLEST_GPU is None, reason="no one-GPU virtual partition (a CPU-only cluster)")

pytestmark = pytest.mark.skipif(not VPS, reason="the model defines no virtual partitions (swsuite not deployed)")


def run(script: str, timeout: int = 120):
    out = D.as_user(D.login, script, timeout)
    assert out.rc == 0, f"as {TEST_USER} on {D.login}: {script}\nexit {out.rc}\n{out.stdout}{out.stderr}"
    return out.stdout


@pytest.mark.parametrize("host", D.hosts_in("role_login"))
def test_deployed_table_is_the_rendered_one(host):
    f = D.host(host).file("/" + TABLE)
    assert f.exists and f.content_string == RENDERED and f.mode == 0o644


@pytest.mark.parametrize("command", ["swrun", "swbatch", "swqueue"])
def test_commands_installed_for_users(command):
    out = run(f"{command} --help")
    assert "usage" in out.lower()


@needs_gpu
def test_swrun_gpux1_sees_exactly_one_gpu():
    probe = "echo CUDA=$CUDA_VISIBLE_DEVICES; " + PROBE_DEVICES.format(devs="/dev/nvidia[0-9]*")
    out = run(f"cd /tmp && swrun -p {SMALLEST_GPU} -t 0:05 -- bash -c {shlex.quote(probe)}")
    cuda = re.search(r"CUDA=(\S*)", out).group(1)
    allowed = re.findall(r"^ok (\S+)", out, flags=re.M)
    denied = re.findall(r"^denied (\S+)", out, flags=re.M)
    assert cuda.isdigit(), f"CUDA_VISIBLE_DEVICES should name one GPU: {out}"
    # One GPU opens; every other GPU of the node (none on a one-GPU node) is denied.
    assert len(allowed) == 1 and len(denied) == len(allowed + denied) - 1, (
        f"exactly one GPU device should open in a {SMALLEST_GPU} job: {out}"
    )


def test_swbatch_job_completes_and_is_accounted():
    script = (
        "cat > /tmp/swbatch-test.sh <<'EOF'\n#!/bin/bash\n"
        f"#SWBATCH -p {SMALLEST} -t 0:05\n#SWBATCH --job-name=swbatch-test\n"
        "echo gpus=$CUDA_VISIBLE_DEVICES\nEOF\n"
        "cd /tmp && swbatch --wait --output=/tmp/swbatch-test.out /tmp/swbatch-test.sh"
    )
    out = run(script)
    job = re.search(r"Submitted batch job (\d+)", out).group(1)

    def accounted():
        r = D.host(D.login).run("sacct -n -X -P -j %s -o JobName,State,AllocTRES,NodeList", job)
        # slurmdbd may briefly hold the record under a placeholder name: wait for the full row.
        return r.stdout if r.stdout.startswith("swbatch-test|COMPLETED|") else ""

    acct = retry(accounted, 30)
    assert "swbatch-test|COMPLETED|" in acct, f"sacct for job {job}: {acct!r}"
    assert ("gres/gpu=1" in acct) == (SMALLEST == SMALLEST_GPU), f"GPUs accounted for job {job}: {acct!r}"
    # The batch step wrote its output where it ran (no shared /tmp): read it there.
    node = acct.strip().split("|")[-1]
    assert node in D.hostvars, f"job {job} ran on {node!r}, not a node of the inventory"
    output = D.host(node).file("/tmp/swbatch-test.out").content_string.strip()
    expected = r"gpus=\d+" if SMALLEST == SMALLEST_GPU else r"gpus="  # none visible to a CPU job
    assert re.fullmatch(expected, output), f"job {job} on {node} printed {output!r}"


def test_swqueue_shows_running_job_and_gpu_use():
    gpu = SMALLEST == SMALLEST_GPU
    request = "--gres=gpu:1" if gpu else "-n 1"
    run(f"cd /tmp && sbatch --job-name=swq-probe -p {VPS[SMALLEST]['partition']} {request} -t 5 --wrap 'sleep 120'")
    # A GPU job shows as one GPU in use on its node; a CPU-only node has no GPUs and shows CPUs in use.
    in_use = r"GPUs 1/(\d+) \[#(\.*)\]" if gpu else r"GPUs 0/0 \[\] CPUs [1-9]\d*/"
    try:

        def running():
            r = D.as_user(D.login, "swqueue --plain", 60)
            return r.stdout if "swq-probe" in r.stdout and "RUNNING" in r.stdout and re.search(in_use, r.stdout) else ""

        out = retry(running, 60, 2)
        assert out, (
            f"swqueue --plain never showed the running job and its node's use ({in_use}):\n"
            + D.as_user(D.login, "swqueue --plain", 60).stdout
        )
        if gpu:
            bar = re.search(in_use, out)  # one '#' per GPU in use, one '.' per free GPU
            assert len(bar.group(2)) == int(bar.group(1)) - 1, out
        rich = run("COLUMNS=150 swqueue")
        assert "GPU use per node" in rich and "swq-probe" in rich
    finally:
        D.as_user(D.login, "scancel -n swq-probe", 30)
