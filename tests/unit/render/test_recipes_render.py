"""Training recipes: the checks (one row per mistake, as an edit of the embedded HAL
description), the rendered job script, NCCL settings and benchmark script, and the facts the
recipes role reads. The programs themselves are tested in test_recipes.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from hal_provision.findings import Level
from hal_provision.loader import load_text
from hal_provision.model import PartitionBuild
from hal_provision.model.hardware import HardwareProfile
from hal_provision.model.recipes import CpuLayout, cpu_layout, cpu_layouts, cpu_scaling_partitions, scaling_partitions
from hal_provision.model.slurm import SwSuite, VirtualPartition
from hal_provision.node.recipes import scaling as scaling_module
from hal_provision.render import recipes
from hal_provision.node.swsuite.cli import script_directives

E, W = Level.error, Level.warning
VP = "  virtual_partition: gpux4 "
SCALING = "  scaling_partitions: [gpux1, gpux2, gpux4, gpux8, gpux16]"
MODULE = "  framework_module: wmlce/1.7.0-py3.7 "
DIR = "files/opt/hal/recipes/resnet50"

ROWS = [
    (
        "unknown-virtual-partition",
        [(VP, "  virtual_partition: gpux5 ")],
        E,
        "recipes.virtual_partition",
        "virtual partition 'gpux5' is not in swsuite.virtual_partitions",
    ),
    (
        "cpu-virtual-partition",
        [(VP, "  virtual_partition: cpun2 ")],
        E,
        "recipes.virtual_partition",
        "virtual partition 'cpun2' has no GPUs",
    ),
    (
        "unknown-scaling-partition",
        [(SCALING, "  scaling_partitions: [gpux1, gpux2, gpux4, gpux8, gpux32]")],
        E,
        "recipes.scaling_partitions[4]",
        "virtual partition 'gpux32' is not in swsuite.virtual_partitions",
    ),
    (
        "scaling-partition-twice",
        [(SCALING, "  scaling_partitions: [gpux1, gpux2, gpux2, gpux8, gpux16]")],
        E,
        "recipes.scaling_partitions[2]",
        "'gpux2' is listed twice (first at [1])",
    ),
    (
        "scaling-out-of-order",
        [(SCALING, "  scaling_partitions: [gpux1, gpux4, gpux2, gpux8, gpux16]")],
        E,
        "recipes.scaling_partitions",
        "from the fewest GPUs to the most (GPUs: [1, 4, 2, 8, 16])",
    ),
    (
        "unknown-framework-module",
        [(MODULE, "  framework_module: pytorch/2.5 ")],
        E,
        "recipes.framework_module",
        "module 'pytorch/2.5' is not in software.modules",
    ),
    (
        "framework-module-not-on-compute",
        [
            (MODULE, "  framework_module: jupyter/2026.11 "),
            ("      roles: [login, development, compute]", "      roles: [login]"),
        ],
        E,
        "recipes.framework_module",
        "is not visible on compute nodes",
    ),
    (
        "unknown-cpu-framework-module",
        [("  cpu_framework_module: pytorch/2.13.0-cpu ", "  cpu_framework_module: pytorch/2.13 ")],
        E,
        "recipes.cpu_framework_module",
        "module 'pytorch/2.13' is not in software.modules; did you mean 'pytorch/2.13.0-cpu'?",
    ),
    (
        "nccl-hca-without-fabric",
        [
            lambda t: t[: t.index("\nfabric:\n")] + t[t.index("\nhardware:\n") :],
            lambda t: t.replace(", infiniband", ""),
            ("  batch_per_gpu: 256 ", "  nccl_ib_hca: [mlx5_0:1]\n  batch_per_gpu: 256 "),
        ],
        W,
        "recipes.nccl_ib_hca",
        "the description has no fabric",
    ),
]


@pytest.mark.parametrize(("mutation", "level", "path", "message"), [pytest.param(*r[1:], id=r[0]) for r in ROWS])
def test_mistake_is_found(finds, mutation, level, path, message):
    finds(mutation, level, path, message)


@pytest.mark.parametrize(
    ("old", "new", "dotted"),
    [
        pytest.param("  batch_per_gpu: 256 ", "  batch_per_gpu: 0 ", "recipes.batch_per_gpu", id="batch-zero"),
        pytest.param(
            "  batch_per_gpu: 256 ",
            "  nccl_ib_hca: [mlx5_0]\n  batch_per_gpu: 256 ",
            "recipes.nccl_ib_hca[0]",
            id="hca-without-port",
        ),
        pytest.param(
            "  prefix: /opt/hal/recipes ", "  prefix: opt/hal/recipes ", "recipes.prefix", id="relative-prefix"
        ),
    ],
)
def test_structural_mistakes_are_refused_by_render(render_rejects, hal_text, old, new, dotted):
    assert old in hal_text
    render_rejects(hal_text.replace(old, new), dotted)


def test_scaling_partitions_default_to_the_power_of_two_gpu_partitions(hal_text):
    model = load_text(hal_text.replace(SCALING + "   #", "  #"), "hal.yml").model
    assert model.recipes.scaling_partitions == []
    assert scaling_partitions(model.recipes, model.swsuite) == ["gpux1", "gpux2", "gpux4", "gpux8", "gpux16"]


def test_job_script_launches_one_task_per_gpu_from_the_model(files):
    script = files[f"{DIR}/resnet50.swbatch"]
    assert "\n#SWBATCH -p gpux4\n#SWBATCH -t 1\n#SBATCH --job-name=resnet50\n" in script
    # swbatch reads the directives as a user's script has them
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "job").write_text(script)
        assert script_directives(Path(tmp) / "job") == ["-p", "gpux4", "-t", "1"]
    assert '--ntasks-per-node="$gpus_per_node"' in script and "--wiring-probe" in script
    assert "--ntasks=$(( SLURM_JOB_NUM_NODES * gpus_per_node ))" in script
    for name in ("resnet50.swbatch", "scaling.sh"):
        subprocess.run(["bash", "-n"], input=files[f"{DIR}/{name}"], text=True, check=True)
    assert "--data ~/datasets/NAME --stage " in script


def test_hal_stage_runs_the_program_beside_it(files, tmp_path):
    """The rendered command runs hal_stage.py from the recipe directory with the node's python3;
    here, with the recipe directory made in a temporary directory, it stages a tree."""
    script = files[f"{DIR}/hal-stage.sh"]
    assert script.startswith("#!/bin/sh\n") and script.endswith(
        'exec python3 /opt/hal/recipes/resnet50/hal_stage.py "$@"\n'
    )
    subprocess.run(["sh", "-n"], input=script, text=True, check=True)
    from hal_provision.node.recipes import hal_stage

    command = tmp_path / "hal-stage.sh"
    command.write_text(script.replace("/opt/hal/recipes/resnet50/hal_stage.py", hal_stage.__file__))
    (tmp_path / "ds" / "c").mkdir(parents=True)
    (tmp_path / "ds" / "c" / "a.JPEG").write_bytes(b"x" * 10)
    done = subprocess.run(
        ["sh", str(command), "--print-path", str(tmp_path / "ds")],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path / "job-tmp")},
        check=True,
    )
    assert done.stdout == f"{tmp_path}/job-tmp/hal-stage/ds\n"


def test_nccl_settings_follow_the_fabric(files, hal_text):
    assert "export NCCL_IB_HCA=mlx5_0:1\nexport NCCL_IB_DISABLE=0\n" in files[f"{DIR}/recipe.env"]
    assert "module load wmlce/1.7.0-py3.7\n" in files[f"{DIR}/recipe.env"]
    text = hal_text[: hal_text.index("\nfabric:\n")] + hal_text[hal_text.index("\nhardware:\n") :]
    model = load_text(text.replace(", infiniband", ""), "hal.yml").model
    env = recipes.recipe_env(model)
    assert "export NCCL_IB_DISABLE=1\n" in env and "NCCL_IB_HCA" not in env
    subprocess.run(["bash", "-n"], input=env, text=True, check=True)


def test_benchmark_runs_the_model_partitions(files):
    assert "\npartitions=gpux1,gpux2,gpux4,gpux8,gpux16 " in files[f"{DIR}/scaling.sh"]
    facts = json.loads(files[recipes.FACTS])
    assert facts["recipes"]["resnet50"] == {
        "commands": [{"name": "hal-stage", "script": "hal-stage.sh"}],
        "dir": "/opt/hal/recipes/resnet50",
        "programs": list(recipes.PROGRAMS),
        "rendered": ["hal-stage.sh", "recipe.env", "resnet50.swbatch", "scaling.sh"],
        "scaling_partitions": ["gpux1", "gpux2", "gpux4", "gpux8", "gpux16"],
        "cpu_scaling_partitions": ["cpun1", "cpun2", "cpun4"],
        "virtual_partition": "gpux4",
    }


def test_no_recipes_section_renders_nothing(hal):
    assert recipes.render(hal.model_copy(update={"recipes": None})) == {}


# ---- CPU jobs: the layout from the model, the job script's CPU branch, the CPU benchmark -------------


def test_the_pinning_derived_from_the_model(hal):
    """HAL's AC922: 2 sockets x 20 cores x SMT4 -> 2 tasks per node, 80 CPUs and 20 threads each;
    cpun1, cpun2 and cpun4 all send jobs to partition gpu, so one layout."""
    assert cpu_layouts(hal) == [CpuLayout("gpu", "ac922", tasks_per_node=2, cpus_per_task=80, threads=20, profiles=1)]
    assert cpu_scaling_partitions(hal.swsuite) == ["cpun1", "cpun2", "cpun4"]


def test_a_partition_of_several_builds_takes_the_smallest():
    def profile(sockets, cores, threads):
        return HardwareProfile(
            model="m",
            architecture="x86_64",
            sockets=sockets,
            cores_per_socket=cores,
            threads_per_core=threads,
            memory_gib=256,
        )

    builds = {
        "mixed": [PartitionBuild("big", profile(2, 32, 2), 8), PartitionBuild("old", profile(2, 20, 1), 4)],
        "empty": [],
    }
    vps = [
        VirtualPartition(name=n, kind="cpu", partition=p, nodes=k, mem_per_cpu_mib=1000, max_time_hours=1)
        for n, p, k in (("cpun1", "mixed", 1), ("cpun2", "mixed", 2), ("idle1", "empty", 1))
    ]
    vps.append(
        VirtualPartition(name="gpux1", kind="gpu", partition="gpu", gpus=1, mem_per_cpu_mib=1000, max_time_hours=1)
    )
    cluster = SimpleNamespace(swsuite=SwSuite(virtual_partitions=vps), partition_hardware=lambda p: builds.get(p, []))
    assert cpu_layouts(cluster) == [CpuLayout("mixed", "old", 2, 20, 20, profiles=2)]
    assert cpu_layout("p", "ac922", profile(2, 20, 4)) == CpuLayout("p", "ac922", 2, 80, 20, 1)


def run_job_script(files, tmp_path, **env) -> subprocess.CompletedProcess:
    """The rendered job script with srun replaced by a stand-in that prints its options and the
    threading variables it was given."""
    d = tmp_path / "recipe"
    d.mkdir()
    (d / "recipe.env").write_text("")
    script = d / "resnet50.swbatch"
    script.write_text(
        files[f"{DIR}/resnet50.swbatch"].replace("recipe_dir=/opt/hal/recipes/resnet50", f"recipe_dir={d}")
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(
        '#!/bin/sh\necho "srun $*"\n'
        'echo "env $HAL_RECIPE_DEVICE $OMP_NUM_THREADS $MKL_NUM_THREADS $OMP_PROC_BIND '
        '$OMP_PLACES"\n'
    )
    (bin_dir / "srun").chmod(0o755)
    base = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_NODELIST": "hal[01-02]",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_CPUS_ON_NODE": "160",
    }
    return subprocess.run(
        ["bash", str(script), "--data", "synthetic", "--arch", "resnet18"],
        capture_output=True,
        text=True,
        env={**base, **env},
        timeout=30,
    )


def test_a_job_without_gpus_runs_a_task_per_socket_pinned(files, tmp_path):
    done = run_job_script(files, tmp_path, SLURM_JOB_PARTITION="gpu")
    assert done.returncode == 0, done.stderr
    program = tmp_path / "recipe" / "train_resnet50.py"
    assert done.stdout == (
        "srun --nodes=2 --ntasks=4 --ntasks-per-node=2 --cpus-per-task=80 --cpu-bind=sockets --kill-on-bad-exit=1 "
        f"--export=ALL python3 {program} --data synthetic --arch resnet18\n"
        "env cpu 20 20 close cores\n"
    )
    assert done.stderr == (
        "resnet50: job 7 on hal[01-02]: 2 node(s) x 2 task(s) on CPUs, 80 CPUs and 20 threads "
        "per task, train_resnet50.py\n"
    )


def test_a_job_with_gpus_runs_as_before(files, tmp_path):
    done = run_job_script(files, tmp_path, SLURM_JOB_PARTITION="gpu", SLURM_GPUS_ON_NODE="4")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(
        "srun --nodes=2 --ntasks=8 --ntasks-per-node=4 --cpus-per-task=40 --kill-on-bad-exit=1 --export=ALL python3 "
    )
    assert "env  " in done.stdout  # no CPU settings


def test_a_job_without_gpus_on_a_partition_without_a_layout_is_refused(files, tmp_path):
    done = run_job_script(files, tmp_path, SLURM_JOB_PARTITION="debug")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "resnet50: no GPUs in this job, and partition debug has no CPU layout: submit with swbatch -p gpuxN or cpunN\n"
    )


def test_without_cpu_virtual_partitions_the_job_script_needs_gpus(hal):
    vps = [vp for vp in hal.swsuite.virtual_partitions if vp.kind == "gpu"]
    model = hal.model_copy(update={"swsuite": SwSuite(virtual_partitions=vps)})
    script = recipes.job_script(model)
    assert 'gpus_per_node=${SLURM_GPUS_ON_NODE:?"no GPUs in this job: submit with swbatch -p gpuxN"}\n' in script
    assert "cpu" not in script.lower().replace("cpus_per_task", "").replace("cpus per task", "").replace(
        "slurm_cpus_on_node", ""
    ).replace("--cpus-per-task", "")
    assert "--cpu" not in recipes.scaling_script(model)


def test_the_benchmark_on_cpus_runs_the_cpu_partitions(files, tmp_path):
    """scaling.sh --cpu OUT STEPS RECIPE-OPTIONS: one swbatch per cpu virtual partition, the recipe's
    options passed on (here swbatch is a stand-in that logs and fails, so no table)."""
    d = tmp_path / "recipe"
    d.mkdir()
    (d / "recipe.env").write_text("")
    shutil.copy(Path(scaling_module.__file__), d / "scaling.py")
    script = d / "scaling.sh"
    script.write_text(files[f"{DIR}/scaling.sh"].replace("recipe_dir=/opt/hal/recipes/resnet50", f"recipe_dir={d}"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "swbatch.log"
    (bin_dir / "swbatch").write_text(f'#!/bin/sh\necho "$*" >> {log}\nexit 1\n')
    (bin_dir / "swbatch").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    out = tmp_path / "cpu"
    subprocess.run(
        ["bash", str(script), "--cpu", str(out), "30", "--arch", "resnet18", "--image-size", "64"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert log.read_text().splitlines() == [
        f"-p {p} --output={out}/{p}-%j.out --wait {d}/resnet50.swbatch --data synthetic --steps-per-epoch 30 "
        "--epochs 1 --arch resnet18 --image-size 64"
        for p in ("cpun1", "cpun2", "cpun4")
    ]
    log.unlink()
    subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env, timeout=60)
    assert [line.split()[1] for line in log.read_text().splitlines()] == ["gpux1", "gpux2", "gpux4", "gpux8", "gpux16"]
    assert f"--output={tmp_path}/resnet50-scaling/gpux1-%j.out" in log.read_text()


def test_recipes_list_says_how_jobs_run_on_cpus():
    from typer.testing import CliRunner

    from hal_provision.cli.main import app

    done = CliRunner().invoke(app, ["recipes", "list"])
    assert done.exit_code == 0, done.output
    lines = [" ".join(line.split()) for line in done.output.splitlines()]
    assert "on CPUs partition gpu (ac922): 2 tasks per node (one per socket), 80 CPUs and 20 threads each" in lines
    assert (
        "benchmark on CPUs /opt/hal/recipes/resnet50/scaling.sh --cpu [OUTDIR [STEPS [OPTIONS]]]: cpun1 (1), "
        "cpun2 (2), cpun4 (4) nodes"
    ) in lines


def test_a_cluster_without_gpu_partitions_runs_the_recipe_on_cpu_ones(hal_text):
    """A CPU-only site: no GPU virtual partition, the recipe's default and benchmark on the cpu
    ones (ordered by nodes), and no recipe finding."""
    from hal_provision.checks import run_all
    from hal_provision.loader import load_text
    from hal_provision.model.recipes import scaling_partitions

    text = "\n".join(line for line in hal_text.splitlines() if "kind: gpu," not in line) + "\n"
    text = text.replace(VP, "  virtual_partition: cpun1 ").replace(SCALING, "  scaling_partitions: []")
    loaded = load_text(text, "c.yml")
    assert loaded.model is not None, [f.format() for f in loaded.findings]
    assert [f.format() for f in run_all(loaded.model) if f.path[:1] == ("recipes",)] == []
    assert scaling_partitions(loaded.model.recipes, loaded.model.swsuite) == ["cpun1", "cpun2", "cpun4"]
    wrong = load_text(text.replace("  scaling_partitions: []", "  scaling_partitions: [cpun2, cpun1]"), "c.yml")
    assert any(
        "from the fewest nodes to the most (nodes: [2, 1])" in f.message
        for f in run_all(wrong.model)
        if f.path[:1] == ("recipes",)
    )
