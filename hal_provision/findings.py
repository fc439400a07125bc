"""Findings: what validation reports, each with a level, a dotted path and a place in the file."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace
from enum import Enum
from typing import Iterable, Sequence

Path = tuple  # of str | int


class Level(str, Enum):
    error = "error"
    warning = "warning"
    info = "info"


@dataclass(frozen=True)
class Finding:
    level: Level
    path: Path
    message: str
    check: str = ""
    file: str | None = None
    line: int | None = None  # 1-based
    column: int | None = None  # 1-based

    @property
    def dotted(self) -> str:
        return dotted(self.path)

    def located(self, file: str | None, line: int | None, column: int | None) -> "Finding":
        return replace(self, file=file, line=line, column=column)

    def format(self) -> str:
        where = self.file or "<input>"
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        path = f" {self.dotted}:" if self.path else ""
        return f"{where}: {self.level.value}:{path} {self.message}"


def dotted(path: Sequence) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def error(path: Path, message: str, check: str = "") -> Finding:
    return Finding(Level.error, tuple(path), message, check)


def warning(path: Path, message: str, check: str = "") -> Finding:
    return Finding(Level.warning, tuple(path), message, check)


def info(path: Path, message: str, check: str = "") -> Finding:
    return Finding(Level.info, tuple(path), message, check)


def has_errors(findings: Iterable[Finding]) -> bool:
    return any(f.level is Level.error for f in findings)


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """'; did you mean 'x'?' for a close known name, else the list of known names."""
    known = sorted(choices)
    close = difflib.get_close_matches(name, known, n=1)
    if close:
        return f"; did you mean {close[0]!r}?"
    return f"; known: {', '.join(known)}" if known else "; none is declared"
