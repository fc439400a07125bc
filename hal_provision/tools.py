"""External programs the commands run (ansible-playbook, ansible-inventory, pytest's children),
found beside the running interpreter first, then on PATH.

`pip install` puts Ansible's console scripts next to the Python that runs hal-provision
(`.venv/bin/ansible-playbook` beside `.venv/bin/python`), and an admin who runs
`.venv/bin/hal-provision` without activating the environment has them there but not on PATH.
The interpreter's path is not resolved: a virtual environment's `bin/python` is a symlink to
the system's, whose directory holds no Ansible.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def bin_dir() -> Path:
    """The directory of the running interpreter, as invoked (a venv's bin/, not /usr/bin)."""
    return Path(sys.executable).parent


def find(name: str) -> str | None:
    """The program `name`: beside the interpreter, else on PATH, else None."""
    beside = bin_dir() / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(name)


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) with the interpreter's directory first on PATH, so that
    children which look programs up themselves (Ansible's own tools, the testinfra suite's
    `ansible-inventory`) find the same installation."""
    env = dict(os.environ if env is None else env)
    here = str(bin_dir())
    path = env.get("PATH", os.defpath)
    if path.split(os.pathsep)[0] != here:
        env["PATH"] = here + os.pathsep + path
    return env


def self_command(name: str = "hal-provision") -> str:
    """How to run this command again from any shell: the console script's absolute path when
    it was started through one, else `name` (python -m, tests)."""
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if script is not None and script.name == name and script.is_file():
        return str(script.absolute())
    beside = bin_dir() / name
    return str(beside) if beside.is_file() else name
