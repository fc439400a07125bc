"""examples/: other sites' clusters, the files a new admin starts from.

Each validates without a single finding (no error, no warning), is listed in the README, and
names nothing of HAL's in what it renders. Their rendered trees are golden cases
(test_golden.py) and real slurmctld, slurmd -G and slurmdbd load them (tests/acceptance).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hal_provision.render import render_all
from hal_provision.loader import validate

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yml"))


def test_there_are_other_sites_clusters():
    assert len(EXAMPLES) >= 2, "examples/ holds at least two non-HAL clusters"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_validates_without_a_finding(path: Path):
    loaded = validate(path)
    assert loaded.model is not None
    assert not loaded.findings, "\n".join(f.format() for f in loaded.findings)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_is_listed_in_the_readme(path: Path):
    readme = (ROOT / "README.md").read_text()
    assert f"examples/{path.name}" in readme, f"README.md does not list examples/{path.name}"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_tree_names_nothing_of_hals(path: Path):
    model = validate(path).model
    leaks = [
        f"{rel}: {line.strip()}"
        for rel, text in render_all(model).items()
        for line in text.splitlines()
        if "/opt/hal" in line or re.search(r"\bHAL\b", line)
    ]
    assert not leaks, "\n".join(leaks[:20])


def test_campus_places_by_group_so_its_gpu_nodes_all_mount_home_and_apps():
    """The campus file names its hosts once; mounts, partitions and services follow the groups."""
    model = validate(ROOT / "examples" / "campus.yml").model
    text = (ROOT / "examples" / "campus.yml").read_text()
    assert "gpu[01-12]" in text and text.count("gpu[01-12]") == 2, "hosts once in nodes, once in the cabling"
    mounted = {m.mount_point: m.clients for m in model.storage.nfs.mounts}
    from hal_provision.hostlist import nodeset

    for point in ("/home", "/apps"):
        assert nodeset("gpu[01-12],cpu[01-24],login[1-2]") <= nodeset(mounted[point]), (point, mounted[point])
