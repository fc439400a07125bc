"""Load + check in one call: what every command needs before it may render anything."""

from __future__ import annotations

from pathlib import Path

from .checks import run_all
from .findings import Level
from .loader import Loaded, load


def validate(path: str | Path | None = None) -> Loaded:
    loaded = load(path)
    if loaded.model is not None:
        found = run_all(loaded.model)
        located = loaded.locator.locate_all(found) if loaded.locator else found
        order = {Level.error: 0, Level.warning: 1, Level.info: 2}
        loaded.findings.extend(sorted(located, key=lambda f: (order[f.level], f.line or 0, f.column or 0)))
    return loaded
