"""A line of the plan's advice: its text, which `--json` prints and the tests read as any string,
and the commands in it, which the printed plan keeps whole when it wraps the line (report.py):
a command broken across lines would run in pieces when pasted into a shell."""

from __future__ import annotations

from collections.abc import Iterable


class Line(str):
    """Advice text that knows which parts of it are commands."""

    commands: tuple[str, ...]

    def __new__(cls, text: str, commands: Iterable[str] = ()) -> Line:
        line = super().__new__(cls, text)
        line.commands = tuple(c for c in commands if c and c in text)
        return line


def commands_of(line: str) -> tuple[str, ...]:
    """The commands of a line of advice (none for plain text)."""
    return getattr(line, "commands", ())
