"""`hal-provision health deep`: NVIDIA DCGM's active diagnostic on nodes taken out of service,
the Slurm side of it, pure (the CLI runs the commands; the acceptance tests run them on a
real slurmctld).

The steps, each a command this module writes or a text it reads:

1. a maintenance reservation on the nodes (`reservation_command`): Flags=MAINT,IGNORE_JOBS,
   Users=root, StartTime=now. IGNORE_JOBS lets it be created over running jobs, which keep
   running (a reservation never cancels a job); from then on no other user's job starts there;
2. wait until the nodes run no job (`jobs_command`, `parse_jobs`, `wait_for_idle`);
3. `dcgmi diag -r LEVEL --json` on each node (`diag_command`), read by `parse_diag`;
4. drain each node with a failed test (`drain_reason`, `drain_command`), with the prefix
   "hal-deep": not the health check's, so the periodic check, which resumes only its own
   drains, never lifts it; an admin resumes the node after the GPU is looked at;
5. the reservation deleted (`delete_command`), also after an error or Ctrl-C (`run_deep`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable

from .hostlist import expand, fold

PREFIX = "hal-deep"
REASON_MAX = 120  # as the health check: sinfo shows about this much
LEVELS = (1, 2, 3, 4)
# Minutes one level's diagnostic takes at most (NVIDIA: level 2 about 2 min, 3 about 15 min,
# 4 longer), with room: the reservation lasts the wait plus this, and is deleted sooner.
DIAG_MINUTES = {1: 10, 2: 20, 3: 60, 4: 180}
ACTIVE_STATES = "RUNNING,SUSPENDED,COMPLETING,CONFIGURING"
FAILED = ("Fail",)


class DeepError(RuntimeError):
    """What stops the run: a command that failed, a wait that ran out."""


def reservation_name(now: datetime) -> str:
    return f"{PREFIX}-{now:%Y%m%dT%H%M%S}"


def reservation_command(name: str, hosts: list[str], minutes: int) -> list[str]:
    """scontrol's argv creating the maintenance reservation on `hosts` for `minutes`."""
    return [
        "scontrol",
        "create",
        "reservation",
        f"ReservationName={name}",
        f"Nodes={fold(hosts)}",
        "StartTime=now",
        f"Duration={minutes}",
        "Users=root",
        "Flags=MAINT,IGNORE_JOBS",
    ]


def delete_command(name: str) -> list[str]:
    return ["scontrol", "delete", f"ReservationName={name}"]


def jobs_command(hosts: list[str]) -> list[str]:
    """squeue's argv listing the jobs that still hold `hosts`: id|user|nodes|time left."""
    return ["squeue", "--noheader", f"--nodelist={fold(hosts)}", f"--states={ACTIVE_STATES}", "--format=%i|%u|%N|%L"]


@dataclass(frozen=True)
class Job:
    job_id: str
    user: str
    nodes: str
    time_left: str


def parse_jobs(text: str) -> list[Job]:
    jobs = []
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 4:
            jobs.append(Job(*parts))
    return jobs


def wait_for_idle(
    run: Callable[[list[str]], str],
    hosts: list[str],
    show: Callable[[str], None],
    max_wait_s: float,
    poll_s: float = 30.0,
    sleep=time.sleep,
    clock=time.monotonic,
) -> None:
    """Poll squeue until no job holds `hosts`, showing what it waits for; DeepError after
    `max_wait_s` (0: no limit)."""
    start = clock()
    while True:
        jobs = parse_jobs(run(jobs_command(hosts)))
        if not jobs:
            return
        waited = clock() - start
        if max_wait_s and waited >= max_wait_s:
            raise DeepError(
                f"jobs still running on {fold(hosts)} after {waited / 60:.0f} min: " + ", ".join(j.job_id for j in jobs)
            )
        show(
            f"waiting for {len(jobs)} job{'s' if len(jobs) > 1 else ''} to end: "
            + "; ".join(f"{j.job_id} ({j.user}) on {j.nodes}, {j.time_left} left" for j in jobs)
        )
        sleep(poll_s)


def diag_command(level: int) -> list[str]:
    return ["dcgmi", "diag", "-r", str(level), "--json"]


@dataclass(frozen=True)
class DiagResult:
    test: str
    gpu: int | None  # None: the test's summary, no GPU named
    status: str  # Pass, Fail, Warn, Skip
    message: str


def _messages(entry: dict) -> str:
    return "; ".join(
        w.get("warning", "").strip() for w in entry.get("warnings") or [] if isinstance(w, dict) and w.get("warning")
    ).replace("\n", " ")


def parse_diag(text: str) -> list[DiagResult]:
    """The per-test, per-GPU results of `dcgmi diag --json` (DCGM 4: dcgmi/Diag.cpp's
    "DCGM Diagnostic".test_categories[].tests[] {name, results[] {entity_group, entity_id,
    status, warnings[] {warning, error_id, ...}}, test_summary}; DCGM 3 names the GPU gpu_id or
    gpu_ids). A test whose summary failed without a failed GPU result gives one GPU-less row.
    DeepError when the text holds no diagnostic (dcgmi's runtime_error, or not JSON)."""
    start = text.find("{")
    try:
        doc = json.JSONDecoder().raw_decode(text, start)[0] if start >= 0 else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise DeepError(f"not the JSON of dcgmi diag: {text.strip()[:120] or 'no output'}")
    diag = next(
        (v for v in doc.values() if isinstance(v, dict) and ("test_categories" in v or "runtime_error" in v)), None
    )
    if diag is None:
        raise DeepError("no test_categories in dcgmi diag's JSON")
    if diag.get("runtime_error"):
        raise DeepError(f"dcgmi diag: {diag['runtime_error']}")
    out: list[DiagResult] = []
    for category in diag.get("test_categories") or []:
        for test in category.get("tests") or []:
            name = test.get("name", "?")
            rows = []
            for r in test.get("results") or []:
                if r.get("entity_group", "GPU") != "GPU":
                    continue
                ids = r.get("entity_id", r.get("gpu_id", r.get("gpu_ids")))
                for gpu in str(ids).split(",") if ids is not None and str(ids) != "" else [None]:
                    rows.append(
                        DiagResult(name, int(gpu) if gpu is not None else None, r.get("status", "?"), _messages(r))
                    )
            summary = test.get("test_summary") or {}
            if summary.get("status") in FAILED and not any(r.status in FAILED for r in rows):
                rows.append(DiagResult(name, None, summary["status"], _messages(summary)))
            out += rows
    return out


def failures(results: list[DiagResult]) -> list[DiagResult]:
    return [r for r in results if r.status in FAILED]


def drain_reason(level: int, failed: list[DiagResult]) -> str:
    """'hal-deep: dcgm diag -r N: <test> failed on GPU i: <message> (+k more)'."""
    first = failed[0]
    where = f"GPU {first.gpu}" if first.gpu is not None else "the node"
    more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
    text = f"{PREFIX}: dcgm diag -r {level}: {first.test} failed on {where}: {first.message or 'no message'}"
    text = " ".join(text.split())
    return text[: REASON_MAX - len(more)] + more


def drain_command(host: str, reason: str) -> list[str]:
    return ["scontrol", "update", f"NodeName={host}", "State=DRAIN", f"Reason={reason}"]


@dataclass
class NodeReport:
    host: str
    results: list[DiagResult] = field(default_factory=list)
    error: str | None = None  # no result: dcgmi missing, the node did not answer, unreadable output
    drained: str | None = None  # the reason it was drained with

    @property
    def passed(self) -> bool:
        return self.error is None and not failures(self.results)


@dataclass
class Report:
    level: int
    reservation: str
    nodes: list[NodeReport]

    @property
    def passed(self) -> bool:
        return all(n.passed for n in self.nodes)


def run_deep(
    controller: Callable[[list[str]], str],
    diag: Callable[[list[str], list[str]], dict[str, str | None]],
    hosts: list[str],
    level: int,
    show: Callable[[str], None],
    max_wait_s: float = 0,
    poll_s: float = 30.0,
    now: datetime | None = None,
    sleep=time.sleep,
) -> Report:
    """The whole run. `controller(argv)`: stdout of a Slurm command on the controller (raises on
    failure); `diag(argv, hosts)`: host -> stdout of the diagnostic there (None: no answer).
    The reservation is deleted whatever happens after it was made."""
    if level not in LEVELS:
        raise ValueError(f"level {level}: DCGM's levels are {', '.join(map(str, LEVELS))}")
    hosts = expand(fold(hosts))
    name = reservation_name(now or datetime.now())
    minutes = int(max_wait_s // 60) + DIAG_MINUTES[level]
    controller(reservation_command(name, hosts, minutes))
    show(f"reservation {name} on {fold(hosts)} (Flags=MAINT,IGNORE_JOBS, {minutes} min)")
    try:
        wait_for_idle(controller, hosts, show, max_wait_s, poll_s, sleep)
        show(f"running dcgmi diag -r {level} on {fold(hosts)}")
        outputs = diag(diag_command(level), hosts)
        report = Report(level, name, [])
        for host in hosts:
            node = NodeReport(host)
            text = outputs.get(host)
            if text is None:
                node.error = "no answer (dcgmi missing or the node unreachable)"
            else:
                try:
                    node.results = parse_diag(text)
                except DeepError as exc:
                    node.error = str(exc)
            failed = failures(node.results)
            if failed:
                node.drained = drain_reason(level, failed)
                controller(drain_command(host, node.drained))
            report.nodes.append(node)
        return report
    finally:
        controller(delete_command(name))
        show(f"reservation {name} deleted")
