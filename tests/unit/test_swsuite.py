"""Slurm Wrapper Suite: translation of every HAL virtual partition, errors, and the CLIs."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest

from hal_provision.loader import load
from hal_provision.render.swsuite import table as vp_table
from hal_provision.node.swsuite.cli import script_directives, swbatch, swrun
from hal_provision.node.swsuite.translate import Request, SwError, parse_time, resolve

PUBLISHED = (
    "srun --partition=gpu --time=24:00:00 --nodes=1 --ntasks-per-node=160 "
    "--sockets-per-node=2 --cores-per-socket=20 --threads-per-core=4 "
    "--mem-per-cpu=1200 --wait=0 --export=ALL --gres=gpu:v100:4 --pty /bin/bash"
)


@pytest.fixture(scope="module")
def hal_table():
    return vp_table(load().model)


@pytest.fixture
def table_file(tmp_path, hal_table, monkeypatch):
    path = tmp_path / "vp.json"
    path.write_text(json.dumps(hal_table))
    monkeypatch.setenv("SWSUITE_TABLE", str(path))
    return path


def _opts(args):
    return dict(a[2:].split("=", 1) for a in args if a.startswith("--") and "=" in a)


def test_published_example_reproduced(table_file, capsys):
    assert swrun(["-p", "gpux4", "-c", "40", "-t", "24", "--dry-run"]) == 0
    ours = shlex.split(capsys.readouterr().out)
    published = shlex.split(PUBLISHED)
    assert ours[0] == published[0] == "srun"
    # Same flags, order aside; the shell comes last in both.
    assert sorted(ours[1:-2]) == sorted(published[1:-2])
    assert ours[-2:] == published[-2:] == ["--pty", "/bin/bash"]


# virtual partition -> nodes, tasks per node, sockets, cores per socket, gres
HAL_TABLE = [
    ("gpux1", 1, 40, 1, 10, "gpu:v100:1"),
    ("gpux2", 1, 80, 1, 20, "gpu:v100:2"),
    ("gpux3", 1, 120, 2, 15, "gpu:v100:3"),
    ("gpux4", 1, 160, 2, 20, "gpu:v100:4"),
    ("gpux8", 2, 160, 2, 20, "gpu:v100:4"),
    ("gpux12", 3, 160, 2, 20, "gpu:v100:4"),
    ("gpux16", 4, 160, 2, 20, "gpu:v100:4"),
    ("cpun1", 1, 160, 2, 20, None),
    ("cpun2", 2, 160, 2, 20, None),
    ("cpun4", 4, 160, 2, 20, None),
]


@pytest.mark.parametrize("vp,nodes,tasks,sockets,cps,gres", HAL_TABLE)
def test_every_hal_virtual_partition(hal_table, vp, nodes, tasks, sockets, cps, gres):
    o = _opts(resolve(hal_table, Request(vp)))
    assert o["partition"] == "gpu"
    assert int(o["nodes"]) == nodes
    assert int(o["ntasks-per-node"]) == tasks
    assert int(o["sockets-per-node"]) == sockets
    assert int(o["cores-per-socket"]) == cps
    assert o["threads-per-core"] == "4"
    assert o["mem-per-cpu"] == "1200"
    assert o.get("gres") == gres
    assert o["time"] == "01:00:00"  # the default time
    assert tasks * 1200 <= 253952  # fits the rendered RealMemory


def test_every_hal_virtual_partition_is_in_the_table(hal_table):
    assert sorted(hal_table["virtual_partitions"]) == sorted(row[0] for row in HAL_TABLE)


def test_smaller_cpu_share_and_passthrough(hal_table):
    args = resolve(hal_table, Request("gpux2", cpus_per_gpu=8, time="0:30", slurm_args=["--account=proj", "--mem-per-cpu=2000"]))
    o = _opts(args)
    assert o["ntasks-per-node"] == "16" and o["cores-per-socket"] == "4" and o["time"] == "00:30:00"
    # user options come after ours, so Slurm takes theirs
    assert args[-2:] == ["--account=proj", "--mem-per-cpu=2000"]


@pytest.mark.parametrize(
    "text,minutes",
    [("24", 1440), ("1.5", 90), ("2:30", 150), ("1:00:30", 61), ("1-12:00:00", 2160)],
)
def test_time_forms(text, minutes):
    assert parse_time(text) == minutes


@pytest.mark.parametrize(
    "request_,message",
    [
        (Request("gpux5"), "unknown virtual partition 'gpux5'; valid: cpun1, cpun2, cpun4, gpux1"),
        (Request("gpux1", time="soon"), "use HOURS (e.g. 24 or 1.5), H:MM, H:MM:SS or D-HH:MM:SS"),
        (Request("gpux1", time="1:75"), "cannot read the time '1:75'"),
        (Request("gpux1", time="0"), "is zero"),
        (Request("gpux1", time="25"), "allows at most 24 hours; asked 25:00:00"),
        (Request("gpux1", cpus_per_gpu=41), "must be 1..40"),
        (Request("gpux1", cpus_per_gpu=6), "multiple of 4"),
        (Request("cpun1", cpus_per_gpu=4), "has no GPUs"),
    ],
)
def test_errors_say_why(hal_table, request_, message):
    with pytest.raises(SwError) as exc:
        resolve(hal_table, request_)
    assert message in str(exc.value)


def test_requests_the_cluster_cannot_satisfy(hal_table):
    t = json.loads(json.dumps(hal_table))
    t["virtual_partitions"]["gpux6"] = dict(t["virtual_partitions"]["gpux8"], gpus=6)
    with pytest.raises(SwError, match="span nodes only as whole nodes of 4 GPUs"):
        resolve(t, Request("gpux6"))
    t["virtual_partitions"]["gpux64"] = dict(t["virtual_partitions"]["gpux8"], gpus=80)
    with pytest.raises(SwError, match="needs 20 nodes; partition gpu has 16"):
        resolve(t, Request("gpux64"))
    t["virtual_partitions"]["fat"] = dict(t["virtual_partitions"]["cpun1"], mem_per_cpu_mib=4000)
    with pytest.raises(SwError, match="exceed a node's 253952 MiB"):
        resolve(t, Request("fat"))


def test_swrun_command_and_errors(table_file, capsys):
    assert swrun(["-p", "gpux1", "--dry-run", "nvidia-smi", "-L"]) == 0
    out = capsys.readouterr().out.split()
    assert out[-2:] == ["nvidia-smi", "-L"] and "--pty" not in out
    # a command runs once per node, with the same CPUs as the interactive shape
    assert "--ntasks-per-node=1" in out and "--cpus-per-task=40" in out
    # ...and says how many tasks: srun would otherwise derive 40 from sockets x cores x threads
    assert "--ntasks=1" in out
    assert swrun(["-p", "gpux8", "--dry-run", "hostname"]) == 0
    out = capsys.readouterr().out.split()
    assert {"--nodes=2", "--ntasks-per-node=1", "--ntasks=2", "--cpus-per-task=160"} <= set(out)
    assert swrun(["-p", "nope", "--dry-run"]) == 2
    assert "valid: cpun1" in capsys.readouterr().err
    assert swrun(["--dry-run"]) == 2
    assert "-p" in capsys.readouterr().err


def test_swbatch_reads_directives_and_cli_wins(table_file, tmp_path, capsys):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SWBATCH -p gpux2 -t 2\n#SWBATCH --job-name=train\necho hi\n#SWBATCH -p gpux4\n")
    assert script_directives(script) == ["-p", "gpux2", "-t", "2", "--job-name=train"]
    assert swbatch(["--dry-run", str(script)]) == 0
    o = _opts(shlex.split(capsys.readouterr().out))
    assert o["gres"] == "gpu:v100:2" and o["time"] == "02:00:00" and o["job-name"] == "train"
    assert swbatch(["-p", "gpux1", "--dry-run", str(script), "arg1"]) == 0
    words = shlex.split(capsys.readouterr().out)
    assert words[0] == "sbatch" and words[-2:] == [str(script), "arg1"]
    assert _opts(words)["gres"] == "gpu:v100:1" and _opts(words)["time"] == "02:00:00"
    # Without -p (the partition comes from #SWBATCH) the command line's options still count:
    # a time, and plain Slurm options, after the script's so that they win.
    assert swbatch(["--dry-run", "-t", "1", "--wait", "--output=/tmp/o", "--job-name=cli", str(script)]) == 0
    words = shlex.split(capsys.readouterr().out)
    assert {"--wait", "--output=/tmp/o", "--time=01:00:00", "--gres=gpu:v100:2"} <= set(words)
    assert words.index("--job-name=train") < words.index("--job-name=cli") < words.index(str(script))
    bare = tmp_path / "bare.sh"
    bare.write_text("#!/bin/bash\necho hi\n")
    assert swbatch(["--dry-run", str(bare)]) == 2
    assert "#SWBATCH -p" in capsys.readouterr().err


def test_console_scripts_help_lists_the_table(table_file):
    out = subprocess.run([sys.executable, "-c", "from hal_provision.node.swsuite.cli import swrun; raise SystemExit(swrun(['--help']))"],
                         capture_output=True, text=True, check=True).stdout
    assert "gpux4        4      1        160" in out
    assert "swrun -p gpux4 -c 40 -t 24" in out


def test_swsuite_runs_without_third_party_packages():
    """Login nodes run it with the system python3: only the standard library is allowed."""
    code = (
        "import sys, builtins\n"
        "real = builtins.__import__\n"
        "def guard(name, *a, **k):\n"
        "    if name.split('.')[0] in ('pydantic', 'typer', 'rich', 'ClusterShell', 'ruamel'):\n"
        "        raise ImportError(name)\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = guard\n"
        "import hal_provision.node.swsuite.cli, hal_provision.node.swsuite.translate, hal_provision.node.swsuite.queue\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
