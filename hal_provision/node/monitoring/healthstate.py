"""The `health` collector: the node health check's last result, for alerts and dashboards.

hal-healthcheck (hal_provision/node/health/healthcheck.py), which slurmd runs every
HealthCheckInterval, keeps its last result in /run/hal-healthcheck/last.json:

    {"time": 1700000000, "host": "hal01", "results": {"cpus": [], "gpus": ["/dev/nvidia3 missing"]},
     "reason": "hal-healthcheck: gpus: /dev/nvidia3 missing"}

(`reason` is the drain reason the failures asked for, null when every check passed.) This
collector reads it and prints, per check, whether it failed, and when the check ran and
whether it asked for a drain:

    hal_healthcheck,check=gpus failed=1i
    hal_healthcheck_run drain=1i,time=1700000000i

Reading the file rather than running the checks keeps a second, unsynchronised run of the
checks (and of their nvidia-smi and dcgmi calls) off the node, and reports what Slurm acted on.
No file yet (the check has not run since boot: /run is a tmpfs) prints nothing and exits 0.

    python3 -m hal_monitoring health [--state FILE]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Callable, TypeVar

from .commands import CollectorError, emit
from .lineprotocol import Point

# hal-healthcheck's STATE_DIR/last.json (the health check is installed apart from this package).
STATE = "/run/hal-healthcheck/last.json"
T = TypeVar("T")


def points(record: object) -> list[Point]:
    """The lines of one last.json record; CollectorError when it is not one."""
    if not isinstance(record, dict):
        raise CollectorError("not a health check record (a JSON object)")
    results, ran, reason = record.get("results"), record.get("time"), record.get("reason")
    if not isinstance(results, dict) or not all(isinstance(p, list) for p in results.values()):
        raise CollectorError("results: not an object of check -> problems")
    if isinstance(ran, bool) or not isinstance(ran, (int, float)):
        raise CollectorError(f"time: {ran!r} is not a Unix time")
    checks = [
        Point("hal_healthcheck", {"check": name}, {"failed": int(bool(problems))})
        for name, problems in sorted(results.items())
    ]
    return [*checks, Point("hal_healthcheck_run", {}, {"time": int(ran), "drain": int(reason is not None)})]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="hal_monitoring health",
        description="Print the node health check's last result as InfluxDB line protocol "
        "(hal_healthcheck, hal_healthcheck_run).",
    )
    parser.add_argument("--state", default=STATE, help=f"the health check's last result (default {STATE})")
    args = parser.parse_args(argv)
    found = read_record(args.state, points)
    if found is not None:  # None: the health check has not run yet, nothing to report
        stamp = time.time_ns()
        emit([p.format(stamp) for p in found])
    return 0


def read_record(path: str, read: Callable[[object], T]) -> T | None:
    """`read` applied to the JSON record another program keeps at `path` (written atomically,
    so never half-written); None when there is none yet. A record that is not JSON or that
    `read` refuses is a CollectorError naming the file."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    try:
        record = json.loads(text)
    except ValueError as exc:
        raise CollectorError(f"{path}: not JSON ({exc})") from None
    try:
        return read(record)
    except CollectorError as exc:
        raise CollectorError(f"{path}: {exc}") from None
