"""The `pull` collector: a pull node's last converge, for alerts and dashboards.

hal-converge (hal_provision/node/converge.py) writes each run's result atomically to the
version_file /etc/hal-provision/deploy.json names:

    {"host", "version", "previous", "state", "changed", "failed_task", "drained",
     "serial", "expires", "image", "started", "finished", "seconds"}

with state one of current, changed, failed, waiting, refused, unreachable-source, `finished`
as ISO 8601 UTC text (`2024-05-01T10:00:03Z`) and `seconds` the run's length. This collector
prints one line:

    hal_converge,state=changed changed=1i,drift=0i,failed=0i,finished=1714557603i,seconds=41.2

failed: the run failed (failed, refused, unreachable-source; `waiting` for jobs is not a
failure); changed: the run changed the node; drift: it changed the node although the release
was the one the node already had (`version` == `previous`): the node had been changed by hand
since, and the converge put it back. `finished` is in Unix seconds whatever form the record
has it in, and `seconds` is always a float (InfluxDB fixes a field's type on first write).
No record yet (the node never converged) prints nothing and exits 0.

    python3 -m hal_monitoring pull [--deploy FILE] [--record FILE]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import time

from .commands import CollectorError, emit
from .healthstate import read_record
from .lineprotocol import Point

DEPLOY = "/etc/hal-provision/deploy.json"
# converge.py's states that mean the node did not reach the published release.
FAILED = ("failed", "refused", "unreachable-source")


def epoch_seconds(value: object) -> int:
    """A Unix time from an epoch number or ISO 8601 text (UTC when it names no zone)."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a time")
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str):
        try:
            return int(float(value))
        except ValueError:
            pass
        moment = dt.datetime.fromisoformat(value.strip())  # 3.11 reads a trailing Z
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=dt.timezone.utc)
        return int(moment.timestamp())
    raise ValueError(f"{value!r} is not a time")


def point(record: object) -> Point:
    """The line of one converge record; CollectorError when it is not one."""
    if not isinstance(record, dict):
        raise CollectorError("not a converge record (a JSON object)")
    state = record.get("state")
    if not isinstance(state, str) or not state:
        raise CollectorError(f"state: {state!r} is not a converge state")
    try:
        finished = epoch_seconds(record.get("finished"))
    except ValueError:
        raise CollectorError(f"finished: {record.get('finished')!r} is not a time") from None
    seconds = record.get("seconds")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise CollectorError(f"seconds: {seconds!r} is not a number")
    changed = state == "changed"
    return Point(
        "hal_converge",
        {"state": state},
        {
            "finished": finished,
            "seconds": float(seconds),
            "failed": int(state in FAILED),
            "changed": int(changed),
            "drift": int(changed and record.get("version") == record.get("previous")),
        },
    )


def record_path(deploy: str) -> str:
    """deploy.json's version_file."""
    try:
        with open(deploy, encoding="utf-8") as f:
            doc = json.load(f)
    except ValueError as exc:
        raise CollectorError(f"{deploy}: not JSON ({exc})") from None
    path = doc.get("version_file") if isinstance(doc, dict) else None
    if not isinstance(path, str) or not path:
        raise CollectorError(f"{deploy}: no version_file")
    return path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="hal_monitoring pull",
        description="Print this pull node's last converge as InfluxDB line protocol (hal_converge).",
    )
    parser.add_argument(
        "--deploy", default=DEPLOY, help=f"the rendered deploy.json naming the record (default {DEPLOY})"
    )
    parser.add_argument("--record", help="the converge record itself (default: deploy.json's version_file)")
    args = parser.parse_args(argv)
    found = read_record(args.record or record_path(args.deploy), point)
    if found is not None:  # None: never converged yet, nothing to report
        emit([found.format(time.time_ns())])
    return 0
