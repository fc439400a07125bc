"""A node's hardware profile in the model's shape (hardware.<name> of cluster.yml), built from
what sources.py read, and printed as YAML (ready to paste under `hardware:`) or JSON.

Fields are None where nothing told them (a records directory with no lscpu, a machine without
DMI): the YAML then says `null` with the reason, so a pasted profile fails validation until
someone fills it in, rather than carrying a guess. Two fields are choices, not facts:
`gpus.type` (the Slurm GRES type) gets a default from the GPU model name, and `features`
(Slurm node features) is left empty.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from . import cpu as cpu_parsers
from . import gpu as gpu_parsers
from .cpu import CpuTopology
from .gpu import GpuReport, gres_type, socket_of
from .infiniband import IbAdapterFound, adapters
from .memory import MemoryReading, reading
from .sources import (
    LSCPU_JSON,
    LSCPU_P,
    LSTOPO_XML,
    MEMINFO,
    MEMORY_BLOCKS,
    NVIDIA_SMI_TOPO,
    NVIDIA_SMI_XML,
    NVML_DUMP,
    DiscoveryError,
    Sources,
)


@dataclass
class Discovery:
    origin: str
    cpu: CpuTopology | None = None
    memory: MemoryReading | None = None
    gpus: GpuReport | None = None  # None: no GPU, or no driver to ask (see notes)
    ib: list[IbAdapterFound] = field(default_factory=list)
    machine_model: str = ""
    notes: list[str] = field(default_factory=list)

    def gpu_sockets(self) -> list[int | None]:
        return [socket_of(g, self.cpu) for g in self.gpus.gpus] if self.gpus else []

    def nvlink(self) -> list[list[int]] | None:
        """The NVLink matrix, [] when no two GPUs are linked; None when not known."""
        if not self.gpus or self.gpus.nvlink is None:
            return None
        matrix = self.gpus.nvlink
        return matrix if any(any(row) for row in matrix) else []

    def _adapter(self, a: IbAdapterFound) -> dict:
        """An ib_adapters entry: its ports' devices, NUMA node and nearest GPUs where known."""
        doc = {"model": a.model, "ports": len(a.ports), "rate_gbps": a.rate_gbps, "devices": a.port_names}
        if a.numa_node is not None:
            doc["numa_node"] = a.numa_node
        near = sorted({g for d in a.devices for g in (self.gpus.nic_gpus.get(d, []) if self.gpus else [])})
        if near:
            doc["gpus"] = near
        return doc

    def profile(self) -> dict:
        """hardware.<name> of the model, with None for what was not discovered."""
        c = self.cpu or CpuTopology(source="none")
        doc: dict = {
            "model": self.machine_model or None,
            "architecture": c.architecture or None,
            "cpu_model": c.model_name,
            "sockets": c.sockets,
            "cores_per_socket": c.cores_per_socket,
            "threads_per_core": c.threads_per_core,
            "memory_gib": self.memory.memory_gib if self.memory else None,
            "gpus": None,
            "ib_adapters": [self._adapter(a) for a in self.ib],
            "features": [],
        }
        if self.gpus and self.gpus.gpus:
            first = self.gpus.gpus[0]
            doc["gpus"] = {
                "type": gres_type(first.name),
                "model": first.name,
                "memory_gib": first.memory_gib,
                "devices": [{"socket": s, "file": g.device_file} for g, s in zip(self.gpus.gpus, self.gpu_sockets())],
                "nvlink": self.nvlink() or [],
            }
            for key in ("pcie_generation", "pcie_width"):  # GPU 0's, where nvidia-smi -q -x told it
                if getattr(first, key) is not None:
                    doc["gpus"][key] = getattr(first, key)
        return doc


def _parsed(sources: Sources, name: str, parse):
    """A record parsed, None when the sources lack it; a malformed one is a DiscoveryError."""
    if name not in sources.texts:
        return None
    try:
        return parse(sources.texts[name])
    except ValueError as exc:
        raise DiscoveryError(f"{sources.origin}: {name}: {exc}") from None


def discover(sources: Sources) -> Discovery:
    """Everything the sources tell, with notes saying where each part came from."""
    texts = sources.texts
    found = Discovery(sources.origin)

    hwloc = _parsed(sources, LSTOPO_XML, cpu_parsers.parse_hwloc_xml)
    fields = _parsed(sources, LSCPU_JSON, cpu_parsers.parse_lscpu_json)
    rows = _parsed(sources, LSCPU_P, cpu_parsers.parse_lscpu_p)
    lscpu = cpu_parsers.topology_from_lscpu(fields, rows) if fields or rows else None
    found.cpu = cpu_parsers.combine(hwloc, lscpu)
    if found.cpu is None:
        found.notes.append("cpu: not discovered (no lstopo.xml, lscpu.json or lscpu-p.txt)")
    else:
        found.notes.append(
            f"cpu: {found.cpu.source}" + ("; model name and architecture from lscpu" if hwloc and lscpu else "")
        )
        found.notes.extend(f"cpu: {n}" for n in found.cpu.notes)
    found.machine_model = sources.machine_model or (hwloc.machine_model if hwloc else "")

    try:
        found.memory = reading(texts.get(MEMINFO), texts.get(MEMORY_BLOCKS))
    except ValueError as exc:
        raise DiscoveryError(f"{sources.origin}: {MEMINFO} or {MEMORY_BLOCKS}: {exc}") from None
    found.notes.append(f"memory: {found.memory.source}" if found.memory else "memory: not discovered (no meminfo)")

    found.gpus = _gpus(sources)
    if found.gpus is None:
        found.notes.append("gpus: none (neither NVML nor nvidia-smi answered: no NVIDIA GPU, or no driver)")
    else:
        found.notes.append(
            f"gpus: {found.gpus.source}; affinity: {found.gpus.affinity_source or 'not known'}; "
            f"NVLink: {found.gpus.nvlink_source or 'not known'}"
        )
        names = {g.name for g in found.gpus.gpus}
        if len(names) > 1:
            found.notes.append(f"gpus: several models {sorted(names)}; the profile shows GPU 0's")

    found.ib = adapters(sources.infiniband)
    ports = [p for a in found.ib for p in a.ports]
    found.notes.append(
        "infiniband: "
        + (
            ", ".join(f"{p.name} {p.state} {p.rate_text or '(no rate)'}" for p in ports)
            if ports
            else "no InfiniBand port"
        )
    )
    return found


def _gpus(sources: Sources) -> GpuReport | None:
    texts = sources.texts
    if sources.nvml is not None:
        report = sources.nvml
    elif NVIDIA_SMI_XML in texts:
        report = GpuReport("nvidia-smi -q -x", _parsed(sources, NVIDIA_SMI_XML, gpu_parsers.parse_nvidia_smi_xml))
    elif NVML_DUMP in texts:
        report = GpuReport("NVML dump", _parsed(sources, NVML_DUMP, gpu_parsers.parse_nvml_dump))
        report.affinity_source = "NVML dump" if any(g.cpu_affinity for g in report.gpus) else ""
    else:
        return None
    if not report.gpus:
        return None
    topo = _parsed(sources, NVIDIA_SMI_TOPO, gpu_parsers.parse_topo_m)
    if topo is not None:
        gpu_parsers.apply_topology(report, topo, "nvidia-smi topo -m")
    return report


# ---- output ---------------------------------------------------------------------------------------

_PLAIN = re.compile(r"^[A-Za-z0-9/(][A-Za-z0-9 ._()/+@-]*$")
_NOT_STRINGS = re.compile(
    r"^(?:[-+]?[0-9][0-9_.eE+-]*|0x[0-9a-fA-F]+|0o[0-7]+|\.inf|\.nan|~|null|Null|NULL"
    r"|true|True|TRUE|false|False|FALSE|yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF|y|Y|n|N)$"
)


def _scalar(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    if _PLAIN.match(text) and not text.endswith(" ") and not _NOT_STRINGS.match(text):
        return text
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a YAML double-quoted scalar


def _flow(mapping: dict) -> str:
    return "{" + ", ".join(f"{k}: {_flow_value(v)}" for k, v in mapping.items()) + "}"


def _flow_value(value) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    return _scalar(value)


def profile_name(host: str) -> str:
    """A valid model name (a letter, then letters, digits, '_' or '-') for a host name."""
    name = re.sub(r"[^A-Za-z0-9_-]", "-", host.split(".")[0]) or "node"
    return name if name[0].isalpha() else f"node-{name}"


def to_yaml(found: Discovery, name: str, title: str = "") -> str:
    """The profile as `name:` and its fields, two-space indented, comments saying where values
    came from and why a value is null."""
    doc = found.profile()
    why_null = {
        "model": "not discovered: no DMI or device-tree model (or lstopo.xml) to read it from",
        "architecture": "not discovered: no lscpu output (and hwloc's XML has none)",
        "sockets": "not discovered",
        "cores_per_socket": "not discovered",
        "threads_per_core": "not discovered",
        "memory_gib": "not discovered: no /proc/meminfo",
    }
    lines = [f"# {title}"] if title else []
    lines += [f"# {note}" for note in found.notes]
    lines.append(f"{name}:")

    def put(indent: int, key: str, value, comment: str = "") -> None:
        text = f"{' ' * indent}{key}: {value}"
        lines.append(f"{text}  # {comment}" if comment else text)

    for key in ("model", "architecture", "cpu_model", "sockets", "cores_per_socket", "threads_per_core"):
        put(2, key, _scalar(doc[key]), why_null.get(key, "") if doc[key] is None else "")
    put(2, "memory_gib", _scalar(doc["memory_gib"]), found.memory.source if found.memory else why_null["memory_gib"])
    gpus = doc["gpus"]
    if gpus:
        lines.append("  gpus:")
        put(4, "type", _scalar(gpus["type"]), "Slurm GRES type: a default from the model name, the admin's choice")
        put(4, "model", _scalar(gpus["model"]))
        first = found.gpus.gpus[0]
        put(
            4,
            "memory_gib",
            _scalar(gpus["memory_gib"]),
            f"{first.memory_mib} MiB" if first.memory_mib else "not discovered",
        )
        unknown = [str(n) for n, d in enumerate(gpus["devices"]) if d["socket"] is None]
        lines.append(
            "    devices:"
            + (
                f"  # socket null: the CPU affinity of GPU {', '.join(unknown)} is not known or spans sockets"
                if unknown
                else ""
            )
        )
        lines += [f"      - {_flow(d)}" for d in gpus["devices"]]
        for key in ("pcie_generation", "pcie_width"):
            if key in gpus:
                put(4, key, gpus[key], "GPU 0's link at most (nvidia-smi -q -x)")
        nvlink_comment = "" if found.nvlink() is not None else "not discovered: no nvidia-smi topo -m and no NVML"
        if gpus["nvlink"]:
            lines.append("    nvlink:" + (f"  # {nvlink_comment}" if nvlink_comment else ""))
            lines += [f"      - [{', '.join(str(n) for n in row)}]" for row in gpus["nvlink"]]
        else:
            put(4, "nvlink", "[]", nvlink_comment or "no NVLink between the GPUs")
    if doc["ib_adapters"]:
        lines.append("  ib_adapters:")
        lines += [f"    - {_flow(a)}" for a in doc["ib_adapters"]]
    else:
        put(2, "ib_adapters", "[]")
    put(2, "features", "[]", "Slurm node features: the admin's choice")
    return "\n".join(lines) + "\n"


def to_json(found: Discovery, name: str) -> dict:
    return {
        "origin": found.origin,
        "hardware": {name: found.profile()},
        "notes": found.notes,
        "memtotal_kib": found.memory.memtotal_kib if found.memory else None,
        "infiniband_ports": [
            {"port": p.name, "state": p.state, "rate": p.rate_text, "link_layer": p.link_layer}
            for a in found.ib
            for p in a.ports
        ],
    }
