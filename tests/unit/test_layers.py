"""The one-way data flow, checked on the imports themselves. Checks import only the model and
hostlists; renderers never import checks, the plan, the CLI or the sandbox; the plan never imports
the CLI or the sandbox; no module imports the entry point `hal_provision.cli.main` (shared
command-line helpers live in `hal_provision.cli.common`) and nothing below the CLI imports it;
the programs the roles copy onto nodes (`hal_provision.node`) import nothing of the controller;
and the rooms of the house (each package or module directly under hal_provision) import each
other without a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "hal_provision"


def _imports(path: Path) -> set[str]:
    """Absolute names of the hal_provision modules a file imports (anywhere in it)."""
    module = ".".join(path.relative_to(PKG.parent).with_suffix("").parts)
    return _imports_of(path.read_text(), module, path.name == "__init__.py")


def _imports_of(text: str, module: str, is_package: bool = False) -> set[str]:
    """The same for the source TEXT of MODULE (a dotted name under hal_provision)."""
    package = module if is_package else module.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(text)):
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


@pytest.mark.parametrize(
    "path",
    [p for p in FILES if p not in (PKG / "cli" / "main.py", PKG / "cli" / "__main__.py")],
    ids=lambda p: str(p.relative_to(PKG)),
)
def test_nothing_imports_the_cli_entry_point(path):
    assert not _under(_imports(path), "hal_provision.cli.main"), (
        f"{path.name} imports hal_provision.cli.main: use cli.common"
    )


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


# ---- the rules of the reshaped house --------------------------------------------------------


def _room(name: str) -> str | None:
    """The room of an imported name: the package or module directly under hal_provision."""
    parts = name.split(".")
    if len(parts) < 2 or parts[0] != "hal_provision":
        return None
    return parts[1] if (PKG / parts[1]).is_dir() or (PKG / f"{parts[1]}.py").is_file() else None


def _room_of(path: Path) -> str:
    rel = path.relative_to(PKG)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


@pytest.mark.parametrize("path", sorted((PKG / "checks").rglob("*.py")), ids=lambda p: p.name)
def test_checks_import_only_the_model_and_hostlists(path):
    allowed = ("hal_provision.model", "hal_provision.hostlist", "hal_provision.findings", "hal_provision.checks")
    names = {n for n in _imports(path) if n != "hal_provision"}
    assert names == set().union(*(_under(names, m) for m in allowed)), sorted(names)


@pytest.mark.parametrize("path", sorted((PKG / "render").rglob("*.py")), ids=lambda p: p.name)
def test_renderers_never_import_checks(path):
    assert not _under(_imports(path), "hal_provision.checks")


BELOW_THE_CLI = (
    "model",
    "checks",
    "render",
    "plan",
    "sandbox",
    "discovery",
    "node",
    "compose",
    "hostlist",
    "findings",
    "loader",
    "tools",
    "update_policy",
    "inventory",
    "pull",
    "files",
    "release",
    "health_deep",
    "ansible_collections",
    "images",
    "bmc",
    "hostkeys",
)


def _imports_the_cli(names: set[str]) -> set[str]:
    return _under(names, "hal_provision.cli")


@pytest.mark.parametrize(
    "path", [p for p in FILES if _room_of(p) in BELOW_THE_CLI], ids=lambda p: str(p.relative_to(PKG))
)
def test_nothing_below_the_cli_imports_it(path):
    assert not _imports_the_cli(_imports(path))


def test_every_room_is_under_a_rule():
    """Each package or module directly under hal_provision is the CLI or below it."""
    rooms = {_room_of(p) for p in FILES} - {"__init__", "cli"}
    assert rooms <= set(BELOW_THE_CLI), sorted(rooms - set(BELOW_THE_CLI))


@pytest.mark.parametrize(
    "text",
    [
        "from ..cli import common\n",
        "from ..cli.common import checked\n",
        "import hal_provision.cli.runner\n",
        "from hal_provision.cli import fleet\n",
        "def later():\n    from ...cli.common import console\n",
    ],
    ids=["relative", "relative-module", "absolute", "absolute-from", "inside-a-function"],
)
@pytest.mark.parametrize("module", ["hal_provision.inventory.source", "hal_provision.pull.bundle"])
def test_the_rule_catches_an_import_of_the_cli(module, text):
    """A module of inventory/ or pull/ that imported the CLI, in any of the ways Python allows,
    is flagged by the rule above; the same text without that import is not."""
    if "..." in text:
        module += ".deeper"  # three dots from a module one level further down
    assert _imports_the_cli(_imports_of(text, module))
    assert not _imports_the_cli(_imports_of("from ..hostlist import fold\nimport json\n", module))


@pytest.mark.parametrize("path", sorted((PKG / "node").rglob("*.py")), ids=lambda p: str(p.relative_to(PKG)))
def test_node_programs_import_nothing_of_the_controller(path):
    names = {n for n in _imports(path) if n != "hal_provision"}
    assert names == _under(names, "hal_provision.node"), sorted(names - _under(names, "hal_provision.node"))


def test_no_import_cycle_between_rooms():
    edges: dict[str, set[str]] = {}
    for path in FILES:
        here = _room_of(path)
        targets = {r for r in map(_room, _imports(path)) if r is not None and r != here}
        edges.setdefault(here, set()).update(targets)
    state: dict[str, str] = {}

    def visit(room: str, trail: list[str]) -> None:
        state[room] = "open"
        for nxt in sorted(edges.get(room, ())):
            assert state.get(nxt) != "open", "import cycle: " + " -> ".join([*trail[trail.index(nxt) :], nxt])
            if nxt not in state:
                visit(nxt, [*trail, nxt])
        state[room] = "done"

    for room in sorted(edges):
        if room not in state:
            visit(room, [room])
