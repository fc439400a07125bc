"""GPUs: model name, memory, device file, the CPU socket each hangs off, NVLink between them.

Sources, in order of preference:
- NVML (pynvml), live, when it imports and the driver answers;
- `nvidia-smi -q -x` (records: nvidia-smi-q.xml): name, fb_memory_usage total, minor number;
- `nvml.txt` in a records directory (an NVML dump, see tests/data/hardware/h100-x1/README.md).
Socket and NVLink come from `nvidia-smi topo -m` (its CPU and NUMA affinity columns and the
NV# cells; NVSwitch systems show there too), else from NVML's CPU affinity mask and per-link
remote PCI ids. The socket is the one all CPUs of a GPU's affinity belong to, through the CPU
topology's CPU -> socket map; a GPU whose affinity spans sockets has no socket (None).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from .cpu import CpuTopology, cpu_list

MIB = 1 << 20


@dataclass
class Gpu:
    index: int
    name: str
    memory_mib: int | None = None
    minor: int | None = None
    bus_id: str = ""
    cpu_affinity: frozenset[int] | None = None
    numa_node: int | None = None
    pcie_generation: int | None = None  # the most the link trains to (nvidia-smi's max_link_gen)
    pcie_width: int | None = None  # its lanes at most (max_link_width: "16x")

    @property
    def memory_gib(self) -> int | None:
        """Rounded to the nearest GiB: the driver keeps some memory back (81559 MiB on an
        'H100 80GB', 16160 MiB on a 'V100 16GB' with ECC)."""
        return round(self.memory_mib / 1024) if self.memory_mib else None

    @property
    def device_file(self) -> str:
        return f"/dev/nvidia{self.minor if self.minor is not None else self.index}"


@dataclass
class GpuReport:
    source: str
    gpus: list[Gpu]
    nvlink: list[list[int]] | None = None  # None: not known (no topo -m, no NVML)
    affinity_source: str = ""
    nvlink_source: str = ""
    nic_gpus: dict[str, list[int]] = field(default_factory=dict)  # NIC device -> nearest GPUs (topo -m)


def gres_type(model_name: str) -> str:
    """A default Slurm GRES type from the model name ('NVIDIA H100 80GB HBM3' -> 'h100',
    'Tesla V100-SXM2-16GB' -> 'v100'): the first word that is letters then digits. The type is
    the admin's choice (users type it in --gres=gpu:TYPE:N); 'gpu' when no word fits."""
    for word in re.split(r"[\s\-_/]+", model_name):
        if re.fullmatch(r"[A-Za-z]{1,3}\d{1,4}[A-Za-z]?", word) and word.upper() not in (
            "HBM2",
            "HBM3",
            "HBM2E",
            "PCIE",
        ):
            return word.lower()
    return "gpu"


# ---- nvidia-smi -q -x ---------------------------------------------------------------------------


def _mib(text: str | None) -> int | None:
    match = re.fullmatch(r"\s*(\d+)\s*MiB\s*", text or "")
    return int(match.group(1)) if match else None


def _number(text: str | None) -> int | None:
    text = (text or "").strip()
    return int(text) if text.isdigit() else None


def parse_nvidia_smi_xml(text: str) -> list[Gpu]:
    try:
        root = ET.fromstring(text.encode("utf-8"))
    except ET.ParseError as exc:
        raise ValueError(f"not nvidia-smi -q -x output: {exc}") from None
    if root.tag != "nvidia_smi_log":
        raise ValueError(f"not nvidia-smi -q -x output: the root element is <{root.tag}>")
    gpus = []
    for index, gpu in enumerate(root.findall("gpu")):
        gpus.append(
            Gpu(
                index=index,
                name=(gpu.findtext("product_name") or "").strip(),
                memory_mib=_mib(gpu.findtext("fb_memory_usage/total")),
                minor=_number(gpu.findtext("minor_number")),
                bus_id=gpu.get("id", ""),
                pcie_generation=_number(gpu.findtext("pci/pci_gpu_link_info/pcie_gen/max_link_gen")),
                pcie_width=_number(
                    (gpu.findtext("pci/pci_gpu_link_info/link_widths/max_link_width") or "").rstrip("x ")
                ),
            )
        )
    return gpus


# ---- nvml.txt (a records directory's NVML dump) -----------------------------------------------


_NVML_GPU = re.compile(r"^(\d+) (.+) (\d+) ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$")


def affinity_from_mask(words) -> frozenset[int]:
    """CPUs of NVML's CPU affinity mask: 64-bit words, word 0 holding CPUs 0-63."""
    cpus = set()
    for n, word in enumerate(words):
        value = int(word, 16) if isinstance(word, str) else int(word)
        cpus.update(n * 64 + bit for bit in range(64) if value >> bit & 1)
    return frozenset(cpus)


def parse_nvml_dump(text: str) -> list[Gpu]:
    """Lines 'INDEX NAME MEMORY_BYTES BUS_ID', then ' minor N' and " cpuaff ['0xffff', ...]"."""
    gpus: list[Gpu] = []
    for line in text.splitlines():
        match = _NVML_GPU.match(line)
        if match:
            index, name, total, bus = match.groups()
            gpus.append(Gpu(int(index), name, round(int(total) / MIB), None, bus))
        elif gpus and line.strip().startswith("minor "):
            gpus[-1].minor = _number(line.split()[1])
        elif gpus and line.strip().startswith("cpuaff "):
            gpus[-1].cpu_affinity = affinity_from_mask(re.findall(r"0x[0-9A-Fa-f]+|\b\d+\b", line.split(None, 1)[1]))
    return gpus


# ---- nvidia-smi topo -m -----------------------------------------------------------------------


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_DEVICE = re.compile(r"^(GPU\d+|NIC\d+|mlx\d+_\d+)$")


@dataclass
class TopoMatrix:
    devices: list[str]  # the link columns: GPU0.., then NICs
    links: dict[str, list[str]] = field(default_factory=dict)  # row -> cells, in `devices` order
    cpu_affinity: dict[str, frozenset[int]] = field(default_factory=dict)
    numa_affinity: dict[str, int] = field(default_factory=dict)
    nic_names: dict[str, str] = field(default_factory=dict)  # NIC0 -> mlx5_0, from the NIC legend

    @property
    def gpus(self) -> list[str]:
        return [d for d in self.devices if d.startswith("GPU")]

    def nvlink(self) -> list[list[int]]:
        """NV# counts between GPUs (0 for any other kind of path and on the diagonal)."""
        gpus = self.gpus
        columns = [self.devices.index(g) for g in gpus]
        matrix = []
        for row in gpus:
            cells = self.links.get(row, [])
            matrix.append([_nv(cells[c]) if c < len(cells) else 0 for c in columns])
        return matrix

    def nearest_gpus(self) -> dict[str, list[int]]:
        """NIC device (mlx5_0) -> the GPUs behind the same PCIe switch (PIX or PXB: the path
        between them crosses no host bridge), by index."""
        out: dict[str, list[int]] = {}
        for column, nic in enumerate(self.devices):
            if not nic.startswith(("NIC", "mlx")):
                continue
            name = self.nic_names.get(nic, nic)
            out[name] = [
                int(g[3:])
                for g in self.gpus
                if column < len(self.links.get(g, [])) and self.links[g][column] in ("PIX", "PXB")
            ]
        return out


def _nv(cell: str) -> int:
    match = re.fullmatch(r"NV(\d+)", cell)
    return int(match.group(1)) if match else 0


def parse_topo_m(text: str) -> TopoMatrix:
    """`nvidia-smi topo -m`. The header's cells are tab-separated names (some with spaces);
    nvidia-smi pads rows with extra tabs, so a row is read as whitespace-separated words: the
    row name, one cell per link column, then the affinity columns in header order."""
    lines = [_ANSI.sub("", line) for line in text.splitlines()]
    header_at = next((n for n, line in enumerate(lines) if re.search(r"(^|\t)\s*GPU0\s*(\t|$)", line)), None)
    if header_at is None:
        raise ValueError("not nvidia-smi topo -m output: no header with GPU0")
    names = [c.strip() for c in lines[header_at].split("\t") if c.strip()]
    devices = [n for n in names if _DEVICE.match(n)]
    extra = names[len(devices) :]
    topo = TopoMatrix(devices)
    for line in lines[header_at + 1 :]:
        words = line.split()
        if not words or not _DEVICE.match(words[0]):
            if topo.links:
                break  # the legend follows the table
            continue
        row, cells, rest = words[0], words[1 : 1 + len(devices)], words[1 + len(devices) :]
        topo.links[row] = cells
        values = dict(zip(extra, rest))
        if "CPU Affinity" in values:
            topo.cpu_affinity[row] = frozenset(cpu_list(values["CPU Affinity"]))
        numa = _number(values.get("NUMA Affinity"))
        if numa is not None:
            topo.numa_affinity[row] = numa
    topo.nic_names = dict(re.findall(r"^\s*(NIC\d+):\s*(\S+)\s*$", "\n".join(lines), re.M))
    missing = [g for g in topo.gpus if g not in topo.links]
    if missing:
        raise ValueError(f"nvidia-smi topo -m output without rows for {', '.join(missing)}")
    return topo


def apply_topology(report: GpuReport, topo: TopoMatrix, source: str) -> None:
    """Affinity and NVLink from topo -m onto the GPUs (GPU<i> is the GPU of index i)."""
    for gpu in report.gpus:
        row = f"GPU{gpu.index}"
        if row in topo.cpu_affinity:
            gpu.cpu_affinity = topo.cpu_affinity[row]
        if row in topo.numa_affinity:
            gpu.numa_node = topo.numa_affinity[row]
    report.nic_gpus = topo.nearest_gpus()
    report.affinity_source = source
    if len(topo.gpus) == len(report.gpus):
        report.nvlink = topo.nvlink()
        report.nvlink_source = source


def socket_of(gpu: Gpu, cpu: CpuTopology | None) -> int | None:
    if cpu is None:
        return None
    if gpu.cpu_affinity:
        sockets = {cpu.cpu_socket.get(c) for c in gpu.cpu_affinity}
        if len(sockets) == 1 and None not in sockets:
            return sockets.pop()
    if gpu.numa_node is not None:
        return cpu.node_socket.get(gpu.numa_node)
    return None


# ---- NVML, live ---------------------------------------------------------------------------------


def read_nvml() -> GpuReport | None:
    """GPUs through NVML; None when pynvml is missing or no driver answers."""
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...: no usable driver
        return None
    try:
        return _nvml_report(pynvml)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: S110 - shutting down is best effort
            pass


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvml_report(pynvml) -> GpuReport:
    count = pynvml.nvmlDeviceGetCount()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    gpus = []
    bus_index: dict[str, int] = {}
    for i, handle in enumerate(handles):
        bus = _text(pynvml.nvmlDeviceGetPciInfo(handle).busId)
        bus_index[bus.lower()] = i
        gpu = Gpu(
            i,
            _text(pynvml.nvmlDeviceGetName(handle)),
            round(pynvml.nvmlDeviceGetMemoryInfo(handle).total / MIB),
            bus_id=bus,
        )
        try:
            gpu.minor = pynvml.nvmlDeviceGetMinorNumber(handle)
        except pynvml.NVMLError:
            pass
        try:
            gpu.cpu_affinity = affinity_from_mask(pynvml.nvmlDeviceGetCpuAffinity(handle, 16)) or None
        except pynvml.NVMLError:
            pass
        try:
            gpu.pcie_generation = pynvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)
            gpu.pcie_width = pynvml.nvmlDeviceGetMaxPcieLinkWidth(handle)
        except pynvml.NVMLError:
            pass
        gpus.append(gpu)
    report = GpuReport("NVML", gpus, affinity_source="NVML")
    report.nvlink, report.nvlink_source = _nvml_nvlink(pynvml, handles, bus_index), "NVML"
    return report


def _nvml_nvlink(pynvml, handles, bus_index: dict[str, int]) -> list[list[int]]:
    """Active links from each GPU to each other GPU (links to CPUs and NVSwitches not counted)."""
    matrix = [[0] * len(handles) for _ in handles]
    for i, handle in enumerate(handles):
        for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                if pynvml.nvmlDeviceGetNvLinkState(handle, link) != pynvml.NVML_FEATURE_ENABLED:
                    continue
                remote = _text(pynvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId).lower()
            except pynvml.NVMLError:
                continue  # no such link, or NVLink not supported
            j = bus_index.get(remote)
            if j is not None and j != i:
                matrix[i][j] += 1
    return matrix
