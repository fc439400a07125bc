"""Storage: the GPFS tuning plan on mmlsconfig -Y output, the storage renderers, the DL-style
benchmark's summary, the responsiveness probe, the sandbox's storage.

The mmlsconfig files under tests/data/mmlsconfig are reconstructed in the command's format,
not recorded from a cluster (see their README); fio's output under tests/data/fio is recorded.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hal_provision.cli.main import app
from hal_provision.hostlist import expand, nodeset
from hal_provision.loader import load_text
from hal_provision.render import render_all
from hal_provision.render import storage as render_storage
from hal_provision.model.naming import mount_unit_name, nsd_records
from hal_provision.node.monitoring import probe
from hal_provision.sandbox.storage import narrow_storage
from hal_provision.node import storage_bench as bench
from hal_provision.model import gpfs_tuning
from hal_provision.model import gpfs_plan as gpfs
from hal_provision.loader import validate

DATA = Path(__file__).resolve().parents[2] / "data"
MMLSCONFIG = DATA / "mmlsconfig"
FIO_RECORDED = DATA / "fio" / "dl-small-fio-3.33.json"
runner = CliRunner()


def current(name: str) -> list[gpfs.Setting]:
    return gpfs.parse_mmlsconfig((MMLSCONFIG / name).read_text())


# ---- parsing mmlsconfig -Y ------------------------------------------------------------------


def test_parse_keeps_order_node_lists_and_decodes_fields():
    text = (
        "mmlsconfig::HEADER:version:reserved:reserved:configParameter:value:nodeList:\n"
        "mmlsconfig::0:1:::pagepool:4G:computeNodes,serviceNodes:\n"
        "mmlsconfig::0:1:::verbsPorts:mlx5_0/1 mlx5_1/1::\n"
        "mmlsconfig::0:1:::tscCmdPortRange:60000%3A61000::\n"
    )
    assert gpfs.parse_mmlsconfig(text) == [
        gpfs.Setting("pagepool", "4G", ("computeNodes", "serviceNodes")),
        gpfs.Setting("verbsPorts", "mlx5_0/1 mlx5_1/1", ()),
        gpfs.Setting("tscCmdPortRange", "60000:61000", ()),
    ]


def test_parse_ignores_lines_that_are_not_records():
    text = (
        "mmlsconfig: warning: node hal07 is down\n# a comment\n\n"
        "mmlsconfig::HEADER:version:reserved:reserved:configParameter:value:nodeList:\n"
        "mmlsconfig::0:1:::autoload:yes::\n"
    )
    assert gpfs.parse_mmlsconfig(text) == [gpfs.Setting("autoload", "yes", ())]


@pytest.mark.parametrize("text", ["", "pagepool 4G\n", "mmlsconfig::HEADER:version:reserved:reserved:a:b:c:\n"])
def test_parse_refuses_what_is_not_mmlsconfig_y(text):
    with pytest.raises(gpfs.MmlsconfigError):
        gpfs.parse_mmlsconfig(text)


# ---- the plan -------------------------------------------------------------------------------


def test_new_cluster_gets_every_setting_and_two_restarts(hal):
    plan = gpfs.plan(gpfs_tuning.desired_state(hal.storage.gpfs), current("hal-new-cluster.txt"))
    assert plan.commands() == [
        ["mmchconfig", "maxFilesToCache=100000,maxStatCache=100000,verbsPorts=mlx5_0/1,verbsRdma=enable"],
        ["mmchconfig", "pagepool=64G,nsdBufSpace=70", "-i", "-N", "nsdNodes"],
        ["mmchconfig", "nsdMaxWorkerThreads=1024,nsdMinWorkerThreads=1024,workerThreads=1024", "-N", "nsdNodes"],
        ["mmchconfig", "pagepool=4G", "-i", "-N", "computeNodes"],
        ["mmchconfig", "pagepool=16G", "-i", "-N", "serviceNodes"],
    ]
    assert plan.restart() == [gpfs_tuning.CLUSTER, "nsdNodes"]
    assert plan.overrides == []


def test_tuned_cluster_needs_nothing_even_where_values_are_spelt_differently(hal):
    plan = gpfs.plan(gpfs_tuning.desired_state(hal.storage.gpfs), current("hal-tuned.txt"))
    assert plan.changes == [] and plan.commands() == [] and plan.restart() == []
    assert plan.to_json()["changed"] is False
    assert plan.view("before") == plan.view("after")


def test_drifted_cluster_gets_only_the_differences(hal):
    plan = gpfs.plan(gpfs_tuning.desired_state(hal.storage.gpfs), current("hal-drifted.txt"))
    assert [c.describe() for c in plan.changes] == [
        "cluster: maxFilesToCache 50000 -> 100000 [after a restart]",
        "nsdNodes: nsdMinWorkerThreads 16 (GPFS default) -> 1024 [after a restart]",
        "computeNodes: pagepool 8G -> 4G [now (-i)]",
        "serviceNodes: pagepool 8G -> 16G [now (-i)]",
    ]
    assert plan.commands() == [
        ["mmchconfig", "maxFilesToCache=100000"],
        ["mmchconfig", "nsdMinWorkerThreads=1024", "-N", "nsdNodes"],
        ["mmchconfig", "pagepool=4G", "-i", "-N", "computeNodes"],
        ["mmchconfig", "pagepool=16G", "-i", "-N", "serviceNodes"],
    ]
    assert plan.restart() == [gpfs_tuning.CLUSTER, "nsdNodes"]
    # The administrator's per-node override is reported, never touched.
    assert plan.to_json()["overrides"] == ["pagepool 32G on hal-login-ib"]
    before, after = plan.view("before"), plan.view("after")
    assert "[computeNodes]\npagepool 8G\n" in before and "[computeNodes]\npagepool 4G\n" in after


@pytest.mark.parametrize(
    ("listed", "desired", "changes"),
    [
        pytest.param("pagepool:4096M:computeNodes", {"computeNodes": {"pagepool": "4G"}}, [], id="size-in-other-unit"),
        pytest.param("pagepool:4G::", {"computeNodes": {"pagepool": "4G"}}, [], id="inherited-from-cluster"),
        pytest.param("", {"computeNodes": {"maxStatCache": "1000"}}, [], id="equal-to-gpfs-default"),
        pytest.param(
            "",
            {"computeNodes": {"verbsRdma": "enable"}},
            [("computeNodes", "verbsRdma", None)],
            id="unknown-default-always-set",
        ),
        pytest.param(
            "pagepool:4G:computeNodes",
            {"computeNodes": {"pagepool": "8G"}},
            [("computeNodes", "pagepool", "4G")],
            id="class-value-differs",
        ),
    ],
)
def test_plan_compares_effective_values(listed, desired, changes):
    text = "mmlsconfig::HEADER:version:reserved:reserved:configParameter:value:nodeList:\n"
    if listed:
        text += f"mmlsconfig::0:1:::{listed}:\n"
    plan = gpfs.plan({gpfs_tuning.CLUSTER: {}, **desired}, gpfs.parse_mmlsconfig(text))
    assert [(c.scope, c.attribute, c.current) for c in plan.changes] == changes


def test_class_compares_with_the_cluster_value_this_plan_sets():
    """A class that wants what the cluster-wide change will give it still needs nothing."""
    text = (
        "mmlsconfig::HEADER:version:reserved:reserved:configParameter:value:nodeList:\n"
        "mmlsconfig::0:1:::maxMBpS:2048::\n"
    )
    plan = gpfs.plan(
        {gpfs_tuning.CLUSTER: {"maxMBpS": "8000"}, "computeNodes": {"maxMBpS": "8000"}}, gpfs.parse_mmlsconfig(text)
    )
    assert [(c.scope, c.attribute) for c in plan.changes] == [(gpfs_tuning.CLUSTER, "maxMBpS")]
    assert plan.commands() == [["mmchconfig", "maxMBpS=8000", "-i"]]
    assert plan.restart() == []


def test_offline_attribute_is_planned_but_never_in_a_command():
    plan = gpfs.plan({gpfs_tuning.CLUSTER: {"maxblocksize": "16M"}}, [])
    assert plan.commands() == [] and plan.to_json()["changed"] is False
    assert plan.to_json()["deferred"] == ["cluster: maxblocksize 4M (GPFS default) -> 16M [offline only]"]


def test_pagepool_goes_first_in_a_command():
    plan = gpfs.plan({"c": {"maxMBpS": "9000", "pagepool": "8G", "nsdBufSpace": "50"}}, [])
    assert plan.commands() == [["mmchconfig", "pagepool=8G,maxMBpS=9000,nsdBufSpace=50", "-i", "-N", "c"]]


def test_rendered_tuning_plan_lists_the_new_cluster_commands(hal, files):
    text = files["files/gpfs/tuning-plan.txt"]
    plan = gpfs.plan(gpfs_tuning.desired_state(hal.storage.gpfs), current("hal-new-cluster.txt"))
    for argv in plan.commands():
        assert "\n" + " ".join(argv) + "\n" in text
    assert "# then restart GPFS on: all nodes, nsdNodes\n" in text
    assert "= 64.3 GiB of 128 GiB (appliance server ddn1-a)" in text


def test_tuning_json_is_the_desired_state_the_role_reads(hal, files):
    doc = json.loads(files["files/gpfs/tuning.json"])
    assert doc["scopes"] == gpfs_tuning.desired_state(hal.storage.gpfs)
    assert list(doc["scopes"]) == [gpfs_tuning.CLUSTER, "nsdNodes", "computeNodes", "serviceNodes"]


@pytest.mark.parametrize(
    ("state", "expected", "code"),
    [
        ("hal-tuned.txt", "GPFS tuning matches the model: nothing to change", 0),
        ("hal-drifted.txt", "mmchconfig pagepool=4G -i -N computeNodes", 0),
        ("hal-drifted.txt", "restart GPFS for the changes to take effect on: all nodes, nsdNodes", 0),
        ("hal-drifted.txt", "left alone: pagepool 32G on hal-login-ib", 0),
        ("README.md", "no mmlsconfig -Y header line", 2),
    ],
)
def test_cli_plan(state, expected, code):
    result = runner.invoke(app, ["storage", "plan", "--current", str(MMLSCONFIG / state)])
    assert result.exit_code == code, result.output
    assert expected in result.output


def test_cli_plan_json_is_what_the_role_gets():
    result = runner.invoke(app, ["storage", "plan", "--current", str(MMLSCONFIG / "hal-drifted.txt"), "--json"])
    doc = json.loads(result.stdout)
    assert doc["commands"][0] == ["mmchconfig", "maxFilesToCache=100000"]
    assert set(doc) == {"changed", "changes", "commands", "restart", "deferred", "overrides", "diff"}


# ---- renderers ------------------------------------------------------------------------------


def test_every_cluster_member_is_in_the_node_file_once(hal, files):
    lines = [ln for ln in files["files/gpfs/nodes.list"].splitlines() if ln and not ln.startswith("#")]
    names = [ln.split(":")[0] for ln in lines]
    members = [h for nc in hal.storage.gpfs.node_classes for h in expand(nc.hosts)]
    assert len(names) == len(set(names)) == len(members)
    assert (
        "hal01-ib:client:hal01" in lines and "ddn1-a:quorum-manager" in lines and "hal-dtn-ib:quorum:hal-dtn" in lines
    )
    assert sum(":quorum" in ln for ln in lines) == len(nodeset(hal.storage.gpfs.quorum))


def test_class_files_partition_the_node_file(hal, files):
    listed = []
    for nc in hal.storage.gpfs.node_classes:
        text = files[f"files/gpfs/classes/{nc.name}.list"]
        listed += [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    node_file = [ln.split(":")[0] for ln in files["files/gpfs/nodes.list"].splitlines() if ln and ln[0] != "#"]
    assert listed == node_file


def stanzas(text: str) -> list[dict]:
    out = []
    for block in text.split("%nsd:")[1:]:
        out.append(dict(line.strip().split("=", 1) for line in block.strip().splitlines()))
    return out


def test_nsd_stanzas_rotate_primary_servers(files):
    nsds = stanzas(files["files/gpfs/halfs.nsd"])
    assert len(nsds) == 16 and len({n["nsd"] for n in nsds}) == 16
    primaries = [n["servers"].split(",")[0] for n in nsds]
    assert {p: primaries.count(p) for p in set(primaries)} == {"ddn1-a": 4, "ddn1-b": 4, "ddn2-a": 4, "ddn2-b": 4}
    assert nsds[0] == {
        "nsd": "ddn1nsd01",
        "device": "/dev/mapper/ddn1lun01",
        "servers": "ddn1-a,ddn1-b",
        "usage": "dataAndMetadata",
        "failureGroup": "1",
        "pool": "system",
    }


def test_nsd_run_without_rotation_keeps_the_order(hal):
    run = hal.storage.gpfs.filesystems[0].nsds[0].model_copy(update={"rotate_servers": False, "count": 3})
    assert [servers for _n, _d, servers in nsd_records(run)] == [["ddn1-a", "ddn1-b"]] * 3


def test_mmcrfs_command_carries_hal_choices(files):
    text = files["files/gpfs/halfs.mmcrfs"]
    command = " ".join(text.split("\n", 4)[-1].replace("\\\n", " ").split())
    assert command == (
        "mmcrfs halfs -F halfs.nsd -B 1M -L 128M -T /home -A yes -m 2 -M 2 -r 1 -R 2 -Q no "
        "--inode-limit 200000000:50000000"
    )


@pytest.mark.parametrize("path", ["/sw", "/home", "/scratch/dl-data", "/a.b/.c", "/x y", "/", "//data//set/"])
def test_mount_unit_names_follow_systemd_escape(path):
    expected = {
        "/sw": "sw.mount",
        "/home": "home.mount",
        "/scratch/dl-data": "scratch-dl\\x2ddata.mount",
        "/a.b/.c": "a.b-.c.mount",
        "/x y": "x\\x20y.mount",
        "/": "-.mount",
        "//data//set/": "data-set.mount",
    }
    assert mount_unit_name(path) == expected[path]
    if shutil.which("systemd-escape"):
        real = subprocess.run(["systemd-escape", "--path", "--suffix=mount", path], capture_output=True, text=True)
        assert real.stdout.strip() == expected[path]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize("case", ["hal", "x86-twogen"])
def test_mount_units_pass_systemd_analyze_verify(tmp_path, case):
    file = None if case == "hal" else DATA / "clusters" / f"{case}.yml"
    files = render_all(validate(file).model)
    units = {Path(rel).name: text for rel, text in files.items() if rel.startswith("files/nfs/mounts/")}
    assert units
    for name, text in units.items():
        (tmp_path / name).write_text(text)
    result = subprocess.run(
        ["systemd-analyze", "verify", *(str(tmp_path / n) for n in units)], capture_output=True, text=True
    )
    assert result.returncode == 0 and result.stderr == "", result.stderr


def test_mount_unit_mounts_the_export(files):
    unit = files["files/nfs/mounts/sw.mount"]
    assert "What=hal-data:/export/sw\nWhere=/sw\nType=nfs\nOptions=rw,hard,vers=4.2,_netdev\n" in unit
    assert "WantedBy=remote-fs.target\n" in unit


EXPORT_CLIENT = re.compile(r"^    [A-Za-z0-9.\-/]+\([a-z_=0-9,]+\)( \\)?$")


@pytest.mark.parametrize("case", ["hal", "x86-twogen"])
def test_exports_files_have_one_client_per_line(case):
    file = None if case == "hal" else DATA / "clusters" / f"{case}.yml"
    files = render_all(validate(file).model)
    exports = {rel: text for rel, text in files.items() if rel.endswith("/exports")}
    assert exports
    for text in exports.values():
        body = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
        for line in body:
            assert line.startswith("/") and line.endswith(" \\") or EXPORT_CLIENT.match(line), line


def test_exports_use_network_cidr_when_asked():
    files = render_all(validate(DATA / "clusters" / "x86-twogen.yml").model)
    assert (
        "/export/sw \\\n    10.20.0.0/16(ro,sync,no_subtree_check,root_squash)\n" in files["files/nfs/tg-nfs/exports"]
    )


@pytest.mark.skipif(shutil.which("ansible-inventory") is None, reason="ansible-inventory is not installed")
def test_ansible_reads_the_storage_groups(tmp_path, files):
    inv = tmp_path / "inventory"
    inv.mkdir()
    for rel in ("inventory/hosts.yml", "inventory/storage.yml"):
        (tmp_path / rel).write_text(files[rel])
    listed = subprocess.run(["ansible-inventory", "-i", str(inv), "--list"], check=True, capture_output=True, text=True)
    data = json.loads(listed.stdout)
    assert data["gpfs_admin"]["hosts"] == ["hal-dtn"]
    assert data["nfs_servers"]["hosts"] == ["hal-data"]
    assert data["nfs_clients"]["children"] == ["nfs_mount_sw", "nfs_mount_backup", "nfs_mount_backup_x2dmgmt2"]
    assert len(data["nfs_mount_sw"]["hosts"]) == 18
    assert data["nfs_mount_backup"]["hosts"] == ["hal-mgmt1"]
    assert data["nfs_mount_backup_x2dmgmt2"]["hosts"] == ["hal-mgmt2"]
    assert data["_meta"]["hostvars"]["hal01"]["ansible_host"] == "172.22.1.1"  # storage.yml sets no host vars


def test_nfs_manifest_names_export_paths_and_each_unit_with_its_group(files):
    doc = json.loads(files["files/nfs/nfs.json"])
    assert doc["servers"] == {"hal-data": {"paths": ["/export/sw", "/export/backup", "/export/backup-mgmt2"]}}
    assert doc["mounts"] == [
        {"group": "nfs_mount_sw", "mount_point": "/sw", "unit": "sw.mount"},
        {"group": "nfs_mount_backup", "mount_point": "/backup", "unit": "backup.mount"},
        {"group": "nfs_mount_backup_x2dmgmt2", "mount_point": "/backup-mgmt2", "unit": "backup\\x2dmgmt2.mount"},
    ]


def test_storage_renders_100000_nodes_quickly(edited):
    from tests.unit.checks.test_checks import big_hal

    model = load_text(edited(*big_hal(100_000)), "big.yml").model
    start = time.perf_counter()
    files = render_storage.render(model)
    elapsed = time.perf_counter() - start
    assert files["files/gpfs/nodes.list"].count("\nhal100000-ib:client:hal100000\n") == 1
    # About 0.5 s on an idle machine: five per-host files (node file, class list, exports, inventory).
    assert elapsed < 5.0, f"storage renderers took {elapsed:.2f} s for 100,000 nodes"


# ---- the sandbox ----------------------------------------------------------------------------


def test_sandbox_keeps_only_what_its_hosts_can_carry(hal):
    before = hal.storage.model_dump(mode="json", exclude_none=True)
    keep = nodeset("hal-data,hal01,hal-login")
    narrowed = narrow_storage(hal.storage, keep)
    assert narrowed.gpfs is None and narrowed.arrays == hal.storage.arrays
    assert narrowed.nfs.exports[0].clients == "hal01,hal-login" and narrowed.nfs.exports[0].networks == []
    assert narrowed.nfs.mounts[0].clients == "hal01,hal-login"
    assert narrow_storage(hal.storage, nodeset("hal01")).nfs.model_dump() == {
        "servers": [],
        "exports": [],
        "mounts": [],
    }
    assert hal.storage.model_dump(mode="json", exclude_none=True) == before  # the model narrowed is a new one


def test_sandbox_can_rehome_an_export_whose_server_it_does_not_keep(hal):
    before = hal.storage.model_dump(mode="json", exclude_none=True)
    narrowed = narrow_storage(hal.storage, nodeset("hal-mgmt1,hal-login"), rehome={"backup": "hal-login"})
    assert [(e.name, e.server, e.path, e.clients) for e in narrowed.nfs.exports] == [
        ("backup", "hal-login", "/export/backup", "hal-mgmt1")
    ]
    assert [(s.host, s.volumes) for s in narrowed.nfs.servers] == [("hal-login", ["/export"])]
    assert [(m.export, m.mount_point, m.clients) for m in narrowed.nfs.mounts] == [("backup", "/backup", "hal-mgmt1")]
    # Without it the export goes with its server; the full model never changes.
    assert narrow_storage(hal.storage, nodeset("hal-mgmt1,hal-login")).nfs.exports == []
    assert hal.storage.model_dump(mode="json", exclude_none=True) == before


# ---- benchmark ------------------------------------------------------------------------------


def test_job_file_runs_the_three_patterns_in_turn():
    text = bench.job_file("/mnt/x", bench.SIZES["small"])
    sections = re.findall(r"^\[([a-z\-]+)\]$", text, re.M)
    assert sections == ["global", *bench.PATTERNS]
    assert text.count("stonewall\n") == 2 and "numjobs=2\n" in text and "ioengine=filestat\n" in text
    assert "filename_format=small-random-reads.$jobnum.$filenum\n" in text


def test_recorded_fio_output_gives_one_entry_per_rank():
    ranks = bench.parse_fio(json.loads(FIO_RECORDED.read_text()))
    assert sorted(ranks) == sorted(bench.PATTERNS)
    assert all(len(r) == 2 for r in ranks.values())
    assert all(rank["iops"] > 0 and rank["bw_bytes"] > 0 for r in ranks.values() for rank in r)


def test_failed_fio_job_is_an_error():
    doc = json.loads(FIO_RECORDED.read_text())
    doc["jobs"][1]["error"] = 5
    with pytest.raises(bench.BenchError, match="failed with error 5"):
        bench.parse_fio(doc)


def node(host: str, bws: list[float], stat: float = 1000.0, listing: float = 5000.0) -> dict:
    mib = 1 << 20
    return {
        "host": host,
        "size": "small",
        "ranks": {
            "small-random-reads": [{"bw_bytes": b * mib, "iops": b * 32, "ios": 1} for b in bws],
            "large-sequential": [{"bw_bytes": 2 * b * mib, "iops": 2 * b, "ios": 1} for b in bws],
            "metadata-stat": [{"bw_bytes": 0.0, "iops": stat, "ios": 1} for _ in bws],
        },
        "listing": {"entries": 400, "entries_per_s": [listing / 2, listing]},
    }


def test_summary_has_per_node_rows_and_an_aggregate_with_the_spread_across_ranks():
    rows = bench.summarize([node("b", [100.0, 100.0]), node("a", [50.0, 150.0], listing=3000.0)])
    small = [r for r in rows if r["pattern"] == "small-random-reads"]
    assert [r["node"] for r in small] == ["a", "b", "ALL"]
    a, b, total = small
    assert (a["mib_s"], a["cv"], b["cv"]) == (200.0, 50.0, 0.0)
    assert total["ranks"] == 4 and total["mib_s"] == 400.0
    assert total["cv"] == pytest.approx(100 * (1250**0.5) / 100)  # stdev of 50,150,100,100 over mean 100
    listing = [r for r in rows if r["pattern"] == "listing"]
    assert [(r["node"], r["iops"]) for r in listing] == [("a", 3000.0), ("b", 5000.0), ("ALL", 8000.0)]


def test_table_prints_every_pattern_per_node_and_in_aggregate():
    text = bench.table([node("hal01", [100.0, 110.0]), node("hal02", [90.0, 100.0])])
    lines = text.splitlines()
    assert lines[0].split() == ["pattern", "node", "ranks", "MiB/s", "IOPS", "per", "rank", "min-max", "CV"]
    for pattern in (*bench.PATTERNS, bench.LISTING):
        assert [ln.split()[1] for ln in lines if ln.startswith(pattern + " ")] == ["hal01", "hal02", "ALL"]
    assert "2 node(s), size small; CV = spread across ranks" in lines[-1]


def test_results_directory_without_results_is_an_error(tmp_path):
    with pytest.raises(bench.BenchError, match="no \\*.json results"):
        bench.load_results(tmp_path)
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(bench.BenchError, match="not a benchmark result"):
        bench.load_results(tmp_path)


@pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed (apt-get install fio)")
def test_benchmark_runs_on_local_disk_and_cleans_up(tmp_path):
    result = runner.invoke(
        app,
        [
            "storage",
            "bench",
            "--local",
            "--mount",
            str(tmp_path / "fs"),
            "--size",
            "small",
            "--out",
            str(tmp_path / "results"),
        ],
    )
    assert result.exit_code == 0, result.output
    [saved] = list((tmp_path / "results").glob("*.json"))
    doc = json.loads(saved.read_text())
    assert {p: len(r) for p, r in doc["ranks"].items()} == {p: 2 for p in bench.PATTERNS}
    assert doc["listing"]["entries"] >= 2 * bench.SIZES["small"].files_per_rank
    assert list((tmp_path / "fs").iterdir()) == []  # the benchmark's files are gone
    assert "small-random-reads" in result.output and " ALL " in result.output


def test_benchmark_without_fio_says_how_to_get_it(tmp_path):
    with pytest.raises(bench.BenchError, match="apt-get install fio"):
        bench.run(tmp_path, "small", fio="no-such-fio")


# ---- probe ----------------------------------------------------------------------------------


def ticking(step_ms: float):
    now = [0.0]

    def clock():
        now[0] += step_ms / 1e3
        return now[0]

    return clock


@pytest.fixture
def homes(tmp_path):
    root = tmp_path / "home"
    for user in ("alice", "bob", "carol"):
        (root / user).mkdir(parents=True)
    (root / "alice" / "probe").write_text("x")
    return root


def test_probe_line_protocol(homes):
    sample = probe.measure(
        str(homes),
        str(homes / "alice" / "probe"),
        host="hal01",
        clock=ticking(2.5),
        now_ns=lambda: 1_700_000_000_000_000_000,
    )
    assert probe.line_protocol(sample) == (
        f"storage_responsiveness,host=hal01,path={homes} entries=3i,list_home_ms=2.500,stat_ms=2.500 "
        "1700000000000000000"
    )


def test_probe_measures_real_time(homes):
    sample = probe.measure(str(homes))
    assert sample.entries == 3 and 0 <= sample.list_ms < 1000 and 0 <= sample.stat_ms < 1000
    assert abs(sample.timestamp_ns - time.time_ns()) < 60 * 10**9


def test_probe_escapes_tags():
    sample = probe.Sample("node a", "/data,x=y", 1, 1.0, 2.0, 0)
    assert probe.line_protocol(sample).startswith("storage_responsiveness,host=node\\ a,path=/data\\,x\\=y ")


def test_probe_reports_a_failing_file_system(tmp_path):
    sample = probe.measure(str(tmp_path / "gone"), host="hal01", now_ns=lambda: 5)
    assert probe.line_protocol(sample) == (
        f'storage_responsiveness,host=hal01,path={tmp_path}/gone error="No such file or directory: {tmp_path}/gone" 5'
    )


def test_probe_command_prints_one_line_per_root_and_fails_if_one_fails(homes, tmp_path):
    result = runner.invoke(app, ["storage", "probe", str(homes), str(tmp_path / "gone"), "--host", "hal01"])
    lines = result.stdout.splitlines()
    assert result.exit_code == 1 and len(lines) == 2
    assert lines[0].startswith(f"storage_responsiveness,host=hal01,path={homes} entries=3i,list_home_ms=")
    assert 'error="No such file or directory' in lines[1]


def test_probe_runs_without_hal_provision_installed(homes):
    """The monitoring role can copy probe.py alone: it needs only the standard library."""
    source = Path(probe.__file__)
    result = subprocess.run(
        ["python3", "-S", "-I", str(source), str(homes), "--host", "n1"],
        capture_output=True,
        text=True,
        cwd="/",
        env={"PATH": os.environ["PATH"]},
    )
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(
        r"storage_responsiveness,host=n1,path=\S+ entries=3i,list_home_ms=[\d.]+,stat_ms=[\d.]+ \d+\n", result.stdout
    )
