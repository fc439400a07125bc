"""Scaling down: one node group that plays several roles (a deskside GPU server that is the
login node, the Slurm controller and the compute node at once), and the defaults the hardware
determines. tests/data/clusters/workstation.yml is the description; real slurmctld, slurmd
and slurmdbd read its render in tests/acceptance (case `workstation`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hal_provision.findings import Level
from hal_provision.loader import load
from hal_provision.model import Role
from hal_provision.render import render_all
from hal_provision.sandbox.derive import SandboxError, derive_sandbox
from hal_provision.loader import validate

WS = Path(__file__).resolve().parents[1] / "data" / "clusters" / "workstation.yml"


@pytest.fixture(scope="module")
def ws():
    return load(WS).model


def test_workstation_validates_with_one_warning_about_sharing_the_node():
    loaded = validate(WS)
    assert [f.level for f in loaded.findings] == [Level.warning], [f.format() for f in loaded.findings]
    [warning] = loaded.findings
    line = WS.read_text().splitlines().index("  slurmctld: ws01") + 1
    assert warning.dotted == "services.slurmctld" and warning.line == line
    assert (
        "slurmctld, slurmdbd and accounting_db run on node group 'ws', which also runs jobs: jobs get the "
        "nodes' memory less slurm.memory_reserve_mib"
    ) in warning.message


def test_one_group_plays_every_role_it_lists(ws):
    [group] = ws.nodes
    assert group.roles == (Role.compute, Role.login, Role.management)
    assert ws.groups_with_role(Role.login) == ws.groups_with_role(Role.management) == [group]
    assert str(ws.slurm_nodes) == "ws01"


def test_inventory_puts_the_node_in_each_role_group(ws):
    inv = render_all(ws)["inventory/hosts.yml"]
    assert '        hal_role: "compute"\n        hal_roles: ["compute", "login", "management"]\n' in inv
    for role in ("compute", "login", "management"):
        assert f"    role_{role}:\n      children:\n        nodes_ws:\n" in inv


def test_def_mem_per_cpu_follows_from_the_hardware(ws):
    assert ws.slurm.def_mem_per_cpu_mib is None
    assert ws.def_mem_per_cpu_mib == (128 * 1024 - 16384) // 16 == 7168
    assert "\nDefMemPerCPU=7168\n" in render_all(ws)["files/etc/slurm/slurm.conf"]


def test_def_mem_per_cpu_given_is_kept(hal):
    assert hal.def_mem_per_cpu_mib == hal.slurm.def_mem_per_cpu_mib == 1200


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            ("    also: [login, management]", "    also: [login]"),
            "slurmctld placed on ws01, a compute/login node; it must run on management nodes (or add one of those roles "
            "to node group 'ws' with `also:`)",
        ),
    ],
)
def test_service_on_a_group_without_its_role_is_an_error(tmp_path, edit, message):
    path = tmp_path / "ws.yml"
    path.write_text(WS.read_text().replace(*edit))
    errors = [f for f in validate(path).findings if f.level is Level.error]
    assert any(message in f.message and f.line for f in errors), [f.format() for f in errors]


def test_sandbox_of_the_workstation_is_one_container(ws):
    sb = derive_sandbox(ws, computes=1)
    [group] = sb.nodes
    assert (group.hosts, group.roles, str(group.addresses["lan"])) == (
        "ws01",
        (Role.compute, Role.login, Role.management),
        "10.89.77.10",
    )
    assert (sb.services.slurmctld, sb.services.slurmdbd, sb.services.accounting_db) == ("ws01",) * 3
    with pytest.raises(SandboxError, match="fewer than 2 hosts"):
        derive_sandbox(ws)  # the default asks for two compute nodes
    health = json.loads(render_all(sb)["files/etc/hal-provision/health/ws.json"])
    assert sorted(health["checks"]) == ["gpus", "mounts", "services"]
    assert health["checks"]["mounts"] == {"mount_points": ["/local"]}  # the sandbox's scratch stand-in
