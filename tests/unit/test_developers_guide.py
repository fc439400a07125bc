"""docs/developers-guide.md is written against the tree: its code map names every package of
hal_provision/ and, in that package's paragraph, every module in it (subpackages of node/ in
node's paragraph, the collection's plugins in its own); the top-level modules in the first
paragraph; and the guide names every playbook and shared task file. A module or playbook added,
moved or renamed without the guide fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "hal_provision"
GUIDE = (ROOT / "docs" / "developers-guide.md").read_text()
CODE_MAP = GUIDE[GUIDE.index("## Code map") : GUIDE.index("## The rest of the tree")]
COLLECTION = "ansible_collections/hal/provision"


def paragraphs() -> dict[str, str]:
    """'model' -> the code map's paragraph that starts with **`hal_provision/model/`**, '' -> the
    top-level modules' paragraph."""
    out = {}
    starts = list(re.finditer(r"^\*\*`hal_provision/([a-z_/]*?)/?`", CODE_MAP, re.M))
    for here, after in zip(starts, starts[1:] + [None]):
        out[here.group(1).rstrip("/")] = CODE_MAP[here.start() : after.start() if after else len(CODE_MAP)]
    return out


PARAGRAPHS = paragraphs()


def _modules():
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        if "__pycache__" in rel.parts or path.name in ("__init__.py", "__main__.py"):
            continue
        if rel.parts[0] == "ansible_collections":
            yield COLLECTION, str(path.relative_to(PKG / COLLECTION)), rel
        elif len(rel.parts) == 1:
            yield "", path.name, rel
        else:
            yield rel.parts[0], path.name, rel


@pytest.mark.parametrize(("package", "name", "rel"), list(_modules()), ids=lambda v: str(v))
def test_every_module_is_named_in_its_packages_paragraph(package, name, rel):
    assert package in PARAGRAPHS, f"no code-map paragraph for hal_provision/{package}/"
    # `name.py`, or a path ending in it (`plugins/filter/drains.py`)
    assert re.search(rf"[`/]{re.escape(name)}`", PARAGRAPHS[package]), f"{rel} is not named in its paragraph"


def test_every_package_has_a_paragraph():
    packages = {
        p.parent.relative_to(PKG).parts[0]
        for p in PKG.rglob("__init__.py")
        if p.parent != PKG and "ansible_collections" not in p.parts
    }
    assert packages and packages <= set(PARAGRAPHS), sorted(packages - set(PARAGRAPHS))
    assert COLLECTION in PARAGRAPHS


PLAYBOOKS = sorted(
    p.relative_to(ROOT / "playbooks")
    for p in (ROOT / "playbooks").rglob("*.yml")
    if not {"roles", "group_vars"} & set(p.relative_to(ROOT / "playbooks").parts)
)


@pytest.mark.parametrize("playbook", PLAYBOOKS, ids=str)
def test_every_playbook_is_named(playbook):
    assert f"`{playbook}`" in GUIDE, f"playbooks/{playbook} is not named in docs/developers-guide.md"


def test_the_guide_counts_what_it_checks():
    assert len(PLAYBOOKS) > 25 and len(list(_modules())) > 150
