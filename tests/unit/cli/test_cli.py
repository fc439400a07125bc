"""The command line, run as users run it: a separate process, exit codes, stdout and stderr."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXIT_OK, EXIT_FINDINGS, EXIT_UNUSABLE = 0, 1, 2
REPO = Path(__file__).resolve().parents[3]


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment with this checkout's package first on the path: an editable
    install of another checkout must not answer for this one."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, PYTHONPATH=path, **extra)


def hal_provision(*args: str, cwd: Path, command: list[str] | None = None) -> subprocess.CompletedProcess:
    env = child_env(COLUMNS="200", PYTHONIOENCODING="utf-8")
    result = subprocess.run(
        [*(command or [sys.executable, "-m", "hal_provision.cli"]), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
    )
    assert "Traceback" not in result.stderr + result.stdout
    return result


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def write(tmp_path):
    def write_file(text: str, name: str = "cluster.yml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write_file


def test_validate_embedded_default(tmp_path):
    result = hal_provision("validate", cwd=tmp_path)
    assert result.returncode == EXIT_OK
    assert re.fullmatch(r".*cluster\.yml: cluster 'hal' is valid\n", result.stdout)
    assert result.stderr == ""


@pytest.mark.skipif(shutil.which("hal-provision") is None, reason="console script not on PATH")
def test_installed_console_script_validates(tmp_path):
    result = hal_provision("validate", cwd=tmp_path, command=[shutil.which("hal-provision")])
    assert result.returncode == EXIT_OK and "is valid" in result.stdout


def test_semantic_error_exits_1_with_located_finding(tmp_path, edited, write, position):
    text = edited(("    count: 16 ", "    count: 15 "))
    path = write(text)
    result = hal_provision("validate", str(path), cwd=tmp_path)
    assert result.returncode == EXIT_FINDINGS
    line, col = position(text, "count: 15", "count")
    assert result.stderr.splitlines() == [
        f"{path}:{line}:{col}: error: nodes[6].count: count is 15 but hosts 'hal[01-16]' names 16; "
        "fix the hostlist or set count to match",
        "1 error, 0 warnings, 0 infos",
    ]
    assert result.stdout == ""


def test_warnings_alone_do_not_fail(tmp_path, edited, write):
    path = write(edited(("      default: true\n", "      default: false\n")))
    result = hal_provision("validate", str(path), cwd=tmp_path)
    assert result.returncode == EXIT_OK
    assert ": warning: slurm.partitions: no partition has default: true" in result.stderr
    assert "is valid" in result.stdout


UNUSABLE = [
    pytest.param(
        [("    count: 16 ", "\tcount: 16 ")],
        ("\tcount", "\t"),
        r"YAML syntax: .*'\\t' that cannot start",
        id="yaml-syntax",
    ),
    pytest.param(
        [("    count: 16 ", "    cuont: 16 ")],
        ("cuont", "cuont"),
        r"nodes\[6\]\.cuont: unknown key 'cuont'; did you mean 'count'\?",
        id="unknown-key",
    ),
    pytest.param(
        [("    count: 16 ", "    count: many ")],
        ("count: many", "count"),
        r"nodes\[6\]\.count: Input should be a valid integer",
        id="wrong-type",
    ),
    pytest.param(None, None, r"no such file", id="missing-file"),
]


@pytest.mark.parametrize(("mutation", "where", "message"), UNUSABLE)
def test_unusable_input_exits_2(tmp_path, edited, write, position, mutation, where, message):
    text = edited(*mutation) if mutation else None
    path = write(text) if mutation else tmp_path / "missing.yml"
    result = hal_provision("validate", str(path), cwd=tmp_path)
    assert result.returncode == EXIT_UNUSABLE
    location = "{}:{}:{}".format(path, *position(text, *where)) if where else str(path)
    assert re.match(re.escape(f"{location}: error: ") + message, result.stderr), result.stderr
    assert result.stdout == ""


BAD = [
    pytest.param([("    count: 16 ", "    count: 15 ")], EXIT_FINDINGS, id="semantic-error"),
    pytest.param([("    count: 16 ", "\tcount: 16 ")], EXIT_UNUSABLE, id="yaml-syntax"),
]


@pytest.mark.parametrize(("mutation", "exit_code"), BAD)
def test_render_of_bad_file_creates_nothing(tmp_path, edited, write, mutation, exit_code):
    path = write(edited(*mutation))
    before = sorted(p.name for p in tmp_path.iterdir())
    result = hal_provision("render", str(path), "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert result.returncode == exit_code
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no output dir, no staging left over


@pytest.mark.parametrize(("mutation", "exit_code"), BAD)
def test_render_of_bad_file_keeps_previous_render(tmp_path, edited, write, mutation, exit_code):
    out = tmp_path / "out"
    first = hal_provision("render", "-o", str(out), cwd=tmp_path)
    assert first.returncode == EXIT_OK
    previous = snapshot(out)
    assert any(name.endswith("slurm.conf") for name in previous)
    path = write(edited(*mutation))
    before = sorted(p.name for p in tmp_path.iterdir())
    result = hal_provision("render", str(path), "-o", str(out), cwd=tmp_path)
    assert result.returncode == exit_code
    assert snapshot(out) == previous
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_schema_is_json_that_forbids_unknown_keys(tmp_path):
    result = hal_provision("schema", cwd=tmp_path)
    assert result.returncode == EXIT_OK
    schema = json.loads(result.stdout)
    assert schema["additionalProperties"] is False
    assert {"cluster", "networks", "hardware", "nodes", "services", "slurm"} <= set(schema["required"])
    objects = {name: d for name, d in schema["$defs"].items() if d.get("type") == "object"}
    assert {"NodeGroup", "HardwareProfile", "Partition", "VirtualPartition"} <= set(objects)
    assert {name for name, d in objects.items() if d.get("additionalProperties") is not False} == set()


def test_show_prints_hal_totals(tmp_path):
    result = hal_provision("show", cwd=tmp_path)
    assert result.returncode == EXIT_OK
    lines = result.stdout.splitlines()
    start = lines.index("Totals (compute nodes)")
    cells = [[c.strip() for c in re.split(r"[│┃]", line)[1:-1]] for line in lines[start : start + 6]]
    header, row = [c for c in cells if c][:2]
    totals = dict(zip(header, row))
    assert (totals["nodes"], totals["GPUs"], totals["cores"]) == ("16", "64", "640")


def test_show_counts_and_lists_the_composable_pool(tmp_path):
    """The hosts hold no GPUs of their own; the active layout attaches the pool's eight."""
    result = hal_provision(
        "show", str(Path(__file__).resolve().parents[2] / "data/clusters/x86-composable.yml"), cwd=tmp_path
    )
    assert result.returncode == EXIT_OK, result.stderr
    out = result.stdout
    rows = {
        cells[0]: cells
        for line in out.splitlines()
        if (cells := [c.strip() for c in re.split(r"[│┃]", line)[1:-1]]) and cells[0]
    }
    assert rows["compute"][-1] == "4 (pool)" and rows["gpu"][3] == "8"
    start = out.splitlines().index("Totals (compute nodes)")
    assert [c.strip() for c in re.split(r"[│┃]", out.splitlines()[start + 4])[1:-1]][:2] == ["2", "8"]
    assert "Composable GPU pools (layout even active)" in out
    assert rows["chassis1"][1:] == ["8x v100 16 GiB", "hal[01-02]", "6", "hal[01-02]: 4", "0"], rows["chassis1"]


def test_finding_at_line_100_prints_its_line_not_an_emoji(capsys):
    """Rich reads ':100:' as an emoji code; a finding at line 100 must print 'file:100:5'."""
    from hal_provision.cli.common import print_findings
    from hal_provision.findings import error

    print_findings([error(("nodes", 3), "bad").located("cluster.yml", 100, 5)])
    assert "cluster.yml:100:5: error: nodes[3]: bad" in capsys.readouterr().err


# ---- start-up: what a command imports --------------------------------------------------------
# `hal-provision validate` must not wait for the renderers or the libraries only other commands
# use (bench/cli_startup.py times it). These tests hold the imports, not the time.

SUB_COMMAND_LIBRARIES = (
    "grafana_foundation_sdk",
    "ldap3",
    "matplotlib",
    "graphviz",
    "pynvml",
    "ansible",
    "hal_provision.render",
    "hal_provision.sandbox",
    "hal_provision.plan",
    "hal_provision.discovery",
    "hal_provision.node.recipes",
    "hal_provision.cli.storage",
    "hal_provision.node.storage_bench",
    "hal_provision.node.dl_io_bench",
    "hal_provision.cli.show",
)


MODULES_AFTER = """
import json, sys
from hal_provision.cli.main import main
out, sys.argv = sys.argv[1], ["hal-provision", *sys.argv[2:]]
try:
    main()
except SystemExit:
    pass
with open(out, "w") as f:
    json.dump(sorted(sys.modules), f)
"""


def modules_after(*argv: str, cwd: Path) -> set[str]:
    """The modules a fresh interpreter holds after `hal-provision ARGV` (run through `main`)."""
    out = cwd / "modules.json"
    subprocess.run(
        [sys.executable, "-c", MODULES_AFTER, str(out), *argv],
        cwd=cwd,
        env=child_env(),
        capture_output=True,
        check=True,
        timeout=120,
    )
    return set(json.loads(out.read_text()))


def loaded(modules: set[str], names) -> set[str]:
    return {m for m in modules for n in names if m == n or m.startswith(n + ".")}


def test_importing_the_cli_imports_no_sub_command(tmp_path):
    from hal_provision.cli.main import LAZY

    modules = modules_after("version", cwd=tmp_path)
    assert loaded(modules, SUB_COMMAND_LIBRARIES) == set()
    assert loaded(modules, [module for module, _attribute, _line in LAZY.values()]) == set()
    assert loaded(modules, ["hal_provision.model", "hal_provision.cli.common"]) == set()  # `version` needs neither


def test_help_lists_every_command_without_importing_one(tmp_path):
    from hal_provision.cli.main import LAZY

    result = hal_provision("--help", cwd=tmp_path)
    assert result.returncode == EXIT_OK
    listed = {line.split()[1] for line in result.stdout.splitlines() if re.match(r"│ [a-z]", line)}
    assert {"validate", "render", "show", "schema", "version", *LAZY} <= listed
    modules = modules_after("--help", cwd=tmp_path)
    assert loaded(modules, [module for module, _attribute, _line in LAZY.values()]) == set()


def test_validate_imports_only_what_it_needs(tmp_path):
    modules = modules_after("validate", cwd=tmp_path)
    assert "hal_provision.checks.monitoring" in modules  # the checks ran
    assert loaded(modules, SUB_COMMAND_LIBRARIES) == set()
    # The embedded description takes libyaml's fast path; ruamel reads only a file with errors.
    # Without findings validate prints one plain line: rich is for findings and tables.
    assert loaded(modules, ["ruamel", "rich"]) == set()


def test_validate_with_findings_imports_no_renderer(tmp_path, edited, write):
    path = write(edited(("      default: true\n", "      default: false\n")))  # a warning to locate
    assert loaded(modules_after("validate", str(path), cwd=tmp_path), SUB_COMMAND_LIBRARIES) == set()


def test_each_lazy_sub_command_is_listed_with_its_own_help():
    """The line `--help` lists for a sub-command before importing it is the first paragraph
    of the help that the loaded command shows (whitespace aside: the listing wraps it)."""
    import inspect

    from hal_provision.cli.main import LAZY, import_command

    for name, (_module, _attribute, line) in LAZY.items():
        command = import_command(name)
        assert command.name == name
        first = inspect.cleandoc(command.help or "").split("\n\n")[0]
        assert " ".join(first.split()) == line, name


def test_verify_runs_only_the_read_only_tests_unless_asked():
    from hal_provision.cli.verify import marker_expression

    assert marker_expression() == "not changes and not faults"
    assert marker_expression(changes=True) == "not faults"
    assert marker_expression(faults=True) == "not changes"
    assert marker_expression(faults=True, changes=True) is None


def test_render_summarises_the_tree_by_where_its_files_go():
    from hal_provision.cli.main import areas

    files = {
        "inventory/hosts.yml": "",
        "inventory/storage.yml": "",
        "files/etc/hosts": "",
        "files/etc/slurm/slurm.conf": "",
        "files/etc/slurm/gres.conf": "",
        "files/opt/hal/portal/apps/jupyter/launch.sh": "",
        "files/var/www/ood/apps/x/form.yml": "",
        "gpfs/tuning.json": "",
    }
    assert areas(files) == {"etc": 1, "etc/slurm": 2, "gpfs": 1, "inventory": 2, "opt/hal/portal": 1, "var/www/ood": 1}
