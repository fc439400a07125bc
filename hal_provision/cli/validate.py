"""Load + check in one call: what every command needs before it may render anything."""

from __future__ import annotations

from pathlib import Path

from ..checks import run_all
from ..findings import Level
from ..loader import Loaded, load, load_text


def validate(path: str | Path | None = None) -> Loaded:
    return _checked(load(path))


def validate_text(text: str, file: str) -> Loaded:
    """The same for a description that is not a file (`plan --from REV:PATH` reads it from git)."""
    return _checked(load_text(text, file))


def _checked(loaded: Loaded) -> Loaded:
    if loaded.model is not None:
        found = run_all(loaded.model)
        located = loaded.locator.locate_all(found) if loaded.locator else found
        order = {Level.error: 0, Level.warning: 1, Level.info: 2}
        loaded.findings.extend(sorted(located, key=lambda f: (order[f.level], f.line or 0, f.column or 0)))
    return loaded
