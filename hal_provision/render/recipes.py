"""Training recipes: the job scripts and settings of the ResNet-50 recipe for this cluster.

Under recipes.prefix (default <cluster.prefix>/recipes, /opt/hal/recipes on HAL) on every login, development and compute node:

* ``resnet50/resnet50.swbatch``: the job script. `swbatch [-p gpuxN] resnet50.swbatch [OPTIONS]`
  starts one srun task per GPU of the job on every node (the virtual partition decides nodes
  and GPUs); each task derives its rank, local rank, world size and rendezvous address from
  Slurm's environment (hal_provision.node.recipes.slurmenv) and runs train_resnet50.py. With
  ``--wiring-probe`` first, the same launch runs wiring_probe.py instead: no PyTorch, the same
  rendezvous settings, a check that every rank joined one world with its own GPU. A job
  without GPUs (`swbatch -p cpunN`: whole nodes) starts one task per socket instead, with the
  threads and pinning of the partition's hardware profile (model.recipes.cpu_layouts), one
  `case` entry per real partition of the cpu virtual partitions; a cluster without those
  renders no CPU branch.
* ``resnet50/recipe.env``: NCCL's settings for the model's fabric and the framework module.
* ``resnet50/scaling.sh``: the scaling benchmark over the model's GPU virtual partitions, or
  with ``--cpu`` over its cpu ones (those with a power-of-two node count).
* ``resnet50/hal-stage.sh``: runs hal_stage.py (a data set copied to the job's local scratch
  once per node); the role links /usr/local/bin/hal-stage to it, so any job can call it.
* ``files/etc/hal-provision/recipes.json``: the prefix and file list for the recipes role.

The programs themselves (hal_provision/node/recipes/*.py) are copied beside these by the role.
"""

from __future__ import annotations

import json
import shlex

from ..model import Cluster, Role
from ..model.recipes import (
    CpuLayout,
    cpu_layouts,
    cpu_scaling_partitions,
    gpu_partitions,
    nccl_ib_hca,
    scaling_partitions,
)
from ..node.recipes.slurmenv import DEVICE_VAR
from .common import header, json_comment

RECIPE = "resnet50"
FACTS = "files/etc/hal-provision/recipes.json"
PROGRAMS = ("slurmenv.py", "train_resnet50.py", "wiring_probe.py", "scaling.py", "hal_stage.py")
# Commands on every node's PATH: name -> the rendered script in the recipe directory it runs.
COMMANDS = {"hal-stage": "hal-stage.sh"}


def _origin(cluster: Cluster) -> str:
    """Where the recipe comes from: HAL's paper. Only HAL's own tree names HAL; another site's
    tree cites the paper alone, so no other cluster's files carry HAL's name."""
    return "HAL, PEARC '20" if cluster.cluster.name == "hal" else "PEARC '20"


def recipe_dir(cluster: Cluster) -> str:
    return f"{cluster.recipes.prefix.rstrip('/')}/{RECIPE}"


def render(cluster: Cluster) -> dict[str, str]:
    if cluster.recipes is None:
        return {}
    d = recipe_dir(cluster)
    files = {
        f"files{d}/resnet50.swbatch": job_script(cluster),
        f"files{d}/recipe.env": recipe_env(cluster),
        f"files{d}/scaling.sh": scaling_script(cluster),
        f"files{d}/{COMMANDS['hal-stage']}": stage_command(cluster),
    }
    facts = {
        "_comment": json_comment(cluster),
        "prefix": cluster.recipes.prefix,
        "recipes": {
            RECIPE: {
                "commands": [{"name": name, "script": script} for name, script in sorted(COMMANDS.items())],
                "dir": d,
                "rendered": sorted(path.rsplit("/", 1)[1] for path in files),
                "programs": list(PROGRAMS),
                "virtual_partition": cluster.recipes.virtual_partition,
                "scaling_partitions": scaling_partitions(cluster.recipes, cluster.swsuite),
                "cpu_scaling_partitions": cpu_scaling_partitions(cluster.swsuite) if cpu_layouts(cluster) else [],
            }
        },
    }
    files[FACTS] = json.dumps(facts, indent=2, sort_keys=True) + "\n"
    return files


def job_script(cluster: Cluster) -> str:
    r = cluster.recipes
    d = recipe_dir(cluster)
    layouts = cpu_layouts(cluster)
    hours = f"{r.time_hours:g}"
    return "".join(
        [
            "#!/bin/bash\n",
            header(cluster),
            "# Directives (comments before the first command, as sbatch and swbatch read them):\n",
            f"#SWBATCH -p {r.virtual_partition}\n",
            f"#SWBATCH -t {hours}\n",
            f"#SBATCH --job-name={RECIPE}\n",
            "#\n",
            f"# ResNet-50 with PyTorch DistributedDataParallel on every GPU of the job ({_origin(cluster)}):\n",
            "#   swbatch [-p gpuxN] " + d + "/resnet50.swbatch [train_resnet50.py options]\n",
            "#   swbatch -p gpux8 " + d + "/resnet50.swbatch --wiring-probe     (no PyTorch needed)\n",
            "#   swbatch " + d + "/resnet50.swbatch --data ~/datasets/NAME --stage   (read from local scratch)\n",
            *_cpu_usage(cluster, layouts),
            "# The virtual partition decides nodes and GPUs; this script starts one srun task per GPU on\n",
            "# every node, and each task takes its rank, local rank, world size and the rendezvous\n",
            "# (the job's first node) from Slurm's environment.\n",
            "set -euo pipefail\n",
            f"recipe_dir={shlex.quote(d)}\n",
            'source "$recipe_dir/recipe.env"\n',
            'program="$recipe_dir/train_resnet50.py"\n',
            'if [ "${1:-}" = "--wiring-probe" ]; then shift; program="$recipe_dir/wiring_probe.py"; fi\n',
            *(
                _cpu_branch(layouts)
                if layouts
                else ['gpus_per_node=${SLURM_GPUS_ON_NODE:?"no GPUs in this job: submit with swbatch -p gpuxN"}\n']
            ),
            "cpus_per_task=$(( SLURM_CPUS_ON_NODE / gpus_per_node ))\n",
            'echo "resnet50: job ${SLURM_JOB_ID} on ${SLURM_JOB_NODELIST}: ${SLURM_JOB_NUM_NODES} node(s) x '
            '${gpus_per_node} GPU(s), ${cpus_per_task} CPUs per task, $(basename "$program")" >&2\n',
            "# Every count explicit: the job was asked for one task per hardware thread, and srun would\n",
            "# inherit that task count.\n",
            'exec srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks=$(( SLURM_JOB_NUM_NODES * gpus_per_node )) \\\n',
            '    --ntasks-per-node="$gpus_per_node" --cpus-per-task="$cpus_per_task" --kill-on-bad-exit=1 \\\n',
            '    --export=ALL python3 "$program" "$@"\n',
        ]
    )


def _framework_load(r) -> list[str]:
    """`module load` of the framework: the CPU build where the job has no GPUs and the model
    names one (recipes.cpu_framework_module)."""
    gpu, cpu = r.framework_module, r.cpu_framework_module or r.framework_module
    if gpu == cpu:
        return [f"module load {shlex.quote(gpu)}\n"]

    def load(ref: str | None) -> str:
        return f"    module load {shlex.quote(ref)}\n" if ref else "    :\n"

    return [
        "# A job without GPUs (the cpu virtual partitions) trains on the CPU build.\n",
        'if [ "${SLURM_GPUS_ON_NODE:-0}" = 0 ]; then\n',
        load(cpu),
        "else\n",
        load(gpu),
        "fi\n",
    ]


def _cpu_usage(cluster: Cluster, layouts: list[CpuLayout]) -> list[str]:
    if not layouts:
        return []
    cpun = cpu_scaling_partitions(cluster.swsuite) or [
        vp.name for vp in cluster.swsuite.virtual_partitions if vp.kind == "cpu"
    ]
    return [
        f"#   swbatch -p {cpun[-1]} {recipe_dir(cluster)}/resnet50.swbatch --arch resnet18 --image-size 64"
        "   (CPUs: a task per socket)\n"
    ]


def _cpu_branch(layouts: list[CpuLayout]) -> list[str]:
    """The job without GPUs: tasks, CPUs and threads per task from the partition's hardware
    profile (a case on the real partition the job landed in), then srun."""
    lines = [
        'if [ "${SLURM_GPUS_ON_NODE:-0}" = 0 ]; then\n',
        "    # No GPUs (cpunN: whole nodes): one task per socket, its memory local, with the socket's\n",
        "    # hardware threads and one compute thread per core, as the partition's hardware profile says.\n",
        '    case "${SLURM_JOB_PARTITION:-}" in\n',
    ]
    for lay in layouts:
        several = (
            f"; the smallest of its {lay.profiles} node builds, so the tasks fit every node" if lay.profiles > 1 else ""
        )
        lines.append(
            f"        {shlex.quote(lay.partition)}) tasks_per_node={lay.tasks_per_node} "
            f"cpus_per_task={lay.cpus_per_task} threads={lay.threads} ;;"
            f"   # {lay.profile}: {lay.tasks_per_node} socket(s) x {lay.threads} cores x "
            f"SMT{lay.cpus_per_task // lay.threads}{several}\n"
        )
    lines += [
        '        *) echo "resnet50: no GPUs in this job, and partition ${SLURM_JOB_PARTITION:-?} has no CPU layout:'
        ' submit with swbatch -p gpuxN or cpunN" >&2; exit 2 ;;\n',
        "    esac\n",
        f"    export {DEVICE_VAR}=cpu OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads "
        "OMP_PROC_BIND=close OMP_PLACES=cores\n",
        '    echo "resnet50: job ${SLURM_JOB_ID} on ${SLURM_JOB_NODELIST}: ${SLURM_JOB_NUM_NODES} node(s) x '
        "${tasks_per_node} task(s) on CPUs, ${cpus_per_task} CPUs and ${threads} threads per task, "
        '$(basename "$program")" >&2\n',
        "    # --cpu-bind=sockets: the unit of this layout is the socket; each task is bound to the socket\n",
        "    # its CPUs lie on (Slurm's default distribution keeps a socket-sized task on one socket) and\n",
        "    # OpenMP places its threads on that socket's cores (OMP_PLACES=cores, close). Binding to cores\n",
        "    # would give the same set here, but sockets says what is meant and stays right for a smaller\n",
        "    # --cpus-per-task.\n",
        '    exec srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks=$(( SLURM_JOB_NUM_NODES * tasks_per_node )) \\\n',
        '        --ntasks-per-node="$tasks_per_node" --cpus-per-task="$cpus_per_task" --cpu-bind=sockets \\\n',
        '        --kill-on-bad-exit=1 --export=ALL python3 "$program" "$@"\n',
        "fi\n",
        "gpus_per_node=$SLURM_GPUS_ON_NODE\n",
    ]
    return lines


def recipe_env(cluster: Cluster) -> str:
    r = cluster.recipes
    hca = nccl_ib_hca(
        r, cluster.fabric, [(g.hosts, cluster.profile_of(g)) for g in cluster.groups_with_role(Role.compute)]
    )
    lines = [
        header(cluster),
        f"# Sourced by {RECIPE}.swbatch: NCCL's settings for this cluster's fabric, then the\n",
        "# framework module.\n",
    ]
    if hca:
        lines += [
            f"# NCCL over InfiniBand ({cluster.fabric.name if cluster.fabric else 'site setting'}): "
            "the cabled adapter ports of the compute nodes.\n",
            f"export NCCL_IB_HCA={shlex.quote(','.join(hca))}\n",
            "export NCCL_IB_DISABLE=0\n",
        ]
    else:
        lines += ["# No InfiniBand fabric: NCCL between nodes over TCP sockets.\n", "export NCCL_IB_DISABLE=1\n"]
    lines.append(f"export HAL_RECIPE_BATCH_PER_GPU={r.batch_per_gpu}\n")
    if r.framework_module or r.cpu_framework_module:
        lines += [
            "# This node's own module tree: swbatch exports the submitting shell's environment, whose\n",
            "# MODULEPATH is the login node's tree (one tree per node role), so start Lmod afresh, then\n",
            "# load the framework (Lmod's scripts are not written for `set -u`).\n",
            "set +u\n",
            "if type module >/dev/null 2>&1; then module --force purge >/dev/null 2>&1 || true; fi\n",
            "unset MODULEPATH MODULEPATH_ROOT\n",
            "source /etc/profile.d/lmod.sh\n",
            *_framework_load(r),
            "set -u\n",
        ]
    return "".join(lines)


def scaling_script(cluster: Cluster) -> str:
    r = cluster.recipes
    d = recipe_dir(cluster)
    parts = scaling_partitions(r, cluster.swsuite)
    gpus = gpu_partitions(cluster.swsuite)
    cpu_parts = cpu_scaling_partitions(cluster.swsuite) if cpu_layouts(cluster) else []
    nodes = {vp.name: vp.nodes for vp in cluster.swsuite.virtual_partitions}
    listed = ", ".join(
        f"{p} ({gpus[p]} GPU{'s' if gpus[p] > 1 else ''})"
        if p in gpus
        else f"{p} ({nodes[p]} node{'s' if nodes[p] > 1 else ''})"
        for p in parts
    )
    head = [
        "#!/bin/bash\n",
        header(cluster),
        "# The cluster's own ResNet-50 scaling benchmark (synthetic data): one job per virtual partition,\n",
        "# " + listed + ",\n",
        "# one after another; then a table of images/s and scaling efficiency, and a PNG plot.\n",
    ]
    if not cpu_parts:
        return "".join(
            head
            + [
                "#   scaling.sh [OUTDIR] [STEPS]      (default: ~/resnet50-scaling, 50 steps per run)\n",
                "set -euo pipefail\n",
                f"recipe_dir={shlex.quote(d)}\n",
                'source "$recipe_dir/recipe.env"\n',
                "out=${1:-$HOME/resnet50-scaling}\n",
                'mkdir -p "$out"\n',
                'exec python3 "$recipe_dir/scaling.py" submit --script "$recipe_dir/resnet50.swbatch" \\\n',
                f'    --partitions {",".join(parts)} --out "$out" --steps "${{2:-50}}"\n',
            ]
        )
    cpu_listed = ", ".join(f"{p} ({nodes[p]} node{'s' if nodes[p] > 1 else ''})" for p in cpu_parts)
    return "".join(
        head
        + [
            "# With --cpu, the CPUs of whole nodes instead (one task per socket; the table per node):\n",
            "# " + cpu_listed + ".\n",
            "#   scaling.sh [--cpu] [OUTDIR [STEPS [RECIPE OPTIONS]]]\n",
            "#     (default: ~/resnet50-scaling or ~/resnet50-scaling-cpu, 50 steps per run; e.g.\n",
            "#      scaling.sh --cpu ~/cpu-scaling 30 --arch resnet18 --image-size 64 for a short run)\n",
            "set -euo pipefail\n",
            f"recipe_dir={shlex.quote(d)}\n",
            'source "$recipe_dir/recipe.env"\n',
            f"partitions={','.join(parts)} out=$HOME/resnet50-scaling\n",
            f'if [ "${{1:-}}" = --cpu ]; then shift; partitions={",".join(cpu_parts)} out=$HOME/resnet50-scaling-cpu; fi\n',
            "out=${1:-$out} steps=${2:-50}\n",
            "shift $(( $# < 2 ? $# : 2 ))\n",
            'mkdir -p "$out"\n',
            'exec python3 "$recipe_dir/scaling.py" submit --script "$recipe_dir/resnet50.swbatch" \\\n',
            '    --partitions "$partitions" --out "$out" --steps "$steps" -- "$@"\n',
        ]
    )


def stage_command(cluster: Cluster) -> str:
    """hal-stage on every node's PATH (the role links /usr/local/bin/hal-stage here): the node's
    python3 runs the program beside it."""
    return "".join(
        [
            "#!/bin/sh\n",
            header(cluster),
            "# hal-stage [--dest DIR] [--print-path] SOURCE: copy a data set to this node's local scratch once\n",
            "# per job (default $TMPDIR/hal-stage/NAME, the job's private /tmp); see hal-stage --help.\n",
            f'exec python3 {shlex.quote(recipe_dir(cluster) + "/hal_stage.py")} "$@"\n',
        ]
    )
