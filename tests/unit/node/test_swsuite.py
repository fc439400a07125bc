"""Slurm Wrapper Suite: translation of every HAL virtual partition, errors, and the CLIs."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

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
    args = resolve(
        hal_table, Request("gpux2", cpus_per_gpu=8, time="0:30", slurm_args=["--account=proj", "--mem-per-cpu=2000"])
    )
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
    out = subprocess.run(
        [sys.executable, "-c", "from hal_provision.node.swsuite.cli import swrun; raise SystemExit(swrun(['--help']))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
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


# ---- the installed programs on a user's mistakes: one line naming the argument, exit 2 ------

ROOT = Path(__file__).resolve().parents[3]
ROLE = ROOT / "roles" / "swsuite"


@pytest.fixture(scope="module")
def installed(tmp_path_factory, hal_table):
    """The suite as the swsuite role installs it: its modules in LIB/swsuite/, the commands
    from the role's own launcher text (with this Python for the system python3), the table."""
    root = tmp_path_factory.mktemp("swsuite")
    lib, bin_dir = root / "lib", root / "bin"
    (lib / "swsuite").mkdir(parents=True)
    bin_dir.mkdir()
    role_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    for module in role_vars["__swsuite_modules"]:
        shutil.copy(ROOT / "hal_provision" / "node" / "swsuite" / module, lib / "swsuite" / module)
    tasks = yaml.safe_load((ROLE / "tasks" / "configure.yml").read_text())
    launcher = next(t for t in tasks if t["name"] == "Install the commands")["ansible.builtin.copy"]["content"]
    for command in role_vars["__swsuite_commands"]:
        text = (
            launcher.replace("{{ __swsuite_python }}", sys.executable)
            .replace("{{ swsuite_lib_dir | to_json }}", json.dumps(str(lib)))
            .replace("{{ item }}", command)
        )
        assert "{{" not in text, text
        (bin_dir / command).write_text(text)
        (bin_dir / command).chmod(0o755)
    table = root / "virtual-partitions.json"
    table.write_text(json.dumps(hal_table))
    return bin_dir, table


def run_installed(installed, command: str, *argv: str) -> subprocess.CompletedProcess:
    bin_dir, table = installed
    env = {"PATH": os.environ["PATH"], "SWSUITE_TABLE": str(table), "LANG": "C.UTF-8"}
    return subprocess.run(
        [str(bin_dir / command), *argv], capture_output=True, text=True, env=env, timeout=60, cwd=bin_dir.parent
    )


FORMS = "use HOURS (e.g. 24 or 1.5), H:MM, H:MM:SS or D-HH:MM:SS"
CUT = "'" + "9" * 36 + "..."  # a long argument, as a message shows it

# argv after the command -> the one line on stderr after "swrun: error: "
MISTAKES = [
    (["-t", "99999999999999999999"], "-t/--time: the time '99999999999999999999' is longer than Slurm can take"),
    (["-t", "9" * 400], f"-t/--time: the time {CUT} is longer than Slurm can take"),
    (["-t", "99999999999999999999:00"], "-t/--time: the time '99999999999999999999:00' is longer than Slurm can take"),
    (["-t", "9" * 5000 + ":00"], f"-t/--time: the time {CUT} is longer than Slurm can take"),
    (["-t", "2982617-00:00:00"], "-t/--time: the time '2982617-00:00:00' is longer than Slurm can take"),
    (["-t", "-5"], f"-t/--time: cannot read the time '-5': {FORMS}"),
    (["-t", "1e999"], f"-t/--time: cannot read the time '1e999': {FORMS}"),
    (["-t", "abc"], f"-t/--time: cannot read the time 'abc': {FORMS}"),
    (["-t", "NaN"], f"-t/--time: cannot read the time 'NaN': {FORMS}"),
    (["-t", "inf"], f"-t/--time: cannot read the time 'inf': {FORMS}"),
    (["-t", "\u0663"], f"-t/--time: cannot read the time '\u0663': {FORMS}"),
    (["--time="], f"-t/--time: cannot read the time '': {FORMS}"),
    (["-t", "0:00"], f"-t/--time: the time '0:00' is zero: {FORMS}"),
    (["-t"], "-t needs a value"),
    (["-c", "abc"], "-c/--cpus-per-gpu takes a whole number; got 'abc'"),
    (["-c", "-5"], "-c/--cpus-per-gpu takes a whole number; got '-5'"),
    (["-c", "1e999"], "-c/--cpus-per-gpu takes a whole number; got '1e999'"),
    (["-c", "9" * 5000], f"-c/--cpus-per-gpu takes a whole number; got {CUT}"),
    (["-c", "\u0663"], "-c/--cpus-per-gpu takes a whole number; got '\u0663'"),
    (["-c", "99999"], "-c/--cpus-per-gpu must be 1..40 (hardware threads per GPU on this node); got 99999"),
]


@pytest.mark.parametrize("argv, message", MISTAKES, ids=[" ".join(a)[:30] for a, _ in MISTAKES])
@pytest.mark.parametrize("command", ["swrun", "swbatch"])
def test_a_mistake_in_the_arguments_is_one_line_naming_it_and_exit_2(installed, tmp_path, command, argv, message):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\nhostname\n")
    tail = [str(script)] if command == "swbatch" else ["hostname"]
    proc = run_installed(installed, command, "-p", "gpux1", "--dry-run", *argv, *([] if argv == ["-t"] else tail))
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    assert proc.stderr == f"{command}: error: {message}\n"


def test_an_unknown_virtual_partition_is_one_line_however_long(installed):
    proc = run_installed(installed, "swrun", "-p", "x" * 100_000, "--dry-run")
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("swrun: error: unknown virtual partition '" + "x" * 36 + "...; valid: cpun1, cpun2")


@pytest.mark.parametrize(
    "line, why",
    [
        ('#SWBATCH -p gpux1 --job-name="unbalanced', "No closing quotation"),
        ("#SWBATCH -p gpux1 --comment='half", "No closing quotation"),
        ("#SWBATCH -p gpux1 \\", "No escaped character"),
    ],
)
def test_an_unbalanced_quote_in_a_swbatch_line_is_one_line_naming_it(installed, tmp_path, line, why):
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\n{line}\nhostname\n")
    proc = run_installed(installed, "swbatch", "--dry-run", str(script))
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"swbatch: error: {script}, line 2: cannot split the #SWBATCH line: {why}\n"


@pytest.mark.parametrize(
    "what, message",
    [
        ("missing", "cannot read {script}: No such file or directory"),
        ("directory", "cannot read {script}: Is a directory"),
        ("huge-time", "-t/--time: the time '99999999999999999999' is longer than Slurm can take"),
    ],
)
def test_swbatch_script_mistakes_are_one_line(installed, tmp_path, what, message):
    script = tmp_path / "job.sh"
    if what == "directory":
        script.mkdir()
    elif what == "huge-time":
        script.write_text("#!/bin/bash\n#SWBATCH -p gpux1 -t 99999999999999999999\nhostname\n")
    proc = run_installed(installed, "swbatch", "--dry-run", str(script))
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"swbatch: error: {message.format(script=script)}\n"


def test_a_quote_in_the_users_command_is_passed_on_unchanged(installed):
    """An unbalanced quote in an argument is the user's command's business: the shell has split
    the words already, and srun gets them as they are."""
    proc = run_installed(installed, "swrun", "-p", "gpux1", "--dry-run", "--job-name=it's", "bash", "-c", "echo 'hi")
    assert (proc.returncode, proc.stderr) == (0, "")
    words = shlex.split(proc.stdout)
    assert words[-3:] == ["bash", "-c", "echo 'hi"] and "--job-name=it's" in words[:-3]
