"""Home directories are one file system on the login and compute nodes, as on HAL (Spectrum
Scale there, a host directory in the sandbox): what a user writes in their home on the login
node runs on a compute node, and what the job writes there is read back on the login node.

The sandbox also lists the shared file systems it emulates (inventory/sandbox.yml,
`hal_sandbox_shared`: the model's mount points and the nodes that mount each); each must be
one directory seen by all of those nodes.
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from pathlib import Path

import pytest

from deployed import deployed

D = deployed()
SHARED = D.hostvars[D.login].get("hal_sandbox_shared") or {}
TABLE = D.rendered("etc/swsuite/virtual-partitions.json")
VPS = json.loads(TABLE)["virtual_partitions"] if TABLE else {}
SMALLEST_GPU = min((n for n, v in VPS.items() if v["kind"] == "gpu" and v["gpus"] == 1), default=None)


def run(script: str, timeout: int = 120) -> str:
    return D.user_ok(script, timeout)


@pytest.mark.skipif(SMALLEST_GPU is None, reason="the model defines no one-GPU virtual partition")
def test_swbatch_job_script_in_home_runs_on_a_compute_node_and_its_output_comes_back():
    if set(D.hosts_in("slurm_nodes")) <= {D.login}:
        pytest.skip("the login node is the only compute node (a workstation): its home needs no sharing")
    tag = uuid.uuid4().hex[:8]
    work = f"hal-shared-{tag}"
    # The batch script runs a second script by its path in the home directory: that path only
    # exists on the compute node if the home directory is shared.
    script = (
        f"mkdir -p ~/{work} && cd ~/{work}\n"
        "cat > step.sh <<'EOF'\n#!/bin/bash\necho \"step ran on $(hostname -s) in $PWD\"\nEOF\n"
        "chmod +x step.sh\n"
        "cat > job.sh <<'EOF'\n#!/bin/bash\n"
        f"#SWBATCH -p {SMALLEST_GPU} -t 0:05\n#SWBATCH --job-name=shared-home-{tag}\n"
        "./step.sh\nhostname -s > ran-on.txt\nEOF\n"
        f"swbatch --wait --output=$HOME/{work}/job.out job.sh"
    )
    out = run(script)
    assert re.search(r"Submitted batch job (\d+)", out), out
    # Read back on the login node, where the job did not run.
    output = run(f"cat ~/{work}/job.out").strip()
    ran_on = run(f"cat ~/{work}/ran-on.txt").strip()
    try:
        assert ran_on in D.hosts_in("slurm_nodes") and ran_on != D.login, f"the job ran on {ran_on!r}"
        home = run("echo $HOME").strip()
        assert output == f"step ran on {ran_on} in {home}/{work}", f"job output read on {D.login}: {output!r}"
    finally:
        D.as_user(D.login, f"rm -rf ~/{work}", 30)


@pytest.mark.skipif(SMALLEST_GPU is None, reason="the model defines no one-GPU virtual partition")
def test_swrun_runs_a_script_from_home_by_its_path():
    # The reproducer: `swrun -p gpux2 /tmp/job.sh` failed with execve() on the compute
    # node. From the shared home the same call works.
    tag = uuid.uuid4().hex[:8]
    try:
        out = run(
            f"printf '#!/bin/bash\\necho swrun-{tag} $(hostname -s)\\n' > ~/swrun-{tag}.sh && "
            f"chmod +x ~/swrun-{tag}.sh && cd && swrun -p {SMALLEST_GPU} -t 0:05 ~/swrun-{tag}.sh"
        )
        m = re.search(rf"^swrun-{tag} (\S+)$", out, flags=re.M)
        assert m and m.group(1) in D.hosts_in("slurm_nodes"), out
    finally:
        D.as_user(D.login, f"rm -f ~/swrun-{tag}.sh", 30)


def _backing_directory(container: str, mount_point: str) -> Path:
    """The host directory the sandbox binds at `mount_point` into `container` (podman's record)."""
    out = subprocess.run(
        ["podman", "container", "inspect", "--format", "{{json .Mounts}}", container],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    [source] = [m["Source"] for m in json.loads(out) if m["Destination"] == mount_point]
    return Path(source)


@pytest.mark.parametrize("mount_point", sorted(SHARED))
def test_sandbox_shared_file_system_is_one_directory_on_every_node_that_mounts_it(mount_point):
    """Every node that mounts it sees what one writes, and so does the sandbox's host directory
    behind it (a file system the sandbox keeps on one node only, /backup on the management
    node, is still the host directory that stands in for the file server)."""
    hosts = SHARED[mount_point]
    assert hosts, f"{mount_point} is mounted nowhere"
    marker = f"{mount_point}/.hal-shared-{uuid.uuid4().hex[:8]}"
    writer = D.host(hosts[0])
    writer.run_expect([0], "echo %s > %s", hosts[0], marker)
    try:
        for name in hosts:
            f = D.host(name).file(marker)
            assert f.exists and f.content_string.strip() == hosts[0], f"{marker} written on {hosts[0]}, read on {name}"
            assert D.host(name).mount_point(mount_point).exists, f"{mount_point} is not a mount point on {name}"
        behind = _backing_directory(hosts[0], mount_point) / Path(marker).name
        assert behind.is_file() and behind.read_text().strip() == hosts[0], f"{marker} is not in {behind.parent}"
    finally:
        writer.run("rm -f %s", marker)
