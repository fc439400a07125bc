"""Storage responsiveness probe: how long listing the home directories and stat-ing a file take.

HAL measured this every 60 s on its shared file system (means of 7 ms and 2 ms): the figures
users feel when a shell prompt or `ls` hangs. One call takes one sample and prints one line of
InfluxDB line protocol, for Telegraf's exec input (interval 60s, data_format "influx"):

    storage_responsiveness,host=hal01,path=/home entries=42i,list_home_ms=6.8,stat_ms=1.9 1700000000000000000

list_home_ms times what `ls -l ROOT` does: read the directory and lstat every entry. stat_ms
times one stat() of --stat FILE (default: ROOT itself). When the file system fails, the line
carries error="..." instead of timings and the exit status is 1 (set Telegraf's
`ignore_error = true` to keep such lines).

Standard library only, so a node can run it without hal-provision installed, alone or as
the storage_responsiveness collector of the hal_monitoring package:
    python3 probe.py /home --stat /home/.probe
    python3 -m hal_monitoring storage_responsiveness /home
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from dataclasses import dataclass
from typing import Callable

MEASUREMENT = "storage_responsiveness"


@dataclass(frozen=True)
class Sample:
    host: str
    path: str
    timestamp_ns: int
    list_ms: float | None = None
    stat_ms: float | None = None
    entries: int | None = None
    error: str | None = None


def measure(
    root: str,
    stat_path: str | None = None,
    host: str | None = None,
    clock: Callable[[], float] = time.perf_counter,
    now_ns: Callable[[], int] = time.time_ns,
) -> Sample:
    """One sample of listing `root` (readdir + lstat of each entry) and stat-ing `stat_path`."""
    host = host or socket.gethostname()
    stamp = now_ns()
    try:
        start = clock()
        entries = 0
        with os.scandir(root) as it:
            for entry in it:
                entry.stat(follow_symlinks=False)
                entries += 1
        listed = clock()
        os.stat(stat_path or root)
        statted = clock()
    except OSError as exc:
        return Sample(host, root, stamp, error=f"{exc.strerror or exc}: {exc.filename or root}")
    return Sample(host, root, stamp, (listed - start) * 1e3, (statted - listed) * 1e3, entries)


def _tag(value: str) -> str:
    """Line-protocol tag value: escape commas, spaces and equals signs."""
    return value.replace("\\", "\\\\").replace(",", "\\,").replace(" ", "\\ ").replace("=", "\\=")


def _string_field(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


def line_protocol(sample: Sample) -> str:
    tags = f"{MEASUREMENT},host={_tag(sample.host)},path={_tag(sample.path)}"
    if sample.error is not None:
        fields = f"error={_string_field(sample.error)}"
    else:
        fields = f"entries={sample.entries}i,list_home_ms={sample.list_ms:.3f},stat_ms={sample.stat_ms:.3f}"
    return f"{tags} {fields} {sample.timestamp_ns}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print one storage responsiveness sample as InfluxDB line protocol.")
    parser.add_argument("root", nargs="+", help="directories to list, e.g. /home (one line each)")
    parser.add_argument("--stat", dest="stat_path", help="file to stat (default: each root itself)")
    parser.add_argument("--host", help="host tag (default: this host's name)")
    args = parser.parse_args(argv)
    status = 0
    for root in args.root:
        sample = measure(root, args.stat_path, args.host)
        print(line_protocol(sample))
        status |= sample.error is not None
    return status


if __name__ == "__main__":
    sys.exit(main())
