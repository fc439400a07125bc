"""GPU sharing (shards, mps, MIG instances): the model's errors, the checks (a table, as edits of the
embedded HAL description) and what slurm.conf and gres.conf say."""

from __future__ import annotations

from pathlib import Path

import pytest

from hal_provision.findings import Level
from hal_provision.loader import load, load_text
from hal_provision.render.slurm import MPS_PROGRAM, gres_conf, slurm_conf

from tests.conftest import HAL_TEXT, _apply

E, W = Level.error, Level.warning
COMPUTE = "    addresses: {mgmt: 172.22.1.1, bmc: 172.23.1.1, ib: 172.24.1.1}\n"
DTN = "    description: data transfer node, 36 drives                                     # [paper]\n"
SLURM = "slurm:\n  memory_reserve_mib: 8192"


def sharing(text: str, group: str = COMPUTE):
    return group, group + f"    gpu_sharing: {text}\n"


NVML = (SLURM, "slurm:\n  nvml: true\n  memory_reserve_mib: 8192")
SHARDS = sharing("{shards_per_gpu: 8}")
MPS = sharing("{mps_per_gpu: 100}")
MIG = sharing("{mig: [{profile: 3g.40gb, count: 1}, {profile: 1g.10gb, count: 4}]}")

ROWS = [
    (
        "sharing-without-gpus",
        [sharing("{shards_per_gpu: 2}", DTN)],
        E,
        "nodes[4].gpu_sharing",
        "node group 'dtn' is not compute",
    ),
    ("mig-without-nvml", [MIG], E, "nodes[6].gpu_sharing.mig", "slurmd is built without NVML"),
    (
        "mig-mode-without-instances",
        [sharing("{mig: []}")],
        W,
        "nodes[6].gpu_sharing.mig",
        "MIG mode is on with no instances",
    ),
    (
        "mps-without-gpus",
        [sharing("{mps_per_gpu: 100}", DTN)],
        E,
        "nodes[4].gpu_sharing",
        "node group 'dtn' is not compute",
    ),
    (
        "mps-count-not-a-percentage",
        [sharing("{mps_per_gpu: 150}")],
        W,
        "nodes[6].gpu_sharing.mps_per_gpu",
        "offers 150 mps per GPU, not a multiple of 100",
    ),
]


@pytest.mark.parametrize(("mutation", "level", "path", "message"), [pytest.param(r[1], *r[2:], id=r[0]) for r in ROWS])
def test_sharing_mistake_is_found(finds, mutation, level, path, message):
    finds(mutation, level, path, message)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("{shards_per_gpu: 0}", "greater than or equal to 1"),
        ("{mig: [{profile: 1g.10GB, count: 7}]}", "should match pattern"),
        ("{mig: [{profile: mig-1g, count: 7}]}", "should match pattern"),
        ("{mig: [{profile: 4g.40gb, count: 2}]}", "take 8 compute slices of each GPU, which has 7"),
        ("{mig: [{profile: 1g.10gb, count: 1}, {profile: 1g.10gb, count: 2}]}", "more than once"),
        ("{shards_per_gpu: 4, mig: [{profile: 1g.10gb, count: 1}]}", "exclude each other"),
        ("{mps_per_gpu: 0}", "greater than or equal to 1"),
        ("{shards_per_gpu: 4, mps_per_gpu: 100}", "shards_per_gpu and mps_per_gpu exclude each other"),
        ("{mps_per_gpu: 100, mig: [{profile: 1g.10gb, count: 1}]}", "mps_per_gpu and mig exclude each other"),
        ("{}", "shards_per_gpu, mps_per_gpu or mig"),
    ],
)
def test_model_refuses(value, message):
    loaded = load_text(_apply(HAL_TEXT, [sharing(value)]), "c.yml")
    assert loaded.model is None
    assert any(message in f.message and f.dotted.startswith("nodes[6].gpu_sharing") for f in loaded.findings), (
        "\n".join(f.format() for f in loaded.findings)
    )


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
        "GresTypes=gpu,shard",
        "AccountingStorageTRES=gres/gpu,gres/shard",
    ]
    node = _lines(conf, "NodeName=hal[01-16]")[0]
    assert " Gres=gpu:v100:4,shard:32 " in node, node


def test_shards_in_gres_conf():
    """One Name/Count line per node line: Slurm spreads the count evenly over the GPUs above it."""
    conf = gres_conf(_model(SHARDS))
    assert _lines(conf, "NodeName=hal[01-16] Name=shard") == ["NodeName=hal[01-16] Name=shard Count=32"]
    assert len(_lines(conf, "NodeName=hal[01-16] Name=gpu Type=v100 File=/dev/nvidia")) == 4
    assert conf.index("Name=gpu") < conf.index("Name=shard")


def test_mps_in_slurm_conf():
    """GresTypes and accounting name mps; every node runs hal-mps as Prolog, Epilog and TaskProlog."""
    conf = slurm_conf(_model(MPS))
    assert _lines(conf, "GresTypes=", "AccountingStorageTRES=") == [
        "GresTypes=gpu,mps",
        "AccountingStorageTRES=gres/gpu,gres/mps",
    ]
    node = _lines(conf, "NodeName=hal[01-16]")[0]
    assert " Gres=gpu:v100:4,mps:400 " in node, node
    assert _lines(conf, "Prolog=", "Epilog=", "TaskProlog=") == [
        f"{key}={MPS_PROGRAM}" for key in ("Prolog", "Epilog", "TaskProlog")
    ]


def test_mps_in_gres_conf():
    """As shards: Name and Count, spread by Slurm evenly over the GPUs above."""
    conf = gres_conf(_model(MPS))
    assert _lines(conf, "NodeName=hal[01-16] Name=mps") == ["NodeName=hal[01-16] Name=mps Count=400"]
    assert conf.index("Name=gpu") < conf.index("Name=mps")


def test_mps_program_is_installed_where_slurm_conf_names_it():
    """The inventory tells the slurm role to install hal-mps on every Slurm node, only with MPS."""
    from hal_provision.render.inventory import render as inventory

    def slurm_nodes(model):
        text = next(iter(inventory(model).values()))
        return text[text.index("    slurm_nodes:\n") :].split("      children:\n")[0]

    assert f'hal_slurm_mps_program: "{MPS_PROGRAM}"' in slurm_nodes(_model(MPS))
    assert slurm_nodes(_model()) == "    slurm_nodes:\n"
    assert not _lines(slurm_conf(_model(SHARDS)), "Prolog=", "Epilog=", "TaskProlog=")


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
    second = (
        COMPUTE,
        COMPUTE + "    gpu_sharing: {shards_per_gpu: 2}\n"
        "  - name: compute2\n    role: compute\n    hosts: hal[09-16]\n    hardware: ac922\n"
        "    addresses: {mgmt: 172.22.1.9, bmc: 172.23.1.9, ib: 172.24.1.9}\n",
    )
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

WORKSTATION = Path(__file__).resolve().parents[2] / "data" / "clusters" / "workstation.yml"


def test_a_shard_virtual_partition_asks_for_its_shards_with_their_cpus():
    """tests/data/clusters/workstation.yml: one H100 offered as 4 shards, 16 CPUs; `shardx1`
    takes one shard and a quarter of the GPU's CPUs (tests/infra/test_gpu_sharing.py runs it)."""
    from hal_provision.node.swsuite.translate import Request, resolve
    from hal_provision.render.swsuite import table

    tab = table(load(WORKSTATION).model)
    assert tab["virtual_partitions"]["shardx1"]["shards"] == 1
    assert tab["virtual_partitions"]["shardx1"]["node"]["shards_per_gpu"] == 4
    args = resolve(tab, Request("shardx1"))
    assert args == [
        "--partition=gpu",
        "--time=01:00:00",
        "--nodes=1",
        "--ntasks-per-node=4",
        "--sockets-per-node=1",
        "--cores-per-socket=4",
        "--threads-per-core=1",
        "--mem-per-cpu=7168",
        "--gres=shard:1",
    ]
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


def test_a_portal_app_offers_a_shard_partition():
    """HAL with its compute GPUs in 4 shards each and a one-shard virtual partition that the
    JupyterLab app offers: the portal's catalogue lists it with the wrapper suite's options
    (--gres=shard:1, and of a quarter of a GPU's 40 hardware threads the whole SMT4 cores: 8)
    and says what it is."""
    from hal_provision.render import portal

    text = HAL_TEXT.replace(
        "    hardware: ac922\n    addresses: {mgmt: 172.22.1.1,",
        "    hardware: ac922\n    gpu_sharing: {shards_per_gpu: 4}\n    addresses: {mgmt: 172.22.1.1,",
    )
    text = text.replace(
        "    - {name: cpun4, kind: cpu, partition: gpu, nodes: 4, mem_per_cpu_mib: 1200, max_time_hours: 24}\n",
        "    - {name: cpun4, kind: cpu, partition: gpu, nodes: 4, mem_per_cpu_mib: 1200, max_time_hours: 24}\n"
        "    - {name: shardx1, kind: shard, partition: gpu, shards: 1, mem_per_cpu_mib: 1200, max_time_hours: 24}\n",
    )
    text = text.replace(
        "kind: jupyterlab, title: JupyterLab, modules: [jupyter],\n"
        "       virtual_partitions: [gpux1, gpux2, gpux4, cpun1]",
        "kind: jupyterlab, title: JupyterLab, modules: [jupyter],\n"
        "       virtual_partitions: [gpux1, gpux2, gpux4, cpun1, shardx1]",
    )
    loaded = load_text(text, "hal-shards.yml")
    assert loaded.model is not None, loaded.findings
    assert not [f for f in loaded.findings if f.level == Level.error]
    app = next(a for a in portal.catalogue(loaded.model)["apps"] if a["name"] == "jupyterlab")
    shard = app["virtual_partitions"]["shardx1"]
    assert shard["description"] == "1 shard of a GPU that other jobs share"
    assert "--gres=shard:1" in shard["options"] and "--cpus-per-task=8" in shard["options"], shard["options"]


def test_swrun_help_lists_a_shard_partition():
    """swrun --help's table: the shard partition's share of a GPU (1 of 4) and its CPUs."""
    from hal_provision.node.swsuite.cli import partitions_help
    from hal_provision.render.swsuite import table

    rows = partitions_help(table(load(WORKSTATION).model)).splitlines()
    assert "  shardx1    1/4      1          4   7168 MiB     48 h  gpu" in rows, rows
