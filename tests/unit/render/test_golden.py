"""Golden files: every artifact the renderer produces, compared byte for byte.

Cases: ``hal`` (the embedded HAL description), every ``tests/data/clusters/<case>.yml`` and
every ``examples/<case>.yml``; a new file in either becomes a case by itself. The expected tree of a case is
``tests/golden/<case>/<relative path>``, one file per path in ``render_all``'s output.

After an intended change to the output (or a new case), regenerate every golden copy, then
review the change with ``git diff tests/golden``:

    HAL_UPDATE_GOLDEN=1 python3 -m pytest tests/unit/render/test_golden.py
"""

from __future__ import annotations

import difflib
import os
import shutil
from pathlib import Path

import pytest

from hal_provision.findings import has_errors
from hal_provision.render import render_all
from hal_provision.loader import validate

TESTS = Path(__file__).resolve().parent.parent.parent
CLUSTERS = TESTS / "data" / "clusters"
EXAMPLES = TESTS.parent / "examples"
GOLDEN = TESTS / "golden"
UPDATE = os.environ.get("HAL_UPDATE_GOLDEN") == "1"
NOT_RENDER_CASES = {
    "plan",
    "bundle",
}  # tests/golden/plan/: `hal-provision plan` outputs (tests/unit/plan/test_plan.py); bundle/: manifests (test_bundle.py)
REGENERATE = "HAL_UPDATE_GOLDEN=1 python3 -m pytest tests/unit/render/test_golden.py"
DIFF_LINES = 200  # per file; a longer diff is cut, the first lines tell the story


def cases() -> dict[str, Path | None]:
    """Case name -> cluster file (None: the embedded HAL description)."""
    found = {"hal": None}
    for path in [*sorted(CLUSTERS.glob("*.yml")), *sorted(EXAMPLES.glob("*.yml"))]:
        assert path.stem not in found and path.stem not in NOT_RENDER_CASES, (
            f"{path} clashes with the case {path.stem!r}"
        )
        found[path.stem] = path
    return found


CASES = cases()


def rendered(file: Path | None) -> dict[str, bytes]:
    loaded = validate(file)
    problems = "\n".join(f.format() for f in loaded.findings)
    assert loaded.model is not None and not has_errors(loaded.findings), problems
    return {rel: text.encode("utf-8") for rel, text in render_all(loaded.model).items()}


def golden_tree(case_dir: Path) -> dict[str, bytes]:
    if not case_dir.is_dir():
        return {}
    return {p.relative_to(case_dir).as_posix(): p.read_bytes() for p in sorted(case_dir.rglob("*")) if p.is_file()}


def write_golden(case_dir: Path, files: dict[str, bytes]) -> None:
    shutil.rmtree(case_dir, ignore_errors=True)
    for rel, data in files.items():
        target = case_dir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def unified_diff(rel: str, expected: bytes, actual: bytes) -> str:
    lines = list(
        difflib.unified_diff(
            expected.decode("utf-8", "replace").splitlines(keepends=True),
            actual.decode("utf-8", "replace").splitlines(keepends=True),
            fromfile=f"golden/{rel}",
            tofile=f"rendered/{rel}",
        )
    )
    if len(lines) > DIFF_LINES:
        lines = lines[:DIFF_LINES] + [f"... {len(lines) - DIFF_LINES} more diff lines\n"]
    text = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
    return text or "(the files differ only in bytes that do not decode as UTF-8)\n"


def mismatches(expected: dict[str, bytes], actual: dict[str, bytes]) -> list[str]:
    """One readable problem per missing, extra or differing file; empty when all match."""
    problems = []
    for rel in sorted(expected.keys() | actual.keys()):
        if rel not in expected:
            problems.append(f"{rel}: rendered, but no golden copy exists\n")
        elif rel not in actual:
            problems.append(f"{rel}: golden copy exists, but the renderer no longer produces it\n")
        elif expected[rel] != actual[rel]:
            problems.append(f"{rel}: differs from its golden copy\n" + unified_diff(rel, expected[rel], actual[rel]))
    return problems


@pytest.mark.parametrize("case", list(CASES))
def test_rendered_tree_matches_golden(case: str) -> None:
    actual = rendered(CASES[case])
    case_dir = GOLDEN / case
    if UPDATE:
        write_golden(case_dir, actual)
    problems = mismatches(golden_tree(case_dir), actual)
    if problems:
        pytest.fail(
            f"case {case!r} does not match {case_dir}:\n\n"
            + "\n".join(problems)
            + f"\nIf the change is intended, regenerate with: {REGENERATE}",
            pytrace=False,
        )


def test_no_golden_dir_without_a_case() -> None:
    stale = (
        sorted(
            p.name for p in GOLDEN.iterdir() if p.is_dir() and p.name not in CASES and p.name not in NOT_RENDER_CASES
        )
        if GOLDEN.is_dir()
        else []
    )
    if UPDATE:
        for name in stale:
            shutil.rmtree(GOLDEN / name)
        stale = []
    assert not stale, f"golden dirs without a cluster file: {stale}; remove them or run {REGENERATE}"


def test_mismatch_report_names_every_problem() -> None:
    """The harness itself: a changed, a missing and an extra file each get reported."""
    expected = {"a": b"one\ntwo\n", "gone": b"x\n"}
    actual = {"a": b"one\nTWO\n", "new": b"y\n"}
    report = "\n".join(mismatches(expected, actual))
    assert "a: differs from its golden copy" in report
    assert "-two\n+TWO\n" in report and "--- golden/a" in report and "+++ rendered/a" in report
    assert "gone: golden copy exists, but the renderer no longer produces it" in report
    assert "new: rendered, but no golden copy exists" in report
    assert mismatches(expected, dict(expected)) == []
