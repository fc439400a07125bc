"""The hal.provision.cluster inventory plugin (hal_provision/ansible_collections) against the
rendered inventory: `ansible-inventory --list` of a plugin source equals, byte for byte, that
of the rendered inventory directory, for HAL and for x86-twogen; hal_rendered_dir is evaluated
as the rendered inventory's is; a description with errors is an Ansible error naming
file:line:column, never a traceback; the cache is used while the description is unchanged.

Every Ansible run uses the repository's ansible.cfg (its collections_path finds the plugin) and
fails on an unparsed source, so a broken plugin cannot pass as an empty inventory.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hal_provision.inventory.source import inventory_files
from hal_provision.loader import default_path, validate
from hal_provision.render import render_all
from hal_provision.render.writer import write_tree

REPO = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
TWOGEN = REPO / "tests" / "data" / "clusters" / "x86-twogen.yml"
CASES = {"hal": default_path(), "x86-twogen": TWOGEN}

pytestmark = pytest.mark.skipif(
    not (BIN / "ansible-inventory").is_file(),
    reason="Ansible is not installed beside this Python (pip install .[sandbox])",
)


def ansible(tool: str, *args: str, check: bool = True, **extra_env: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "HAL_INVENTORY_"))}
    env.update(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED="1",
        **extra_env,
    )
    proc = subprocess.run([str(BIN / tool), *args], capture_output=True, text=True, env=env, cwd=REPO, check=False)
    if check and proc.returncode != 0:
        pytest.fail(f"{tool} {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def listed(source: Path, *extra: str) -> str:
    return ansible("ansible-inventory", "-i", str(source), "--list", *extra).stdout


def source_file(path: Path, cluster: Path, **options: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        "plugin: hal.provision.cluster",
        f"cluster_file: {cluster}",
        f"model_cache_dir: {path.parent / 'cache'}",
        *(f"{k}: {v}" for k, v in options.items()),
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def rendered_trees(tmp_path_factory) -> dict[str, Path]:
    """Each description's rendered tree, as `hal-provision render` writes it."""
    trees = {}
    for name, cluster in CASES.items():
        trees[name] = tmp_path_factory.mktemp(name) / "rendered"
        write_tree(render_all(validate(cluster).model), trees[name])
    return trees


@pytest.fixture(params=sorted(CASES))
def case(request, rendered_trees) -> tuple[Path, Path]:
    """(cluster file, rendered tree) of one description."""
    return CASES[request.param], rendered_trees[request.param]


def test_inventory_files_are_every_rendered_inventory_file():
    """The plugin renders inventory/*.yml itself: a new inventory file in render_all must be
    one it renders too."""
    for cluster in CASES.values():
        model = validate(cluster).model
        rendered = {p: text for p, text in render_all(model).items() if p.startswith("inventory/")}
        assert inventory_files(model) == rendered


def test_plugin_lists_what_the_rendered_inventory_lists(case, tmp_path):
    cluster, rendered = case
    source = source_file(tmp_path / "inventory" / "cluster.hal.yml", cluster)
    by_plugin, by_files = listed(source), listed(rendered / "inventory")
    assert json.loads(by_plugin)["_meta"]["hostvars"], "no hosts"
    assert by_plugin == by_files


def test_rendered_dir_option_is_absolute_and_all_else_equal(case, tmp_path):
    cluster, rendered = case
    source = source_file(tmp_path / "src" / "cluster.hal.yml", cluster, rendered_dir="../rendered/files")
    by_plugin, by_files = json.loads(listed(source)), json.loads(listed(rendered / "inventory"))
    hostvars = by_plugin["_meta"]["hostvars"]
    assert {v.pop("hal_rendered_dir") for v in hostvars.values()} == {str(tmp_path / "rendered" / "files")}
    for v in by_files["_meta"]["hostvars"].values():
        v.pop("hal_rendered_dir")
    assert by_plugin == by_files


def test_the_repository_source_is_hal_with_its_rendered_tree(rendered_trees, tmp_path):
    """inventory/hal.yml: HAL's inventory without a rendered one, with the files of `hal-provision
    render inventory/hal/cluster.yml -o rendered/hal`."""
    rendered = rendered_trees["hal"]
    source = REPO / "inventory" / "hal.yml"
    by_plugin = json.loads(
        ansible("ansible-inventory", "-i", str(source), "--list", HAL_INVENTORY_CACHE_DIR=str(tmp_path)).stdout
    )
    by_files = json.loads(listed(rendered / "inventory"))
    for listing, expected in (
        (by_plugin, str(REPO / "rendered" / "hal" / "files")),
        (by_files, "{{ inventory_dir }}/../files"),
    ):
        assert {v.pop("hal_rendered_dir") for v in listing["_meta"]["hostvars"].values()} == {expected}
    assert by_plugin == by_files


def test_plugin_documentation_is_valid():
    doc = json.loads(ansible("ansible-doc", "-t", "inventory", "--json", "hal.provision.cluster").stdout)
    options = doc["hal.provision.cluster"]["doc"]["options"]
    assert {"cluster_file", "rendered_dir", "model_cache", "model_cache_dir"} <= set(options)


def test_default_rendered_dir_is_beside_the_source_as_beside_hosts_yml(tmp_path):
    """The template is trusted and evaluated: inventory_dir is the source file's directory."""
    source = source_file(tmp_path / "out" / "inventory" / "cluster.hal.yml", TWOGEN)
    proc = ansible(
        "ansible",
        "-i",
        str(source),
        "tg01",
        "-c",
        "local",
        "-m",
        "ansible.builtin.debug",
        "-a",
        "msg={{ hal_rendered_dir }}",
    )
    result = json.loads(proc.stdout.split("=>", 1)[1])
    assert result["msg"] == f"{tmp_path / 'out' / 'inventory'}/../files"


@pytest.mark.parametrize(
    "edit, where",
    [
        (("  domain: twogen", "  colour: blue\n  domain: twogen"), "cluster.colour: unknown key 'colour'"),
        (("nodes: tg[01-08]", "nodes: tg[01-09]"), "slurm.partitions[0].nodes: partition 'gpu' names tg09"),
        (("cluster:\n", "cluster:\n  name: [oops\n"), "YAML syntax"),
    ],
    ids=["schema", "check", "yaml"],
)
def test_errors_are_ansible_errors_with_file_line_column(tmp_path, edit, where):
    text = TWOGEN.read_text()
    assert edit[0] in text
    broken = tmp_path / "cluster.yml"
    broken.write_text(text.replace(edit[0], edit[1], 1))
    expected = [f.format() for f in validate(broken).findings if f.level.value == "error"]
    assert expected and any(where in line for line in expected)
    source = source_file(tmp_path / "cluster.hal.yml", broken)
    proc = ansible("ansible-inventory", "-i", str(source), "--list", check=False)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr + proc.stdout
    for line in expected:
        assert re.match(rf"{re.escape(str(broken))}:\d+(:\d+)?: error: ", line)
        assert line in proc.stderr
    assert not list((tmp_path / "cache").glob("*")), "a description with errors was cached"


def test_misspelt_option_is_an_error(tmp_path):
    source = tmp_path / "cluster.hal.yml"
    source.write_text(f"plugin: hal.provision.cluster\nclustr_file: {TWOGEN}\n")
    proc = ansible("ansible-inventory", "-i", str(source), "--list", check=False)
    assert proc.returncode != 0
    assert "unknown option 'clustr_file' (did you mean 'cluster_file'?)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cache_is_used_until_the_description_changes(tmp_path):
    cluster = tmp_path / "cluster.yml"
    cluster.write_text(TWOGEN.read_text())
    source = source_file(tmp_path / "cluster.hal.yml", cluster)
    cache = tmp_path / "cache"

    def run(*extra: str) -> tuple[str, str]:
        listing = tmp_path / "list.json"
        proc = ansible("ansible-inventory", "-i", str(source), "--list", "--output", str(listing), "-vvv", *extra)
        [how] = re.findall(r"hal\.provision\.cluster: .* (from the cache|loaded)$", proc.stdout + proc.stderr, re.M)
        return how, listing.read_text()

    how, first = run()
    assert how == "loaded"
    [entry] = cache.glob("*.marshal")
    assert run() == ("from the cache", first)
    assert run("--flush-cache") == ("loaded", first)

    cluster.write_text(cluster.read_text().replace("tg[01-08]", "tg[01-07]", 1))  # partition gpu loses tg08
    how, changed = run()
    assert how == "loaded" and changed != first
    assert "tg08" not in json.loads(changed)["partition_gpu"]["hosts"]
    [new_entry] = cache.glob("*.marshal")  # the stale entry is gone
    assert new_entry != entry
    assert run() == ("from the cache", changed)
