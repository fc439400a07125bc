"""GPU sharing on real Slurm of each major: a cluster whose a100 group offers shards, one whose
a100 group offers mps (CUDA MPS) and one whose h100 group is split into MIG instances are
loaded by slurmctld as slurm.conf declares them, and slurmd -G registers the GRES the rendered
gres.conf gives (shards and mps spread over the GPUs; MIG profiles as GPU types). MPS itself
(hal-mps starting nvidia-cuda-mps-control) needs a GPU: tests/unit/node/test_mps_program.py runs it
against a stand-in.

Debian's slurmd has no NVML, so the MIG node's AutoDetect=nvml finds nothing here: what is
proven is that both daemons accept the files and type the instances as the model says, not
NVML's detection of real instances (that needs a GPU)."""

from __future__ import annotations

import re

import pytest

from hal_provision.model import Cluster
from hal_provision.render.slurm import MPS_PROGRAM, node_gres

from . import expected
from .conftest import load_cluster
from .slurm_harness import fields, records, run_slurmd, show_config

pytestmark = pytest.mark.acceptance

CASE = "x86-twogen"
SHARDS_PER_GPU = 4
MPS_PER_GPU = 100
MIG = [{"profile": "3g.40gb", "count": 1}, {"profile": "1g.10gb", "count": 4}]
# What Debian's slurmd (no gpu/nvml plugin) says of AutoDetect=nvml; not a failure of the files.
NO_NVML = re.compile(r"configured (with|to autodetect) nvml functionality")


def shared_cluster(major: str, group: str, sharing: dict) -> Cluster:
    """x86-twogen with `group`'s GPUs shared as `sharing` says, for a Slurm with NVML."""
    data = load_cluster(CASE, major).model_dump(mode="json", exclude_none=True)
    next(g for g in data["nodes"] if g["name"] == group)["gpu_sharing"] = sharing
    data["slurm"]["nvml"] = True
    return Cluster.model_validate(data)


def _gres_records(stderr: str) -> list[dict[str, str]]:
    """slurmd -G's 'slurmd: Gres Name=... Type=... Count=...' lines."""
    return [fields(line) for line in stderr.splitlines() if " Gres Name=" in line]


@pytest.fixture
def sharded(slurm, extra_controller):
    cluster = shared_cluster(slurm.major, "a100", {"shards_per_gpu": SHARDS_PER_GPU})
    return cluster, extra_controller(cluster)


@pytest.fixture
def mps(slurm, extra_controller):
    cluster = shared_cluster(slurm.major, "a100", {"mps_per_gpu": MPS_PER_GPU})
    return cluster, extra_controller(cluster)


@pytest.fixture
def mig(slurm, extra_controller):
    cluster = shared_cluster(slurm.major, "h100", {"mig": MIG})
    return cluster, extra_controller(cluster)


def _node_gres(controller, cluster: Cluster, host: str) -> tuple[set[str], set[str]]:
    """(the node's Gres as slurmctld loaded it, as the model says it), as sets of entries."""
    nodes = records(controller.scontrol("-o", "show", "node"), "NodeName")
    exp = expected.compute_nodes(cluster)[host]
    group = next(g for g in cluster.nodes if g.name == exp.group.name)
    return set(nodes[host]["Gres"].split(",")), set(node_gres(exp.profile, group.gpu_sharing))


def _assert_shares(controller, cluster, kind: str, per_gpu: int) -> None:
    """tg01's group shares its GPUs as `kind` (per_gpu each): slurmctld loaded the GPUs and the
    shares as the model gives them; tg05's group shares nothing."""
    loaded, model = _node_gres(controller, cluster, "tg01")
    p = expected.compute_nodes(cluster)["tg01"].profile
    assert loaded == model == {f"gpu:{p.gpus.type}:{p.gpu_count}", f"{kind}:{per_gpu * p.gpu_count}"}
    loaded, _model = _node_gres(controller, cluster, "tg05")
    assert not any(entry.startswith(kind) for entry in loaded), loaded


def test_slurmctld_loads_the_shards(sharded):
    cluster, controller = sharded
    config = show_config(controller.scontrol("show", "config"))
    assert config["GresTypes"].split(",") == ["gpu", "shard"], config["GresTypes"]
    _assert_shares(controller, cluster, "shard", SHARDS_PER_GPU)


def test_slurmctld_loads_the_mps(mps):
    cluster, controller = mps
    config = show_config(controller.scontrol("show", "config"))
    assert config["GresTypes"].split(",") == ["gpu", "mps"], config["GresTypes"]
    # Slurm 22.05 shows one Prolog and Epilog; later majors take several, shown as Prolog[0], ...
    scripts = [config.get(key, config.get(f"{key}[0]")) for key in ("Prolog", "Epilog", "TaskProlog")]
    assert scripts == [MPS_PROGRAM] * 3, config
    _assert_shares(controller, cluster, "mps", MPS_PER_GPU)


def test_slurmctld_loads_the_mig_types(mig):
    cluster, controller = mig
    config = show_config(controller.scontrol("show", "config"))
    assert config["GresTypes"] == "gpu", config["GresTypes"]
    loaded, model = _node_gres(controller, cluster, "tg05")
    p = expected.compute_nodes(cluster)["tg05"].profile
    assert loaded == model == {f"gpu:3g.40gb:{p.gpu_count}", f"gpu:1g.10gb:{4 * p.gpu_count}"}


def test_slurmd_spreads_the_shards_over_the_gpus(sharded):
    cluster, controller = sharded
    exp = expected.compute_nodes(cluster)["tg01"]
    p = exp.profile
    devices = [expected.gpu_file(p, i) for i in range(p.gpu_count)]
    result = run_slurmd(controller.scratch, p, devices, "-G", "-N", "tg01")
    assert result.returncode == 0, result.stderr
    assert not re.search(r"error|fatal", result.stderr, re.IGNORECASE), result.stderr
    gres = _gres_records(result.stderr)
    gpus = [g for g in gres if g["Name"] == "gpu"]
    shards = [g for g in gres if g["Name"] == "shard"]
    assert sorted(g["File"] for g in gpus) == sorted(devices), result.stderr
    # One shard record per GPU, each bound to that GPU's device file, the counts adding up.
    assert sorted(g["File"] for g in shards) == sorted(devices), result.stderr
    assert sum(int(g["Count"]) for g in shards) == SHARDS_PER_GPU * p.gpu_count, result.stderr


def test_slurmd_binds_the_mps_to_the_gpus(mps):
    """One mps record per GPU, bound to its device file, each MPS_PER_GPU: a job's
    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE is its request as a percentage of one GPU."""
    cluster, controller = mps
    p = expected.compute_nodes(cluster)["tg01"].profile
    devices = [expected.gpu_file(p, i) for i in range(p.gpu_count)]
    result = run_slurmd(controller.scratch, p, devices, "-G", "-N", "tg01")
    assert result.returncode == 0, result.stderr
    assert not re.search(r"error|fatal", result.stderr, re.IGNORECASE), result.stderr
    records = [g for g in _gres_records(result.stderr) if g["Name"] == "mps"]
    assert sorted((g["File"], int(g["Count"])) for g in records) == [(d, MPS_PER_GPU) for d in sorted(devices)], (
        result.stderr
    )


def test_slurmd_accepts_the_mig_nodes_gres_conf(mig):
    """The MIG node's gres.conf line (AutoDetect=nvml) is accepted. Without NVML (Debian's
    slurmd) it detects nothing, so slurmd -G lists no device records: the instances' types reach
    Slurm through slurm.conf's Gres= (the test above); their files only through NVML on a GPU."""
    cluster, controller = mig
    p = expected.compute_nodes(cluster)["tg05"].profile
    gres_conf = controller.scratch.rendered_text("gres.conf")
    assert "NodeName=tg[05-08] AutoDetect=nvml\n" in gres_conf, gres_conf
    assert "NodeName=tg[05-08] Name=gpu" not in gres_conf, gres_conf  # NVML's to find, not declared
    result = run_slurmd(controller.scratch, p, [], "-G", "-N", "tg05")
    assert result.returncode == 0, result.stderr
    unexpected = [
        line
        for line in result.stderr.splitlines()
        if re.search(r"error|fatal", line, re.IGNORECASE) and not NO_NVML.search(line)
    ]
    assert not unexpected, result.stderr
    assert not [g for g in _gres_records(result.stderr) if g["Name"] == "gpu"], result.stderr
