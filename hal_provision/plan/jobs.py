"""Jobs and nodes as Slurm reports them: `squeue --json` and `sinfo --json`.

Slurm 22.05 prints data_parser 0.0.38 (tests/data/plan/ holds a real recording): numbers are
plain, `job_state` a string, `nodes` a hostlist. Later versions wrap numbers as
{"set", "infinite", "number"} and states as lists; both read the same here. `--live` runs the
two commands on the first slurmctld host through Ansible, with the inventory the site deploys
with, so no other access to the controller is needed.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .. import tools
from ..hostlist import expand
from .slurm import gpus
from .sources import PlanError

ACTIVE = frozenset({"RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "STAGE_OUT", "SIGNALING"})
NO_VALUE = 0xFFFFFFFE  # Slurm's NO_VAL; INFINITE is NO_VALUE + 1


def _number(value) -> int | None:
    """A Slurm number of either data_parser shape; None when unset or infinite."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value >= NO_VALUE:
        return None
    return int(value)


def _text(value) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return "" if value is None else str(value)


@dataclass(frozen=True)
class Job:
    job_id: int
    user: str
    state: str
    partition: str
    qos: str
    nodes: str  # hostlist of the allocation ('' while pending)
    reason: str  # Slurm's state reason (Resources, Priority, None, ...)
    time_limit: int | None  # minutes; None: none
    node_count: int
    cpus: int
    memory_per_node: int | None  # MB
    memory_per_cpu: int | None  # MB
    gpus_per_node: int
    gpus_per_job: int

    @classmethod
    def from_json(cls, j: dict) -> "Job":
        state = j.get("job_state")
        return cls(
            job_id=_number(j.get("job_id")) or 0,
            user=_text(j.get("user_name")) or str(j.get("user_id", "?")),
            state=(state[0] if isinstance(state, list) and state else _text(state)).upper(),
            partition=_text(j.get("partition")),
            qos=_text(j.get("qos")),
            nodes=_text(j.get("nodes")),
            reason=_text(j.get("state_reason")),
            time_limit=_number(j.get("time_limit")),
            node_count=_number(j.get("node_count")) or 1,
            cpus=_number(j.get("cpus")) or 0,
            memory_per_node=_number(j.get("memory_per_node")),
            memory_per_cpu=_number(j.get("memory_per_cpu")),
            gpus_per_node=gpus(_text(j.get("tres_per_node"))),
            gpus_per_job=gpus(_text(j.get("tres_per_job"))),
        )

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    @property
    def pending(self) -> bool:
        return self.state == "PENDING"

    def hosts(self) -> list[str]:
        return expand(self.nodes) if self.nodes and self.nodes not in ("(null)", "None") else []

    def memory_mb_per_node(self) -> int | None:
        if self.memory_per_node:
            return self.memory_per_node
        if self.memory_per_cpu:
            return self.memory_per_cpu * -(-self.cpus // max(self.node_count, 1))
        return None

    def total_gpus(self) -> int:
        return self.gpus_per_job or self.gpus_per_node * self.node_count


@dataclass(frozen=True)
class NodeState:
    name: str
    state: str  # idle, mixed, allocated, drained+..., as sinfo prints it
    reason: str


def _document(text: str, what: str, key: str) -> list[dict]:
    command = "squeue --json" if key == "jobs" else "sinfo --json"
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise PlanError(
            f"{what} is not JSON ({exc.msg} at line {exc.lineno}): give the saved output of `{command}`"
        ) from None
    if not isinstance(doc, dict) or not isinstance(doc.get(key), list):
        raise PlanError(f"{what} has no '{key}' list: is it the output of `{command}`?")
    return doc[key]


def parse_jobs(text: str, what: str) -> list[Job]:
    try:
        return [Job.from_json(j) for j in _document(text, what, "jobs")]
    except (AttributeError, TypeError, ValueError) as exc:
        raise PlanError(f"{what}: a job record is not as `squeue --json` prints it ({exc})") from None


def parse_nodes(text: str, what: str) -> dict[str, NodeState]:
    out = {}
    for n in _document(text, what, "nodes"):
        if not isinstance(n, dict) or "name" not in n:
            raise PlanError(f"{what}: a node record has no name: is it the output of `sinfo --json`?")
        flags = [f.lower() for f in n.get("state_flags") or []]
        state = "+".join([_text(n.get("state")).lower(), *flags]) if flags else _text(n.get("state")).lower()
        out[n["name"]] = NodeState(n["name"], state, _text(n.get("reason")))
    return out


def read_file(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanError(f"{what} {path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None


# ---- --live ------------------------------------------------------------------------------------
CONTROLLER = "service_slurmctld[0]"
"""Ansible's pattern for the first slurmctld host."""


def run_on_controller(inventory: Path, command: str, what: str = "--live") -> str:
    """The stdout of `command` on the first slurmctld host of `inventory`, through Ansible's
    command module; the json stdout callback keeps the output apart from Ansible's. PlanError,
    naming `what` (the option or command that asked), when it fails."""
    [result] = run_ad_hoc(inventory, CONTROLLER, command, what=what).values()
    if result.get("failed") or result.get("unreachable") or result.get("rc", 0) != 0:
        reason = (result.get("stderr") or result.get("msg") or "failed").strip().splitlines()[-1]
        raise PlanError(
            f"{what}: `{command}` on {CONTROLLER} of {inventory} failed (rc {result.get('rc', '?')}): {reason}"
        )
    return result.get("stdout", "")


def run_ad_hoc(
    inventory: Path, pattern: str, command: str, timeout: int = 300, what: str = "--live", forks: int | None = None
) -> dict[str, dict]:
    """Host -> Ansible's result of `command` (its command module) on the hosts of `pattern` in
    `inventory`: rc, stdout, stderr, failed, unreachable. Used by `plan --live` and `health deep`
    (`what`: the command or option named in errors)."""
    ansible = tools.find("ansible")  # beside this Python (the virtualenv), else on PATH
    if ansible is None:
        raise PlanError(f"{what} needs Ansible: no `ansible` beside this Python or on PATH")
    argv = [ansible, pattern, "-i", str(inventory), "-m", "ansible.builtin.command", "-a", command]
    if forks:
        argv += ["-f", str(forks)]  # every host at once, not Ansible's default of 5 at a time
    env = {**os.environ, "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json"}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PlanError(f"{what}: `{command}` through {ansible} failed: {exc}") from None
    try:
        doc = _json_document(done.stdout)
        results = {host: r for play in doc["plays"] for task in play["tasks"] for host, r in task["hosts"].items()}
        if not results:
            raise ValueError("no host answered")
    except (ValueError, KeyError, TypeError, AttributeError):
        reason = (done.stderr.strip() or done.stdout.strip() or f"exit status {done.returncode}").splitlines()[-1]
        raise PlanError(f"{what}: `{command}` on {pattern} of {inventory} failed: {reason}") from None
    return results


def _json_document(stdout: str) -> dict:
    """The json callback's document in Ansible's stdout. Callbacks an ansible.cfg enables
    beside it (profile_tasks, timer: this repository's) print their own lines before and after
    it, so the document is decoded from its first line that opens an object."""
    start = 0 if stdout.startswith("{") else stdout.find("\n{") + 1
    if start == 0 and not stdout.startswith("{"):
        raise ValueError("no JSON document in the output")
    doc, _end = json.JSONDecoder().raw_decode(stdout, start)
    return doc
