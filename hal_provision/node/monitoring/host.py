"""Telegraf's cpu, mem, system, disk, net and processes inputs, emulated from /proc and statvfs.

Only the stand-in uses these, where Telegraf cannot be installed; names, units and types are
Telegraf's documented ones (its plugins read the same files through gopsutil):

- cpu: tag cpu (`cpu-total`, and `cpuN` with percpu); usage_* percentages of the time between
  two reads of /proc/stat (the first call reads twice, 0.2 s apart); guest time is taken out
  of user and nice as Telegraf does; time_* seconds with collect_cpu_time; usage_active with
  report_active.
- mem: from /proc/meminfo in bytes; cached includes SReclaimable and used = total - free -
  buffered - cached (gopsutil's definitions); used_percent and available_percent.
- system: load1, load5, load15, n_cpus, n_users (utmp USER_PROCESS records, when readable),
  uptime (integer seconds), uptime_format.
- disk: one point per mounted file system with a non-zero size whose type is not in
  ignore_fs (Telegraf's sample default when unset); tags path, device, fstype, mode; total,
  free (available to users), used, used_percent = used / (used + free), inodes_*.
- net: one point per interface that is up and not loopback (or those matching `interfaces`);
  bytes, packets, errors and drops from /proc/net/dev. Protocol statistics (interface=all)
  are not emulated; HAL's rendered configuration turns them off (ignore_protocol_stats).
- processes: counts by state from /proc/<pid>/stat, total and total_threads.
"""

from __future__ import annotations

import fnmatch
import os
import struct
import time
from dataclasses import dataclass, field
from typing import Callable

from .lineprotocol import Point

PROC = "/proc"
# Telegraf's disk sample configuration (what the rendered configuration sets too).
DEFAULT_IGNORE_FS = ("tmpfs", "devtmpfs", "devfs", "iso9660", "overlay", "aufs", "squashfs")
CPU_STATES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


# ---- cpu ----------------------------------------------------------------------------------------


def read_cpu_times(proc: str = PROC) -> dict[str, dict[str, float]]:
    """`cpu` -> seconds per state, and `cpuN` likewise, from /proc/stat."""
    hz = os.sysconf("SC_CLK_TCK")
    out = {}
    for line in _read(f"{proc}/stat").splitlines():
        words = line.split()
        if words and words[0].startswith("cpu"):
            values = [int(w) / hz for w in words[1 : 1 + len(CPU_STATES)]]
            values += [0.0] * (len(CPU_STATES) - len(values))
            out[words[0]] = dict(zip(CPU_STATES, values))
    return out


@dataclass
class CpuStats:
    """Telegraf's cpu input: keeps the previous read, as Telegraf does between intervals."""

    percpu: bool = True
    totalcpu: bool = True
    collect_cpu_time: bool = False
    report_active: bool = False
    proc: str = PROC
    first_sample_seconds: float = 0.2
    _last: dict[str, dict[str, float]] = field(default_factory=dict)

    def points(self) -> list[Point]:
        if not self._last:
            self._last = read_cpu_times(self.proc)
            time.sleep(self.first_sample_seconds)
        now, last = read_cpu_times(self.proc), self._last
        self._last = now
        points = []
        for name, t in now.items():
            tag = "cpu-total" if name == "cpu" else name
            if (name == "cpu" and not self.totalcpu) or (name != "cpu" and not self.percpu):
                continue
            fields: dict[str, float] = {}
            if self.collect_cpu_time:
                fields.update({f"time_{k}": v for k, v in t.items()})
                fields["time_active"] = _total(t) - t["idle"]
            before = last.get(name)
            delta = _total(t) - _total(before) if before else 0.0
            if before and delta > 0:
                d = {k: t[k] - before[k] for k in CPU_STATES}
                fields.update(
                    {
                        "usage_user": 100 * (d["user"] - d["guest"]) / delta,
                        "usage_system": 100 * d["system"] / delta,
                        "usage_idle": 100 * d["idle"] / delta,
                        "usage_nice": 100 * (d["nice"] - d["guest_nice"]) / delta,
                        "usage_iowait": 100 * d["iowait"] / delta,
                        "usage_irq": 100 * d["irq"] / delta,
                        "usage_softirq": 100 * d["softirq"] / delta,
                        "usage_steal": 100 * d["steal"] / delta,
                        "usage_guest": 100 * d["guest"] / delta,
                        "usage_guest_nice": 100 * d["guest_nice"] / delta,
                    }
                )
                if self.report_active:
                    fields["usage_active"] = 100 * (delta - d["idle"]) / delta
            if fields:
                points.append(Point("cpu", {"cpu": tag}, fields))
        return points


def _total(t: dict[str, float]) -> float:
    # Telegraf's totalCPUTime: guest time is already counted in user and nice.
    return sum(t[k] for k in ("user", "system", "nice", "iowait", "irq", "softirq", "steal", "idle"))


# ---- mem ----------------------------------------------------------------------------------------

MEMINFO_FIELDS = {  # Telegraf field -> /proc/meminfo key
    "total": "MemTotal",
    "free": "MemFree",
    "available": "MemAvailable",
    "buffered": "Buffers",
    "active": "Active",
    "inactive": "Inactive",
    "shared": "Shmem",
    "slab": "Slab",
    "sreclaimable": "SReclaimable",
    "sunreclaim": "SUnreclaim",
    "dirty": "Dirty",
    "write_back": "Writeback",
    "mapped": "Mapped",
    "page_tables": "PageTables",
    "commit_limit": "CommitLimit",
    "committed_as": "Committed_AS",
    "swap_total": "SwapTotal",
    "swap_free": "SwapFree",
    "swap_cached": "SwapCached",
    "vmalloc_total": "VmallocTotal",
    "vmalloc_used": "VmallocUsed",
    "huge_pages_total": "HugePages_Total",
    "huge_pages_free": "HugePages_Free",
    "huge_page_size": "Hugepagesize",
}
UNITLESS = {"HugePages_Total", "HugePages_Free"}


def read_meminfo(proc: str = PROC) -> dict[str, int]:
    out = {}
    for line in _read(f"{proc}/meminfo").splitlines():
        key, _, rest = line.partition(":")
        words = rest.split()
        if words:
            out[key.strip()] = int(words[0]) * (1024 if len(words) > 1 and words[1] == "kB" else 1)
    return out


def mem_points(proc: str = PROC) -> list[Point]:
    info = read_meminfo(proc)
    fields: dict[str, int | float] = {name: info[key] for name, key in MEMINFO_FIELDS.items() if key in info}
    total = info.get("MemTotal", 0)
    cached = info.get("Cached", 0) + info.get("SReclaimable", 0)
    fields["cached"] = cached
    fields["used"] = total - info.get("MemFree", 0) - info.get("Buffers", 0) - cached
    fields.setdefault("available", info.get("MemFree", 0) + cached)  # kernels before 3.14
    if total:
        fields["used_percent"] = 100.0 * fields["used"] / total
        fields["available_percent"] = 100.0 * fields["available"] / total
    return [Point("mem", {}, fields)]


# ---- system -------------------------------------------------------------------------------------

UTMP_RECORD = struct.Struct("hi32s4s32s256shhiii4i20s")  # glibc struct utmp, 384 bytes
USER_PROCESS = 7


def count_users(path: str = "/var/run/utmp") -> int | None:
    try:
        data = open(path, "rb").read()
    except OSError:
        return None
    size = UTMP_RECORD.size
    return sum(1 for i in range(0, len(data) - size + 1, size) if UTMP_RECORD.unpack_from(data, i)[0] == USER_PROCESS)


def format_uptime(seconds: int) -> str:
    """Telegraf's uptime_format: `5 days, 3:04`, ` 3:04`."""
    days, minutes = seconds // 86400, seconds // 60
    prefix = f"{days} day{'s' if days > 1 else ''}, " if days else ""
    return f"{prefix}{minutes // 60 % 24:2d}:{minutes % 60:02d}"


def system_points(proc: str = PROC, utmp: str = "/var/run/utmp") -> list[Point]:
    load = _read(f"{proc}/loadavg").split()
    uptime = int(float(_read(f"{proc}/uptime").split()[0]))
    fields: dict[str, int | float | str] = {
        "load1": float(load[0]),
        "load5": float(load[1]),
        "load15": float(load[2]),
        "n_cpus": os.cpu_count() or 0,
        "uptime": uptime,
        "uptime_format": format_uptime(uptime),
    }
    users = count_users(utmp)
    if users is not None:
        fields["n_users"] = users
    return [Point("system", {}, fields)]


# ---- disk ---------------------------------------------------------------------------------------


def _unescape_mount(text: str) -> str:
    """/proc/mounts writes space, tab, newline and backslash in octal (\\040)."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        text = text.replace(code, char)
    return text


def read_mounts(proc: str = PROC) -> list[tuple[str, str, str, str]]:
    """(device, mount point, fstype, options) from /proc/self/mounts."""
    mounts = []
    for line in _read(f"{proc}/self/mounts").splitlines():
        words = line.split()
        if len(words) >= 4:
            mounts.append((_unescape_mount(words[0]), _unescape_mount(words[1]), words[2], words[3]))
    return mounts


def disk_points(
    ignore_fs: tuple[str, ...] | list[str] | None = None,
    mount_points: list[str] | None = None,
    proc: str = PROC,
    statvfs: Callable[[str], os.statvfs_result] = os.statvfs,
) -> list[Point]:
    ignored = set(DEFAULT_IGNORE_FS if ignore_fs is None else ignore_fs)
    points = []
    for device, path, fstype, options in read_mounts(proc):
        if fstype in ignored or (mount_points and path not in mount_points):
            continue
        try:
            st = statvfs(path)
        except OSError:
            continue
        total = st.f_blocks * st.f_frsize
        if total == 0:  # Telegraf: "Skip dummy filesystem (procfs, cgroupfs, ...)"
            continue
        free = st.f_bavail * st.f_frsize
        used = (st.f_blocks - st.f_bfree) * st.f_frsize
        inodes_used = st.f_files - st.f_ffree
        points.append(
            Point(
                "disk",
                {
                    "path": path,
                    "device": device.removeprefix("/dev/"),
                    "fstype": fstype,
                    "mode": "ro" if "ro" in options.split(",") else "rw",
                },
                {
                    "total": total,
                    "free": free,
                    "used": used,
                    "used_percent": 100.0 * used / (used + free) if used + free else 0.0,
                    "inodes_total": st.f_files,
                    "inodes_free": st.f_ffree,
                    "inodes_used": inodes_used,
                },
            )
        )
    return points


# ---- net ----------------------------------------------------------------------------------------

IFF_UP, IFF_LOOPBACK = 0x1, 0x8
NET_DEV_FIELDS = (
    "bytes_recv",
    "packets_recv",
    "err_in",
    "drop_in",
    None,
    None,
    None,
    None,
    "bytes_sent",
    "packets_sent",
    "err_out",
    "drop_out",
)


def _interface_flags(name: str, sys_net: str) -> int | None:
    try:
        return int(_read(f"{sys_net}/{name}/flags").strip(), 16)
    except (OSError, ValueError):
        return None


def net_points(interfaces: list[str] | None = None, proc: str = PROC, sys_net: str = "/sys/class/net") -> list[Point]:
    points = []
    for line in _read(f"{proc}/net/dev").splitlines()[2:]:
        name, _, counters = line.partition(":")
        name = name.strip()
        if interfaces:
            if not any(fnmatch.fnmatchcase(name, pattern) for pattern in interfaces):
                continue
        else:
            flags = _interface_flags(name, sys_net)
            if flags is None or flags & IFF_LOOPBACK or not flags & IFF_UP:
                continue
        values = counters.split()
        points.append(Point("net", {"interface": name}, {key: int(v) for key, v in zip(NET_DEV_FIELDS, values) if key}))
    return points


# ---- processes ------------------------------------------------------------------------------------

STATE_FIELDS = {
    "R": "running",
    "S": "sleeping",
    "D": "blocked",
    "Z": "zombies",
    "X": "dead",
    "T": "stopped",
    "t": "stopped",
    "W": "paging",
    "I": "idle",
    "P": "parked",
}


def processes_points(proc: str = PROC) -> list[Point]:
    fields = dict.fromkeys(
        (
            "blocked",
            "zombies",
            "stopped",
            "running",
            "sleeping",
            "total",
            "unknown",
            "dead",
            "paging",
            "total_threads",
            "idle",
        ),
        0,
    )
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        try:
            data = _read(f"{entry.path}/stat")
        except OSError:  # the process ended meanwhile
            continue
        stats = data[data.rfind(")") + 2 :].split()
        if len(stats) < 18:
            continue
        state = STATE_FIELDS.get(stats[0][0], "unknown")
        fields[state] = fields.get(state, 0) + 1
        fields["total"] += 1
        fields["total_threads"] += int(stats[17])
    return [Point("processes", {}, fields)]
