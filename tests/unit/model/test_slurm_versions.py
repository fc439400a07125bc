"""The Slurm version table (hal_provision/model/slurm_versions.py): the renderers write each
version's names, the checks refuse in slurm.extra what slurm.version does not read, and the
upgrade window gives the paths `hal-provision plan` names. Beside it the operating systems:
cluster.os gives slurm.version's default, and refuses a major it does not ship unless the site
builds its own (slurm.build_own)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hal_provision.findings import Level
from hal_provision.model.slurm import SLURM_VERSIONS
from hal_provision.model.slurm_versions import (
    OPERATING_SYSTEMS,
    RENDERED_KEYS,
    RENDERED_UNLESS_EXTRA,
    VERSIONED,
    name_for,
    shipped,
    upgrade_path,
    upgrades_from,
)
from hal_provision.plan.slurm import conf_lines
from hal_provision.render import render_all
from hal_provision.render.slurm import slurm_conf
from hal_provision.render.slurm_version import SLURM_VERSION_JSON

E = Level.error
GOLDEN = Path(__file__).resolve().parents[2] / "golden"
SLURM = "slurm:\n  memory_reserve_mib: 8192 "


def at(version: str, **extra: str):
    """Edits of HAL: slurm.version (from the site's own packages, slurm.build_own: most majors
    no Debian ships), and slurm.extra's options."""
    steps = [(SLURM, f'slurm:\n  version: "{version}"\n  build_own: true\n  memory_reserve_mib: 8192 ')]
    if extra:
        body = "".join(f'\n    {k}: "{v}"' for k, v in extra.items())
        steps.append(("slurm:\n", f"slurm:\n  extra:{body}\n"))
    return steps


def on(os: str, version: str | None = None):
    """Edits of HAL: cluster.os, and slurm.version without slurm.build_own."""
    steps = [("  primary_network: mgmt\n", f"  primary_network: mgmt\n  os: {os}\n")]
    if version is not None:
        steps.append((SLURM, f'slurm:\n  version: "{version}"\n  memory_reserve_mib: 8192 '))
    return steps


def no_fabric(text: str) -> str:
    """HAL without its fabric section (slurm.conf then names the flat topology)."""
    start = text.index("\nfabric:")
    end = text.index("\n", start + 1)
    while end + 1 < len(text) and text[end + 1] in " #\n":
        end = text.index("\n", end + 1)
    return text[:start] + text[end:]


ROWS = [
    (
        "extra-key-too-new",
        at("22.05", NamespaceType="namespace/linux"),
        E,
        "slurm.extra.NamespaceType",
        "NamespaceType is read from Slurm 25.11 on, not by 22.05",
    ),
    (
        "extra-key-removed",
        at("24.11", RoutePlugin="route/topology"),
        E,
        "slurm.extra.RoutePlugin",
        "RoutePlugin was replaced by TopologyParam=RouteTree in 23.11",
    ),
    (
        "extra-key-removed-no-replacement",
        at("25.05", PowerPlugin="power/rapl"),
        E,
        "slurm.extra.PowerPlugin",
        "PowerPlugin was removed in 24.05 (slurm.version is 25.05)",
    ),
    (
        "extra-value-renamed",
        at("25.11", JobContainerType="job_container/tmpfs"),
        E,
        "slurm.extra.JobContainerType",
        "JobContainerType was replaced by NamespaceType in 25.11",
    ),
    (
        "extra-rendered-key",
        at("22.05", SelectType="select/cons_res"),
        E,
        "slurm.extra.SelectType",
        "SelectType is written by hal-provision from the model",
    ),
    (
        "version-newer-than-the-os-ships",
        on("debian12", "24.11"),
        E,
        "slurm.version",
        "Debian 12 (cluster.os debian12) ships Slurm 22.05, not 24.11",
    ),
]

ACCEPTED = [  # the same options at a version that reads them
    ("key-at-its-version", at("25.11", MetricsType="metrics/openmetrics")),
    ("removed-key-before-removal", at("23.02", RoutePlugin="route/topology")),
    ("power-before-removal", at("23.11", PowerPlugin="power/rapl")),
    ("unversioned-key", at("22.05", SchedulerParameters="bf_continue,bf_window=2880")),
    ("new-key-at-25-05", at("25.05", PrologTimeout="120")),
]


@pytest.mark.parametrize("name, steps, level, dotted, message", ROWS, ids=[r[0] for r in ROWS])
def test_refused(finds, name, steps, level, dotted, message) -> None:
    finds(steps, level, dotted, message)


@pytest.mark.parametrize("name, steps", ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_accepted(check_file, edited, name, steps) -> None:
    _file, loaded = check_file(edited(*steps))
    assert loaded.model is not None
    assert [f.format() for f in loaded.findings if f.level is not Level.info] == []


def test_a_refused_value_names_the_replacement(check_file, edited) -> None:
    """The brief's example: at 25.11 the value is refused too, naming its replacement."""
    _file, loaded = check_file(
        edited(*at("25.11", CliFilterParameters="cli_filter_lua_path=/x", SelectType="select/cons_res"))
    )
    messages = [f.message for f in loaded.findings if f.dotted == "slurm.extra.SelectType"]
    assert "SelectType: select/cons_res was replaced by select/cons_tres in 23.11 (slurm.version is 25.11)" in messages
    assert not [f for f in loaded.findings if f.dotted == "slurm.extra.CliFilterParameters"]


@pytest.mark.parametrize("key, value", [("Bad Key", "x"), ("SchedulerParameters", "a\nb"), ("Key", "")])
def test_extra_is_one_line_per_key(check_file, edited, key, value) -> None:
    text = edited(("slurm:\n", f"slurm:\n  extra: {{{json.dumps(key)}: {json.dumps(value)}}}\n"))
    _file, loaded = check_file(text)
    assert loaded.model is None and any(f.dotted.startswith("slurm.extra") for f in loaded.findings)


# ---- what the renderers write per version -----------------------------------------------------
def model(check_file, edited, *steps):
    _file, loaded = check_file(edited(*steps))
    assert loaded.model is not None, [f.format() for f in loaded.findings]
    return loaded.model


@pytest.mark.parametrize(
    "version, plugin",
    [
        ("22.05", "topology/none"),
        ("23.02", "topology/none"),
        ("23.11", "topology/default"),
        ("24.11", "topology/default"),
        ("25.05", "topology/flat"),
        ("25.11", "topology/flat"),
    ],
)
def test_the_flat_topology_has_the_versions_name(check_file, edited, version, plugin) -> None:
    conf = slurm_conf(model(check_file, edited, *at(version), no_fabric))
    assert f"TopologyPlugin={plugin}\n" in conf
    assert "TopologyPlugin=topology/tree" in slurm_conf(model(check_file, edited, *at(version)))


@pytest.mark.parametrize("version", SLURM_VERSIONS)
def test_every_rendered_key_and_plugin_is_read_by_the_version(check_file, edited, version) -> None:
    """Every line HAL's slurm.conf has, at each version, is one the table says that version reads."""
    conf = slurm_conf(model(check_file, edited, *at(version, SchedulerParameters="bf_continue"), no_fabric))
    for line in conf_lines(conf):
        key, _sep, value = line.partition("=")
        for name in [key, *value.split(",")]:
            entry = next((e for e in VERSIONED if e.name.lower() == name.split()[0].lower()), None)
            assert entry is None or entry.read_by(version), f"{version} does not read {name}: {line}"


def test_extra_options_are_written_in_key_order(check_file, edited) -> None:
    conf = slurm_conf(model(check_file, edited, *at("22.05", SchedulerParameters="bf_continue", MaxArraySize="5001")))
    assert (
        "# slurm.extra: options the model does not cover.\nMaxArraySize=5001\nSchedulerParameters=bf_continue\n" in conf
    )


def test_rendered_keys_are_the_keys_every_golden_slurm_conf_writes() -> None:
    """RENDERED_KEYS (what slurm.extra may not name) covers every key of every rendered slurm.conf;
    a renderer that writes a new key adds it there."""
    keys = {
        line.split("=", 1)[0].lower()
        for conf in GOLDEN.glob("*/files/etc/slurm/slurm.conf")
        for line in conf_lines(conf.read_text())
    }
    assert keys and keys <= RENDERED_KEYS | RENDERED_UNLESS_EXTRA, sorted(keys - RENDERED_KEYS)


# ---- the upgrade window ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "version, accepted",
    [
        ("23.02", ("22.05",)),
        ("23.11", ("22.05", "23.02")),
        ("24.05", ("23.02", "23.11")),
        ("24.11", ("23.02", "23.11", "24.05")),
        ("25.05", ("23.11", "24.05", "24.11")),
        ("25.11", ("24.05", "24.11", "25.05")),
    ],
)
def test_the_window_is_two_majors_then_three_from_24_11(version, accepted) -> None:
    assert upgrades_from(version) == accepted


@pytest.mark.parametrize(
    "old, new, path",
    [
        ("22.05", "23.11", ["22.05", "23.11"]),
        ("22.05", "24.11", ["22.05", "23.11", "24.11"]),  # the later of two intermediates (23.02 would do too)
        ("22.05", "25.11", ["22.05", "23.11", "25.05", "25.11"]),
        ("23.02", "25.11", ["23.02", "24.11", "25.11"]),
        ("24.05", "25.11", ["24.05", "25.11"]),
        ("24.11", "23.11", None),
    ],
)
def test_upgrade_paths(old, new, path) -> None:
    assert upgrade_path(old, new) == path


def test_every_step_of_every_path_is_in_the_window() -> None:
    for i, old in enumerate(SLURM_VERSIONS):
        for new in SLURM_VERSIONS[i + 1 :]:
            path = upgrade_path(old, new)
            assert path[0] == old and path[-1] == new
            assert all(a in upgrades_from(b) for a, b in zip(path, path[1:])), path


def test_name_for_follows_renames_and_stops_before_the_first_version() -> None:
    assert name_for("25.11", "JobContainerType", "job_container/tmpfs") == "namespace/tmpfs"
    assert name_for("22.05", "TopologyPlugin", "topology/flat") == "topology/flat"  # not read there: the check says so
    assert name_for("24.11", "SchedulerType", "sched/backfill") == "sched/backfill"


# ---- the operating systems ----------------------------------------------------------------------
@pytest.mark.parametrize("os, version", [(o.name, o.slurm) for o in OPERATING_SYSTEMS])
def test_the_os_gives_slurm_version_and_the_render(check_file, edited, os, version) -> None:
    """slurm.version left out: the major cluster.os ships, in slurm-version.json and slurm.conf's names."""
    _file, loaded = check_file(edited(*on(os)))
    assert loaded.model is not None and loaded.model.slurm.version == version
    assert [f.format() for f in loaded.findings if f.level is E] == []
    tree = render_all(loaded.model)
    assert json.loads(tree[SLURM_VERSION_JSON])["version"] == version
    conf = slurm_conf(model(check_file, edited, *on(os), no_fabric))
    assert f"TopologyPlugin={name_for(version, 'TopologyPlugin', 'topology/none')}\n" in conf


def test_debian13_renders_24_11_without_slurm_version(check_file, edited) -> None:
    """The brief's case: a Debian 13 site that names no version gets 24.11's configs, not 22.05's."""
    cluster = model(check_file, edited, *on("debian13"), no_fabric)
    assert (cluster.slurm.version, cluster.slurm.at_least("24.11"), cluster.slurm.at_least("25.05")) == (
        "24.11",
        True,
        False,
    )
    assert "\nTopologyPlugin=topology/default\n" in slurm_conf(cluster)  # 22.05 would read topology/none
    assert json.loads(render_all(cluster)[SLURM_VERSION_JSON])["upgrades_from"] == ["23.02", "23.11", "24.05"]


@pytest.mark.parametrize("os, version", [("debian13", "22.05"), ("debian12", "25.11"), ("debian13", "25.05")])
def test_a_version_the_os_does_not_ship_is_located_and_names_what_it_ships(check_file, edited, os, version) -> None:
    file, loaded = check_file(edited(*on(os, version)))
    [finding] = [f for f in loaded.findings if f.level is E]
    ships = next(o for o in OPERATING_SYSTEMS if o.name == os)
    assert (finding.dotted, finding.check, finding.file) == ("slurm.version", "slurm_version_shipped_by_os", str(file))
    assert (
        finding.line and f"{ships.title} (cluster.os {os}) ships Slurm {ships.slurm}, not {version}" in finding.message
    )
    assert "slurm.build_own: true" in finding.message


@pytest.mark.parametrize("os, version", [("debian13", "22.05"), ("debian12", "24.11"), ("debian12", "25.11")])
def test_build_own_lifts_the_refusal(check_file, edited, os, version) -> None:
    """The site's own packages: any major of SLURM_VERSIONS, rendered for that major."""
    steps = [*on(os, version), ("  memory_reserve_mib: 8192 ", "  build_own: true\n  memory_reserve_mib: 8192 ")]
    _file, loaded = check_file(edited(*steps))
    assert [f.format() for f in loaded.findings if f.level is E] == []
    assert json.loads(render_all(loaded.model)[SLURM_VERSION_JSON])["version"] == version


def test_the_version_each_os_ships_reads_as_people_write_it() -> None:
    assert shipped() == "Debian 12 ships 22.05, Debian 13 24.11"
    assert all(o.slurm in SLURM_VERSIONS for o in OPERATING_SYSTEMS)


def test_an_unknown_os_is_refused_at_its_key(check_file, edited) -> None:
    _file, loaded = check_file(edited(*on("debian11")))
    assert loaded.model is None
    assert any(f.dotted == "cluster.os" and "debian12" in f.message for f in loaded.findings), [
        f.format() for f in loaded.findings
    ]
