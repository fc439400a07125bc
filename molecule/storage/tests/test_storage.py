"""The storage scenario: NFS server and clients, GPFS tuning through the mm test double, the benchmark.

Expectations come from the rendered tree (HAL_INVENTORY/../files) and, for GPFS, from the plan
hal_provision computes on the double's starting state: the deployed nodes must show exactly
that, and nothing more.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import testinfra

from hal_provision.node import storage_bench as bench
from hal_provision.model import gpfs_plan as gpfs

INVENTORY = Path(os.environ["HAL_INVENTORY"])
FILES = INVENTORY.parent / "files"
SCENARIO = Path(__file__).resolve().parents[1]
BENCH = Path(os.environ["MOLECULE_STORAGE_BENCH"])
MANIFEST = json.loads((FILES / "nfs" / "nfs.json").read_text())
SERVER, CLIENTS, ADMIN = "mol-st-nfs", ("mol-st-c01", "mol-st-c02"), "mol-st-nfs"
MOUNTS = {"mol-st-c01": {"data.mount", "opt-tools.mount"}, "mol-st-c02": {"data.mount"}}
MM_LOG = "/var/log/mm-double/mmchconfig.log"


def host(name: str):
    return testinfra.get_host(f"podman://{name}")


def run(name: str, command: str):
    return host(name).run(command)


# ---- NFS server -----------------------------------------------------------------------------


def test_exports_are_the_rendered_file():
    assert host(SERVER).file("/etc/exports").content_string == (FILES / "nfs" / SERVER / "exports").read_text()


def test_real_exportfs_loaded_every_export_with_its_options():
    """exportfs -ra (the role's handler) read the deployed file into the export table."""
    listed = run(SERVER, "exportfs -s")
    assert listed.rc == 0, listed.stderr
    entries = [line.split() for line in listed.stdout.splitlines() if line.strip()]
    by_path: dict[str, list[str]] = {}
    for path, client in entries:
        by_path.setdefault(path, []).append(client)
    assert sorted(by_path) == ["/export/data", "/export/tools"]
    assert len(by_path["/export/data"]) == 2 and all(",rw," in c for c in by_path["/export/data"])
    assert len(by_path["/export/tools"]) == 2 and all("(ro," in c or ",ro," in c for c in by_path["/export/tools"])


def test_export_directories_exist():
    for path in MANIFEST["servers"][SERVER]["paths"]:
        assert host(SERVER).file(path).is_directory


BAD_EXPORTS = [
    ("/export/data mol-st-c01(rw,no_subtree_check,bogus)\n", "unknown keyword"),
    ("/export/missing mol-st-c01(rw,no_subtree_check)\n", "/export/missing: not an existing directory"),
    ("/export/data no-such-host-zz(rw,no_subtree_check)\n", "Failed to resolve no-such-host-zz"),
]


@pytest.mark.parametrize(("text", "reason"), BAD_EXPORTS, ids=["bad-option", "missing-path", "unknown-client"])
def test_exports_checker_refuses_a_bad_file_and_changes_nothing(text, reason):
    before = run(SERVER, "md5sum /etc/exports /var/lib/nfs/etab").stdout
    checked = run(
        SERVER,
        f"f=$(mktemp); printf '{text}' > $f; /usr/local/libexec/hal-provision/exports-check $f; "
        "rc=$?; rm -f $f; exit $rc",
    )
    assert checked.rc == 1 and reason in checked.stderr, checked.stderr
    assert run(SERVER, "md5sum /etc/exports /var/lib/nfs/etab").stdout == before


def test_exports_checker_accepts_the_rendered_file():
    checked = run(SERVER, "/usr/local/libexec/hal-provision/exports-check /etc/exports")
    assert checked.rc == 0, checked.stderr


def test_nfsd_threads_come_from_the_model():
    assert run(SERVER, "nfsconf --get nfsd threads").stdout.strip() == "4"


# ---- NFS clients ----------------------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_client_has_exactly_its_mount_units(client):
    installed = run(client, "ls /etc/systemd/system/*.mount 2>/dev/null | xargs -rn1 basename").stdout.split()
    assert set(installed) == MOUNTS[client]


@pytest.mark.parametrize(("client", "unit"), [(c, u) for c in CLIENTS for u in sorted(MOUNTS[c])])
def test_mount_unit_is_rendered_verified_and_enabled(client, unit):
    node = host(client)
    assert node.file(f"/etc/systemd/system/{unit}").content_string == (FILES / "nfs" / "mounts" / unit).read_text()
    assert node.run(f"systemctl is-enabled {unit}").stdout.strip() == "enabled"
    verified = node.run(f"systemd-analyze verify /etc/systemd/system/{unit}")
    assert verified.rc == 0 and verified.stderr == "", verified.stderr
    shown = dict(
        line.split("=", 1) for line in node.run(f"systemctl show -p What -p Where -p Type {unit}").stdout.split()
    )
    mount = next(m for m in MANIFEST["mounts"] if m["unit"] == unit)
    assert shown["Where"] == mount["mount_point"] and shown["What"].startswith(f"{SERVER}:/export/")
    assert node.file(mount["mount_point"]).is_directory
    # Not mounted: this kernel has no NFS client (nfs_client_mount_now: false in this scenario).


# ---- Spectrum Scale (through the test double) -----------------------------------------------


def expected_plan() -> gpfs.Plan:
    desired = json.loads((FILES / "gpfs" / "tuning.json").read_text())["scopes"]
    start = gpfs.parse_mmlsconfig((SCENARIO / "files" / "mmlsconfig-start.txt").read_text())
    return gpfs.plan(desired, start)


def test_gpfs_role_ran_exactly_the_planned_commands_once():
    """Converge ran the plan; idempotence and --check ran nothing more (the log would grow)."""
    log = host(ADMIN).file(MM_LOG).content_string.splitlines()
    assert log == [" ".join(argv) for argv in expected_plan().commands()]
    assert log == [
        "mmchconfig maxFilesToCache=20000",
        "mmchconfig pagepool=16G -i -N nsdNodes",
        "mmchconfig nsdMinWorkerThreads=256 -N nsdNodes",
        "mmchconfig maxMBpS=4000 -i -N clientNodes",
    ]
    assert expected_plan().restart() == [gpfs.CLUSTER, "nsdNodes"]


def test_gpfs_settings_now_match_the_model_and_overrides_are_left_alone():
    listed = run(ADMIN, "/usr/lpp/mmfs/bin/mmlsconfig -Y")
    desired = json.loads((FILES / "gpfs" / "tuning.json").read_text())["scopes"]
    plan = gpfs.plan(desired, gpfs.parse_mmlsconfig(listed.stdout))
    assert plan.changes == []
    assert [f"{s.attribute} {s.value} on {','.join(s.nodes)}" for s in plan.overrides] == ["pagepool 4G on mol-st-c02"]


@pytest.mark.parametrize("node", [ADMIN, CLIENTS[0]])
def test_creation_files_are_copied_for_the_administrator(node):
    for path in sorted((FILES / "gpfs").rglob("*")):
        if path.is_file():
            rel = path.relative_to(FILES / "gpfs")
            assert host(node).file(f"/var/lib/hal-provision/gpfs/{rel}").content_string == path.read_text(), rel


def test_gpfs_tuning_skipped_where_spectrum_scale_is_absent():
    node = host(CLIENTS[0])
    assert not node.file("/usr/lpp/mmfs/bin/mmlsconfig").exists
    assert not node.file(MM_LOG).exists


# ---- the benchmark --------------------------------------------------------------------------


def test_benchmark_collected_every_pattern_from_every_client():
    results = bench.load_results(*(BENCH / f"{c}.json" for c in CLIENTS))
    assert sorted(r["host"] for r in results) == sorted(CLIENTS)
    for result in results:
        assert result["size"] == "small"
        assert {p: len(ranks) for p, ranks in result["ranks"].items()} == {p: 2 for p in bench.PATTERNS}
        assert all(rank["iops"] > 0 for ranks in result["ranks"].values() for rank in ranks)
        assert result["listing"]["entries"] >= 2 * bench.SIZES["small"].files_per_rank
    table = bench.table(results)
    for pattern in (*bench.PATTERNS, bench.LISTING):
        assert [line.split()[1] for line in table.splitlines() if line.startswith(pattern + " ")] == [*CLIENTS, "ALL"]


@pytest.mark.parametrize("client", CLIENTS)
def test_benchmark_left_no_files_behind(client):
    assert run(client, f"find /var/tmp/hal-bench/{client} -mindepth 1 | wc -l").stdout.strip() == "0"
