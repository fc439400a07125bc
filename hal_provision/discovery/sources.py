"""Where discovery reads from: a records directory, or the live machine.

A records directory holds the raw outputs, one file each (playbooks/discover.yml writes one
per host; tests/data/hardware/ holds recorded ones):

    lscpu.json            lscpu -J
    lscpu-p.txt           lscpu -p
    lscpu.txt             lscpu (for people; not read)
    meminfo-head.txt      the head of /proc/meminfo (MemTotal is read)
    memory-blocks.txt     'block_size_bytes HEX' and 'online_blocks N' of /sys/devices/system/memory
    lstopo.xml            lstopo --of xml
    nvidia-smi-q.xml      nvidia-smi -q -x
    nvidia-smi-topo-m.txt nvidia-smi topo -m
    nvml.txt              an NVML dump (used when there is no nvidia-smi-q.xml)
    host-misc.txt         device files, os-release, uname (for people; not read)
    infiniband/           /sys/class/infiniband/<dev>/{hca_type,board_id,sys_image_guid,
                          ports/<n>/{state,phys_state,rate,link_layer}}

Live, the same commands run here and the same sysfs files are read under a root directory
(so tests can point at a fake tree); every file or command is optional.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .gpu import GpuReport, read_nvml
from .infiniband import IbDevice, read_tree
from .memory import memory_blocks_text

LSCPU_JSON = "lscpu.json"
LSCPU_P = "lscpu-p.txt"
MEMINFO = "meminfo-head.txt"
MEMORY_BLOCKS = "memory-blocks.txt"
LSTOPO_XML = "lstopo.xml"
NVIDIA_SMI_XML = "nvidia-smi-q.xml"
NVIDIA_SMI_TOPO = "nvidia-smi-topo-m.txt"
NVML_DUMP = "nvml.txt"
INFINIBAND = "infiniband"
READ = (LSCPU_JSON, LSCPU_P, MEMINFO, MEMORY_BLOCKS, LSTOPO_XML, NVIDIA_SMI_XML, NVIDIA_SMI_TOPO, NVML_DUMP)

# Live: the command whose output stands for each record.
COMMANDS = {
    LSCPU_JSON: ["lscpu", "-J"],
    LSCPU_P: ["lscpu", "-p"],
    LSTOPO_XML: ["lstopo", "--of", "xml", "-"],
    NVIDIA_SMI_XML: ["nvidia-smi", "-q", "-x"],
    NVIDIA_SMI_TOPO: ["nvidia-smi", "topo", "-m"],
}
COMMAND_TIMEOUT = 60


class DiscoveryError(Exception):
    """Input discovery cannot use: a missing records directory, an unreadable or malformed file."""


@dataclass
class Sources:
    origin: str  # 'records DIR' or 'this machine'
    texts: dict[str, str] = field(default_factory=dict)  # record name -> text, only those present
    infiniband: list[IbDevice] = field(default_factory=list)
    nvml: GpuReport | None = None  # live NVML, when it answered
    machine_model: str = ""  # live: DMI or device-tree (records: lstopo.xml has it)


def read_records(directory: Path) -> Sources:
    if not directory.exists():
        raise DiscoveryError(f"{directory}: no such records directory")
    if not directory.is_dir():
        raise DiscoveryError(f"{directory}: not a directory")
    sources = Sources(f"records {directory}")
    for name in READ:
        path = directory / name
        if path.exists():
            try:
                sources.texts[name] = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise DiscoveryError(f"{path}: cannot read: {exc}") from None
    sources.infiniband = read_tree(directory / INFINIBAND)
    if not sources.texts and not sources.infiniband:
        raise DiscoveryError(f"{directory}: no discovery records (expected files such as {', '.join(READ[:4])})")
    return sources


def _run(argv: list[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 and done.stdout.strip() else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def machine_model(root: Path) -> str:
    """'<vendor> <product>' from DMI (x86, Arm servers), else the device-tree model (POWER)."""
    dmi = root / "sys" / "class" / "dmi" / "id"
    vendor, product = (_read(dmi / "sys_vendor") or "").strip(), (_read(dmi / "product_name") or "").strip()
    if product:
        return f"{vendor} {product}".strip()
    return (_read(root / "proc" / "device-tree" / "model") or "").strip("\x00 \n")


def read_live(root: Path = Path("/"), run_commands: bool = True) -> Sources:
    """This machine: commands (when `run_commands`) and files under `root`."""
    sources = Sources("this machine" if root == Path("/") else f"the tree {root}")
    if run_commands:
        for name, argv in COMMANDS.items():
            text = _run(argv)
            if text is not None:
                sources.texts[name] = text
        sources.nvml = read_nvml()
    meminfo = _read(root / "proc" / "meminfo")
    if meminfo:
        sources.texts[MEMINFO] = meminfo
    blocks = memory_blocks_text(root / "sys" / "devices" / "system" / "memory")
    if blocks:
        sources.texts[MEMORY_BLOCKS] = blocks
    sources.infiniband = read_tree(root / "sys" / "class" / "infiniband")
    sources.machine_model = machine_model(root)
    return sources
