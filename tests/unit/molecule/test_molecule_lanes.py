"""tests/run-all.sh runs the scenarios of molecule/ci-scenarios in lanes side by side (the
untagged ones in the first, each other tag a lane of its own), so no host name, network, subnet
or work directory of one scenario may be another's."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from hal_provision.sandbox.derive import DEFAULT_SUBNET

MOLECULE = Path(__file__).resolve().parents[3] / "molecule"


def lanes() -> dict[str, list[str]]:
    """Lane (the tag; "first" for the untagged) -> its scenarios, in order."""
    out: dict[str, list[str]] = {}
    for line in (MOLECULE / "ci-scenarios").read_text().splitlines():
        words = line.split("#", 1)[0].split()
        if words:
            assert len(words) <= 2, line
            out.setdefault(words[1] if words[1:] else "first", []).append(words[0])
    return out


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
    by_lane = lanes()
    assert by_lane.get("first") and len(by_lane) > 1
    names = [n for scenarios in by_lane.values() for n in scenarios]
    assert len(names) == len(set(names))
    assert all((MOLECULE / n / "molecule.yml").is_file() for n in names), names


def test_no_two_scenarios_share_a_host_network_subnet_or_workdir():
    names = [n for scenarios in lanes().values() for n in scenarios]
    for i, scenario in enumerate(names):
        for other in names[i + 1 :]:
            assert not resources(scenario) & resources(other), (scenario, other, resources(scenario) & resources(other))


def test_the_lanes_are_what_the_scenarios_say():
    by_lane = lanes()
    assert resources("fleet") >= {"host fl-mgmt", "subnet 10.89.79.0/24", "workdir .hal-sandbox-fleet"}
    assert resources("default") >= {"host hal01", f"subnet {DEFAULT_SUBNET}", "workdir .hal-sandbox"}
    assert by_lane["first"] == ["default"] and "fleet" not in by_lane["first"]
