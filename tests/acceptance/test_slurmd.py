"""slurmd on an emulated node of each hardware build: it detects what slurm.conf declares and
accepts the rendered gres.conf, whose Cores= are core indices of the GPU's socket."""

from __future__ import annotations

import re

import pytest

from hal_provision.hostlist import nodeset

from . import expected
from .conftest import CLUSTER_FILES, load_cluster
from .slurm_harness import fields, records, run_slurmd

pytestmark = pytest.mark.acceptance

# One emulated node per compute group of every cluster case: (case, group) ids.
NODE_CASES = [
    pytest.param(name, host, id=f"{name}-{host}")
    for name in CLUSTER_FILES
    for host, _ in expected.compute_groups(load_cluster(name))
]


def _node(name: str, host: str):
    cluster = load_cluster(name)
    return cluster, expected.compute_nodes(cluster)[host]


def _devices(exp) -> list[str]:
    return [expected.gpu_file(exp.profile, i) for i in range(exp.profile.gpu_count)]


def _gres_lines(result) -> dict[str, dict[str, str]]:
    """slurmd -G prints 'slurmd: Gres Name=gpu ... Index=0 ... Cores=0-19 ... Links=...'."""
    return records("\n".join(line for line in result.stderr.splitlines() if " Gres Name=" in line), "Index")


@pytest.mark.parametrize(("name", "host"), NODE_CASES)
def test_slurmd_detects_what_slurm_conf_declares(name, host, make_scratch):
    """slurmd -C on the emulated hardware prints the NodeName line's CPU layout."""
    cluster, exp = _node(name, host)
    scratch = make_scratch(cluster)
    result = run_slurmd(scratch, exp.profile, _devices(exp), "-C")
    assert result.returncode == 0, result.stderr
    detected = fields(result.stdout)
    p = exp.profile
    assert (detected["CPUs"], detected["Boards"], detected["SocketsPerBoard"]) == (str(p.cpus), "1", str(p.sockets))
    assert (detected["CoresPerSocket"], detected["ThreadsPerCore"]) == (
        str(p.cores_per_socket),
        str(p.threads_per_core),
    )
    declared = next(
        fields(line)
        for line in scratch.rendered_text("slurm.conf").splitlines()
        if line.startswith("NodeName=") and host in nodeset(fields(line)["NodeName"])
    )
    for key in ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore"):
        assert declared[key] == detected[key], key


@pytest.mark.parametrize(("name", "host"), NODE_CASES)
def test_slurmd_accepts_the_rendered_gres_conf(name, host, make_scratch):
    """slurmd -G lists every GPU with its socket's cores and NVLink row, and no error."""
    cluster, exp = _node(name, host)
    result = run_slurmd(make_scratch(cluster), exp.profile, _devices(exp), "-G", "-N", host)
    assert result.returncode == 0, result.stderr
    assert not re.search(r"error|fatal", result.stderr, re.IGNORECASE), result.stderr
    gpus = _gres_lines(result)
    p = exp.profile
    assert sorted(gpus, key=int) == [str(i) for i in range(p.gpu_count)], result.stderr
    for i in range(p.gpu_count):
        got = gpus[str(i)]
        assert (got["Name"], got["Type"], got["File"]) == ("gpu", p.gpus.type, expected.gpu_file(p, i))
        assert got["Cores"] == expected.gpu_cores(p, i), i
        if p.gpus.nvlink:
            assert got["Links"] == expected.gpu_links(p, i), i


def test_hal_gres_is_the_published_ac922_layout(make_scratch):
    """GPUs 0-1 on socket 0 (cores 0-19), 2-3 on socket 1 (cores 20-39), NVLink pairs."""
    cluster, exp = _node("hal", "hal01")
    result = run_slurmd(make_scratch(cluster), exp.profile, _devices(exp), "-G", "-N", "hal01")
    gpus = _gres_lines(result)
    assert [(gpus[i]["Type"], gpus[i]["Cores"], gpus[i]["Links"]) for i in "0123"] == [
        ("v100", "0-19", "-1,3,0,0"),
        ("v100", "0-19", "3,-1,0,0"),
        ("v100", "20-39", "0,0,-1,3"),
        ("v100", "20-39", "0,0,3,-1"),
    ], result.stderr


def test_hal_slurmd_sees_the_ac922(make_scratch):
    """The emulation itself: the published 2 x 20 cores x SMT4 = 160 CPUs."""
    cluster, exp = _node("hal", "hal01")
    out = run_slurmd(make_scratch(cluster), exp.profile, _devices(exp), "-C").stdout
    assert re.search(r"CPUs=160 Boards=1 SocketsPerBoard=2 CoresPerSocket=20 ThreadsPerCore=4", out), out


def test_cpu_thread_ids_as_cores_are_rejected(make_scratch):
    """The negative control for Cores=: CPU thread ids (0-79 / 80-159 on an AC922) are not
    core indices, and slurmd says so. Proves the positive test can fail."""
    cluster, exp = _node("hal", "hal01")
    scratch = make_scratch(cluster)
    p = exp.profile
    per_socket = p.cores_per_socket * p.threads_per_core

    def thread_ids(match: re.Match) -> str:
        socket = int(match.group(1)) // p.cores_per_socket
        return f"Cores={socket * per_socket}-{(socket + 1) * per_socket - 1}"

    gres = scratch.conf_dir / "gres.conf"
    wrong = re.sub(r"Cores=(\d+)-\d+", thread_ids, gres.read_text())
    assert "Cores=0-79" in wrong and "Cores=80-159" in wrong
    gres.write_text(wrong)
    result = run_slurmd(scratch, p, _devices(exp), "-G", "-N", "hal01")
    assert "Invalid GRES data for gpu, Cores=0-79" in result.stderr, result.stderr
    assert "Invalid GRES data for gpu, Cores=80-159" in result.stderr, result.stderr
