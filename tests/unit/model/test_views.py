"""The model's derived views, each worked out once and read by checks, renderers, the portal,
the wrapper suite and the sandbox: who mounts what, the GPFS cluster's members, the hardware
behind a partition, a virtual partition's job shape, Slurm's daemon timeouts, Slurm times,
and the hostlist helpers."""

from __future__ import annotations

import pytest

from hal_provision.checks import run_all
from hal_provision.findings import Level
from hal_provision.hostlist import empty, fold_or_dash, nodeset, outside, overlap
from hal_provision.loader import load_text
from hal_provision.render.swsuite import table
from hal_provision.sandbox.storage import shared_mounts
from hal_provision.node.swsuite.translate import Request, SwError, resolve


# ---- who mounts what ------------------------------------------------------------------------


def test_gpfs_members_and_its_model_nodes(hal):
    assert str(hal.storage.gpfs.members) == "ddn[1-2]-a,ddn[1-2]-b,hal[01-16],hal-dev,hal-dtn,hal-login"
    assert str(hal.gpfs_nodes) == "hal[01-16],hal-dev,hal-dtn,hal-login"  # the appliance servers left out


def test_shared_mounts_name_each_file_system_its_mount_point_and_hosts(hal, twogen):
    assert [(m.name, m.mount_point, str(m.hosts)) for m in hal.shared_mounts] == [
        ("halfs", "/home", "hal[01-16],hal-dev,hal-dtn,hal-login"),
        ("misc", "/sw", str(nodeset(hal.storage.nfs.mounts[0].clients))),
        ("backup", "/backup", "hal-mgmt1"),
        ("backup-mgmt2", "/backup-mgmt2", "hal-mgmt2"),
    ]
    assert [(m.name, m.mount_point, str(m.hosts)) for m in twogen.shared_mounts] == [
        ("home", "/home", "tg[01-08],tg-login"),
        ("sw", "/sw", "tg[01-08],tg-login"),
    ]


def test_hosts_mounting_a_path_and_mount_points_on_hosts(hal, twogen):
    assert str(hal.hosts_mounting("/home/alice/data")) == "hal[01-16],hal-dev,hal-dtn,hal-login"
    assert not len(hal.hosts_mounting("/tmp")) and not len(hal.hosts_mounting("/homework"))
    # twogen's NFS server exports /export/home, not the mount point: it holds no /home of its own
    assert str(twogen.hosts_mounting("/home")) == "tg[01-08],tg-login"
    assert hal.mount_points_on(nodeset("hal[01-16]")) == ["/home", "/sw"]
    assert hal.mount_points_on(nodeset("hal-dtn")) == ["/home"]
    assert hal.mount_points_on(nodeset("hal-dtn,hal01")) == ["/home"]  # on every host of them
    assert hal.mount_points_on(nodeset("hal-mgmt1")) == ["/backup"]
    assert hal.mount_points_on(nodeset("hal-mgmt1,hal-login")) == []


def test_hosts_mounting_is_a_new_set(hal):
    hosts = hal.hosts_mounting("/home")
    hosts.update(nodeset("elsewhere"))
    assert "elsewhere" not in hal.hosts_mounting("/home") and "elsewhere" not in hal.gpfs_nodes


def test_the_sandbox_binds_what_the_model_mounts(hal):
    keep = nodeset("hal-mgmt1,hal-login,hal[01-02]")
    assert {key: str(hosts) for key, hosts in shared_mounts(hal, keep).items()} == {
        ("halfs", "/home"): "hal[01-02],hal-login",
        ("misc", "/sw"): str(overlap(nodeset(hal.storage.nfs.mounts[0].clients), keep)),
        ("backup", "/backup"): "hal-mgmt1",
    }


# ---- the hardware behind a partition ---------------------------------------------------------


def test_partition_hardware_and_the_build_jobs_are_shaped_for(hal, twogen):
    assert [(b.name, b.count) for b in hal.partition_hardware("gpu")] == [("ac922", 16)]
    assert [(b.name, b.count) for b in twogen.partition_hardware("gpu")] == [("hgx-a100", 4), ("hgx-h100", 4)]
    assert [(b.name, b.count) for b in twogen.partition_hardware("h100")] == [("hgx-h100", 4)]
    assert twogen.partition_hardware("nope") == [] and twogen.partition_build("nope") is None
    assert twogen.partition_build("h100").name == "hgx-h100"
    node = hal.job_node("gpu")
    assert node == {
        "sockets": 2,
        "cores_per_socket": 20,
        "threads_per_core": 4,
        "real_memory_mib": hal.real_memory_mib(hal.hardware["ac922"]),
        "gpu_type": "v100",
        "gpu_sockets": [0, 0, 1, 1],
        "count": 16,
    }
    assert table(hal)["virtual_partitions"]["gpux4"]["node"] == node


# ---- a virtual partition's job shape: one resolver -------------------------------------------


@pytest.mark.parametrize("case", ["hal", "twogen"])
def test_job_shape_is_what_swrun_submits(case, hal, twogen):
    model = hal if case == "hal" else twogen
    suite = table(model)
    for vp in model.swsuite.virtual_partitions:
        shape = model.job_shape(vp)
        args = resolve(suite, Request(vp.name))
        assert f"--nodes={shape.nodes}" in args and f"--ntasks-per-node={shape.tasks_per_node}" in args
        assert f"--sockets-per-node={shape.sockets_per_node}" in args
        assert f"--cores-per-socket={shape.cores_per_socket}" in args


GPUX6 = (
    "    - {name: gpux8, kind: gpu, partition: gpu, gpus: 8,",
    "    - {name: gpux6, kind: gpu, partition: gpu, gpus: 6, mem_per_cpu_mib: 1200, max_time_hours: 24}\n"
    "    - {name: gpux8, kind: gpu, partition: gpu, gpus: 8,",
)
OFFER = (
    "virtual_partitions: [gpux1, gpux2, gpux4, cpun1], max_hours: 24}\n    - {name: jupyterlab",
    "virtual_partitions: [gpux1, gpux6, gpux8, cpun2], max_hours: 24}\n    - {name: jupyterlab",
)


def test_portal_and_swsuite_checks_agree_with_swrun_on_nodes(edited):
    """gpux6 on nodes of 4 GPUs: swrun refuses it (GPUs span nodes only as whole nodes), and so
    does the swsuite check; the portal check used to round it up to '2 nodes' on its own. Now
    it asks the same resolver: it says nothing of gpux6 (the swsuite check says why), and the
    nodes it names for the others are those swrun submits."""
    model = load_text(edited(GPUX6, OFFER), "c.yml").model
    found = run_all(model)
    suite = table(model)
    with pytest.raises(SwError, match="span nodes only as whole nodes"):
        resolve(suite, Request("gpux6"))
    vps = [vp.name for vp in model.swsuite.virtual_partitions]
    swsuite_errors = {
        vps[f.path[2]] for f in found if f.level is Level.error and f.path[:2] == ("swsuite", "virtual_partitions")
    }
    assert swsuite_errors == {"gpux6"}
    portal = {f.message for f in found if f.path[:4] == ("portal", "apps", 0, "virtual_partitions")}
    assert not any("gpux6" in message for message in portal)
    for name in ("gpux8", "cpun2"):
        nodes = next(a for a in resolve(suite, Request(name)) if a.startswith("--nodes=")).split("=")[1]
        assert any(f"offers {name}, which spans {nodes} nodes" in message for message in portal), portal


# ---- the hostlist helpers --------------------------------------------------------------------


def test_hostlist_set_helpers():
    a, b = nodeset("n[1-4]"), nodeset("n[3-6]")
    assert str(overlap(a, b)) == "n[3-4]" and str(outside(a, b)) == "n[1-2]"
    assert not len(outside(a, nodeset("n[1-9]"))) and not len(empty())
    assert str(a) == "n[1-4]" and str(b) == "n[3-6]"  # neither operand changes
    assert fold_or_dash(["n2", "n1", "n2"]) == "n[1-2]" and fold_or_dash([]) == "-"


# ---- Slurm's daemon timeouts -----------------------------------------------------------------


def test_slurm_daemon_timeouts_are_model_fields(hal, edited):
    from hal_provision.render.slurm import slurm_conf

    assert (hal.slurm.slurmctld_timeout_s, hal.slurm.slurmd_timeout_s) == (120, 300)  # the defaults: today's values
    model = load_text(
        edited(("  memory_reserve_mib:", "  slurmd_timeout_s: 900\n  slurmctld_timeout_s: 60\n  memory_reserve_mib:")),
        "c.yml",
    ).model
    conf = slurm_conf(model)
    assert "\nSlurmctldTimeout=60\n" in conf and "\nSlurmdTimeout=900\n" in conf
    # the health check compares its interval with the model's SlurmdTimeout, not a copy of it
    model.health.interval_s = 600
    assert not [f for f in run_all(model) if f.path == ("health", "interval_s")]
    model.slurm.slurmd_timeout_s = 300
    assert [f.message for f in run_all(model) if f.path == ("health", "interval_s")] == [
        "every 600 s is longer than SlurmdTimeout (300 s): a node that fails a check keeps taking jobs for longer "
        "than a node that stops answering"
    ]


@pytest.mark.parametrize(
    ("written", "controllers"),
    [
        ("hal-mgmt1", ("hal-mgmt1",)),
        ('"hal-mgmt2,hal-mgmt1"', ("hal-mgmt2", "hal-mgmt1")),  # the order written, not the sorted one
        ('"@mgmt-aux,@mgmt-main"', ("hal-mgmt2", "hal-mgmt1")),  # references too, each in its group's order
        ('"@role:management"', ("hal-mgmt1", "hal-mgmt2")),
        ('"hal-mgmt1,hal-mgmt1"', ("hal-mgmt1",)),  # each host once (slurmctld_hosts_distinct reports it)
    ],
)
def test_controllers_are_the_primary_then_the_backup(edited, written, controllers):
    from hal_provision.render.slurm import slurm_conf

    model = load_text(edited(("  slurmctld: hal-mgmt1\n", f"  slurmctld: {written}\n")), "c.yml").model
    assert model.controllers == controllers
    assert [line for line in slurm_conf(model).splitlines() if line.startswith("SlurmctldHost=")] == [
        f"SlurmctldHost={host}" for host in controllers
    ]


def test_state_save_location_is_a_model_field(hal, edited):
    from hal_provision.render.slurm import slurm_conf

    assert hal.slurm.state_save_location == "/var/lib/slurm/slurmctld"  # the default: Debian's, today's value
    assert "\nStateSaveLocation=/var/lib/slurm/slurmctld\n" in slurm_conf(hal)
    model = load_text(
        edited(("  memory_reserve_mib:", "  state_save_location: /srv/ctld/state\n  memory_reserve_mib:")), "c.yml"
    ).model
    assert "\nStateSaveLocation=/srv/ctld/state\n" in slurm_conf(model)
    bad = load_text(
        edited(("  memory_reserve_mib:", "  state_save_location: var/ctld\n  memory_reserve_mib:")), "c.yml"
    )
    assert bad.model is None and [f.dotted for f in bad.findings] == ["slurm.state_save_location"]


# ---- Slurm time strings ----------------------------------------------------------------------


def test_slurm_times_read_and_written_in_one_module():
    from hal_provision.model import slurmtime
    from hal_provision.model.slurm import slurm_minutes
    from hal_provision.plan.slurm import clock as plan_clock
    from hal_provision.render.accounting import slurm_clock

    assert slurm_minutes is slurmtime.minutes
    assert [slurmtime.minutes(v) for v in ("30", "1:30", "02:00:00", "1-12", "1-00:00:01", "UNLIMITED")] == [
        30,
        1.5,
        120,
        2160,
        1440 + 1 / 60,
        None,
    ]
    assert [slurmtime.limit_minutes(v) for v in (None, "", "NONE", "20:00:00")] == [None, None, None, 1200]
    assert slurmtime.clock(1440 + 1 / 60) == "1-00:01:00" and slurmtime.clock(1200) == "20:00:00"
    assert slurm_clock("1-00:00:00") == "1-00:00:00" and slurm_clock(None) == "" and slurm_clock("INFINITE") == ""
    assert plan_clock(None) == "UNLIMITED" and plan_clock(90.5) == "01:31:00"
    with pytest.raises(ValueError, match="not a Slurm time"):
        slurmtime.check("1:2:3:4")
    with pytest.raises(ValueError, match="not unlimited"):
        slurmtime.check_finite("infinite")
