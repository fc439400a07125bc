"""The storage roles and playbooks: documented variables stay in sync, playbooks parse."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from ruamel.yaml import YAML

REPO = Path(__file__).resolve().parents[3]
ROLES = ("gpfs", "nfs_server", "nfs_client")
PLAYBOOKS = ("storage.yml", "storage-bench.yml", "dl-io-bench.yml")


def load(path: Path):
    return YAML(typ="safe").load(path.read_text())


@pytest.mark.parametrize("role", ROLES)
def test_argument_specs_cover_every_default_with_type_and_description(role):
    defaults = load(REPO / "roles" / role / "defaults" / "main.yml")
    options = load(REPO / "roles" / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert set(options) == set(defaults)
    for name, spec in options.items():
        assert spec.get("type") and spec.get("description"), name
        assert name.startswith(f"{role}_")


@pytest.mark.parametrize("role", ROLES)
def test_role_readme_says_what_is_and_is_not_exercised(role):
    text = (REPO / "roles" / role / "README.md").read_text()
    assert "## What is and is not exercised" in text
    for variable in load(REPO / "roles" / role / "defaults" / "main.yml"):
        assert f"`{variable}`" in text, variable


@pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-playbook is not installed")
@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_playbook_syntax(playbook):
    result = subprocess.run(
        ["ansible-playbook", "--syntax-check", str(REPO / "playbooks" / playbook)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "ANSIBLE_ROLES_PATH": str(REPO / "roles")},
    )
    assert result.returncode == 0, result.stderr


def test_tasks_that_make_home_directories_run_one_host_at_a_time():
    """Hosts share /home; two useradd -m at once race for the same directory (a CI failure)."""
    found = []
    for path in sorted((REPO / "roles").glob("*/tasks/*.yml")):
        for task in load(path) or []:
            user = task.get("ansible.builtin.user") if isinstance(task, dict) else None
            if isinstance(user, dict) and user.get("create_home", True) is not False:
                found.append((path.relative_to(REPO), task.get("throttle")))
    assert found, "no task makes local users' homes"
    assert all(throttle == 1 for _, throttle in found), found
