"""CPU topology: sockets, cores per socket, threads per core, model name and architecture.

hwloc's XML (`lstopo --of xml`) is preferred: it is what slurmd itself reads, and hwloc's
synthetic topologies (`lstopo --input "pack:2 [numa] core:20 pu:4"`) let a test describe a
machine this one is not. Without it, `lscpu -p` gives the per-CPU table (CPU, core, socket,
NUMA node) and `lscpu -J` the summary, model name and architecture.

Sockets are numbered 0.. in the order of the kernel's (or hwloc's) socket ids, as the model's
`gpus.devices[].socket` counts them: POWER9 chip ids 0 and 8 become sockets 0 and 1.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from dataclasses import dataclass, field


@dataclass
class CpuTopology:
    source: str
    sockets: int | None = None
    cores_per_socket: int | None = None
    threads_per_core: int | None = None
    architecture: str = ""
    model_name: str = ""
    machine_model: str = ""  # hwloc only: DMI vendor and product, or the platform model (POWER)
    cpu_socket: dict[int, int] = field(default_factory=dict)  # logical CPU -> socket (0-based)
    node_socket: dict[int, int] = field(default_factory=dict)  # NUMA node -> socket (0-based)
    notes: list[str] = field(default_factory=list)


def cpu_list(text: str) -> set[int]:
    """CPU numbers of a kernel CPU list such as '0-15,32-47' (empty for '', 'N/A')."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part or not part[0].isdigit():
            continue
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def _ordinals(ids) -> dict[int, int]:
    """Socket id -> 0-based socket number, in id order."""
    return {sid: n for n, sid in enumerate(sorted(set(ids)))}


def _uniform(counts: list[int], what: str, notes: list[str]) -> int | None:
    """The count every socket (or core) has; the largest, with a note, when they differ."""
    if not counts:
        return None
    if len(set(counts)) > 1:
        notes.append(f"{what} differ: {sorted(Counter(counts).items())} (count: how many); the largest is reported")
    return max(counts)


# ---- hwloc XML ---------------------------------------------------------------------------------


def _bitmask(text: str | None) -> set[int]:
    """Bits of an hwloc bitmask ('0x0000ffff,0xffffffff': 32-bit words, most significant first)."""
    if not text or "f...f" in text:
        return set()
    value = 0
    for word in text.split(","):
        value = (value << 32) | int(word, 16)
    return {bit for bit in range(value.bit_length()) if value >> bit & 1}


def _infos(obj: ET.Element) -> dict[str, str]:
    return {i.get("name", ""): i.get("value", "") for i in obj.findall("info")}


def _objects(root: ET.Element, *types: str) -> list[ET.Element]:
    return [o for o in root.iter("object") if o.get("type") in types]


def parse_hwloc_xml(text: str) -> CpuTopology:
    """Packages (hwloc 1.x: Sockets), their Cores and PUs, and the NUMA node of each PU."""
    try:
        root = ET.fromstring(text.encode("utf-8") if isinstance(text, str) else text)
    except ET.ParseError as exc:
        raise ValueError(f"not hwloc XML: {exc}") from None
    if root.tag != "topology":
        raise ValueError(f"not hwloc XML: the root element is <{root.tag}>, not <topology>")
    topo = CpuTopology(source="hwloc XML")
    packages = _objects(root, "Package", "Socket")
    if not packages:
        raise ValueError("hwloc XML without a Package (socket) object")
    machine = _infos(root.find("object")) if root.find("object") is not None else {}
    topo.architecture = machine.get("Architecture", "")
    product = machine.get("DMIProductName", "").strip()
    topo.machine_model = (
        f"{machine.get('DMISysVendor', '').strip()} {product}".strip()
        if product
        else machine.get("PlatformModel", "").strip()
    )
    models = {_infos(p).get("CPUModel", "") for p in packages} - {""}
    topo.model_name = sorted(models)[0] if models else ""
    ids = [int(p.get("os_index", n)) for n, p in enumerate(packages)]
    number = _ordinals(ids)
    cores_per_package: list[int] = []
    pus_per_core: list[int] = []
    for package, pid in zip(packages, ids):
        cores = _objects(package, "Core")
        if cores:
            cores_per_package.append(len(cores))
            pus_per_core.extend(len(_objects(core, "PU")) for core in cores)
        else:  # no Core level (rare): every PU is a core of its own
            cores_per_package.append(len(_objects(package, "PU")))
            pus_per_core.append(1)
        for pu in _objects(package, "PU"):
            cpu = int(pu.get("os_index", -1))
            topo.cpu_socket[cpu] = number[pid]
            for node in _bitmask(pu.get("nodeset")):
                topo.node_socket.setdefault(node, number[pid])
    topo.sockets = len(packages)
    topo.cores_per_socket = _uniform(cores_per_package, "cores per socket", topo.notes)
    topo.threads_per_core = _uniform(pus_per_core, "threads per core", topo.notes)
    return topo


# ---- lscpu -------------------------------------------------------------------------------------


def parse_lscpu_json(text: str) -> dict[str, str]:
    """`lscpu -J` as field -> value ('Model name' -> '...'), flat or hierarchic (children)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not lscpu -J output: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("lscpu"), list):
        raise ValueError("not lscpu -J output: no 'lscpu' list")
    fields: dict[str, str] = {}

    def walk(entries) -> None:
        for entry in entries:
            name = str(entry.get("field", "")).strip().rstrip(":")
            if name and name not in fields and entry.get("data") is not None:
                fields[name] = str(entry["data"]).strip()
            walk(entry.get("children") or [])

    walk(doc["lscpu"])
    return fields


@dataclass(frozen=True)
class LscpuRow:
    cpu: int
    core: int
    socket: int
    node: int | None


def parse_lscpu_p(text: str) -> list[LscpuRow]:
    """`lscpu -p`: one row per online CPU; the column order is read from the '# CPU,Core,...' header."""
    columns: list[str] = []
    rows: list[LscpuRow] = []
    for line in text.splitlines():
        if line.startswith("#"):
            head = line.lstrip("#").strip()
            if head.startswith("CPU,"):
                columns = head.split(",")
            continue
        if not line.strip():
            continue
        if not columns:
            raise ValueError("not lscpu -p output: no '# CPU,Core,Socket,...' header")
        cells = dict(zip(columns, line.split(",")))
        try:
            node = cells.get("Node", "")
            rows.append(
                LscpuRow(int(cells["CPU"]), int(cells["Core"]), int(cells["Socket"]), int(node) if node else None)
            )
        except (KeyError, ValueError):
            raise ValueError(f"not lscpu -p output: cannot read the line {line!r}") from None
    if not rows:
        raise ValueError("lscpu -p output without a CPU line")
    return rows


def _int(text: str | None) -> int | None:
    return int(text) if text and text.strip().isdigit() else None


def topology_from_lscpu(fields: dict[str, str] | None, rows: list[LscpuRow] | None) -> CpuTopology:
    """Counts from the per-CPU table when there is one (it lists what exists), else the summary."""
    fields = fields or {}
    topo = CpuTopology(source="lscpu -p" if rows else "lscpu -J")
    topo.architecture = fields.get("Architecture", "")
    topo.model_name = fields.get("Model name", "")
    if rows:
        number = _ordinals(r.socket for r in rows)
        cores: dict[int, set[int]] = defaultdict(set)
        threads: Counter = Counter()
        for r in rows:
            topo.cpu_socket[r.cpu] = number[r.socket]
            if r.node is not None:
                topo.node_socket.setdefault(r.node, number[r.socket])
            cores[r.socket].add(r.core)
            threads[(r.socket, r.core)] += 1
        topo.sockets = len(number)
        topo.cores_per_socket = _uniform([len(c) for c in cores.values()], "cores per socket", topo.notes)
        topo.threads_per_core = _uniform(list(threads.values()), "threads per core", topo.notes)
    else:
        topo.sockets = _int(fields.get("Socket(s)")) or _int(fields.get("Physical sockets"))
        topo.cores_per_socket = _int(fields.get("Core(s) per socket"))
        topo.threads_per_core = _int(fields.get("Thread(s) per core"))
    return topo


def combine(hwloc: CpuTopology | None, lscpu: CpuTopology | None) -> CpuTopology | None:
    """hwloc's counts and CPU-to-socket map; lscpu's model name and architecture where hwloc
    has none (a synthetic topology has neither); a note when the two disagree on a count."""
    if hwloc is None:
        return lscpu
    if lscpu is None:
        return hwloc
    hwloc.architecture = hwloc.architecture or lscpu.architecture
    hwloc.model_name = hwloc.model_name or lscpu.model_name
    for name in ("sockets", "cores_per_socket", "threads_per_core"):
        ours, theirs = getattr(hwloc, name), getattr(lscpu, name)
        if theirs is not None and ours != theirs:
            hwloc.notes.append(f"{name}: hwloc says {ours}, {lscpu.source} says {theirs}; hwloc's count is used")
    return hwloc
