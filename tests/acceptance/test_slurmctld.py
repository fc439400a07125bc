"""slurmctld loads the rendered slurm.conf, gres.conf, topology.conf and cgroup.conf, and
`scontrol` shows it understood them as the model says."""

from __future__ import annotations

import re
import subprocess

import pytest
from ClusterShell.NodeSet import NodeSet

from hal_provision.checks import run_all
from hal_provision.findings import Level
from hal_provision.hostlist import nodeset
from hal_provision.model import Cluster

from infra.deployed import retry  # tests/ is on sys.path, as for the harness

from . import expected
from .conftest import load_cluster
from .slurm_harness import (
    Controller,
    HarnessError,
    line_key,
    records,
    show_config,
    slurm_conf_rewrites,
    slurm_minutes,
    untouched_lines,
)

pytestmark = pytest.mark.acceptance

# Log lines slurmctld writes in this harness that do not concern the rendered files.
KNOWN_LOG_ERRORS = {
    r"Configured MailProg is invalid": "MailProg defaults to /bin/mail, which this host lacks (a deploy concern)",
    r"Job accounting information gathered, but not stored|Even though we are collecting "
    r"accounting information": "the harness's accounting_storage/none",
    r"mpi/pmix|MPI: Cannot create context": "slurmctld loads every MPI plugin; Debian's mpi/pmix_v4 dlopens "
    "/usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so (package libpmix-dev), absent here",
    r"Could not open (node|job|reservation|trigger) state file|Trying backup state save file": "first start on an empty StateSaveLocation",
    r"_shutdown_bu_thread:send/recv \S+: Network is unreachable": "a primary alone in its namespace: at its start it tells the backup host to stand down, and the "
    "cases start no backup (test_a_backup_controller_stands_by_and_takes_over_from_the_shared_state does)",
    r"PriorityWeight(Age|Fairshare) can only be used with SlurmDBD, ignoring": "the harness's accounting_storage/none: age and fair-share come from slurmdbd's records",
    r"High latency for 1000 calls to gettimeofday\(\)": "slurmctld times its clock at start and calls a slow one an error: the machine was busy (CI runs these "
    "tests at low priority beside the sandboxes), not a configuration slurmctld refused",
}

# Rendered slurm.conf keys whose value scontrol shows under another name.
SHOWN_AS = {"SlurmctldHost": "SlurmctldHost[{index}]", "PriorityWeightFairshare": "PriorityWeightFairShare"}
# Rendered in minutes, shown as a time of day.
MINUTES_KEYS = {"PriorityCalcPeriod"}
PER_ITEM_KEYS = {"NodeName", "NodeSet", "PartitionName"}


def test_the_daemons_are_of_the_major_under_test(slurm):
    """The chroot really runs the root's Slurm: each program reports the major the tree is
    rendered for. (slurmdbd -V and scontrol -V look for a configuration first; the other tests run
    them by the same path.)"""
    for prog in ("slurmctld", "slurmd"):
        done = subprocess.run([*slurm.argv(prog), "-V"], capture_output=True, text=True, timeout=20)
        assert done.stdout.startswith(f"slurm-wlm {slurm.major}."), (prog, done.stdout, done.stderr)


def test_harness_rewrites_only_its_own_keys(case):
    """Everything slurmctld loads, except the documented harness keys, is the rendered text."""
    scratch = case.controller.scratch
    rewrites = slurm_conf_rewrites(scratch.root, scratch.munge_socket)
    rendered = scratch.rendered_text("slurm.conf")
    loaded = scratch.slurm_conf.read_text()
    assert untouched_lines(loaded, rewrites) == untouched_lines(rendered, rewrites)
    for name in ("gres.conf", "topology.conf", "cgroup.conf"):
        assert (scratch.conf_dir / name).read_text() == scratch.rendered_text(name), name


def test_every_compute_node_is_loaded_with_its_hardware(case):
    nodes = records(case.controller.scontrol("-o", "show", "node"), "NodeName")
    want = expected.compute_nodes(case.cluster)
    assert set(nodes) == set(want)
    for host, exp in want.items():
        got = nodes[host]
        p = exp.profile
        assert (got["CPUTot"], got["Boards"], got["Sockets"], got["CoresPerSocket"], got["ThreadsPerCore"]) == (
            str(p.cpus),
            "1",
            str(p.sockets),
            str(p.cores_per_socket),
            str(p.threads_per_core),
        ), host
        assert got["RealMemory"] == str(exp.real_memory_mib), host
        assert got["Gres"] == exp.gres, host
        assert set(got["AvailableFeatures"].split(",")) == exp.features, host


def test_hal_nodes_are_the_published_ac922(hal):
    """The paper's numbers, literally: 16 nodes of 2x20-core POWER9 SMT4 with 4 V100."""
    nodes = records(hal.controller.scontrol("-o", "show", "node"), "NodeName")
    assert set(nodes) == set(nodeset("hal[01-16]"))
    profile = hal.cluster.hardware["ac922"]
    for host, got in nodes.items():
        assert got["CPUTot"] == "160", host
        assert (got["Sockets"], got["CoresPerSocket"], got["ThreadsPerCore"]) == ("2", "20", "4"), host
        assert got["Gres"] == "gpu:v100:4", host
        assert got["RealMemory"] == str(hal.cluster.real_memory_mib(profile)), host
        assert {"ac922", "power9", "v100", "nvlink"} <= set(got["AvailableFeatures"].split(","))


def test_partitions_are_loaded_as_described(case):
    parts = records(case.controller.scontrol("-o", "show", "partition"), "PartitionName")
    assert set(parts) == {p.name for p in case.cluster.slurm.partitions}
    nodes = expected.compute_nodes(case.cluster)
    for p in case.cluster.slurm.partitions:
        got = parts[p.name]
        members = nodeset(p.nodes)
        assert NodeSet(got["Nodes"]) == members, p.name
        assert got["TotalNodes"] == str(len(members)), p.name
        assert got["TotalCPUs"] == str(sum(nodes[h].profile.cpus for h in members)), p.name
        assert got["Default"] == ("YES" if p.default else "NO"), p.name
        assert slurm_minutes(got["MaxTime"]) == slurm_minutes(p.max_time), p.name
        want_default = slurm_minutes(p.default_time) if p.default_time else None
        assert slurm_minutes(got["DefaultTime"]) == want_default, p.name
        assert got["MaxNodes"] == str(p.max_nodes or "UNLIMITED"), p.name
        if p.def_mem_per_cpu_mib:
            assert got.get("DefMemPerCPU") == str(p.def_mem_per_cpu_mib), p.name
        assert got["QoS"] == (p.qos or "N/A"), p.name
        assert got["PriorityTier"] == str(1 if p.priority_tier is None else p.priority_tier), p.name
        assert got["State"] == p.state, p.name


def test_hal_gpu_partition(hal):
    got = records(hal.controller.scontrol("-o", "show", "partition"), "PartitionName")["gpu"]
    assert (got["Nodes"], got["Default"], got["MaxTime"], got["TotalCPUs"]) == (
        "hal[01-16]",
        "YES",
        "1-00:00:00",
        "2560",
    )


def test_twogen_partition_spans_both_generations(twogen):
    """One partition over two NodeName lines: each node keeps its own generation's hardware."""
    nodes = records(twogen.controller.scontrol("-o", "show", "node"), "NodeName")
    parts = records(twogen.controller.scontrol("-o", "show", "partition"), "PartitionName")
    assert NodeSet(parts["gpu"]["Nodes"]) == nodeset("tg[01-08]")
    assert {nodes[h]["Gres"] for h in nodeset("tg[01-08]")} == {"gpu:a100:8", "gpu:h100:8"}
    assert (nodes["tg01"]["CPUTot"], nodes["tg01"]["CoresPerSocket"]) == ("256", "64")
    assert (nodes["tg05"]["CPUTot"], nodes["tg05"]["CoresPerSocket"]) == ("224", "56")
    assert nodes["tg01"]["RealMemory"] != nodes["tg05"]["RealMemory"]
    assert parts["gpu"]["TotalCPUs"] == str(4 * 256 + 4 * 224)
    assert NodeSet(parts["h100"]["Nodes"]) == nodeset("tg[05-08]")
    assert (parts["h100"]["PriorityTier"], parts["gpu"]["PriorityTier"]) == ("2", "1")


def _topology(controller) -> dict[str, dict[str, str]]:
    return records(controller.scontrol("show", "topology"), "SwitchName")


def _assert_topology(got: dict[str, dict[str, str]], cluster: Cluster) -> None:
    want = expected.switches(cluster)
    assert set(got) == set(want)
    for name, exp in want.items():
        assert int(got[name]["Level"]) == exp.level, name
        assert NodeSet(got[name]["Nodes"]) == exp.nodes, name
        assert set(NodeSet(got[name].get("Switches", ""))) == exp.children, name


def test_topology_is_loaded_as_cabled(case):
    _assert_topology(_topology(case.controller), case.cluster)


def test_twogen_leaf_spine_tree(twogen):
    got = _topology(twogen.controller)
    assert NodeSet(got["ib-spine1"]["Switches"]) == NodeSet("ib-leaf[1-2]")
    assert got["ib-spine1"]["Level"] == "1"
    assert (got["ib-leaf1"]["Nodes"], got["ib-leaf2"]["Nodes"]) == ("tg[01-04]", "tg[05-08]")


def test_switch_without_slurm_nodes_is_left_out_of_the_tree(extra_controller):
    """A storage-only leaf under the spine: the renderer must not name it as a child, or
    slurmctld stops ("fatal: Switch configuration ib-spine1 has invalid child (ib-leaf3)")."""
    data = load_cluster("x86-twogen").model_dump(mode="json", exclude_none=True)
    data["fabric"]["switches"].append({"name": "ib-leaf3", "tier": "leaf", "ports": 40, "uplinks": ["ib-spine1"]})
    data["fabric"]["links"].append({"hosts": "tg-nfs", "port": 1, "switch": "ib-leaf3", "first_switch_port": 1})
    cluster = Cluster.model_validate(data)
    got = _topology(extra_controller(cluster))
    _assert_topology(got, cluster)
    assert "ib-leaf3" not in got


def test_compact_fabric_is_loaded_as_cabled(extra_controller):
    """One switch entry for both leaves and one link entry cabling hal[01-16] over them
    (`names`; `switches` with `hosts_per_switch`): slurmctld loads the tree they mean."""
    data = load_cluster("hal").model_dump(mode="json", exclude_none=True)
    data["fabric"]["switches"] = [
        {"name": "ib-spine", "tier": "spine", "ports": 36},
        {"names": "ib-leaf[1-2]", "tier": "leaf", "ports": 36, "uplinks": ["ib-spine"]},
    ]
    links = data["fabric"]["links"]
    links[0] = {
        "hosts": "hal[01-16]",
        "port": 1,
        "switches": "ib-leaf[1-2]",
        "hosts_per_switch": 8,
        "first_switch_port": 1,
    }
    for link in links[1:]:
        link["switch"] = "ib-leaf1"
    cluster = Cluster.model_validate(data)
    assert not [f for f in run_all(cluster) if f.level == Level.error]
    got = _topology(extra_controller(cluster))
    _assert_topology(got, cluster)
    assert (got["ib-leaf1"]["Nodes"], got["ib-leaf2"]["Nodes"]) == ("hal[01-08]", "hal[09-16]")
    assert NodeSet(got["ib-spine"]["Switches"]) == NodeSet("ib-leaf[1-2]")


def test_multi_rail_nodes_sit_under_one_leaf_which_slurmctld_requires(extra_controller, controllers):
    """examples/ailab.yml's GPU nodes have eight adapters, each cabled to its rail's leaf; the
    rendered topology.conf lists them under the rail-1 leaf alone, and slurmctld loads it without
    complaint (test_log_has_no_unexpected_errors, on the same case). The negative control: the
    same file with the nodes under every rail's leaf, which slurmctld reports."""
    case = controllers.get("example-ailab")
    got = _topology(case.controller)
    assert got["ib-rail1"]["Nodes"] == "gpu[01-48]" and not any(f"ib-rail{r}" in got for r in range(2, 9)), got

    def every_rail(scratch) -> None:
        path = scratch.conf_dir / "topology.conf"
        text = re.sub(r"^# (ib-rail[2-8]): .*$", r"SwitchName=\1 Nodes=gpu[01-48]", path.read_text(), flags=re.M)
        path.write_text(text.replace("Switches=ib-leaf4,ib-rail1", "Switches=ib-leaf4,ib-rail[1-8]"))

    controller = extra_controller(case.cluster, every_rail)
    assert NodeSet(_topology(controller)["ib-spine1"]["Switches"]) == NodeSet("ib-leaf4,ib-rail[1-8]")
    assert re.search(r"Multiple leaf switches contain nodes", controller.log()), controller.log()


def test_cluster_without_fabric_gets_flat_topology(extra_controller):
    """No fabric described: slurm.conf says the flat topology and slurmctld starts with it, showing
    no switch. 22.05 calls it topology/none (topology/default is fatal to it: that name is Slurm
    23.11's); 24.11 has no topology/none and silently loads it as topology/default."""
    data = load_cluster("hal").model_dump(mode="json", exclude_none=True)
    del data["fabric"]
    for names in data["monitoring"]["inputs"].values():  # no fabric, no InfiniBand counters
        names[:] = [n for n in names if n != "infiniband"]
    cluster = Cluster.model_validate(data)
    assert not [f for f in run_all(cluster) if f.level == Level.error]
    controller = extra_controller(cluster)
    want = "topology/none" if controller.scratch.slurm.major == "22.05" else "topology/default"  # renamed in 23.11
    assert show_config(controller.scontrol("show", "config"))["TopologyPlugin"] == want
    assert _topology(controller) == {}


def test_switch_with_nodes_and_switches_is_refused_before_slurm(extra_controller):
    """The contract between checks and renderer: a description either gets an error from
    `validate` or renders a configuration slurmctld loads. Here: hal16 cabled to a spine."""
    data = load_cluster("hal").model_dump(mode="json", exclude_none=True)
    data["fabric"]["switches"][0]["uplinks"] = ["ib-spine"]
    data["fabric"]["switches"].append({"name": "ib-spine", "tier": "spine", "ports": 36})
    data["fabric"]["links"][0]["hosts"] = "hal[01-15]"
    data["fabric"]["links"].append({"hosts": "hal16", "port": 1, "switch": "ib-spine", "first_switch_port": 1})
    cluster = Cluster.model_validate(data)
    refused = [f for f in run_all(cluster) if f.level == Level.error and f.check == "nodes_only_on_leaf_switches"]
    assert [f.dotted for f in refused] == ["fabric.switches[1].name"], refused
    assert "ib-spine" in refused[0].message and "hal16" in refused[0].message
    # ...and slurmctld agrees: the rendered topology.conf is fatal to it.
    with pytest.raises(HarnessError, match="has both child switches and nodes"):
        extra_controller(cluster)


def test_default_time_beyond_max_time_is_an_error_because_slurmctld_drops_it(extra_controller):
    """What the check partition_default_time_within_max says slurmctld does: it starts, logs
    the clash and drops the DefaultTime, so jobs that give no time would get the MaxTime."""
    data = load_cluster("hal").model_dump(mode="json", exclude_none=True)
    data["slurm"]["partitions"][0]["default_time"] = "2-00:00:00"
    cluster = Cluster.model_validate(data)
    found = [f for f in run_all(cluster) if f.check == "partition_default_time_within_max"]
    assert [(f.level, f.dotted) for f in found] == [(Level.error, "slurm.partitions[0].default_time")]
    assert "slurmctld ignores such a DefaultTime" in found[0].message
    controller = extra_controller(cluster)
    gpu = records(controller.scontrol("-o", "show", "partition"), "PartitionName")["gpu"]
    assert (gpu["MaxTime"], gpu["DefaultTime"]) == ("1-00:00:00", "NONE")
    assert "partition gpu DefaultTime exceeds MaxTime (2880 > 1440)" in controller.log()


def test_unknown_cgroup_key_stops_slurmctld(extra_controller):
    """Negative control: slurmctld really parses cgroup.conf, so the test above means something."""

    def add_unknown_key(scratch):
        with open(scratch.conf_dir / "cgroup.conf", "a") as f:
            f.write("ConstrainEverything=yes\n")

    refused = r"(?s)exited.*unrecognized key: ConstrainEverything.*fatal: Could not open/read/parse"
    with pytest.raises(HarnessError, match=refused):
        extra_controller(load_cluster("hal"), add_unknown_key)


def _same_setting(key: str, rendered: str, loaded: str) -> bool:
    """scontrol upper-cases some values, appends units, shows minutes as a time and adds
    implied flags (PrologFlags=Contain implies Alloc); 24.11 shows MpiDefault=none, which it has
    no plugin for and documents as a value, as '(null)'."""
    if key in MINUTES_KEYS:
        return slurm_minutes(rendered) == slurm_minutes(loaded)
    if (key, rendered, loaded) == ("MpiDefault", "none", "(null)"):
        return True
    loaded = re.sub(r" (sec|min|usec)$", "", loaded)
    if rendered.lower() == loaded.lower():
        return True
    return {f.lower() for f in rendered.split(",")} <= {f.lower() for f in loaded.split(",")}


def test_global_settings_are_loaded_as_rendered(case):
    """Every global key the renderer writes (harness keys aside) is one slurmctld knows and
    holds with the rendered value."""
    scratch = case.controller.scratch
    config = show_config(case.controller.scontrol("show", "config"))
    harness_keys = {r.key for r in slurm_conf_rewrites(scratch.root, scratch.munge_socket)}
    index: dict[str, int] = {}
    checked = 0
    for line in scratch.rendered_text("slurm.conf").splitlines():
        key = line_key(line)
        if key is None or key in harness_keys or key in PER_ITEM_KEYS:
            continue
        value = line.split("=", 1)[1]
        shown = SHOWN_AS.get(key, key).format(index=index.get(key, 0))
        index[key] = index.get(key, 0) + 1
        assert shown in config, f"slurmctld does not report {key} (rendered: {line})"
        assert _same_setting(key, value, config[shown]), f"{key}: rendered {value!r}, loaded {config[shown]!r}"
        checked += 1
    assert checked >= 20


def test_priority_is_loaded_as_modelled(case):
    """The type in force, and under multifactor the weights and decay, as slurmctld holds them:
    HAL and x86-twogen are multifactor (fair-share, QOS priorities), the workstation basic."""
    config = show_config(case.controller.scontrol("show", "config"))
    assert config["PriorityType"] == f"priority/{case.cluster.priority_type}"
    if case.cluster.priority_type == "basic":
        return
    p = case.cluster.slurm.priority
    assert (config["PriorityWeightFairShare"], config["PriorityWeightQOS"], config["PriorityWeightAge"]) == (
        str(p.weight_fairshare),
        str(p.weight_qos),
        str(p.weight_age),
    )
    assert slurm_minutes(config["PriorityDecayHalfLife"]) == slurm_minutes(p.decay_half_life)
    assert slurm_minutes(config["PriorityMaxAge"]) == slurm_minutes(p.max_age)


def test_workstation_is_first_in_first_out(controllers):
    config = show_config(controllers.get("workstation").controller.scontrol("show", "config"))
    assert config["PriorityType"] == "priority/basic"


def test_tres_weights_are_loaded_negative_ones_too(extra_controller):
    """PriorityWeightTRES in slurm.conf's order, a negative weight accepted. (GRES/gpu is left
    out: the harness's accounting_storage/none drops AccountingStorageTRES=gres/gpu, and a
    weight on an untracked TRES stops slurmctld: "TRES weight ... is not a configured TRES type".)"""
    data = load_cluster("hal").model_dump(mode="json", exclude_none=True)
    data["slurm"]["priority"].update(
        weight_tres={"Mem": 2000, "CPU": -1000}, favor_small=True, usage_reset_period="MONTHLY", calc_period_minutes=10
    )
    cluster = Cluster.model_validate(data)
    assert not [f for f in run_all(cluster) if f.level != Level.info]
    config = show_config(extra_controller(cluster).scontrol("show", "config"))
    assert (
        config["PriorityWeightTRES"],
        config["PriorityFavorSmall"].lower(),
        config["PriorityUsageResetPeriod"],
        config["PriorityCalcPeriod"],
    ) == ("CPU=-1000,Mem=2000", "yes", "MONTHLY", "00:10:00")  # 24.11: 'yes'


def test_cgroup_conf_is_parsed_with_the_model_values(case):
    """slurmctld parses cgroup.conf strictly (an unknown key is fatal) and reports it."""
    config = show_config(case.controller.scontrol("show", "config"))
    c = case.cluster.slurm.cgroup
    want = {
        "ConstrainCores": c.constrain_cores,
        "ConstrainDevices": c.constrain_devices,
        "ConstrainRAMSpace": c.constrain_ram_space,
        "ConstrainSwapSpace": c.constrain_swap_space,
    }
    for key, flag in want.items():
        assert config[key] == ("yes" if flag else "no"), key
    for line in case.controller.scratch.rendered_text("cgroup.conf").splitlines():
        key = line_key(line)
        if key:
            assert config.get(key, "").lower() == line.split("=", 1)[1].lower(), line
    assert config["ProctrackType"] == "proctrack/cgroup"
    assert "task/cgroup" in config["TaskPlugin"]


def test_a_backup_controller_stands_by_and_takes_over_from_the_shared_state(extra_controller):
    """x86-backup-controller: slurmctld loads both SlurmctldHost lines, the second host's slurmctld
    runs as the backup beside the primary (`scontrol ping` from either lists both UP, in order),
    and on `scontrol takeover` it takes control from the state the primary saved in the
    StateSaveLocation both use (here one scratch directory; on a cluster the shared file system)."""
    cluster = load_cluster("x86-backup-controller")
    primary_host, backup_host = cluster.controllers
    primary = extra_controller(cluster)
    backup = Controller(primary.scratch, backup_host, backup_of=primary)
    try:
        config = show_config(primary.scontrol("show", "config"))
        assert (config["SlurmctldHost[0]"], config["SlurmctldHost[1]"]) == (primary_host, backup_host)
        both_up = [f"Slurmctld(primary) at {primary_host} is UP", f"Slurmctld(backup) at {backup_host} is UP"]
        assert primary.ping().splitlines() == backup.ping().splitlines() == both_up
        assert "slurmctld running in background mode" in backup.log(), backup.log()  # standby, not in control
        assert "Running as primary controller" not in backup.log(), backup.log()

        # Something only the primary's saved state carries, then the backup takes control.
        primary.scontrol("update", "nodename=tg01", "state=drain", "reason=before-takeover")
        backup.scontrol("takeover")
        assert retry(lambda: "Running as primary controller" in backup.log(), 60, 0.5), backup.log()
        assert retry(lambda: primary.proc.poll() is not None, 30, 0.5), "the primary kept running after the takeover"
        assert backup.ping().splitlines()[:2] == [
            f"Slurmctld(primary) at {primary_host} is DOWN",
            f"Slurmctld(backup) at {backup_host} is UP",
        ]
        node = records(backup.scontrol("-o", "show", "node", "tg01"), "NodeName")["tg01"]
        assert "DRAIN" in node["State"] and node["Reason"] == "before-takeover", node
    finally:
        backup.close()


def test_log_has_no_unexpected_errors(case):
    """Anything slurmctld complains about, beyond the harness's known noise, is a finding."""
    log = case.controller.log()
    version = case.cluster.slurm.version  # the major the tree is rendered for, the one running it
    assert f"slurmctld version {version}." in log and "Running as primary controller" in log, log
    unexpected = [
        line
        for line in log.splitlines()
        if re.search(r"\b(error|fatal|warning):", line, re.IGNORECASE)
        and not any(re.search(p, line) for p in KNOWN_LOG_ERRORS)
    ]
    assert not unexpected, "\n".join(unexpected)
