"""The README and docs/ work: the README's quick start ("Describe your own cluster") runs command
by command, its two set-up commands are there as written, it stays a front door (at most
README_MAX_LINES lines), every block of docs/*.md marked `tested` runs, the admins' guide's
command line block names every command and each one's --help runs, and every local link and
anchor leads somewhere."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
README_MAX_LINES = 150
DOCS = sorted((REPO / "docs").glob("*.md"))
MARKDOWN = [REPO / "README.md", *DOCS]
MARKER = "<!-- quick start: tests/unit/test_readme.py"
CLI = ".venv/bin/hal-provision"
SWSUITE_TABLE = REPO / "tests" / "golden" / "hal" / "files" / "etc" / "swsuite" / "virtual-partitions.json"


def quick_start() -> list[str]:
    """The commands of the fenced block right after the quick-start marker, one per line."""
    after = README[README.index(MARKER) :]
    block = re.search(r"```sh\n(.*?)```", after, re.S).group(1)
    return [line for line in block.splitlines() if line.strip()]


def test_quick_start_runs_command_by_command(tmp_path):
    commands = quick_start()
    assert [shlex.split(c, comments=True)[1] for c in commands] == [
        "init",
        "validate",
        "show",
        "render",
        "diagram",
        "plan",
    ]
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="120")
    for command in commands:
        words = shlex.split(command, comments=True)
        assert words[0] == CLI, command  # every step runs without hosts; deploying is after the block
        done = subprocess.run(
            [sys.executable, "-c", "from hal_provision.cli.main import main; main()", *words[1:]],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    assert (tmp_path / "rendered" / "mylab" / "files" / "etc" / "slurm" / "slurm.conf").is_file()
    assert (tmp_path / "mylab.svg").read_text().lstrip().startswith(("<?xml", "<svg"))


def test_the_two_setup_commands_are_kept():
    assert (
        "```sh\n./bootstrap.sh demo    # set-up, then the main job on the embedded HAL description\n"
        "./bootstrap.sh test    # set-up, then every test (this is what CI runs)\n```"
    ) in README


def test_first_screen_leads_to_the_quick_start():
    headings = re.findall(r"^## (.+)$", README, re.M)
    assert headings[:2] == ["Two commands (fresh Debian 12, as root or with sudo)", "Describe your own cluster"]


def test_readme_stays_a_front_door():
    lines = README.count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines: move the detail into docs/ (at most {README_MAX_LINES})"
    )


def prose(text: str) -> str:
    """Markdown without its fenced blocks (a `# comment` in a shell block is not a heading)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def anchors(path: Path) -> set[str]:
    """GitHub's anchors for the headings of a Markdown file."""
    headings = re.findall(r"^#+ (.+)$", prose(path.read_text(encoding="utf-8")), re.M)
    return {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("page", MARKDOWN, ids=lambda p: str(p.relative_to(REPO)))
def test_local_links_and_anchors_exist(page):
    for target, anchor in re.findall(r"\]\(([^)#:]*)(?:#([^)]*))?\)", prose(page.read_text(encoding="utf-8"))):
        linked = (page.parent / target).resolve() if target else page
        assert linked.exists(), f"{page.name}: {target}"
        if anchor:
            assert anchor in anchors(linked), f"{page.name}: {target}#{anchor}"


def marked_blocks() -> list[tuple[str, int, list[str]]]:
    """(page, expected exit status, commands) of every docs/*.md block marked `tested`."""
    blocks = []
    for page in DOCS:
        text = page.read_text(encoding="utf-8")
        for m in re.finditer(r"^<!-- tested(?: \(exit (\d+)\))?:.*?-->\n```sh\n(.*?)```", text, re.S | re.M):
            commands = [line for line in m.group(2).splitlines() if line.strip()]
            blocks.append((page.name, int(m.group(1) or 0), commands))
    return blocks


def run_documented(words: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """One documented command as a user runs it: hal-provision (or the README's .venv path) and
    swrun (on HAL's rendered table) through this checkout; `> FILE` redirects stdout."""
    stdout_to = None
    if ">" in words:
        at = words.index(">")
        words, stdout_to = words[:at], words[at + 1]
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="120", SWSUITE_TABLE=str(SWSUITE_TABLE))
    entry = {
        "hal-provision": "from hal_provision.cli.main import main; main()",
        CLI: "from hal_provision.cli.main import main; main()",
        "swrun": "import sys; from hal_provision.node.swsuite.cli import swrun; sys.exit(swrun())",
    }
    assert words[0] in entry, f"{words[0]}: a tested block holds only commands that need no hosts"
    done = subprocess.run(
        [sys.executable, "-c", entry[words[0]], *words[1:]],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if stdout_to:
        (cwd / stdout_to).write_text(done.stdout)
    return done


@pytest.mark.parametrize(
    ("page", "status", "commands"),
    marked_blocks(),
    ids=[f"{p}:{c[0].split('#')[0].strip()}" for p, _, c in marked_blocks()],
)
def test_tested_docs_block_runs_command_by_command(tmp_path, page, status, commands):
    for shared in ("examples", "inventory", "tests"):  # what the docs' commands read, as from the repository root
        (tmp_path / shared).symlink_to(REPO / shared)
    for command in commands:
        done = run_documented(shlex.split(command, comments=True), tmp_path)
        assert done.returncode == status, (
            f"{page}: {command}\nexit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )


def test_docs_have_marked_blocks():
    pages = {page for page, _, _ in marked_blocks()}
    assert {"admins-guide.md", "users-guide.md", "developers-guide.md"} <= pages


def test_users_guide_shows_what_swrun_prints(tmp_path):
    text = (REPO / "docs" / "users-guide.md").read_text(encoding="utf-8")
    shown = re.search(r"runs\n\n```\n(srun .*?)```", text, re.S).group(1)
    done = run_documented(["swrun", "-p", "gpux4", "-c", "40", "-t", "24", "--dry-run"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == shown.split()


def command_line_block() -> list[list[str]]:
    """The admins' guide's command line reference: [command, sub-command...] per line."""
    text = (REPO / "docs" / "admins-guide.md").read_text(encoding="utf-8")
    block = re.search(r"^## The command line\n\n```sh\n(.*?)```", text, re.S | re.M).group(1)
    listed = []
    for line in block.splitlines():
        words = line.split("#")[0].split()
        if words:
            assert words[0] == "hal-provision", line
            subs = words[2].split("|") if len(words) > 2 and re.fullmatch(r"[a-z|]+", words[2]) else []
            listed.append([words[1], *subs])
    return listed


def test_command_line_block_names_every_command():
    import typer

    from hal_provision.cli.main import app, import_command

    listed: dict[str, set[str]] = {}
    for words in command_line_block():
        listed.setdefault(words[0], set()).update(words[1:])
    commands = typer.main.get_group(app).commands
    assert set(listed) == set(commands)
    for name, subs in listed.items():
        group = import_command(name) if name in ("sandbox", "storage", "recipes", "backup", "image") else None
        if group is not None:
            assert subs == set(group.commands), name


@pytest.mark.parametrize(
    "words",
    [[w[0], s] for w in command_line_block() for s in w[1:]] + [w[:1] for w in command_line_block()],
    ids=" ".join,
)
def test_help_of_every_documented_command_runs(words):
    from typer.testing import CliRunner

    from hal_provision.cli.main import app

    done = CliRunner().invoke(app, [*words, "--help"])
    assert done.exit_code == 0, done.output
    assert "Usage" in done.output
