"""Training recipes: the checks (one row per mistake, as an edit of the embedded HAL
description), the rendered job script, NCCL settings and benchmark script, and the facts the
recipes role reads. The programs themselves are tested in test_recipes.py."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import pytest

from hal_provision.findings import Level
from hal_provision.loader import load_text
from hal_provision.model.recipes import scaling_partitions
from hal_provision.render import recipes
from hal_provision.node.swsuite.cli import script_directives

E, W = Level.error, Level.warning
VP = "  virtual_partition: gpux4 "
SCALING = "  scaling_partitions: [gpux1, gpux2, gpux4, gpux8, gpux16]"
MODULE = "  framework_module: wmlce/1.7.0-py3.7 "
DIR = "files/opt/hal/recipes/resnet50"

ROWS = [
    ("unknown-virtual-partition", [(VP, "  virtual_partition: gpux5 ")],
     E, "recipes.virtual_partition", "virtual partition 'gpux5' is not in swsuite.virtual_partitions"),
    ("cpu-virtual-partition", [(VP, "  virtual_partition: cpun2 ")],
     E, "recipes.virtual_partition", "virtual partition 'cpun2' has no GPUs"),
    ("unknown-scaling-partition", [(SCALING, "  scaling_partitions: [gpux1, gpux2, gpux4, gpux8, gpux32]")],
     E, "recipes.scaling_partitions[4]", "virtual partition 'gpux32' is not in swsuite.virtual_partitions"),
    ("scaling-partition-twice", [(SCALING, "  scaling_partitions: [gpux1, gpux2, gpux2, gpux8, gpux16]")],
     E, "recipes.scaling_partitions[2]", "'gpux2' is listed twice (first at [1])"),
    ("scaling-out-of-order", [(SCALING, "  scaling_partitions: [gpux1, gpux4, gpux2, gpux8, gpux16]")],
     E, "recipes.scaling_partitions", "from the fewest GPUs to the most (GPUs: [1, 4, 2, 8, 16])"),
    ("unknown-framework-module", [(MODULE, "  framework_module: pytorch/2.5 ")],
     E, "recipes.framework_module", "module 'pytorch/2.5' is not in software.modules"),
    ("framework-module-not-on-compute", [(MODULE, "  framework_module: jupyter/2026.11 "),
                                         ("      roles: [login, development, compute]", "      roles: [login]")],
     E, "recipes.framework_module", "is not visible on compute nodes"),
    ("unknown-cpu-framework-module", [("  cpu_framework_module: pytorch/2.13.0-cpu ", "  cpu_framework_module: pytorch/2.13 ")],
     E, "recipes.cpu_framework_module", "module 'pytorch/2.13' is not in software.modules; did you mean 'pytorch/2.13.0-cpu'?"),
    ("nccl-hca-without-fabric", [lambda t: t[: t.index("\nfabric:\n")] + t[t.index("\nhardware:\n"):],
                                 lambda t: t.replace(", infiniband", ""),
                                 ("  batch_per_gpu: 256 ", "  nccl_ib_hca: [mlx5_0:1]\n  batch_per_gpu: 256 ")],
     W, "recipes.nccl_ib_hca", "the description has no fabric"),
]


@pytest.mark.parametrize(("mutation", "level", "path", "message"), [pytest.param(*r[1:], id=r[0]) for r in ROWS])
def test_mistake_is_found(finds, mutation, level, path, message):
    finds(mutation, level, path, message)


@pytest.mark.parametrize(("old", "new", "dotted"), [
    pytest.param("  batch_per_gpu: 256 ", "  batch_per_gpu: 0 ", "recipes.batch_per_gpu", id="batch-zero"),
    pytest.param("  batch_per_gpu: 256 ", "  nccl_ib_hca: [mlx5_0]\n  batch_per_gpu: 256 ", "recipes.nccl_ib_hca[0]",
                 id="hca-without-port"),
    pytest.param("  prefix: /opt/hal/recipes ", "  prefix: opt/hal/recipes ", "recipes.prefix", id="relative-prefix"),
])
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
    assert '--ntasks=$(( SLURM_JOB_NUM_NODES * gpus_per_node ))' in script
    for name in ("resnet50.swbatch", "scaling.sh"):
        subprocess.run(["bash", "-n"], input=files[f"{DIR}/{name}"], text=True, check=True)
    assert "--data ~/datasets/NAME --stage " in script


def test_hal_stage_runs_the_program_beside_it(files, tmp_path):
    """The rendered command runs hal_stage.py from the recipe directory with the node's python3;
    here, with the recipe directory made in a temporary directory, it stages a tree."""
    script = files[f"{DIR}/hal-stage.sh"]
    assert script.startswith("#!/bin/sh\n") and script.endswith(
        'exec python3 /opt/hal/recipes/resnet50/hal_stage.py "$@"\n')
    subprocess.run(["sh", "-n"], input=script, text=True, check=True)
    from hal_provision.node.recipes import hal_stage

    command = tmp_path / "hal-stage.sh"
    command.write_text(script.replace("/opt/hal/recipes/resnet50/hal_stage.py", hal_stage.__file__))
    (tmp_path / "ds" / "c").mkdir(parents=True)
    (tmp_path / "ds" / "c" / "a.JPEG").write_bytes(b"x" * 10)
    done = subprocess.run(["sh", str(command), "--print-path", str(tmp_path / "ds")], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path / "job-tmp")}, check=True)
    assert done.stdout == f"{tmp_path}/job-tmp/hal-stage/ds\n"


def test_nccl_settings_follow_the_fabric(files, hal_text):
    assert "export NCCL_IB_HCA=mlx5_0:1\nexport NCCL_IB_DISABLE=0\n" in files[f"{DIR}/recipe.env"]
    assert "module load wmlce/1.7.0-py3.7\n" in files[f"{DIR}/recipe.env"]
    text = hal_text[: hal_text.index("\nfabric:\n")] + hal_text[hal_text.index("\nhardware:\n"):]
    model = load_text(text.replace(", infiniband", ""), "hal.yml").model
    env = recipes.recipe_env(model)
    assert "export NCCL_IB_DISABLE=1\n" in env and "NCCL_IB_HCA" not in env
    subprocess.run(["bash", "-n"], input=env, text=True, check=True)


def test_benchmark_runs_the_model_partitions(files):
    assert "--partitions gpux1,gpux2,gpux4,gpux8,gpux16 " in files[f"{DIR}/scaling.sh"]
    facts = json.loads(files[recipes.FACTS])
    assert facts["recipes"]["resnet50"] == {
        "commands": [{"name": "hal-stage", "script": "hal-stage.sh"}],
        "dir": "/opt/hal/recipes/resnet50",
        "programs": list(recipes.PROGRAMS),
        "rendered": ["hal-stage.sh", "recipe.env", "resnet50.swbatch", "scaling.sh"],
        "scaling_partitions": ["gpux1", "gpux2", "gpux4", "gpux8", "gpux16"],
        "virtual_partition": "gpux4",
    }


def test_no_recipes_section_renders_nothing(hal):
    assert recipes.render(hal.model_copy(update={"recipes": None})) == {}
