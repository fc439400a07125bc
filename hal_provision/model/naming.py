"""Names derived from the storage model: numbered NSDs and their server order, mount units."""

from __future__ import annotations

import re

from .storage import Nsd


def numbered(prefix: str, count: int) -> list[str]:
    """prefix01, prefix02, ... (at least two digits); just prefix when count is 1."""
    if count == 1:
        return [prefix]
    width = max(2, len(str(count)))
    return [f"{prefix}{i:0{width}d}" for i in range(1, count + 1)]


def nsd_names(run: Nsd) -> list[str]:
    return numbered(run.name, run.count)


def nsd_records(run: Nsd) -> list[tuple[str, str, list[str]]]:
    """(NSD name, device, servers in order) for each NSD of a run.

    With rotate_servers, NSD k starts its server list at server k mod n: the servers take
    turns as primary, so every server carries an equal share of the I/O while all are up.
    """
    n = len(run.servers)
    out = []
    for k, (name, device) in enumerate(zip(nsd_names(run), numbered(run.device, run.count))):
        shift = k % n if run.rotate_servers else 0
        out.append((name, device, run.servers[shift:] + run.servers[:shift]))
    return out


_UNIT_SAFE = re.compile(r"[A-Za-z0-9:_.]")


def mount_unit_name(path: str) -> str:
    """The systemd unit name for a mount point (`systemd-escape --path --suffix=mount`)."""
    trimmed = "/".join(part for part in path.split("/") if part)
    if not trimmed:
        return "-.mount"
    out = []
    for i, ch in enumerate(trimmed):
        if ch == "/":
            out.append("-")
        elif _UNIT_SAFE.match(ch) and not (i == 0 and ch == "."):
            out.append(ch)
        else:
            out.append("".join(f"\\x{b:02x}" for b in ch.encode("utf-8")))
    return "".join(out) + ".mount"
