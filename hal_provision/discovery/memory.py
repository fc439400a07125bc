"""Installed memory in GiB, read from what the kernel reports.

The kernel never reports the DIMM total: MemTotal leaves out what firmware and the kernel
reserve (a few hundred MiB up to a few percent), and the online memory blocks
(/sys/devices/system/memory: block_size_bytes x blocks whose state is 'online') leave out
holes below 4 GiB. The rule, in this order:

1. the online memory blocks, when readable (live, or `memory-blocks.txt` in a records
   directory); else MemTotal (/proc/meminfo, `meminfo-head.txt`);
2. rounded up to a whole GiB;
3. then up to the next common installed size (1 or 3 x a power of two GiB: ... 96, 128, 192,
   256, 384, 512, 768 ...) when that lies within MEMORY_TOLERANCE above the reading, since
   DIMM populations almost always add up to one of them. A VM with 10 GiB stays at 10.

`compare` accepts a model value within the same tolerance of the discovered one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

MEMORY_TOLERANCE = 0.04  # 4 %: larger than any reservation seen, smaller than a DIMM step
GIB = 1 << 30


@dataclass
class MemoryReading:
    memory_gib: int
    source: str  # how memory_gib was obtained, for the output's comment
    memtotal_kib: int | None = None
    online_bytes: int | None = None


def parse_meminfo(text: str) -> int:
    """MemTotal in KiB."""
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name.strip() == "MemTotal":
            parts = rest.split()
            if parts and parts[0].isdigit():
                return int(parts[0]) * (1024 if parts[1:] == ["MB"] else 1)
    raise ValueError("no MemTotal line in the meminfo text")


def parse_memory_blocks(text: str) -> int:
    """`memory-blocks.txt` ('block_size_bytes 8000000' (hex, as sysfs writes it) and
    'online_blocks 192'): the bytes of online memory."""
    values = dict(line.split(None, 1) for line in text.splitlines() if len(line.split()) == 2)
    try:
        return int(values["block_size_bytes"], 16) * int(values["online_blocks"])
    except (KeyError, ValueError):
        raise ValueError("memory-blocks.txt needs the lines 'block_size_bytes HEX' and 'online_blocks N'") from None


def memory_blocks_text(sysfs_memory: Path) -> str | None:
    """The `memory-blocks.txt` text for a live /sys/devices/system/memory; None if unreadable."""
    try:
        size = (sysfs_memory / "block_size_bytes").read_text().strip()
        online = sum(1 for state in sysfs_memory.glob("memory*/state") if state.read_text().strip() == "online")
    except OSError:
        return None
    return f"block_size_bytes {size}\nonline_blocks {online}\n" if online else None


# 1 and 3 times a power of two GiB, up to 3 PiB.
COMMON_SIZES_GIB = sorted({1 << k for k in range(22)} | {3 << k for k in range(21)})


def installed_gib(total_bytes: int) -> int:
    """Steps 2 and 3 of the rule above."""
    raw = total_bytes / GIB
    whole = max(1, math.ceil(raw - 1e-9))
    common = next((s for s in COMMON_SIZES_GIB if s >= whole), whole)
    return common if common <= raw * (1 + MEMORY_TOLERANCE) else whole


def reading(meminfo: str | None, memory_blocks: str | None) -> MemoryReading | None:
    memtotal = parse_meminfo(meminfo) if meminfo else None
    online = parse_memory_blocks(memory_blocks) if memory_blocks else None
    if online:
        gib = installed_gib(online)
        return MemoryReading(gib, f"online memory blocks {online / GIB:.2f} GiB -> {gib} GiB", memtotal, online)
    if memtotal:
        gib = installed_gib(memtotal * 1024)
        return MemoryReading(gib, f"MemTotal {memtotal} kB ({memtotal / (1 << 20):.2f} GiB) -> {gib} GiB", memtotal)
    return None
