"""The linters, with the settings committed beside the code: ruff's rules and its formatter
([tool.ruff] in pyproject.toml) on every Python file, and ansible-lint's production profile
(.ansible-lint, .yamllint) on the roles, playbooks and molecule scenarios. Each must pass clean;
the first lines of what it says are the failure's message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # installed beside the interpreter by the test extra


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / argv[0]), *argv[1:]], cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize(
    "argv",
    [("ruff", "check", "--no-cache", "."), ("ruff", "format", "--check", "--no-cache", ".")],
    ids=["ruff-check", "ruff-format"],
)
def test_ruff(argv):
    result = _run(*argv)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]


def test_ansible_lint():
    result = _run("ansible-lint", "--offline", "--nocolor")
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert "Profile 'production' was required, and it passed" in result.stdout + result.stderr
