"""Hardware discovery (hal_provision/discovery) and `hal-provision discover`.

Inputs are real: outputs recorded on an H100 node (tests/data/hardware/h100-x1/), hwloc's
synthetic topologies built by the real lstopo, this machine itself, and a written AC922
records directory (tests/data/hardware/ac922-synthetic/, its README says what is written how).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from ruamel.yaml import YAML
from typer.testing import CliRunner

from hal_provision.cli.discover import discover as discover_command
from hal_provision.discovery import DiscoveryError, discover, read_live, read_records, to_yaml
from hal_provision.discovery.compare import UnknownHost, compare, same_text
from hal_provision.discovery.cpu import cpu_list, parse_hwloc_xml, parse_lscpu_json, parse_lscpu_p, topology_from_lscpu
from hal_provision.discovery.gpu import gres_type, parse_nvidia_smi_xml, parse_nvml_dump, parse_topo_m
from hal_provision.discovery.infiniband import IbPort, adapters, read_tree
from hal_provision.discovery.memory import (
    GIB,
    MEMORY_TOLERANCE,
    installed_gib,
    memory_blocks_text,
    parse_memory_blocks,
    parse_meminfo,
)
from hal_provision.findings import Level
from hal_provision.loader import load
from hal_provision.model import HardwareProfile

REPO = Path(__file__).resolve().parents[3]
DATA = REPO / "tests" / "data" / "hardware"
H100 = DATA / "h100-x1"
H200 = DATA / "h200-x1"  # recorded on a lent H200 machine (bench/gpu_node_checks.sh)
AC922 = DATA / "ac922-synthetic"
LSTOPO = shutil.which("lstopo")
needs_lstopo = pytest.mark.skipif(LSTOPO is None, reason="hwloc's lstopo is not installed")

H100_NAME = "NVIDIA H100 80GB HBM3"


@pytest.fixture(scope="module")
def hal_loaded():
    """HAL as loaded from its file, not only the model: compare locates findings by its locator."""
    loaded = load()
    assert loaded.model is not None, loaded.findings
    return loaded


def synthetic_hwloc(sockets: int, cores: int, threads: int) -> str:
    """hwloc's XML of a synthetic machine, as tests/acceptance/slurm_harness.py builds it for slurmd."""
    done = subprocess.run(
        [LSTOPO, "--input", f"pack:{sockets} [numa] core:{cores} pu:{threads}", "--of", "xml", "-"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout


@pytest.fixture
def ac922_records(tmp_path) -> Path:
    """The written AC922 records plus the real lstopo's synthetic AC922 topology."""
    if LSTOPO is None:
        pytest.skip("hwloc's lstopo is not installed")
    records = tmp_path / "hal01"
    shutil.copytree(AC922, records, ignore=shutil.ignore_patterns("README.md"))
    (records / "lstopo.xml").write_text(synthetic_hwloc(2, 20, 4))
    return records


# ---- the recorded H100 node ----------------------------------------------------------------------


def test_h100_records_give_the_machines_profile():
    found = discover(read_records(H100))
    profile = found.profile()
    assert {
        k: profile[k]
        for k in ("architecture", "cpu_model", "sockets", "cores_per_socket", "threads_per_core", "memory_gib")
    } == {
        "architecture": "x86_64",
        "cpu_model": "Intel(R) Xeon(R) Processor",
        "sockets": 1,
        "cores_per_socket": 16,
        "threads_per_core": 1,
        "memory_gib": 128,
    }
    assert profile["gpus"] == {
        "type": "h100",
        "model": H100_NAME,
        "memory_gib": 80,
        "devices": [{"socket": 0, "file": "/dev/nvidia0"}],
        "nvlink": [],
        "pcie_generation": 5,
        "pcie_width": 16,
    }  # nvidia-smi -q -x: max_link_gen, max_link_width
    assert profile["ib_adapters"] == [] and profile["model"] is None
    assert found.gpus.source == "nvidia-smi -q -x" and found.gpus.affinity_source == "nvidia-smi topo -m"
    assert found.memory.memtotal_kib == 131981020


def test_h200_records_give_the_machines_profile():
    """What live discovery printed on the machine itself (NVML there, nvidia-smi -q -x here)."""
    profile = discover(read_records(H200)).profile()
    assert {
        k: profile[k]
        for k in ("architecture", "sockets", "cores_per_socket", "threads_per_core", "memory_gib", "ib_adapters")
    } == {
        "architecture": "x86_64",
        "sockets": 1,
        "cores_per_socket": 16,
        "threads_per_core": 1,
        "memory_gib": 128,
        "ib_adapters": [],
    }
    assert profile["gpus"] == {
        "type": "h200",
        "model": "NVIDIA H200",
        "memory_gib": 140,
        "devices": [{"socket": 0, "file": "/dev/nvidia0"}],
        "nvlink": [],
        "pcie_generation": 5,
        "pcie_width": 16,
    }


def test_h100_nvidia_smi_xml():
    [gpu] = parse_nvidia_smi_xml((H100 / "nvidia-smi-q.xml").read_text())
    assert (gpu.index, gpu.name, gpu.memory_mib, gpu.memory_gib, gpu.minor, gpu.bus_id, gpu.device_file) == (
        0,
        H100_NAME,
        81559,
        80,
        0,
        "00000000:00:06.0",
        "/dev/nvidia0",
    )


def test_h100_nvml_dump_agrees_with_nvidia_smi():
    [gpu] = parse_nvml_dump((H100 / "nvml.txt").read_text())
    assert (gpu.name, gpu.memory_mib, gpu.minor, gpu.bus_id) == (H100_NAME, 81559, 0, "00000000:00:06.0")
    assert gpu.cpu_affinity == frozenset(range(16))


def test_h100_topo_m_with_escape_codes():
    topo = parse_topo_m((H100 / "nvidia-smi-topo-m.txt").read_text())
    assert topo.devices == ["GPU0"]
    assert topo.cpu_affinity == {"GPU0": frozenset(range(16))} and topo.numa_affinity == {"GPU0": 0}
    assert topo.nvlink() == [[0]]


def test_h100_lscpu_json_and_p_agree():
    fields = parse_lscpu_json((H100 / "lscpu.json").read_text())
    rows = parse_lscpu_p((H100 / "lscpu-p.txt").read_text())
    assert len(rows) == 16 and {r.socket for r in rows} == {0} and {r.node for r in rows} == {0}
    from_table, from_summary = topology_from_lscpu(fields, rows), topology_from_lscpu(fields, None)
    for topo in (from_table, from_summary):
        assert (topo.sockets, topo.cores_per_socket, topo.threads_per_core) == (1, 16, 1)
        assert (topo.architecture, topo.model_name) == ("x86_64", "Intel(R) Xeon(R) Processor")
    assert from_table.source == "lscpu -p" and from_table.cpu_socket == dict.fromkeys(range(16), 0)


def test_hierarchic_lscpu_json():
    """util-linux can nest fields under 'children' (lscpu -J --hierarchic)."""
    text = json.dumps(
        {
            "lscpu": [
                {"field": "Architecture:", "data": "ppc64le"},
                {
                    "field": "Model name:",
                    "data": "POWER9, altivec supported",
                    "children": [
                        {"field": "Thread(s) per core:", "data": "4"},
                        {"field": "Core(s) per socket:", "data": "20"},
                        {"field": "Socket(s):", "data": "2"},
                    ],
                },
            ]
        }
    )
    topo = topology_from_lscpu(parse_lscpu_json(text), None)
    assert (topo.architecture, topo.model_name, topo.sockets, topo.cores_per_socket, topo.threads_per_core) == (
        "ppc64le",
        "POWER9, altivec supported",
        2,
        20,
        4,
    )


# ---- hwloc: HAL's profiles as synthetic topologies -----------------------------------------------


@needs_lstopo
def test_synthetic_ac922_topology_equals_hals_ac922(hal_loaded):
    """The issue's Done-when point: hwloc's synthetic AC922 reads back as HAL's ac922."""
    want = hal_loaded.model.hardware["ac922"]
    topo = parse_hwloc_xml(synthetic_hwloc(want.sockets, want.cores_per_socket, want.threads_per_core))
    assert (
        (topo.sockets, topo.cores_per_socket, topo.threads_per_core)
        == (2, 20, 4)
        == (want.sockets, want.cores_per_socket, want.threads_per_core)
    )
    assert topo.source == "hwloc XML" and not topo.notes
    assert [topo.cpu_socket[c] for c in (0, 79, 80, 159)] == [0, 0, 1, 1] and len(topo.cpu_socket) == 160
    assert topo.node_socket == {0: 0, 1: 1}


@needs_lstopo
@pytest.mark.parametrize("name", ["lc921", "lc922", "x86-aux", "x86-dtn"])
def test_synthetic_topologies_of_hals_other_profiles(hal_loaded, name):
    want = hal_loaded.model.hardware[name]
    topo = parse_hwloc_xml(synthetic_hwloc(want.sockets, want.cores_per_socket, want.threads_per_core))
    assert (topo.sockets, topo.cores_per_socket, topo.threads_per_core) == (
        want.sockets,
        want.cores_per_socket,
        want.threads_per_core,
    )


def test_hwloc_rejects_other_xml():
    with pytest.raises(ValueError, match="not hwloc XML"):
        parse_hwloc_xml("<nvidia_smi_log/>")


# ---- this machine -------------------------------------------------------------------------------


def test_this_machine_lscpu_and_lstopo_agree():
    live = read_live()
    assert "lscpu-p.txt" in live.texts, "lscpu is part of util-linux, present on every Linux"
    lscpu = topology_from_lscpu(parse_lscpu_json(live.texts["lscpu.json"]), parse_lscpu_p(live.texts["lscpu-p.txt"]))
    assert lscpu.sockets * lscpu.cores_per_socket * lscpu.threads_per_core == os.sysconf("SC_NPROCESSORS_ONLN")
    if LSTOPO is not None:
        hwloc = parse_hwloc_xml(live.texts["lstopo.xml"])
        assert (hwloc.sockets, hwloc.cores_per_socket, hwloc.threads_per_core) == (
            lscpu.sockets,
            lscpu.cores_per_socket,
            lscpu.threads_per_core,
        )
        assert hwloc.cpu_socket == lscpu.cpu_socket
    found = discover(live)
    assert found.profile()["architecture"] == os.uname().machine
    assert found.profile()["sockets"] == lscpu.sockets


def test_this_machine_memory_is_at_least_memtotal():
    found = discover(read_live())
    memtotal_gib = parse_meminfo(Path("/proc/meminfo").read_text()) / (1 << 20)
    assert memtotal_gib <= found.memory.memory_gib <= memtotal_gib * (1 + MEMORY_TOLERANCE) + 1


@pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="no NVIDIA driver on this machine")
def test_this_machines_gpus():
    """On a GPU machine: every GPU nvidia-smi lists, with its device file."""
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True).stdout.splitlines()
    found = discover(read_live())
    profile = found.profile()["gpus"]
    assert len(profile["devices"]) == len([line for line in listed if line.startswith("GPU ")])
    assert profile["memory_gib"] > 0 and profile["type"] != "gpu"
    assert all(Path(d["file"]).exists() for d in profile["devices"])
    assert all(d["socket"] is not None for d in profile["devices"])


# ---- memory -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "total_bytes, gib",
    [
        (131981020 * 1024, 128),  # the H100 node's MemTotal
        (263051776 * 1024, 256),  # 256 GiB less 2 %
        (24 * GIB, 24),  # online memory blocks: exact
        (int(9.7 * GIB), 10),  # a 10 GiB VM stays at 10 (12 is more than 4 % away)
        (int(187.5 * GIB), 192),
        (int(1510 * GIB), 1536),
        (640 * GIB, 640),  # 10 x 64 GiB: not a common size, nothing near
        (int(0.9 * GIB), 1),
    ],
)
def test_installed_memory_rule(total_bytes, gib):
    assert installed_gib(total_bytes) == gib


def test_meminfo_and_memory_blocks(tmp_path):
    assert parse_meminfo((H100 / "meminfo-head.txt").read_text()) == 131981020
    with pytest.raises(ValueError, match="MemTotal"):
        parse_meminfo("MemFree: 1 kB\n")
    memory = tmp_path / "sys" / "devices" / "system" / "memory"
    for n in range(10):
        (memory / f"memory{n}").mkdir(parents=True)
        (memory / f"memory{n}" / "state").write_text("online\n" if n < 8 else "offline\n")
    (memory / "block_size_bytes").write_text("8000000\n")
    text = memory_blocks_text(memory)
    assert text == "block_size_bytes 8000000\nonline_blocks 8\n"
    assert parse_memory_blocks(text) == GIB  # 8 x 128 MiB
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "meminfo").write_text("MemTotal:         990000 kB\n")
    found = discover(read_live(tmp_path, run_commands=False))
    assert found.memory.memory_gib == 1 and found.memory.online_bytes == GIB and found.memory.memtotal_kib == 990000


# ---- GPUs ---------------------------------------------------------------------------------------


def test_nvlink_sample_gives_hals_ac922_matrix(hal_loaded):
    """The topo -m sample (written in nvidia-smi's documented format) against HAL's matrix."""
    topo = parse_topo_m((AC922 / "nvidia-smi-topo-m.txt").read_text())
    assert topo.gpus == ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert topo.nvlink() == hal_loaded.model.hardware["ac922"].gpus.nvlink
    assert topo.cpu_affinity["GPU2"] == frozenset(range(80, 160)) and topo.numa_affinity == {
        "GPU0": 0,
        "GPU1": 0,
        "GPU2": 1,
        "GPU3": 1,
    }


def test_topo_m_with_nics_and_nvswitch():
    """A DGX-like layout: NV18 everywhere (NVSwitch), NIC columns, a NIC legend after the table."""
    text = (
        "\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \tNV18\tPXB\t0-55,112-167\t0\t\tN/A\n"
        "GPU1\tNV18\t X \tSYS\t56-111,168-223\t1\t\tN/A\n"
        "NIC0\tPXB\tSYS\t X \t\t\t\t\n\nLegend:\n\n  X    = Self\n\nNIC Legend:\n\n  NIC0: mlx5_0\n"
    )
    topo = parse_topo_m(text)
    assert topo.devices == ["GPU0", "GPU1", "NIC0"] and topo.nvlink() == [[0, 18], [18, 0]]
    assert topo.cpu_affinity["GPU1"] == frozenset(cpu_list("56-111,168-223")) and topo.numa_affinity["GPU1"] == 1


@needs_lstopo
def test_gpu_sockets_from_affinity_and_from_numa(ac922_records):
    found = discover(read_records(ac922_records))
    assert found.gpu_sockets() == [0, 0, 1, 1]
    for gpu in found.gpus.gpus:  # without CPU affinity the NUMA affinity decides
        gpu.cpu_affinity = None
    assert found.gpu_sockets() == [0, 0, 1, 1]
    for gpu in found.gpus.gpus:  # an affinity over both sockets says nothing
        gpu.cpu_affinity, gpu.numa_node = frozenset(range(160)), None
    assert found.gpu_sockets() == [None] * 4


@pytest.mark.parametrize(
    "name, gres",
    [
        (H100_NAME, "h100"),
        ("Tesla V100-SXM2-16GB", "v100"),
        ("NVIDIA Tesla V100-SXM2-16GB", "v100"),
        ("NVIDIA A100-SXM4-40GB", "a100"),
        ("NVIDIA L40S", "l40s"),
        ("Tesla T4", "t4"),
        ("NVIDIA GH200 480GB", "gh200"),
        ("NVIDIA RTX A6000", "a6000"),
        ("NVIDIA GeForce RTX 4090", "gpu"),
    ],
)
def test_gres_type_default(name, gres):
    assert gres_type(name) == gres


# ---- InfiniBand ---------------------------------------------------------------------------------


def _ib_device(root: Path, name: str, hca: str, guid: str, ports: dict[int, tuple[str, str, str]]) -> None:
    for n, (state, rate, layer) in ports.items():
        port = root / name / "ports" / str(n)
        port.mkdir(parents=True)
        (port / "state").write_text(state + "\n")
        (port / "rate").write_text(rate + "\n")
        (port / "link_layer").write_text(layer + "\n")
    (root / name / "hca_type").write_text(hca + "\n")
    (root / name / "sys_image_guid").write_text(guid + "\n")


def test_infiniband_fake_sysfs(tmp_path):
    root = tmp_path / "sys" / "class" / "infiniband"
    _ib_device(root, "mlx5_0", "MT4119", "9803:9b03:006c:b420", {1: ("4: ACTIVE", "100 Gb/sec (4X EDR)", "InfiniBand")})
    _ib_device(root, "mlx5_1", "MT4119", "9803:9b03:006c:b420", {1: ("1: DOWN", "10 Gb/sec (4X SDR)", "InfiniBand")})
    _ib_device(
        root,
        "mlx4_0",
        "MT4099",
        "0002:c903:00f1:2e10",
        {1: ("4: ACTIVE", "56 Gb/sec (4X FDR)", "InfiniBand"), 2: ("4: ACTIVE", "56 Gb/sec (4X FDR)", "InfiniBand")},
    )
    _ib_device(root, "mlx5_2", "MT4125", "b8ce:f603:00a1:0c2e", {1: ("4: ACTIVE", "100 Gb/sec (2X HDR)", "Ethernet")})
    found = adapters(read_tree(root))
    assert [(a.devices, a.model, len(a.ports), a.rate_gbps) for a in found] == [
        (["mlx4_0"], "Mellanox ConnectX-3 dual-port FDR", 2, 56),
        (["mlx5_0", "mlx5_1"], "Mellanox ConnectX-5 dual-port EDR", 2, 100),  # the DOWN port's SDR ignored
    ]
    assert [p.state for p in found[1].ports] == ["ACTIVE", "DOWN"]
    live = discover(read_live(tmp_path, run_commands=False))  # the same tree as a live /sys
    assert live.profile()["ib_adapters"] == [
        {"model": "Mellanox ConnectX-3 dual-port FDR", "ports": 2, "rate_gbps": 56, "devices": ["mlx4_0", "mlx4_0:2"]},
        {"model": "Mellanox ConnectX-5 dual-port EDR", "ports": 2, "rate_gbps": 100, "devices": ["mlx5_0", "mlx5_1"]},
    ]


@pytest.mark.parametrize(
    "rate, gbps, speed",
    [
        ("100 Gb/sec (4X EDR)", 100, "EDR"),
        ("56 Gb/sec (4X FDR)", 56, "FDR"),
        ("200 Gb/sec (4X HDR)", 200, "HDR"),
        ("25 Gb/sec (1X EDR)", 25, "EDR"),
        ("40 Gb/sec (4X QDR)", 40, "QDR"),
        ("", None, ""),
    ],
)
def test_infiniband_rate(rate, gbps, speed):
    port = IbPort("mlx5_0", 1, "ACTIVE", rate)
    assert (port.rate_gbps, port.speed) == (gbps, speed)


def test_infiniband_port_without_link_has_no_rate(tmp_path):
    _ib_device(tmp_path, "mlx5_0", "MT4123", "1", {1: ("1: DOWN", "10 Gb/sec (4X SDR)", "InfiniBand")})
    [adapter] = adapters(read_tree(tmp_path))
    assert adapter.rate_gbps is None and adapter.model == "Mellanox ConnectX-6 single-port"


# ---- comparison with the model ----------------------------------------------------------------------


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new))


def _drop_gpu3(records: Path) -> None:
    nvml = (records / "nvml.txt").read_text()
    (records / "nvml.txt").write_text(nvml[: nvml.index("3 Tesla")])
    topo = [
        line for line in (records / "nvidia-smi-topo-m.txt").read_text().splitlines() if not line.startswith("GPU3")
    ]
    (records / "nvidia-smi-topo-m.txt").write_text(
        "\n".join(line.replace("\tGPU3", "").replace("\tNV3\t X \t", "\t") for line in topo) + "\n"
    )


def _lscpu(arch: str, model: str):
    doc = {"lscpu": [{"field": "Architecture:", "data": arch}, {"field": "Model name:", "data": model}]}
    return lambda r: (r / "lscpu.json").write_text(json.dumps(doc))


def _topology(sockets, cores, threads):
    return lambda r: (r / "lstopo.xml").write_text(synthetic_hwloc(sockets, cores, threads))


def _ib(device: str, file: str, old: str, new: str):
    return lambda r: _edit(r / "infiniband" / device / file, old, new)


COMPARE_CASES = {
    # name: (mutation of the AC922 records, {(level, dotted path)} of errors and warnings)
    "matching": (lambda r: None, set()),
    "power9 lscpu": (_lscpu("ppc64le", "POWER9, altivec supported"), set()),
    "x86 lscpu": (
        _lscpu("x86_64", "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz"),
        {("error", "hardware.ac922.architecture"), ("warning", "hardware.ac922.cpu_model")},
    ),
    "one socket": (_topology(1, 20, 4), {("error", "hardware.ac922.sockets")}),
    "16 cores": (_topology(2, 16, 4), {("error", "hardware.ac922.cores_per_socket")}),
    "SMT2": (_topology(2, 20, 2), {("error", "hardware.ac922.threads_per_core")}),
    "128 GiB": (
        lambda r: _edit(r / "meminfo-head.txt", "263051776", "131525888"),
        {("error", "hardware.ac922.memory_gib")},
    ),
    "250 GiB is within the tolerance": (lambda r: _edit(r / "meminfo-head.txt", "263051776", "262144000"), set()),
    "3 GPUs": (_drop_gpu3, {("error", "hardware.ac922.gpus.devices")}),
    "GPU model": (
        lambda r: _edit(r / "nvml.txt", "V100-SXM2-16GB", "V100-SXM2-32GB"),
        {("error", "hardware.ac922.gpus.model")},
    ),
    "GPU memory": (
        lambda r: _edit(r / "nvml.txt", "16945512448", "34089730048"),
        {("error", "hardware.ac922.gpus.memory_gib")},
    ),
    "GPU 1 on socket 1": (
        lambda r: _edit(
            r / "nvidia-smi-topo-m.txt", "GPU1\tNV3\t X \tSYS\tSYS\t0-79\t0", "GPU1\tNV3\t X \tSYS\tSYS\t80-159\t1"
        ),
        {("error", "hardware.ac922.gpus.devices[1].socket")},
    ),
    "GPU 3 minor": (
        lambda r: _edit(r / "nvml.txt", " minor 3", " minor 7"),
        {("error", "hardware.ac922.gpus.devices[3].file")},
    ),
    "NVLink NV2": (
        lambda r: _edit(r / "nvidia-smi-topo-m.txt", "GPU2\tSYS\tSYS\t X \tNV3", "GPU2\tSYS\tSYS\t X \tNV2"),
        {("error", "hardware.ac922.gpus.nvlink")},
    ),
    "no GPU": (
        lambda r: [(r / f).unlink() for f in ("nvml.txt", "nvidia-smi-topo-m.txt")],
        {("error", "hardware.ac922.gpus.devices")},
    ),
    "no IB adapter": (lambda r: shutil.rmtree(r / "infiniband"), {("error", "hardware.ac922.ib_adapters")}),
    "one IB port": (
        lambda r: shutil.rmtree(r / "infiniband" / "mlx5_1"),
        {("error", "hardware.ac922.ib_adapters[0].ports")},
    ),
    "FDR": (
        lambda r: [
            _ib(d, "ports/1/rate", "100 Gb/sec (4X EDR)", "56 Gb/sec (4X FDR)")(r) for d in ("mlx5_0", "mlx5_1")
        ],
        {("error", "hardware.ac922.ib_adapters[0].rate_gbps")},
    ),
    "IB port down": (
        _ib("mlx5_1", "ports/1/state", "4: ACTIVE", "1: DOWN"),
        {("warning", "hardware.ac922.ib_adapters[0]")},
    ),
    "ConnectX-4": (
        lambda r: [_ib(d, "hca_type", "MT4119", "MT4115")(r) for d in ("mlx5_0", "mlx5_1")],
        {("warning", "hardware.ac922.ib_adapters[0].model")},
    ),
}


@needs_lstopo
@pytest.mark.parametrize("case", list(COMPARE_CASES))
def test_compare_with_hal01(case, ac922_records, hal_loaded):
    mutate, expected = COMPARE_CASES[case]
    mutate(ac922_records)
    findings = compare(discover(read_records(ac922_records)), hal_loaded.model, "hal01", hal_loaded.locator)
    assert {(f.level.value, f.dotted) for f in findings if f.level is not Level.info} == expected, "\n".join(
        f.format() for f in findings
    )
    lines = Path(hal_loaded.file).read_text().splitlines()
    for f in findings:  # on the line of the key or list item named; HAL leaves `file` out: then the device's item
        assert f.file == hal_loaded.file and f.line and f.column and f.check == "discover"
        line, last = lines[f.line - 1], f.path[-1]
        if isinstance(last, int) or last == "file":
            assert line[: f.column - 1].strip() == "-", f.format()
        else:
            assert line[f.column - 1 :].startswith(last) or f"{last}:" in line, f.format()


@needs_lstopo
def test_compare_says_what_it_could_not_compare(ac922_records, hal_loaded):
    (ac922_records / "nvidia-smi-topo-m.txt").unlink()
    _edit(ac922_records / "nvml.txt", "'0xffffffffffffffff', '0xffff'", "'0x0', '0x0'")
    findings = compare(discover(read_records(ac922_records)), hal_loaded.model, "hal-dev", hal_loaded.locator)
    assert {(f.level.value, f.dotted) for f in findings} == {
        ("info", "hardware.ac922.architecture"),
        ("info", "hardware.ac922.gpus.nvlink"),
        ("info", "hardware.ac922.gpus.devices[0].socket"),
        ("info", "hardware.ac922.gpus.devices[1].socket"),
    }


def test_compare_h100_with_hal01_and_the_login_node(hal_loaded):
    found = discover(read_records(H100))
    paths = {(f.level.value, f.dotted) for f in compare(found, hal_loaded.model, "hal01", hal_loaded.locator)}
    assert paths == {
        ("error", f"hardware.ac922.{p}")
        for p in (
            "architecture",
            "sockets",
            "cores_per_socket",
            "threads_per_core",
            "memory_gib",
            "gpus.devices",
            "gpus.model",
            "gpus.memory_gib",
            "ib_adapters",
        )
    } | {("warning", "hardware.ac922.cpu_model")}
    # a fully qualified name works too
    login = compare(found, hal_loaded.model, "hal-login.hal.example", hal_loaded.locator)
    assert ("error", "hardware.lc921.gpus") in {(f.level.value, f.dotted) for f in login}
    with pytest.raises(UnknownHost, match="'hal99' is in no node group"):
        compare(found, hal_loaded.model, "hal99", hal_loaded.locator)


def test_compare_pcie_link_with_the_profiles():
    """The recorded H100 (gen 5 x16) is ws01 of the workstation example; a profile asking for a
    wider or newer link than the GPU reaches is named, one asking for less is not."""
    from hal_provision.loader import load_text

    text = (Path(__file__).resolve().parents[2] / "data/clusters/workstation.yml").read_text()
    found = discover(read_records(H100))

    def findings(pcie: str) -> set:
        link = re.compile(r"      pcie_generation: 5 .*\n      pcie_width: 16 .*\n")  # the example's, discovered
        assert link.search(text)
        edited = link.sub(pcie, text, count=1)
        loaded = load_text(edited, "workstation.yml")
        return {
            (f.level.value, f.dotted, f.message)
            for f in compare(found, loaded.model, "ws01", loaded.locator)
            if "pcie" in f.dotted
        }

    assert findings("      pcie_generation: 5\n      pcie_width: 16\n") == set()
    assert findings("      pcie_generation: 4\n      pcie_width: 8\n") == set()
    assert findings("      pcie_generation: 6\n      pcie_width: 32\n") == {
        (
            "error",
            "hardware.h100-ws.gpus.pcie_generation",
            "the node's GPU links reach PCIe gen 5, the model says PCIe gen 6",
        ),
        ("error", "hardware.h100-ws.gpus.pcie_width", "the node's GPU links reach PCIe x16, the model says PCIe x32"),
    }


@pytest.mark.parametrize(
    "model, found, same",
    [
        ("IBM POWER9", "POWER9, altivec supported", True),
        ("NVIDIA Tesla V100-SXM2-16GB", "Tesla V100-SXM2-16GB", True),
        ("NVIDIA Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB", False),
        ("Mellanox ConnectX-5 dual-port EDR", "ConnectX-5", True),
        ("Mellanox ConnectX-5 dual-port EDR", "ConnectX-5 Ex", False),
        ("IBM POWER9", "Intel(R) Xeon(R) Processor", False),
    ],
)
def test_same_text(model, found, same):
    assert same_text(model, found) is same


# ---- output -------------------------------------------------------------------------------------


@needs_lstopo
def test_yaml_output_is_a_valid_profile(ac922_records, hal_loaded):
    """Pasted under hardware:, the output validates and equals HAL's ac922 in every discovered field."""
    _lscpu("ppc64le", "POWER9, altivec supported")(ac922_records)
    text = to_yaml(discover(read_records(ac922_records)), "ac922")
    doc = YAML(typ="safe").load(text)["ac922"]
    assert doc["model"] is None and "# not discovered" in text
    doc["model"] = "IBM Power System AC922 8335-GTH"
    got = HardwareProfile.model_validate(doc)
    want = hal_loaded.model.hardware["ac922"]
    for name in ("architecture", "sockets", "cores_per_socket", "threads_per_core", "memory_gib"):
        assert getattr(got, name) == getattr(want, name), name
    # The adapters as HAL has them; discover names each port's device (mlx5_0, mlx5_1), which
    # HAL's profile leaves to the mlx5 naming: the same ports either way.
    assert [(a.model, a.ports, a.rate_gbps) for a in got.ib_adapters] == [
        (a.model, a.ports, a.rate_gbps) for a in want.ib_adapters
    ]
    assert got.ib_adapters[0].devices == ["mlx5_0", "mlx5_1"] and got.ib_ports() == want.ib_ports()
    assert (got.gpus.type, got.gpus.memory_gib, got.gpus.nvlink) == (
        want.gpus.type,
        want.gpus.memory_gib,
        want.gpus.nvlink,
    )
    assert [d.socket for d in got.gpus.devices] == [d.socket for d in want.gpus.devices]


def test_yaml_quotes_what_needs_quoting():
    found = discover(read_records(H100))
    found.cpu.model_name = "Intel: Xeon, #1"
    found.machine_model = "yes"
    doc = YAML(typ="safe").load(to_yaml(found, "h100"))["h100"]
    assert (doc["cpu_model"], doc["model"]) == ("Intel: Xeon, #1", "yes")


def test_module_runs_with_the_standard_library_only():
    """`python3 -S -m hal_provision.discovery`: no site-packages, so no pydantic, ruamel or typer."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    ok = subprocess.run(
        [sys.executable, "-S", "-m", "hal_provision.discovery", "--records", str(H100), "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    doc = json.loads(ok.stdout)
    assert doc["hardware"]["h100-x1"]["gpus"]["model"] == H100_NAME
    missing = subprocess.run(
        [sys.executable, "-S", "-m", "hal_provision.discovery", "--records", "/nonexistent"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 2 and missing.stderr == "error: /nonexistent: no such records directory\n"
    live = subprocess.run(
        [sys.executable, "-S", "-m", "hal_provision.discovery"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert live.returncode == 0 and f"sockets: {discover(read_live()).cpu.sockets}" in live.stdout


# ---- the command --------------------------------------------------------------------------------


def run(*args: str):
    app = typer.Typer()
    app.command()(discover_command)
    result = CliRunner().invoke(app, list(args))
    assert "Traceback" not in result.output
    return result


def test_cli_h100_against_hal01(hal_loaded, hal_text, position):
    result = run("--records", str(H100), "--host", "hal01")
    assert result.exit_code == 1
    assert result.stdout.startswith("# hal01: hardware read from records ") and "\nac922:\n" in result.stdout
    assert "    model: NVIDIA H100 80GB HBM3\n" in result.stdout
    line, column = position(hal_text, "model: NVIDIA Tesla V100-SXM2-16GB")
    assert (
        f"{hal_loaded.file}:{line}:{column}: error: hardware.ac922.gpus.model: the node's GPUs are "
        "NVIDIA H100 80GB HBM3, the model says NVIDIA Tesla V100-SXM2-16GB\n"
    ) in result.stderr
    assert "tolerance 4%" in result.stderr and result.stderr.rstrip().endswith("9 errors, 1 warning, 0 infos")


@needs_lstopo
def test_cli_matching_node_exits_0(ac922_records):
    result = run("--records", str(ac922_records))  # the host defaults to the directory's name: hal01
    assert result.exit_code == 0, result.output
    assert "hal01: the hardware matches profile 'ac922'" in result.stderr


def test_cli_host_not_in_the_model():
    implicit = run("--records", str(H100))
    assert implicit.exit_code == 0 and "\nh100-x1:\n" in implicit.stdout
    assert "'h100-x1' is not a host of " in implicit.stderr and "nothing to compare with" in implicit.stderr
    explicit = run("--records", str(H100), "--host", "hal99")
    assert explicit.exit_code == 2 and "error: host 'hal99' is in no node group of cluster 'hal'" in explicit.stderr


def test_cli_live_default_host(hal_loaded):
    result = run()
    host = socket.gethostname().split(".")[0]
    assert result.stdout.startswith(f"# {host}: hardware read from this machine")
    if hal_loaded.model.group_of(host) is None:
        assert result.exit_code == 0 and "nothing to compare with" in result.stderr
    else:
        assert result.exit_code in (0, 1) and f"hardware.{hal_loaded.model.group_of(host).hardware}" in result.stderr


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: d / "missing", "no such records directory"),
        (lambda d: (d / "file.txt").write_text("x") and d / "file.txt", "not a directory"),
        (lambda d: d, "no discovery records"),
        (lambda d: (d / "lstopo.xml").write_text("<topology") and d, "lstopo.xml: not hwloc XML"),
        (lambda d: (d / "nvidia-smi-q.xml").write_text("{}") and d, "nvidia-smi-q.xml: not nvidia-smi -q -x output"),
    ],
)
def test_cli_unusable_records_exit_2(tmp_path, make, message):
    result = run("--records", str(make(tmp_path)), "--host", "hal01")
    assert result.exit_code == 2 and message in result.stderr
    assert len(result.stderr.splitlines()) == 1 and result.stdout == ""


def test_cli_unusable_cluster_file_exits_2(tmp_path):
    result = run(str(tmp_path / "nope.yml"), "--records", str(H100), "--host", "hal01")
    assert result.exit_code == 2 and "no such file" in result.stderr


def test_cli_json():
    result = run("--records", str(H100), "--host", "hal01", "--json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["host"] == "hal01" and doc["hardware"]["ac922"]["gpus"]["devices"] == [
        {"socket": 0, "file": "/dev/nvidia0"}
    ]
    assert {d["path"] for d in doc["differences"] if d["level"] == "error"} >= {
        "hardware.ac922.gpus.model",
        "hardware.ac922.sockets",
    }
    assert all(d["file"] and d["line"] for d in doc["differences"])


def test_records_errors_are_discovery_errors(tmp_path):
    with pytest.raises(DiscoveryError, match="no such records directory"):
        read_records(tmp_path / "missing")
