"""House rules a reader of the code relies on, checked on the tree: source, roles, playbooks,
scenarios, tests, benchmarks and the example clusters never name an issue by its number (it means
nothing to a reader of the code: say what the thing is for); the command line's help neither."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ("hal_provision", "roles", "playbooks", "molecule", "tests", "bench", "inventory", "examples", ".ci")
ISSUE = re.compile(r"\bissues? ?#?\d+|\(#\d+\)", re.I)


def _files():
    for top in SOURCE:
        for path in sorted((ROOT / top).rglob("*")):
            rel = path.relative_to(ROOT)
            if (
                path.is_file()
                and "golden" not in rel.parts
                and "__pycache__" not in rel.parts
                and path.suffix not in (".pyc", ".png", ".gz", ".xml")
                and path != Path(__file__).resolve()
            ):
                yield rel, path


def test_no_issue_numbers_in_source():
    found = []
    for rel, path in _files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        found += [
            f"{rel}:{n}: {line.strip()[:100]}" for n, line in enumerate(text.splitlines(), 1) if ISSUE.search(line)
        ]
    assert found == []


def test_no_issue_numbers_in_help():
    import typer

    from hal_provision.cli.main import _Unloaded, app, import_command

    group = typer.main.get_command(app)
    runner = CliRunner()
    seen = 0

    def walk(command, words: list[str]) -> None:
        nonlocal seen
        result = runner.invoke(app, [*words, "--help"])
        assert result.exit_code == 0, (words, result.output)
        assert not ISSUE.search(result.output), (words, result.output)
        seen += 1
        if hasattr(command, "list_commands"):  # a group (typer's click, whichever it is)
            ctx = typer.Context(command)
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                walk(import_command(name) if isinstance(sub, _Unloaded) else sub, [*words, name])

    walk(group, [])
    assert seen > 20  # every command and sub-command
