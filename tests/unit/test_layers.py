"""The one-way data flow, checked on the imports themselves: checks never import renderers,
renderers never import the CLI, the sandbox or the plan, the plan never imports the CLI or the
sandbox, and no module imports the entry point `hal_provision.cli.main` (shared command-line
helpers live in `hal_provision.cli.common`)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "hal_provision"


def _imports(path: Path) -> set[str]:
    """Absolute names of the hal_provision modules a file imports (anywhere in it)."""
    module = ".".join(path.relative_to(PKG.parent).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("hal_provision"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if name.startswith("hal_provision"):
                out.add(name)
                out.update(f"{name}.{a.name}" for a in node.names)
    return out


FILES = sorted(PKG.rglob("*.py"))


def _under(names: set[str], prefix: str) -> set[str]:
    return {n for n in names if n == prefix or n.startswith(prefix + ".")}


@pytest.mark.parametrize("path", [p for p in FILES if p not in (PKG / "cli" / "main.py", PKG / "cli" / "__main__.py")],
                         ids=lambda p: str(p.relative_to(PKG)))
def test_nothing_imports_the_cli_entry_point(path):
    assert not _under(_imports(path), "hal_provision.cli.main"), f"{path.name} imports hal_provision.cli.main: use cli.common"


@pytest.mark.parametrize("path", sorted((PKG / "checks").rglob("*.py")), ids=lambda p: p.name)
def test_checks_never_import_renderers(path):
    assert not _under(_imports(path), "hal_provision.render")


CLI_MODULES = ("hal_provision.cli", "hal_provision.sandbox")


@pytest.mark.parametrize("path", sorted((PKG / "render").rglob("*.py")), ids=lambda p: p.name)
def test_renderers_never_import_the_cli_the_sandbox_or_the_plan(path):
    names = _imports(path)
    assert not set().union(*(_under(names, m) for m in (*CLI_MODULES, "hal_provision.plan")))


@pytest.mark.parametrize("path", sorted((PKG / "plan").rglob("*.py")), ids=lambda p: p.name)
def test_the_plan_never_imports_the_cli_or_the_sandbox(path):
    names = _imports(path)
    assert not set().union(*(_under(names, m) for m in CLI_MODULES))
