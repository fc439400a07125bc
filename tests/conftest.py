"""Shared fixtures: the embedded HAL description, edited copies of it, and checking them."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Callable

import pytest

from hal_provision.loader import REPO_DEFAULT, Loaded
from hal_provision.loader import validate

HAL_TEXT = REPO_DEFAULT.read_text(encoding="utf-8")
TWOGEN = Path(__file__).resolve().parent / "data" / "clusters" / "x86-twogen.yml"


def _apply(text: str, steps) -> str:
    for step in steps:
        if callable(step):
            text = step(text)
            continue
        old, new = step
        # Exactly once: when the embedded description changes, a test fails loudly instead of
        # silently testing an unchanged file.
        assert text.count(old) == 1, f"expected exactly one {old!r} in the text"
        text = text.replace(old, new)
    return text


def hal_with(*steps):
    """The model of the embedded HAL description with `steps` applied (as _apply takes them)."""
    from hal_provision.loader import load_text

    return load_text(_apply(HAL_TEXT, steps), "c.yml").model


class SystemdRoot:
    """A root holding the system's units (/usr/lib/systemd/system) for `systemd-analyze verify
    --root` of rendered units: unit(NAME, TEXT) writes one under /etc/systemd/system, program(PATH)
    puts an executable stand-in at PATH (verify checks ExecStart), verify(*UNITS) runs it."""

    def __init__(self, tmp_path: Path, analyze: str):
        import shutil

        self.root, self.analyze = tmp_path / "root", analyze
        shutil.copytree("/usr/lib/systemd/system", self.root / "usr/lib/systemd/system", symlinks=True)
        (self.root / "etc/systemd/system").mkdir(parents=True)

    def unit(self, name: str, text: str) -> None:
        (self.root / "etc/systemd/system" / name).write_text(text)

    def program(self, path: str) -> None:
        program = self.root / path.lstrip("/")
        program.parent.mkdir(parents=True, exist_ok=True)
        program.write_text("#!/bin/sh\n")
        program.chmod(0o755)

    def verify(self, *units: str):
        import subprocess

        return subprocess.run(
            [self.analyze, "verify", "--man=no", f"--root={self.root}", *units], capture_output=True, text=True
        )


def _line_col(text: str, marker: str, column_marker: str | None = None) -> tuple[int, int]:
    lines = text.splitlines()
    [number] = [n for n, line in enumerate(lines, 1) if marker in line]
    line = lines[number - 1]
    return number, (line.index(column_marker) if column_marker else len(line) - len(line.lstrip())) + 1


@pytest.fixture
def position() -> Callable[..., tuple[int, int]]:
    """position(text, marker, column_marker=None): 1-based line of the one line containing
    `marker`, and the column of `column_marker` there (of its first non-blank when None)."""
    return _line_col


@pytest.fixture
def hal_text() -> str:
    return HAL_TEXT


@pytest.fixture
def edited() -> Callable[..., str]:
    """edited(step, ...): the HAL description after each step, an (old, new) replacement or a
    function text -> text."""
    return lambda *steps: _apply(HAL_TEXT, steps)


@pytest.fixture
def check_file(tmp_path: Path) -> Callable[[str], tuple[Path, Loaded]]:
    """Write a description to a file and run what every command runs first: load, then check."""

    def run(text: str) -> tuple[Path, Loaded]:
        path = tmp_path / "cluster.yml"
        path.write_text(text, encoding="utf-8")
        return path, validate(path)

    return run


@pytest.fixture
def finds(check_file, edited) -> Callable[..., None]:
    """finds(mutation, level, path, message): the edited HAL description yields a finding at
    `path` (dotted) whose message contains `message`, of exactly `level`, located in the file."""

    def run(mutation, level, path: str, message: str) -> None:
        file, loaded = check_file(edited(*mutation))
        matching = [f for f in loaded.findings if f.dotted == path and message in f.message]
        assert matching, "\n".join(f.format() for f in loaded.findings)
        assert {f.level for f in matching} == {level}
        assert all(f.file == str(file) and f.line for f in matching)

    return run


@pytest.fixture
def render_rejects(tmp_path: Path) -> Callable[[str, str], None]:
    """render_rejects(text, dotted): `hal-provision render` of the description `text` exits
    non-zero naming the file (with its line) and the field `dotted`, prints no traceback and
    writes nothing."""
    from typer.testing import CliRunner

    from hal_provision.cli.main import app

    def run(text: str, dotted: str) -> None:
        bad = tmp_path / "cluster.yml"
        bad.write_text(text)
        out = tmp_path / "out"
        result = CliRunner().invoke(app, ["render", str(bad), "-o", str(out)])
        assert result.exit_code != 0
        assert f"{bad}:" in result.output and dotted in result.output, result.output
        assert "Traceback" not in result.output
        assert not out.exists()

    return run


def _checked_model(loaded: Loaded):
    """The model of a description that loads and passes every check."""
    from hal_provision.findings import has_errors

    assert loaded.model is not None and not has_errors(loaded.findings), [f.format() for f in loaded.findings]
    return loaded.model


@pytest.fixture(scope="session")
def hal():
    """The embedded HAL description as a model, checked; tests that edit it work on a copy
    (`hal_with`, `model_copy`): every test module shares this one."""
    from hal_provision.loader import validate_text

    return _checked_model(validate_text(HAL_TEXT, "hal.yml"))


@pytest.fixture(scope="session")
def twogen():
    """tests/data/clusters/x86-twogen.yml (two hardware generations) as a model, checked."""
    return _checked_model(validate(TWOGEN))


@pytest.fixture(scope="session")
def files(hal) -> dict[str, str]:
    """HAL's rendered tree: relative path -> text."""
    from hal_provision.render import render_all

    return render_all(hal)


@pytest.fixture(scope="session")
def scale():
    """bench/scale.py as a module: its generator of HAL-shaped clusters of any size."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_scale", REPO_DEFAULT.parents[2] / "bench" / "scale.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def templar(variables: dict):
    """expr -> its value under `variables`, templated by Ansible itself (a role's defaults and
    vars, as a task would see them); skips where Ansible is not installed."""
    template = pytest.importorskip("ansible.template")
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import init_plugin_loader

    with warnings.catch_warnings():  # a second call says it was configured already: so it was
        warnings.simplefilter("ignore", UserWarning)
        init_plugin_loader()
    trusted = {k: template.trust_as_template(v) if isinstance(v, str) else v for k, v in variables.items()}
    t = template.Templar(loader=DataLoader(), variables=trusted)
    return lambda expr: t.template(template.trust_as_template("{{ %s }}" % expr))
