"""External tools are found beside the running interpreter first, then on PATH (tools.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from hal_provision import tools


@pytest.fixture
def venv(tmp_path, monkeypatch) -> Path:
    """A virtual environment's bin/ holding python and ansible-playbook, not on PATH."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)  # a venv's python links to the system's
    for name in ("ansible-playbook", "hal-provision"):
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "elsewhere"))
    return bin_dir


def test_found_beside_the_interpreter_not_resolved(venv):
    assert tools.bin_dir() == venv
    assert tools.find("ansible-playbook") == str(venv / "ansible-playbook")


def test_on_path_when_not_beside(venv, tmp_path, monkeypatch):
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "podman").write_text("#!/bin/sh\n")
    (other / "podman").chmod(0o755)
    assert tools.find("podman") == str(other / "podman")
    assert tools.find("no-such-tool") is None


def test_not_executable_beside_is_skipped(venv):
    (venv / "ansible-inventory").write_text("")  # mode 0644
    assert tools.find("ansible-inventory") is None


def test_children_get_the_interpreter_directory_first(venv):
    env = tools.child_env({"PATH": "/usr/bin:/bin", "HOME": "/root"})
    assert env["PATH"].split(os.pathsep) == [str(venv), "/usr/bin", "/bin"] and env["HOME"] == "/root"
    assert tools.child_env(env)["PATH"] == env["PATH"]  # not added twice


def test_self_command_is_absolute(venv, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["hal-provision", "sandbox", "up"])  # started through PATH
    assert tools.self_command() == str(venv / "hal-provision")
    monkeypatch.setattr(sys, "argv", [str(venv / "hal-provision")])
    assert Path(tools.self_command()).is_absolute()
