"""hal_provision.cli.runner with a real ansible-playbook (the repository's ansible.cfg, its strategy
and the hal.provision.events callback) on this machine over the local connection: the events
it reads, the progress it draws, the failure it names and where the time went."""

from __future__ import annotations

import io
import json
import os
import subprocess
from pathlib import Path

import pytest

from hal_provision import tools
from hal_provision.cli import runner

pytestmark = pytest.mark.skipif(tools.find("ansible-playbook") is None, reason="Ansible is not installed")

PLAYBOOK = """\
- name: First play
  hosts: all
  gather_facts: false
  tasks:
    - name: Say something
      ansible.builtin.debug:
        msg: hello
    - name: Change something
      ansible.builtin.command: "true"
- name: Second play
  hosts: all
  gather_facts: false
  tasks:
    - name: Skip this
      ansible.builtin.debug:
        msg: never
      when: false
    - name: Fail with a message
      ansible.builtin.command: sh -c 'echo the disk is full >&2; exit 3'
    - name: Never reached
      ansible.builtin.debug:
        msg: never
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[runner.Run, str, Path]:
    d = tmp_path_factory.mktemp("runner")
    (d / "play.yml").write_text(PLAYBOOK)
    (d / "hosts.yml").write_text(
        "all:\n  hosts:\n    node1: {ansible_connection: local, ansible_python_interpreter: "
        f"{json.dumps(os.sys.executable)}}}\n"
    )
    stream = io.StringIO()
    log = d / "ansible.log"
    cmd = [tools.find("ansible-playbook"), "-i", str(d / "hosts.yml"), str(d / "play.yml")]
    result = runner.run_playbook(
        cmd, log=log, progress=runner.Progress("play.yml", stream=stream, live=False), timeout=300
    )
    return result, stream.getvalue(), log


def test_the_events_tell_plays_tasks_and_results(run):
    result, _progress, _log = run
    kinds = [e["ev"] for e in result.events]
    assert kinds[0] == "start" and result.events[0]["plays"] == 2 and kinds[-1] == "end"
    assert [e["name"] for e in result.events if e["ev"] == "play"] == ["First play", "Second play"]
    statuses = {e["task"]: e["status"] for e in result.results}
    assert statuses == {
        "Say something": "ok",
        "Change something": "changed",
        "Skip this": "skipped",
        "Fail with a message": "failed",
    }
    assert all(e["seconds"] is not None and e["seconds"] >= 0 for e in result.results)
    assert result.recap["node1"]["failures"] == 1 and result.changed == 1 and result.tasks == 4


def test_a_failure_is_named_with_its_host_and_message(run):
    result, _progress, log = run
    assert result.returncode == 2
    [failure] = result.failures
    assert (failure.host, failure.task, failure.status) == ("node1", "Fail with a message", "failed")
    assert "the disk is full" in failure.msg
    out = io.StringIO()
    runner.report(result, "play.yml", out)
    text = out.getvalue()
    assert "play.yml FAILED (exit 2)" in text and "failed: Fail with a message on node1" in text
    assert "the disk is full" in text and str(log) in text


def test_ansibles_own_output_is_in_the_log_not_on_the_screen(run):
    _result, progress, log = run
    text = log.read_text()
    assert "TASK [Fail with a message]" in text and "PLAY RECAP" in text
    assert "TASK [" not in progress


def test_progress_off_a_terminal_is_one_line_per_play(run):
    _result, progress, _log = run
    lines = progress.splitlines()
    assert lines[0].startswith("play.yml: play 1/2 First play (0 tasks done")
    assert lines[1].startswith("play.yml: play 2/2 Second play (2 tasks done")
    assert len(lines) == 2


def test_progress_on_a_terminal_redraws_one_line():
    stream = io.StringIO()
    p = runner.Progress("site.yml", stream=stream, live=True)
    for ev in (
        {"ev": "start", "plays": 3},
        {"ev": "play", "name": "Common", "n": 1},
        {"ev": "task", "name": "Install base packages", "role": "common"},
        {"ev": "result", "host": "hal01", "status": "ok"},
        {"ev": "task", "name": "Install the rendered /etc/hosts", "role": "common"},
    ):
        p.event(ev)
    p.close()
    text = stream.getvalue()
    assert "\n" not in text and text.count("\r") >= 5
    assert "play 1/3 tasks 1 | common : Install the rendered /etc/hosts [hal01]" in text


def test_timings_sum_each_task_until_the_next(run):
    result, _progress, _log = run
    t = runner.timings(result.events)
    assert [x["name"] for x in t["tasks"]] == ["Say something", "Change something", "Skip this", "Fail with a message"]
    assert all(x["rows"] == 1 for x in t["tasks"]) and t["roles"]["(play)"]["tasks"] == 4
    assert abs(sum(x["seconds"] for x in t["tasks"]) - t["roles"]["(play)"]["seconds"]) < 1e-6


def test_without_the_runner_the_callback_writes_nothing(tmp_path):
    """ansible.cfg enables the callback for every run; with no HAL_EVENTS_* it stays silent."""
    (tmp_path / "play.yml").write_text(PLAYBOOK.split("- name: Second play")[0])
    env = runner.ansible_env({k: v for k, v in os.environ.items() if not k.startswith("HAL_EVENTS")})
    proc = subprocess.run(
        [tools.find("ansible-playbook"), "-i", "localhost,", "-c", "local", str(tmp_path / "play.yml")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert '"ev"' not in proc.stdout + proc.stderr


def test_the_events_file_takes_them_when_no_pipe_is_given(tmp_path):
    (tmp_path / "play.yml").write_text(PLAYBOOK.split("- name: Second play")[0])
    events = tmp_path / "events.jsonl"
    env = runner.ansible_env({**os.environ, "HAL_EVENTS_FILE": str(events)})
    proc = subprocess.run(
        [tools.find("ansible-playbook"), "-i", "localhost,", "-c", "local", str(tmp_path / "play.yml")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kinds = [json.loads(line)["ev"] for line in events.read_text().splitlines()]
    assert kinds[0] == "start" and kinds[-1] == "end" and kinds.count("result") == 2


def test_every_host_gets_its_own_ssh_master():
    """ansible.cfg's ssh_args reach ssh as written (synchronize's rsync uses them): the
    ControlPath must be ssh's %C (a socket per host), never %%C (one socket for every host,
    which sent rsync to whichever node that master reached first)."""
    import configparser

    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(runner.REPO / "ansible.cfg")
    ssh_args = cfg.get("ssh_connection", "ssh_args")
    [path] = [a.split("=", 1)[1] for a in ssh_args.split() if a.startswith("ControlPath=")]
    assert path.endswith("/%C") and "%%" not in path
    assert "ControlMaster=auto" in ssh_args and "ControlPersist=" in ssh_args
