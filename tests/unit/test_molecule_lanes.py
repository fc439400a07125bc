"""tests/run-all.sh runs the scenarios of molecule/ci-scenarios in two lanes: those tagged
`beside` run beside the others, so no host name, network or subnet of one may be another's."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from hal_provision.sandbox.derive import DEFAULT_SUBNET

MOLECULE = Path(__file__).resolve().parents[2] / "molecule"


def lanes() -> tuple[list[str], list[str]]:
    first, second = [], []
    for line in (MOLECULE / "ci-scenarios").read_text().splitlines():
        words = line.split("#", 1)[0].split()
        if words:
            (second if words[1:] == ["beside"] else first).append(words[0])
    return first, second


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
    first, second = lanes()
    assert first and second
    names = first + second
    assert len(names) == len(set(names))
    assert all((MOLECULE / n / "molecule.yml").is_file() for n in names), names


def test_a_scenario_beside_the_others_shares_no_host_network_subnet_or_workdir():
    first, second = lanes()
    for scenario in second:
        mine = resources(scenario)
        for other in first + [s for s in second if s != scenario]:
            assert not mine & resources(other), (scenario, other, mine & resources(other))


def test_the_lanes_are_what_the_scenarios_say():
    first, second = lanes()
    assert resources("fleet") >= {"host fl-mgmt", "subnet 10.89.79.0/24", "workdir .hal-sandbox-fleet"}
    assert resources("default") >= {"host hal01", f"subnet {DEFAULT_SUBNET}", "workdir .hal-sandbox"}
    assert "fleet" in second and "default" in first
