"""The one way hal-provision runs ansible-playbook: the repository's ansible.cfg and roles, the
events callback (hal.provision.events) read through a pipe, Ansible's own output kept in a log.

A person watching sees one live line (plays and tasks done, the task running, the host it is
waiting for, the time so far) instead of Ansible's task stream; when the run fails, the failing
tasks with their hosts and messages, and where the whole log is. The events also say where the
time went (`timings`, used by bench/converge.py).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from .. import tools

REPO = Path(__file__).resolve().parents[2]
PLAYBOOKS = REPO / "playbooks"


class RunnerError(RuntimeError):
    pass


def ansible_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment every ansible-playbook of ours runs in: the repository's ansible.cfg and
    roles, the interpreter's bin/ first on PATH, no colour, and an inventory that cannot be
    parsed stops the run (instead of leaving it with no hosts)."""
    env = tools.child_env(env)
    env.setdefault("ANSIBLE_CONFIG", str(REPO / "ansible.cfg"))
    env["ANSIBLE_ROLES_PATH"] = str(REPO / "roles")
    env.setdefault("ANSIBLE_FORCE_COLOR", "0")
    env.setdefault("ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED", "1")
    return env


def playbook_cmd(playbook: str, inventories: list[Path | str], *extra: str) -> list[str]:
    """ansible-playbook (beside the interpreter first) on playbooks/PLAYBOOK with these inventories."""
    path = PLAYBOOKS / playbook
    if not path.is_file():
        raise RunnerError(f"{path} not found: playbooks run from a hal-provision checkout")
    exe = tools.find("ansible-playbook")
    if exe is None:
        raise RunnerError("ansible-playbook is not installed (./bootstrap.sh demo installs it)")
    inv = [arg for i in inventories for arg in ("-i", str(i))]
    return [exe, *inv, str(path), *extra]


@dataclass
class Failure:
    host: str
    task: str
    status: str  # failed | unreachable
    msg: str


@dataclass
class Run:
    """What one ansible-playbook run did, from its events."""

    returncode: int
    log: Path | None
    seconds: float
    events: list[dict] = field(default_factory=list)

    @property
    def results(self) -> list[dict]:
        return [e for e in self.events if e["ev"] == "result"]

    @property
    def failures(self) -> list[Failure]:
        return [
            Failure(e["host"], e["task"], e["status"], e.get("msg", ""))
            for e in self.results
            if e["status"] in ("failed", "unreachable")
        ]

    @property
    def recap(self) -> dict[str, dict[str, int]]:
        end = [e for e in self.events if e["ev"] == "end"]
        return end[-1]["recap"] if end else {}

    @property
    def changed(self) -> int:
        return sum(r.get("changed", 0) for r in self.recap.values())

    @property
    def tasks(self) -> int:
        return sum(1 for e in self.events if e["ev"] == "task")


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}m{s:02d}s" if m else f"{s}s"


class Progress:
    """Draws the run's state from its events: on a terminal one line redrawn in place (plays,
    tasks done, the task, the hosts not yet answered, elapsed); elsewhere one line per play."""

    def __init__(self, label: str, stream: TextIO | None = None, live: bool | None = None) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.start = time.monotonic()
        self.plays = 0
        self.play = ""
        self.play_n = 0
        self.tasks_done = 0
        self.task = ""
        self.waiting: set[str] = set()
        self.hosts: set[str] = set()
        self._width = 0

    def event(self, ev: dict) -> None:
        kind = ev["ev"]
        if kind == "start":
            self.plays = ev.get("plays", 0)
        elif kind == "play":
            if self.task:  # the last task of the play before
                self.tasks_done += 1
                self.task = ""
            self.play, self.play_n = ev["name"], ev["n"]
            if not self.live:
                self._line(
                    f"{self.label}: play {self.play_n}/{self.plays} {self.play} "
                    f"({self.tasks_done} tasks done, {_clock(self.elapsed)})"
                )
        elif kind == "task":
            if self.task:
                self.tasks_done += 1
            self.task = (f"{ev['role']} : " if ev.get("role") else "") + ev["name"]
            self.waiting = set(self.hosts)
        elif kind == "result":
            self.hosts.add(ev["host"])
            self.waiting.discard(ev["host"])
        self.draw()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def draw(self) -> None:
        if not self.live:
            return
        host = (
            sorted(self.waiting)[0]
            if len(self.waiting) == 1
            else (f"{len(self.waiting)} hosts" if self.waiting else "")
        )
        text = (
            f"{self.label} {_clock(self.elapsed):>6} play {self.play_n}/{self.plays} "
            f"tasks {self.tasks_done} | {self.task}" + (f" [{host}]" if host else "")
        )
        cols = 120
        try:
            cols = os.get_terminal_size(self.stream.fileno()).columns
        except (OSError, ValueError, AttributeError):
            pass
        text = text[: max(cols - 1, 20)]
        self.stream.write("\r" + text + " " * max(self._width - len(text), 0))
        self.stream.flush()
        self._width = len(text)

    def close(self) -> None:
        if self.live and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()

    def _line(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()


def run_playbook(
    cmd: list[str],
    env: dict[str, str] | None = None,
    log: Path | None = None,
    progress: Progress | None = None,
    timeout: float | None = None,
) -> Run:
    """Run `cmd` (an ansible-playbook command line) with the events callback on a pipe.

    Ansible's output goes to `log` (appended; None: this process's stdout, as before); every
    event goes to `progress` as it arrives. Returns the Run with every event; never raises for
    a failed playbook (look at its returncode and failures)."""
    env = ansible_env(env)
    read_fd, write_fd = os.pipe()
    env["HAL_EVENTS_FD"] = str(write_fd)
    env.pop("HAL_EVENTS_FILE", None)
    out = open(log, "a", encoding="utf-8") if log is not None else None
    start = time.monotonic()
    events: list[dict] = []
    try:
        proc = subprocess.Popen(
            cmd,
            env=env,
            stdout=out if out is not None else None,
            stderr=subprocess.STDOUT if out is not None else None,
            pass_fds=(write_fd,),
            text=True,
        )
    except OSError as exc:
        os.close(read_fd)
        os.close(write_fd)
        if out is not None:
            out.close()
        raise RunnerError(f"cannot run {cmd[0]}: {exc}") from None
    os.close(write_fd)
    buf = b""
    deadline = None if timeout is None else start + timeout
    try:
        while True:
            ready, _, _ = select.select([read_fd], [], [], 1.0)
            if ready:
                chunk = os.read(read_fd, 65536)
                if not chunk:
                    break
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    try:
                        ev = json.loads(line)
                    except ValueError:
                        continue
                    events.append(ev)
                    if progress is not None:
                        progress.event(ev)
            elif progress is not None:
                progress.draw()  # the elapsed time moves on while a task runs
            if deadline is not None and time.monotonic() > deadline:
                proc.kill()
                break
        rc = proc.wait()
    finally:
        os.close(read_fd)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if out is not None:
            out.close()
        if progress is not None:
            progress.close()
    return Run(returncode=rc, log=log, seconds=time.monotonic() - start, events=events)


def report(run: Run, label: str, stream: TextIO | None = None) -> None:
    """One closing line for a run; when it failed, each failing task with its host and message
    (as Ansible reported them) and where the full log is."""
    stream = stream if stream is not None else sys.stderr
    hosts = len(run.recap)
    if run.returncode == 0:
        stream.write(
            f"{label}: {hosts} hosts, {run.tasks} tasks, {run.changed} changed, in {_clock(run.seconds)}"
            + (f" (log: {run.log})" if run.log else "")
            + "\n"
        )
        return
    stream.write(f"{label} FAILED (exit {run.returncode}) after {_clock(run.seconds)}\n")
    seen = set()
    for f in run.failures:
        key = (f.task, f.msg)
        hosts_with = sorted({g.host for g in run.failures if (g.task, g.msg) == key})
        if key in seen:
            continue
        seen.add(key)
        msg = f.msg.strip().replace("\n", "\n      ")
        stream.write(f"  {f.status}: {f.task} on {', '.join(hosts_with)}\n      {msg}\n")
    if run.log:
        stream.write(f"  the whole run: {run.log}\n")
    stream.flush()


def timings(events: list[dict]) -> dict:
    """Where a run's time went, from its events: each task's wall time (task start to the next
    task's start), its role, and the per-host result rows; summed per role."""
    tasks: list[dict] = []
    current = None
    last_t = None
    for ev in events:
        if ev["ev"] in ("task", "play", "end"):
            if current is not None:
                current["seconds"] = ev["t"] - current["t"]
                tasks.append(current)
                current = None
            if ev["ev"] == "task":
                current = dict(name=ev["name"], role=ev.get("role") or "(play)", t=ev["t"], rows=0, changed=0)
        elif ev["ev"] == "result" and current is not None:
            current["rows"] += 1
            current["changed"] += ev["status"] == "changed"
        last_t = ev["t"]
    if current is not None and last_t is not None:
        current["seconds"] = last_t - current["t"]
        tasks.append(current)
    roles: dict[str, dict] = {}
    for t in tasks:
        r = roles.setdefault(t["role"], dict(seconds=0.0, tasks=0, rows=0))
        r["seconds"] += t["seconds"]
        r["tasks"] += 1
        r["rows"] += t["rows"]
    return dict(tasks=tasks, roles=roles)
