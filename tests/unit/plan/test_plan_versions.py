"""`hal-provision plan` names Slurm majors only as the model's tables and the rendered trees give
them (model/slurm_versions.py: the OSes and what each ships, the upgrade window; NEW's
slurm-version.json): a major written into one of plan's texts would be a second copy of a fact,
wrong for the next OS or the next major."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from hal_provision.model.slurm import SLURM_VERSIONS
from hal_provision.plan.effects import SlurmEffect, _slurm_notes
from hal_provision.plan.slurm import SlurmConf

PLAN = Path(__file__).resolve().parents[3] / "hal_provision" / "plan"
# Any YY.MM a Slurm major could be (SLURM_VERSIONS' and those before or after them), not in a
# longer number (0.0.38, 3.11.2).
MAJOR = re.compile(r"(?<![\d.])[12]\d\.(?:0[1-9]|1[0-2])(?![\d.]*\d)")


def docstrings(tree: ast.AST) -> set[int]:
    """ids of the string statements (docstrings, and strings standing alone as comments)."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    }


def majors_in_strings(source: str) -> list[tuple[int, str]]:
    """(line, text) of each string constant (f-strings' literal parts included) naming a Slurm major."""
    tree = ast.parse(source)
    skip = docstrings(tree)
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in skip
        and MAJOR.search(node.value)
    ]


def test_the_pattern_finds_every_known_major_and_no_longer_number() -> None:
    assert all(MAJOR.search(f"Slurm {v}: ") for v in SLURM_VERSIONS)
    assert not any(MAJOR.search(t) for t in ("data_parser 0.0.38", "Python 3.11.2", "v0.0.40", "2026.11", "10.89.78.0"))


def test_the_scan_sees_f_strings_and_skips_docstrings_and_comments() -> None:
    source = (
        '"""Slurm 22.05 prints it."""\n# Slurm 23.02 too\n'
        'def f(v):\n    """From 24.11 on."""\n    return [f"Slurm {v} (Debian 12 ships 22.05)", "24.11"]\n'
    )
    assert sorted(text for _line, text in majors_in_strings(source)) == [" (Debian 12 ships 22.05)", "24.11"]


@pytest.mark.parametrize("path", sorted(PLAN.glob("*.py")), ids=lambda p: p.name)
def test_no_slurm_major_is_written_into_plans_texts(path: Path) -> None:
    found = majors_in_strings(path.read_text(encoding="utf-8"))
    assert not found, (
        f"{path.name} writes a Slurm major into a text: take it from the model "
        f"(model/slurm_versions.py) or NEW's tree (slurm-version.json): {found}"
    )


@pytest.mark.parametrize("version", [None, "22.05", "24.11"])
def test_added_nodes_name_the_version_new_is_written_for(version) -> None:
    effect = SlurmEffect(True, set(), SlurmConf(), SlurmConf(), added={"hal17"})
    [note] = _slurm_notes(effect, version)
    said = f"Slurm {version}: " if version else ""
    assert note == f"nodes added: hal17 ({said}slurmctld and every slurmd restart to learn them)"
