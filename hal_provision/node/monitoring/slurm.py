"""The Slurm collector: jobs per partition, user and account, running jobs, node states, daemons up.

Runs on the slurmctld host alone (a second copy would count every job twice), as the
unprivileged telegraf user: it only reads, through Slurm's own commands with parseable
output (checked against the Slurm 22.05 sources and man pages, the version Debian 12 ships):

    squeue --noheader --all --array
           --Format=JobID:|,Partition:|,UserName:|,Account:|,State:|,NumCPUs:|,NumNodes:|,TimeUsed:|,tres-alloc:|,Name:
    scontrol --all --oneliner show node

`--Format=Field:|` gives a field width of 0, which squeue prints in full with `|` after it
(never cut, never padded); the job name comes last so a `|` in a name cannot shift a column.
`--array` prints one line per array task, so pending arrays count as the jobs they are;
`--all` includes hidden partitions. `tres-alloc` is the TRES allocated to a running job and
the TRES requested by a pending one. No `--states`: squeue matches a listed state against the
job's whole state, flags included, so `--states=RUNNING,PENDING` would hide a running job in
CONFIGURING (its prolog runs; HAL's PrologFlags=Contain implies Alloc) or a pending one in
REQUEUE_HOLD; the default list (pending, running, suspended, completing) is read and each
State name classified (RUNNING_STATES, PENDING_STATES; the rest are left out).
`scontrol --oneliner` prints one `Key=Value ...` line per node with the complete state (base
state and +FLAGS) and the configured and allocated TRES; `--all` includes nodes of hidden
partitions.

Measurements (all lines of one run share one timestamp, so sums per time bucket are exact):
    slurm_jobs,partition,user,account,state=running|pending  jobs,gpus,cpus,nodes
    slurm_job,job_id,partition,user,account                  gpus,cpus,nodes,run_seconds,name
    slurm_node,node,state                                    up,down,drained,gpus_total,gpus_alloc,
                                                             cpus_total,cpus_alloc[,reason]
    slurm_daemons,daemon=slurmctld|slurmdbd                  up

slurm_daemons says which daemons answered. slurmctld's line (up=1) comes with every run that
read squeue and scontrol; when slurmctld does not answer, the collector fails as a whole (exit
1, no lines) and the runner reports that (Telegraf's log, the textfile runner's
hal_collector_success 0), so a missing series, never up=0, is how slurmctld being down shows.
With --slurmdbd the collector also asks slurmdbd, through

    sacctmgr -n -P show cluster format=cluster

(any user may list the clusters; sacctmgr exits non-zero when it cannot reach slurmdbd), and
prints slurmdbd's line, up=1 when sacctmgr succeeded in time and up=0 otherwise: accounting
down does not stop the job and node figures, and it is a state worth an alert of its own.

GPU counts come from TRES (`gres/gpu=4`), which needs `AccountingStorageTRES=gres/gpu` in
slurm.conf (HAL's sets it); for nodes, the Gres and GresUsed strings are the fallback.
A node's state tag is the name sinfo shows (idle, mixed, allocated, drained, draining,
completing, down, fail, ...) without sinfo's suffix; `down` is 1 when the base state is
DOWN, FUTURE or ERROR, or the node has FAIL, NOT_RESPONDING or INVALID_REG; `drained` is 1
when DRAIN is set on a node that is not down; `up` otherwise. If slurm.conf sets
PrivateData=jobs or nodes, the telegraf user sees only part of the cluster.
"""

from __future__ import annotations

import argparse
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .commands import CollectorError, emit, run_command
from .lineprotocol import Point

SQUEUE_FIELDS = (
    "JobID",
    "Partition",
    "UserName",
    "Account",
    "State",
    "NumCPUs",
    "NumNodes",
    "TimeUsed",
    "tres-alloc",
    "Name",
)
SQUEUE = (
    "squeue",
    "--noheader",
    "--all",
    "--array",
    "--Format=" + ",".join(f"{name}:|" for name in SQUEUE_FIELDS[:-1]) + f",{SQUEUE_FIELDS[-1]}:",
)
SCONTROL_NODES = ("scontrol", "--all", "--oneliner", "show", "node")
SACCTMGR_CLUSTERS = ("sacctmgr", "-n", "-P", "show", "cluster", "format=cluster")
COMMANDS = {"squeue": SQUEUE, "scontrol-show-node": SCONTROL_NODES}  # fixture prefix -> command

# squeue's State column prints a job's flag rather than its base state when one is set
# (job_state_string); the flags of jobs that hold their allocation count as running, those of
# jobs waiting for one as pending. SUSPENDED, COMPLETING and STAGE_OUT jobs are neither.
RUNNING_STATES = {"RUNNING", "CONFIGURING", "RESIZING", "SIGNALING", "STOPPED"}
PENDING_STATES = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SPECIAL_EXIT", "RESV_DEL_HOLD"}
DOWN_BASES = {"DOWN", "FUTURE", "ERROR"}
DOWN_FLAGS = {"FAIL", "NOT_RESPONDING", "INVALID_REG"}
BUSY_BASES = {"ALLOCATED", "MIXED"}
MISSING = "(null)"  # what Slurm prints for an unset account or user


# ---- GPU counts from TRES and GRES strings --------------------------------------------------


def _split_outside_parens(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "(":
            depth += 1
        elif c == ")":
            depth = max(0, depth - 1)
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _count(text: str) -> int:
    """A GRES count: digits with an optional K/M/G/T/P suffix (powers of 1024, as Slurm)."""
    m = re.fullmatch(r"(\d+)([KMGTP]?)", text.strip(), re.IGNORECASE)
    if not m:
        raise ValueError(f"{text!r} is not a count")
    return int(m.group(1)) * 1024 ** " KMGTP".index((m.group(2) or " ").upper())


def tres_dict(text: str | None) -> dict[str, str]:
    """`cpu=8,mem=64G,node=1,gres/gpu=2` -> {'cpu': '8', ...}; empty for '', 'N/A', '(null)'."""
    out: dict[str, str] = {}
    for item in (text or "").split(","):
        key, sep, value = item.strip().partition("=")
        if sep and key:
            out[key] = value
    return out


def tres_gpus(text: str | None) -> int | None:
    """GPUs in a TRES string; None when it tracks no GPU at all. The untyped `gres/gpu` is the
    total; without it, the typed ones (`gres/gpu:v100=4`) are summed."""
    tres = tres_dict(text)
    if "gres/gpu" in tres:
        return _count(tres["gres/gpu"])
    typed = [_count(v) for k, v in tres.items() if k.startswith("gres/gpu:")]
    return sum(typed) if typed else None


def gres_gpus(text: str | None) -> int:
    """GPUs in a GRES string: `gpu:v100:4(S:0-1)`, `gpu:4`, `gres:gpu:2`, `gres/gpu:2`,
    `gpu:v100:2(IDX:0,2),mps:100`, `(null)`."""
    total = 0
    for item in _split_outside_parens(text or ""):
        item = item.split("(", 1)[0]
        for prefix in ("gres:", "gres/"):
            if item.startswith(prefix):
                item = item[len(prefix) :]
        parts = item.split(":")
        if parts[0] != "gpu":
            continue
        try:
            total += _count(parts[-1]) if len(parts) > 1 else 1
        except ValueError:
            if len(parts) == 2:  # "gpu:v100" names a type and means one of it
                total += 1
            else:
                raise
    return total


def run_seconds(text: str) -> int:
    """squeue's TimeUsed, `[days-][hours:]minutes:seconds`; 0 for INVALID or N/A."""
    text = text.strip()
    m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", text)
    if not m:
        if text in ("INVALID", "N/A", "", "UNLIMITED"):
            return 0
        raise ValueError(f"{text!r} is not a time")
    days, hours, minutes, seconds = (int(g) if g else 0 for g in m.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


# ---- squeue -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    job_id: str
    partition: str
    user: str
    account: str
    state: str  # running | pending | Slurm's name for any other, lowercased
    cpus: int
    nodes: int
    run_seconds: int
    gpus: int
    name: str


def _tag(value: str) -> str:
    value = value.strip()
    return value if value else MISSING


def parse_squeue(text: str) -> list[Job]:
    jobs = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("|", len(SQUEUE_FIELDS) - 1)
        if len(parts) != len(SQUEUE_FIELDS):
            raise CollectorError(f"squeue line {number}: expected {len(SQUEUE_FIELDS)} fields, got {line!r}")
        job_id, partition, user, account, state, cpus, nodes, used, tres, name = parts
        state = state.strip().upper()
        state = "running" if state in RUNNING_STATES else "pending" if state in PENDING_STATES else state.lower()
        try:
            jobs.append(
                Job(
                    job_id.strip(),
                    _tag(partition),
                    _tag(user),
                    _tag(account),
                    state,
                    int(cpus),
                    int(nodes),
                    run_seconds(used),
                    tres_gpus(tres) or 0,
                    name,
                )
            )
        except ValueError as exc:
            raise CollectorError(f"squeue line {number}: {exc}") from None
    return jobs


def job_points(jobs: list[Job]) -> list[Point]:
    totals: dict[tuple[str, str, str, str], list[int]] = {}
    points = []
    for job in jobs:
        if job.state not in ("running", "pending"):
            continue
        sums = totals.setdefault((job.partition, job.user, job.account, job.state), [0, 0, 0, 0])
        for i, value in enumerate((1, job.gpus, job.cpus, job.nodes)):
            sums[i] += value
        if job.state == "running":
            points.append(
                Point(
                    "slurm_job",
                    {"job_id": job.job_id, "partition": job.partition, "user": job.user, "account": job.account},
                    {
                        "gpus": job.gpus,
                        "cpus": job.cpus,
                        "nodes": job.nodes,
                        "run_seconds": job.run_seconds,
                        "name": job.name,
                    },
                )
            )
    summary = [
        Point(
            "slurm_jobs",
            {"partition": p, "user": u, "account": a, "state": s},
            {"jobs": n, "gpus": g, "cpus": c, "nodes": k},
        )
        for (p, u, a, s), (n, g, c, k) in sorted(totals.items())
    ]
    return summary + points


# ---- scontrol show node -------------------------------------------------------------------------

_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_]*)=")


FREE_TEXT_KEYS = ("Reason", "Comment", "Extra")  # printed last, in this order, and may hold `word=`


def parse_key_values(line: str) -> dict[str, str]:
    """One `scontrol --oneliner` record. Values may hold spaces (OS=, Reason=). Once a free-text
    key (Reason, Comment, Extra) has begun, only a later free-text key ends it, so a `State=` in
    a reason is text; and the first occurrence of a key wins."""
    found, in_text = [], -1
    for m in _KEY.finditer(line):
        if m.group(1) in FREE_TEXT_KEYS[in_text + 1 :]:
            in_text = FREE_TEXT_KEYS.index(m.group(1))
        elif in_text >= 0:
            continue
        found.append(m)
    out: dict[str, str] = {}
    for m, nxt in zip(found, found[1:] + [None]):
        value = line[m.end() : nxt.start() if nxt else len(line)].strip()
        out.setdefault(m.group(1), value)
    return out


@dataclass(frozen=True)
class NodeState:
    base: str
    flags: frozenset[str]
    not_responding: bool

    @classmethod
    def parse(cls, text: str) -> "NodeState":
        """scontrol's `MIXED+DRAIN`, `DOWN+NOT_RESPONDING`; a sinfo-style suffix (`DOWN*`) is
        read too."""
        base, *flags = text.strip().upper().split("+")
        suffix = re.search(r"[*~#!%$@^-]+$", base)
        marks = suffix.group(0) if suffix else ""
        base = base[: len(base) - len(marks)]
        return cls(base, frozenset(flags), "*" in marks or "NOT_RESPONDING" in flags)

    @property
    def down(self) -> bool:
        return self.base in DOWN_BASES or self.not_responding or bool(self.flags & DOWN_FLAGS)

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.flags and not self.down

    @property
    def name(self) -> str:
        """The state as sinfo names it (Slurm 22.05's node_state_string), without suffix."""
        f, base = self.flags, self.base
        busy = base in BUSY_BASES or "COMPLETING" in f
        if "INVALID_REG" in f:
            return "inval"
        if "MAINTENANCE" in f and "DRAIN" not in f and base not in BUSY_BASES | {"DOWN"}:
            return "maint"
        if f & {"REBOOT_REQUESTED", "REBOOT_ISSUED"} and base not in BUSY_BASES:
            return "reboot"
        if "DRAIN" in f:
            return "draining" if busy else "drained"
        if "FAIL" in f:
            return "failing" if base == "ALLOCATED" or "COMPLETING" in f else "fail"
        if base in ("DOWN", "ALLOCATED"):
            return base.lower()
        if "COMPLETING" in f:
            return "completing"
        return base.lower() or "unknown"


@dataclass(frozen=True)
class Node:
    name: str
    state: NodeState
    cpus_total: int
    cpus_alloc: int
    gpus_total: int
    gpus_alloc: int
    reason: str


def _int(record: dict[str, str], key: str) -> int:
    try:
        return int(record.get(key, "0") or 0)
    except ValueError:
        raise CollectorError(f"node {record.get('NodeName')}: {key}={record[key]!r} is not a number") from None


def parse_scontrol_nodes(text: str) -> list[Node]:
    nodes = []
    for line in text.splitlines():
        if not line.strip():
            continue
        record = parse_key_values(line)
        if "NodeName" not in record or "State" not in record:
            raise CollectorError(f"scontrol: no NodeName/State in {line[:80]!r}")
        cfg, alloc = tres_gpus(record.get("CfgTRES")), tres_gpus(record.get("AllocTRES"))
        if cfg is not None:  # GPUs are tracked TRES: AllocTRES omits them when none is in use
            gpus_total, gpus_alloc = cfg, alloc or 0
        else:
            gpus_total, gpus_alloc = gres_gpus(record.get("Gres")), gres_gpus(record.get("GresUsed"))
        nodes.append(
            Node(
                record["NodeName"],
                NodeState.parse(record["State"]),
                _int(record, "CPUTot"),
                _int(record, "CPUAlloc"),
                gpus_total,
                gpus_alloc,
                record.get("Reason", ""),
            )
        )
    return nodes


def node_points(nodes: list[Node]) -> list[Point]:
    points = []
    for node in nodes:
        s = node.state
        fields = {
            "up": int(not s.down and not s.drained),
            "down": int(s.down),
            "drained": int(s.drained),
            "gpus_total": node.gpus_total,
            "gpus_alloc": node.gpus_alloc,
            "cpus_total": node.cpus_total,
            "cpus_alloc": node.cpus_alloc,
        }
        if node.reason:
            fields["reason"] = node.reason
        points.append(Point("slurm_node", {"node": node.name, "state": s.name}, fields))
    return points


def collect(squeue_text: str, scontrol_text: str) -> list[Point]:
    return job_points(parse_squeue(squeue_text)) + node_points(parse_scontrol_nodes(scontrol_text))


# ---- the daemons --------------------------------------------------------------------------------


def answers(argv: tuple[str, ...], timeout: float) -> bool:
    """Whether the command ran and exited 0 within `timeout` seconds."""
    try:
        run_command(argv, timeout)
    except CollectorError:
        return False
    return True


def daemon_points(slurmdbd_up: bool | None = None) -> list[Point]:
    """slurmctld up (it answered: the caller got its jobs and nodes) and, when it was asked,
    whether slurmdbd answered."""
    points = [Point("slurm_daemons", {"daemon": "slurmctld"}, {"up": 1})]
    if slurmdbd_up is not None:
        points.append(Point("slurm_daemons", {"daemon": "slurmdbd"}, {"up": int(slurmdbd_up)}))
    return points


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="hal_monitoring slurm",
        description="Print Slurm's jobs, nodes and daemons as InfluxDB line protocol "
        "(slurm_jobs, slurm_job, slurm_node, slurm_daemons).",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=7.0,
        help="seconds each Slurm command may take (they run side by side; default 7)",
    )
    parser.add_argument(
        "--slurmdbd",
        action="store_true",
        help="also ask slurmdbd (sacctmgr show cluster) and print whether it answered",
    )
    args = parser.parse_args(argv)
    stamp = time.time_ns()
    with ThreadPoolExecutor(3) as pool:
        squeue = pool.submit(run_command, SQUEUE, args.timeout)
        scontrol = pool.submit(run_command, SCONTROL_NODES, args.timeout)
        slurmdbd = pool.submit(answers, SACCTMGR_CLUSTERS, args.timeout) if args.slurmdbd else None
        points = collect(squeue.result(), scontrol.result())
        points += daemon_points(slurmdbd.result() if slurmdbd else None)
    emit([p.format(stamp) for p in points])
    return 0
