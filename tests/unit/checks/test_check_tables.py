"""Every registered check is triggered by a row of some check table.

A check table is the module-level ROWS of a tests/unit module: rows (name, steps, level,
dotted path, piece of the message), each an edit of the embedded HAL description (a module's
ROWS_START, when it has one, holds the steps every one of its rows takes first). A check is
covered when a row expects a finding the check itself produces, as `finds` matches it, so a
check registered without a row fails here, whatever module it lives in. Each row expects the
finding of one check (pydantic's are check 'schema'), so no row stands in for two checks.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

import hal_provision.checks
from hal_provision.checks import REGISTRY
from hal_provision.loader import validate_text

from tests.conftest import HAL_TEXT, _apply

UNIT = Path(__file__).resolve().parents[1]  # tests/unit: the tables live in its folders


def check_tables() -> dict[str, list]:
    """Module name -> its ROWS, each row's steps prefixed by the module's ROWS_START."""
    tables = {}
    for path in sorted(UNIT.rglob("test_*.py"), key=lambda path: path.name):
        if "\nROWS = [" not in path.read_text(encoding="utf-8"):
            continue
        if str(path.parent) not in sys.path:  # a folder pytest has not collected from (a run of one folder)
            sys.path.insert(0, str(path.parent))
        module = importlib.import_module(path.stem)  # its folder is on sys.path: pytest's own module object
        start = list(getattr(module, "ROWS_START", []))
        tables[path.stem] = [
            (name, [*start, *steps], level, dotted, message) for name, steps, level, dotted, message in module.ROWS
        ]
    return tables


def registered_checks() -> set[str]:
    """Every @check of every module of hal_provision.checks, a module added later included."""
    for info in pkgutil.iter_modules(hal_provision.checks.__path__):
        importlib.import_module(f"hal_provision.checks.{info.name}")
    return set(REGISTRY)


def test_every_registered_check_is_triggered_by_a_table_row():
    tables = check_tables()
    assert {"test_checks", "test_storage_checks", "test_scale_fabric"} <= set(tables), sorted(tables)
    covered: set[str] = set()
    for module, rows in tables.items():
        for name, steps, level, dotted, message in rows:
            loaded = validate_text(_apply(HAL_TEXT, steps), "c.yml")
            by = {f.check for f in loaded.findings if f.dotted == dotted and message in f.message and f.level is level}
            # One mistake, one check: so each check has rows of its own, as many rows as checks at least.
            assert len(by) == 1, f"{module}:{name} expects a finding of {sorted(by) or 'no check'}"
            covered |= by
    checks = registered_checks()
    assert len(checks) > 40  # the registry was filled: an empty one would pass vacuously
    missing = sorted(checks - covered)
    assert not missing, (
        f"checks no table row triggers (add a row to the ROWS of their domain's test "
        f"module, e.g. test_checks.py): {missing}"
    )
