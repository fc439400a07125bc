"""The console scripts work from any shell: `hal-provision sandbox status` and
`hal-provision verify`, run by the virtual environment's absolute path with its bin/ absent
from PATH, find the Ansible and pytest that are installed beside them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from deployed import deployed

D = deployed()
SCRIPT = Path(sys.executable).parent / "hal-provision"
BARE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SANDBOX_HOSTS = [h for h in D.hostvars if D.container(h)]


def bare_env() -> dict[str, str]:
    """A new login shell's environment: no virtual environment on PATH, none active."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "HAL_INVENTORY", "PYTEST_ADDOPTS")}
    env["PATH"] = BARE_PATH
    return env


def run(*argv: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SCRIPT), *argv], env=bare_env(), cwd="/", capture_output=True, text=True, timeout=timeout, check=False
    )


def test_venv_tools_are_not_on_the_bare_path():
    """The premise: Ansible's tools are only beside the interpreter, not on the bare PATH."""
    assert SCRIPT.is_file(), f"{SCRIPT}: run the suite with the virtual environment's python"
    for tool in ("ansible-playbook", "ansible-inventory"):
        assert (SCRIPT.parent / tool).is_file()
        on_path = [d for d in BARE_PATH.split(":") if (Path(d) / tool).is_file()]
        assert not on_path, f"{tool} is on the bare PATH too ({on_path}): the test would prove nothing"


@pytest.mark.skipif(not SANDBOX_HOSTS, reason="not a sandbox: its containers cannot be listed")
def test_sandbox_status_by_absolute_path():
    workdir = D.inventory.parent.parent  # WORKDIR/rendered/inventory
    proc = run("sandbox", "status", str(workdir / "model.json"), "--workdir", str(workdir))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    listed = dict(line.split() for line in proc.stdout.splitlines() if len(line.split()) == 2)
    for host in SANDBOX_HOSTS:
        assert listed.get(D.container(host)) == "running", (host, proc.stdout)


def test_verify_by_absolute_path():
    """verify's pytest and the suite's ansible-inventory come from the venv, not PATH: one
    quick test of the suite, selected by node id, passes."""
    proc = run("verify", str(D.inventory), "--", "-q", "-k", "test_munge_credential_from_login_decodes")
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout, proc.stdout[-2000:]
