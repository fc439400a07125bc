"""Node-local scratch: local disks and their scratch file system in a
hardware profile, each job's private /tmp per node group, and what Slurm is told of them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hal_provision.loader import validate_text
from hal_provision.findings import Level
from hal_provision.model.naming import mount_unit_name
from hal_provision.render import render_all

TWOGEN = (Path(__file__).resolve().parents[2] / "data" / "clusters" / "x86-twogen.yml").read_text()


def test_raid0_scratch_is_the_sum_of_its_devices_less_the_file_system_share():
    model = validate_text(TWOGEN, "x86-twogen.yml").model
    a100 = model.hardware["hgx-a100"]
    assert a100.scratch_gib() == 2 * 3576
    assert a100.tmp_disk_mib() == int(2 * 3576 * 1024 * 0.95)
    assert model.hardware["hgx-h100"].tmp_disk_mib() == 7000000  # the profile's own


def test_slurm_conf_and_job_container_conf():
    tree = render_all(validate_text(TWOGEN, "x86-twogen.yml").model)
    conf = tree["files/etc/slurm/slurm.conf"]
    assert "\nJobContainerType=job_container/tmpfs\n" in conf and "\nTmpFS=/local\n" in conf
    assert " TmpDisk=6957465 " in conf and " TmpDisk=7000000 " in conf
    assert tree["files/etc/slurm/job_container.conf"].splitlines()[-1] == (
        "NodeName=tg[01-08] AutoBasePath=true BasePath=/local/jobs"
    )


def test_without_job_tmp_there_is_no_job_container():
    text = TWOGEN.replace(
        "    job_tmp_base: /local/jobs                 # each job's private /tmp on the NVMe scratch\n", ""
    )
    text = text.replace("    job_tmp_base: /local/jobs\n", "")
    tree = render_all(validate_text(text, "x86-twogen.yml").model)
    assert "files/etc/slurm/job_container.conf" not in tree
    assert "JobContainerType" not in tree["files/etc/slurm/slurm.conf"]
    assert "\nTmpFS=/local\n" in tree["files/etc/slurm/slurm.conf"]  # the scratch still sizes TmpDisk


def test_scratch_mount_points_that_differ_are_one_error():
    text = TWOGEN.replace(
        "scratch: {devices: [/dev/nvme0n1], mount_point: /local,",
        "scratch: {devices: [/dev/nvme0n1], mount_point: /scratch,",
    )
    findings = validate_text(text, "x86-twogen.yml").findings
    errors = [f for f in findings if f.level is Level.error]
    assert [f.dotted for f in errors] == ["hardware.hgx-h100.scratch.mount_point"], [f.format() for f in findings]
    assert "TmpFS is one path" in errors[0].message
    warned = [f.dotted for f in findings if f.level is Level.warning]
    assert "nodes[4].job_tmp_base" in warned  # /local/jobs is no longer on h100's scratch


def test_raid0_needs_two_devices():
    text = TWOGEN.replace(
        "scratch: {devices: [/dev/nvme0n1, /dev/nvme1n1], layout: raid0,",
        "scratch: {devices: [/dev/nvme0n1], layout: raid0,",
    )
    loaded = validate_text(text, "x86-twogen.yml")
    assert loaded.model is None
    assert any("raid0 stripes two or more devices" in f.message for f in loaded.findings)


def test_from_slurm_25_11_namespace_yaml_replaces_job_container_conf():
    text = TWOGEN.replace("slurm:\n", 'slurm:\n  version: "25.11"\n', 1)
    tree = render_all(validate_text(text, "x86-twogen.yml").model)
    conf = tree["files/etc/slurm/slurm.conf"]
    assert "\nNamespaceType=namespace/linux\n" in conf and "JobContainerType" not in conf
    assert "\nPrologFlags=Contain\n" in conf  # namespace.yaml(5): the plugin needs it
    assert "files/etc/slurm/job_container.conf" not in tree
    doc = yaml.safe_load(tree["files/etc/slurm/namespace.yaml"])
    assert doc == {
        "node_confs": [{"nodes": ["tg[01-08]"], "options": {"auto_base_path": True, "base_path": "/local/jobs"}}]
    }


def test_an_unknown_slurm_version_names_the_field():
    loaded = validate_text(TWOGEN.replace("slurm:\n", 'slurm:\n  version: "21.08"\n', 1), "x86-twogen.yml")
    assert loaded.model is None
    assert any(f.dotted == "slurm.version" and "22.05" in f.message for f in loaded.findings), [
        f.format() for f in loaded.findings
    ]


@pytest.mark.parametrize(
    ("path", "unit"),
    [
        ("/local", "local.mount"),
        ("/local/", "local.mount"),
        ("/mnt/nvme-scratch", r"mnt-nvme\x2dscratch.mount"),
        ("/var/.cache", r"var-.cache.mount"),
        ("/.hidden", r"\x2ehidden.mount"),
        ("/", "-.mount"),
    ],
)
def test_mount_unit_names_are_systemd_escapes_of_the_path(path, unit):
    assert mount_unit_name(path) == unit  # what `systemd-escape --path --suffix=mount` prints


def test_mount_units_and_the_array_per_profile():
    tree = render_all(validate_text(TWOGEN, "x86-twogen.yml").model)
    a100 = tree["files/etc/hal-provision/scratch/hgx-a100/local.mount"]
    assert "\nWhat=/dev/md/scratch\nWhere=/local\nType=xfs\n" in a100
    assert tree["files/etc/hal-provision/scratch/hgx-a100/mdadm.conf"].splitlines()[-1] == (
        "ARRAY /dev/md/scratch metadata=1.2 devices=/dev/nvme0n1,/dev/nvme1n1"
    )
    assert "\nWhat=/dev/nvme0n1\n" in tree["files/etc/hal-provision/scratch/hgx-h100/local.mount"]
    assert "files/etc/hal-provision/scratch/hgx-h100/mdadm.conf" not in tree  # one device, no array
    facts = json.loads(tree["files/etc/hal-provision/scratch.json"])
    assert facts["groups"] == {"a100": "hgx-a100", "h100": "hgx-h100"}
    assert facts["profiles"]["hgx-a100"]["source"] == "/dev/md/scratch"
    health = json.loads(tree["files/etc/hal-provision/health/a100.json"])
    assert health["checks"]["mounts"]["mount_points"][-1] == "/local"  # the check drains a node without it


def test_sandbox_compute_nodes_get_the_stand_in_scratch(tmp_path):
    from hal_provision.sandbox.derive import SCRATCH_STANDIN, derive_sandbox
    from hal_provision.sandbox.lifecycle import Sandbox

    sb = derive_sandbox(validate_text(TWOGEN, "x86-twogen.yml").model)
    [group] = [g for g in sb.nodes if g.job_tmp_base]
    profile = sb.profile_of(group)
    assert profile.scratch.devices == [SCRATCH_STANDIN] and profile.scratch.filesystem == "xfs"  # the source's
    assert group.job_tmp_base == "/local/jobs"
    disks = Sandbox(name="t", workdir=tmp_path, cluster=sb).scratch_disks()
    assert sorted(disks) == nodeset_list(group.hosts)
    [(device, backing, size)] = disks[sorted(disks)[0]]
    assert (device, backing.parent, size) == (SCRATCH_STANDIN, tmp_path / "disks", 1)


def nodeset_list(hosts: str) -> list[str]:
    from hal_provision.hostlist import nodeset

    return sorted(nodeset(hosts))
