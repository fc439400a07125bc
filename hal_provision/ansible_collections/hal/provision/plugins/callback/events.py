# -*- coding: utf-8 -*-
"""One JSON line per playbook event, for the program that runs ansible-playbook.

`hal_provision.cli.runner` enables this callback and names where the lines go (HAL_EVENTS_FD, a
pipe it reads, or HAL_EVENTS_FILE, a file appended to). From them it draws a live progress
line (plays and tasks done, the current task and host, elapsed time), names the failing task
and its message when a run fails, and sums where the time went (bench/converge.py). Ansible's
own output is untouched: the default callback still prints it, into the run's log.

Events ("ev"): start (playbook, plays), play (name, n), task (name, role, handler), result
(host, task, status ok|changed|skipped|failed|ignored|unreachable, seconds, msg when failed), end
(per-host recap). Every event has "t", seconds since the epoch.
"""

from __future__ import annotations

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: events
type: aggregate
short_description: JSON lines of plays, tasks and per-host results for hal-provision's runner
description:
  - Writes one JSON object per line for each play, task and per-host result, with timestamps
    and, for failures, the result's message. hal-provision reads them to draw progress and to
    report where a converge spent its time.
  - Writes to the file descriptor in HAL_EVENTS_FD, else appends to the file HAL_EVENTS_FILE;
    does nothing when neither is set.
requirements:
  - enabled in callbacks_enabled (hal_provision.cli.runner does so)
author: hal-provision
"""


def _message(data: dict) -> str:
    """What a person needs of a failed result: its message and, for a command, the end of what
    it wrote to stderr (a loop: the first failed item's)."""
    if not data.get("msg") and not data.get("stderr") and data.get("results"):
        failed = [item for item in data["results"] if isinstance(item, dict) and item.get("failed")]
        if failed:
            return _message(failed[0])
    parts = [str(data.get(k)).strip() for k in ("msg", "reason") if data.get(k)]
    stderr = str(data.get("stderr") or "").strip()
    if stderr:
        parts.append("\n".join(stderr.splitlines()[-15:]))
    return "\n".join(parts)[:2000]


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "hal.provision.events"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._out = None
        fd = os.environ.get("HAL_EVENTS_FD")
        path = os.environ.get("HAL_EVENTS_FILE")
        try:
            if fd:
                self._out = os.fdopen(int(fd), "w", buffering=1, encoding="utf-8")
            elif path:
                self._out = open(path, "a", buffering=1, encoding="utf-8")
        except (OSError, ValueError):
            self._out = None
        self._started: dict[tuple[str, str], float] = {}
        self._plays = 0

    def _emit(self, ev: str, **fields) -> None:
        if self._out is None:
            return
        fields.update(ev=ev, t=round(time.time(), 3))
        try:
            self._out.write(json.dumps(fields, default=str) + "\n")
        except (OSError, ValueError):  # the reader went away: stop writing, never fail the run
            self._out = None

    # -- plays and tasks -------------------------------------------------------------------
    def v2_playbook_on_start(self, playbook):
        plays = playbook.get_plays()
        self._emit("start", playbook=os.path.basename(playbook._file_name), plays=len(plays))

    def v2_playbook_on_play_start(self, play):
        self._plays += 1
        self._emit("play", name=play.get_name().strip(), n=self._plays)

    def _task(self, task, handler: bool) -> None:
        role = task._role.get_name() if task._role else None
        self._emit("task", name=task.get_name().strip(), role=role, handler=handler, uuid=task._uuid)

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._task(task, False)

    def v2_playbook_on_handler_task_start(self, task):
        self._task(task, True)

    def v2_runner_on_start(self, host, task):
        self._started[(host.get_name(), task._uuid)] = time.time()

    # -- results ---------------------------------------------------------------------------
    def _result(self, result, status: str) -> None:
        host = result._host.get_name()
        task = result._task
        began = self._started.pop((host, task._uuid), None)
        fields = dict(
            host=host,
            task=task.get_name().strip(),
            uuid=task._uuid,
            status=status,
            seconds=round(time.time() - began, 3) if began else None,
        )
        if status in ("failed", "ignored", "unreachable"):
            fields["msg"] = _message(result._result)
        self._emit("result", **fields)

    def v2_runner_on_ok(self, result):
        self._result(result, "changed" if result._result.get("changed") else "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._result(result, "ignored" if ignore_errors else "failed")

    def v2_runner_on_skipped(self, result):
        self._result(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._result(result, "unreachable")

    def v2_playbook_on_stats(self, stats):
        recap = {h: stats.summarize(h) for h in sorted(stats.processed)}
        self._emit("end", recap=recap)
