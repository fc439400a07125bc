"""InfiniBand adapters from /sys/class/infiniband (or a records directory's copy of it).

Read per device: hca_type (the PCI device id, 'MT4119'), board_id (the firmware PSID),
sys_image_guid, and per port ports/N/{state, phys_state, rate, link_layer}. Ports whose
link layer is Ethernet (RoCE) are not InfiniBand ports and are left out.

One adapter can be several devices: mlx5 gives each port of a dual-port ConnectX-4/5/6 a PCI
function and a device of its own (mlx5_0, mlx5_1), which share the card's sys_image_guid.
Devices are therefore grouped by sys_image_guid into adapters. An adapter's rate is the
fastest rate among its ACTIVE ports (a port without link reports a meaningless minimum);
None when no port is ACTIVE.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

# Mellanox (NVIDIA) PCI device ids as sysfs hca_type shows them.
HCA_FAMILIES = {
    "MT4099": "ConnectX-3",
    "MT4103": "ConnectX-3 Pro",
    "MT4113": "Connect-IB",
    "MT4115": "ConnectX-4",
    "MT4116": "ConnectX-4 VF",
    "MT4117": "ConnectX-4 Lx",
    "MT4118": "ConnectX-4 Lx VF",
    "MT4119": "ConnectX-5",
    "MT4120": "ConnectX-5 VF",
    "MT4121": "ConnectX-5 Ex",
    "MT4122": "ConnectX-5 Ex VF",
    "MT4123": "ConnectX-6",
    "MT4124": "ConnectX-6 VF",
    "MT4125": "ConnectX-6 Dx",
    "MT4127": "ConnectX-6 Lx",
    "MT4129": "ConnectX-7",
    "MT4131": "ConnectX-8",
    "MT41682": "BlueField",
    "MT41686": "BlueField-2",
    "MT41692": "BlueField-3",
}
PORT_WORDS = {1: "single-port", 2: "dual-port"}


@dataclass
class IbPort:
    device: str
    number: int
    state: str  # ACTIVE, DOWN, INIT, ARMED (without the '4: ' prefix)
    rate_text: str = ""  # '100 Gb/sec (4X EDR)'
    link_layer: str = "InfiniBand"

    @property
    def name(self) -> str:
        return f"{self.device}/{self.number}"

    @property
    def rate_gbps(self) -> int | None:
        match = re.match(r"\s*([\d.]+)\s*Gb/sec", self.rate_text)
        return round(float(match.group(1))) if match else None

    @property
    def speed(self) -> str:
        """The signalling name in the rate text: '(4X EDR)' -> 'EDR'."""
        match = re.search(r"\(\d+X\s+(\w+)\)", self.rate_text)
        return match.group(1) if match else ""


@dataclass
class IbDevice:
    name: str
    hca_type: str = ""
    board_id: str = ""
    sys_image_guid: str = ""
    ports: list[IbPort] = field(default_factory=list)
    numa_node: int | None = None  # device/numa_node; None where the kernel does not know (-1)

    @property
    def family(self) -> str:
        return HCA_FAMILIES.get(self.hca_type, self.hca_type or self.board_id or self.name)


@dataclass
class IbAdapterFound:
    family: str
    devices: list[str]
    ports: list[IbPort]
    numa_node: int | None = None

    @property
    def port_names(self) -> list[str]:
        """Each port as the model's ib_adapters[].devices names it: DEVICE for port 1, DEVICE:PORT."""
        return [p.device if p.number == 1 else f"{p.device}:{p.number}" for p in self.ports]

    @property
    def rate_gbps(self) -> int | None:
        rates = [p.rate_gbps for p in self.ports if p.state == "ACTIVE" and p.rate_gbps]
        return max(rates) if rates else None

    @property
    def model(self) -> str:
        """In the model's words: 'Mellanox ConnectX-5 dual-port EDR'."""
        speeds = sorted({p.speed for p in self.ports if p.state == "ACTIVE" and p.speed})
        words = ["Mellanox", self.family, PORT_WORDS.get(len(self.ports), f"{len(self.ports)}-port"), *speeds[-1:]]
        return " ".join(words)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return ""


def read_tree(root: Path) -> list[IbDevice]:
    """Devices under a /sys/class/infiniband-shaped directory (sorted by name)."""
    if not root.is_dir():
        return []
    devices = []
    for entry in sorted(root.iterdir(), key=lambda p: p.name):
        if not entry.is_dir():
            continue
        numa = _read(entry / "device" / "numa_node")
        device = IbDevice(
            entry.name,
            _read(entry / "hca_type"),
            _read(entry / "board_id"),
            _read(entry / "sys_image_guid"),
            numa_node=int(numa) if re.fullmatch(r"\d+", numa) else None,
        )
        ports_dir = entry / "ports"
        numbers = sorted(int(p.name) for p in ports_dir.iterdir() if p.name.isdigit()) if ports_dir.is_dir() else []
        for n in numbers:
            port = ports_dir / str(n)
            state = _read(port / "state")
            device.ports.append(
                IbPort(
                    entry.name,
                    n,
                    state.split(":", 1)[-1].strip() or "unknown",
                    _read(port / "rate"),
                    _read(port / "link_layer") or "InfiniBand",
                )
            )
        devices.append(device)
    return devices


def adapters(devices: list[IbDevice]) -> list[IbAdapterFound]:
    """InfiniBand adapters: devices grouped by sys_image_guid, Ethernet-only devices left out."""
    groups: dict[str, list[IbDevice]] = {}
    for device in devices:
        guid = device.sys_image_guid.replace(":", "").strip("0")
        groups.setdefault(guid or f"device:{device.name}", []).append(device)
    found = []
    for members in groups.values():
        ports = [p for d in members for p in d.ports if p.link_layer.lower() == "infiniband"]
        if ports:
            found.append(
                IbAdapterFound(
                    members[0].family,
                    [d.name for d in members],
                    ports,
                    next((d.numa_node for d in members if d.numa_node is not None), None),
                )
            )
    return found
