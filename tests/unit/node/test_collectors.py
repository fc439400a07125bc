"""HAL's monitoring collectors and the Telegraf stand-in (hal_provision/node/monitoring).

Parsers run on the command output under tests/data: slurm/ and ipmi/ are written from the
tools' documented formats (see their READMEs; recordings added there later are picked up),
hardware/h100-x1/ is nvidia-smi output recorded on a real H100 node. The emulated Telegraf
inputs read this machine's real /proc; the backup collector is hal-backup's `age --influx` on a
real snapshot (GNU tar). Every collector's output is checked against the catalogue (INPUTS in
hal_provision/model/monitoring.py). The package is run as a node runs
it, copied alone as `hal_monitoring` beside no hal-provision. The stand-in writes to a real
InfluxDB when /usr/bin/influxd is installed.
"""

from __future__ import annotations

import ast
import itertools
import json
import math
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from hal_provision.model.monitoring import INPUTS
from hal_provision.render import monitoring as render_monitoring
from hal_provision.loader import validate
from hal_provision.node import backup as backup_program
from hal_provision.node.monitoring import bmc, gpu, healthstate, host, lineprotocol as lp, probe, pullstate, slurm
from hal_provision.node.monitoring import standin
from hal_provision.node.monitoring.commands import CollectorError

DATA = Path(__file__).resolve().parents[2] / "data"
SLURM = DATA / "slurm"
IPMI = DATA / "ipmi"
H100 = DATA / "hardware" / "h100-x1"
PACKAGE = Path(slurm.__file__).parent
INFLUXD = Path("/usr/bin/influxd")


def fixtures(folder: Path, prefix: str) -> list[Path]:
    return sorted(p for p in folder.glob(f"{prefix}.*.txt"))


def lines_of(points, stamp=1_700_000_000_000_000_000) -> list[lp.Line]:
    return [lp.parse_line(p.format(stamp)) for p in points]


# ---- line protocol ----------------------------------------------------------------------------


def test_a_point_is_escaped_as_influxdb_1x_reads_it():
    line = lp.format_point(
        "my meas,x",
        {"tag key": "a=b,c d", "empty": ""},
        {"f=1": 1, "ratio": 0.5, "on": True, "text": 'say "hi"\\now\nnext', "nan": math.nan},
        1700000000000000000,
    )
    assert line == (
        "my\\ meas\\,x,tag\\ key=a\\=b\\,c\\ d f\\=1=1i,on=true,ratio=0.5,"
        'text="say \\"hi\\"\\\\now next" 1700000000000000000'
    )


def test_a_point_without_a_field_is_refused():
    with pytest.raises(lp.LineProtocolError):
        lp.format_point("m", {"a": "b"}, {"x": math.inf})


@pytest.mark.parametrize(
    "measurement,tags,fields",
    [
        ("cpu", {"cpu": "cpu-total"}, {"usage_idle": 99.5}),
        ("bmc", {"sensor": "Inlet Temp", "unit": "degrees_C", "kind": "temperature"}, {"value": 23.0, "ok": 1}),
        ("odd name, really", {"k,=": "v =,"}, {"s": 'a "quoted", spaced = string \\ with backslash', "n": -3}),
        ("slurm_node", {"node": "hal05", "state": "drained"}, {"reason": "GPU 2 XID 79, fell off the bus", "up": 0}),
        ("unicode", {"name": "NVIDIA H100 80GB HBM3 – ünïcode"}, {"v": 1e-05, "big": 2**62, "neg": False}),
    ],
)
def test_format_and_parse_round_trip(measurement, tags, fields):
    parsed = lp.parse_line(lp.format_point(measurement, tags, fields, 42))
    assert (parsed.measurement, parsed.tags, parsed.fields(), parsed.timestamp_ns) == (measurement, tags, fields, 42)
    assert lp.parse_line(parsed.format()) == parsed


def test_parse_keeps_the_field_set_and_reads_lines_without_timestamp():
    line = lp.parse_line('m,a=1 s="x y,z=w",v=2i')
    assert (line.tags, line.fields_raw, line.timestamp_ns) == ({"a": "1"}, 's="x y,z=w",v=2i', None)
    assert lp.parse_line("# a comment") is None and lp.parse_line("   ") is None


@pytest.mark.parametrize("bad", ['m s="open', "m", "m,a=1", "m x=1 notatime", "m,novalue x=1", "m x=1j"])
def test_parse_refuses_broken_lines(bad):
    with pytest.raises(lp.LineProtocolError):
        lp.parse_line(bad)


# ---- slurm ----------------------------------------------------------------------------------------


def test_every_slurm_fixture_is_named_after_a_command():
    names = [p.name for p in SLURM.glob("*.txt")]
    assert names, "no Slurm fixtures"
    assert all(n.split(".")[0] in slurm.COMMANDS and re.search(r"\.(documented|recorded)\.txt$", n) for n in names)


def test_the_slurm_commands_are_the_documented_ones():
    assert slurm.SQUEUE == (
        "squeue",
        "--noheader",
        "--all",
        "--array",
        "--Format=JobID:|,Partition:|,UserName:|,Account:|,State:|,NumCPUs:|,NumNodes:|,TimeUsed:|,tres-alloc:|,Name:",
    )
    assert slurm.SCONTROL_NODES == ("scontrol", "--all", "--oneliner", "show", "node")


@pytest.mark.parametrize("path", fixtures(SLURM, "squeue"), ids=lambda p: p.name)
def test_squeue_output_parses(path):
    text = path.read_text()
    jobs = slurm.parse_squeue(text)
    assert len(jobs) == len([line for line in text.splitlines() if line.strip()])
    assert all(j.cpus > 0 and j.nodes > 0 for j in jobs)
    points = slurm.job_points(jobs)
    counted = [j for j in jobs if j.state in ("running", "pending")]
    assert sum(p.fields["jobs"] for p in points if p.measurement == "slurm_jobs") == len(counted)


@pytest.mark.parametrize("path", fixtures(SLURM, "scontrol-show-node"), ids=lambda p: p.name)
def test_scontrol_node_output_parses(path):
    text = path.read_text()
    nodes = slurm.parse_scontrol_nodes(text)
    assert len(nodes) == len([line for line in text.splitlines() if line.strip()])
    for node in slurm.node_points(nodes):
        f = node.fields
        assert f["up"] + f["down"] + f["drained"] == 1
        assert 0 <= f["gpus_alloc"] <= f["gpus_total"] and 0 <= f["cpus_alloc"] <= f["cpus_total"]


def _by(points, measurement, *keys):
    return {tuple(p.tags[k] for k in keys): p.fields for p in points if p.measurement == measurement}


def test_jobs_are_summed_per_partition_user_account_and_state():
    points = slurm.job_points(slurm.parse_squeue((SLURM / "squeue.hal-busy.documented.txt").read_text()))
    summary = _by(points, "slurm_jobs", "partition", "user", "account", "state")
    assert summary == {
        ("gpu", "alice", "vision", "running"): {"jobs": 2, "gpus": 20, "cpus": 200, "nodes": 5},
        ("gpu", "alice", "vision", "pending"): {"jobs": 2, "gpus": 2, "cpus": 20, "nodes": 2},  # two array tasks
        ("gpu", "bob", "nlp", "running"): {"jobs": 1, "gpus": 1, "cpus": 10, "nodes": 1},
        ("gpu", "bob", "nlp", "pending"): {"jobs": 1, "gpus": 2, "cpus": 20, "nodes": 1},
        ("gpu", "carol", "(null)", "running"): {"jobs": 1, "gpus": 0, "cpus": 4, "nodes": 1},
        ("gpu,debug", "dave", "physics", "pending"): {"jobs": 1, "gpus": 8, "cpus": 80, "nodes": 2},
    }
    running = _by(points, "slurm_job", "job_id")
    assert set(running) == {("1201",), ("1202",), ("1210",), ("1215",)}
    assert running[("1201",)] == {
        "gpus": 4,
        "cpus": 40,
        "nodes": 1,
        "run_seconds": 2 * 3600 + 13 * 60 + 7,
        "name": "resnet50 | ablation",
    }
    assert running[("1202",)]["run_seconds"] == 27 * 3600


def test_flagged_job_states_count_as_running_or_pending():
    jobs = slurm.parse_squeue((SLURM / "squeue.flagged-states.documented.txt").read_text())
    assert [j.state for j in jobs] == ["running", "pending", "completing", "suspended", "running"]
    summary = _by(slurm.job_points(jobs), "slurm_jobs", "user", "state")
    assert {k: v["jobs"] for k, v in summary.items()} == {
        ("alice", "running"): 1,
        ("bob", "pending"): 1,
        ("carol", "running"): 1,
    }


def test_typed_gpu_tres_are_counted_once():
    points = slurm.job_points(slurm.parse_squeue((SLURM / "squeue.x86-typed.documented.txt").read_text()))
    assert {k: v["gpus"] for k, v in _by(points, "slurm_jobs", "user", "state").items()} == {
        ("erin", "running"): 2,
        ("erin", "pending"): 4,
        ("frank", "running"): 0,
    }


HAL_NODES = {  # node: state tag, up, down, drained, gpus_alloc, cpus_alloc
    "hal01": ("allocated", 1, 0, 0, 4, 160),
    "hal02": ("mixed", 1, 0, 0, 4, 40),
    "hal03": ("mixed", 1, 0, 0, 1, 10),
    "hal04": ("idle", 1, 0, 0, 0, 0),
    "hal05": ("drained", 0, 0, 1, 0, 0),
    "hal06": ("draining", 0, 0, 1, 0, 4),
    "hal07": ("down", 0, 1, 0, 0, 0),
    "hal08": ("completing", 1, 0, 0, 0, 0),
    "hal09": ("drained", 0, 1, 0, 0, 0),  # sinfo shows drained*; the node is down
    "hal10": ("idle", 0, 1, 0, 0, 0),  # idle* in sinfo: not responding
}


def test_node_states_gpus_and_cpus():
    points = slurm.node_points(
        slurm.parse_scontrol_nodes((SLURM / "scontrol-show-node.hal.documented.txt").read_text())
    )
    got = {
        p.tags["node"]: (
            p.tags["state"],
            p.fields["up"],
            p.fields["down"],
            p.fields["drained"],
            p.fields["gpus_alloc"],
            p.fields["cpus_alloc"],
        )
        for p in points
    }
    assert got == HAL_NODES
    assert all(p.fields["gpus_total"] == 4 and p.fields["cpus_total"] == 160 for p in points)
    reasons = {p.tags["node"]: p.fields.get("reason") for p in points}
    assert reasons["hal06"] == "kernel update State=pending [admin@2026-11-22T10:00:00]"
    assert reasons["hal04"] is None


def test_node_gpus_from_typed_tres_and_from_gres_when_untracked():
    points = slurm.node_points(
        slurm.parse_scontrol_nodes((SLURM / "scontrol-show-node.x86-typed.documented.txt").read_text())
    )
    assert {p.tags["node"]: (p.fields["gpus_total"], p.fields["gpus_alloc"]) for p in points} == {
        "gpu-a01": (4, 2),
        "gpu-a02": (4, 0),
        "cpu-c01": (0, 0),
        "gpu-old": (2, 1),
    }


@pytest.mark.parametrize(
    "text,gpus",
    [
        ("cpu=8,mem=64G,node=1,billing=8,gres/gpu=2", 2),
        ("cpu=32,gres/gpu=2,gres/gpu:a100=2", 2),
        ("cpu=64,gres/gpu:a100=4,gres/gpu:v100=2", 6),
        ("cpu=4,mem=4800M,node=1,billing=4", None),
        ("N/A", None),
        ("", None),
    ],
)
def test_tres_gpus(text, gpus):
    assert slurm.tres_gpus(text) == gpus


@pytest.mark.parametrize(
    "text,gpus",
    [
        ("gpu:v100:4(S:0-1)", 4),
        ("gpu:4", 4),
        ("gres:gpu:2", 2),
        ("gres/gpu:3", 3),
        ("gpu", 1),
        ("gpu:v100", 1),
        ("gpu:v100:2(IDX:0,2),mps:100", 2),
        ("gpu:a100:1(S:0),gpu:v100:2(S:1)", 3),
        ("(null)", 0),
        ("", 0),
        ("mps:400", 0),
    ],
)
def test_gres_gpus(text, gpus):
    assert slurm.gres_gpus(text) == gpus


@pytest.mark.parametrize(
    "text,seconds",
    [("0:00", 0), ("0:42", 42), ("15:00", 900), ("2:13:07", 7987), ("1-03:00:00", 97200), ("INVALID", 0)],
)
def test_squeue_time_used(text, seconds):
    assert slurm.run_seconds(text) == seconds


@pytest.mark.parametrize(
    "state,name,down,drained",
    [
        ("IDLE", "idle", False, False),
        ("MIXED+DRAIN", "draining", False, True),
        ("IDLE+DRAIN", "drained", False, True),
        ("ALLOCATED+COMPLETING", "allocated", False, False),
        ("IDLE+COMPLETING", "completing", False, False),
        ("DOWN", "down", True, False),
        ("DOWN*", "down", True, False),
        ("IDLE+FAIL", "fail", True, False),
        ("ALLOCATED+FAIL", "failing", True, False),
        ("FUTURE", "future", True, False),
        ("UNKNOWN+NOT_RESPONDING", "unknown", True, False),
        ("IDLE+MAINTENANCE+RESERVED", "maint", False, False),
        ("IDLE+REBOOT_REQUESTED", "reboot", False, False),
        ("MIXED+INVALID_REG", "inval", True, False),
        ("drained*", "drained", True, False),
    ],
)
def test_node_state_names_and_flags(state, name, down, drained):
    s = slurm.NodeState.parse(state)
    assert (s.name, s.down, s.drained) == (name, down, drained)


def test_misformatted_squeue_output_is_a_readable_error():
    with pytest.raises(CollectorError, match="squeue line 1: expected 10 fields"):
        slurm.parse_squeue("JOBID PARTITION NAME USER ST TIME NODES NODELIST(REASON)\n")


# ---- bmc ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", fixtures(IPMI, "sdr-elist-full"), ids=lambda p: p.name)
def test_ipmitool_output_parses(path):
    text = path.read_text()
    readings = bmc.parse_sdr_elist(text)
    unread = [line for line in text.splitlines() if line.split("|")[2].strip() == "ns"]
    assert len(readings) == len(text.splitlines()) - len(unread)
    assert all(r.kind in ("temperature", "fan", "power", "voltage", "current", "other") for r in readings)


def test_ac922_sensors():
    points = bmc.points(bmc.parse_sdr_elist((IPMI / "sdr-elist-full.ac922.documented.txt").read_text()))
    got = {p.tags["sensor"]: (p.tags["kind"], p.tags["unit"], p.fields["value"], p.fields["ok"]) for p in points}
    assert got["ambient"] == ("temperature", "degrees_C", 24.5, 1)
    assert got["gpu1_core_temp"] == ("temperature", "degrees_C", 87.0, 0)  # ucr: over its critical threshold
    assert got["fan3_1"] == ("fan", "RPM", 0.0, 0)
    assert got["total_power"] == ("power", "Watts", 2218.0, 1)
    assert got["ps0_output_curre"] == ("current", "Amps", 86.5, 1)
    assert got["ps0_output_volta"] == ("voltage", "Volts", 12.2, 1)
    assert "dimm5_temp" not in got  # ns: an empty slot is left out, not an alarm


def test_generic_x86_sensors():
    points = bmc.points(bmc.parse_sdr_elist((IPMI / "sdr-elist-full.x86.documented.txt").read_text()))
    got = {p.tags["sensor"]: (p.tags["kind"], p.tags["unit"], p.fields["value"], p.fields["ok"]) for p in points}
    assert got["Temp (3.1)"] == ("temperature", "degrees_C", 52.0, 1)  # two sensors named Temp
    assert got["Temp (3.2)"] == ("temperature", "degrees_C", 86.0, 0)
    assert got["Fan 1 DutyCycle"] == ("fan", "percent", 43.12, 1)
    assert got["Current 1"] == ("current", "Amps", 0.6, 1)
    assert got["Pwr Consumption"] == ("power", "Watts", 126.0, 1)
    assert got["Airflow"] == ("other", "CFM", 52.0, 1)
    assert "Fan5" not in got and "CPU1_DIMM4 Temp" not in got
    assert "sensor=Inlet\\ Temp" in points[0].format()


def test_not_an_sdr_listing_is_a_readable_error():
    with pytest.raises(CollectorError, match="is this `ipmitool sdr elist`"):
        bmc.parse_sdr_elist("Inlet Temp,23,degrees C,ok\n")


# ---- gpu ------------------------------------------------------------------------------------------


def test_gpu_info_from_the_recorded_query():
    [point] = gpu.parse_query_csv((H100 / "nvidia-smi-query.csv").read_text())
    assert point.measurement == "gpu_info"
    assert point.tags == {
        "index": "0",
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": "GPU-00000000-0000-0000-0000-000000000000",
        "pci_bus_id": "00000000:00:06.0",
        "driver_version": "580.159.04",
    }
    assert point.fields == {"memory_total_mib": 81559, "ecc_enabled": 1}


def test_gpu_query_command_is_exactly_the_recorded_one():
    assert gpu.COMMAND == (
        "nvidia-smi",
        "--query-gpu=index,name,uuid,pci.bus_id,memory.total,driver_version,ecc.mode.current",
        "--format=csv",
    )
    assert f"`{' '.join(gpu.COMMAND)}`" in (H100 / "README.md").read_text()


def test_nvidia_smi_emulation_on_the_recorded_xml():
    [point] = gpu.nvidia_smi_points((H100 / "nvidia-smi-q.xml").read_text())
    assert point.measurement == "nvidia_smi"
    assert point.tags == {
        "index": "0",
        "name": "NVIDIA H100 80GB HBM3",
        "arch": "Hopper",
        "pstate": "P0",
        "uuid": "GPU-00000000-0000-0000-0000-000000000000",
        "compute_mode": "Default",
    }
    f = point.fields
    assert (f["memory_total"], f["memory_used"], f["memory_free"], f["memory_reserved"]) == (81559, 0, 81079, 480)
    assert (f["temperature_gpu"], f["utilization_gpu"], f["utilization_memory"]) == (35, 0, 0)
    assert (f["power_draw"], f["power_draw_average"], f["power_limit"]) == (71.26, 108.16, 700.0)
    assert (f["clocks_current_sm"], f["pcie_link_width_current"]) == (390, 16)
    assert (f["driver_version"], f["cuda_version"], f["current_ecc"]) == ("580.159.04", "13.0", "Enabled")
    assert "fan_speed" not in f and "display_mode" not in f  # N/A and deprecated are left out, as Telegraf does
    assert all(isinstance(f[k], int) for k in ("memory_total", "temperature_gpu", "utilization_gpu"))


def test_nvidia_smi_emulation_reports_processes_and_skips_not_available():
    xml = """<?xml version="1.0" ?><nvidia_smi_log><driver_version>535.1</driver_version>
      <gpu id="1"><product_name>Tesla V100-SXM2-16GB</product_name><uuid>GPU-1</uuid>
      <performance_state>P2</performance_state><fan_speed>N/A</fan_speed>
      <fb_memory_usage><total>16160 MiB</total><used>1200 MiB</used><free>14960 MiB</free></fb_memory_usage>
      <power_readings><power_draw>52.10 W</power_draw></power_readings>
      <processes><process_info><pid>4242</pid><type>C</type><process_name>python</process_name>
      <used_memory>1190 MiB</used_memory></process_info></processes></gpu></nvidia_smi_log>"""
    nv, proc = gpu.nvidia_smi_points(xml)
    assert nv.tags["name"] == "Tesla V100-SXM2-16GB" and nv.fields["power_draw"] == 52.1
    assert "fan_speed" not in nv.fields
    assert (proc.measurement, proc.tags, proc.fields) == (
        "nvidia_smi_process",
        {"name": "python", "type": "C"},
        {"pid": 4242, "used_memory": 1190},
    )


# ---- Telegraf's built-in inputs, emulated on this machine's /proc ----------------------------------


def test_cpu_usage_adds_up():
    [total] = host.CpuStats(percpu=False, report_active=True).points()
    usage = total.fields
    assert total.tags == {"cpu": "cpu-total"}
    parts = ("user", "system", "idle", "nice", "iowait", "irq", "softirq", "steal")
    assert sum(usage[f"usage_{p}"] for p in parts) == pytest.approx(100.0, abs=0.01)
    assert usage["usage_active"] == pytest.approx(100.0 - usage["usage_idle"])


def test_cpu_keeps_its_last_read_and_reports_per_cpu():
    stats = host.CpuStats(percpu=True, totalcpu=False, collect_cpu_time=True)
    stats.points()
    second = stats.points()
    assert {p.tags["cpu"] for p in second} == {f"cpu{n}" for n in range(len(second))}
    assert all("time_user" in p.fields for p in second)


def test_mem_system_processes():
    [mem] = host.mem_points()
    assert mem.fields["total"] > mem.fields["available"] > 0 and 0 < mem.fields["used_percent"] < 100
    assert (
        mem.fields["used"] == mem.fields["total"] - mem.fields["free"] - mem.fields["buffered"] - mem.fields["cached"]
    )
    [system] = host.system_points()
    assert system.fields["n_cpus"] == os.cpu_count() and isinstance(system.fields["uptime"], int)
    [processes] = host.processes_points()
    p = processes.fields
    assert p["total"] >= 1 and p["total_threads"] >= p["total"]
    assert p["total"] == sum(
        p[k]
        for k in ("running", "sleeping", "blocked", "zombies", "dead", "stopped", "paging", "idle", "unknown", "parked")
        if k in p
    )


def test_disk_lists_real_file_systems_only():
    points = host.disk_points()
    assert points, "no mounted file system with a size?"
    for point in points:
        assert point.tags["fstype"] not in host.DEFAULT_IGNORE_FS + ("proc", "sysfs", "cgroup2")
        assert Path(point.tags["path"]).is_dir()
        f = point.fields
        assert f["total"] > 0 and f["used_percent"] == pytest.approx(100 * f["used"] / (f["used"] + f["free"]))


def test_net_skips_loopback():
    points = host.net_points()
    assert "lo" not in {p.tags["interface"] for p in points}
    assert all(p.fields["bytes_recv"] >= 0 and "packets_sent" in p.fields for p in points)
    assert {p.tags["interface"] for p in host.net_points(["l*"])} == {"lo"}


@pytest.mark.parametrize(
    "seconds,text",
    [
        (59, " 0:00"),
        (3 * 3600 + 4 * 60, " 3:04"),
        (86400 + 60, "1 day,  0:01"),
        (5 * 86400 + 13 * 3600, "5 days, 13:00"),
    ],
)
def test_uptime_format(seconds, text):
    assert host.format_uptime(seconds) == text


# ---- the catalogue ----------------------------------------------------------------------------------


def backup_snapshots(tmp_path: Path, with_snapshot=("slurmctld_state",), without=("secrets",)) -> Path:
    """A backup.json whose files jobs `with_snapshot` have one real snapshot each (hal-backup
    run: GNU tar of a small directory, its manifest sealed with the key `key` beside it) and
    `without` none yet; its path."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "job_state").write_bytes(b"state" * 100)
    dest = tmp_path / "dest"
    dest.mkdir()
    jobs = [{"name": name, "kind": "files", "host": "h1", "paths": [str(state)]} for name in (*with_snapshot, *without)]
    config = tmp_path / "backup.json"
    config.write_text(
        json.dumps(
            {
                "format": 2,
                "cluster": "hal",
                "keep": 2,
                "jobs": jobs,
                "destinations": {"h1": {"path": str(dest), "mount_point": "/"}},
            }
        )
    )
    backup_program.make_key(tmp_path / "key")
    key = backup_program.load_key(tmp_path / "key")
    loaded = backup_program.load_config(config)
    for job in loaded.jobs:
        if job.name in with_snapshot:
            backup_program.run_job(loaded, job, "h1", key)
    return config


def _collector_output(name: str, tmp_path: Path) -> list[lp.Line]:
    if name == "slurm":
        jobs = [job for p in fixtures(SLURM, "squeue") for job in slurm.parse_squeue(p.read_text())]
        nodes = [
            node for p in fixtures(SLURM, "scontrol-show-node") for node in slurm.parse_scontrol_nodes(p.read_text())
        ]
        return lines_of(slurm.job_points(jobs) + slurm.node_points(nodes) + slurm.daemon_points(slurmdbd_up=True))
    if name == "bmc":
        return [
            line
            for p in fixtures(IPMI, "sdr-elist-full")
            for line in lines_of(bmc.points(bmc.parse_sdr_elist(p.read_text())))
        ]
    if name == "gpu":
        return lines_of(gpu.parse_query_csv((H100 / "nvidia-smi-query.csv").read_text()))
    if name == "storage_responsiveness":
        (tmp_path / "alice").mkdir()
        return [lp.parse_line(probe.line_protocol(probe.measure(str(tmp_path))))]
    if name == "nvidia_smi":
        return lines_of(gpu.nvidia_smi_points((H100 / "nvidia-smi-q.xml").read_text()))
    if name == "backup":  # hal-backup's age of a real snapshot (a job without one: test_backup_collector_...)
        config = backup_snapshots(tmp_path, with_snapshot=("slurmctld_state",), without=())
        return [
            lp.parse_line(a.line_protocol())
            for a in backup_program.ages(backup_program.load_config(config).destination("h1").path)
        ]
    if name == "health":  # a record as hal-healthcheck keeps it (test_textfile.py writes one with its _save)
        record = {"time": 1_700_000_000, "host": "h1", "results": {"cpus": [], "gpus": ["gone"]}, "reason": "x"}
        return lines_of(healthstate.points(record))
    if name == "pull":
        record = {"state": "changed", "version": "v2", "previous": "v1", "finished": "2024-05-01T10:00:03Z"}
        return lines_of([pullstate.point({**record, "seconds": 41.2})])
    builtins = {
        "cpu": host.CpuStats(percpu=False).points,
        "mem": host.mem_points,
        "system": host.system_points,
        "disk": host.disk_points,
        "net": host.net_points,
        "processes": host.processes_points,
    }
    if name in builtins:
        return lines_of(builtins[name]())
    pytest.skip(f"inputs.{name} is Telegraf's own and not emulated by the stand-in")


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_output_matches_the_catalogue(name, tmp_path):
    spec = INPUTS[name]
    lines = _collector_output(name, tmp_path)
    if not lines and name == "net":
        pytest.skip("no network interface up besides loopback here")
    produced = {line.measurement for line in lines}
    if spec.kind == "exec":  # our collectors write nothing the catalogue does not name
        assert produced <= set(spec.measurements), produced - set(spec.measurements)
    assert set(spec.measurements) <= produced, f"no {set(spec.measurements) - produced} line from the fixtures"
    for line in lines:
        if line.measurement not in spec.measurements:
            continue
        fields = line.fields()
        if "error" in fields:
            continue
        missing_fields = set(spec.measurements[line.measurement]) - set(fields)
        missing_tags = set(spec.tags[line.measurement]) - set(line.tags)
        assert not missing_fields and not missing_tags, (line.format(), missing_fields, missing_tags)
        if spec.kind == "exec" and name != "storage_responsiveness":
            assert "host" not in line.tags  # Telegraf (or the stand-in) adds it


# ---- the package as a node runs it -----------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(PACKAGE.glob("*.py")), ids=lambda p: p.name)
def test_the_package_imports_only_the_standard_library_and_itself(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            assert node.level in (0, 1), f"{path.name}: `from {'.' * node.level}{node.module}` leaves the package"
            names = [node.module] if node.level == 0 else []
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            assert top == "__future__" or top in sys.stdlib_module_names, f"{path.name} imports {name}"


def test_the_storage_probe_command_runs_the_collectors_module():
    from hal_provision.cli import storage

    assert storage.probe_lib is probe and Path(storage.probe_lib.__file__).parent == PACKAGE


NODE_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


@pytest.fixture(scope="module")
def node_lib(tmp_path_factory):
    """The package copied alone, as the telegraf role installs it, and fake tools answering
    with the fixtures."""
    root = tmp_path_factory.mktemp("node")
    lib, bin_dir = root / "lib", root / "bin"
    (lib / "hal_monitoring").mkdir(parents=True)
    for source in PACKAGE.glob("*.py"):
        shutil.copy(source, lib / "hal_monitoring" / source.name)
    bin_dir.mkdir()
    fakes = {
        "squeue": SLURM / "squeue.hal-busy.documented.txt",
        "scontrol": SLURM / "scontrol-show-node.hal.documented.txt",
        "ipmitool": IPMI / "sdr-elist-full.ac922.documented.txt",
        "nvidia-smi": H100 / "nvidia-smi-query.csv",
    }
    for name, answer in fakes.items():
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\necho "$@" > {root}/{name}.args\ncat {answer}\n')
        script.chmod(0o755)
    # sacctmgr answers as with slurmdbd up, or, while sacctmgr.down exists, as sacctmgr does
    # without it (slurmdb_connection_get fails: an error line and exit status 1)
    sacctmgr = bin_dir / "sacctmgr"
    sacctmgr.write_text(
        f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {root}/sacctmgr.args\n"  # echo would take -n
        f"if [ -e {root}/sacctmgr.down ]; then\n"
        '  echo "sacctmgr: error: Problem talking to the database: Connection refused" >&2; exit 1\nfi\n'
        "echo hal\n"
    )
    sacctmgr.chmod(0o755)
    return root


def run_on_node(node_lib: Path, *args: str, with_tools: bool = True) -> subprocess.CompletedProcess:
    # -S: no site-packages, so hal_provision (installed in this venv) cannot be imported; only
    # the standard library and PYTHONPATH, as `hal-collect` runs it (python3 -I would also drop
    # PYTHONPATH, which is how the package is found on a node).
    bins = f"{node_lib / 'bin'}:/usr/bin:/bin" if with_tools else str(node_lib / "empty")
    (node_lib / "empty").mkdir(exist_ok=True)
    return subprocess.run(
        [NODE_PYTHON, "-S", "-m", "hal_monitoring", *args],
        capture_output=True,
        text=True,
        cwd=node_lib,
        env={"PATH": bins, "PYTHONPATH": str(node_lib / "lib")},
        timeout=60,
    )


def test_hal_provision_is_not_importable_on_the_node(node_lib):
    done = subprocess.run(
        [NODE_PYTHON, "-S", "-c", "import hal_provision"],
        capture_output=True,
        text=True,
        cwd=node_lib,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(node_lib / "lib")},
    )
    assert done.returncode == 1 and "No module named 'hal_provision'" in done.stderr


@pytest.mark.parametrize(
    "collector,measurements,command",
    [
        ("slurm", {"slurm_jobs", "slurm_job", "slurm_node", "slurm_daemons"}, "scontrol"),
        ("bmc", {"bmc"}, "ipmitool"),
        ("gpu", {"gpu_info"}, "nvidia-smi"),
    ],
)
def test_copied_package_runs_each_collector(node_lib, collector, measurements, command):
    done = run_on_node(node_lib, collector)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = lp.parse_lines(done.stdout)
    assert {line.measurement for line in lines} == measurements
    assert len({line.timestamp_ns for line in lines}) == 1
    sent = (node_lib / f"{command}.args").read_text().split()
    expected = {"scontrol": slurm.SCONTROL_NODES, "ipmitool": bmc.COMMAND, "nvidia-smi": gpu.COMMAND}[command]
    assert sent == list(expected[1:])


def test_copied_package_runs_the_storage_probe(node_lib, tmp_path):
    done = run_on_node(node_lib, "storage_responsiveness", str(tmp_path), "--host", "n1")
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(
        r"storage_responsiveness,host=n1,path=\S+ entries=0i,list_home_ms=[\d.]+,stat_ms=[\d.]+ \d+\n", done.stdout
    )


@pytest.mark.parametrize("collector", ["slurm", "bmc", "gpu"])
def test_a_missing_tool_is_one_readable_line_and_exit_1(node_lib, collector):
    done = run_on_node(node_lib, collector, with_tools=False)
    assert done.returncode == 1 and done.stdout == ""
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"hal_monitoring {collector}: ") and "command not found" in done.stderr


@pytest.mark.parametrize("down", [False, True], ids=["slurmdbd-up", "slurmdbd-down"])
def test_slurm_reports_the_daemons_that_answered(node_lib, down):
    marker = node_lib / "sacctmgr.down"
    if down:
        marker.touch()
    try:
        done = run_on_node(node_lib, "slurm", "--slurmdbd")
    finally:
        marker.unlink(missing_ok=True)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # slurmdbd down is a value, not a failed run
    daemons = {
        line.tags["daemon"]: line.fields()
        for line in lp.parse_lines(done.stdout)
        if line.measurement == "slurm_daemons"
    }
    assert daemons == {"slurmctld": {"up": 1}, "slurmdbd": {"up": 0 if down else 1}}
    assert (node_lib / "sacctmgr.args").read_text().split() == list(slurm.SACCTMGR_CLUSTERS[1:])


def test_slurm_asks_slurmdbd_only_when_told(node_lib):
    (node_lib / "sacctmgr.args").unlink(missing_ok=True)
    done = run_on_node(node_lib, "slurm")
    assert done.returncode == 0, done.stderr
    daemons = [line for line in lp.parse_lines(done.stdout) if line.measurement == "slurm_daemons"]
    assert [(d.tags, d.fields()) for d in daemons] == [({"daemon": "slurmctld"}, {"up": 1})]
    assert not (node_lib / "sacctmgr.args").exists()


def test_slurmctld_not_answering_fails_the_run_even_with_slurmdbd_up(node_lib, tmp_path):
    """No up=0 line for slurmctld: the run fails as a whole, and the runner reports that."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("scontrol", "sacctmgr"):
        (bin_dir / name).symlink_to(node_lib / "bin" / name)
    squeue = bin_dir / "squeue"
    squeue.write_text(
        "#!/bin/sh\necho 'squeue: error: Unable to contact slurm controller (connect failure)' >&2\nexit 1\n"
    )
    squeue.chmod(0o755)
    done = subprocess.run(
        [NODE_PYTHON, "-S", "-m", "hal_monitoring", "slurm", "--slurmdbd"],
        capture_output=True,
        text=True,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONPATH": str(node_lib / "lib")},
        timeout=60,
    )
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == "hal_monitoring slurm: squeue: error: Unable to contact slurm controller (connect failure)\n"


def test_bmc_command_can_be_replaced(node_lib):
    done = run_on_node(node_lib, "bmc", "--command", "ipmitool -I lanplus -H bmc-hal01 -U monitor -E sdr elist full")
    assert done.returncode == 0, done.stderr
    assert (node_lib / "ipmitool.args").read_text().split() == [
        "-I",
        "lanplus",
        "-H",
        "bmc-hal01",
        "-U",
        "monitor",
        "-E",
        "sdr",
        "elist",
        "full",
    ]


def test_unknown_collector(node_lib):
    done = run_on_node(node_lib, "sinfo")
    assert done.returncode == 2 and "no collector 'sinfo'" in done.stderr


# ---- the stand-in: configuration ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,seconds", [("60s", 60), ("1m30s", 90), ("500ms", 0.5), ("1h", 3600), (10, 10), ("0", 0), ("1.5s", 1.5)]
)
def test_durations(text, seconds):
    assert standin.parse_duration(text, "x") == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["60", "1 m", "sixty", "1d", True])
def test_bad_durations(bad):
    with pytest.raises(standin.ConfigError, match="x:"):
        standin.parse_duration(bad, "x")


def test_environment_substitution():
    env = {"PW": "s3cret", "EMPTY": ""}
    text, warnings = standin.substitute_env(
        '# ${PW} stays in a comment\npassword = "${PW}"\na = "${EMPTY:-dflt}"\nb = "${EMPTY-dflt}"\n'
        'c = "${UNSET-dflt}"\nd = "${UNSET}"\n',
        env,
    )
    assert text == ('# ${PW} stays in a comment\npassword = "s3cret"\na = "dflt"\nb = ""\nc = "dflt"\nd = ""\n')
    assert warnings == ["${UNSET} is not set in the environment; it reads as empty"]
    with pytest.raises(standin.ConfigError, match=re.escape("${PW_FILE}: give the password")):
        standin.substitute_env('x = "${PW_FILE:?give the password}"', env)
    assert standin.substitute_env('x = "${PW_FILE:?give it}"', env, strict=False)[1] == ["${PW_FILE}: give it"]


TELEGRAF_CONF = """\
# Generated by hal-provision (test): ${NOT_A_VARIABLE_IN_A_COMMENT}
[global_tags]
  cluster = "hal"

[agent]
  interval = "60s"
  round_interval = true
  metric_batch_size = 2
  omit_hostname = false

[[outputs.influxdb]]
  urls = ["{url}"]
  database = "{database}"
  skip_database_creation = true
  username = "telegraf"
  password = "${HAL_INFLUX_PASSWORD}"
  timeout = "5s"

[[inputs.mem]]

[[inputs.infiniband]]

[[inputs.exec]]
  commands = ["{python} -c \\"print('probe,host=elsewhere v=1i'); print('probe,site=x v=2i 1700000000400000000')\\""]
  timeout = "5s"
  data_format = "influx"
"""
SLURM_CONF = """\
[[inputs.exec]]
  commands = ["{python} -c \\"print('slurm_node,node=hal01,state=idle up=1i')\\""]
  timeout = "8s"
  data_format = "influx"
  [inputs.exec.tags]
    source = "slurm"
"""


def write_conf(directory: Path, url: str = "http://127.0.0.1:9", database: str = "telegraf") -> Path:
    (directory / "telegraf.d").mkdir(parents=True, exist_ok=True)
    conf = directory / "telegraf.conf"
    conf.write_text(
        TELEGRAF_CONF.replace("{url}", url).replace("{database}", database).replace("{python}", sys.executable)
    )
    (directory / "telegraf.d" / "hal-slurm.conf").write_text(SLURM_CONF.replace("{python}", sys.executable))
    (directory / "telegraf.d" / "README").write_text("not a .conf: ignored")
    return conf


def test_config_is_read_like_telegraf(tmp_path):
    config = standin.load_config(str(write_conf(tmp_path)), env={"HAL_INFLUX_PASSWORD": "pw"})
    assert config.files == [str(tmp_path / "telegraf.conf"), str(tmp_path / "telegraf.d" / "hal-slurm.conf")]
    assert (config.agent.interval, config.agent.round_interval, config.agent.metric_batch_size) == (60, True, 2)
    assert config.agent.rounding_ns() == 10**9
    assert config.global_tags == {"cluster": "hal"}
    [out] = config.outputs
    assert (out.urls, out.database, out.username, out.password, out.timeout) == (
        ["http://127.0.0.1:9"],
        "telegraf",
        "telegraf",
        "pw",
        5.0,
    )
    assert [c.plugin for c in config.inputs] == ["mem", "infiniband", "exec", "exec"]
    assert config.inputs[3].tags == {"source": "slurm"} and config.inputs[3].interval == 60
    assert config.warnings == [
        f"{tmp_path / 'telegraf.conf'}: inputs.infiniband is not emulated by the stand-in; its metrics will be missing"
    ]


def _collector_of(command: str) -> str:
    """The catalogue name of a rendered exec command: `hal-collect NAME ...`, or the backup
    collector's `sudo -n hal-backup age --influx`."""
    argv = shlex.split(command)
    if argv[:2] == [render_monitoring.SUDO, "-n"] and argv[2:] == shlex.split(render_monitoring.BACKUP_AGE):
        return "backup"
    assert argv[0] == render_monitoring.COLLECT, command
    return argv[1]


def test_every_rendered_telegraf_conf_is_understood(tmp_path):
    """The stand-in reads what the renderer writes for HAL: each role's telegraf.conf, with the
    management hosts' additions (the Slurm collector on hal-mgmt1, the backup collector on both)
    as its telegraf.d."""
    hal = validate(None).model
    confs = {path: text for path, text in render_monitoring.render(hal).items() if path.endswith(".conf")}
    hosts = {Path(path).parent.name for path in confs if "/hosts/" in path}
    assert hosts == {"hal-mgmt1", "hal-mgmt2"}
    for node in sorted(hosts):
        additions = tmp_path / node / "telegraf.d"
        additions.mkdir(parents=True)
        for path, text in confs.items():
            if f"/hosts/{node}/" in path:
                (additions / Path(path).name).write_text(text)
        assert sorted(p.name for p in additions.iterdir()) == (
            ["hal-backup.conf", "hal-slurm.conf"] if node == "hal-mgmt1" else ["hal-backup.conf"]
        )
    roles = [path for path in confs if "/roles/" in path]
    assert roles
    for path, node in itertools.product(roles, sorted(hosts)):
        conf = tmp_path / Path(path).name
        conf.write_text(confs[path])
        config = standin.load_config(str(conf), str(tmp_path / node / "telegraf.d"), env={"HAL_INFLUX_PASSWORD": "x"})
        assert config.outputs and config.agent.interval == hal.monitoring.interval_seconds
        unknown = {c.plugin for c in config.inputs} - set(standin.EMULATED) - {"exec", "infiniband"}
        assert not unknown, f"{path}: the stand-in would skip {unknown}"
        collectors = {
            _collector_of(command) for c in config.inputs if c.plugin == "exec" for command in c.options["commands"]
        }
        assert "backup" in collectors and ("slurm" in collectors) == (node == "hal-mgmt1")
        assert collectors <= {name for name, spec in INPUTS.items() if spec.kind == "exec"}


def test_backup_collector_runs_through_the_standins_exec_input(tmp_path):
    """The rendered hal-backup.conf, run by the stand-in as Telegraf would: the real hal-backup
    (its `age --influx`, reading a destination with one real snapshot and a job without one) in
    place of /usr/local/sbin/hal-backup, and a sudo that only drops its -n (no sudo here: the
    rule itself is checked by visudo in test_monitoring.py). Each job is one point, tagged with
    the host and the cluster by the stand-in; the job without a snapshot has bytes=0 and no age."""
    hal = validate(None).model
    rendered = render_monitoring.render(hal)["files/etc/telegraf/hosts/hal-mgmt1/hal-backup.conf"]
    config = backup_snapshots(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sudo, program = bin_dir / "sudo", bin_dir / "hal-backup"
    sudo.write_text('#!/bin/sh\n[ "$1" = -n ] || exit 1\nshift\nexec "$@"\n')
    program.write_text(
        f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(backup_program.__file__)} "$@" '
        f"--config {shlex.quote(str(config))} --host h1 --key {shlex.quote(str(tmp_path / 'key'))}\n"
    )
    for script in (sudo, program):
        script.chmod(0o755)
    assert render_monitoring.SUDO in rendered and render_monitoring.BACKUP_AGE in rendered
    conf = tmp_path / "hal-backup.conf"
    conf.write_text(
        '[global_tags]\n  cluster = "hal"\n[agent]\n  hostname = "hal-mgmt1"\n'
        + rendered.replace(render_monitoring.SUDO, str(sudo)).replace(render_monitoring.BACKUP_PROGRAM, str(program))
    )
    runner = standin.StandIn(standin.load_config(str(conf), env={}), lambda m: None)
    got = runner.gather(runner.inputs)
    assert not got.errors, got.errors
    points = {line.tags["job"]: line for line in got.lines}
    assert set(points) == {"slurmctld_state", "secrets"} and len(got.lines) == 2
    for line in got.lines:
        assert line.measurement == "hal_backup" and set(line.tags) == {"job", "host", "cluster"}
        assert (line.tags["host"], line.tags["cluster"]) == ("hal-mgmt1", "hal")
    fields = points["slurmctld_state"].fields()
    assert set(fields) == set(INPUTS["backup"].measurements["hal_backup"])
    assert 0 <= fields["age_s"] < 60 and fields["bytes"] > 0
    assert points["secrets"].fields() == {"bytes": 0}


@pytest.mark.parametrize(
    "edit,message",
    [
        (('interval = "60s"', 'interval = "sixty"'), "is not a duration"),
        (('data_format = "influx"', 'data_format = "json"'), 'the stand-in reads only "influx"'),
        (('urls = ["http://127.0.0.1:9"]', 'urls = ["udp://127.0.0.1:8089"]'), "is not an http(s) URL"),
        (("[global_tags]", "[global_tags"), "not valid TOML"),
        (("commands = [", "commandz = ["), "commands must be a non-empty list"),
    ],
)
def test_config_errors_name_the_file_and_the_problem(tmp_path, edit, message):
    conf = write_conf(tmp_path)
    conf.write_text(conf.read_text().replace(*edit))
    with pytest.raises(standin.ConfigError, match=re.escape(message)) as err:
        standin.load_config(str(conf), env={})
    assert str(conf) in str(err.value)


def test_check_mode_validates_a_lone_file(tmp_path):
    """The role's `validate:` checks a temporary copy, without the environment file."""
    conf = write_conf(tmp_path / "a")
    lone = tmp_path / "copy.tmp"
    lone.write_text(conf.read_text())
    done = subprocess.run(
        [sys.executable, "-m", "hal_provision.node.monitoring", "standin", "--check", "--config", str(lone)],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"]},
    )
    assert done.returncode == 0, done.stderr
    assert "inputs: mem, infiniband, exec (" in done.stdout and "hal-slurm" not in done.stdout
    assert "${HAL_INFLUX_PASSWORD} is not set" in done.stderr
    lone.write_text("[agent\n")
    done = subprocess.run(
        [sys.executable, "-m", "hal_provision.node.monitoring", "standin", "--check", "--config", str(lone)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1 and "not valid TOML" in done.stderr and "Traceback" not in done.stderr


# ---- the stand-in: a round ----------------------------------------------------------------------------


class FakeInflux:
    def __init__(self, fail: int = 0):
        self.bodies: list[str] = []
        self.fail = fail

    def __call__(self, output, url, body):
        if self.fail:
            self.fail -= 1
            raise standin.WriteError(f"{url}: HTTP 500: timeout")
        self.bodies.append(body)


def test_a_round_tags_stamps_batches_and_keeps_what_failed(tmp_path):
    config = standin.load_config(str(write_conf(tmp_path)), env={"HAL_INFLUX_PASSWORD": "pw"})
    config.agent.hostname = "hal-node7"
    influx, logged = FakeInflux(fail=1), []
    runner = standin.StandIn(config, logged.append, post=influx)
    assert runner.round(runner.inputs) is False
    assert "E! write failed: http://127.0.0.1:9: HTTP 500: timeout;" in "\n".join(logged)
    kept = len(runner.writers[0].buffer)
    assert kept > 3
    assert runner.round(runner.inputs) is True and not runner.writers[0].buffer
    lines = [lp.parse_line(text) for body in influx.bodies for text in body.splitlines()]
    assert len(lines) == 2 * kept and all(len(b.splitlines()) <= 2 for b in influx.bodies)  # metric_batch_size 2
    probes = [line for line in lines if line.measurement == "probe"]
    assert {line.tags["host"] for line in probes} == {"elsewhere", "hal-node7"}  # a point's own host stays
    assert all(line.tags["cluster"] == "hal" for line in lines)
    assert all(line.timestamp_ns % 10**9 == 0 for line in lines)  # precision: 1 s, like Telegraf at 60 s
    assert 1700000000000000000 in {line.timestamp_ns for line in probes}  # .4 s rounds down
    assert {line.tags.get("source") for line in lines if line.measurement == "slurm_node"} == {"slurm"}
    assert logged[-1].startswith(f"wrote {2 * kept} points in ")


def test_exec_errors_are_logged_and_do_not_stop_the_round(tmp_path):
    conf = write_conf(tmp_path)
    conf.write_text(
        conf.read_text().replace(
            "[[inputs.mem]]",
            '[[inputs.exec]]\n  commands = ["/nonexistent/collector", "sh -c \'echo broken >&2; exit 3\'"]'
            '\n  data_format = "influx"\n',
        )
    )
    influx, logged = FakeInflux(), []
    runner = standin.StandIn(standin.load_config(str(conf), env={}), logged.append, post=influx)
    assert runner.round(runner.inputs) is True
    text = "\n".join(logged)
    assert "/nonexistent/collector: command not found" in text and "exit status 3: broken" in text
    assert {lp.parse_line(t).measurement for b in influx.bodies for t in b.splitlines()} == {"probe", "slurm_node"}


def test_nvidia_smi_input_runs_bin_path(tmp_path):
    fake = tmp_path / "nvidia-smi"
    fake.write_text(f'#!/bin/sh\n[ "$*" = "-q -x" ] && exec cat {H100 / "nvidia-smi-q.xml"}\nexit 2\n')
    fake.chmod(0o755)
    conf = tmp_path / "t.conf"
    conf.write_text(f'[[inputs.nvidia_smi]]\n  bin_path = "{fake}"\n  timeout = "5s"\n')
    runner = standin.StandIn(standin.load_config(str(conf), env={}), lambda m: None)
    got = runner.gather(runner.inputs)
    assert not got.errors
    [line] = got.lines
    assert line.measurement == "nvidia_smi" and line.tags["name"] == "NVIDIA H100 80GB HBM3" and "host" in line.tags


# ---- the stand-in against a real InfluxDB -------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def influx_query(url: str, q: str, db: str | None = None, ca: Path | None = None) -> dict:
    params = {"q": q, **({"db": db} if db else {})}
    request = urllib.request.Request(f"{url}/query", data=urllib.parse.urlencode(params).encode(), method="POST")
    handlers = [urllib.request.ProxyHandler({})]
    if ca:
        import ssl

        handlers.append(urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=str(ca))))
    opener = urllib.request.build_opener(*handlers)
    with opener.open(request, timeout=10) as response:
        return json.load(response)


def start_influxd(root: Path, tls: tuple[Path, Path] | None = None, ca: Path | None = None):
    """A real influxd with its files under ROOT, without authentication; with TLS (certificate,
    key; CA: what verifies it) its HTTP API is HTTPS only. Yields its URL (https by the name
    localhost), then stops it."""
    if not INFLUXD.exists():
        pytest.skip("/usr/bin/influxd is not installed (Debian's influxdb package): the real write is not tested")
    port, rpc = free_port(), free_port()
    https = (
        f'  https-enabled = true\n  https-certificate = "{tls[0]}"\n  https-private-key = "{tls[1]}"\n' if tls else ""
    )
    (root / "influxdb.conf").write_text(f"""\
reporting-disabled = true
bind-address = "127.0.0.1:{rpc}"
[meta]
  dir = "{root}/meta"
[data]
  dir = "{root}/data"
  wal-dir = "{root}/wal"
[monitor]
  store-enabled = false
[continuous_queries]
  enabled = false
[http]
  bind-address = "127.0.0.1:{port}"
  auth-enabled = false
  log-enabled = false
{https}""")
    log = open(root / "influxd.log", "w")
    server = subprocess.Popen([str(INFLUXD), "-config", str(root / "influxdb.conf")], stdout=log, stderr=log)
    url = f"https://localhost:{port}" if tls else f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 15
    while True:
        try:
            influx_query(url, "SHOW DATABASES", ca=ca)
            break
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            pytest.fail(f"influxd did not answer: {(root / 'influxd.log').read_text()[-2000:]}")
        time.sleep(0.05)
    influx_query(url, "CREATE DATABASE telegraf", ca=ca)
    yield url
    server.terminate()
    server.wait(10)
    log.close()


@pytest.fixture(scope="module")
def influxdb(tmp_path_factory):
    yield from start_influxd(tmp_path_factory.mktemp("influxdb"))


def make_ca(directory: Path, name: str):
    """A CA (certificate file, key) made with the cryptography package."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    path = directory / f"{name}.crt"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path, cert, key


def make_server_cert(directory: Path, ca, dns: str) -> tuple[Path, Path]:
    """A server certificate for DNS (and that name alone), signed by CA: (certificate, key) files,
    as the influxdb role's tls.yml makes them with the cluster CA."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    _, ca_cert, ca_key = ca
    key = ec.generate_private_key(ec.SECP384R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(dns)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    cert_path, key_path = directory / f"{dns}.crt", directory / f"{dns}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    key_path.chmod(0o600)
    return cert_path, key_path


@pytest.fixture(scope="module")
def influxdb_tls(tmp_path_factory):
    """influxd over HTTPS with a certificate for `localhost` signed by a cluster CA: (URL, the
    CA's certificate file, another CA's)."""
    root = tmp_path_factory.mktemp("influxdb-tls")
    ca = make_ca(root, "cluster-ca")
    other = make_ca(root, "other-ca")
    for url in start_influxd(root, make_server_cert(root, ca, "localhost"), ca[0]):
        yield url, ca[0], other[0]


def test_standin_once_writes_to_influxdb(influxdb, tmp_path):
    conf = write_conf(tmp_path, url=influxdb)
    done = subprocess.run(
        [sys.executable, "-m", "hal_provision.node.monitoring", "standin", "--config", str(conf), "--once"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ["PATH"], "HAL_INFLUX_PASSWORD": "unused-without-auth"},
    )
    assert done.returncode == 0, done.stderr
    assert re.search(r"^wrote \d+ points in \d+\.\d\d s$", done.stderr, re.M)
    rows = influx_query(influxdb, "SELECT v, host, cluster, site FROM probe", "telegraf")
    [series] = rows["results"][0]["series"]
    values = {tuple(row[1:]) for row in series["values"]}
    assert values == {(1, "elsewhere", "hal", None), (2, socket.gethostname(), "hal", "x")}
    mem = influx_query(
        influxdb, "SELECT last(used_percent) FROM mem WHERE host = '%s'" % socket.gethostname(), "telegraf"
    )
    assert 0 < mem["results"][0]["series"][0]["values"][0][1] < 100
    slurm_rows = influx_query(influxdb, "SELECT up FROM slurm_node WHERE source = 'slurm'", "telegraf")
    assert slurm_rows["results"][0]["series"][0]["values"][0][1] == 1


def run_once(conf: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hal_provision.node.monitoring", "standin", "--config", str(conf), "--once"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ["PATH"]},
    )


def with_tls(conf: Path, ca: str, skip_verify: bool = False) -> Path:
    """CONF's output with the rendered files' TLS options (tls_ca, insecure_skip_verify)."""
    conf.write_text(
        conf.read_text().replace(
            "[[outputs.influxdb]]\n",
            f'[[outputs.influxdb]]\n  tls_ca = "{ca}"\n  insecure_skip_verify = {"true" if skip_verify else "false"}\n',
        )
    )
    return conf


def test_standin_writes_over_https_verified_by_the_cluster_ca(influxdb_tls, tmp_path):
    url, ca, _ = influxdb_tls
    done = run_once(with_tls(write_conf(tmp_path, url=url), ca))
    assert done.returncode == 0, done.stderr
    rows = influx_query(url, "SELECT count(v) FROM probe", "telegraf", ca=ca)
    assert rows["results"][0]["series"][0]["values"][0][1] >= 2


@pytest.mark.parametrize("case", ["another-ca", "name-not-in-the-certificate", "system-cas"])
def test_standin_refuses_a_server_its_ca_does_not_vouch_for(influxdb_tls, tmp_path, case):
    """Another CA's certificate in tls_ca, the server reached by a name its certificate does not
    give (127.0.0.1), or no tls_ca (the system's CAs): nothing is written, one line says why."""
    url, ca, other = influxdb_tls
    before = influx_query(url, "SELECT count(v) FROM probe", "telegraf", ca=ca)
    if case == "another-ca":
        conf = with_tls(write_conf(tmp_path, url=url), other)
    elif case == "name-not-in-the-certificate":
        conf = with_tls(write_conf(tmp_path, url=url.replace("localhost", "127.0.0.1")), ca)
    else:
        conf = write_conf(tmp_path, url=url)
    done = run_once(conf)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "certificate verify failed" in done.stderr and "points kept for the next round" in done.stderr, done.stderr
    assert influx_query(url, "SELECT count(v) FROM probe", "telegraf", ca=ca) == before


def test_standin_names_a_missing_tls_ca(influxdb_tls, tmp_path):
    url, _, _ = influxdb_tls
    done = run_once(with_tls(write_conf(tmp_path, url=url), str(tmp_path / "absent.crt")))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"tls_ca {tmp_path / 'absent.crt'}: No such file or directory" in done.stderr, done.stderr


def test_influxdb_refusal_is_logged_with_its_message(influxdb, tmp_path):
    config = standin.load_config(str(write_conf(tmp_path, url=influxdb, database="nosuchdb")), env={})
    logged = []
    runner = standin.StandIn(config, logged.append)
    assert runner.round(runner.inputs) is False
    assert any('HTTP 404: database not found: "nosuchdb"' in m for m in logged), logged


def test_connection_refused_fails_once(tmp_path):
    conf = write_conf(tmp_path, url=f"http://127.0.0.1:{free_port()}")
    done = subprocess.run(
        [sys.executable, "-m", "hal_provision.node.monitoring", "standin", "--config", str(conf), "--once"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ["PATH"]},
    )
    assert done.returncode == 1
    assert "Connection refused" in done.stderr and "points kept for the next round" in done.stderr
    assert "Traceback" not in done.stderr


def test_standin_loops_on_the_interval_until_sigterm(tmp_path):
    conf = write_conf(tmp_path, url=f"http://127.0.0.1:{free_port()}")
    conf.write_text(conf.read_text().replace('interval = "60s"', 'interval = "1s"'))
    process = subprocess.Popen(
        [sys.executable, "-m", "hal_provision.node.monitoring", "standin", "--config", str(conf)],
        stderr=subprocess.PIPE,
        text=True,
        env={"PATH": os.environ["PATH"]},
    )
    try:
        rounds, deadline = 0, time.monotonic() + 15
        while rounds < 2 and time.monotonic() < deadline:
            line = process.stderr.readline()
            rounds += line.startswith("wrote ")
        assert rounds == 2
        process.send_signal(signal.SIGTERM)
        assert process.wait(120) == 0  # after its current round, however loaded the machine
    finally:
        process.kill()
