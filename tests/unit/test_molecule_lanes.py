"""tests/run-all.sh runs the scenarios of molecule/ci-scenarios in lanes beside each other (and
beside pytest), so no host name, network, subnet or work directory of one scenario may be
another's."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from hal_provision.sandbox.derive import DEFAULT_SUBNET

MOLECULE = Path(__file__).resolve().parents[2] / "molecule"


def lanes() -> dict[str, list[str]]:
    """Lane -> its scenarios in order, as tests/run-all.sh reads molecule/ci-scenarios."""
    out: dict[str, list[str]] = {}
    for line in (MOLECULE / "ci-scenarios").read_text().splitlines():
        words = line.split("#", 1)[0].split()
        if words:
            assert len(words) in (2, 3) and words[2:] in ([], ["trixie"]), line
            out.setdefault(words[1], []).append(words[0])
    return out


def scenarios() -> list[str]:
    return [s for lane in lanes().values() for s in lane]


def resources(scenario: str) -> set[str]:
    """The scenario's host names, podman networks and subnets (a sandbox's: its --subnet, else
    the default one)."""
    doc = yaml.safe_load((MOLECULE / scenario / "molecule.yml").read_text())
    out = {f"host {p['name']}" for p in doc["platforms"]}
    out |= {f"network {p['network']}" for p in doc["platforms"] if p.get("network")}
    out |= {f"subnet {p['ip'].rsplit('.', 1)[0]}.0/24" for p in doc["platforms"] if p.get("ip")}
    create = (MOLECULE / scenario / "create.yml").read_text() if (MOLECULE / scenario / "create.yml").is_file() else ""
    if "sandbox, up" in create:
        subnet = re.search(r"--subnet, ([\d./]+)", create)
        out.add(f"subnet {subnet.group(1) if subnet else DEFAULT_SUBNET}")
        workdir = re.search(r"--workdir, \"\{\{ __project \}\}/([^\"]+)\"", create)
        out.add(f"workdir {workdir.group(1) if workdir else '.hal-sandbox'}")
    return out


def test_every_listed_scenario_exists_and_is_listed_once():
    names = scenarios()
    assert len(lanes()) >= 2
    assert len(names) == len(set(names))
    assert all((MOLECULE / n / "molecule.yml").is_file() for n in names), names
    listed = {p.parent.name for p in MOLECULE.glob("*/molecule.yml")}
    assert set(names) == listed, "every scenario runs in CI"


def test_no_two_scenarios_share_a_host_network_subnet_or_workdir():
    names = scenarios()
    for i, scenario in enumerate(names):
        for other in names[i + 1:]:
            shared = resources(scenario) & resources(other)
            assert not shared, (scenario, other, shared)


def test_the_scenario_marked_trixie_is_the_one_that_runs_debian_13():
    marked = {line.split()[0] for line in (MOLECULE / "ci-scenarios").read_text().splitlines()
              if line.split("#", 1)[0].split()[2:] == ["trixie"]}
    runs_trixie = {n for n in scenarios() if (MOLECULE / n / "create.yml").is_file()
                   and "--release, trixie" in (MOLECULE / n / "create.yml").read_text()}
    assert marked == runs_trixie == {"workstation"}


def test_the_lanes_are_what_the_scenarios_say():
    assert resources("fleet") >= {"host fl-mgmt", "subnet 10.89.79.0/24", "workdir .hal-sandbox-fleet"}
    assert resources("default") >= {"host hal01", f"subnet {DEFAULT_SUBNET}", "workdir .hal-sandbox"}
    assert lanes()["hal"] == ["default"]  # the longest scenario, on a lane of its own
