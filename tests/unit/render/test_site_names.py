"""Another site's rendered tree carries its own names, not HAL's: what the toolkit installs
lives under cluster.prefix (default /opt/<cluster name>), and the Grafana datasource and
dashboard folder are named after the cluster. HAL's own tree keeps /opt/hal and its names (its
goldens)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from hal_provision.loader import load_text
from hal_provision.render import render_all

CLUSTERS = Path(__file__).parents[2] / "data" / "clusters"
# HAL as a site's name; the toolkit's own names (hal-provision, hal-collect, hal_ variables,
# HAL_ environment variables, /var/lib/grafana/dashboards/hal) are not matched.
SITE_WORD = re.compile(r"\bHAL\b")


def _model(data: dict):
    loaded = load_text(yaml.safe_dump(data, sort_keys=False), "site.yml")
    errors = [f.format() for f in loaded.findings if f.level.value == "error"]
    assert loaded.model is not None and not errors, "\n".join(errors)
    return loaded.model


def _twogen_with_everything(**cluster) -> dict:
    """TWOGEN with what it lacks and HAL has, each at its default place: a portal, the recipes,
    the module tree."""
    data = yaml.safe_load((CLUSTERS / "x86-twogen.yml").read_text())
    data["cluster"].update(cluster)
    del data["software"]["modulefiles_root"]
    data["software"]["modules"].append(
        {
            "name": "jupyter",
            "version": "2024.1",
            "kind": "tool",
            "description": "JupyterLab and the hub's single-user server",
        }
    )
    data["portal"] = {
        "front_end": "jupyterhub",
        "auth": "ldap",
        "user_environment": {"module": "jupyter/2024.1"},
        "apps": [
            {
                "name": "jupyterlab",
                "kind": "jupyterlab",
                "title": "JupyterLab",
                "modules": ["jupyter"],
                "virtual_partitions": ["gpux1"],
                "max_hours": 8,
            }
        ],
    }
    data["recipes"] = {
        "framework_module": "pytorch/2.1.0",
        "virtual_partition": "gpux8",
        "scaling_partitions": ["gpux1", "gpux2", "gpux4", "gpux8", "gpux16"],
    }
    return data


def _leaks(tree: dict[str, str]) -> list[str]:
    out = []
    for path, text in sorted(tree.items()):
        if "/opt/hal" in "/" + path or "/opt/hal" in text:
            out.append(f"{path}: /opt/hal")
        for number, line in enumerate(text.splitlines(), 1):
            if SITE_WORD.search(line):
                out.append(f"{path}:{number}: {line.strip()}")
    return out


@pytest.mark.parametrize("name", ["x86-twogen", "workstation"])
def test_no_hal_names_in_another_sites_tree(name):
    data = yaml.safe_load((CLUSTERS / f"{name}.yml").read_text())
    assert _leaks(render_all(_model(data))) == []


def test_no_hal_names_with_a_portal_recipes_and_the_default_module_tree():
    tree = render_all(_model(_twogen_with_everything()))
    assert _leaks(tree) == []
    for under in ("files/opt/twogen/modulefiles/", "files/opt/twogen/portal/apps/", "files/opt/twogen/recipes/"):
        assert any(p.startswith(under) for p in tree), under


def test_the_prefix_places_everything_the_toolkit_installs():
    model = _model(_twogen_with_everything(prefix="/srv/twogen"))
    assert (model.software.modulefiles_root, model.portal.prefix, model.recipes.prefix) == (
        "/srv/twogen/modulefiles",
        "/srv/twogen/portal",
        "/srv/twogen/recipes",
    )
    tree = render_all(model)
    assert not [p for p in tree if p.startswith("files/opt/")]


def test_a_sections_own_path_wins_over_the_prefix():
    data = _twogen_with_everything(prefix="/srv/twogen")
    data["recipes"]["prefix"] = "/sw/recipes"
    model = _model(data)
    assert model.recipes.prefix == "/sw/recipes" and model.portal.prefix == "/srv/twogen/portal"


def test_grafana_names_the_cluster():
    tree = render_all(_model(yaml.safe_load((CLUSTERS / "x86-twogen.yml").read_text())))
    datasources = yaml.safe_load(tree["files/etc/grafana/provisioning/datasources/hal.yaml"])
    providers = yaml.safe_load(tree["files/etc/grafana/provisioning/dashboards/hal.yaml"])
    assert datasources["datasources"][0]["name"] == "TWOGEN InfluxDB"
    assert providers["providers"][0]["folder"] == "TWOGEN"


def test_hal_keeps_its_prefix_and_names(hal):
    assert hal.cluster.prefix == "/opt/hal"
    assert hal.software.modulefiles_root == "/opt/hal/modulefiles" and hal.portal.prefix == "/opt/hal/portal"
    assert hal.monitoring.grafana.datasource == "HAL InfluxDB"


def test_the_search_finds_hals_names_in_hals_tree(files):
    """The control: the same search over HAL's own tree finds both."""
    leaks = _leaks(files)
    assert any(line.endswith(": /opt/hal") for line in leaks) and any("HAL InfluxDB" in line for line in leaks)
