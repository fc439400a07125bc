"""Configless compute nodes: slurm.configless in the model, what slurmctld
serves per Slurm major, the rendered slurm.conf, slurmd options, unit drop-in and inventory
group. The plan and the slurm role's variables are tested in test_plan.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hal_provision.loader import validate_text
from hal_provision.loader import REPO_DEFAULT
from hal_provision.model.configless import served_to_slurmd
from hal_provision.model.slurm import SLURM_VERSIONS
from hal_provision.render import render_all
from hal_provision.render.slurm import SLURMD_DROPIN, SLURMD_OPTIONS, slurmd_files

CLUSTERS = Path(__file__).resolve().parents[2] / "data" / "clusters"
BACKUP = (CLUSTERS / "x86-backup-controller.yml").read_text()  # configless: true
TWOGEN = (CLUSTERS / "x86-twogen.yml").read_text()  # job_tmp_base: a job namespace file
WORKSTATION = (CLUSTERS / "workstation.yml").read_text()
HAL = REPO_DEFAULT.read_text(encoding="utf-8")


def model(text: str, *edits: tuple[str, str]):
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    loaded = validate_text(text, "cluster.yml")
    assert loaded.model is not None, [f.format() for f in loaded.findings]
    return loaded.model


def configless(version: str = "22.05") -> tuple[str, str]:
    return ("slurm:\n", f'slurm:\n  configless: true\n  version: "{version}"\n')


def inventory_group(tree: dict[str, str], name: str) -> dict | None:
    return yaml.safe_load(tree["inventory/hosts.yml"])["all"]["children"].get(name)


# ---- what slurmctld serves (src/slurmctld/proc_req.c, src/common/fetch_config.c) ----------------
@pytest.mark.parametrize(
    "version, has, lacks",
    [
        (
            "22.05",
            ["slurm.conf", "cgroup.conf", "gres.conf", "topology.conf", "job_container.conf", "knl_cray.conf"],
            ["namespace.yaml", "scrun.lua", "slurmdbd.conf"],
        ),
        ("23.11", ["ext_sensors.conf", "plugstack.conf"], ["scrun.lua"]),  # scrun.lua from a later 23.11 release
        ("24.05", ["scrun.lua", "helpers.conf"], ["ext_sensors.conf", "knl_cray.conf"]),
        ("25.05", ["oci.conf"], ["namespace.yaml", "topology.yaml"]),
        ("25.11", ["namespace.yaml", "topology.yaml", "job_container.conf"], ["slurmdbd.conf"]),
    ],
)
def test_served_files_per_major(version, has, lacks):
    served = served_to_slurmd(version)
    assert set(has) <= set(served) and not set(lacks) & set(served)


def test_an_unknown_major_is_refused():
    with pytest.raises(ValueError, match="21.08"):
        served_to_slurmd("21.08")


@pytest.mark.parametrize("version", SLURM_VERSIONS)
def test_every_file_slurmd_reads_is_served_in_every_major(version):
    """The slurm role withholds every rendered slurmd file from configless nodes, the optional job
    namespace file included: were one not served, the node would have to get it pushed."""
    cluster = model(TWOGEN, configless(version))
    files = slurmd_files(cluster)
    assert ("namespace.yaml" if version == "25.11" else "job_container.conf") in files
    assert set(files) <= set(served_to_slurmd(version))
    withheld = inventory_group(render_all(cluster), "slurm_configless")["vars"]["hal_slurm_withheld_files"]
    assert withheld == files


# ---- render --------------------------------------------------------------------------------------
def test_slurm_conf_enables_configless_once():
    conf = render_all(model(BACKUP))["files/etc/slurm/slurm.conf"]
    assert [line for line in conf.splitlines() if line.startswith("SlurmctldParameters")] == [
        "SlurmctldParameters=enable_configless"
    ]


def test_conf_server_names_every_controller_primary_first_with_the_port():
    tree = render_all(
        model(BACKUP, ("  memory_reserve_mib: 16384 ", "  controller_port: 7817\n  memory_reserve_mib: 16384 "))
    )
    assert tree[SLURMD_OPTIONS].splitlines()[-1] == 'SLURMD_OPTIONS="--conf-server tg-mgmt1:7817,tg-mgmt2:7817"'
    reversed_ = render_all(model(BACKUP, ("  slurmctld: tg-mgmt1,tg-mgmt2 ", "  slurmctld: tg-mgmt2,tg-mgmt1 ")))
    assert reversed_[SLURMD_OPTIONS].splitlines()[-1] == 'SLURMD_OPTIONS="--conf-server tg-mgmt2:6817,tg-mgmt1:6817"'
    one = render_all(model(BACKUP, ("  slurmctld: tg-mgmt1,tg-mgmt2 ", "  slurmctld: tg-mgmt1 ")))
    assert one[SLURMD_OPTIONS].splitlines()[-1] == 'SLURMD_OPTIONS="--conf-server tg-mgmt1:6817"'


@pytest.mark.parametrize("version, restarts", [("22.05", True), ("23.11", True), ("24.05", False), ("24.11", False)])
def test_the_drop_in_lifts_debians_condition_and_restarts_a_slurmd_that_gave_up(version, restarts):
    dropin = render_all(model(BACKUP.replace("  configless: true ", f'  version: "{version}"\n  configless: true ')))[
        SLURMD_DROPIN
    ]
    lines = [line for line in dropin.splitlines() if line and not line.startswith("#")]
    assert lines[:2] == ["[Unit]", "ConditionPathExists="]
    assert ("Restart=on-failure" in lines) is restarts and ("[Service]" in lines) is restarts


def test_without_configless_nothing_changes():
    tree = render_all(model(HAL))
    assert "SlurmctldParameters" not in tree["files/etc/slurm/slurm.conf"]
    assert SLURMD_OPTIONS not in tree and SLURMD_DROPIN not in tree
    assert inventory_group(tree, "slurm_configless") is None


# ---- which nodes ---------------------------------------------------------------------------------
def test_configless_nodes_are_the_slurm_nodes_users_do_not_log_in_to():
    assert str(model(BACKUP).configless_hosts) == "tg[01-04]"
    assert str(model(HAL, configless()).configless_hosts) == "hal[01-16]"
    portal_on_a_compute = model(HAL, configless(), ("  portal: hal-mgmt2", "  portal: hal01"))
    assert str(portal_on_a_compute.configless_hosts) == "hal[02-16]"
    assert str(model(HAL).configless_hosts) == ""


def test_a_workstation_keeps_its_files():
    """ws01 is controller, login and compute node at once: nothing is configless, the group is empty."""
    cluster = model(WORKSTATION, configless())
    assert len(cluster.configless_hosts) == 0
    group = inventory_group(render_all(cluster), "slurm_configless")
    assert group["hosts"] is None
