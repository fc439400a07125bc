"""The repository's strategy (hal.provision.mitogen_linear) leaves CPU affinity alone: what a
play starts (ssh, `podman run`, `hal-provision sandbox up` and the containers they make) may run
on every CPU the controller may. Mitogen's own policy would pin them, on a 2-CPU machine all to
CPU 1, for the life of every container a play starts."""

from __future__ import annotations

import importlib.util
import os
import subprocess

import pytest

from hal_provision import tools
from hal_provision.cli import runner

needs_mitogen = pytest.mark.skipif(
    importlib.util.find_spec("ansible_mitogen") is None,
    reason="mitogen is not installed (the sandbox extra installs it)",
)


@needs_mitogen
def test_a_command_a_play_runs_may_use_every_cpu(tmp_path):
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.command: grep Cpus_allowed_list /proc/self/status\n"
        "      register: allowed\n      changed_when: false\n"
        "    - ansible.builtin.debug: {msg: 'ALLOWED={{ allowed.stdout.split()[-1] }}'}\n"
    )
    env = runner.ansible_env(dict(os.environ))
    proc = subprocess.run(
        [tools.find("ansible-playbook"), "-i", "localhost,", "-c", "local", str(play)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [allowed] = [line.split("ALLOWED=", 1)[1].strip(' "') for line in proc.stdout.splitlines() if "ALLOWED=" in line]
    cpus = set()
    for part in allowed.split(","):
        first, _, last = part.partition("-")
        cpus |= set(range(int(first), int(last or first) + 1))
    assert cpus == os.sched_getaffinity(0), f"a play's command may run on CPUs {allowed} only"
