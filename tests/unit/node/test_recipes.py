"""The programs of the ResNet-50 recipe (hal_provision/node/recipes), as the cluster runs them.

slurmenv is fed Slurm's environment as slurmstepd sets it for one srun task. The wiring probe
runs as real processes, copied alone into a directory as the recipes role installs them, with
faked SLURM_* variables for two "nodes" on the loopback and device files in a temporary
directory. train_resnet50's options, learning-rate schedule and step timer are tested without
PyTorch (not installed here; the GPU path runs on a real GPU). The scaling report reads the
sample outputs in tests/data/recipes (illustrative, not measured: see the README there) and
writes a real PNG with matplotlib.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import os
import py_compile
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hal_provision.node.recipes import scaling, slurmenv, train_resnet50, wiring_probe
from hal_provision.node.recipes.slurmenv import SlurmEnvError

PACKAGE = Path(slurmenv.__file__).parent
PROGRAMS = ("slurmenv.py", "wiring_probe.py", "train_resnet50.py", "scaling.py", "hal_stage.py")
SAMPLES = Path(__file__).resolve().parents[2] / "data" / "recipes"


def task_env(rank: int, *, per_node: int = 4, nodes: int = 2, job: int = 1234, **extra: str) -> dict[str, str]:
    """The variables slurmstepd sets for task `rank` of `nodes` x `per_node` tasks, one per GPU
    (global GPU numbers 0..per_node-1 on each node), with `extra` added or replacing."""
    env = {
        "SLURM_JOB_ID": str(job),
        "SLURM_PROCID": str(rank),
        "SLURM_NTASKS": str(nodes * per_node),
        "SLURM_LOCALID": str(rank % per_node),
        "SLURM_NODEID": str(rank // per_node),
        "SLURM_NNODES": str(nodes),
        "SLURM_STEP_TASKS_PER_NODE": f"{per_node}(x{nodes})" if nodes > 1 else str(per_node),
        "SLURM_STEP_NODELIST": "hal[01-02]" if nodes == 2 else f"hal[01-{nodes:02d}]",
        "SLURM_STEP_GPUS": ",".join(map(str, range(per_node))),
        "CUDA_VISIBLE_DEVICES": ",".join(map(str, range(per_node))),
    }
    env.update(extra)
    return {k: v for k, v in env.items() if v is not None}


def without(env: dict[str, str], *names: str) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in names}


def install(tmp_path: Path) -> Path:
    """The programs alone in a directory, as the recipes role installs them (no package)."""
    target = tmp_path / "resnet50"
    target.mkdir()
    for name in PROGRAMS:
        shutil.copy(PACKAGE / name, target / name)
    return target


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- the package as the role ships it ---------------------------------------------------------


def test_the_role_installs_every_program_that_exists_here():
    from hal_provision.render.recipes import PROGRAMS as RENDERED

    assert sorted(RENDERED) == sorted(PROGRAMS)
    assert all((PACKAGE / name).is_file() for name in RENDERED)


@pytest.mark.parametrize("name", PROGRAMS)
def test_program_compiles(name, tmp_path):
    py_compile.compile(str(PACKAGE / name), cfile=str(tmp_path / "x.pyc"), doraise=True)


@pytest.mark.parametrize("name", PROGRAMS)
def test_top_level_imports_are_the_standard_library_and_siblings(name):
    """matplotlib and PyTorch are imported inside functions only, so the cluster's bare python3
    runs the probe and the report, and train_resnet50 reads its options without PyTorch."""
    tree = ast.parse((PACKAGE / name).read_text())
    siblings = {Path(p).stem for p in PROGRAMS}
    top = set()
    for node in tree.body:
        for inner in (
            [node] + node.body + [h for hs in node.handlers for h in hs.body] if isinstance(node, ast.Try) else [node]
        ):
            if isinstance(inner, ast.Import):
                top.update(a.name.split(".")[0] for a in inner.names)
            elif isinstance(inner, ast.ImportFrom) and inner.level == 0:
                top.add(inner.module.split(".")[0])
    assert top - sys.stdlib_module_names - siblings == set()


# ---- slurmenv ---------------------------------------------------------------------------------


def test_rank_5_of_two_nodes_of_four_gpus():
    rv = slurmenv.from_slurm(task_env(5, SLURM_STEP_GPUS="4,5,6,7"), hostname="hal02")
    assert rv == slurmenv.Rendezvous(
        master_addr="hal01",
        master_port=21234,
        world_size=8,
        rank=5,
        local_rank=1,
        local_world_size=4,
        node_rank=1,
        nnodes=2,
        hostname="hal02",
        visible_devices=["0", "1", "2", "3"],
        device=1,
        gpu_ids=["4", "5", "6", "7"],
    )
    assert rv.torch_env() == {
        "MASTER_ADDR": "hal01",
        "MASTER_PORT": "21234",
        "WORLD_SIZE": "8",
        "RANK": "5",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "4",
        "NODE_RANK": "1",
    }


def test_a_cpu_step_needs_no_gpu():
    env = task_env(3, per_node=2, CUDA_VISIBLE_DEVICES=None, SLURM_STEP_GPUS=None)
    with pytest.raises(SlurmEnvError, match="CUDA_VISIBLE_DEVICES is not set"):
        slurmenv.from_slurm(env, hostname="hal02")
    rv = slurmenv.from_slurm(env, hostname="hal02", gpus=False)
    assert (rv.rank, rv.local_rank, rv.node_rank, rv.world_size, rv.visible_devices, rv.gpu_ids) == (3, 1, 1, 4, [], [])
    # what is set is kept, and too few GPUs for the tasks is no error on CPUs
    assert slurmenv.from_slurm(dict(env, CUDA_VISIBLE_DEVICES="0"), gpus=False).visible_devices == ["0"]


def test_a_rendezvous_cannot_be_changed():
    rv = slurmenv.from_slurm(task_env(0), hostname="hal01")
    with pytest.raises(dataclasses.FrozenInstanceError):
        rv.rank = 1


def test_the_hostname_defaults_to_this_machine():
    assert slurmenv.from_slurm(task_env(0)).hostname == socket.gethostname()


def test_uneven_nodes_take_their_own_count():
    env = task_env(4, SLURM_NTASKS="6", SLURM_LOCALID="0", SLURM_NODEID="1", SLURM_STEP_TASKS_PER_NODE="4,2")
    rv = slurmenv.from_slurm(env, hostname="hal02")
    assert (rv.local_world_size, rv.world_size, rv.node_rank) == (2, 6, 1)


@pytest.mark.parametrize(
    ("hostlist", "first"),
    [
        ("hal01", "hal01"),
        ("hal[01-02]", "hal01"),
        ("hal[01,03-04],login", "hal01"),
        ("login,hal[01-02]", "login"),
        ("gpu-[1-4]a", "gpu-1a"),
        ("hal[001-016]", "hal001"),
        ("hal[07]", "hal07"),
        ("rack[1-2]-n[07-08]", "rack1-n07"),
        ("node.example[3-4].org,x", "node.example3.org"),
        ("  hal05\n", "hal05"),
    ],
)
def test_first_host_of_a_hostlist(hostlist, first):
    assert slurmenv.first_host(hostlist) == first


@pytest.mark.parametrize(
    ("hostlist", "message"),
    [
        ("", "not a Slurm hostlist"),
        ("hal 01", "not a Slurm hostlist"),
        ("hal[01-02", "unbalanced brackets"),
        ("hal]01[", "unbalanced brackets"),
        ("hal[[01]]", "unbalanced brackets"),
        ("hal[a-b]", "not a Slurm hostlist range [a-b]"),
        ("hal[]", "not a Slurm hostlist range []"),
        (",hal01", "starts with an empty name"),
    ],
)
def test_a_broken_hostlist_is_named(hostlist, message):
    with pytest.raises(SlurmEnvError, match=message.replace("[", r"\[").replace("]", r"\]")):
        slurmenv.first_host(hostlist)


@pytest.mark.parametrize(
    ("text", "counts"),
    [
        ("4", [4]),
        ("4(x2)", [4, 4]),
        ("4,2(x3)", [4, 2, 2, 2]),
        ("2(x3),1", [2, 2, 2, 1]),
        ("1(x16)", [1] * 16),
    ],
)
def test_tasks_per_node_expands_slurms_compressed_form(text, counts):
    assert slurmenv.tasks_per_node(text) == counts


@pytest.mark.parametrize("text", ["", "x", "4(2)", "4(x0)", "4,,2", "-1"])
def test_tasks_per_node_refuses_other_forms(text):
    with pytest.raises(SlurmEnvError, match="SLURM_STEP_TASKS_PER_NODE=.* is not Slurm's tasks-per-node form"):
        slurmenv.tasks_per_node(text, "SLURM_STEP_TASKS_PER_NODE")


def test_the_port_follows_the_job_so_jobs_on_one_node_differ():
    ports = [slurmenv.from_slurm(task_env(0, job=job), hostname="h").master_port for job in (1234, 1235, 21234)]
    assert ports == [21234, 21235, 21234]  # repeats only for job IDs 20,000 apart
    assert {slurmenv.default_port(j) for j in range(100_000)} == set(range(20000, 40000))


@pytest.mark.parametrize(
    ("extra", "port"),
    [
        ({"MASTER_PORT": "29500"}, 29500),
        ({"HAL_RECIPE_PORT": "31000"}, 31000),
        ({"HAL_RECIPE_PORT": "31000", "MASTER_PORT": "29500"}, 31000),
        ({"MASTER_PORT": ""}, 21234),
    ],
)
def test_the_port_can_be_set(extra, port):
    assert slurmenv.from_slurm(task_env(0, **extra), hostname="h").master_port == port


def test_master_addr_can_be_set():
    assert slurmenv.from_slurm(task_env(3, MASTER_ADDR="10.0.0.1"), hostname="h").master_addr == "10.0.0.1"


def test_job_variables_stand_in_for_missing_step_ones():
    env = without(
        task_env(6, SLURM_STEP_GPUS="0,1,2,3"),
        "SLURM_STEP_TASKS_PER_NODE",
        "SLURM_STEP_NODELIST",
        "SLURM_NNODES",
        "SLURM_STEP_GPUS",
    )
    env.update(
        SLURM_TASKS_PER_NODE="4(x2)", SLURM_JOB_NODELIST="gpu[07-08]", SLURM_JOB_NUM_NODES="2", SLURM_JOB_GPUS="0,1,2,3"
    )
    rv = slurmenv.from_slurm(env, hostname="gpu08")
    assert (rv.master_addr, rv.local_world_size, rv.nnodes, rv.gpu_ids) == ("gpu07", 4, 2, ["0", "1", "2", "3"])


def test_step_variables_win_over_job_ones():
    """A step may use part of its job: the step's nodes, tasks and GPUs are the ones that count."""
    env = task_env(
        1,
        per_node=2,
        nodes=1,
        SLURM_STEP_NODELIST="hal03",
        SLURM_STEP_GPUS="2,3",
        SLURM_STEP_NUM_NODES="1",
        SLURM_STEP_NUM_TASKS="2",
        SLURM_JOB_NODELIST="hal[01-04]",
        SLURM_JOB_GPUS="0,1,2,3",
        SLURM_TASKS_PER_NODE="4(x4)",
        SLURM_JOB_NUM_NODES="4",
        SLURM_NNODES="4",
        SLURM_NTASKS="16",
    )
    env["SLURM_STEP_TASKS_PER_NODE"] = "2"
    rv = slurmenv.from_slurm(env, hostname="hal03")
    assert (rv.master_addr, rv.world_size, rv.nnodes, rv.local_world_size, rv.gpu_ids) == ("hal03", 2, 1, 2, ["2", "3"])


def test_gpu_ids_may_be_absent():
    rv = slurmenv.from_slurm(without(task_env(2), "SLURM_STEP_GPUS"), hostname="h")
    assert rv.gpu_ids == [] and rv.device == 2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda e: without(e, "SLURM_PROCID"), "SLURM_PROCID is not set: not inside an srun step?"),
        (lambda e: without(e, "SLURM_LOCALID"), "SLURM_LOCALID is not set"),
        (lambda e: without(e, "SLURM_NODEID"), "SLURM_NODEID is not set"),
        (lambda e: without(e, "SLURM_NTASKS"), r"SLURM_STEP_NUM_TASKS is not set \(nor SLURM_NTASKS\)"),
        (
            lambda e: without(e, "SLURM_NNODES"),
            r"SLURM_STEP_NUM_NODES is not set \(nor SLURM_NNODES, SLURM_JOB_NUM_NODES\)",
        ),
        (lambda e: without(e, "SLURM_STEP_TASKS_PER_NODE"), "SLURM_STEP_TASKS_PER_NODE is not set"),
        (lambda e: without(e, "SLURM_STEP_NODELIST"), r"SLURM_STEP_NODELIST is not set \(nor SLURM_JOB_NODELIST\)"),
        (lambda e: without(e, "SLURM_JOB_ID"), "SLURM_JOB_ID is not set.*; or set HAL_RECIPE_PORT"),
        (lambda e: {**e, "SLURM_PROCID": "five"}, "SLURM_PROCID='five' is not a whole number"),
        (lambda e: {**e, "SLURM_PROCID": "-1"}, r"SLURM_PROCID=-1 is out of range \(at least 0\)"),
        (lambda e: {**e, "SLURM_PROCID": "8"}, "SLURM_PROCID=8 is not below the step's 8 tasks"),
        (lambda e: {**e, "SLURM_NODEID": "2"}, "SLURM_NODEID=2 is not below the step's 2 nodes"),
        (lambda e: {**e, "SLURM_NTASKS": "0"}, "SLURM_NTASKS=0 is out of range"),
        (
            lambda e: {**e, "SLURM_STEP_TASKS_PER_NODE": "4(x3)"},
            "SLURM_STEP_TASKS_PER_NODE='4\\(x3\\)' does not describe 8 tasks on 2 nodes",
        ),
        (lambda e: {**e, "SLURM_STEP_TASKS_PER_NODE": "7,1"}, "SLURM_LOCALID=1 is not below this node's 1 tasks"),
        (lambda e: {**e, "HAL_RECIPE_PORT": "70000"}, r"HAL_RECIPE_PORT=70000 is out of range \(1..65535\)"),
        (lambda e: {**e, "MASTER_PORT": "http"}, "MASTER_PORT='http' is not a whole number"),
        (lambda e: {**e, "SLURM_STEP_NODELIST": "hal[01-02"}, "unbalanced brackets"),
        (lambda e: without(e, "CUDA_VISIBLE_DEVICES"), "CUDA_VISIBLE_DEVICES is not set: the step has no GPUs"),
        (lambda e: {**e, "CUDA_VISIBLE_DEVICES": "NoDevFiles"}, "shows 0 GPU"),
        (
            lambda e: {**e, "CUDA_VISIBLE_DEVICES": "1"},
            r"CUDA_VISIBLE_DEVICES='1' shows 1 GPU\(s\) to 4 tasks on this node.*--gpus-per-task",
        ),
    ],
)
def test_a_bad_environment_is_named(change, message):
    with pytest.raises(SlurmEnvError, match=message):
        slurmenv.from_slurm(change(task_env(5)), hostname="hal02")


# ---- wiring probe: this rank's record -----------------------------------------------------------


def test_the_device_file_is_the_node_global_gpu_number():
    rv = slurmenv.from_slurm(task_env(1, per_node=2, nodes=1, SLURM_STEP_GPUS="2,3"), hostname="h")
    assert wiring_probe.device_file(rv, "/dev") == "/dev/nvidia3"


def test_without_gpu_ids_the_device_file_is_the_visible_number():
    rv = slurmenv.from_slurm(
        without(task_env(1, per_node=2, nodes=1, CUDA_VISIBLE_DEVICES="2,3"), "SLURM_STEP_GPUS"), hostname="h"
    )
    assert wiring_probe.device_file(rv, "/x") == "/x/nvidia3"


def test_gpu_uuids_name_no_device_file(tmp_path):
    rv = slurmenv.from_slurm(
        without(task_env(0, per_node=1, nodes=1, CUDA_VISIBLE_DEVICES="GPU-5a1b"), "SLURM_STEP_GPUS"), hostname="h"
    )
    rec = wiring_probe.record(rv, str(tmp_path))
    assert (rec["device_path"], rec["device_ok"]) == (None, False)
    assert "no device file for CUDA device 0 (CUDA_VISIBLE_DEVICES=GPU-5a1b" in rec["device_error"]


def test_an_openable_device_file_is_ok(tmp_path):
    (tmp_path / "nvidia0").write_bytes(b"")
    assert wiring_probe.open_device(str(tmp_path / "nvidia0")) == (True, None)


def test_a_missing_device_file_is_not_ok(tmp_path):
    assert wiring_probe.open_device(str(tmp_path / "nvidia9")) == (
        False,
        f"{tmp_path}/nvidia9: No such file or directory",
    )


def test_a_device_node_without_a_driver_is_ok(tmp_path):
    """open() of a node nothing answers for fails with ENXIO (here: a Unix socket, which open()
    refuses the same way); the cgroup let the rank reach it, which is what the probe asks."""
    path = tmp_path / "nvidia1"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        assert wiring_probe.open_device(str(path)) == (True, None)


@pytest.mark.parametrize("code", ["EPERM", "EACCES"])
def test_a_device_blocked_by_the_cgroup_is_not_ok(monkeypatch, code):
    import errno

    def refuse(path, flags):
        raise OSError(getattr(errno, code), os.strerror(getattr(errno, code)), path)

    monkeypatch.setattr(wiring_probe.os, "open", refuse)
    ok, why = wiring_probe.open_device("/dev/nvidia0")
    assert not ok and why == f"/dev/nvidia0: {os.strerror(getattr(errno, code))} (blocked by the job's device cgroup?)"


def test_a_record_has_every_field_and_passes_its_own_validation(tmp_path):
    (tmp_path / "nvidia2").write_bytes(b"")
    rv = slurmenv.from_slurm(task_env(2, SLURM_STEP_GPUS="0,1,2,3"), hostname="hal01")
    rec = wiring_probe.record(rv, str(tmp_path))
    assert set(rec) == set(wiring_probe.FIELDS)
    assert wiring_probe.malformed(json.loads(json.dumps(rec))) is None
    assert (rec["device_path"], rec["device_ok"], rec["gpu_ids"]) == (f"{tmp_path}/nvidia2", True, ["0", "1", "2", "3"])


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda r: [], "not a JSON object"),
        (lambda r: without(r, "master_port"), "no 'master_port'"),
        (lambda r: {**r, "rank": "3"}, "'rank' is '3'"),
        (lambda r: {**r, "rank": True}, "'rank' is True"),
        (lambda r: {**r, "device_ok": 1}, "'device_ok' is 1"),
    ],
)
def test_malformed_records_are_refused(change, why):
    assert wiring_probe.malformed(change(rec_for(0))) == why


# ---- wiring probe: the verdict ------------------------------------------------------------------


def rec_for(rank: int, per_node: int = 4, nodes: int = 2, **changes) -> dict:
    """A good record of a world of nodes x per_node ranks on hal01, hal02, ..."""
    node, local = divmod(rank, per_node)
    rec = {
        "rank": rank,
        "local_rank": local,
        "node_rank": node,
        "world_size": nodes * per_node,
        "local_world_size": per_node,
        "nnodes": nodes,
        "hostname": f"hal{node + 1:02d}",
        "master_addr": "hal01",
        "master_port": 21234,
        "visible_devices": [str(i) for i in range(per_node)],
        "device": local,
        "gpu_ids": [str(i) for i in range(per_node)],
        "device_path": f"/dev/nvidia{local}",
        "device_ok": True,
        "device_error": None,
    }
    rec.update(changes)
    return rec


def world(per_node: int = 4, nodes: int = 2) -> list[dict]:
    return [rec_for(r, per_node, nodes) for r in range(per_node * nodes)]


def test_a_good_world_has_no_problem():
    assert wiring_probe.check(world()) == []
    assert wiring_probe.check(world(1, 1)) == []
    assert wiring_probe.summary(world()) == "world=8 nodes=2 per_node=4 master=hal01:21234"


def test_uneven_nodes_are_fine_and_summarised():
    records = world(4, 2)[:6]
    for r in records:
        r.update(world_size=6)
        if r["node_rank"] == 1:
            r["local_world_size"] = 2
    assert wiring_probe.check(records) == []
    assert wiring_probe.summary(records) == "world=6 nodes=2 per_node=4,2 master=hal01:21234"


def _replace(records: list[dict], rank: int, **changes) -> list[dict]:
    return [dict(r, **changes) if r["rank"] == rank else r for r in records]


@pytest.mark.parametrize(
    ("records", "problems"),
    [
        pytest.param([], ["no rank reported"], id="empty"),
        pytest.param(
            [r for r in world() if r["rank"] != 6],
            ["7 records for a world of 8", "missing ranks: 6", "hal02: local ranks [0, 1, 3], expected 0..3"],
            id="missing-rank",
        ),
        pytest.param(
            world() + [rec_for(3)],
            [
                "9 records for a world of 8",
                "rank 3 reported 2 times",
                "hal01: local ranks [0, 1, 2, 3, 3], expected 0..3",
                "hal01: ranks 3, 3 share /dev/nvidia3",
            ],
            id="duplicate-rank",
        ),
        pytest.param(
            _replace(world(), 7, master_port=21235),
            ["ranks disagree on master_port: 21234 (ranks 0, 1, 2, 3, 4, 5, 6), 21235 (ranks 7)"],
            id="two-ports",
        ),
        pytest.param(
            _replace(world(), 2, master_addr="hal02"),
            ["ranks disagree on master_addr: hal01 (ranks 0, 1, 3, 4, 5, 6, 7), hal02 (ranks 2)"],
            id="two-masters",
        ),
        pytest.param(
            [dict(r, world_size=4) for r in world()],
            ["8 records for a world of 4", "ranks outside 0..3: 4, 5, 6, 7"],
            id="world-too-small",
        ),
        pytest.param(
            _replace(world(), 5, world_size=16),
            ["ranks disagree on world_size: 8 (ranks 0, 1, 2, 3, 4, 6, 7), 16 (ranks 5)"],
            id="world-disagrees",
        ),
        pytest.param(
            _replace(world(), 5, local_rank=0),
            ["hal02: local ranks [0, 0, 2, 3], expected 0..3"],
            id="local-rank-twice",
        ),
        pytest.param(
            _replace(world(), 5, local_world_size=2),
            ["hal02: ranks disagree on local_world_size (2, 4)"],
            id="local-world-disagrees",
        ),
        pytest.param(
            _replace(world(), 1, device_path="/dev/nvidia0"), ["hal01: ranks 0, 1 share /dev/nvidia0"], id="shared-gpu"
        ),
        pytest.param(
            _replace(
                world(),
                6,
                device_ok=False,
                device_error="/dev/nvidia2: Operation not permitted (blocked by the job's device cgroup?)",
            ),
            ["rank 6 (hal02): /dev/nvidia2: Operation not permitted (blocked by the job's device cgroup?)"],
            id="device-blocked",
        ),
        pytest.param(
            [dict(r, hostname="hal01") for r in world()],
            [
                "1 hosts (hal01) for nnodes=2",
                "hal01: local ranks [0, 0, 1, 1, 2, 2, 3, 3], expected 0..3",
                "hal01: ranks disagree on node_rank (0, 1)",
                "hal01: ranks 0, 4 share /dev/nvidia0",
                "hal01: ranks 1, 5 share /dev/nvidia1",
                "hal01: ranks 2, 6 share /dev/nvidia2",
                "hal01: ranks 3, 7 share /dev/nvidia3",
            ],
            id="one-host-twice",
        ),
        pytest.param(
            [dict(r, hostname="hal03") if r["rank"] in (6, 7) else r for r in world()],
            [
                "3 hosts (hal01, hal02, hal03) for nnodes=2",
                "hal02: local ranks [0, 1], expected 0..3",
                "hal03: local ranks [2, 3], expected 0..3",
                "hosts hal02, hal03 all claim node_rank 1",
            ],
            id="three-hosts",
        ),
        pytest.param(
            [dict(r, node_rank=0) for r in world()], ["hosts hal01, hal02 all claim node_rank 0"], id="node-rank-twice"
        ),
    ],
)
def test_a_bad_world_is_reported(records, problems):
    assert wiring_probe.check(records) == problems


def test_rank_0_prints_the_verdict_then_the_sorted_records():
    records = list(reversed(world()))
    ok = wiring_probe.report_lines(records, [])
    assert ok[0] == "WIRING OK world=8 nodes=2 per_node=4 master=hal01:21234"
    assert ok[1].startswith("WIRING {")
    body = json.loads(ok[1][len("WIRING ") :])
    assert body["ok"] is True and body["problems"] == [] and [r["rank"] for r in body["records"]] == list(range(8))
    failed = wiring_probe.report_lines(records, ["missing ranks: 6", "hal01: ranks 0, 1 share /dev/nvidia0"])
    assert failed[0] == "WIRING FAILED: missing ranks: 6; hal01: ranks 0, 1 share /dev/nvidia0"
    assert json.loads(failed[1][len("WIRING ") :])["ok"] is False


# ---- wiring probe: the exchange, as processes ---------------------------------------------------


def probe_env(rank: int, port: int, dev_dir: Path, per_node: int = 2, nodes: int = 2, **extra) -> dict[str, str]:
    """Task `rank` of the probe on "node" hal01 or hal02 of this machine, its GPUs 0-1 on hal01
    and 2-3 on hal02 (both see CUDA indexes 0-1), rendezvous on the loopback."""
    node = rank // per_node
    first = node * per_node
    env = task_env(
        rank,
        per_node=per_node,
        nodes=nodes,
        MASTER_ADDR="127.0.0.1",
        HAL_RECIPE_PORT=str(port),
        SLURM_STEP_GPUS=",".join(str(first + i) for i in range(per_node)),
        HAL_PROBE_HOSTNAME=f"hal{node + 1:02d}",
        HAL_PROBE_DEV_DIR=str(dev_dir),
    )
    env.update(PATH=os.environ.get("PATH", "/usr/bin:/bin"), **extra)
    return env


def start_probe(directory: Path, env: dict[str, str], timeout: float = 20) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(directory / "wiring_probe.py"), "--timeout", f"{timeout:g}", "--bind", "127.0.0.1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd="/",
    )


def finish(procs: list[subprocess.Popen]) -> list[tuple[int, str, str]]:
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=60)
        out.append((p.returncode, stdout, stderr))
    return out


def fake_gpus(tmp_path: Path, numbers) -> Path:
    dev = tmp_path / "dev"
    dev.mkdir()
    for n in numbers:
        (dev / f"nvidia{n}").write_bytes(b"")
    return dev


def test_four_ranks_on_two_nodes_join_one_world(tmp_path):
    directory, dev, port = install(tmp_path), fake_gpus(tmp_path, range(4)), free_port()
    others = [start_probe(directory, probe_env(r, port, dev)) for r in (1, 2, 3)]
    time.sleep(0.5)  # rank 0 comes up last: the others must keep trying
    results = finish([start_probe(directory, probe_env(0, port, dev))] + others)

    assert [rc for rc, _, _ in results] == [0, 0, 0, 0], results
    lines = results[0][1].splitlines()
    assert lines[0] == f"WIRING OK world=4 nodes=2 per_node=2 master=127.0.0.1:{port}"
    body = json.loads(lines[1].removeprefix("WIRING "))
    assert len(lines) == 2 and body["ok"] and body["problems"] == []
    assert [
        (r["rank"], r["hostname"], r["local_rank"], r["device"], r["device_path"], r["device_ok"])
        for r in body["records"]
    ] == [
        (0, "hal01", 0, 0, f"{dev}/nvidia0", True),
        (1, "hal01", 1, 1, f"{dev}/nvidia1", True),
        (2, "hal02", 0, 0, f"{dev}/nvidia2", True),
        (3, "hal02", 1, 1, f"{dev}/nvidia3", True),
    ]
    assert all(out == "" and err == "" for _, out, err in results[1:])  # other ranks are silent


def test_on_cpus_the_probe_checks_the_world_without_gpus(tmp_path):
    """The job script's CPU branch sets HAL_RECIPE_DEVICE=cpu; Slurm shows the tasks no GPU."""
    directory, port = install(tmp_path), free_port()
    envs = [
        dict(
            probe_env(r, port, tmp_path / "no-dev", CUDA_VISIBLE_DEVICES=None, SLURM_STEP_GPUS=None),
            HAL_RECIPE_DEVICE="cpu",
        )
        for r in range(4)
    ]
    for env in envs:
        del env["CUDA_VISIBLE_DEVICES"], env["SLURM_STEP_GPUS"]
    results = finish([start_probe(directory, env) for env in envs])
    assert [rc for rc, _, _ in results] == [0, 0, 0, 0], results
    lines = results[0][1].splitlines()
    assert lines[0] == f"WIRING OK world=4 nodes=2 per_node=2 master=127.0.0.1:{port}"
    records = json.loads(lines[1].removeprefix("WIRING "))["records"]
    assert [(r["device_path"], r["device_ok"], r["visible_devices"]) for r in records] == [(None, True, [])] * 4


def test_a_missing_gpu_fails_every_rank(tmp_path):
    directory, dev, port = install(tmp_path), fake_gpus(tmp_path, range(3)), free_port()
    results = finish([start_probe(directory, probe_env(r, port, dev)) for r in range(4)])

    assert [rc for rc, _, _ in results] == [1, 1, 1, 1], results
    assert results[0][1].splitlines()[0] == f"WIRING FAILED: rank 3 (hal02): {dev}/nvidia3: No such file or directory"
    for rank, (_, out, err) in enumerate(results[1:], start=1):
        assert out == "" and err == f"wiring_probe rank {rank} (hal0{rank // 2 + 1}): rank 0 reports WIRING FAILED\n"


def test_a_rank_without_rank_0_gives_up_in_time(tmp_path):
    directory, dev, port = install(tmp_path), fake_gpus(tmp_path, range(4)), free_port()
    started = time.monotonic()
    [(rc, out, err)] = finish([start_probe(directory, probe_env(3, port, dev), timeout=1)])
    assert rc == 1 and out == ""
    assert err == (
        f"wiring_probe rank 3 (hal02): no rank 0 listening at 127.0.0.1:{port} within 1 s (last: Connection refused)\n"
    )
    assert time.monotonic() - started < 10


def test_rank_0_alone_reports_the_missing_ranks_in_time(tmp_path):
    directory, dev, port = install(tmp_path), fake_gpus(tmp_path, range(4)), free_port()
    [(rc, out, err)] = finish([start_probe(directory, probe_env(0, port, dev), timeout=1)])
    assert rc == 1 and err == ""
    assert out.splitlines()[0] == (
        "WIRING FAILED: only 1 of 4 ranks reported within 1 s; 1 records for a world of 4; "
        "missing ranks: 1, 2, 3; 1 hosts (hal01) for nnodes=2; "
        "hal01: local ranks [0], expected 0..1"
    )


def test_the_probe_outside_slurm_says_so(tmp_path):
    directory = install(tmp_path)
    done = subprocess.run(
        [sys.executable, str(directory / "wiring_probe.py")],
        env={"PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "wiring_probe: SLURM_PROCID is not set: not inside an srun step?\n"


def test_rank_0_refuses_a_stranger_and_keeps_waiting(tmp_path):
    own = rec_for(0, per_node=2, nodes=1, master_addr="127.0.0.1", master_port=free_port())
    result = {}
    thread = threading.Thread(
        target=lambda: result.update(zip(("records", "problems", "conns"), wiring_probe.collect(own, 2.0, "127.0.0.1")))
    )
    thread.start()
    deadline = time.monotonic() + 5
    while True:
        try:
            stranger = socket.create_connection(("127.0.0.1", own["master_port"]), timeout=1)
            break
        except ConnectionRefusedError:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    with stranger:
        stranger.sendall(b'{"rank": 1}\n')
        thread.join(10)
    assert result["records"] == [own] and result["conns"] == []
    assert result["problems"] == [
        "127.0.0.1 sent no valid record: no 'local_rank'",
        "only 1 of 2 ranks reported within 2 s",
    ]


def test_rank_0_says_when_its_port_is_taken():
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        own = rec_for(0, per_node=1, nodes=1, master_port=port)
        records, problems, conns = wiring_probe.collect(own, 1.0, "127.0.0.1")
    assert records == [own] and conns == []
    assert problems == [
        f"rank 0 cannot listen on 127.0.0.1:{port}: Address already in use (set HAL_RECIPE_PORT to another port)"
    ]


# ---- train_resnet50 without PyTorch ---------------------------------------------------------------


def test_the_defaults_are_the_papers_recipe():
    args = train_resnet50.parse_args([], environ={})
    assert (
        args.data,
        args.batch_per_gpu,
        args.base_lr,
        args.momentum,
        args.weight_decay,
        args.warmup_epochs,
        args.schedule,
        args.epochs,
        args.precision,
        args.warmup_steps_timing,
        args.steps_per_epoch,
    ) == ("synthetic", 256, 0.1, 0.9, 1e-4, 5.0, "step", 90, "amp", 10, 100)
    assert (args.checkpoint_dir, args.resume, args.label_smoothing, args.no_bn_weight_decay) == (
        None,
        False,
        0.0,
        False,
    )
    assert (args.device, args.arch, args.image_size) == ("auto", "resnet50", 224)


def test_a_short_cpu_run_and_the_job_scripts_device():
    args = train_resnet50.parse_args(
        ["--arch", "resnet18", "--image-size", "64", "--batch-per-rank", "16"], environ={"HAL_RECIPE_DEVICE": "cpu"}
    )
    assert (args.device, args.arch, args.image_size, args.batch_per_gpu) == ("cpu", "resnet18", 64, 16)
    assert train_resnet50.parse_args(["--device", "auto"], environ={"HAL_RECIPE_DEVICE": "cpu"}).device == "auto"
    assert train_resnet50.parse_args([], environ={"HAL_RECIPE_DEVICE": "tpu"}).device == "auto"


def never(*_):
    raise AssertionError("PyTorch was asked where the answer was known")


@pytest.mark.parametrize(
    ("requested", "env", "cuda", "device"),
    [
        ("cpu", {"CUDA_VISIBLE_DEVICES": "0,1"}, never, "cpu"),
        ("auto", {}, never, "cpu"),  # Slurm sets none in a job without GPUs
        ("auto", {"CUDA_VISIBLE_DEVICES": ""}, never, "cpu"),
        ("auto", {"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, never, "cpu"),
        ("auto", {"CUDA_VISIBLE_DEVICES": "0"}, lambda: False, "cpu"),  # a CPU build of PyTorch
        ("auto", {"CUDA_VISIBLE_DEVICES": "0"}, lambda: True, "cuda"),
        ("cuda", {}, lambda: True, "cuda"),
    ],
)
def test_the_device(requested, env, cuda, device):
    assert train_resnet50.choose_device(requested, env, cuda) == device


def test_cuda_asked_for_without_a_gpu_is_refused():
    with pytest.raises(train_resnet50.DeviceError, match="PyTorch finds no GPU"):
        train_resnet50.choose_device("cuda", {"CUDA_VISIBLE_DEVICES": "0"}, lambda: False)


@pytest.mark.parametrize(
    ("env", "threads"),
    [
        ({"OMP_NUM_THREADS": "20", "SLURM_CPUS_PER_TASK": "80"}, 20),  # the job script's: one per core
        ({"OMP_NUM_THREADS": "20,4"}, 20),
        ({"SLURM_CPUS_PER_TASK": "80"}, 80),
        ({"OMP_NUM_THREADS": "0", "SLURM_CPUS_PER_TASK": "8"}, 8),
        ({"OMP_NUM_THREADS": "many"}, None),
        ({}, None),
    ],
)
def test_threads_come_from_the_task(env, threads):
    assert train_resnet50.cpu_threads(env) == threads


def test_fp16_autocast_is_for_gpus_only():
    assert train_resnet50.effective_precision("amp", "cuda") == "amp"
    assert train_resnet50.effective_precision("amp", "cpu") == "fp32"


def test_past_8192_images_the_warning_says_what_the_cpu_study_learned():
    assert train_resnet50.large_batch_warning(8192, 5.0) is None
    text = train_resnet50.large_batch_warning(16384, 2.0)
    assert text.startswith("train_resnet50: warning: a global batch of 16384 images (over 8192).")
    for words in ("SC18", "warm-up (--warmup-epochs, now 2", "LARS", "smaller batch"):
        assert words in text


@pytest.mark.parametrize(("steps", "window"), [(1, 1), (7, 1), (20, 5), (40, 10), (1000, 10)])
def test_the_loss_window(steps, window):
    assert train_resnet50.loss_window(steps) == window


def test_the_loss_track_keeps_the_first_and_the_last_steps():
    track = train_resnet50.LossTrack(3)
    for loss in [7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.5]:
        track.add(loss)
    assert track.means() == pytest.approx((6.0, 13 / 6))
    assert train_resnet50.loss_fields(6.0, 13 / 6, 3) == {
        "loss_first": 6.0,
        "loss_last": 2.1667,
        "loss_window": 3,
        "loss_fell": True,
    }
    assert train_resnet50.loss_fields(2.0, 2.0, 1)["loss_fell"] is False
    assert all(math.isnan(m) for m in train_resnet50.LossTrack(3).means())


def test_ranks_whose_parameters_differ_are_named():
    assert train_resnet50.unequal_ranks(["ab", "ab", "ab"]) == []
    assert train_resnet50.unequal_ranks(["ab", "ab", "cd", "ab", "ef"]) == [2, 4]


@pytest.mark.parametrize(
    ("cpuinfo", "name"),
    [
        (
            "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz\n"
            "processor\t: 1\nmodel name\t: other\n",
            "Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz",
        ),
        (
            "processor\t: 0\ncpu\t\t: POWER9, altivec supported\nclock\t\t: 3800.000000MHz\n",
            "POWER9, altivec supported",
        ),
        ("", "?"),
    ],
)
def test_the_cpu_name(cpuinfo, name):
    assert train_resnet50.cpu_name(cpuinfo) == name


def test_the_result_on_cpus_has_per_node_figures_and_no_gpus():
    result = train_resnet50.result_fields(
        device="cpu",
        ranks=4,
        nodes=2,
        batch_per_rank=32,
        steps=40,
        seconds=64.0,
        precision="fp32",
        arch="resnet50",
        image_size=224,
        torch_version="2.13.0+cpu",
        device_name="Intel(R) Xeon(R) Gold 6148",
        threads=20,
    )
    assert result == {
        "device": "cpu",
        "arch": "resnet50",
        "image_size": 224,
        "precision": "fp32",
        "images_per_second": 80.0,
        "per_node": 40.0,
        "per_rank": 20.0,
        "ranks": 4,
        "nodes": 2,
        "batch_per_rank": 32,
        "steps": 40,
        "seconds": 64.0,
        "torch": "2.13.0+cpu",
        "cpu_name": "Intel(R) Xeon(R) Gold 6148",
        "threads_per_rank": 20,
    }
    line = train_resnet50.result_line(result)
    run = scaling.run_from_result(scaling.parse_result(line))
    assert (run.device, run.units, run.ranks, run.per_unit) == ("cpu", 2, 4, 40.0)


def test_the_result_on_gpus_keeps_the_names_scaling_has_read():
    result = train_resnet50.result_fields(
        device="cuda",
        ranks=8,
        nodes=2,
        batch_per_rank=256,
        steps=40,
        seconds=8.0,
        precision="amp",
        arch="resnet50",
        image_size=224,
        torch_version="2.5.1",
        device_name="Tesla V100-SXM2-16GB",
    )
    assert {
        k: result[k] for k in ("gpus", "per_gpu", "batch_per_gpu", "gpu_name", "per_node", "images_per_second")
    } == {
        "gpus": 8,
        "per_gpu": 1280.0,
        "batch_per_gpu": 256,
        "gpu_name": "Tesla V100-SXM2-16GB",
        "per_node": 5120.0,
        "images_per_second": 10240.0,
    }
    assert "cpu_name" not in result and "threads_per_rank" not in result


def test_the_rendered_batch_is_the_default_and_the_command_line_wins():
    env = {"HAL_RECIPE_BATCH_PER_GPU": "128"}
    assert train_resnet50.parse_args([], environ=env).batch_per_gpu == 128
    assert train_resnet50.parse_args(["--batch-per-gpu", "64"], environ=env).batch_per_gpu == 64


def test_a_data_set_run_keeps_its_epoch_length_open():
    args = train_resnet50.parse_args(
        [
            "--data",
            "/datasets/imagenet",
            "--workers",
            "10",
            "--checkpoint-dir",
            "/c",
            "--resume",
            "--schedule",
            "cosine",
            "--label-smoothing",
            "0.1",
        ],
        environ={},
    )
    assert (args.data, args.steps_per_epoch, args.workers, args.resume, args.schedule, args.label_smoothing) == (
        "/datasets/imagenet",
        None,
        10,
        True,
        "cosine",
        0.1,
    )


def test_stage_copies_the_data_set_and_the_result_line_says_how_long_it_took(tmp_path, capsys):
    source = tmp_path / "shared" / "ds" / "n01"
    source.mkdir(parents=True)
    (source / "a.JPEG").write_bytes(b"x" * 3000)
    args = train_resnet50.parse_args(
        ["--data", str(source.parent), "--stage", "--stage-dest", str(tmp_path / "job" / "ds")], environ={}
    )
    rv = slurmenv.from_slurm(task_env(0), hostname="hal01")
    staged = train_resnet50.stage_data(args, rv)
    assert args.data == str(tmp_path / "job" / "ds") and (tmp_path / "job" / "ds" / "n01" / "a.JPEG").is_file()
    assert capsys.readouterr().err.startswith("hal01 hal-stage: copied 1 files, 0.0 MB in ")
    result = {
        "images_per_second": 1280.0,
        "gpus": 1,
        "nodes": 1,
        "batch_per_gpu": 256,
        **train_resnet50.stage_fields(staged, slowest_seconds=2.34567),
    }
    line = train_resnet50.result_line(result)
    assert line == (
        'RESULT {"batch_per_gpu": 256, "gpus": 1, "images_per_second": 1280.0, "nodes": 1, '
        '"stage_bytes": 3000, "stage_files": 1, "stage_seconds": 2.346}'
    )
    assert scaling.run_from_result(scaling.parse_result(line)).images_per_second == 1280.0  # the report reads it still


def test_without_stage_the_data_is_read_where_it_is():
    args = train_resnet50.parse_args(["--data", "/datasets/imagenet"], environ={})
    assert (args.stage, args.stage_dest) == (False, None)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--stage"], "--stage copies a data set: give --data PATH"),
        (["--data", "/d", "--stage-dest", "/tmp/d"], "--stage-dest needs --stage"),
        (["--resume"], "--resume needs --checkpoint-dir"),
        (["--epochs", "1", "--steps-per-epoch", "10"], "10 steps leave none to time after --warmup-steps-timing 10"),
        (["--batch-per-gpu", "0"], "--batch-per-gpu must be at least 1"),
        (["--steps-per-epoch", "0"], "--steps-per-epoch must be at least 1"),
        (["--label-smoothing", "1"], r"--label-smoothing must be in \[0, 1\)"),
        (["--schedule", "linear"], "invalid choice: 'linear'"),
        (["--precision", "bf16"], "invalid choice: 'bf16'"),
        (["--image-size", "16"], "--image-size must be at least 32"),
        (["--device", "gpu"], "invalid choice: 'gpu'"),
        (["--arch", "resnet101"], "invalid choice: 'resnet101'"),
    ],
)
def test_bad_options_are_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        train_resnet50.parse_args(argv, environ={})
    assert exit_.value.code == 2
    assert __import__("re").search(message, capsys.readouterr().err)


@pytest.mark.parametrize(
    ("base", "batch", "lr"), [(0.1, 256, 0.1), (0.1, 1024, 0.4), (0.1, 16384, 6.4), (0.1, 64, 0.025)]
)
def test_the_rate_scales_linearly_with_the_global_batch(base, batch, lr):
    assert train_resnet50.scaled_lr(base, batch) == pytest.approx(lr)


@pytest.mark.parametrize(
    ("epoch", "batch", "schedule", "lr"),
    [
        (0.0, 2048, "step", 0.1),  # warm-up starts at the 256-image rate
        (2.5, 2048, "step", 0.45),  # halfway from 0.1 to 0.8
        (5.0, 2048, "step", 0.8),  # the scaled rate
        (29.99, 2048, "step", 0.8),
        (30.0, 2048, "step", 0.08),
        (60.0, 2048, "step", 0.008),
        (85.0, 2048, "step", 0.0008),
        (0.0, 128, "step", 0.05),  # a batch below 256 has nothing to warm up to
        (4.0, 128, "step", 0.05),
        (5.0, 2048, "cosine", 0.8),
        (47.5, 2048, "cosine", 0.4),  # halfway from the end of warm-up to epoch 90
        (90.0, 2048, "cosine", 0.0),
        (2.5, 2048, "cosine", 0.45),
    ],
)
def test_the_schedule(epoch, batch, schedule, lr):
    assert train_resnet50.learning_rate(epoch, 0.1, batch, 5.0, schedule) == pytest.approx(lr)


def test_no_warm_up_starts_at_the_scaled_rate():
    assert train_resnet50.learning_rate(0.0, 0.1, 4096, 0.0, "step") == pytest.approx(1.6)


def test_an_unknown_schedule_is_refused():
    with pytest.raises(ValueError, match="unknown schedule 'linear'"):
        train_resnet50.learning_rate(1.0, 0.1, 256, 5, "linear")


class FakeClock:
    def __init__(self):
        self.now, self.syncs = 0.0, 0

    def __call__(self):
        return self.now

    def sync(self):
        self.syncs += 1


def test_the_timer_leaves_out_the_first_steps_and_the_checkpoints():
    clock = FakeClock()
    timer = train_resnet50.StepTimer(skip=3, sync=clock.sync, clock=clock)
    for epoch in range(2):
        timer.resume()
        for _ in range(5):
            clock.now += 1.0  # every step takes a second
            timer.step_finished()
        timer.pause()
        clock.now += 100.0  # the checkpoint write
    assert (timer.timed_steps, timer.seconds) == (7, 7.0)
    assert clock.syncs == 4  # start after step 3, pause, resume, pause


def test_the_timer_without_untimed_steps_counts_from_the_first():
    clock = FakeClock()
    timer = train_resnet50.StepTimer(skip=0, sync=clock.sync, clock=clock)
    timer.resume()
    for _ in range(4):
        clock.now += 0.5
        timer.step_finished()
    timer.pause()
    assert (timer.timed_steps, timer.seconds) == (4, 2.0)


def test_the_result_line_scaling_reads():
    ips = train_resnet50.throughput(gpus=8, batch_per_gpu=256, steps=40, seconds=8.0)
    assert ips == 10240.0
    line = train_resnet50.result_line({"images_per_second": ips, "gpus": 8, "nodes": 2, "batch_per_gpu": 256})
    assert line == 'RESULT {"batch_per_gpu": 256, "gpus": 8, "images_per_second": 10240.0, "nodes": 2}'
    assert scaling.parse_result(line)["images_per_second"] == ips


def test_train_script_reads_its_options_without_pytorch(tmp_path):
    directory = install(tmp_path)
    done = subprocess.run(
        [sys.executable, str(directory / "train_resnet50.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
    )
    assert done.returncode == 0 and "--steps-per-epoch" in done.stdout and "--warmup-steps-timing" in done.stdout


def test_train_script_outside_slurm_says_so(tmp_path):
    directory = install(tmp_path)
    done = subprocess.run(
        [sys.executable, str(directory / "train_resnet50.py"), "--epochs", "1"],
        env={"PATH": os.environ["PATH"]},
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "train_resnet50: SLURM_PROCID is not set: not inside an srun step?\n"


def test_train_script_without_pytorch_says_what_to_load(tmp_path):
    directory = install(tmp_path)
    broken = tmp_path / "no-torch"
    broken.mkdir()
    (broken / "torch.py").write_text("raise ImportError('no PyTorch in this environment')\n")
    env = dict(task_env(0, per_node=1, nodes=1), PATH=os.environ["PATH"], PYTHONPATH=str(broken))
    done = subprocess.run(
        [sys.executable, str(directory / "train_resnet50.py"), "--epochs", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        cwd="/",
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "train_resnet50: PyTorch is needed (no PyTorch in this environment): "
        "load the framework module or activate an environment that has it\n"
    )


TORCH_PYTHON = os.environ.get("HAL_TORCH_PYTHON")  # a python3 with PyTorch (CPU build is enough)


@pytest.mark.skipif(not TORCH_PYTHON, reason="HAL_TORCH_PYTHON (a python3 with PyTorch) is not set")
def test_two_cpu_ranks_train_and_the_recipe_checks_itself(tmp_path):
    """The recipe for real on this machine's CPUs: 2 ranks over gloo, a small network; every
    rank ends with the same parameters and the loss falls, as the RESULT line says."""
    directory, port = install(tmp_path), free_port()
    argv = [
        TORCH_PYTHON,
        str(directory / "train_resnet50.py"),
        "--arch",
        "resnet18",
        "--image-size",
        "32",
        "--batch-per-rank",
        "8",
        "--epochs",
        "1",
        "--steps-per-epoch",
        "16",
        "--warmup-steps-timing",
        "2",
    ]
    procs = [
        subprocess.Popen(
            argv,
            env=dict(
                task_env(rank, per_node=2, nodes=1, CUDA_VISIBLE_DEVICES=None, SLURM_STEP_GPUS=None),
                MASTER_ADDR="127.0.0.1",
                HAL_RECIPE_PORT=str(port),
                OMP_NUM_THREADS="1",
                PATH=os.environ["PATH"],
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd="/",
        )
        for rank in (0, 1)
    ]
    results = finish(procs)
    assert [rc for rc, _, _ in results] == [0, 0], results
    result = scaling.parse_result(results[0][1])
    assert (result["device"], result["ranks"], result["threads_per_rank"], result["steps"]) == ("cpu", 2, 1, 14)
    assert result["params_equal"] is True and result["loss_fell"] is True
    assert result["loss_last"] < result["loss_first"] / 2
    assert "RESULT" not in results[1][1]


# ---- scaling report -----------------------------------------------------------------------------


def sample_runs() -> list[scaling.Run]:
    runs, problems = scaling.load_runs(SAMPLES)
    assert problems == []
    return runs


def test_the_last_result_line_counts():
    text = 'log\nRESULT {"gpus": 1}\nmore log\nRESULT {"gpus": 2}\ntail\n'
    assert scaling.parse_result(text) == {"gpus": 2}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("epoch 0 step 50/50\nslurmstepd: error: *** JOB 7 CANCELLED ***\n", "gpux8-7.out: no RESULT line"),
        ("RESULT {not json\n", "gpux8-7.out: the RESULT line is not JSON"),
        ("RESULT [1, 2]\n", "gpux8-7.out: the RESULT line is not a JSON object"),
    ],
)
def test_an_output_without_a_result_names_its_file(text, message):
    with pytest.raises(scaling.ScalingError, match=message):
        scaling.parse_result(text, "gpux8-7.out")


def test_a_result_without_figures_names_its_file(tmp_path):
    (tmp_path / "gpux2-9.out").write_text('RESULT {"gpus": 2, "nodes": 1}\n')
    with pytest.raises(scaling.ScalingError, match="gpux2-9.out: the RESULT line lacks or garbles 'images_per_second'"):
        scaling.load_run(tmp_path / "gpux2-9.out")


def test_the_samples_load_with_their_partition_and_job():
    runs = sorted(sample_runs(), key=lambda r: r.gpus)
    assert [(r.partition, r.job_id, r.gpus, r.nodes, r.batch_per_gpu) for r in runs] == [
        ("gpux1", "101", 1, 1, 256),
        ("gpux2", "102", 2, 1, 256),
        ("gpux4", "103", 4, 1, 256),
        ("gpux8", "104", 8, 2, 256),
        ("gpux16", "105", 16, 4, 256),
    ]
    assert runs[3].images_per_second == 9523.2 and runs[3].per_gpu == pytest.approx(1190.4)


def test_efficiency_is_per_gpu_throughput_against_the_smallest_run():
    runs = [scaling.Run(8, 2, 9600.0, 256), scaling.Run(2, 1, 2500.0, 256), scaling.Run(4, 1, 4800.0, 256)]
    assert scaling.efficiency(runs) == pytest.approx([0.96, 1.0, 0.96])
    assert scaling.efficiency([]) == []


def test_the_table():
    assert scaling.render_table(sample_runs()) == (
        "GPUs  nodes  images/s  per GPU  scaling efficiency (%)\n"
        "   1      1    1280.0   1280.0                   100.0\n"
        "   2      1    2524.8   1262.4                    98.6\n"
        "   4      1    4966.4   1241.6                    97.0\n"
        "   8      2    9523.2   1190.4                    93.0\n"
        "  16      4   18636.8   1164.8                    91.0\n"
    )


def test_the_plot_is_a_png_matplotlib_reads_back(tmp_path):
    import matplotlib.image

    path = tmp_path / "scaling.png"
    scaling.plot(sample_runs(), path)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    pixels = matplotlib.image.imread(str(path))
    assert pixels.shape[0] > 300 and pixels.shape[1] > 500 and pixels.std() > 0.01  # not a blank canvas


def test_cpu_runs_scale_over_nodes():
    runs, problems = scaling.load_runs(SAMPLES / "cpu")
    assert problems == [] and {(r.device, r.gpus) for r in runs} == {("cpu", 0)}
    assert scaling.render_table(runs) == (
        "nodes  ranks  images/s  per node  scaling efficiency (%)\n"
        "    1      2      40.0      40.0                   100.0\n"
        "    2      4      78.4      39.2                    98.0\n"
        "    4      8     150.4      37.6                    94.0\n"
    )


def test_gpu_and_cpu_runs_are_not_mixed(tmp_path):
    shutil.copytree(SAMPLES, tmp_path / "results")
    shutil.copy(SAMPLES / "cpu" / "cpun2-202.out", tmp_path / "results")
    runs, problems = scaling.load_runs(tmp_path / "results")
    assert len(runs) == 5 and {r.device for r in runs} == {"cuda"}
    assert problems == [
        f"{tmp_path}/results/cpun2-202.out: a cpu run among cuda runs: give each kind its own directory"
    ]


def test_the_cpu_plot(tmp_path):
    runs, _ = scaling.load_runs(SAMPLES / "cpu")
    scaling.plot(runs, tmp_path / "cpu.png")
    assert (tmp_path / "cpu.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_needs_runs(tmp_path):
    with pytest.raises(scaling.ScalingError, match="no runs to plot"):
        scaling.plot([], tmp_path / "x.png")


def run_scaling(*args, env=None, cwd="/"):
    return subprocess.run(
        [sys.executable, *map(str, args)], capture_output=True, text=True, timeout=120, env=env, cwd=cwd
    )


def test_report_prints_the_table_and_writes_the_plot(tmp_path):
    directory = install(tmp_path)
    out = tmp_path / "results"
    shutil.copytree(SAMPLES, out)
    done = run_scaling(directory / "scaling.py", "report", out)
    assert done.returncode == 0, done.stderr
    assert done.stdout == scaling.render_table(sample_runs()) + f"scaling: plot written to {out}/scaling.png\n"
    assert (out / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_names_a_failed_job_and_shows_the_others(tmp_path):
    out = tmp_path / "results"
    shutil.copytree(SAMPLES, out)
    (out / "gpux32-106.out").write_text("srun: error: hal09: task 3: Exited with exit code 1\n")
    done = run_scaling(PACKAGE / "scaling.py", "report", out, "--no-plot")
    assert done.returncode == 1
    assert done.stdout == scaling.render_table(sample_runs())
    assert (
        done.stderr == f"scaling: {out}/gpux32-106.out: no RESULT line (did the job fail? its output is in that file)\n"
    )


def test_submit_dry_run_prints_the_jobs(tmp_path):
    out = tmp_path / "never-made"
    done = run_scaling(
        PACKAGE / "scaling.py",
        "submit",
        "--script",
        "/opt/hal/recipes/resnet50/resnet50.swbatch",
        "--partitions",
        "gpux1,gpux16",
        "--out",
        out,
        "--steps",
        "30",
        "--dry-run",
    )
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout == "".join(
        f"scaling: swbatch -p {p} --output={out}/{p}-%j.out --wait /opt/hal/recipes/resnet50/resnet50.swbatch "
        "--data synthetic --steps-per-epoch 30 --epochs 1\n"
        for p in ("gpux1", "gpux16")
    )
    assert not out.exists()


def test_submit_passes_the_recipes_options_on(tmp_path):
    out = tmp_path / "never-made"
    done = run_scaling(
        PACKAGE / "scaling.py",
        "submit",
        "--script",
        "job.swbatch",
        "--partitions",
        "cpun1,cpun2",
        "--out",
        out,
        "--steps",
        "30",
        "--dry-run",
        "--",
        "--arch",
        "resnet18",
        "--image-size",
        "64",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "".join(
        f"scaling: swbatch -p {p} --output={out}/{p}-%j.out --wait job.swbatch --data synthetic --steps-per-epoch 30 "
        "--epochs 1 --arch resnet18 --image-size 64\n"
        for p in ("cpun1", "cpun2")
    )


FAKE_SWBATCH = '''#!{python}
"""Stands in for swbatch --wait: writes the sample output of the partition's job, or fails."""
import shutil, sys
from pathlib import Path
args = sys.argv[1:]
with open("{log}", "a") as log:
    log.write(" ".join(args) + "\\n")
partition = args[args.index("-p") + 1]
output = next(a for a in args if a.startswith("--output=")).split("=", 1)[1]
sample = next(Path("{samples}").glob(partition + "-*.out"), None)
if sample is None:
    Path(output.replace("%j", "999")).write_text("srun: error: task 0: Exited with exit code 1\\n")
    sys.exit(1)
shutil.copy(sample, output.replace("%j", sample.stem.split("-")[1]))
'''


def test_submit_runs_each_job_in_turn_then_reports(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "swbatch.log"
    fake = bin_dir / "swbatch"
    fake.write_text(FAKE_SWBATCH.format(python=sys.executable, log=log, samples=SAMPLES))
    fake.chmod(0o755)
    out = tmp_path / "results"
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = run_scaling(
        PACKAGE / "scaling.py",
        "submit",
        "--script",
        "job.swbatch",
        "--partitions",
        "gpux1,gpux2,gpux4,gpux32",
        "--out",
        out,
        "--steps",
        "20",
        env=env,
    )
    assert log.read_text().splitlines() == [
        f"-p {p} --output={out}/{p}-%j.out --wait job.swbatch --data synthetic --steps-per-epoch 20 --epochs 1"
        for p in ("gpux1", "gpux2", "gpux4", "gpux32")
    ]
    assert done.returncode == 1  # the gpux32 job failed; the others are reported
    assert "scaling: the gpux32 job failed (exit status 1); going on\n" in done.stderr
    assert f"scaling: {out}/gpux32-999.out: no RESULT line" in done.stderr
    table = done.stdout.split("GPUs  nodes", 1)[1].splitlines()
    assert [row.split()[0] for row in table[1:4]] == ["1", "2", "4"]
    assert (out / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_staged_probe_copies_once_per_node_and_every_rank_reads_the_copy(tmp_path):
    """--data --stage: each "node" (its own TMPDIR) copies once, every rank reads the whole copy
    and says which mount it lies on; rank 0's OK line carries the copy."""
    directory, dev, port = install(tmp_path), fake_gpus(tmp_path, range(4)), free_port()
    data = tmp_path / "shared" / "ds"
    for k in range(5):
        (data / f"class{k % 2}").mkdir(parents=True, exist_ok=True)
        (data / f"class{k % 2}" / f"img{k}.JPEG").write_bytes(bytes([k]) * (1000 + k))
    tmp = {0: tmp_path / "node1-tmp", 1: tmp_path / "node2-tmp"}
    for d in tmp.values():
        d.mkdir()

    def start(rank: int) -> subprocess.Popen:
        env = probe_env(rank, port, dev, TMPDIR=str(tmp[rank // 2]))
        return subprocess.Popen(
            [
                sys.executable,
                str(directory / "wiring_probe.py"),
                "--timeout",
                "20",
                "--bind",
                "127.0.0.1",
                "--data",
                str(data),
                "--stage",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd="/",
        )

    others = [start(r) for r in (1, 2, 3)]
    results = finish([start(0)] + others)
    assert [rc for rc, _, _ in results] == [0, 0, 0, 0], results
    head, body = results[0][1].splitlines()
    assert head.startswith(f"WIRING OK world=4 nodes=2 per_node=2 master=127.0.0.1:{port} staged=5 files 5010 bytes ")
    records = json.loads(body.removeprefix("WIRING "))["records"]
    for r in records:
        d = r["data"]
        assert d["path"] == str(tmp[r["rank"] // 2] / "hal-stage" / "ds") and d["read_bytes"] == d["bytes"] == 5010
        assert d["mount_point"] == wiring_probe.mount_of(str(tmp_path))["mount_point"] and d["mount_source"] != "?"
    assert sorted(r["data"]["copied"] for r in records) == [False, False, True, True]  # one copy per node


def test_a_rank_that_read_less_than_the_copy_is_a_problem():
    records = world()
    for r in records:
        r["data"] = {"files": 2, "bytes": 10, "read_bytes": 10, "stage_seconds": 0.5}
    records[3]["data"] = dict(records[3]["data"], read_bytes=4)
    assert wiring_probe.check(records) == ["rank 3 (hal01): read 4 of the 10 staged bytes"]


def test_mount_of_takes_the_longest_mount_point_and_unescapes_it(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text(
        "22 1 8:1 / / rw - ext4 /dev/vda1 rw\n"
        "40 22 7:0 / /local rw - ext4 /var/lib/hal-sandbox/nvme0n1 rw\n"
        "41 40 7:0 /jobs/77/.77 /tmp rw - ext4 /var/lib/hal-sandbox/nvme0n1 rw\n"
        "42 22 0:5 / /with\\040space rw - tmpfs none rw\n"
    )
    assert wiring_probe.mount_of("/tmp/hal-stage/ds", str(info)) == {
        "mount_point": "/tmp",
        "mount_root": "/jobs/77/.77",
        "mount_source": "/var/lib/hal-sandbox/nvme0n1",
    }
    assert wiring_probe.mount_of("/with space/x", str(info))["mount_point"] == "/with space"
    assert wiring_probe.mount_of("/etc", str(info))["mount_source"] == "/dev/vda1"


def test_threads_on_the_command_line_win_over_the_job_scripts(monkeypatch):
    args = train_resnet50.parse_args(["--threads", "1"], environ={})
    assert args.threads == 1
    with pytest.raises(SystemExit):
        train_resnet50.parse_args(["--threads", "0"], environ={})
    assert train_resnet50.cpu_threads({"OMP_NUM_THREADS": "1", "SLURM_CPUS_PER_TASK": "80"}) == 1
