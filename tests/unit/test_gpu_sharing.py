"""GPU sharing (shards, MIG instances): the model's errors, the checks (a table, as edits of the
embedded HAL description) and what slurm.conf and gres.conf say."""

from __future__ import annotations

from pathlib import Path

import pytest

from hal_provision.findings import Level
from hal_provision.loader import load, load_text
from hal_provision.render.slurm import gres_conf, slurm_conf

from tests.conftest import HAL_TEXT, _apply

E, W = Level.error, Level.warning
COMPUTE = "    addresses: {mgmt: 172.22.1.1, bmc: 172.23.1.1, ib: 172.24.1.1}\n"
DTN = "    description: data transfer node, 36 drives                                     # [paper]\n"
SLURM = "slurm:\n  memory_reserve_mib: 8192"


def sharing(text: str, group: str = COMPUTE):
    return group, group + f"    gpu_sharing: {text}\n"


NVML = (SLURM, "slurm:\n  nvml: true\n  memory_reserve_mib: 8192")
SHARDS = sharing("{shards_per_gpu: 8}")
MIG = sharing("{mig: [{profile: 3g.40gb, count: 1}, {profile: 1g.10gb, count: 4}]}")

ROWS = [
    ("sharing-without-gpus", [sharing("{shards_per_gpu: 2}", DTN)], E, "nodes[4].gpu_sharing",
     "node group 'dtn' is not compute"),
    ("mig-without-nvml", [MIG], E, "nodes[6].gpu_sharing.mig", "slurmd is built without NVML"),
    ("mig-mode-without-instances", [sharing("{mig: []}")], W, "nodes[6].gpu_sharing.mig",
     "MIG mode is on with no instances"),
]


@pytest.mark.parametrize(("mutation", "level", "path", "message"),
                         [pytest.param(r[1], *r[2:], id=r[0]) for r in ROWS])
def test_sharing_mistake_is_found(finds, mutation, level, path, message):
    finds(mutation, level, path, message)


@pytest.mark.parametrize(("value", "message"), [
    ("{shards_per_gpu: 0}", "greater than or equal to 1"),
    ("{mig: [{profile: 1g.10GB, count: 7}]}", "should match pattern"),
    ("{mig: [{profile: mig-1g, count: 7}]}", "should match pattern"),
    ("{mig: [{profile: 4g.40gb, count: 2}]}", "take 8 compute slices of each GPU, which has 7"),
    ("{mig: [{profile: 1g.10gb, count: 1}, {profile: 1g.10gb, count: 2}]}", "more than once"),
    ("{shards_per_gpu: 4, mig: [{profile: 1g.10gb, count: 1}]}", "exclude each other"),
    ("{}", "shards_per_gpu or mig"),
])
def test_model_refuses(value, message):
    loaded = load_text(_apply(HAL_TEXT, [sharing(value)]), "c.yml")
    assert loaded.model is None
    assert any(message in f.message and f.dotted.startswith("nodes[6].gpu_sharing") for f in loaded.findings), \
        "\n".join(f.format() for f in loaded.findings)


def _model(*steps):
    loaded = load_text(_apply(HAL_TEXT, list(steps)), "c.yml")
    assert loaded.model is not None, "\n".join(f.format() for f in loaded.findings)
    assert not [f for f in loaded.findings if f.level is E], "\n".join(f.format() for f in loaded.findings)
    return loaded.model


def _lines(text: str, *starts: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(starts)]


def test_shards_in_slurm_conf():
    conf = slurm_conf(_model(SHARDS))
    assert _lines(conf, "GresTypes=", "AccountingStorageTRES=") == [
        "GresTypes=gpu,shard", "AccountingStorageTRES=gres/gpu,gres/shard"]
    node = _lines(conf, "NodeName=hal[01-16]")[0]
    assert " Gres=gpu:v100:4,shard:32 " in node, node


def test_shards_in_gres_conf():
    """One Name/Count line per node line: Slurm spreads the count evenly over the GPUs above it."""
    conf = gres_conf(_model(SHARDS))
    assert _lines(conf, "NodeName=hal[01-16] Name=shard") == ["NodeName=hal[01-16] Name=shard Count=32"]
    assert len(_lines(conf, "NodeName=hal[01-16] Name=gpu Type=v100 File=/dev/nvidia")) == 4
    assert conf.index("Name=gpu") < conf.index("Name=shard")


def test_mig_instances_are_gpu_types():
    model = _model(NVML, MIG)
    conf = slurm_conf(model)
    assert _lines(conf, "GresTypes=") == ["GresTypes=gpu"]
    node = _lines(conf, "NodeName=hal[01-16]")[0]
    assert " Gres=gpu:3g.40gb:4,gpu:1g.10gb:16 " in node, node
    gres = gres_conf(model)
    assert _lines(gres, "NodeName=hal[01-16]") == ["NodeName=hal[01-16] AutoDetect=nvml"]
    assert "built with NVML" in gres


def test_groups_sharing_differently_get_lines_of_their_own():
    """Same hardware, one group sharded: two node lines, shards only on the sharded group's."""
    split = ("    hosts: hal[01-16]\n    count: 16 ", "    hosts: hal[01-08]\n    count: 8 ")
    second = (COMPUTE, COMPUTE + "    gpu_sharing: {shards_per_gpu: 2}\n"
              "  - name: compute2\n    role: compute\n    hosts: hal[09-16]\n    hardware: ac922\n"
              "    addresses: {mgmt: 172.22.1.9, bmc: 172.23.1.9, ib: 172.24.1.9}\n")
    model = load_text(_apply(HAL_TEXT, [split, second]), "c.yml").model
    assert model is not None
    nodes = _lines(slurm_conf(model), "NodeName=")
    assert [n.split()[0] for n in nodes] == ["NodeName=hal[01-08]", "NodeName=hal[09-16]"]
    assert " Gres=gpu:v100:4,shard:8 " in nodes[0] and " Gres=gpu:v100:4 " in nodes[1]
    assert _lines(gres_conf(model), "NodeName=hal[09-16] Name=shard") == []


def test_no_sharing_leaves_the_files_as_they_were():
    model = _model()
    assert "GresTypes=gpu\n" in slurm_conf(model) and "shard" not in gres_conf(model)


# ---- the wrapper suite's shard virtual partitions ---------------------------------------------

WORKSTATION = Path(__file__).resolve().parents[1] / "data" / "clusters" / "workstation.yml"


def test_a_shard_virtual_partition_asks_for_its_shards_with_their_cpus():
    """tests/data/clusters/workstation.yml: one H100 offered as 4 shards, 16 CPUs; `shardx1`
    takes one shard and a quarter of the GPU's CPUs (tests/infra/test_gpu_sharing.py runs it)."""
    from hal_provision.node.swsuite.translate import Request, resolve
    from hal_provision.render.swsuite import table

    tab = table(load(WORKSTATION).model)
    assert tab["virtual_partitions"]["shardx1"]["shards"] == 1
    assert tab["virtual_partitions"]["shardx1"]["node"]["shards_per_gpu"] == 4
    args = resolve(tab, Request("shardx1"))
    assert args == ["--partition=gpu", "--time=01:00:00", "--nodes=1", "--ntasks-per-node=4", "--sockets-per-node=1",
                    "--cores-per-socket=4", "--threads-per-core=1", "--mem-per-cpu=7168", "--gres=shard:1"]
    assert "--gres=gpu" not in " ".join(args)


def test_shard_requests_the_suite_refuses():
    from hal_provision.node.swsuite.translate import Request, SwError, job_shape, resolve
    from hal_provision.render.swsuite import table

    tab = table(load(WORKSTATION).model)
    with pytest.raises(SwError, match="shardx1 shares a GPU: -c/--cpus-per-gpu applies to gpux partitions"):
        resolve(tab, Request("shardx1", cpus_per_gpu=4))
    vp = dict(tab["virtual_partitions"]["shardx1"], shards=5)
    with pytest.raises(SwError, match="shardx1: 5 shards, more than a node's 4"):
        job_shape("shardx1", vp, vp["node"])
    node = {k: v for k, v in vp["node"].items() if k != "shards_per_gpu"}
    with pytest.raises(SwError, match="partition gpu offers no GPU shards"):
        job_shape("shardx1", dict(vp, shards=1), node)
