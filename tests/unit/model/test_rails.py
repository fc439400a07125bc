"""Several InfiniBand adapters per node, as today's GPU nodes have them (examples/ailab.yml: an
HGX H100 with eight single-port NDR adapters, one per GPU, adapter r cabled to rail r's leaf):
the ports the model names (HardwareProfile.ib_ports), NCCL_IB_HCA, topology.conf (each node
under one leaf, which tests/acceptance/test_slurmctld.py shows real slurmctld requires), the
diagram, and the profile's errors."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from pydantic import ValidationError

from hal_provision.loader import load
from hal_provision.model import Cluster
from hal_provision.model.hardware import HardwareProfile
from hal_provision.render import render_all

AILAB = Path(__file__).resolve().parents[3] / "examples" / "ailab.yml"


@pytest.fixture(scope="module")
def ailab() -> Cluster:
    return load(AILAB).model


@pytest.fixture(scope="module")
def files(ailab) -> dict[str, str]:
    return render_all(ailab)


def test_each_port_is_the_mlx5_device_of_its_own(ailab):
    ports = ailab.hardware["hgx-h100"].ib_ports()
    assert [str(p) for p in ports] == [f"mlx5_{i}:1" for i in range(8)]
    assert [p.gpus for p in ports] == [(i,) for i in range(8)] and {p.rate_gbps for p in ports} == {400}


def test_nccl_ib_hca_lists_the_eight_rails(files):
    env = next(text for path, text in files.items() if path.endswith("/recipe.env"))
    assert "export NCCL_IB_HCA=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_7:1\n" in env


def test_nccl_ib_hca_follows_the_nearest_gpus_and_named_devices(ailab):
    """Devices as the profile names them (here in reverse, as a board that enumerates them so
    might), ordered by their nearest GPU; a dual-port ConnectX-3's second port as DEVICE:2."""
    from hal_provision.model.recipes import nccl_ib_hca

    data = ailab.model_dump(mode="json", exclude_none=True)
    adapters = data["hardware"]["hgx-h100"]["ib_adapters"]
    for i, adapter in enumerate(adapters):
        adapter["devices"] = [f"mlx5_{7 - i}"]
        adapter["gpus"] = [7 - i]
    cluster = Cluster.model_validate(data)
    groups = [(g.hosts, cluster.profile_of(g)) for g in cluster.nodes if g.name == "gpu"]
    assert nccl_ib_hca(cluster.recipes, cluster.fabric, groups) == [f"mlx5_{i}:1" for i in range(8)]
    profile = HardwareProfile.model_validate(
        {
            **data["hardware"]["cpu2s"],
            "ib_adapters": [{"model": "ConnectX-3", "ports": 2, "rate_gbps": 56, "devices": ["mlx4_0", "mlx4_0:2"]}],
        }
    )
    assert [str(p) for p in profile.ib_ports()] == ["mlx4_0:1", "mlx4_0:2"]


def test_topology_lists_each_node_under_its_first_rail(files):
    conf = files["files/etc/slurm/topology.conf"]
    assert "SwitchName=ib-rail1 Nodes=gpu[01-48]\n" in conf
    for rail in range(2, 9):
        assert f"# ib-rail{rail}: its Slurm nodes are listed under the switch of their lowest cabled port\n" in conf
    assert conf.count("gpu[01-48]") == 1


def test_the_diagram_draws_each_rail(ailab):
    from hal_provision.render.diagram import diagram

    source = diagram(ailab).source
    for port in range(1, 9):
        assert f"48 x 400 Gb/s, port {port}" in source
    assert "8 x NVIDIA ConnectX-7 NDR single-port, 1 x 400 Gb/s" in source


@pytest.mark.parametrize(
    ("adapters", "message"),
    [
        (
            [{"model": "CX7", "ports": 2, "rate_gbps": 400, "devices": ["mlx5_0"]}],
            "devices lists 1 device ports for an adapter of 2 ports: one each",
        ),
        (
            [
                {"model": "CX7", "ports": 1, "rate_gbps": 400, "devices": ["mlx5_1"]},
                {"model": "CX7", "ports": 1, "rate_gbps": 400},
            ],
            "ib_adapters name mlx5_1:1 more than once",
        ),
        ([{"model": "CX7", "ports": 1, "rate_gbps": 400, "devices": ["mlx5 0"]}], "String should match pattern"),
    ],
)
def test_profile_errors_name_the_adapters(ailab, adapters, message):
    data = copy.deepcopy(ailab.model_dump(mode="json", exclude_none=True)["hardware"]["cpu2s"])
    data["ib_adapters"] = adapters
    with pytest.raises(ValidationError, match=message):
        HardwareProfile.model_validate(data)


def _topo_with_nics() -> str:
    """`nvidia-smi topo -m` of an 8-GPU node with eight NICs, in the format of the recorded
    tests/data/hardware/h100-x1/nvidia-smi-topo-m.txt (tab-separated header, one row per
    device, affinity columns, then the legends), written for this test: GPU i and NIC i share
    a PCIe switch (PIX), the other NICs of the socket are NODE, the far socket's SYS."""
    names = [f"GPU{i}" for i in range(8)] + [f"NIC{i}" for i in range(8)]

    def cell(a: str, b: str) -> str:
        if a == b:
            return " X "
        if a.startswith("GPU") and b.startswith("GPU"):
            return "NV18"
        same_socket = int(a[3:]) // 4 == int(b[3:]) // 4
        if a[3:] == b[3:]:
            return "PIX"
        return "NODE" if same_socket else "SYS"

    lines = ["\t" + "\t".join(names) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for a in names:
        affinity = "0-55,112-167\t0" if int(a[3:]) < 4 else "56-111,168-223\t1"
        lines.append(a + "\t" + "\t".join(cell(a, b) for b in names) + f"\t{affinity}\t\tN/A")
    lines += [
        "",
        "Legend:",
        "",
        "  X    = Self",
        "  PIX  = Connection traversing at most a single PCIe bridge",
        "",
        "NIC Legend:",
        "",
    ] + [f"  NIC{i}: mlx5_{i}" for i in range(8)]
    return "\n".join(lines) + "\n"


def test_discover_names_each_adapter_its_numa_node_and_nearest_gpu(tmp_path):
    """A records directory as `discover --records` reads it: /sys/class/infiniband with eight
    single-port ConnectX-7 (hca_type MT4129), each with its device/numa_node, and topo -m with
    the NIC columns; the profile it writes has the eight adapters as the model takes them."""
    from hal_provision.discovery.profile import discover
    from hal_provision.discovery.sources import read_records

    records = Path(__file__).resolve().parents[2] / "data" / "hardware" / "h100-x1"
    for name in ("nvidia-smi-q.xml", "lscpu.json", "meminfo-head.txt"):
        (tmp_path / name).write_bytes((records / name).read_bytes())
    (tmp_path / "nvidia-smi-topo-m.txt").write_text(_topo_with_nics())
    for i in range(8):
        device = tmp_path / "infiniband" / f"mlx5_{i}"
        (device / "ports/1").mkdir(parents=True)
        (device / "device").mkdir()
        (device / "hca_type").write_text("MT4129\n")
        (device / "sys_image_guid").write_text(f"a088:c203:00{i:02x}:0000\n")
        (device / "device/numa_node").write_text(f"{i // 4}\n")
        (device / "ports/1/state").write_text("4: ACTIVE\n")
        (device / "ports/1/rate").write_text("400 Gb/sec (4X NDR)\n")
        (device / "ports/1/link_layer").write_text("InfiniBand\n")
    found = discover(read_records(tmp_path))
    adapters = found.profile()["ib_adapters"]
    assert adapters == [
        {
            "model": "Mellanox ConnectX-7 single-port NDR",
            "ports": 1,
            "rate_gbps": 400,
            "devices": [f"mlx5_{i}"],
            "numa_node": i // 4,
            "gpus": [i],
        }
        for i in range(8)
    ], adapters


def test_a_link_names_its_port_by_device_and_survives_a_dump(ailab):
    """examples/ailab.yml cables each rail by device (mlx5_3 is the node's fourth port); the
    model dumped and read again (as the sandbox's derived model is) keeps the same ports."""
    assert [(link.device, link.port) for link in ailab.fabric.links[:8]] == [(f"mlx5_{i}", i + 1) for i in range(8)]
    again = Cluster.model_validate(ailab.model_dump(mode="json", exclude_none=True))
    assert [link.port for link in again.fabric.links] == [link.port for link in ailab.fabric.links]
    assert render_all(again)["files/etc/slurm/topology.conf"] == render_all(ailab)["files/etc/slurm/topology.conf"]
