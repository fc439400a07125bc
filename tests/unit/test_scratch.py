"""Node-local scratch (issue 29, first part): local disks and their scratch file system in a
hardware profile, each job's private /tmp per node group, and what Slurm is told of them."""

from __future__ import annotations

from pathlib import Path

from hal_provision.cli.validate import validate_text
from hal_provision.findings import Level
from hal_provision.render import render_all

TWOGEN = (Path(__file__).resolve().parents[1] / "data" / "clusters" / "x86-twogen.yml").read_text()


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
        "NodeName=tg[01-08] AutoBasePath=true BasePath=/local/jobs")


def test_without_job_tmp_there_is_no_job_container():
    text = TWOGEN.replace("    job_tmp_base: /local/jobs                 # each job's private /tmp on the NVMe scratch\n", "")
    text = text.replace("    job_tmp_base: /local/jobs\n", "")
    tree = render_all(validate_text(text, "x86-twogen.yml").model)
    assert "files/etc/slurm/job_container.conf" not in tree
    assert "JobContainerType" not in tree["files/etc/slurm/slurm.conf"]
    assert "\nTmpFS=/local\n" in tree["files/etc/slurm/slurm.conf"]  # the scratch still sizes TmpDisk


def test_scratch_mount_points_that_differ_are_one_error():
    text = TWOGEN.replace("scratch: {devices: [/dev/nvme0n1], mount_point: /local,",
                          "scratch: {devices: [/dev/nvme0n1], mount_point: /scratch,")
    findings = validate_text(text, "x86-twogen.yml").findings
    errors = [f for f in findings if f.level is Level.error]
    assert [f.dotted for f in errors] == ["hardware.hgx-h100.scratch.mount_point"], [f.format() for f in findings]
    assert "TmpFS is one path" in errors[0].message
    warned = [f.dotted for f in findings if f.level is Level.warning]
    assert "nodes[4].job_tmp_base" in warned  # /local/jobs is no longer on h100's scratch


def test_raid0_needs_two_devices():
    text = TWOGEN.replace("scratch: {devices: [/dev/nvme0n1, /dev/nvme1n1], layout: raid0,",
                          "scratch: {devices: [/dev/nvme0n1], layout: raid0,")
    loaded = validate_text(text, "x86-twogen.yml")
    assert loaded.model is None
    assert any("raid0 stripes two or more devices" in f.message for f in loaded.findings)
