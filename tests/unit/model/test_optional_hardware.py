"""A node group names a hardware profile where its nodes run jobs (compute, development) and
may leave it out elsewhere (a login node, an NFS server, a management node)."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.testing import CliRunner

from hal_provision.cli.discover import discover
from hal_provision.discovery import discover as read, read_records
from hal_provision.discovery.compare import compare
from hal_provision.findings import Level
from hal_provision.render import render_all
from hal_provision.render.diagram import diagram
from hal_provision.cli.show import tables

H100 = Path(__file__).resolve().parents[3] / "tests" / "data" / "hardware" / "h100-x1"

# The login node and the NFS data node lose their profiles; lc922 is then used by no group.
WITHOUT_PROFILES = (
    (
        "    count: 1                                  # [paper] one login node\n    hardware: lc921\n",
        "    count: 1                                  # [paper] one login node\n",
    ),
    ("    hosts: hal-data\n    hardware: lc922\n", "    hosts: hal-data\n"),
)


def test_login_and_nfs_groups_without_profiles_validate_and_render(check_file, edited):
    _file, loaded = check_file(edited(*WITHOUT_PROFILES))
    assert loaded.model is not None
    assert [f.format() for f in loaded.findings if f.level is Level.error] == []
    model = loaded.model
    login = next(g for g in model.nodes if g.name == "login")
    assert login.hardware is None and model.profile_of(login) is None
    files = render_all(model)
    assert "hal-login" in files["inventory/hosts.yml"] and "NodeName=hal[01-16]" in files["files/etc/slurm/slurm.conf"]
    assert "hal-data" in diagram(model).source
    assert tables(model)  # show: "-" where a group has no profile


def test_unused_profile_left_by_them_is_only_info(check_file, edited):
    _file, loaded = check_file(edited(*WITHOUT_PROFILES))
    [finding] = [f for f in loaded.findings if f.dotted == "hardware.lc922"]
    assert finding.level is Level.info


def test_compute_group_without_profile_is_an_error_naming_the_field(check_file, edited, position):
    text = edited(
        (
            "    count: 16                                 # [paper] 16 AC922 compute nodes\n    hardware: ac922\n",
            "    count: 16                                 # [paper] 16 AC922 compute nodes\n",
        )
    )
    _file, loaded = check_file(text)
    assert loaded.model is None
    [finding] = loaded.findings
    assert (finding.level, finding.dotted) == (Level.error, "nodes[6]")
    assert "node group 'compute' has no `hardware`" in finding.message
    assert "compute nodes need a profile" in finding.message
    assert finding.line == position(text, "    hosts: hal[01-16]")[0] - 2


def test_development_group_without_profile_is_an_error(check_file, edited):
    _file, loaded = check_file(
        edited(("    hardware: ac922                           # [assumed] same build as the compute nodes\n", ""))
    )
    [finding] = loaded.findings
    assert finding.dotted == "nodes[5]" and "development nodes need a profile" in finding.message


def test_login_group_that_also_computes_needs_a_profile(check_file, edited):
    _file, loaded = check_file(
        edited(
            (
                "    count: 1                                  # [paper] one login node\n    hardware: lc921\n",
                "    count: 1                                  # [paper] one login node\n    also: [compute]\n",
            )
        )
    )
    [finding] = [f for f in loaded.findings if f.dotted == "nodes[0]"]
    assert "compute nodes need a profile" in finding.message


def test_discover_on_a_host_whose_group_has_no_profile(check_file, edited):
    file, loaded = check_file(edited(*WITHOUT_PROFILES))
    assert compare(read(read_records(H100)), loaded.model, "hal-login") == []
    app = typer.Typer()
    app.command()(discover)
    result = CliRunner().invoke(app, [str(file), "--records", str(H100), "--host", "hal-login"])
    assert result.exit_code == 0, result.output
    assert "\nhal-login:\n" in result.stdout  # the profile to paste, named after the host
    assert "node group 'login'" in result.stderr and "names no hardware profile" in result.stderr
