"""Each job's private /tmp as slurmd loads it, and the scratch's mount units as systemd reads
them, for every cluster case that has a local scratch (x86-twogen: raid0 and one-drive NVMe).

slurmd runs as a daemon (-D) on an emulated node for a few seconds: long enough to load the
job_container/tmpfs plugin, read the rendered job_container.conf for its node name and make its
BasePath (AutoBasePath), which it does before it registers with a controller; no controller
runs here, so registration is not part of the test. Harness changes, each with its reason: the
BasePath and slurm.conf's TmpFS point into the run's scratch directory (nothing under /local on
this machine). Debian 12's Slurm is 22.05: the 25.11 namespace.yaml is checked by unit tests.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from hal_provision.hostlist import nodeset
from hal_provision.render import render_all
from hal_provision.render.scratch import SCRATCH_DIR

from . import expected
from .conftest import CLUSTER_FILES, load_cluster
from .slurm_harness import run_slurmd

pytestmark = pytest.mark.acceptance

JOB_CONTAINER = "files/etc/slurm/job_container.conf"
CASES = [name for name in CLUSTER_FILES if JOB_CONTAINER in render_all(load_cluster(name))]
UNIT_CASES = [
    pytest.param(name, path, id=f"{name}-{path.removeprefix(SCRATCH_DIR + '/')}")
    for name in CLUSTER_FILES
    for path in render_all(load_cluster(name))
    if path.startswith(SCRATCH_DIR + "/") and path.endswith(".mount")
]


def _node_lines(text: str) -> list[tuple[str, str]]:
    return re.findall(r"^NodeName=(\S+) .*BasePath=(\S+)", text, re.M)


@pytest.mark.parametrize("name", CASES)
def test_slurmd_loads_job_container_conf_and_makes_the_base(name, make_scratch):
    cluster = load_cluster(name)
    scratch = make_scratch(cluster)
    scratch.install_harness_configs()
    conf = scratch.conf_dir / "job_container.conf"
    lines = _node_lines(conf.read_text())
    assert lines, conf.read_text()
    base = scratch.root / "jobs"
    conf.write_text(re.sub(r"(?<!Auto)BasePath=\S+", f"BasePath={base}", conf.read_text()))
    scratch.slurm_conf.write_text(
        re.sub(r"^TmpFS=\S+", f"TmpFS={scratch.root}", scratch.slurm_conf.read_text(), flags=re.M)
    )
    for hosts, _ in lines:
        host = nodeset(hosts)[0]
        exp = expected.compute_nodes(cluster)[host]
        devices = [expected.gpu_file(exp.profile, i) for i in range(exp.profile.gpu_count)]
        result = run_slurmd(scratch, exp.profile, devices, "-D", "-vv", "-N", host, for_seconds=6)
        log = result.stdout + result.stderr + scratch.log("slurmd.log")
        assert "job_container.conf read successfully" in log, log[-3000:]
        assert not re.search(r"error: .*(job_container|Configuration not)", log), log[-3000:]
        made = list(base.iterdir()) if base.exists() else []
        assert made, f"{host}: slurmd made nothing under the BasePath {base}\n{log[-2000:]}"
        print(
            f"{name} {host}: slurmd read job_container.conf and made {', '.join(p.name for p in made)} under the base"
        )


@pytest.mark.parametrize(("name", "path"), UNIT_CASES)
def test_systemd_reads_the_scratch_mount_unit(name, path, tmp_path):
    """systemd-analyze verify loads the unit as systemd would (its name must match Where=)."""
    text = render_all(load_cluster(name))[path]
    unit = tmp_path / Path(path).name
    unit.write_text(text)
    ok = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True)
    assert ok.returncode == 0 and not ok.stderr.strip(), ok.stderr
    wrong = tmp_path / "elsewhere.mount"  # the control: a unit whose name is not its path is refused
    wrong.write_text(text)
    refused = subprocess.run(["systemd-analyze", "verify", "--man=no", str(wrong)], capture_output=True, text=True)
    assert refused.returncode != 0 and "Where= setting doesn't match unit name" in refused.stderr, refused.stderr
