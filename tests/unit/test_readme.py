"""The README's front door works: its quick start ("Describe your own cluster") runs command by
command, its two set-up commands are there as written, and its links lead somewhere."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
MARKER = "<!-- quick start: tests/unit/test_readme.py"
CLI = ".venv/bin/hal-provision"


def quick_start() -> list[str]:
    """The commands of the fenced block right after the quick-start marker, one per line."""
    after = README[README.index(MARKER):]
    block = re.search(r"```sh\n(.*?)```", after, re.S).group(1)
    return [line for line in block.splitlines() if line.strip()]


def test_quick_start_runs_command_by_command(tmp_path):
    commands = quick_start()
    assert [shlex.split(c, comments=True)[1] for c in commands] == ["init", "validate", "show", "render",
                                                                     "diagram", "plan"]
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="120")
    for command in commands:
        words = shlex.split(command, comments=True)
        assert words[0] == CLI, command  # every step runs without hosts; deploying is after the block
        done = subprocess.run([sys.executable, "-c", "from hal_provision.cli.main import main; main()", *words[1:]],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    assert (tmp_path / "rendered" / "mylab" / "files" / "etc" / "slurm" / "slurm.conf").is_file()
    assert (tmp_path / "mylab.svg").read_text().lstrip().startswith(("<?xml", "<svg"))


def test_the_two_setup_commands_are_kept():
    assert ("```sh\n./bootstrap.sh demo    # set-up, then the main job on the embedded HAL description\n"
            "./bootstrap.sh test    # set-up, then every test (this is what CI runs)\n```") in README


def test_first_screen_leads_to_the_quick_start():
    headings = re.findall(r"^## (.+)$", README, re.M)
    assert headings[:2] == ["Two commands (fresh Debian 12, as root or with sudo)", "Describe your own cluster"]


def test_local_links_exist():
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", README):
        assert (REPO / target).exists(), target
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", README, re.M)}
    for anchor in re.findall(r"\]\(#([^)]+)\)", README):
        assert anchor in anchors, anchor
