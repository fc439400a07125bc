"""Hostile descriptions: each is a located error, found within 5 CPU seconds and 1 GiB of
memory, with no traceback and nothing written anywhere: deep nesting (the C and the pure-Python
YAML builders both recurse per level), aliases that stand for a huge tree, a hostlist of a
hundred million hosts, and a '.' or '..' segment in every path field of the schema (a rendered
file, mount or prefix led outside where it belongs)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import AfterValidator, BaseModel
from typer.testing import CliRunner

from hal_provision.cli.main import app
from hal_provision.model import Cluster
from hal_provision.model.base import no_dot_segments
from hal_provision.render.writer import WriteError, write_tree

REPO = Path(__file__).resolve().parents[3]
CPU_SECONDS = 5
MEMORY = 1 << 30

LAUGHS = "".join(
    f"{a}: &{a} [{', '.join([f'*{p}'] * 9 if p else ['lol'] * 9)}]\n" for a, p in zip("abcdefghi", [None, *"abcdefgh"])
)
HOSTILE = {
    "flow-sequence-200000-deep": ("[" * 200_000 + "]" * 200_000 + "\n", "nested deeper than 64 levels", 1),
    "mapping-3000-deep": (
        "".join("  " * i + "k:\n" for i in range(3000)) + "  " * 3000 + "x: 1\n",
        "nested deeper than 64 levels",
        65,
    ),
    "billion-laughs": (LAUGHS, "once its aliases (*name) are expanded", 7),
}


def _limited():
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def _render_bounded(tmp_path: Path, text: str) -> tuple[subprocess.CompletedProcess, Path]:
    """`hal-provision render FILE -o OUT` in a fresh process limited to CPU_SECONDS and MEMORY, in
    an empty working directory, HOME and TMPDIR; (the process, the directory holding them)."""
    work = tmp_path / "work"
    for sub in ("home", "tmp", "cwd"):
        (work / sub).mkdir(parents=True)
    (tmp_path / "cluster.yml").write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "HAL_PROVISION_CACHE"))}
    env.update(HOME=str(work / "home"), TMPDIR=str(work / "tmp"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "hal_provision.cli",
            "render",
            str(tmp_path / "cluster.yml"),
            "-o",
            str(work / "cwd" / "out"),
        ],
        cwd=work / "cwd",
        env=env,
        preexec_fn=_limited,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return proc, work


def _nothing_written(work: Path) -> list[str]:
    return sorted(str(p.relative_to(work)) for p in work.rglob("*") if p.name not in ("home", "tmp", "cwd"))


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_yaml_is_a_located_error_within_bounds(tmp_path, name):
    text, message, line = HOSTILE[name]
    proc, work = _render_bounded(tmp_path, text)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, f"exit {proc.returncode} (-{resource.RLIMIT_CPU}: out of CPU time)\n{output[-2000:]}"
    assert "Traceback" not in output and message in output, output[-2000:]
    assert f"cluster.yml:{line}:" in output, output[-2000:]
    assert _nothing_written(work) == []


def test_a_hundred_million_hosts_are_refused_at_their_line(tmp_path):
    text = (REPO / "inventory/hal/cluster.yml").read_text()
    assert text.count("    hosts: hal[01-16]") == 1
    text = text.replace("    hosts: hal[01-16]", '    hosts: "n[0-99999999]"')
    line = text[: text.index("n[0-99999999]")].count("\n") + 1
    proc, work = _render_bounded(tmp_path, text)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in output, output[-2000:]
    assert (
        f"cluster.yml:{line}:5: error: nodes[6].hosts: hostlist expression 'n[0-99999999]' names 100,000,000 "
        "hosts, more than the 1,000,000 a description may" in output
    )
    assert _nothing_written(work) == []


def test_many_groups_together_are_refused_before_any_is_built():
    from hal_provision.loader import load_text

    groups = "".join(f"  - {{name: g{i}, role: compute, hosts: 'g{i}n[1-600000]', hardware: c}}\n" for i in range(3))
    loaded = load_text("cluster: {name: x, domain: x.org}\nnodes:\n" + groups, "c.yml")
    [finding] = [f for f in loaded.findings if "together" in f.message]
    assert (finding.dotted, finding.line) == ("nodes", 2)
    assert "the node groups name 1,800,000 hosts together, more than the 1,000,000" in finding.message


# ---- '.' and '..' in every path field ---------------------------------------------------------


def _is_path(annotation) -> bool:
    if typing.get_origin(annotation) is typing.Annotated:
        if any(isinstance(m, AfterValidator) and m.func is no_dot_segments for m in annotation.__metadata__):
            return True
        return _is_path(typing.get_args(annotation)[0])
    return any(_is_path(a) for a in typing.get_args(annotation))


def _models(annotation) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in typing.get_args(annotation) for m in _models(a)]


def _path_fields(cls=Cluster, seen=None) -> set[tuple[str, str]]:
    """(model, field) for every field of the schema that holds a path."""
    seen = set() if seen is None else seen
    if cls in seen:
        return set()
    seen.add(cls)
    out = set()
    for name, info in cls.model_fields.items():
        if _is_path(info.annotation) or any(
            isinstance(m, AfterValidator) and m.func is no_dot_segments for m in info.metadata
        ):
            out.add((cls.__name__, name))
        for model in _models(info.annotation):
            out |= _path_fields(model, seen)
    return out


PATH_FIELDS = sorted(_path_fields())
DESCRIPTIONS = sorted(
    [
        REPO / "inventory/hal/cluster.yml",
        *(REPO / "examples").glob("*.yml"),
        *(REPO / "tests/data/clusters").glob("*.yml"),
        *(REPO / "molecule").glob("*/cluster.yml"),
    ]
)


def _places(data, cls, path=()):
    """(model class, data path) of every mapping in DATA that validates as CLS or a model inside it."""
    if not isinstance(data, dict):
        return
    yield cls, path
    for key, value in data.items():
        info = cls.model_fields.get(key)
        models = _models(info.annotation) if info else []
        if not models:
            continue
        items = (
            value.items()
            if isinstance(value, dict) and not set(value) <= set(models[0].model_fields)
            else [(None, value)]
        )
        for index, item in items:
            here = (*path, key) if index is None else (*path, key, index)
            for i, element in enumerate(item) if isinstance(item, list) else [(None, item)]:
                target = [m for m in models if isinstance(element, dict) and set(element) <= set(m.model_fields)]
                if target:
                    yield from _places(element, target[0], here if i is None else (*here, i))
    for key, info in cls.model_fields.items():  # a section the description leaves out, added
        models = _models(info.annotation)
        if (
            key not in data
            and len(models) == 1
            and "list[" not in repr(info.annotation)
            and "dict[" not in repr(info.annotation)
        ):
            data[key] = {}
            yield from _places(data[key], models[0], (*path, key))
            del data[key]


def _a_place_for(model: str, field: str):
    """A description holding MODEL, with FIELD set there to a value with a '..' segment: (file
    name, text, the path to the field)."""
    for file in DESCRIPTIONS:
        data = yaml.safe_load(file.read_text())
        for cls, path in _places(data, Cluster):
            if cls.__name__ != model:
                continue
            node = data
            for part in path:
                node = node.setdefault(part, {}) if isinstance(node, dict) else node[part]
            annotation = cls.model_fields[field].annotation
            bad = "/dev/../etc/x"
            text = repr(annotation)
            node[field] = {"PATH": [bad]} if "dict[" in text else [bad] if "list[" in text else bad
            return file.name, yaml.safe_dump(data, sort_keys=False), (*path, field)
    return None


def test_the_schema_has_the_path_fields_it_should():
    """Every field this sweep knows as a path holds the segment check (a new path field is found here)."""
    assert len(PATH_FIELDS) >= 30
    assert {
        ("Software", "modulefiles_root"),
        ("Recipes", "prefix"),
        ("GpuDevice", "file"),
        ("Module", "paths"),
        ("GpuPool", "driver"),
        ("PortalApp", "tensorboard_logdir"),
    } <= set(PATH_FIELDS)


@pytest.mark.parametrize(("model", "field"), PATH_FIELDS, ids=[f"{m}.{f}" for m, f in PATH_FIELDS])
def test_a_dot_segment_in_every_path_field_is_a_located_error_and_nothing_is_written(tmp_path, model, field):
    place = _a_place_for(model, field)
    assert place is not None, f"no description in the repository holds a {model} to set {field} in"
    name, text, path = place
    (tmp_path / name).write_text(text)
    result = CliRunner().invoke(app, ["render", str(tmp_path / name), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    lines = [line for line in result.output.splitlines() if "'.' or '..' segment" in line]
    assert lines, result.output
    location, _, rest = lines[0].partition(": error: ")
    file, line, column = location.rsplit(":", 2)
    assert file == str(tmp_path / name) and int(line) > 0 and int(column) > 0
    assert "/dev/../etc/x" in text.splitlines()[int(line) - 1]  # the line that holds the value
    assert f".{field}" in "." + rest.split(":")[0]  # the dotted path names the field
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


@pytest.mark.parametrize("rel", ["../escape.txt", "etc/../../escape.txt", "/etc/escape.txt", "./x", ""])
def test_the_writer_refuses_a_path_outside_its_directory_and_writes_nothing(tmp_path, rel):
    with pytest.raises(WriteError, match="refusing to write"):
        write_tree({"etc/ok.conf": "ok\n", rel: "x\n"}, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
